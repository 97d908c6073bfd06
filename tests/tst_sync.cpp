// The sync strategy: N workers with batch B equal one worker with batch N*B, runs are
// reproducible bit for bit, every phase is recorded, a straggler holds the others at the barrier,
// and evaluation sharded over the workers equals one evaluation of the whole held-out set.
#include "testutil.h"

#include "communicator.h"

#include <atomic>
#include <thread>

using namespace syncopate;
using namespace syncopate::test;
using nlohmann::json;

class TestSync : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void workersEqualOneBigBatch_data();
    void workersEqualOneBigBatch();
    void reproducibleBitForBit();
    void everyPhaseIsRecorded();
    void workersUpdateSlicesOfOneCopy();
    void stragglerHoldsTheOthersAtTheBarrier();
    void lossFalls();
    void shardedEvaluationEqualsWholeEvaluation_data();
    void shardedEvaluationEqualsWholeEvaluation();
    void prefetchDepthKeepsTheRun();
    void syncBatchNormEqualsOneBigBatch();
    void inputBoundStepsWaitForData();
    void spinningBarrierOpensAndCancels();
};

static json small(int workers, int batch, const char *optimizer, bool shuffle)
{
    return json{{"workers", workers},
                {"model", {{"layers", {12, 32, 32, 4}}}},
                {"data", {{"source", "blobs"}, {"samples", 300}, {"shuffle", shuffle}}},
                {"train", {{"steps", 25}, {"batch", batch}, {"optimizer", optimizer}, {"lr", 0.02}}},
                {"eval", {{"samples", 0}}}};
}

// Four and two workers (two on a 2-core machine spin at the barrier rather than sleep); with a
// straggler (worker 1 four times slower, then worker 0) the fast one waits at every barrier and
// the mean must still be the one big batch's.
void TestSync::workersEqualOneBigBatch_data()
{
    QTest::addColumn<QString>("optimizer");
    QTest::addColumn<bool>("shuffle");
    QTest::addColumn<int>("workers");
    QTest::addColumn<QString>("slowdown");
    for (int workers : {4, 2})
        for (const char *o : {"sgd", "momentum", "adam"})
            for (bool s : {false, true})
                QTest::newRow(qPrintable(QStringLiteral("%1 workers, %2%3").arg(workers).arg(QLatin1String(o), s ? QStringLiteral(" shuffled") : QString())))
                    << QString::fromLatin1(o) << s << workers << QString();
    QTest::newRow("2 workers, momentum, worker 1 slow") << QStringLiteral("momentum") << true << 2 << QStringLiteral("[1, 4]");
    QTest::newRow("2 workers, adam, worker 0 slow") << QStringLiteral("adam") << true << 2 << QStringLiteral("[4, 1]");
}

void TestSync::workersEqualOneBigBatch()
{
    QFETCH(QString, optimizer);
    QFETCH(bool, shuffle);
    QFETCH(int, workers);
    QFETCH(QString, slowdown);
    const std::string o = optimizer.toStdString();
    json c = small(workers, 64 / workers, o.c_str(), shuffle);
    if (!slowdown.isEmpty())
        c["workers_slowdown"] = json::parse(slowdown.toStdString());
    auto many = runToEnd(c);
    auto one = runToEnd(small(1, 64, o.c_str(), shuffle));
    QCOMPARE(many->state(), RunState::Finished);
    QCOMPARE(one->state(), RunState::Finished);
    const auto a = many->finalParams(), b = one->finalParams();
    QVERIFY(a != many->initialParams()); // it trained
    const double diff = maxAbsoluteDifference(a, b);
    QVERIFY2(diff < 1e-5, qPrintable(QStringLiteral("max |difference| %1").arg(diff)));
}

void TestSync::reproducibleBitForBit()
{
    const json c = small(3, 8, "momentum", true);
    auto a = runToEnd(c), b = runToEnd(c);
    QCOMPARE(a->finalParams(), b->finalParams());
}

void TestSync::everyPhaseIsRecorded()
{
    auto e = runToEnd(small(3, 8, "sgd", false));
    const auto records = e->events().all();
    // phase -> count per (worker, step)
    std::map<std::tuple<int, int, int>, int> seen;
    for (const auto &r : records)
        if (r.isSpan())
            ++seen[{r.worker, int(r.step), int(r.phase())}];
    for (int w = 0; w < 3; ++w)
        for (int s = 0; s < 25; ++s) {
            for (Phase p : {Phase::Data, Phase::Forward, Phase::Backward, Phase::Reduce, Phase::Apply})
                QVERIFY2((seen[std::make_tuple(w, s, int(p))] >= 1), phaseName(p));
            // before and after the reduction
            QCOMPARE((seen[std::make_tuple(w, s, int(Phase::Wait))]), 2);
        }
}

