// The charts' own arithmetic, against hand-worked figures: the band of async workers' losses,
// and what the loss chart draws for a run whose losses are known.
#include "chartfeed.h"
#include "charts.h"

#include <QComboBox>
#include <QScopeGuard>
#include <QtTest>
#include <qcustomplot.h>

using namespace syncopate;

class TestCharts : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void spreadBandByHand();
    void spreadBandEdges();
    void asyncLossChartDrawsTheBand();
    void batchNormChartOnlyWithBatchNorm();
    void incrementalEqualsRefill_data();
    void incrementalEqualsRefill();
    void liveCurvesCoverTheSameColumns_data();
    void liveCurvesCoverTheSameColumns();
    void coveredColumnsLeftOutAlike();
    void hiddenChartsCatchUpWhenShown();
    void curveSummariesChangeNothing_data();
    void curveSummariesChangeNothing();
    void feedingSaysWhatChanged();
};

void TestCharts::spreadBandByHand()
{
    // Keys 0..9 in 2 bins of width 4.5: [0, 4.5) holds keys 0-4, [4.5, 9] keys 5-9.
    std::vector<std::pair<double, double>> points;
    for (int k = 9; k >= 0; --k) // out of order: the band sorts
        points.emplace_back(double(k), double(k * k % 7));
    QVector<double> x, lo, hi;
    spreadBand(points, 2, x, lo, hi);
    // k*k % 7 for k = 0..4: 0 1 4 2 2; for 5..9: 4 1 0 1 4.
    QCOMPARE(x, (QVector<double>{2.0, 7.0}));
    QCOMPARE(lo, (QVector<double>{0.0, 0.0}));
    QCOMPARE(hi, (QVector<double>{4.0, 4.0}));
}

void TestCharts::spreadBandEdges()
{
    QVector<double> x, lo, hi;
    spreadBand({}, 10, x, lo, hi);
    QVERIFY(x.isEmpty() && lo.isEmpty() && hi.isEmpty());
    // One key only: one bin with every value; empty bins leave no point.
    spreadBand({{5.0, 3.0}, {5.0, -1.0}, {5.0, 2.0}}, 10, x, lo, hi);
    QCOMPARE(x, QVector<double>{5.0});
    QCOMPARE(lo, QVector<double>{-1.0});
    QCOMPARE(hi, QVector<double>{3.0});
    spreadBand({{0.0, 1.0}, {100.0, 2.0}}, 50, x, lo, hi);
    QCOMPARE(x, (QVector<double>{0.0, 100.0}));
    QCOMPARE(lo, (QVector<double>{1.0, 2.0}));
}

void TestCharts::asyncLossChartDrawsTheBand()
{
    // Two async workers whose losses are known, each at the server version its update became.
    RunConfig c;
    c.mode = "async";
    c.workers = 2;
    c.steps = 4;
    auto run = std::make_shared<RunData>(c, QStringLiteral("hand-made"));
    std::vector<Record> records;
    const double losses[2][2] = {{4.0, 1.0}, {2.0, 3.0}};
    std::int64_t t = 1000;
    for (int step = 0; step < 2; ++step)
        for (int w = 0; w < 2; ++w) {
            const double version = double(2 * step + w + 1);
            records.push_back(Record::counterSample(w, CounterId::Loss, std::uint32_t(step), t++, losses[w][step]));
            records.push_back(Record::counterSample(w, CounterId::Version, std::uint32_t(step), t++, version));
        }
    run->append(records);
    ChartsWidget charts;
    charts.setRuns(run, {});
    charts.refresh();
    QCustomPlot *loss = charts.findChild<QCustomPlot *>(QStringLiteral("loss"));
    QVERIFY(loss);
    QCPGraph *band = nullptr;
    for (int i = 0; i < loss->graphCount(); ++i)
        if (loss->graph(i)->name().contains(QStringLiteral("lowest to highest")))
            band = loss->graph(i);
    QVERIFY(band);
    QVERIFY(band->channelFillGraph());
    // Versions 1..4 carry losses 4, 2, 1, 3: the band's extremes are 1 and 4.
    double lo = 1e9, hi = -1e9;
    for (auto it = band->channelFillGraph()->data()->constBegin(); it != band->channelFillGraph()->data()->constEnd(); ++it)
        lo = std::min(lo, it->value);
    for (auto it = band->data()->constBegin(); it != band->data()->constEnd(); ++it)
        hi = std::max(hi, it->value);
    QCOMPARE(lo, 1.0);
    QCOMPARE(hi, 4.0);
    // A sync run has no band: its workers share one copy of the parameters.
    c.mode = "sync";
    auto sync = std::make_shared<RunData>(c, QStringLiteral("sync"));
    sync->append(records);
    charts.setRuns(sync, {});
    charts.refresh();
    for (int i = 0; i < loss->graphCount(); ++i)
        QVERIFY(!loss->graph(i)->name().contains(QStringLiteral("lowest to highest")));
}

