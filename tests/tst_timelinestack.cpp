// Several runs stacked on one timeline: each a group of rows under its name, on one time axis
// (aligned at their starts), hover text and range summaries naming the run, row labels that
// thin out rather than overlap. Runs are built from synthetic records, no engine.
#include "phasestyle.h"
#include "rundata.h"
#include "timelinelayout.h"
#include "timelineplottable.h"
#include "timelineview.h"

#include <QDir>
#include <QFontMetrics>
#include <QScreen>
#include <QTest>

#include <qcustomplot.h>

using namespace syncopate;

class TestTimelineStack : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void rowsMapToRunAndWorker();
    void aLoneRunIsLabelledAsBefore();
    void hoverNamesTheRunAndWorker();
    void keyRangeCoversTheLongestRun();
    void groupHeadingsAreOnTheRowAxis();
    void labelsThinInsteadOfOverlapping_data();
    void labelsThinInsteadOfOverlapping();
    void rangeSummaryIsPerRun();
    void checkingAnotherRunKeepsTheView();
    void legendListsEveryRunsPhases();
    void legendReflowsWhenNarrowed();
    void cachedDrawingEqualsAFullDraw();
    void cachedTitleAndLegendEqualDrawingInPlace();
    void liveFramesRepaintOnlyThePlot_data();
    void liveFramesRepaintOnlyThePlot();
    void rendersAtScreenSizes_data();
    void rendersAtScreenSizes();
};

namespace {

constexpr std::int64_t kMs = 1000000;

// steps training steps of stepMs each, worker `straggler` slowed by a delay span; the phases of
// the run's mode, the data phase on the prefetch lane when the run has one.
RunDataPtr synthRun(const QString &label, nlohmann::json config, int steps, double stepMs, int straggler = 1)
{
    auto run = std::make_shared<RunData>(parseConfig(config), label);
    const RunConfig &c = run->config();
    std::vector<Record> records;
    const auto step = std::int64_t(stepMs * double(kMs));
    for (int s = 0; s < steps; ++s)
        for (int w = 0; w < c.workers; ++w) {
            std::int64_t t = s * step;
            const auto add = [&](Phase p, double share) {
                const std::int64_t end = t + std::int64_t(share * double(step));
                records.push_back(Record::span(w, p, defaultLane(p), std::uint32_t(s), t, end));
                t = end;
            };
            if (c.async())
                add(Phase::Pull, 0.05);
            if (c.prefetch) // the next batch loads on the prefetch lane while this one computes
                records.push_back(Record::span(w, Phase::Data, Lane::Data, std::uint32_t(s + 1), t, t + 3 * step / 10));
            else
                add(Phase::Data, 0.1);
            add(Phase::Forward, 0.2);
            if (c.checkpoint)
                add(Phase::Recompute, 0.1);
            add(Phase::Backward, 0.25);
            if (w == straggler)
                add(Phase::Delay, 0.15);
            if (c.async()) {
                add(Phase::Push, 0.05);
            } else {
                // Everyone waits at the barrier for the straggler (at 0.7 of the step).
                if (w != straggler)
                    add(Phase::Wait, 0.7 - double(t - s * step) / double(step));
                add(Phase::Reduce, 0.05);
                add(Phase::Apply, 0.04);
            }
        }
    run->append(records);
    run->state = RunState::Finished;
    return run;
}

QMap<double, QString> ticks(const TimelineView &view)
{
    return view.yAxis->ticker().staticCast<QCPAxisTickerText>()->ticks();
}

// The slot of run `run`'s row `row` on the view, or -1.
int slotOf(const TimelineView &view, std::size_t run, int row)
{
    const auto &stack = view.plottable_()->stack();
    for (std::size_t i = 0; i < stack.size(); ++i)
        if (stack[i].run == run && stack[i].row == row)
            return int(i);
    return -1;
}

// Shown at that size (a hidden widget keeps its first viewport) and laid out.
bool showAt(TimelineView &view, QSize size)
{
    view.resize(size);
    view.show();
    if (!QTest::qWaitForWindowExposed(&view))
        return false;
    view.replot();
    return view.axisRect()->height() > size.height() / 2;
}

QPoint at(const TimelineView &view, double ms, int slot)
{
    return QPoint(int(view.xAxis->coordToPixel(ms)), int(view.yAxis->coordToPixel(slot)));
}

} // namespace

