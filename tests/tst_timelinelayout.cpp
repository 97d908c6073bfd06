// The timeline's culling and folding, and span lookup, without a GUI.
#include "rundata.h"
#include "timelinelayout.h"

#include <QTest>

#include <algorithm>

using namespace syncopate;

class TestTimelineLayout : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void wideSpansAreDrawnAsThemselves();
    void spansOutsideTheViewAreCulled();
    void tinySpansFold_data();
    void tinySpansFold();
    void aWideSpanAfterTinyOnesKeepsItsShape();
    void foldedMarkTakesTheDominantPhase();
    void lookup();
    void runsStackUnderHeadings();
    void labelsThin_data();
    void labelsThin();
    void importRowsThinToTheirRank();
};

static TimelineRow row(int worker, bool dataLane)
{
    TimelineRow r;
    r.worker = worker;
    r.dataLane = dataLane;
    return r;
}

static std::vector<Record> uniform(std::size_t n, std::int64_t period, std::int64_t length,
                                   Phase phase = Phase::Forward)
{
    std::vector<Record> v;
    v.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t s = std::int64_t(i) * period;
        v.push_back(Record::span(0, phase, Lane::Compute, std::uint32_t(i), s, s + length));
    }
    return v;
}

void TestTimelineLayout::wideSpansAreDrawnAsThemselves()
{
    const auto spans = uniform(10, 100, 50); // [0,50] [100,150] ...
    std::vector<TimelineMark> marks;
    layoutRow(spans, TimeMapping(0, 1000, 0, 1000), 3, marks); // 1 ns per pixel
    QCOMPARE(marks.size(), std::size_t(10));
    QCOMPARE(marks[3].x0, 300.0);
    QCOMPARE(marks[3].x1, 350.0);
    QCOMPARE(marks[3].count, 1u);
    QCOMPARE(marks[3].first, std::size_t(3));
}

void TestTimelineLayout::spansOutsideTheViewAreCulled()
{
    const auto spans = uniform(100, 100, 50);
    std::vector<TimelineMark> marks;
    layoutRow(spans, TimeMapping(2025, 2575, 0, 550), 3, marks);
    // Visible: [2000,2050] (partly), [2100..], ..., [2500,2550]
    QCOMPARE(marks.size(), std::size_t(6));
    QCOMPARE(marks.front().first, std::size_t(20));
    QCOMPARE(marks.back().first, std::size_t(25));
}

void TestTimelineLayout::tinySpansFold_data()
{
    QTest::addColumn<int>("spans");
    QTest::addColumn<double>("width");
    QTest::newRow("1000 spans, 100 px") << 1000 << 100.0;
    QTest::newRow("100k spans, 1000 px") << 100000 << 1000.0;
    QTest::newRow("1M spans, 1600 px") << 1000000 << 1600.0;
}

void TestTimelineLayout::tinySpansFold()
{
    QFETCH(int, spans);
    QFETCH(double, width);
    const auto v = uniform(std::size_t(spans), 10, 6);
    std::vector<TimelineMark> marks;
    const double minPx = 3;
    layoutRow(v, TimeMapping(0, double(spans) * 10, 0, width), minPx, marks);
    // At most one mark per minPx columns (plus one for the edge), and together they stand for
    // every span.
    QVERIFY(double(marks.size()) <= width / minPx + 2);
    std::size_t total = 0;
    for (std::size_t i = 0; i < marks.size(); ++i) {
        total += marks[i].count;
        QVERIFY(marks[i].x1 >= marks[i].x0 + 1.0);
        if (i > 0)
            QVERIFY(marks[i].x0 >= marks[i - 1].x0 + minPx - 1e-9);
    }
    QCOMPARE(total, std::size_t(spans));
    QVERIFY(marks.front().count > 1);
}

void TestTimelineLayout::aWideSpanAfterTinyOnesKeepsItsShape()
{
    std::vector<Record> v = uniform(50, 2, 1); // 50 tiny spans in [0, 100)
    v.push_back(Record::span(0, Phase::Wait, Lane::Comm, 50, 101, 900));
    std::vector<TimelineMark> marks;
    layoutRow(v, TimeMapping(0, 1000, 0, 100), 3, marks); // 10 ns per px: tiny spans are 0.1 px
    const TimelineMark &last = marks.back();
    QCOMPARE(last.phase, Phase::Wait);
    QCOMPARE(last.count, 1u);
    QVERIFY(std::abs(last.x0 - 10.1) < 1e-9);
    QVERIFY(std::abs(last.x1 - 90.0) < 1e-9);
    std::size_t folded = 0;
    for (std::size_t i = 0; i + 1 < marks.size(); ++i)
        folded += marks[i].count;
    QCOMPARE(folded, std::size_t(50));
}

void TestTimelineLayout::foldedMarkTakesTheDominantPhase()
{
    // Alternating 1 ns forward and 9 ns wait: a folded mark reads as mostly waiting.
    std::vector<Record> v;
    for (int i = 0; i < 1000; ++i) {
        v.push_back(Record::span(0, Phase::Forward, Lane::Compute, i, i * 10, i * 10 + 1));
        v.push_back(Record::span(0, Phase::Wait, Lane::Comm, i, i * 10 + 1, i * 10 + 10));
    }
    std::vector<TimelineMark> marks;
    layoutRow(v, TimeMapping(0, 10000, 0, 100), 3, marks);
    for (const auto &m : marks)
        QCOMPARE(m.phase, Phase::Wait);
}

