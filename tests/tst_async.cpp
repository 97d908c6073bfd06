// The async strategy: one worker is plain SGD, staleness follows hand-worked schedules (equal
// workers taking turns see W-1), free-running staleness counts the pushes between a pull and
// its push, and the stale-synchronous bound holds.
#include "testutil.h"
#include <limits>

using namespace syncopate;
using namespace syncopate::test;
using nlohmann::json;

class TestAsync : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void oneWorkerIsPlainSgd();
    void scriptedStaleness_data();
    void scriptedStaleness();
    void stalenessAwareRate();
    void equalWorkersSeeWMinusOne();
    void stalenessCountsOtherPushes();
    void staleSynchronousBound();
    void evaluationUsesServerSnapshots();
};

static json base(int workers, int steps)
{
    return json{{"mode", "async"},
                {"workers", workers},
                {"model", {{"layers", {12, 32, 4}}}},
                {"data", {{"source", "blobs"}, {"samples", 256}}},
                {"train", {{"steps", steps}, {"batch", 8}, {"lr", 0.05}}},
                {"eval", {{"samples", 0}}}};
}

// Staleness of each update in the order the server applied them.
static std::vector<int> stalenessInOrder(const Engine &e)
{
    std::vector<std::pair<std::int64_t, int>> pushes;
    for (const auto &r : e.events().all())
        if (r.isSpan() && r.phase() == Phase::Push)
            pushes.emplace_back(r.start, int(r.value));
    std::sort(pushes.begin(), pushes.end());
    std::vector<int> out;
    for (auto &p : pushes)
        out.push_back(p.second);
    return out;
}

void TestAsync::oneWorkerIsPlainSgd()
{
    json a = base(1, 30);
    json s = a;
    s["mode"] = "sync";
    auto asyncRun = runToEnd(a), syncRun = runToEnd(s);
    QCOMPARE(asyncRun->state(), RunState::Finished);
    QCOMPARE(asyncRun->finalParams(), syncRun->finalParams());
    for (int st : stalenessInOrder(*asyncRun))
        QCOMPARE(st, 0);
    QCOMPARE(int(stalenessInOrder(*asyncRun).size()), 30);
}

void TestAsync::scriptedStaleness_data()
{
    QTest::addColumn<int>("workers");
    QTest::addColumn<QList<int>>("script");
    QTest::addColumn<QList<int>>("expected");
    // +w pull by worker w-1, -w push. Worked out by hand: staleness = server version at the
    // push - version pulled.
    QTest::newRow("round robin, all pull first")
        << 3 << QList<int>{1, 2, 3, -1, -2, -3, 1, 2, 3, -1, -2, -3}
        << QList<int>{0, 1, 2, 0, 1, 2};
    QTest::newRow("pull right after push")
        << 2 << QList<int>{1, 2, -1, 1, -2, 2, -1, 1, -2, 2}
        << QList<int>{0, 1, 1, 1};
    QTest::newRow("one worker laps the other")
        << 2 << QList<int>{1, 2, -1, 1, -1, 1, -1, 1, -2, 2, -1}
        << QList<int>{0, 0, 0, 3, 1};
}

void TestAsync::scriptedStaleness()
{
    QFETCH(int, workers);
    QFETCH(QList<int>, script);
    QFETCH(QList<int>, expected);
    PreparedRun p = prepareRun(base(workers, int(expected.size())));
    Engine e(p.config, p.train, p.eval);
    e.scriptServerOrder(std::vector<int>(script.begin(), script.end()));
    e.start();
    QVERIFY(e.waitFor(std::chrono::seconds(30)));
    QCOMPARE(e.state(), RunState::Finished);
    const auto got = stalenessInOrder(e);
    QCOMPARE(QList<int>(got.begin(), got.end()), expected);
}

void TestAsync::stalenessAwareRate()
{
    // lr / max(1, staleness) changes nothing while staleness stays at 0 or 1, and halves an
    // update whose staleness is 2.
    json c = base(2, 4);
    const std::vector<int> staleSchedule = {1, 2, -1, -2, 1, 2, -1, -2};
    auto run = [&](bool aware, const std::vector<int> &script) {
        json cc = c;
        cc["async"] = {{"staleness_lr", aware}};
        PreparedRun p = prepareRun(cc);
        auto e = std::make_unique<Engine>(p.config, p.train, p.eval);
        e->scriptServerOrder(script);
        e->start();
        e->waitFor(std::chrono::seconds(30));
        return e->finalParams();
    };
    // Staleness 0 and 1 only: 1/max(1, s) is 1 for both, so the results agree.
    QCOMPARE(run(true, staleSchedule), run(false, staleSchedule));
    // With staleness 2 the aware rate halves that update.
    c["workers"] = 3;
    c["train"]["steps"] = 3;
    const std::vector<int> stale2 = {1, 2, 3, -1, -2, -3};
    QVERIFY(run(true, stale2) != run(false, stale2));
}