void TestTimelineStack::rowsMapToRunAndWorker()
{
    // 4 rows, 2 workers with prefetch lanes (4 rows), 16 rows: 3 headings + 24 rows.
    const auto a = synthRun(QStringLiteral("a"), {{"workers", 4}, {"data.prefetch", false}}, 3, 10);
    const auto b = synthRun(QStringLiteral("b"), {{"workers", 2}, {"data.prefetch", true}}, 3, 10);
    const auto c = synthRun(QStringLiteral("c"), {{"workers", 16}, {"data.prefetch", false}}, 3, 10);
    TimelineView view;
    view.setRuns({a, b, c});
    QCOMPARE(view.runs().size(), std::size_t(3));
    QCOMPARE(view.run(), a);
    const auto &stack = view.plottable_()->stack();
    QCOMPARE(stack.size(), std::size_t(27));
    const auto check = [&](std::size_t slot, std::size_t run, int row, int worker, bool lane) {
        QVERIFY2(stack[slot].run == run && stack[slot].row == row && stack[slot].worker == worker &&
                     stack[slot].dataLane == lane,
                 qPrintable(QStringLiteral("slot %1").arg(slot)));
    };
    check(0, 0, -1, 0, false);
    QVERIFY(stack[0].heading());
    check(1, 0, 0, 0, false);
    check(4, 0, 3, 3, false);
    check(5, 1, -1, 0, false);
    check(6, 1, 0, 0, false);
    check(7, 1, 1, 0, true); // worker 0's prefetch lane
    check(9, 1, 3, 1, true);
    check(10, 2, -1, 0, false);
    check(26, 2, 15, 15, false);
    // Positions: a heading is no row, a row is found within its height, a gap between rows is none.
    const TimelinePlottable *p = view.plottable_();
    QCOMPARE(p->rowAt(0.0), -1);
    QCOMPARE(p->slotAt(0.0), 0);
    QCOMPARE(p->rowAt(7.1), 7);
    QCOMPARE(p->rowAt(7.4), -1); // a prefetch lane is thin
    QCOMPARE(p->rowAt(26.0), 26);
    QCOMPARE(p->rowAt(27.2), -1);
    bool found = false;
    const QCPRange values = p->getValueRange(found);
    QVERIFY(found);
    QVERIFY(values.lower < 0 && values.upper > 26 && values.upper < 27);
    // Null runs are left out; none at all is the empty view.
    view.setRuns({nullptr, c});
    QCOMPARE(view.run(), c);
    QCOMPARE(view.plottable_()->stack().size(), std::size_t(16)); // alone again: no heading
    view.setRuns({});
    QVERIFY(!view.run());
    QVERIFY(view.plottable_()->stack().empty());
}

void TestTimelineStack::aLoneRunIsLabelledAsBefore()
{
    const auto a = synthRun(QStringLiteral("alone"), {{"workers", 3}, {"data.prefetch", true}}, 4, 10);
    TimelineView view;
    view.setRun(a);
    QVERIFY(showAt(view, QSize(1280, 720)));
    const auto t = ticks(view);
    QCOMPARE(t.size(), 6);
    QCOMPARE(t.value(0), QStringLiteral("worker 0"));
    QCOMPARE(t.value(1), QStringLiteral("data 0"));
    QCOMPARE(t.value(4), QStringLiteral("worker 2"));
    QVERIFY(!t.values().contains(QStringLiteral("alone")));
    const QString text = view.describeAt(at(view, 12.5, 2)); // step 1 of worker 1, forward
    QVERIFY2(text.startsWith(QStringLiteral("<b>worker 1: ")), qPrintable(text));
    QVERIFY(!text.contains(QStringLiteral("alone")));
}