// The CPU workers of one process keep one copy of the parameters, each updating its own slice
// after the reduce: a worker's step reads reduce, apply, then the barrier that waits for every
// slice. (That the result is the one big batch's, bit for bit, is workersEqualOneBigBatch.)
void TestSync::workersUpdateSlicesOfOneCopy()
{
    auto e = runToEnd(small(3, 8, "adam", false));
    QCOMPARE(e->reduceAlgorithm(), std::string("shared memory, sharded update"));
    QCOMPARE(e->replicaParams(2), e->replicaParams(0));
    // (worker, step) -> (start, phase) of its exchange's spans
    std::map<std::pair<int, int>, std::vector<std::pair<std::int64_t, Phase>>> order;
    for (const auto &r : e->events().all())
        if (r.isSpan() && r.lane() != Lane::Data &&
            (r.phase() == Phase::Reduce || r.phase() == Phase::Apply || r.phase() == Phase::Wait))
            order[{r.worker, int(r.step)}].emplace_back(r.start, r.phase());
    for (auto &[key, spans] : order) {
        std::stable_sort(spans.begin(), spans.end(),
                         [](const auto &a, const auto &b) { return a.first < b.first; });
        std::vector<Phase> tail;
        for (const auto &s : spans)
            tail.push_back(s.second);
        QVERIFY2((tail == std::vector<Phase>{Phase::Wait, Phase::Reduce, Phase::Apply, Phase::Wait}),
                 qPrintable(QStringLiteral("worker %1 step %2: %3").arg(key.first).arg(key.second).arg([&] {
                     QString t;
                     for (Phase p : tail)
                         t += QLatin1String(phaseName(p)) + QLatin1Char(' ');
                     return t;
                 }())));
    }
    QCOMPARE(order.size(), std::size_t(3 * 25));
    // One worker applies the whole mean to its own parameters, as before.
    QCOMPARE(runToEnd(small(1, 8, "adam", false))->reduceAlgorithm(), std::string("shared memory"));
}

void TestSync::stragglerHoldsTheOthersAtTheBarrier()
{
    // Two workers, one three times slower. How long the fast one waits depends on the machine's
    // load (bench_engine reports it), but causality does not: on every step the fast worker leaves
    // its first barrier only after the straggler has finished its injected delay and arrived.
    json c = small(2, 64, "sgd", false);
    c["model"]["layers"] = {64, 384, 384, 10};
    c["train"]["steps"] = 20;
    c["workers_slowdown"] = {1, 3};
    c["data"]["prefetch"] = false;
    auto e = runToEnd(c);
    constexpr int kSteps = 20;
    std::vector<std::int64_t> delayEnd(kSteps, -1), slowArrival(kSteps, -1), fastLeaves(kSteps, -1);
    for (const auto &r : e->events().all()) {
        if (!r.isSpan() || r.step >= std::uint32_t(kSteps))
            continue;
        const std::size_t s = r.step;
        if (r.worker == 1 && r.phase() == Phase::Delay)
            delayEnd[s] = r.end;
        // The first wait span of a step is the one before the reduction.
        if (r.worker == 1 && r.phase() == Phase::Wait && slowArrival[s] < 0)
            slowArrival[s] = r.start;
        if (r.worker == 0 && r.phase() == Phase::Wait && fastLeaves[s] < 0)
            fastLeaves[s] = r.end;
        QVERIFY2(!(r.worker == 0 && r.phase() == Phase::Delay), "the fast worker was delayed");
    }
    for (int s = 0; s < kSteps; ++s) {
        const auto i = std::size_t(s);
        QVERIFY2(delayEnd[i] >= 0, qPrintable(QStringLiteral("step %1: the straggler was not delayed").arg(s)));
        QVERIFY2(slowArrival[i] >= delayEnd[i],
                 qPrintable(QStringLiteral("step %1: the straggler reached the barrier before its delay ended").arg(s)));
        QVERIFY2(fastLeaves[i] >= slowArrival[i],
                 qPrintable(QStringLiteral("step %1: the fast worker left the barrier %2 ns before the straggler arrived")
                                .arg(s)
                                .arg(slowArrival[i] - fastLeaves[i])));
    }
}

