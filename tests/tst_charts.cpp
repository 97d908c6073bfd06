// The charts' own arithmetic, against hand-worked figures: the band of async workers' losses,
// and what the loss chart draws for a run whose losses are known.
#include "charts.h"

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

QTEST_MAIN(TestCharts)
#include "tst_charts.moc"