void TestTimelineStack::hoverNamesTheRunAndWorker()
{
    const auto sync = synthRun(QStringLiteral("straggler-sync"), {{"workers", 4}, {"data.prefetch", false}}, 10, 10);
    const auto async = synthRun(QStringLiteral("straggler-async"),
                                {{"workers", 2}, {"mode", "async"}, {"data.prefetch", false}}, 10, 20);
    TimelineView view;
    view.setRuns({sync, async});
    view.setFollowLive(false);
    view.xAxis->setRange(0, 100);
    QVERIFY(showAt(view, QSize(1280, 720)));
    // Async worker 1, step 2 (40..60 ms): pull 40-41, data 41-43, forward 43-47.
    const int slot = slotOf(view, 1, 1);
    QCOMPARE(slot, 7); // heading, 4 rows, heading, row 0, row 1
    QString text = view.describeAt(at(view, 45, slot));
    QVERIFY2(text.contains(QStringLiteral("straggler-async, worker 1: ")), qPrintable(text));
    QVERIFY2(text.contains(phaseStyle(Phase::Forward).label), qPrintable(text));
    QVERIFY2(text.contains(QStringLiteral("step 2")), qPrintable(text));
    // The same time on the sync run's worker 1: its straggler delay (step 4: 40 + 5.5 .. 7 ms).
    text = view.describeAt(at(view, 46.2, slotOf(view, 0, 1)));
    QVERIFY2(text.contains(QStringLiteral("straggler-sync, worker 1: ")), qPrintable(text));
    QVERIFY2(text.contains(phaseStyle(Phase::Delay).label), qPrintable(text));
    // Over a group's heading: the run's title.
    text = view.describeAt(at(view, 45, 5));
    QVERIFY2(text.contains(async->title().toHtmlEscaped()), qPrintable(text));
    // Past the shorter run's end there is nothing to describe on its rows.
    view.xAxis->setRange(0, 250);
    view.replot();
    QVERIFY(view.describeAt(at(view, 150, slotOf(view, 0, 1))).isEmpty());
    QVERIFY(!view.describeAt(at(view, 150, slotOf(view, 1, 1))).isEmpty());
}

void TestTimelineStack::keyRangeCoversTheLongestRun()
{
    // The live primary ends at 2 s, a finished run under it at 3 s.
    const auto live = synthRun(QStringLiteral("live"), {{"workers", 2}, {"data.prefetch", false}}, 200, 10);
    live->state = RunState::Running;
    const auto longer = synthRun(QStringLiteral("longer"), {{"workers", 4}, {"data.prefetch", false}}, 100, 30);
    TimelineView view;
    view.resize(1280, 720);
    view.setRuns({live, longer});
    bool found = false;
    const QCPRange keys = view.plottable_()->getKeyRange(found);
    QVERIFY(found);
    QCOMPARE(keys.lower, 0.0);
    QVERIFY(std::abs(keys.upper - double(longer->endNs()) / 1e6) < 1e-9);
    QVERIFY(keys.upper > 2900);
    // setRuns fits everything, then refresh follows the primary's end (the live one).
    view.fitAll();
    QCOMPARE(view.xAxis->range().lower, 0.0);
    QVERIFY(std::abs(view.xAxis->range().upper - keys.upper) < 1e-9);
    QVERIFY(view.followLive());
    // The live window (1.5 s) ends at the primary's end, its left edge on a whole pixel.
    auto followsEnd = [&] {
        const double end = double(live->endNs()) / 1e6, pixelMs = 1500.0 / view.axisRect()->width();
        const QCPRange r = view.xAxis->range();
        if (end <= 1500)
            return r.lower == 0 && std::abs(r.upper - 1500) < 1e-9;
        const double pixels = r.lower / pixelMs;
        return r.upper >= end - 1e-9 && r.upper - end <= pixelMs + 1e-9 && std::abs(r.size() - 1500) < 1e-6 &&
               std::abs(pixels - std::round(pixels)) < 1e-6;
    };
    view.refresh();
    QVERIFY(followsEnd());
    // New records arrive to the primary: the window slides with it.
    std::vector<Record> more{Record::span(0, Phase::Forward, Lane::Compute, 200, live->endNs(), live->endNs() + 50 * kMs)};
    live->append(more);
    view.refresh();
    QVERIFY(followsEnd());
}

void TestTimelineStack::groupHeadingsAreOnTheRowAxis()
{
    const auto a = synthRun(QStringLiteral("straggler-sync"), {{"workers", 4}, {"data.prefetch", false}}, 4, 10);
    const auto b = synthRun(QStringLiteral("straggler-async"), {{"workers", 4}, {"mode", "async"}}, 4, 10);
    const auto c = synthRun(QStringLiteral("checkpointed"),
                            {{"workers", 16}, {"mode", "checkpointed"}, {"data.prefetch", false}}, 4, 10);
    TimelineView view;
    view.setRuns({a, b, c});
    QVERIFY(showAt(view, QSize(1920, 1080)));
    const auto t = ticks(view);
    QCOMPARE(t.value(0), QStringLiteral("straggler-sync"));
    QCOMPARE(t.value(5), QStringLiteral("straggler-async")); // after a's heading and 4 rows
    QCOMPARE(t.value(14), QStringLiteral("checkpointed"));   // b has prefetch lanes: 8 rows
    QCOMPARE(t.value(1), QStringLiteral("w0"));
    QCOMPARE(t.value(4), QStringLiteral("w3"));
    QVERIFY(!t.contains(2.5));
}

