// Backup workers (sync.backup_workers): each step applies the mean of the first N - b gradients
// to arrive. Checked on scripted arrival orders worked out by hand, against a replay that
// computes each contributor's gradient on its own; b = 0 is plain sync; free-running runs keep
// the invariants that hold whatever the scheduler does.
#include "testutil.h"

#include "cpu/cpudevice.h"
#include "data.h"
#include "metrics.h"
#include "optimizer.h"

#include <map>
#include <set>

using namespace syncopate;
using namespace syncopate::test;
using nlohmann::json;

class TestBackup : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void configErrors_data();
    void configErrors();
    void zeroIsPlainSync();
    void scriptedArrivals();
    void pausedWorkerHoldsNobody();
    void freeRunningInvariants();
};

static json small(int workers, int backups, int steps)
{
    // One OpenMP thread per worker, as the replay uses: the GEMMs then sum in the same order.
    return json{{"workers", workers},
                {"device.threads_per_worker", 1},
                {"model", {{"layers", {12, 24, 4}}}},
                {"data", {{"source", "blobs"}, {"samples", 240}}},
                {"train", {{"steps", steps}, {"batch", 8}, {"optimizer", "momentum"}, {"lr", 0.05}}},
                {"sync", {{"backup_workers", backups}}},
                {"eval", {{"samples", 0}}}};
}

// The run redone step by step on one replica: round r's update is the mean, summed in worker
// order, of the gradients contributors[r] computed at round r's parameters.
static std::vector<float> replay(const PreparedRun &p, const std::vector<std::vector<int>> &contributors)
{
    const RunConfig &c = p.config;
    CpuDevice device(1);
    device.bindThread();
    ModelSpec spec{c.layers, parseActivation(c.activation), c.classification(), 0};
    Model model(device, spec, c.batch);
    model.setParams(Model::initialParams(spec, c.seed));
    const std::size_t n = spec.paramCount();
    Optimizer opt(device, Optimizer::parseKind(c.optimizer), n, float(c.lr), float(c.momentum));
    const BatchSampler sampler(p.train->samples, c.workers, c.batch, c.shuffle, c.seed);
    std::vector<float> x(std::size_t(c.batch) * std::size_t(p.train->features));
    std::vector<std::int32_t> labels(std::size_t(c.batch));
    for (std::size_t r = 0; r < contributors.size(); ++r) {
        std::vector<float> mean(n, 0.0f);
        bool first = true;
        for (int w : contributors[r]) {
            gatherBatch(*p.train, sampler, std::int64_t(r), w, c.batch, x.data(), labels.data(), nullptr);
            model.forwardLoss(x.data(), labels.data(), nullptr, nullptr, std::uint32_t(r));
            model.backward(nullptr, std::uint32_t(r));
            const auto g = model.gradsToHost();
            for (std::size_t i = 0; i < n; ++i)
                mean[i] = first ? g[i] : mean[i] + g[i];
            first = false;
        }
        const float inv = 1.0f / float(contributors[r].size());
        if (contributors[r].size() > 1)
            for (float &m : mean)
                m *= inv;
        opt.step(model.params(), mean.data());
    }
    return model.paramsToHost();
}

// (worker, step) of every span of phase p.
static std::set<std::pair<int, int>> spansOf(const Engine &e, Phase p)
{
    std::set<std::pair<int, int>> out;
    for (const Record &r : e.events().all())
        if (r.isSpan() && r.phase() == p)
            out.insert({int(r.worker), int(r.step)});
    return out;
}

static void checkReplicasEqual(const Engine &e)
{
    const auto first = e.replicaParams(0);
    QVERIFY(first != e.initialParams());
    for (int w = 1; w < e.config().workers; ++w)
        QVERIFY2(e.replicaParams(w) == first, qPrintable(QStringLiteral("replica %1 differs").arg(w)));
}

void TestBackup::configErrors_data()
{
    QTest::addColumn<int>("workers");
    QTest::addColumn<int>("backups");
    QTest::addColumn<QString>("mode");
    QTest::addColumn<QString>("says");
    QTest::newRow("as many as workers") << 3 << 3 << QStringLiteral("sync") << QStringLiteral("0 <= b < workers (3)");
    QTest::newRow("more than workers") << 2 << 5 << QStringLiteral("sync") << QStringLiteral("0 <= b < workers (2)");
    QTest::newRow("negative") << 2 << -1 << QStringLiteral("sync") << QStringLiteral("sync.backup_workers");
    QTest::newRow("async") << 4 << 1 << QStringLiteral("async") << QStringLiteral("async never waits");
}

void TestBackup::configErrors()
{
    QFETCH(int, workers);
    QFETCH(int, backups);
    QFETCH(QString, mode);
    QFETCH(QString, says);
    json c = small(workers, backups, 4);
    c["mode"] = mode.toStdString();
    try {
        parseConfig(c);
        QFAIL("accepted");
    } catch (const ConfigError &e) {
        const QString what = QString::fromStdString(e.what());
        QVERIFY2(what.contains(QStringLiteral("sync.backup_workers")), qPrintable(what));
        QVERIFY2(what.contains(says), qPrintable(what));
        QCOMPARE(e.fields(), std::vector<std::string>{"sync.backup_workers"});
    }
    // Checkpointed mode is sync with recomputation: it has backup workers too.
    json ok = small(3, 1, 4);
    ok["mode"] = "checkpointed";
    QCOMPARE(parseConfig(ok).backupWorkers, 1);
}