// The batch norm chart is among the charts only while a run shown has batch norm, and then
// draws each worker's divergence as recorded; asked for early, it comes forward with that run.
void TestCharts::batchNormChartOnlyWithBatchNorm()
{
    RunConfig c;
    c.workers = 2;
    auto plain = std::make_shared<RunData>(c, QStringLiteral("plain"));
    ChartsWidget charts;
    charts.setRuns(plain, {});
    auto names = [&] {
        QStringList n;
        for (const auto &[name, plot] : charts.plots())
            n << name;
        return n;
    };
    QVERIFY(!names().contains(QStringLiteral("batchnorm")));
    QVERIFY(!charts.isTabVisible(5));
    QVERIFY(charts.showChart(QStringLiteral("batchnorm"))); // known, comes when it applies
    QVERIFY(!charts.showChart(QStringLiteral("nonsense")));

    c.batchnorm = "local";
    auto bn = std::make_shared<RunData>(c, QStringLiteral("bn"));
    std::vector<Record> records;
    for (int step = 0; step < 3; ++step)
        for (int w = 0; w < 2; ++w)
            records.push_back(Record::counterSample(w, CounterId::BnDivergence, std::uint32_t(step),
                                                    1000 + 10 * step + w, 0.1 * (w + 1) * (step + 1)));
    bn->append(records);
    charts.setRuns(bn, {});
    QVERIFY(names().contains(QStringLiteral("batchnorm")));
    QVERIFY(charts.isTabVisible(5));
    QCOMPARE(charts.currentIndex(), 5);
    QCustomPlot *p = charts.batchNormPlot();
    QCOMPARE(p->graphCount(), 2);
    QCOMPARE(p->graph(1)->data()->size(), 3);
    QCOMPARE((p->graph(1)->data()->constEnd() - 1)->value, 0.2 * 3);
    QVERIFY(p->graph(0)->name().contains(QStringLiteral("local batch norm")));
}