void TestAsync::equalWorkersSeeWMinusOne()
{
    // Four equal workers taking turns: each pulls right after its own push, so three other
    // pushes land before its next one. Worked out by hand: 0, 1, 2, 3 while the first pulls
    // drain, then 3 for every update. The schedule is scripted because free-running threads on
    // a machine with fewer cores than workers run in bursts, and the mean then depends on the
    // scheduler, not on the algorithm.
    constexpr int workers = 4, rounds = 25;
    std::vector<int> script = {1, 2, 3, 4};
    for (int r = 0; r < rounds; ++r)
        for (int w = 1; w <= workers; ++w) {
            script.push_back(-w);
            script.push_back(w);
        }
    for (int w = 1; w <= workers; ++w)
        script.push_back(-w);
    const int updates = workers * (rounds + 1);
    PreparedRun p = prepareRun(base(workers, updates));
    Engine e(p.config, p.train, p.eval);
    e.scriptServerOrder(script);
    e.start();
    QVERIFY(e.waitFor(std::chrono::seconds(30)));
    QCOMPARE(e.state(), RunState::Finished);
    std::vector<int> expected = {0, 1, 2};
    expected.resize(std::size_t(updates), workers - 1);
    QCOMPARE(stalenessInOrder(e), expected);
}

void TestAsync::stalenessCountsOtherPushes()
{
    // Free-running workers, whatever the scheduler does: the staleness recorded with a push
    // equals the number of pushes the trace shows between that worker's pull and its push, and
    // the version recorded with a pull equals the number of pushes before it.
    json c = base(4, 400);
    c["model"]["layers"] = {12, 64, 4};
    auto e = runToEnd(c);
    QCOMPARE(e->state(), RunState::Finished);
    struct Span {
        std::int64_t start;
        int worker;
        Phase phase;
        double value;
    };
    std::vector<Span> spans;
    for (const auto &r : e->events().all())
        if (r.isSpan() && (r.phase() == Phase::Pull || r.phase() == Phase::Push))
            spans.push_back({r.start, int(r.worker), r.phase(), r.value});
    std::sort(spans.begin(), spans.end(),
              [](const Span &a, const Span &b) { return a.start < b.start; });
    std::vector<std::int64_t> pushesAtPull(4, -1);
    std::int64_t pushes = 0;
    int checked = 0;
    for (const Span &s : spans) {
        if (s.phase == Phase::Pull) {
            QCOMPARE(std::int64_t(s.value), pushes);
            pushesAtPull[std::size_t(s.worker)] = pushes;
        } else {
            QVERIFY(pushesAtPull[std::size_t(s.worker)] >= 0);
            QCOMPARE(std::int64_t(s.value), pushes - pushesAtPull[std::size_t(s.worker)]);
            pushesAtPull[std::size_t(s.worker)] = -1;
            ++pushes;
            ++checked;
        }
    }
    QCOMPARE(checked, 400);
}

void TestAsync::staleSynchronousBound()
{
    // Three workers, one much slower. Without a bound the fast ones run far ahead of the slow
    // one; with s = 1 no worker starts a step more than 1 ahead of the slowest, which caps
    // staleness at (W-1)(2s+1) = 6.
    json c = base(3, 90);
    c["model"]["layers"] = {12, 512, 512, 4};
    c["train"]["batch"] = 32;
    c["workers_slowdown"] = {1, 1, 8};

    // How far any worker ran ahead, from the trace: at each pull of worker w for its step k,
    // the largest (k - 1) - (steps some worker had pushed by then). The bound keeps it <= 0.
    const auto lead = [](const Engine &e) {
        std::vector<std::vector<std::int64_t>> pushEnds(3);
        std::vector<std::pair<std::int64_t, int>> pulls;
        for (const auto &r : e.events().all()) {
            if (!r.isSpan())
                continue;
            if (r.phase() == Phase::Push)
                pushEnds[r.worker].push_back(r.end);
            if (r.phase() == Phase::Pull)
                pulls.emplace_back(r.start, int(r.step));
        }
        for (auto &v : pushEnds)
            std::sort(v.begin(), v.end());
        std::int64_t most = std::numeric_limits<std::int64_t>::min();
        for (const auto &[t, k] : pulls)
            for (const auto &v : pushEnds) {
                const auto done = std::upper_bound(v.begin(), v.end(), t) - v.begin();
                most = std::max(most, std::int64_t(k - 1) - std::int64_t(done));
            }
        return most;
    };

    // The premise, without a bound: the fast workers run ahead. Measured as the lead rather
    // than as staleness, which needs the slow worker to push at all before the 90 updates are
    // done (its first step, with the kernels' set-up time slowed 8 times, may not).
    auto unbounded = runToEnd(c);
    QVERIFY2(lead(*unbounded) > 1, qPrintable(QStringLiteral("the unbounded run's lead is %1")
                                                  .arg(lead(*unbounded))));

    c["async"] = {{"max_staleness", 1}};
    auto bounded = runToEnd(c);
    const auto sb = stalenessInOrder(*bounded);
    QCOMPARE(int(sb.size()), 90);
    QVERIFY(*std::max_element(sb.begin(), sb.end()) <= 6);
    QVERIFY2(lead(*bounded) <= 0, qPrintable(QStringLiteral("a worker began a step while another "
                                                            "was %1 behind the bound")
                                                 .arg(lead(*bounded))));
}

void TestAsync::evaluationUsesServerSnapshots()
{
    json c = base(3, 60);
    c["eval"] = {{"samples", 300}, {"every", 20}};
    auto e = runToEnd(c);
    const auto evals = e->evalHistory();
    QCOMPARE(int(evals.size()), 3);
    QCOMPARE(evals[0].step, std::int64_t(20));
    QCOMPARE(evals[1].step, std::int64_t(40));
    QCOMPARE(evals.back().step, std::int64_t(60));
}

QTEST_APPLESS_MAIN(TestAsync)
#include "tst_async.moc"