void TestTimelineStack::labelsThinInsteadOfOverlapping_data()
{
    QTest::addColumn<QSize>("size");
    QTest::addColumn<bool>("mustThin");
    QTest::newRow("1920x1080") << QSize(1920, 1080) << false;
    QTest::newRow("1280x720") << QSize(1280, 720) << false;
    QTest::newRow("800x300") << QSize(800, 300) << true;
}

void TestTimelineStack::labelsThinInsteadOfOverlapping()
{
    QFETCH(QSize, size);
    QFETCH(bool, mustThin);
    // 3 runs x 16 workers: 48 rows and 3 headings.
    std::vector<RunDataPtr> runs;
    for (const char *name : {"sync", "async", "checkpointed"})
        runs.push_back(synthRun(QString::fromLatin1(name), {{"workers", 16}, {"data.prefetch", false}}, 3, 10));
    TimelineView view;
    view.setRuns(runs);
    QVERIFY(showAt(view, size));
    const auto t = ticks(view);
    for (double heading : {0.0, 17.0, 34.0})
        QVERIFY2(t.contains(heading), qPrintable(QString::number(heading)));
    QCOMPARE(t.value(17.0), QStringLiteral("async"));
    // Thinned exactly when all 51 labels would not fit.
    const int labelHeight = QFontMetrics(view.yAxis->tickLabelFont()).height();
    const double pxPerSlot = view.yAxis->coordToPixel(1) - view.yAxis->coordToPixel(0);
    QVERIFY(pxPerSlot > 0);
    QCOMPARE(t.size() < 51, pxPerSlot < labelHeight + 2);
    if (mustThin)
        QVERIFY(t.size() < 51);
    // No two labels closer than a label's height on screen.
    double previous = -1e9;
    for (auto it = t.begin(); it != t.end(); ++it) {
        const double y = view.yAxis->coordToPixel(it.key());
        QVERIFY2(y - previous >= labelHeight, qPrintable(QStringLiteral("%1 at %2").arg(it.value()).arg(y)));
        previous = y;
    }
    // Each group still has worker labels at a regular stride.
    if (size.height() >= 720)
        QVERIFY(t.contains(17.0 + 1 + 8) && t.value(17.0 + 1 + 8) == QStringLiteral("w8"));
}

void TestTimelineStack::rangeSummaryIsPerRun()
{
    const auto a = synthRun(QStringLiteral("sync"), {{"workers", 2}, {"data.prefetch", false}}, 10, 10);
    const auto b = synthRun(QStringLiteral("async"), {{"workers", 3}, {"mode", "async"}, {"data.prefetch", false}}, 10, 10);
    TimelineView view;
    view.setRun(a);
    const QString alone = view.summarizeRange(0, 50);
    QVERIFY(alone.startsWith(QStringLiteral("0.0 to 50.0 ms (50.0 ms):  w0 busy")));
    QVERIFY(!alone.contains(QLatin1Char('\n')));
    QCOMPARE(alone.count(QStringLiteral(" busy ")), 2);
    view.setRuns({a, b});
    const QStringList lines = view.summarizeRange(0, 50).split(QLatin1Char('\n'));
    QCOMPARE(lines.size(), 3);
    QVERIFY2(lines[1].startsWith(QStringLiteral("sync:  w0 busy")), qPrintable(lines[1]));
    QCOMPARE(lines[1].count(QStringLiteral(" busy ")), 2);
    QVERIFY2(lines[2].startsWith(QStringLiteral("async:  w0 busy")), qPrintable(lines[2]));
    QCOMPARE(lines[2].count(QStringLiteral(" busy ")), 3);
    QVERIFY(!lines[2].endsWith(QLatin1Char(';')));
    // The sync straggler waits none; the others wait for it.
    QVERIFY2(lines[1].contains(QStringLiteral("w0 busy 64% wait 15% recompute 0% delay 0%")), qPrintable(lines[1]));
    QVERIFY2(lines[1].contains(QStringLiteral("w1 busy 64% wait 0% recompute 0% delay 15%")), qPrintable(lines[1]));
}