namespace {

// Every graph of every chart holds the same points in both (exactly: the live charts give only
// new points, and must end where a refill of the same run would).
void compareCharts(const ChartsWidget &live, const ChartsWidget &refilled, const char *when)
{
    const auto a = live.plots(), b = refilled.plots();
    QCOMPARE(a.size(), b.size());
    for (std::size_t p = 0; p < a.size(); ++p) {
        QCOMPARE(a[p].second->graphCount(), b[p].second->graphCount());
        for (int g = 0; g < a[p].second->graphCount(); ++g) {
            const auto &x = *a[p].second->graph(g)->data(), &y = *b[p].second->graph(g)->data();
            if (x.size() != y.size())
                QFAIL(qPrintable(QStringLiteral("%1: chart %2 graph %3 holds %4 points, a refill %5")
                                     .arg(QLatin1String(when), a[p].first).arg(g).arg(x.size()).arg(y.size())));
            for (int i = 0; i < x.size(); ++i) {
                const QCPGraphData &u = *x.at(i), &v = *y.at(i);
                const bool same = (u.key == v.key || (std::isnan(u.key) && std::isnan(v.key))) &&
                                  (u.value == v.value || (std::isnan(u.value) && std::isnan(v.value)));
                if (!same)
                    QFAIL(qPrintable(QStringLiteral("%1: chart %2 graph %3 point %4 is (%5, %6), a refill's (%7, %8)")
                                         .arg(QLatin1String(when), a[p].first).arg(g).arg(i)
                                         .arg(u.key).arg(u.value).arg(v.key).arg(v.value)));
            }
        }
    }
}

// A few steps of `workers` workers from step `first` on: spans, a wait whose step point a later
// call adds to (its span ends two steps late), and every counter the charts draw.
std::vector<Record> steps(int workers, bool async, std::uint32_t first, std::uint32_t count)
{
    std::vector<Record> r;
    for (std::uint32_t s = first; s < first + count; ++s)
        for (int w = 0; w < workers; ++w) {
            const std::int64_t t = 1'000'000 * std::int64_t(s) + 1000 * w;
            r.push_back(Record::span(w, Phase::Forward, Lane::Compute, s, t, t + 300));
            r.push_back(Record::span(w, Phase::Wait, Lane::Compute, s, t + 300, t + 500 + 37 * ((s + w) % 5)));
            if (s > 1) // a late wait of the step before the previous one
                r.push_back(Record::span(w, Phase::Wait, Lane::Compute, s - 2, t - 900, t - 800));
            r.push_back(Record::counterSample(w, CounterId::Loss, s, t + 600, 2.0 / (1 + s) + 0.01 * ((s * 7 + w) % 11)));
            r.push_back(Record::counterSample(w, CounterId::ActivationBytes, s, t + 610, 4096.0 + (s % 3) * 1024));
            r.push_back(Record::counterSample(w, CounterId::BnDivergence, s, t + 620, 0.001 * ((s + w) % 13)));
            if (async) {
                r.push_back(Record::counterSample(w, CounterId::Version, s, t + 630, double(s * workers + w + 1)));
                r.push_back(Record::counterSample(w, CounterId::Staleness, s, t + 640, double((s + w) % 4)));
            }
        }
    return r;
}

} // namespace

// The live charts give each graph only the points that are new since the last refresh; after
// several refreshes, a long counter's thinning, a chart cleared and a run replaced, every graph
// holds what refilling it from the run gives.
void TestCharts::incrementalEqualsRefill_data()
{
    QTest::addColumn<QString>("mode");
    QTest::addColumn<int>("axis"); // step, run time, samples
    QTest::addColumn<int>("smoothing");
    QTest::addColumn<bool>("thinned");
    QTest::newRow("sync by step") << QStringLiteral("sync") << 0 << 1 << false;
    QTest::newRow("sync by time, smoothed") << QStringLiteral("sync") << 1 << 7 << false;
    QTest::newRow("sync by samples, smoothed") << QStringLiteral("sync") << 2 << 3 << false;
    QTest::newRow("async by version") << QStringLiteral("async") << 0 << 1 << false;
    QTest::newRow("async by time, smoothed") << QStringLiteral("async") << 1 << 4 << false;
    QTest::newRow("sync thinned, smoothed") << QStringLiteral("sync") << 0 << 5 << true;
}