void TestSync::lossFalls()
{
    json c = small(2, 32, "momentum", true);
    c["train"]["steps"] = 120;
    c["eval"] = {{"samples", 500}, {"every", 40}};
    auto e = runToEnd(c);
    std::vector<double> losses;
    for (const auto &r : e->events().all())
        if (!r.isSpan() && r.counter() == CounterId::Loss)
            losses.push_back(r.value);
    QVERIFY(losses.size() == 240);
    const double first = (losses[0] + losses[1]) / 2;
    const double last = (losses[238] + losses[239]) / 2;
    QVERIFY2(last < 0.5 * first, qPrintable(QStringLiteral("%1 -> %2").arg(first).arg(last)));
    const auto evals = e->evalHistory();
    QCOMPARE(int(evals.size()), 3); // at 40, 80 and the end
    QVERIFY(evals.back().accuracy > 0.6);
}

void TestSync::shardedEvaluationEqualsWholeEvaluation_data()
{
    QTest::addColumn<int>("workers");
    QTest::addColumn<bool>("checkpoint");
    QTest::newRow("3 workers") << 3 << false;
    QTest::newRow("4 workers, checkpointed") << 4 << true;
    QTest::newRow("1 worker") << 1 << false;
}

void TestSync::shardedEvaluationEqualsWholeEvaluation()
{
    // During a sync run every worker evaluates its share of the held-out set; the combined
    // figure must equal one evaluation of the whole set at the same parameters. The whole-set
    // evaluation comes from a second run stopped at that step, whose end-of-run evaluation uses
    // one model on every sample.
    QFETCH(int, workers);
    QFETCH(bool, checkpoint);
    json c = small(workers, 8, "momentum", true);
    c["model"]["checkpoint"] = checkpoint;
    c["train"]["steps"] = 20;
    c["eval"] = {{"samples", 301}, {"every", 10}}; // 301: shards of unequal size
    auto during = runToEnd(c);
    c["train"]["steps"] = 10;
    c["eval"]["every"] = 0;
    auto whole = runToEnd(c);
    const auto a = during->evalHistory();
    const auto b = whole->evalHistory();
    QCOMPARE(int(a.size()), 2);
    QCOMPARE(int(b.size()), 1);
    QCOMPARE(a[0].step, std::int64_t(10));
    QCOMPARE(b[0].step, std::int64_t(10));
    QVERIFY2(std::abs(a[0].loss - b[0].loss) <= 1e-6 * std::abs(b[0].loss),
             qPrintable(QStringLiteral("sharded %1, whole %2").arg(a[0].loss, 0, 'g', 17).arg(b[0].loss, 0, 'g', 17)));
    QCOMPARE(a[0].accuracy, b[0].accuracy);
    // Every worker evaluated its shard at step 10, and nobody waited for it.
    std::vector<int> evalSpans(std::size_t(workers), 0);
    for (const auto &r : during->events().all())
        if (r.isSpan() && r.phase() == Phase::Eval && r.step == 10)
            ++evalSpans[r.worker];
    for (int w = 0; w < workers; ++w)
        QVERIFY2(evalSpans[std::size_t(w)] == 1, qPrintable(QStringLiteral("worker %1").arg(w)));
}

// The input pipeline's depth and cost change when batches are made, never which: the trained
// parameters are the same bit for bit.
void TestSync::prefetchDepthKeepsTheRun()
{
    json c = small(2, 8, "momentum", true);
    c["data"]["prefetch"] = 0;
    const auto reference = runToEnd(c)->finalParams();
    for (int depth : {1, 3}) {
        c["data"]["prefetch"] = depth;
        c["data"]["cost_us"] = depth == 3 ? 10 : 0;
        auto e = runToEnd(c);
        QCOMPARE(e->state(), RunState::Finished);
        QCOMPARE(e->finalParams(), reference);
    }
}

// A batch that takes far longer to prepare (8 samples x 4 ms) than to compute: the steps after
// the first find it not ready and wait for it, recorded as input waits, not barrier stalls;
// the batches themselves are assembled on the data lane.
void TestSync::inputBoundStepsWaitForData()
{
    json c = small(1, 8, "sgd", false);
    c["train"]["steps"] = 6;
    c["data"]["prefetch"] = 1;
    c["data"]["cost_us"] = 4000;
    auto e = runToEnd(c);
    QCOMPARE(e->state(), RunState::Finished);
    std::int64_t waited = 0, gathered = 0;
    int dataLane = 0;
    for (const auto &r : e->events().all()) {
        if (!r.isSpan())
            continue;
        if (r.phase() == Phase::InputWait) {
            QCOMPARE(r.lane(), Lane::Compute);
            QVERIFY(!r.isStall());
            waited += r.duration();
        }
        if (r.phase() == Phase::Data && r.lane() == Lane::Data) {
            ++dataLane;
            gathered += r.duration();
            QVERIFY2(r.duration() >= 32000000, "8 samples at 4 ms each take 32 ms at least");
        }
    }
    QCOMPARE(dataLane, 6);
    // Six batches of 32 ms each were made while the steps took microseconds: the steps waited
    // for nearly all of it (all but the first batch's head start, less than one batch).
    QVERIFY2(waited >= gathered - 2 * 40000000,
             qPrintable(QStringLiteral("waited %1 ms of %2 ms gathered").arg(waited / 1e6).arg(gathered / 1e6)));
}

