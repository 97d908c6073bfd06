// Metrics from hand-built schedules: rows and summaries worked out by hand, the same answers
// whatever the chunking, rows handed out as soon as a later step begins, memory that does not
// grow with the run, and damaged values that neither crash nor allocate.
#include "metrics.h"

#include <QtTest>

#include <cmath>
#include <functional>
#include <limits>
#include <map>

using namespace syncopate;

namespace {

std::int64_t ms(double v) { return std::llround(v * 1e6); }

Record span(int w, Phase p, std::uint32_t step, double fromMs, double toMs, double value = 0)
{
    return Record::span(w, p, defaultLane(p), step, ms(fromMs), ms(toMs), value);
}

Record counter(int w, CounterId c, std::uint32_t step, double atMs, double value)
{
    return Record::counterSample(w, c, step, ms(atMs), value);
}

RunConfig makeConfig(const std::string &mode, int workers)
{
    RunConfig c;
    c.mode = mode;
    c.workers = workers;
    c.steps = 2;
    c.layers = {4, 8, 2}; // 8 * (4 + 1) + 2 * (8 + 1) = 58 parameters, 232 bytes
    return c;
}

// What a collector sees: each worker's records in order, workers merged by when they were
// recorded (a span when it ends).
std::vector<Record> interleave(std::vector<Record> r)
{
    std::stable_sort(r.begin(), r.end(), [](const Record &a, const Record &b) { return a.end < b.end; });
    return r;
}

// Sync, 2 workers, 2 steps (ms). Worker 0 waits at the barriers; worker 1 is delayed and
// recomputes. Worker 0's prefetch of step 1 (data lane) ends before its step 0 is over.
std::vector<Record> syncSchedule()
{
    using P = Phase;
    return interleave({
        span(0, P::Forward, 0, 0, 2), span(0, P::Backward, 0, 2, 4),
        counter(0, CounterId::Loss, 0, 4, 3.0), counter(0, CounterId::ActivationBytes, 0, 4, 1000),
        span(0, P::Reduce, 0, 4, 5), Record::span(0, P::Data, Lane::Data, 1, ms(4), ms(6)),
        span(0, P::Wait, 0, 5, 8), span(0, P::Apply, 0, 8, 9),
        span(1, P::Forward, 0, 0, 3), span(1, P::Recompute, 0, 3, 4), span(1, P::Backward, 0, 4, 6),
        counter(1, CounterId::Loss, 0, 6, 2.0), span(1, P::Delay, 0, 6, 7),
        span(1, P::Reduce, 0, 7, 8), span(1, P::Wait, 0, 8, 8), span(1, P::Apply, 0, 8, 9),
        span(0, P::Forward, 1, 9, 11), span(0, P::Backward, 1, 11, 13),
        counter(0, CounterId::Loss, 1, 13, 1.5), span(0, P::Reduce, 1, 13, 14),
        span(0, P::Wait, 1, 14, 16), span(0, P::Apply, 1, 16, 17),
        span(1, P::Forward, 1, 9, 12), span(1, P::Backward, 1, 12, 14),
        counter(1, CounterId::Loss, 1, 14, 1.0), counter(1, CounterId::ActivationBytes, 1, 14, 3000),
        span(1, P::Reduce, 1, 14, 16), span(1, P::Wait, 1, 16, 16), span(1, P::Apply, 1, 16, 17),
        // Evaluation after the last step is not training time and opens no row.
        span(0, P::Eval, 2, 17, 18), counter(0, CounterId::EvalLoss, 2, 18, 0.9),
    });
}

// Async, 2 workers. Server versions: W0 pushes v1 at 6, W1 v2 at 8, W0 v3 at 12, W0 v4 at 15,
// W1 v5 at 16. Staleness = versions pushed since the pull: W0 0, 1 (pulled v1, v2 came), 0;
// W1 1 (pulled v0, v1 came), 2 (pulled v2, v3 and v4 came).
std::vector<Record> asyncSchedule()
{
    using P = Phase;
    const auto S = CounterId::Staleness;
    return interleave({
        span(0, P::Pull, 0, 0, 1), span(0, P::Forward, 0, 1, 3), counter(0, CounterId::Loss, 0, 3, 4.0),
        span(0, P::Backward, 0, 3, 5), span(0, P::Push, 0, 5, 6, 0), counter(0, S, 0, 6, 0),
        counter(0, CounterId::Version, 0, 6, 1),
        span(1, P::Wait, 0, 0, 1), // the server's lock
        span(1, P::Pull, 0, 1, 2), span(1, P::Forward, 0, 2, 5), counter(1, CounterId::Loss, 0, 5, 3.0),
        span(1, P::Backward, 0, 5, 7), span(1, P::Push, 0, 7, 8, 1), counter(1, S, 0, 8, 1),
        span(0, P::Pull, 1, 6, 7), span(0, P::Forward, 1, 7, 9), counter(0, CounterId::Loss, 1, 9, 2.0),
        span(0, P::Backward, 1, 9, 11), span(0, P::Push, 1, 11, 12, 1), counter(0, S, 1, 12, 1),
        span(1, P::Wait, 1, 8, 10), // the staleness bound
        span(1, P::Pull, 1, 10, 11), span(1, P::Forward, 1, 11, 13),
        counter(1, CounterId::Loss, 1, 13, 1.0), span(1, P::Backward, 1, 13, 15),
        span(0, P::Pull, 2, 12, 12.5), span(0, P::Forward, 2, 12.5, 13.5),
        counter(0, CounterId::Loss, 2, 13.5, 0.5), span(0, P::Backward, 2, 13.5, 14.5),
        span(0, P::Push, 2, 14.5, 15, 0), counter(0, S, 2, 15, 0),
        span(1, P::Push, 1, 15, 16, 2), counter(1, S, 1, 16, 2),
    });
}

std::vector<Record> handSchedule(const QString &mode)
{
    return mode == QLatin1String("async") ? asyncSchedule() : syncSchedule();
}

// A longer schedule in the engine's order: steps of 10 us, worker w a little slower than w-1.
std::vector<Record> generated(bool async, int workers, std::int64_t from, std::int64_t count)
{
    std::vector<Record> r;
    for (std::int64_t s = from; s < from + count; ++s) {
        const std::int64_t t0 = s * 10000;
        const auto s32 = std::uint32_t(s);
        for (int w = 0; w < workers; ++w) {
            const std::int64_t f = t0 + 2000 + 300 * w, b = f + 3000 + 100 * (s % 3);
            if (async)
                r.push_back(Record::span(w, Phase::Pull, Lane::Comm, s32, t0, t0 + 200));
            r.push_back(Record::span(w, Phase::Forward, Lane::Compute, s32, t0 + 200, f));
            r.push_back(Record::counterSample(w, CounterId::Loss, s32, f, 1.0 / double(s + 1)));
            r.push_back(Record::span(w, Phase::Backward, Lane::Compute, s32, f, b));
            if (async) {
                r.push_back(Record::span(w, Phase::Push, Lane::Comm, s32, b, b + 500));
                const double staleness = double((s + w) % 4);
                r.push_back(Record::counterSample(w, CounterId::Staleness, s32, b + 500, staleness));
            } else {
                const std::int64_t reduced = b + 400 + 50 * w;
                r.push_back(Record::span(w, Phase::Reduce, Lane::Comm, s32, b, reduced));
                r.push_back(Record::span(w, Phase::Wait, Lane::Comm, s32, reduced, t0 + 9000));
                r.push_back(Record::span(w, Phase::Apply, Lane::Compute, s32, t0 + 9000, t0 + 9500));
            }
        }
    }
    return interleave(std::move(r));
}

// The accumulator fed chunk records at a time, rows taken after each chunk (0: all at once).
RunMetrics streamed(const RunConfig &config, const std::vector<Record> &records, std::size_t chunk)
{
    MetricsAccumulator acc(config);
    RunMetrics m;
    const std::size_t step = chunk ? chunk : std::max<std::size_t>(1, records.size());
    for (std::size_t i = 0; i < records.size(); i += step) {
        acc.add(records.data() + i, std::min(step, records.size() - i));
        acc.takeFinishedRows(m.rows);
    }
    acc.finish(m.rows);
    std::sort(m.rows.begin(), m.rows.end(), [](const StepRow &a, const StepRow &b) {
        return std::pair(a.step, a.worker) < std::pair(b.step, b.worker);
    });
    m.summary = acc.summary(RunOutcome{});
    return m;
}

bool sameRow(const StepRow &a, const StepRow &b)
{
    return a.worker == b.worker && a.step == b.step && a.tMs == b.tMs && a.stepMs == b.stepMs &&
           a.loss == b.loss && a.waitMs == b.waitMs && a.delayMs == b.delayMs &&
           a.recomputeMs == b.recomputeMs && a.staleness == b.staleness &&
           a.activationBytes == b.activationBytes;
}

bool near(double a, double b) { return std::abs(a - b) <= 1e-9 * (1 + std::abs(b)); }

QString js(const nlohmann::json &j) { return QString::fromStdString(j.dump()); }

using Damage = std::function<void(std::vector<Record> &)>;

} // namespace