void TestCharts::incrementalEqualsRefill()
{
    QFETCH(QString, mode);
    QFETCH(int, axis);
    QFETCH(int, smoothing);
    QFETCH(bool, thinned);
    RunConfig c;
    c.mode = mode.toStdString();
    c.workers = 3;
    c.batchnorm = "local";
    const bool async = c.async();
    auto run = std::make_shared<RunData>(c, QStringLiteral("live"));
    ChartsWidget live;
    live.setRuns(run, {});
    live.setLossAgainstTime(axis == 1);
    if (axis == 2)
        live.findChild<QComboBox *>()->setCurrentIndex(2);
    live.setSmoothing(smoothing);
    auto refilled = [&](const RunDataPtr &r) {
        auto charts = std::make_unique<ChartsWidget>();
        charts->setRuns(r, {});
        charts->setLossAgainstTime(axis == 1);
        if (axis == 2)
            charts->findChild<QComboBox *>()->setCurrentIndex(2);
        charts->setSmoothing(smoothing);
        charts->refresh();
        return charts;
    };
    std::uint32_t step = 0;
    for (const std::uint32_t count : {1u, 2u, 5u, 40u, 3u}) {
        run->append(steps(c.workers, async, step, count));
        step += count;
        live.refresh();
        compareCharts(live, *refilled(run), "after a refresh");
    }
    if (thinned) {
        // Worker 0's loss past TraceModel::kMaxCounterPoints: its points merge in pairs, and
        // then the newest gathers two samples before the next one starts.
        std::vector<Record> many;
        for (std::size_t i = 0; i < TraceModel::kMaxCounterPoints; ++i, ++step)
            many.push_back(Record::counterSample(0, CounterId::Loss, step, 1'000'000 * std::int64_t(step), 1.0 + double(i % 17)));
        run->append(many);
        live.refresh();
        compareCharts(live, *refilled(run), "after thinning");
        for (int k = 0; k < 3; ++k) {
            run->append({Record::counterSample(0, CounterId::Loss, step, 1'000'000 * std::int64_t(step), 0.5 * k)});
            ++step;
            live.refresh();
            compareCharts(live, *refilled(run), "after a merged sample");
        }
    }
    // A chart cleared (its graphs keep their slots, empty).
    live.lossPlot()->graph(0)->data()->clear();
    live.stallPlot()->graph(1)->data()->clear();
    live.stallPlot()->graph(c.workers)->data()->clear(); // a cumulative curve: its sums start again
    run->append(steps(c.workers, async, step, 2));
    step += 2;
    live.refresh();
    compareCharts(live, *refilled(run), "after a chart was cleared");
    // Another run in its place, which then grows too.
    auto other = std::make_shared<RunData>(c, QStringLiteral("other"));
    other->append(steps(c.workers, async, 0, 4));
    live.setRuns(other, {});
    compareCharts(live, *refilled(other), "after the run was replaced");
    other->append(steps(c.workers, async, 4, 6));
    live.refresh();
    compareCharts(live, *refilled(other), "after the new run grew");
}

namespace {

// The charts at 900x500 on screen, showing run's loss (on a log axis or not); false when the
// window was never exposed.
bool showLossChart(ChartsWidget &charts, const RunDataPtr &run, bool log)
{
    charts.resize(900, 500);
    charts.show();
    charts.setLogLoss(log);
    charts.setRuns(run, {});
    return QTest::qWaitForWindowExposed(&charts);
}

// Uniform noise in [0, 1) from a linear congruential generator: the same values on every machine.
struct Noise {
    std::uint32_t seed;
    double next()
    {
        seed = seed * 1664525u + 1013904223u;
        return double(seed >> 8) / double(1 << 24);
    }
};

} // namespace

// While a run is live, a dense curve is drawn as a span per pixel column instead of an
// antialiased polyline: each column must show the curve from the same top to the same bottom
// (two pixels either way, beside the column at most), and exports draw the polyline as before.
void TestCharts::liveCurvesCoverTheSameColumns_data()
{
    QTest::addColumn<int>("points");
    QTest::addColumn<bool>("dashed");
    QTest::addColumn<bool>("log");
    QTest::newRow("2 a column, log") << 1200 << false << true;
    QTest::newRow("2 a column, dashed") << 1200 << true << false;
    QTest::newRow("10 a column") << 6000 << false << false;
    QTest::newRow("10 a column, dashed, log") << 6000 << true << true;
    QTest::newRow("1 a column") << 700 << false << true;
}