void TestTimelineStack::checkingAnotherRunKeepsTheView()
{
    const auto a = synthRun(QStringLiteral("a"), {{"workers", 2}, {"data.prefetch", false}}, 20, 10);
    const auto b = synthRun(QStringLiteral("b"), {{"workers", 2}, {"data.prefetch", false}}, 40, 10);
    TimelineView view;
    view.setRun(a);
    view.setFollowLive(false);
    view.xAxis->setRange(30, 60);
    view.setRuns({a, b});
    QCOMPARE(view.xAxis->range().lower, 30.0);
    QCOMPARE(view.xAxis->range().upper, 60.0);
    QVERIFY(!view.followLive());
    // Another primary is another view: fitted, following.
    view.setRuns({b, a});
    QCOMPARE(view.xAxis->range().lower, 0.0);
    QVERIFY(std::abs(view.xAxis->range().upper - double(b->endNs()) / 1e6) < 1e-9);
    QVERIFY(view.followLive());
}

void TestTimelineStack::legendListsEveryRunsPhases()
{
    const auto sync = synthRun(QStringLiteral("sync"), {{"workers", 2}}, 2, 10);
    const auto async = synthRun(QStringLiteral("async"), {{"workers", 2}, {"mode", "async"}}, 2, 10);
    const auto legendTexts = [](const TimelineView &view) {
        int n = 0;
        for (int i = 0; i < view.legend->itemCount(); ++i)
            n += view.legend->item(i) != nullptr; // a wrapped grid's empty cell is null
        return n;
    };
    TimelineView view;
    view.setRun(sync);
    const int alone = legendTexts(view);
    view.setRuns({sync, async});
    QCOMPARE(legendTexts(view), alone + 2); // pull and push
    view.setRun(async);
    QCOMPARE(legendTexts(view), alone);
}

void TestTimelineStack::legendReflowsWhenNarrowed()
{
    // Twelve entries (a sync run with backup workers) fit one row at 1900 px and not at 900:
    // narrowing the view must wrap the entries already there, not squeeze their labels.
    const auto run = synthRun(QStringLiteral("backup"), {{"workers", 4}, {"sync", {{"backup_workers", 1}}}}, 2, 10);
    TimelineView view;
    view.resize(1900, 500);
    view.setRun(run);
    view.replot();
    const int wide = view.legend->columnCount();
    view.resize(900, 500);
    QResizeEvent resize(QSize(900, 500), QSize(1900, 500));
    QCoreApplication::sendEvent(&view, &resize);
    view.replot();
    QVERIFY2(view.legend->columnCount() < wide, qPrintable(QStringLiteral("%1 columns").arg(view.legend->columnCount())));
    for (int i = 0; i < view.legend->elementCount(); ++i)
        if (QCPLayoutElement *item = view.legend->elementAt(i))
            QVERIFY2(item->outerRect().width() >= item->minimumOuterSizeHint().width(),
                     qPrintable(QStringLiteral("entry %1: %2 px for %3").arg(i).arg(item->outerRect().width()).arg(item->minimumOuterSizeHint().width())));
}