Q_DECLARE_METATYPE(Damage)

class TestMetrics : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void handWorkedRows_data()
    {
        // worker, step, tMs, stepMs, waitMs, delayMs, recomputeMs, loss, staleness
        QTest::addColumn<QString>("mode");
        QTest::addColumn<QList<QList<double>>>("rows");
        // W0 step 0 runs 0..9 with 3 ms at the barrier; W1 recomputes 1 ms and is delayed 1 ms.
        // Step 1 runs 9..17 for both; W0 waits 2 ms.
        QTest::newRow("sync") << QStringLiteral("sync")
                              << QList<QList<double>>{{0, 0, 9, 9, 3, 0, 0, 3.0, -1},
                                                      {1, 0, 9, 9, 0, 1, 1, 2.0, -1},
                                                      {0, 1, 17, 8, 2, 0, 0, 1.5, -1},
                                                      {1, 1, 17, 8, 0, 0, 0, 1.0, -1}};
        // W1's waits (lock 0..1, bound 8..10) open its steps: step 0 spans 0..8, step 1 8..16.
        QTest::newRow("async") << QStringLiteral("async")
                               << QList<QList<double>>{{0, 0, 6, 6, 0, 0, 0, 4.0, 0},
                                                       {1, 0, 8, 8, 1, 0, 0, 3.0, 1},
                                                       {0, 1, 12, 6, 0, 0, 0, 2.0, 1},
                                                       {1, 1, 16, 8, 2, 0, 0, 1.0, 2},
                                                       {0, 2, 15, 3, 0, 0, 0, 0.5, 0}};
    }
    void handWorkedRows()
    {
        QFETCH(QString, mode);
        QFETCH(QList<QList<double>>, rows);
        const RunMetrics m = computeMetrics(makeConfig(mode.toStdString(), 2), handSchedule(mode),
                                            RunOutcome{});
        QCOMPARE(m.rows.size(), std::size_t(rows.size()));
        for (qsizetype i = 0; i < rows.size(); ++i) {
            const StepRow &r = m.rows[std::size_t(i)];
            const QList<double> &e = rows[i];
            QCOMPARE(r.worker, int(e[0]));
            QCOMPARE(r.step, std::int64_t(e[1]));
            const double got[] = {r.tMs, r.stepMs, r.waitMs, r.delayMs, r.recomputeMs, r.loss, r.staleness};
            for (int k = 0; k < 7; ++k)
                QVERIFY2(near(got[k], e[2 + k]),
                         qPrintable(QStringLiteral("row %1 field %2: %3, expected %4")
                                        .arg(i).arg(k).arg(got[k]).arg(e[2 + k])));
        }
    }

    void syncSummary()
    {
        const auto j = computeMetrics(makeConfig("sync", 2), syncSchedule(), RunOutcome{}).summary;
        // Each worker is active 0..17 (the eval span after is not counted): waits 3 + 2 of 34.
        QVERIFY(near(j["stall_fraction"].get<double>(), 5.0 / 34.0));
        QCOMPARE(js(j["stall_ms_per_worker"]), QStringLiteral("[5.0,0.0]"));
        QCOMPARE(js(j["delay_ms_per_worker"]), QStringLiteral("[0.0,1.0]"));
        QVERIFY(near(j["recompute_ms"].get<double>(), 1.0));
        QCOMPARE(j["peak_activation_bytes"].get<std::int64_t>(), std::int64_t(3000));
        // The latest loss of each worker, by time: 1.5 at 13 ms and 1.0 at 14 ms.
        QVERIFY(near(j["final_loss"].get<double>(), 1.25));
        // The slowest reduce: step 0 max(1, 1) = 1 ms, step 1 max(1, 2) = 2 ms. 232 bytes twice in
        // 3 ms: 232 * 2 / 3e6 bytes/ns; with 2 workers busbw = algbw * 2 * 1 / 2.
        const auto &r = j["reduce"];
        QCOMPARE(r["bytes_per_worker"].get<std::int64_t>(), std::int64_t(232));
        QVERIFY(near(r["time_ms_mean"].get<double>(), 1.5));
        QVERIFY(near(r["algbw_gb_s"].get<double>(), 232.0 * 2 / 3e6));
        QVERIFY(near(r["busbw_gb_s"].get<double>(), 232.0 * 2 / 3e6));
        QCOMPARE(js(j["staleness_histogram"]), QStringLiteral("[]"));
    }

    // Hand-worked, sync, 3 workers, 2 steps (ms; a compute span's value is its descheduled
    // time). Step 0: worker 0 was off the CPU 3 of its 4 forward ms, so worker 1's 3 ms wait
    // is all explained (min(3, 3)) and worker 2's 2 ms (min(2, 3)); worker 0 waited 0.
    // Step 1: worker 1 is slowest by 2 ms but was off the CPU for 1: worker 0 waited 2, of
    // which 1 is explained; worker 2 too, and it resumed 0.5 ms after the barrier opened (a wait
    // span's value): 1.5 of its 2. 7.5 of 9 stall ms in all.
    void descheduledAccounting()
    {
        using P = Phase;
        const auto d = [](double v) { return v * 1e6; };
        const std::vector<Record> r = interleave({
            span(0, P::Forward, 0, 0, 4, d(3)), span(0, P::Backward, 0, 4, 6), span(0, P::Wait, 0, 6, 6), span(0, P::Apply, 0, 6, 7),
            span(1, P::Forward, 0, 0, 2), span(1, P::Backward, 0, 2, 3), span(1, P::Wait, 0, 3, 6), span(1, P::Apply, 0, 6, 7),
            span(2, P::Forward, 0, 0, 2, d(1)), span(2, P::Backward, 0, 2, 4, d(0.5)), span(2, P::Wait, 0, 4, 6), span(2, P::Apply, 0, 6, 7),
            span(0, P::Forward, 1, 7, 9), span(0, P::Backward, 1, 9, 10), span(0, P::Wait, 1, 10, 12), span(0, P::Apply, 1, 12, 13),
            span(1, P::Forward, 1, 7, 11, d(1)), span(1, P::Backward, 1, 11, 12), span(1, P::Wait, 1, 12, 12), span(1, P::Apply, 1, 12, 13),
            span(2, P::Forward, 1, 7, 9), span(2, P::Backward, 1, 9, 10), span(2, P::Wait, 1, 10, 12, d(0.5)), span(2, P::Apply, 1, 12, 13),
        });
        const RunMetrics m = computeMetrics(makeConfig("sync", 3), r, RunOutcome{});
        const auto &j = m.summary;
        QCOMPARE(js(j["descheduled_ms_per_worker"]), QStringLiteral("[3.0,1.0,2.0]"));
        // Of 3 * 13 ms of worker time.
        QVERIFY(near(j["descheduled_fraction"].get<double>(), 6.0 / 39.0));
        QVERIFY(near(j["stall_descheduled_fraction"].get<double>(), 7.5 / 9.0));
        std::map<std::pair<int, std::int64_t>, double> rows;
        for (const StepRow &row : m.rows)
            rows[{row.worker, row.step}] = row.descheduledMs;
        QVERIFY(near(rows[{0, 0}], 3.0));
        QVERIFY(near(rows[{2, 0}], 1.5));
        QVERIFY(near(rows[{1, 1}], 1.0));
        QVERIFY(near(rows[{0, 1}], 0.0));
        QVERIFY(near(rows[{2, 1}], 0.5));
        // A damaged value (more than the span, negative, NaN) counts as at most the span.
        const RunMetrics bad = computeMetrics(makeConfig("sync", 2),
            {span(0, P::Forward, 0, 0, 2, d(50)), span(1, P::Forward, 0, 0, 2, -5),
             span(1, P::Backward, 0, 2, 3, std::nan(""))}, RunOutcome{});
        QCOMPARE(js(bad.summary["descheduled_ms_per_worker"]), QStringLiteral("[2.0,0.0]"));
        // Async has no barrier to explain.
        QVERIFY(!computeMetrics(makeConfig("async", 3), r, RunOutcome{}).summary.contains("stall_descheduled_fraction"));
    }

    void asyncSummary()
    {
        const auto j = computeMetrics(makeConfig("async", 2), asyncSchedule(), RunOutcome{}).summary;
        // W0 active 0..15, W1 0..16; only W1 waits, 1 + 2 ms.
        QVERIFY(near(j["stall_fraction"].get<double>(), 3.0 / 31.0));
        QCOMPARE(js(j["stall_ms_per_worker"]), QStringLiteral("[0.0,3.0]"));
        // Staleness 0, 1, 1, 2, 0: mean 4 / 5, histogram of 0s, 1s and 2s.
        QVERIFY(near(j["staleness_mean"].get<double>(), 0.8));
        QCOMPARE(j["staleness_max"].get<std::int64_t>(), std::int64_t(2));
        QCOMPARE(js(j["staleness_histogram"]), QStringLiteral("[2,2,1]"));
        QVERIFY(!j.contains("staleness_overflow"));
        // Latest two losses: W1's 1.0 at 13 ms, W0's 0.5 at 13.5 ms.
        QVERIFY(near(j["final_loss"].get<double>(), 0.75));
        QVERIFY(!j.contains("reduce"));
    }

    void chunking_data()
    {
        QTest::addColumn<QString>("mode");
        QTest::addColumn<int>("schedule"); // 0: the hand-worked one, else generated steps
        QTest::addColumn<int>("chunk");
        for (const char *mode : {"sync", "async"})
            for (int schedule : {0, 40})
                for (int chunk : {1, 7, 0})
                    QTest::addRow("%s %s chunk %d", mode, schedule ? "generated" : "hand", chunk)
                        << QString::fromLatin1(mode) << schedule << chunk;
    }
    void chunking()
    {
        QFETCH(QString, mode);
        QFETCH(int, schedule);
        QFETCH(int, chunk);
        const bool async = mode == QLatin1String("async");
        const RunConfig config = makeConfig(mode.toStdString(), schedule ? 3 : 2);
        const auto records = schedule ? generated(async, 3, 0, schedule) : handSchedule(mode);
        const RunMetrics whole = computeMetrics(config, records, RunOutcome{});
        const RunMetrics parts = streamed(config, records, std::size_t(chunk));
        QCOMPARE(parts.rows.size(), whole.rows.size());
        for (std::size_t i = 0; i < whole.rows.size(); ++i)
            QVERIFY2(sameRow(parts.rows[i], whole.rows[i]), qPrintable(QString::number(i)));
        QCOMPARE(js(parts.summary), js(whole.summary));
    }

    void rowsStreamAsLaterStepsBegin()
    {
        MetricsAccumulator acc(makeConfig("sync", 2));
        std::vector<StepRow> out;
        auto feed = [&](const Record &r) { acc.add(&r, 1); };
        feed(span(0, Phase::Forward, 0, 0, 2));
        feed(span(1, Phase::Forward, 0, 0, 3));
        feed(counter(0, CounterId::Loss, 0, 2, 5.0));
        acc.takeFinishedRows(out);
        QVERIFY(out.empty());
        // Neither a prefetch of step 1, a counter of step 1 nor an eval span completes step 0.
        feed(Record::span(0, Phase::Data, Lane::Data, 1, ms(2), ms(3)));
        feed(counter(0, CounterId::Loss, 1, 3, 4.0));
        feed(span(0, Phase::Eval, 1, 3, 4));
        acc.takeFinishedRows(out);
        QVERIFY(out.empty());
        feed(span(0, Phase::Forward, 1, 4, 5));
        acc.takeFinishedRows(out);
        QCOMPARE(out.size(), std::size_t(1));
        QCOMPARE(out[0].worker, 0);
        QCOMPARE(out[0].step, std::int64_t(0));
        QCOMPARE(out[0].loss, 5.0);
        feed(span(1, Phase::Wait, 1, 3, 4));
        acc.takeFinishedRows(out);
        QCOMPARE(out.size(), std::size_t(2));
        QCOMPARE(out[1].worker, 1);
        QCOMPARE(acc.openRowCount(), std::size_t(2));
        acc.finish(out);
        QCOMPARE(out.size(), std::size_t(4));
        QCOMPARE(out[2].step, std::int64_t(1));
        QCOMPARE(out[2].worker, 0);
        QCOMPARE(out[3].step, std::int64_t(1));
        QCOMPARE(out[3].worker, 1);
        QCOMPARE(out[2].loss, 4.0);
        QCOMPARE(acc.openRowCount(), std::size_t(0));
    }

    void lateRecords()
    {
        MetricsAccumulator acc(makeConfig("sync", 1));
        std::vector<StepRow> out;
        const std::vector<Record> first{span(0, Phase::Forward, 0, 0, 2),
                                        span(0, Phase::Data, 1, 3, 4),
                                        // A GPU's Apply is collected after the next step began.
                                        span(0, Phase::Apply, 0, 2, 3)};
        acc.add(first);
        acc.takeFinishedRows(out);
        QCOMPARE(out.size(), std::size_t(1));
        QCOMPARE(out[0].tMs, 3.0); // not yet taken when the Apply came: it still counts
        // Once handed out a row stays as it was; the totals still count the late wait.
        acc.add({span(0, Phase::Wait, 0, 4, 6)});
        acc.takeFinishedRows(out);
        QCOMPARE(out.size(), std::size_t(1));
        acc.finish(out);
        QCOMPARE(out.size(), std::size_t(2));
        QCOMPARE(out[1].waitMs, 0.0);
        QCOMPARE(js(acc.summary(RunOutcome{})["stall_ms_per_worker"]), QStringLiteral("[2.0]"));
    }

    void boundedMemory_data()
    {
        QTest::addColumn<QString>("mode");
        QTest::addColumn<int>("silent"); // workers in the config that never record
        QTest::newRow("sync") << QStringLiteral("sync") << 0;
        QTest::newRow("async") << QStringLiteral("async") << 0;
        QTest::newRow("sync, a worker silent") << QStringLiteral("sync") << 1;
    }
    void boundedMemory()
    {
        QFETCH(QString, mode);
        QFETCH(int, silent);
        const bool async = mode == QLatin1String("async");
        const int workers = 3;
        MetricsAccumulator acc(makeConfig(mode.toStdString(), workers + silent));
        std::vector<StepRow> out;
        std::size_t rows = 0, mostRows = 0, mostReduce = 0;
        const std::int64_t steps = 200000, batch = 100;
        for (std::int64_t s = 0; s < steps; s += batch) {
            const auto records = generated(async, workers, s, batch);
            for (std::size_t i = 0; i < records.size(); i += 50) {
                acc.add(records.data() + i, std::min<std::size_t>(50, records.size() - i));
                mostRows = std::max(mostRows, acc.openRowCount());
                mostReduce = std::max(mostReduce, acc.pendingReduceSteps());
                acc.takeFinishedRows(out);
                rows += out.size();
                out.clear();
            }
        }
        acc.finish(out);
        rows += out.size();
        QCOMPARE(rows, std::size_t(steps * workers));
        // A chunk of 50 records spans a few steps; each worker holds its current step.
        QVERIFY2(mostRows <= std::size_t(6 * workers), qPrintable(QString::number(mostRows)));
        QVERIFY2(mostReduce <= (silent ? MetricsAccumulator::kMaxPendingReduceSteps + 1 : 4),
                 qPrintable(QString::number(mostReduce)));
        QVERIFY(acc.stalenessBucketCount() <= 4);
        const auto j = acc.summary(RunOutcome{});
        if (!async) // slowest reduce 400 + 50 * 2 ns each step
            QVERIFY(near(j["reduce"]["time_ms_mean"].get<double>(), 500e-6));
        else
            QCOMPARE(j["staleness_histogram"].size(), std::size_t(4));
    }

    void damagedValues_data()
    {
        QTest::addColumn<QString>("mode");
        QTest::addColumn<Damage>("damage");
        QTest::addColumn<QString>("key");
        QTest::addColumn<QString>("expected"); // JSON; empty: only check that it survives
        QTest::addColumn<int>("rows");
        auto add = [](const char *name, const char *mode, Damage d, const char *key,
                      const char *expected, int rows) {
            QTest::newRow(name) << QString::fromLatin1(mode) << d << QString::fromLatin1(key)
                                << QString::fromLatin1(expected) << rows;
        };
        auto one = [](Record r) { return Damage([r](auto &v) { v.push_back(r); }); };
        auto stale = [&](double v) { return one(counter(0, CounterId::Staleness, 2, 16, v)); };
        const double nan = std::numeric_limits<double>::quiet_NaN();
        const double inf = std::numeric_limits<double>::infinity();
        const auto lo = std::numeric_limits<std::int64_t>::min();
        const auto hi = std::numeric_limits<std::int64_t>::max();
        const char *hist = "staleness_histogram";
        add("staleness 1e30", "async", stale(1e30), "staleness_max", "9223372036854775807", 5);
        add("staleness 1e30 overflows", "async", stale(1e30), "staleness_overflow", "1", 5);
        add("staleness over the bound", "async", stale(1e6 + 1), hist, "[2,2,1]", 5);
        add("staleness NaN", "async", stale(nan), "staleness_mean", "0.8", 5);
        add("staleness inf", "async", stale(inf), hist, "[2,2,1]", 5);
        // -16 counts in the lowest bucket, and in the mean: (4 - 16) / 6.
        add("staleness -16", "async", stale(-16), hist, "[3,2,1]", 5);
        add("staleness -16 mean", "async", stale(-16), "staleness_mean", "-2.0", 5);
        add("negative duration", "async", one(span(0, Phase::Wait, 2, 14, 12)),
            "stall_ms_per_worker", "[-2.0,3.0]", 5);
        // Step 4e9 completes worker 0's rows; step 3 after it still gets a row of its own.
        add("step 4e9", "sync", [](auto &v) {
            v.push_back(span(0, Phase::Reduce, 4000000000u, 17, 18));
            v.push_back(span(0, Phase::Forward, 3, 18, 19));
        }, "", "", 6);
        add("times at the int64 limits", "sync", [=](auto &v) {
            v.push_back(Record::span(0, Phase::Wait, Lane::Comm, 1, lo, hi));
            v.push_back(Record::span(1, Phase::Reduce, Lane::Comm, 1, hi, lo));
        }, "", "", 4);
        add("activation 1e30", "sync", one(counter(1, CounterId::ActivationBytes, 1, 17, 1e30)),
            "peak_activation_bytes", "9223372036854775807", 4);
        add("activation NaN", "sync", one(counter(1, CounterId::ActivationBytes, 1, 17, nan)),
            "peak_activation_bytes", "3000", 4);
        add("loss NaN", "sync", one(counter(1, CounterId::Loss, 1, 20, nan)), "final_loss", "null", 4);
        add("worker out of range", "sync", [](auto &v) {
            v.push_back(span(65535, Phase::Wait, 1, 0, 100));
            v.push_back(counter(65535, CounterId::Staleness, 1, 0, 1e30));
        }, "stall_ms_per_worker", "[5.0,0.0]", 4);
        add("codes out of range", "sync", [](auto &v) {
            Record s = span(0, Phase::Forward, 1, 17, 18), c = counter(0, CounterId::Loss, 1, 18, 7);
            s.code = c.code = 0xff;
            v.push_back(s);
            v.push_back(c);
        }, "final_loss", "1.25", 4);
        // Counters of a thousand future steps: rows, but never more than a few open at once.
        add("counters far ahead", "sync", [](auto &v) {
            for (int i = 0; i < 1000; ++i)
                v.push_back(counter(0, CounterId::Loss, std::uint32_t(100 + i), 20 + i, 1.0));
        }, "final_loss", "1.0", 1004);
    }
    void damagedValues()
    {
        QFETCH(QString, mode);
        QFETCH(Damage, damage);
        QFETCH(QString, key);
        QFETCH(QString, expected);
        QFETCH(int, rows);
        const RunConfig config = makeConfig(mode.toStdString(), 2);
        auto records = handSchedule(mode);
        damage(records);
        const RunMetrics whole = computeMetrics(config, records, RunOutcome{});
        QCOMPARE(whole.rows.size(), std::size_t(rows));
        if (!expected.isEmpty())
            QCOMPARE(js(whole.summary.value(key.toStdString(), nlohmann::json())),
                     js(nlohmann::json::parse(expected.toStdString())));
        (void)whole.summary.dump(); // NaN and infinities must still serialise

        // Streamed one record at a time, the totals agree and what is held stays small.
        MetricsAccumulator acc(config);
        std::vector<StepRow> out;
        for (const Record &r : records) {
            acc.add(&r, 1);
            acc.takeFinishedRows(out);
            QVERIFY(acc.openRowCount() <= 2 * MetricsAccumulator::kMaxOpenRowsPerWorker);
            QVERIFY(acc.pendingReduceSteps() <= MetricsAccumulator::kMaxPendingReduceSteps);
            QVERIFY(acc.stalenessBucketCount() <= 3);
        }
        QCOMPARE(js(acc.summary(RunOutcome{})), js(whole.summary));
    }
};

QTEST_GUILESS_MAIN(TestMetrics)
#include "tst_metrics.moc"