void TestCharts::liveCurvesCoverTheSameColumns()
{
    QFETCH(int, points);
    QFETCH(bool, dashed);
    QFETCH(bool, log);
    RunConfig c;
    c.workers = dashed ? 9 : 1; // workers 8 and on are dashed
    auto run = std::make_shared<RunData>(c, QStringLiteral("columns"));
    std::vector<Record> r;
    Noise noises{7};
    for (int s = 0; s < points; ++s) {
        const double noise = noises.next();
        // Noisy, then a smooth stretch: a band and a line.
        const double v = s < points / 2 ? 2.0 * (0.6 + 0.8 * noise) : 1.5 - 0.4 * std::sin(s * 6.0 / points);
        r.push_back(Record::counterSample(c.workers - 1, CounterId::Loss, std::uint32_t(s), 1000000LL * s, v));
    }
    run->append(r);
    ChartsWidget charts;
    QVERIFY(showLossChart(charts, run, log));
    QCustomPlot *p = charts.lossPlot();
    for (int w = 0; w + 1 < c.workers; ++w)
        p->graph(w)->setVisible(false);
    p->legend->setVisible(false);
    auto draw = [&](RunState state) {
        run->state = state;
        charts.refresh();
        p->replot(QCustomPlot::rpImmediateRefresh);
        return p->grab().toImage().convertToFormat(QImage::Format_RGB32);
    };
    const QImage live = draw(RunState::Running), done = draw(RunState::Finished);
    QVERIFY(live != done); // the live one drawn in columns, without antialiasing
    // Each column's extent of the curve's pixels (anything but white and the grid's grey).
    const QRect rect = p->axisRect()->rect().adjusted(2, 2, -2, -2);
    auto extent = [&](const QImage &img, int x) {
        int top = -1, bottom = -1;
        for (int y = rect.top(); y <= rect.bottom(); ++y) {
            const QColor px = img.pixelColor(x, y);
            if (px.saturation() > 60 || px.value() < 120) { // the curve, not white or grid grey
                if (top < 0)
                    top = y;
                bottom = y;
            }
        }
        return std::pair(top, bottom);
    };
    // Antialiased lines spread over the neighbouring column, and QCPGraph's own sampling bins
    // columns from another origin: each column's extent is compared with the other drawing's
    // next to it too.
    std::vector<std::pair<int, int>> spans[2];
    for (int x = rect.left(); x <= rect.right(); ++x) {
        spans[0].push_back(extent(done, x));
        spans[1].push_back(extent(live, x));
    }
    int columns = 0, off = 0;
    for (std::size_t i = 1; i + 1 < spans[0].size(); ++i)
        for (int k : {0, 1}) {
            const auto [top, bottom] = spans[k][i];
            if (top < 0)
                continue;
            ++columns;
            int near0 = INT_MAX, near1 = -1;
            for (std::size_t j = i - 1; j <= i + 1; ++j)
                if (spans[1 - k][j].first >= 0)
                    near0 = std::min(near0, spans[1 - k][j].first), near1 = std::max(near1, spans[1 - k][j].second);
            if (top < near0 - 2 || bottom > near1 + 2) {
                ++off;
                if (off < 5)
                    qWarning("column %d of the %s: %d..%d, the other's near it %d..%d", int(i) + rect.left(),
                             k ? "spans" : "polyline", top, bottom, near0, near1);
            }
        }
    columns /= 2;
    QVERIFY(columns > rect.width() * (dashed ? 6 : 9) / 10); // dashes leave columns empty
    // Dashes leave a column's end out now and then, as they do the polyline's.
    QVERIFY2(off <= columns / (dashed ? 10 : 50), qPrintable(QStringLiteral("%1 of %2 columns differ").arg(off).arg(columns)));
    // Exports are drawn as polylines, live or not.
    run->state = RunState::Running;
    charts.refresh();
    const QImage exportLive = p->toPixmap(800, 400).toImage();
    run->state = RunState::Finished;
    charts.refresh();
    QCOMPARE(exportLive, p->toPixmap(800, 400).toImage());
}

// Sixteen live workers' curves are drawn together, leaving out what later solid curves cover:
// the picture is the one each curve drawn on its own gives (each on a layer of its own).
void TestCharts::coveredColumnsLeftOutAlike()
{
    RunConfig c;
    c.workers = 16;
    auto run = std::make_shared<RunData>(c, QStringLiteral("cover"));
    std::vector<Record> r;
    std::uint32_t seed = 3;
    for (int s = 0; s < 3000; ++s)
        for (int w = 0; w < c.workers; ++w) {
            seed = seed * 1664525u + 1013904223u;
            const double noise = double(seed >> 8) / double(1 << 24);
            r.push_back(Record::counterSample(w, CounterId::Loss, std::uint32_t(s), 1000000LL * s + w,
                                              2.0 * std::exp(-s / 800.0) * (0.5 + noise) + 0.01 * (w + 1)));
        }
    run->append(r);
    ChartsWidget charts;
    charts.resize(900, 500);
    charts.show();
    charts.setRuns(run, {});
    QVERIFY(QTest::qWaitForWindowExposed(&charts));
    QCustomPlot *p = charts.lossPlot();
    auto image = [&] {
        p->replot(QCustomPlot::rpImmediateRefresh);
        return p->grab().toImage().convertToFormat(QImage::Format_RGB32);
    };
    const QImage together = image();
    QCPLayer *below = p->layer(QStringLiteral("main"));
    for (int w = 0; w < c.workers; ++w) {
        const QString name = QStringLiteral("worker %1").arg(w);
        QVERIFY(p->addLayer(name, below, QCustomPlot::limAbove));
        below = p->layer(name);
        QVERIFY(p->graph(w)->setLayer(below));
    }
    const QImage alone = image();
    QCOMPARE(together, alone);
    // And the live drawing was the columns' (a finished run's curves are antialiased lines).
    run->state = RunState::Finished;
    charts.refresh();
    QVERIFY(image() != together);
}