// Following a live run, the view slides by whole pixels and the plottable scrolls its image,
// drawing only the new time and what arrived since (spans are recorded when they end, so a
// long wait lands late, starting far back). What it shows must be what a full draw shows.
void TestTimelineStack::cachedDrawingEqualsAFullDraw()
{
    const auto done = synthRun(QStringLiteral("source"), {{"workers", 4}, {"data.prefetch", true}}, 40, 150);
    std::vector<Record> all;
    done->trace().forEachRecord([&](const Record &r) { all.push_back(r); });
    // A late arrival: worker 2 paused for 600 ms in place of its steps there, recorded only
    // when the pause ends.
    std::erase_if(all, [](const Record &r) {
        return r.isSpan() && r.worker == 2 && r.lane() != Lane::Data && r.end > 2000 * kMs && r.start < 2600 * kMs;
    });
    all.push_back(Record::span(2, Phase::Pause, Lane::Compute, 13, 2000 * kMs, 2600 * kMs));
    std::stable_sort(all.begin(), all.end(), [](const Record &a, const Record &b) { return a.end < b.end; });

    auto live = std::make_shared<RunData>(done->config(), QStringLiteral("live"));
    live->state = RunState::Running;
    TimelineView view, reference;
    for (TimelineView *v : {&view, &reference}) {
        v->resize(1280, 720);
        v->setRuns({live});
    }
    reference.plottable_()->setCaching(false);
    QVERIFY(view.plottable_()->caching());
    auto plotArea = [](TimelineView &v) {
        v.replot(QCustomPlot::rpImmediateRefresh);
        return v.grab(v.axisRect()->rect()).toImage().convertToFormat(QImage::Format_RGB32);
    };
    std::size_t next = 0;
    int scrolled = 0, frames = 0;
    double worst = 0;
    for (std::int64_t t = 40 * kMs; next < all.size(); t += 40 * kMs) { // 25 frames a second of run time
        std::vector<Record> batch;
        while (next < all.size() && all[next].end <= t)
            batch.push_back(all[next++]);
        live->append(batch);
        view.refresh();
        const QImage a = plotArea(view);
        scrolled += view.plottable_()->lastDrawWasFull() ? 0 : 1;
        reference.setFollowLive(false);
        reference.refresh(); // (the placeholder goes once there are spans)
        reference.xAxis->setRange(view.xAxis->range());
        const QImage b = plotArea(reference);
        QCOMPARE(a.size(), b.size());
        int differ = 0;
        for (int y = 0; y < a.height(); ++y) {
            const auto *la = reinterpret_cast<const QRgb *>(a.constScanLine(y));
            const auto *lb = reinterpret_cast<const QRgb *>(b.constScanLine(y));
            for (int x = 0; x < a.width(); ++x)
                differ += la[x] != lb[x];
        }
        worst = std::max(worst, double(differ) / double(a.width() * a.height()));
        ++frames;
    }
    qInfo("%d frames, %d scrolled; at worst %.4f%% of the pixels differ", frames, scrolled, 100 * worst);
    QVERIFY2(frames > 100, qPrintable(QString::number(frames)));
    QVERIFY2(scrolled > frames / 2, qPrintable(QStringLiteral("%1 of %2 frames scrolled").arg(scrolled).arg(frames)));
    // Edges of a mark can fall on the other side of a pixel centre after a shift (a rounding in
    // the last bit); anything missing or stale would be whole marks.
    QVERIFY2(worst < 0.005, qPrintable(QStringLiteral("%1% of the pixels differ").arg(100 * worst)));
}

// On screen the view paints through one opaque buffer, and its title and legend entries are
// pixmaps drawn once; an export draws all of them in place. They must look the same, before and
// after the title, the legend's phases and the text size change.
void TestTimelineStack::cachedTitleAndLegendEqualDrawingInPlace()
{
    const auto sync = synthRun(QStringLiteral("sync"), {{"workers", 4}}, 30, 10);
    const auto async = synthRun(QStringLiteral("async"), {{"workers", 4}, {"mode", "async"}, {"data.prefetch", true}}, 30, 10);
    TimelineView view;
    QVERIFY(showAt(view, QSize(1280, 720)));
    const auto compare = [&view](const char *what) {
        view.replot(QCustomPlot::rpImmediateRefresh);
        const QImage shown = view.grab().toImage().convertToFormat(QImage::Format_RGB32);
        const QImage exported = view.toPixmap(view.width(), view.height()).toImage().convertToFormat(QImage::Format_RGB32);
        if (shown.size() != exported.size())
            return QStringLiteral("%1: %2x%3 shown, %4x%5 exported").arg(QLatin1String(what)).arg(shown.width()).arg(shown.height()).arg(exported.width()).arg(exported.height());
        // The title's and the legend's rows, across the whole width.
        std::vector<QRect> areas;
        for (int i = 0; i < view.plotLayout()->elementCount(); ++i)
            if (QCPLayoutElement *e = view.plotLayout()->elementAt(i); e && e != view.axisRect())
                areas.push_back(e->outerRect().adjusted(0, -1, 0, 0) & shown.rect());
        if (areas.size() < 2)
            return QStringLiteral("%1: no title or legend").arg(QLatin1String(what));
        int differ = 0;
        for (const QRect &r : areas)
            for (int y = r.top(); y <= r.bottom(); ++y)
                for (int x = r.left(); x <= r.right(); ++x) {
                    const QRgb a = shown.pixel(x, y), b = exported.pixel(x, y);
                    // The legend's translucent white lands on an opaque or a transparent
                    // buffer: a unit of rounding apart.
                    differ += std::abs(qRed(a) - qRed(b)) > 2 || std::abs(qGreen(a) - qGreen(b)) > 2 || std::abs(qBlue(a) - qBlue(b)) > 2;
                }
        return differ ? QStringLiteral("%1: %2 pixels differ").arg(QLatin1String(what)).arg(differ) : QString();
    };
    view.setRun(sync);
    view.setTitle(QStringLiteral("sync: 4 workers"));
    QString problem = compare("sync");
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
    view.setRuns({async, sync}); // other phases, hatches among them, in other places
    view.setTitle(QStringLiteral("async and sync"));
    problem = compare("async and sync");
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
    QFont f = view.font();
    f.setPointSizeF(f.pointSizeF() * 1.6);
    view.setFont(f);
    view.setPresentationScale(1.6);
    problem = compare("presentation");
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
}

