#include <QtTest>
class Testsoak : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void placeholder() { QVERIFY(true); }
};
QTEST_GUILESS_MAIN(Testsoak)
#include "tst_soak.moc"