// On screen during a live run, only the chart on show is filled each second; a tab change
// fills the one it shows with everything it missed, as a refill would.
void TestCharts::hiddenChartsCatchUpWhenShown()
{
    RunConfig c;
    c.workers = 3;
    c.batchnorm = "local";
    auto run = std::make_shared<RunData>(c, QStringLiteral("live"));
    QCOMPARE(run->state, RunState::Running);
    ChartsWidget live;
    live.resize(900, 600);
    live.show();
    QVERIFY(QTest::qWaitForWindowExposed(&live));
    live.setRuns(run, {});
    run->append(steps(c.workers, false, 0, 6));
    live.refresh();
    live.setCurrentIndex(0);
    QVERIFY(live.lossPlot()->isVisible());
    run->append(steps(c.workers, false, 6, 9));
    live.refresh();
    QVERIFY(live.lossPlot()->graph(0)->dataCount() > 0);
    // Not filled while hidden.
    const auto points = [](QCustomPlot *p) {
        int n = 0;
        for (int g = 0; g < p->graphCount(); ++g)
            n += p->graph(g)->dataCount();
        return n;
    };
    auto refilled = std::make_unique<ChartsWidget>();
    refilled->setRuns(run, {});
    refilled->refresh();
    QVERIFY(points(live.stallPlot()) < points(refilled->stallPlot()));
    for (int tab = 0; tab < live.count(); ++tab)
        if (live.isTabVisible(tab))
            live.setCurrentIndex(tab);
    compareCharts(live, *refilled, "after every tab was shown");
    // Once the run has ended every chart is filled, shown or not.
    run->append(steps(c.workers, false, 15, 4));
    run->state = RunState::Finished;
    live.refresh();
    refilled->refresh();
    compareCharts(live, *refilled, "after the run ended");
}

// Curves read whole blocks of points through summaries kept from one replot to the next (their
// values' range for rescaling, their extremes for the live columns). The pictures and the axes'
// ranges must be those of reading every point, after the series grew, had its tail given again
// and was thinned, with zeros and (on a linear axis) negative values among the values.
void TestCharts::curveSummariesChangeNothing_data()
{
    QTest::addColumn<int>("points");
    QTest::addColumn<bool>("log");
    QTest::addColumn<bool>("dashed");
    QTest::newRow("150 a column, thinned") << 132800 << false << false;
    QTest::newRow("70 a column, log, dashed") << 60000 << true << true;
    QTest::newRow("7 a column, log") << 6000 << true << false;
    QTest::newRow("2 a column") << 1700 << false << false;
}