void TestBackup::zeroIsPlainSync()
{
    json plain = small(3, 0, 12);
    plain.erase("sync");
    auto a = runToEnd(plain), b = runToEnd(small(3, 0, 12));
    QCOMPARE(b->state(), RunState::Finished);
    QCOMPARE(a->finalParams(), b->finalParams());
    QCOMPARE(b->reduceAlgorithm(), a->reduceAlgorithm());
    QVERIFY(spansOf(*b, Phase::Dropped).empty());
    QVERIFY(!b->summary().contains("dropped_per_worker"));
    // Every worker reduced every step: the mean of all three.
    QCOMPARE(int(spansOf(*b, Phase::Reduce).size()), 3 * 12);
}

void TestBackup::scriptedArrivals()
{
    // Three workers, b = 1, worked by hand:
    //   round 0: 0, 1 fill it; 2 is late and goes on to round 1
    //   round 1: 2, 1 fill it; 0 is late and goes on to round 2
    //   rounds 2 and 3: 1, 2 fill both while 0 still computes round 2; 0 arrives late at
    //   round 2, applies rounds 2 and 3 and is done, never having computed round 3
    const std::vector<int> script = {0, 1, 2, 2, 1, 0, 1, 2, 1, 2, 0};
    const std::vector<std::vector<int>> contributors = {{0, 1}, {1, 2}, {1, 2}, {1, 2}};
    PreparedRun p = prepareRun(small(3, 1, 4));
    Engine e(p.config, p.train, p.eval);
    e.scriptSyncArrivals(script);
    e.start();
    QVERIFY(e.waitFor(std::chrono::seconds(60)));
    QCOMPARE(e.state(), RunState::Finished);
    QCOMPARE(e.progress(), std::int64_t(4));

    const std::set<std::pair<int, int>> dropped = {{2, 0}, {0, 1}, {0, 2}};
    QCOMPARE(spansOf(e, Phase::Dropped), dropped);
    std::set<std::pair<int, int>> reduced;
    for (std::size_t r = 0; r < contributors.size(); ++r)
        for (int w : contributors[r])
            reduced.insert({w, int(r)});
    QCOMPARE(spansOf(e, Phase::Reduce), reduced);
    // Worker 0 skipped computing round 3 but applied it; everyone applied every round.
    QVERIFY(!spansOf(e, Phase::Forward).count({0, 3}));
    QCOMPARE(int(spansOf(e, Phase::Apply).size()), 3 * 4);

    checkReplicasEqual(e);
    QCOMPARE(e.finalParams(), replay(p, contributors));

    const json s = computeMetrics(e.config(), e.events().all(), e.outcome()).summary;
    QCOMPARE(s["dropped_per_worker"].get<std::vector<int>>(), (std::vector<int>{2, 0, 1}));
    QCOMPARE(s["backup_workers"].get<int>(), 1);
}

void TestBackup::pausedWorkerHoldsNobody()
{
    // Worker 2 is paused before its first step: workers 0 and 1 fill every round and finish
    // without it. Unpaused, it computes round 0, is dropped, and applies all six rounds.
    constexpr int kSteps = 6;
    PreparedRun p = prepareRun(small(3, 1, kSteps));
    Engine e(p.config, p.train, p.eval);
    e.setPaused(2, true);
    e.start();
    QTRY_COMPARE_WITH_TIMEOUT(e.progress(), std::int64_t(kSteps), 60000);
    QVERIFY(!e.finished());
    e.setPaused(2, false);
    QVERIFY(e.waitFor(std::chrono::seconds(60)));
    QCOMPARE(e.state(), RunState::Finished);

    const std::set<std::pair<int, int>> dropped = {{2, 0}};
    QCOMPARE(spansOf(e, Phase::Dropped), dropped);
    checkReplicasEqual(e);
    QCOMPARE(e.finalParams(), replay(p, std::vector<std::vector<int>>(kSteps, {0, 1})));
    const json s = computeMetrics(e.config(), e.events().all(), e.outcome()).summary;
    QCOMPARE(s["dropped_per_worker"].get<std::vector<int>>(), (std::vector<int>{0, 0, 1}));
}

void TestBackup::freeRunningInvariants()
{
    // Whatever the scheduler does: each step has exactly N - b contributors, a worker either
    // contributed to or was dropped from each step it computed, and every replica ends equal.
    constexpr int kWorkers = 4, kBackups = 2, kSteps = 40;
    json c = small(kWorkers, kBackups, kSteps);
    c["workers_slowdown"] = {1, 1, 1, 4};
    auto e = runToEnd(c);
    QCOMPARE(e->state(), RunState::Finished);
    const auto reduced = spansOf(*e, Phase::Reduce), dropped = spansOf(*e, Phase::Dropped);
    const auto computed = spansOf(*e, Phase::Forward);
    std::map<int, int> perStep;
    for (const auto &[w, s] : reduced)
        ++perStep[s];
    QCOMPARE(int(perStep.size()), kSteps);
    for (const auto &[s, n] : perStep)
        QCOMPARE(n, kWorkers - kBackups);
    for (const auto &ws : computed)
        QVERIFY(reduced.count(ws) + dropped.count(ws) == 1);
    QCOMPARE(reduced.size() + dropped.size(), computed.size());
    QCOMPARE(int(spansOf(*e, Phase::Apply).size()), kWorkers * kSteps);
    checkReplicasEqual(*e);
    const json s = e->summary();
    int total = 0;
    for (const auto &d : s["dropped_per_worker"])
        total += d.get<int>();
    QCOMPARE(std::size_t(total), dropped.size());
}

QTEST_GUILESS_MAIN(TestBackup)
#include "tst_backup.moc"