void TestTimelineLayout::lookup()
{
    const auto v = uniform(10, 100, 50);
    QCOMPARE(spanAt(v, 325, 0), std::ptrdiff_t(3));
    QCOMPARE(spanAt(v, 375, 0), std::ptrdiff_t(-1)); // in a gap
    QCOMPARE(spanAt(v, 375, 30), std::ptrdiff_t(4)); // nearest within the slack
    QCOMPARE(spanAt(v, 5000, 10), std::ptrdiff_t(-1));
    QCOMPARE(countSpansIn(v, 120, 420), std::size_t(4)); // spans 1..4
    QCOMPARE(countSpansIn(v, 60, 90), std::size_t(0));
}

void TestTimelineLayout::runsStackUnderHeadings()
{
    const std::vector<TimelineRow> a{row(0, false), row(1, false)};
    const std::vector<TimelineRow> b{row(0, false), row(0, true), row(1, false), row(1, true), row(2, false), row(2, true)};
    const auto alone = stackRuns({&a});
    QCOMPARE(alone.size(), std::size_t(2));
    QVERIFY(!alone[0].heading());
    QCOMPARE(alone[1].row, 1);
    const auto both = stackRuns({&a, &b});
    QCOMPARE(both.size(), std::size_t(10));
    QVERIFY(both[0].heading() && both[0].run == 0);
    QVERIFY(both[3].heading() && both[3].run == 1);
    QCOMPARE(both[8].run, std::size_t(1));
    QCOMPARE(both[8].row, 4);
    QCOMPARE(both[8].worker, 2);
    QVERIFY(both[9].dataLane);
}

void TestTimelineLayout::labelsThin_data()
{
    QTest::addColumn<int>("runs");
    QTest::addColumn<int>("workers");
    QTest::addColumn<bool>("lanes");
    QTest::addColumn<double>("pxPerSlot");
    QTest::addColumn<int>("labels"); // how many slots keep a label
    const double label = 16;
    QTest::newRow("1 x 8, room") << 1 << 8 << false << 20.0 << 8;
    QTest::newRow("1 x 16, half room: w0 w2 ... w14") << 1 << 16 << false << 10.0 << 8;
    QTest::newRow("3 x 16, room") << 3 << 16 << false << label << 51;
    QTest::newRow("3 x 16, half room: 3 headings, w2 .. w14") << 3 << 16 << false << 8.0 << 3 + 3 * 7;
    QTest::newRow("3 x 16, a third: w4 w8 w12") << 3 << 16 << false << 6.0 << 3 + 3 * 3;
    QTest::newRow("3 x 16 lanes, a third: w2 .. w14") << 3 << 16 << true << 6.0 << 3 + 3 * 7;
    QTest::newRow("3 x 16, tiny: headings only") << 3 << 16 << false << 0.5 << 3;
}

void TestTimelineLayout::labelsThin()
{
    QFETCH(int, runs);
    QFETCH(int, workers);
    QFETCH(bool, lanes);
    QFETCH(double, pxPerSlot);
    QFETCH(int, labels);
    const double labelPx = 16;
    std::vector<TimelineRow> rows;
    for (int w = 0; w < workers; ++w) {
        rows.push_back(row(w, false));
        if (lanes)
            rows.push_back(row(w, true));
    }
    const auto stack = stackRuns(std::vector<const std::vector<TimelineRow> *>(std::size_t(runs), &rows));
    const auto shown = labelledSlots(stack, pxPerSlot, labelPx);
    QCOMPARE(shown.size(), stack.size());
    QCOMPARE(int(std::count(shown.begin(), shown.end(), true)), labels);
    std::ptrdiff_t previous = -1000000;
    for (std::size_t i = 0; i < stack.size(); ++i) {
        if (stack[i].heading())
            QVERIFY2(shown[i], "a heading always keeps its label");
        if (!shown[i])
            continue;
        // Never closer than a label, unless everything fits anyway (or only headings remain).
        if (pxPerSlot * double(std::ptrdiff_t(i) - previous) < labelPx)
            QVERIFY(labels == 3);
        previous = std::ptrdiff_t(i);
    }
}

// An import of 8 ranks, each 4 GPU stream rows and 2 thin CPU thread rows: with room every row
// keeps its label; crowded (2 px a row, labels 16 px: 8 rows apart at least, a rank is 6 rows),
// every second rank's first stream row only.
void TestTimelineLayout::importRowsThinToTheirRank()
{
    std::vector<TimelineRow> rows;
    for (int w = 0; w < 8; ++w) {
        for (int s = 0; s < 4; ++s)
            rows.push_back({w, false, s == 3, QStringLiteral("stream")});
        for (int t = 0; t < 2; ++t)
            rows.push_back({w, true, false, QStringLiteral("thread")});
    }
    const auto stack = stackRuns({&rows});
    const auto all = labelledSlots(stack, 20.0, 16.0);
    QCOMPARE(int(std::count(all.begin(), all.end(), true)), 48);
    const auto crowded = labelledSlots(stack, 2.0, 16.0);
    std::vector<int> labelled;
    for (std::size_t i = 0; i < stack.size(); ++i)
        if (crowded[i])
            labelled.push_back(int(i));
    QCOMPARE(labelled, (std::vector<int>{0, 12, 24, 36})); // ranks 0, 2, 4, 6: each one's first row
}

QTEST_APPLESS_MAIN(TestTimelineLayout)
#include "tst_timelinelayout.moc"