void TestCharts::curveSummariesChangeNothing()
{
    QFETCH(int, points);
    QFETCH(bool, log);
    QFETCH(bool, dashed);
    RunConfig c;
    c.workers = dashed ? 9 : 2; // workers 8 and on are dashed
    auto run = std::make_shared<RunData>(c, QStringLiteral("summaries"));
    ChartsWidget charts;
    QVERIFY(showLossChart(charts, run, log));
    QCustomPlot *p = charts.lossPlot();
    const auto restore = qScopeGuard([] { setCurveSummaries(true); });
    Noise noises{11};
    auto value = [&](int s) {
        const double noise = noises.next();
        if (noises.seed % 997 == 0)
            return 0.0;
        return (s < points / 2 ? 2.0 : 1.0) * (0.2 + noise) * (log ? 1.0 : (s % 3 ? 1.0 : -0.5));
    };
    // Grown in pieces, a refresh and a comparison after each: the summaries of the points that
    // did not change are kept, those of the points given again are not. A thinned series' newest
    // point gathers two steps: pieces of odd lengths leave it half gathered, to change later.
    std::vector<int> ends;
    for (int piece = 1; piece <= 6; ++piece)
        ends.push_back(std::min(points, 131000) * piece / 6);
    for (std::uint32_t k = 1; ends.back() < points; k = k * 1103515245u + 12345u)
        ends.push_back(std::min(points, ends.back() + 3 + 2 * int(k % 15)));
    const int pieces = int(ends.size());
    for (int piece = 0, from = 0; piece < pieces; from = ends[std::size_t(piece++)]) {
        std::vector<Record> r;
        for (int s = from; s < ends[std::size_t(piece)]; ++s)
            for (int w = 0; w < c.workers; ++w)
                r.push_back(Record::counterSample(w, CounterId::Loss, std::uint32_t(s), 1000000LL * s, value(s)));
        run->append(r);
        auto draw = [&](bool summaries) {
            setCurveSummaries(summaries);
            charts.refresh();
            p->replot(QCustomPlot::rpImmediateRefresh);
            return std::make_tuple(p->grab().toImage().convertToFormat(QImage::Format_RGB32), p->xAxis->range(),
                                   p->yAxis->range());
        };
        const auto [with, withKeys, withValues] = draw(true);
        const auto [without, keys, values] = draw(false);
        QCOMPARE(withKeys, keys);
        QCOMPARE(withValues, values);
        QVERIFY2(with == without, qPrintable(QStringLiteral("piece %1 of %2 drawn differently").arg(piece + 1).arg(pieces)));
    }
}

// A graph that keeps summaries of its points is told, by every feed, the first index from which
// they may differ: none before it may have changed.
void TestCharts::feedingSaysWhatChanged()
{
    struct Watched : QCPGraph, PointsWatcher {
        using QCPGraph::QCPGraph;
        std::size_t from = std::size_t(-1);
        void pointsChangedFrom(std::size_t index) override { from = std::min(from, index); }
    };
    QCustomPlot plot;
    auto *g = new Watched(plot.xAxis, plot.yAxis);
    std::vector<double> values;
    QVector<QCPGraphData> before;
    auto feed = [&](std::size_t unsettled) {
        before = QVector<QCPGraphData>(g->data()->constBegin(), g->data()->constEnd());
        g->from = std::size_t(-1);
        feedGraph(g, values.size(), unsettled, [&](std::size_t i) { return QCPGraphData(double(i), values[i]); });
        // Every point before `from` is the one held before.
        std::size_t same = 0;
        while (same < std::size_t(before.size()) && same < std::size_t(g->dataCount()) &&
               before[int(same)].key == g->data()->at(int(same))->key && before[int(same)].value == g->data()->at(int(same))->value)
            ++same;
        return same;
    };
    for (int i = 0; i < 100; ++i)
        values.push_back(i);
    QCOMPARE(feed(1), std::size_t(0));
    QCOMPARE(g->from, std::size_t(0));
    // The newest point changes and two come: told from the newest.
    values.back() = -1;
    values.push_back(7);
    values.push_back(8);
    QVERIFY(feed(1) >= g->from);
    QCOMPARE(g->from, std::size_t(99));
    // The last five change (a step series' unsettled tail): told from where they start, or before.
    for (std::size_t i = values.size() - 5; i < values.size(); ++i)
        values[i] += 0.5;
    QCOMPARE(feed(16), std::size_t(values.size() - 5));
    QVERIFY(g->from <= values.size() - 5);
    // Thinned (the first point changes): told from 0.
    values.erase(values.begin());
    feed(16);
    QCOMPARE(g->from, std::size_t(0));
    QCOMPARE(g->dataCount(), int(values.size()));
}

QTEST_MAIN(TestCharts)
#include "tst_charts.moc"