void TestTimelineStack::rendersAtScreenSizes_data()
{
    QTest::addColumn<QSize>("size");
    QTest::addColumn<double>("scale");
    QTest::addColumn<int>("workers"); // of the first two runs; the third has 16
    QTest::addColumn<bool>("lanes");
    QTest::newRow("1280x720") << QSize(1280, 720) << 1.0 << 4 << false;
    QTest::newRow("1920x1080") << QSize(1920, 1080) << 1.0 << 4 << false;
    QTest::newRow("1920x1080 presentation") << QSize(1920, 1080) << 1.6 << 4 << false;
    QTest::newRow("1280x720 3x16 lanes") << QSize(1280, 720) << 1.0 << 16 << true;
    QTest::newRow("1920x1080 3x16 lanes presentation") << QSize(1920, 1080) << 1.6 << 16 << true;
}

void TestTimelineStack::rendersAtScreenSizes()
{
    QFETCH(QSize, size);
    QFETCH(double, scale);
    QFETCH(int, workers);
    QFETCH(bool, lanes);
    const auto sync = synthRun(QStringLiteral("straggler-sync"), {{"workers", workers}, {"data.prefetch", lanes}}, 60, 10);
    const auto async = synthRun(QStringLiteral("straggler-async"),
                                {{"workers", workers}, {"mode", "async"}, {"data.prefetch", true}}, 80, 7);
    const auto ckpt = synthRun(QStringLiteral("straggler-checkpointed"),
                               {{"workers", 16}, {"mode", "checkpointed"}, {"data.prefetch", lanes}}, 50, 12, 5);
    TimelineView view;
    view.resize(size);
    if (scale != 1.0) {
        QFont f = view.font();
        f.setPointSizeF(f.pointSizeF() * scale);
        view.setFont(f);
        view.setPresentationScale(scale);
    }
    view.setRuns({sync, async, ckpt});
    view.setTitle(QStringLiteral("straggler: sync, async, checkpointed"));
    view.setFollowLive(false);
    view.xAxis->setRange(100, 220);
    const QPixmap image = view.toPixmap(size.width(), size.height());
    QCOMPARE(image.size(), size);
    QVERIFY(view.plottable_()->lastMarkCount() > 0);
    // Every heading is labelled, no two labels overlap, and the axis leaves room for the
    // longest name.
    const auto t = ticks(view);
    for (const auto &run : view.runs())
        QVERIFY(t.values().contains(run->label()));
    const QFontMetrics metrics(view.yAxis->tickLabelFont());
    double previous = -1e9;
    for (auto it = t.begin(); it != t.end(); ++it) {
        const double y = view.yAxis->coordToPixel(it.key());
        QVERIFY2(y - previous >= metrics.height(), qPrintable(it.value()));
        previous = y;
    }
    QVERIFY(view.axisRect()->left() > metrics.horizontalAdvance(ckpt->label()));
    const QString dir = qEnvironmentVariable("SYNCOPATE_TIMELINE_SHOTS");
    if (!dir.isEmpty()) {
        const QString name = QString::fromLatin1(QTest::currentDataTag()).replace(QLatin1Char(' '), QLatin1Char('-'));
        QVERIFY(image.save(QDir(dir).filePath(QStringLiteral("stack-%1.png").arg(name))));
    }
}

// A live frame repaints only the plot and its time axis (title, row labels and legend stay in
// the window as painted), straight onto the widget, and of those mostly what slid into view.
// What the window then holds must be what a full drawing of the view gives, frame after frame,
// across a new row label too.
void TestTimelineStack::liveFramesRepaintOnlyThePlot_data()
{
    QTest::addColumn<double>("scale");
    QTest::newRow("desktop") << 1.0;
    QTest::newRow("presentation") << 1.6; // larger labels reach further past their ticks
}