// Synchronised batch norm through the engine: four workers of 8 normalise, step and keep running
// statistics exactly as one worker of 32 (the divergence between replicas is 0); local batch
// norm does not, and its replicas' running statistics drift apart.
void TestSync::syncBatchNormEqualsOneBigBatch()
{
    auto run = [](int workers, int batch, const char *bn) {
        json c = small(workers, batch, "momentum", true);
        c["model"]["batchnorm"] = bn;
        c["eval"]["samples"] = 64;
        return runToEnd(c);
    };
    auto four = run(4, 8, "sync"), one = run(1, 32, "sync"), local = run(4, 8, "local");
    QCOMPARE(four->state(), RunState::Finished);
    QCOMPARE(local->state(), RunState::Finished);
    const double same = maxAbsoluteDifference(four->finalParams(), one->finalParams());
    QVERIFY2(same < 1e-5, qPrintable(QStringLiteral("sync BN vs one big batch: %1").arg(same)));
    const double apart = maxAbsoluteDifference(local->finalParams(), one->finalParams());
    QVERIFY2(apart > 1e-3, qPrintable(QStringLiteral("local BN vs one big batch: %1").arg(apart)));
    auto divergence = [](Engine &e) {
        double most = 0;
        int samples = 0;
        for (const auto &r : e.events().all())
            if (!r.isSpan() && r.counter() == CounterId::BnDivergence) {
                most = std::max(most, r.value);
                ++samples;
            }
        return std::make_pair(samples, most);
    };
    QCOMPARE(divergence(*four), std::make_pair(4 * 25, 0.0));
    const auto [n, most] = divergence(*local);
    QCOMPARE(n, 4 * 25);
    QVERIFY2(most > 1e-4, qPrintable(QString::number(most)));
    // Evaluated with running statistics: the same held-out loss as the single worker's.
    QVERIFY(!four->evalHistory().empty());
    QVERIFY(std::abs(four->evalHistory().back().loss - one->evalHistory().back().loss) < 1e-4);
}

// The barrier that spins before it sleeps (two workers with a core each): every round opens
// only when all have arrived, each waiter learns the last arrival's time, whether it was still
// spinning (a 1 s spin) or asleep (no spin), and a cancel ends a spin or a sleep at once.
void TestSync::spinningBarrierOpensAndCancels()
{
    for (const std::int64_t spin : {std::int64_t(1'000'000'000), std::int64_t(0)}) {
        CancellableBarrier barrier(3, spin);
        std::atomic<int> arrived{0};
        std::atomic<bool> early{false};
        std::vector<std::int64_t> released(3 * 50, -1);
        auto party = [&](int p) {
            for (int round = 0; round < 50; ++round) {
                ++arrived;
                std::int64_t at = -1;
                if (!barrier.arriveAndWait(round * 10 + p, &at))
                    return;
                if (arrived.load() < 3 * (round + 1))
                    early = true;
                released[std::size_t(round * 3 + p)] = at;
            }
        };
        std::thread a(party, 0), b(party, 1);
        party(2);
        a.join();
        b.join();
        QVERIFY2(!early, "a waiter left before every party had arrived");
        for (int round = 0; round < 50; ++round) {
            const std::int64_t last = released[std::size_t(round * 3)];
            QVERIFY(last >= round * 10 && last < round * 10 + 3);
            QCOMPARE(released[std::size_t(round * 3 + 1)], last);
            QCOMPARE(released[std::size_t(round * 3 + 2)], last);
        }
        // One party waits (spinning or asleep) until cancelled; a later arrival is refused.
        CancellableBarrier lonely(2, spin);
        std::atomic<int> result{-1};
        std::thread waiter([&] { result = lonely.arriveAndWait() ? 1 : 0; });
        lonely.cancel();
        waiter.join();
        QCOMPARE(result.load(), 0);
        QVERIFY(!lonely.arriveAndWait());
    }
}

QTEST_APPLESS_MAIN(TestSync)
#include "tst_sync.moc"
