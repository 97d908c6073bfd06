// Time <-> pixel mapping of the timeline.
#include "timemapping.h"

#include <QTest>

using namespace syncopate;

class TestTimeMapping : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void mapsBothWays_data();
    void mapsBothWays();
    void zoomKeepsTheAnchor_data();
    void zoomKeepsTheAnchor();
    void panMovesByPixels();
    void degenerateRangesStayUsable();
};

void TestTimeMapping::mapsBothWays_data()
{
    QTest::addColumn<double>("start");
    QTest::addColumn<double>("end");
    QTest::addColumn<double>("left");
    QTest::addColumn<double>("width");
    QTest::addColumn<double>("ns");
    QTest::addColumn<double>("px");
    QTest::newRow("origin") << 0.0 << 1000.0 << 0.0 << 100.0 << 0.0 << 0.0;
    QTest::newRow("end") << 0.0 << 1000.0 << 0.0 << 100.0 << 1000.0 << 100.0;
    QTest::newRow("offset axis") << 500.0 << 1500.0 << 40.0 << 200.0 << 1000.0 << 140.0;
    QTest::newRow("before the range") << 500.0 << 1500.0 << 40.0 << 200.0 << 0.0 << -60.0;
    QTest::newRow("seconds") << 0.0 << 3e9 << 0.0 << 1500.0 << 1e9 << 500.0;
}

void TestTimeMapping::mapsBothWays()
{
    QFETCH(double, start);
    QFETCH(double, end);
    QFETCH(double, left);
    QFETCH(double, width);
    QFETCH(double, ns);
    QFETCH(double, px);
    const TimeMapping m(start, end, left, width);
    QCOMPARE(m.toPixel(ns), px);
    QCOMPARE(m.toTime(px), ns);
}

void TestTimeMapping::zoomKeepsTheAnchor_data()
{
    QTest::addColumn<double>("px");
    QTest::addColumn<double>("factor");
    QTest::newRow("in at left") << 0.0 << 2.0;
    QTest::newRow("in at middle") << 50.0 << 4.0;
    QTest::newRow("out at right") << 100.0 << 0.5;
    QTest::newRow("in a lot") << 33.0 << 1e6;
}

void TestTimeMapping::zoomKeepsTheAnchor()
{
    QFETCH(double, px);
    QFETCH(double, factor);
    const TimeMapping m(0, 1e6, 0, 100);
    const TimeMapping z = m.zoomedAt(px, factor);
    QVERIFY(qAbs(z.toTime(px) - m.toTime(px)) < 1e-6);
    QVERIFY(qAbs((z.endNs() - z.startNs()) - qMax(1.0, 1e6 / factor)) < 1e-6);
}

void TestTimeMapping::panMovesByPixels()
{
    const TimeMapping m(0, 1000, 0, 100);
    const TimeMapping p = m.pannedBy(10); // drag right: earlier times come into view
    QCOMPARE(p.startNs(), -100.0);
    QCOMPARE(p.toPixel(0), 10.0);
}

void TestTimeMapping::degenerateRangesStayUsable()
{
    const TimeMapping m(5, 5, 0, 0);
    QVERIFY(m.isValid());
    QVERIFY(m.endNs() > m.startNs());
    QVERIFY(m.nsPerPixel() > 0);
}

QTEST_APPLESS_MAIN(TestTimeMapping)
#include "tst_timemapping.moc"