void TestTimelineStack::liveFramesRepaintOnlyThePlot()
{
    QFETCH(double, scale);
    const auto done = synthRun(QStringLiteral("source"), {{"workers", 4}, {"data.prefetch", true}}, 40, 60);
    std::vector<Record> all;
    done->trace().forEachRecord([&](const Record &r) { all.push_back(r); });
    std::stable_sort(all.begin(), all.end(), [](const Record &a, const Record &b) { return a.end < b.end; });
    auto live = std::make_shared<RunData>(done->config(), QStringLiteral("live"));
    live->state = RunState::Running;
    TimelineView view;
    view.setRuns({live});
    QVERIFY(showAt(view, QSize(1280, 720)));
    if (scale != 1.0) {
        QFont f = view.font();
        f.setPointSizeF(f.pointSizeF() * scale);
        view.setFont(f);
        view.setPresentationScale(scale);
    }
    struct PaintRegions : QObject {
        QRegion last;
        int partial = 0, full = 0;
        bool eventFilter(QObject *, QEvent *e) override
        {
            if (e->type() == QEvent::Paint) {
                last = static_cast<QPaintEvent *>(e)->region();
                (last.boundingRect().height() < 700 ? partial : full) += 1;
            }
            return false;
        }
    } regions;
    view.installEventFilter(&regions);
    std::size_t next = 0;
    int frames = 0;
    QRegion liveFrame;
    int strips = 0, axisEnds = 0;
    for (std::int64_t t = 40 * kMs; next < all.size(); t += 40 * kMs) {
        std::vector<Record> batch;
        while (next < all.size() && all[next].end <= t)
            batch.push_back(all[next++]);
        const int painted = regions.partial + regions.full;
        if (frames % 7 == 3 && batch.size() > 1) {
            // Two frames before one paint: the second must not scroll again.
            const auto half = batch.begin() + std::ptrdiff_t(batch.size() / 2);
            live->append(std::vector<Record>(batch.begin(), half));
            view.refresh();
            batch.erase(batch.begin(), half);
        }
        live->append(batch);
        view.refresh();
        QVERIFY(QTest::qWaitFor([&] { return regions.partial + regions.full > painted; }));
        liveFrame = regions.last;
        // The plot scrolled, and only the strip drawn anew was painted (above the time axis'
        // line on the plot's bottom row, which is repainted with its tick labels).
        const QRect above = view.axisRect()->rect().adjusted(0, 0, 0, -1);
        if (liveFrame.boundingRect().height() < 700 && (liveFrame & above).boundingRect().width() < above.width() / 2)
            ++strips;
        // And the time axis' ticks and labels slid with it: only its ends were painted.
        const QRect axis(0, view.axisRect()->rect().bottom() + 1, view.width(), view.axisRect()->outerRect().bottom() - view.axisRect()->rect().bottom());
        long axisPainted = 0;
        for (const QRect &r : liveFrame & axis)
            axisPainted += long(r.width()) * r.height();
        if (axisPainted < long(axis.width()) * axis.height() / 2)
            ++axisEnds;
        if (++frames % 10)
            continue;
        // The window's pixels (the offscreen backing store) against a full drawing now.
        const QImage shown = view.screen()->grabWindow(view.winId()).toImage().convertToFormat(QImage::Format_RGB32);
        const QImage whole = view.grab().toImage().convertToFormat(QImage::Format_RGB32);
        QCOMPARE(shown.size(), whole.size());
        QVERIFY2(shown == whole, qPrintable(QStringLiteral("frame %1 differs from a full drawing").arg(frames)));
    }
    QVERIFY2(regions.partial > frames / 2, qPrintable(QStringLiteral("%1 partial of %2 paints").arg(regions.partial).arg(regions.partial + regions.full)));
    QVERIFY2(strips > frames / 2, qPrintable(QStringLiteral("%1 of %2 frames painted a strip of the plot").arg(strips).arg(frames)));
    QVERIFY2(axisEnds > frames / 2, qPrintable(QStringLiteral("%1 of %2 frames painted the time axis' ends only").arg(axisEnds).arg(frames)));
    const QRect plot = view.axisRect()->rect();
    QVERIFY2(!liveFrame.isEmpty() && !liveFrame.intersects(QRect(0, 0, view.width(), plot.top() - 2)),
             "a live frame repainted the title");
}

QTEST_MAIN(TestTimelineStack)
#include "tst_timelinestack.moc"
