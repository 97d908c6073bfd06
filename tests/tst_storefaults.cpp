#include <QtTest>
class Teststorefaults : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void placeholder() { QVERIFY(true); }
};
QTEST_GUILESS_MAIN(Teststorefaults)
#include "tst_storefaults.moc"
