// The async strategy: one worker is plain SGD, staleness follows hand-worked schedules (equal
// workers taking turns see W-1), free-running staleness counts the pushes between a pull and
// its push, and the stale-synchronous bound holds. The evaluator scores the server's snapshots
// on a thread and a row of its own, skips by its policy when it falls behind, and ends with
// the run however it ends.
#include "cpu/cpudevice.h"
#include "model.h"
#include "runstore.h"
#include "testutil.h"

#include <QTemporaryDir>

#include <fstream>
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
    void evaluationUsesServerSnapshots_data();
    void evaluationUsesServerSnapshots();
    void evaluatorHasItsOwnRow();
    void slowEvaluatorSkipsTheNewestWaiting();
    void evaluatorEndsWithTheRun_data();
    void evaluatorEndsWithTheRun();
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

// Equal workers taking turns: all pull, then each pushes and pulls again in turn; a worker's
// last push is not followed by a pull.
static std::vector<int> roundRobin(int workers, int updates)
{
    std::vector<int> script;
    for (int w = 1; w <= workers; ++w)
        script.push_back(w);
    for (int u = 0; u < updates; ++u) {
        const int w = u % workers + 1;
        script.push_back(-w);
        if (u + workers < updates)
            script.push_back(w);
    }
    return script;
}

// The script up to its n-th push: what the server does until version n.
static std::vector<int> untilPush(const std::vector<int> &script, int n)
{
    std::vector<int> out;
    for (int op : script) {
        if (n == 0)
            break;
        out.push_back(op);
        n -= op < 0 ? 1 : 0;
    }
    return out;
}

static std::unique_ptr<Engine> scriptedRun(const json &c, const std::vector<int> &script)
{
    PreparedRun p = prepareRun(c);
    auto e = std::make_unique<Engine>(p.config, p.train, p.eval);
    e->scriptServerOrder(script);
    e->start();
    if (!e->waitFor(std::chrono::seconds(60)))
        qFatal("the scripted run did not finish in 60 s");
    return e;
}

void TestAsync::evaluationUsesServerSnapshots_data()
{
    QTest::addColumn<QString>("batchnorm");
    QTest::newRow("plain") << "none";
    QTest::newRow("batch norm") << "local";
}

void TestAsync::evaluationUsesServerSnapshots()
{
    // Three workers taking turns, 12 updates, evaluations due at versions 4 and 8 and the last.
    // A run stopped at v updates by the same script ends with the server's parameters at
    // version v: the evaluator's score of v equals this test's own evaluation of them (and,
    // with batch norm, whose running statistics this test cannot see, that run's own final
    // score: the snapshot taken mid-run holds the statistics of version v, not later ones).
    QFETCH(QString, batchnorm);
    constexpr int workers = 3, updates = 12;
    json c = base(workers, updates);
    c["model"]["batchnorm"] = batchnorm.toStdString();
    c["eval"] = {{"samples", 300}, {"every", 4}};
    const auto script = roundRobin(workers, updates);
    const auto full = scriptedRun(c, script);
    QCOMPARE(full->state(), RunState::Finished);
    const auto evals = full->evalHistory();
    QCOMPARE(int(evals.size()), 3);
    PreparedRun p = prepareRun(c);
    ModelSpec spec{p.config.layers, parseActivation(p.config.activation), p.config.classification(), 0};
    spec.batchNorm = batchnorm != QLatin1String("none");
    for (std::size_t i = 0; i < evals.size(); ++i) {
        const int v = 4 * int(i + 1);
        QCOMPARE(evals[i].step, std::int64_t(v));
        json cv = c;
        cv["train"]["steps"] = v;
        const auto atV = v == updates ? nullptr : scriptedRun(cv, untilPush(script, v));
        const Engine &server = atV ? *atV : *full;
        QCOMPARE(server.state(), RunState::Finished);
        const auto own = server.evalHistory();
        QCOMPARE(own.back().step, std::int64_t(v));
        QCOMPARE(own.back().loss, evals[i].loss);
        if (spec.batchNorm)
            continue;
        CpuDevice device;
        Model model(device, spec, p.config.batch);
        model.setParams(server.finalParams());
        const EvalResult r = model.evaluate(p.eval->x.data(), p.eval->labels.data(), p.eval->y.data(),
                                            p.eval->samples);
        QVERIFY2(std::abs(r.loss - evals[i].loss) <= 1e-6 * std::max(1.0, std::abs(r.loss)),
                 qPrintable(QStringLiteral("version %1: the evaluator scored %2, the parameters score %3")
                                .arg(v).arg(evals[i].loss, 0, 'g', 17).arg(r.loss, 0, 'g', 17)));
        QCOMPARE(evals[i].accuracy, r.accuracy);
    }
    // The versions are told apart: the scores differ from one evaluation to the next.
    QVERIFY(evals[0].loss != evals[1].loss && evals[1].loss != evals[2].loss);
}

void TestAsync::evaluatorHasItsOwnRow()
{
    // Free-running: the workers record no evaluation at all; the evaluator (worker index 3, one
    // past the last) records one eval span per scored snapshot and the history's points, in
    // the run folder its own row, evaluator.syr, its own trace.json thread, and none of the
    // per-worker figures.
    constexpr int workers = 3;
    json c = base(workers, 60);
    c["eval"] = {{"samples", 300}, {"every", 10}};
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString() + "/run";
    const auto e = runToEnd(c, 60000, dir);
    QCOMPARE(e->state(), RunState::Finished);
    const auto evals = e->evalHistory();
    const auto summary = e->summary();
    // Six due (10 to 50, and 60 at the end); one the evaluator had no time for is skipped.
    QCOMPARE(std::int64_t(evals.size()) + summary["evals_skipped"].get<std::int64_t>(), std::int64_t(6));
    QCOMPARE(evals.back().step, std::int64_t(60));
    QCOMPARE(summary["eval"].size(), evals.size());
    for (const char *key : {"stall_ms_per_worker", "delay_ms_per_worker", "descheduled_ms_per_worker",
                            "input_wait_ms_per_worker"})
        QCOMPARE(int(summary[key].size()), workers);

    std::vector<Record> evalSpans, losses, accuracies;
    for (const Record &r : e->events().all()) {
        if (r.worker < workers) {
            QVERIFY2(!(r.isSpan() && r.phase() == Phase::Eval), "a worker recorded an evaluation");
            QVERIFY(r.isSpan() || (r.counter() != CounterId::EvalLoss && r.counter() != CounterId::EvalAccuracy));
            continue;
        }
        QCOMPARE(int(r.worker), workers);
        if (r.isSpan()) {
            QCOMPARE(r.phase(), Phase::Eval);
            evalSpans.push_back(r);
        } else if (r.counter() == CounterId::EvalLoss) {
            losses.push_back(r);
        } else {
            QCOMPARE(r.counter(), CounterId::EvalAccuracy);
            accuracies.push_back(r);
        }
    }
    QCOMPARE(evalSpans.size(), evals.size());
    QCOMPARE(losses.size(), evals.size());
    QCOMPARE(accuracies.size(), evals.size());
    for (std::size_t i = 0; i < evals.size(); ++i) { // recorded in version order
        QCOMPARE(std::int64_t(evalSpans[i].step), evals[i].step);
        QCOMPARE(evalSpans[i].value, double(evals[i].step)); // the snapshot's version
        QCOMPARE(std::int64_t(losses[i].step), evals[i].step);
        QCOMPARE(losses[i].value, evals[i].loss);
        QCOMPARE(accuracies[i].value, evals[i].accuracy);
    }

    // The run folder: from the row files, then from the index they gave.
    QVERIFY(std::filesystem::exists(dir + "/evaluator.syr"));
    for (const bool indexed : {true, false}) {
        if (!indexed)
            std::filesystem::remove(dir + "/index.syi");
        const OpenedRun run = openRunDirectory(dir);
        const TraceModel &t = *run.trace;
        QCOMPARE(t.rowCount(), std::size_t(2 * workers + 1)); // each worker's and its prefetch lane
        const RowDescriptor &last = t.row(t.rowCount() - 1);
        QCOMPARE(last.kind, RowKind::Evaluator);
        QCOMPARE(last.worker, workers);
        QCOMPARE(last.name, std::string("evaluator"));
        std::vector<Record> spans;
        t.spansIn(t.rowCount() - 1, 0, t.endNs(), spans);
        QCOMPARE(spans.size(), evals.size());
        const auto &points = t.counter(CounterId::EvalLoss, workers);
        QCOMPARE(points.size(), evals.size());
        for (std::size_t i = 0; i < evals.size(); ++i) {
            QCOMPARE(std::int64_t(points[i].step), evals[i].step);
            QCOMPARE(points[i].value, evals[i].loss);
        }
        for (int w = 0; w < workers; ++w)
            QVERIFY(t.counter(CounterId::EvalLoss, w).empty());
        QCOMPARE(int(run.summary["stall_ms_per_worker"].size()), workers);
    }
    // trace.json: the evaluator is a thread of its own, named, with the eval spans.
    std::ifstream in(dir + "/trace.json");
    const json trace = json::parse(in);
    std::map<long long, std::string> names;
    std::map<long long, int> evalsPerThread;
    for (const auto &ev : trace["traceEvents"]) {
        if (ev["ph"] == "M" && ev["name"] == "thread_name")
            names[ev["tid"].get<long long>()] = ev["args"]["name"];
        else if (ev["ph"] == "X" && ev["name"] == "eval")
            ++evalsPerThread[ev["tid"].get<long long>()];
    }
    QCOMPARE(names[workers], std::string("evaluator"));
    QCOMPARE(evalsPerThread.size(), std::size_t(1));
    QCOMPARE(evalsPerThread[workers], int(evals.size()));
    // metrics.csv: rows of the workers only.
    std::ifstream csv(dir + "/metrics.csv");
    std::string line;
    std::getline(csv, line);
    while (std::getline(csv, line))
        QVERIFY2(std::stoi(line) < workers, line.c_str());
}

void TestAsync::slowEvaluatorSkipsTheNewestWaiting()
{
    // One worker, 12 updates, an evaluation due every 2; the evaluator is held on its first
    // snapshot (2) until the test lets it go. Its slots: 2 being scored, 4 and 6 waiting; 8
    // takes 6's slot, 10 takes 8's, and the final version 12 takes 10's: 6, 8 and 10 skipped.
    json c = base(1, 12);
    c["eval"] = {{"samples", 100}, {"every", 2}};
    PreparedRun p = prepareRun(c);
    Engine e(p.config, p.train, p.eval);
    e.holdEvaluator(true);
    e.start();
    const auto queued = [&] {
        const EvaluatorStatus st = e.evaluatorStatus();
        return st.scoring == 2 && st.pending == std::vector<std::int64_t>{4, 12} && st.skipped == 3;
    };
    QVERIFY2(QTest::qWaitFor(queued, 30000), "the evaluator's queue did not come to 2 | 4, 12 with 3 skipped");
    QVERIFY(e.evalHistory().empty()); // nothing scored while held
    QCOMPARE(e.state(), RunState::Running); // the run waits for its last evaluations
    e.holdEvaluator(false);
    QVERIFY(e.waitFor(std::chrono::seconds(30)));
    QCOMPARE(e.state(), RunState::Finished);
    std::vector<std::int64_t> scored;
    for (const EvalPoint &pt : e.evalHistory())
        scored.push_back(pt.step);
    QCOMPARE(scored, (std::vector<std::int64_t>{2, 4, 12}));
    QCOMPARE(e.summary()["evals_skipped"].get<std::int64_t>(), std::int64_t(3));
    QCOMPARE(e.summary()["final_eval_loss"].get<double>(), e.evalHistory().back().loss);
    const EvaluatorStatus st = e.evaluatorStatus();
    QVERIFY(st.active && st.pending.empty() && st.scoring < 0);
}

void TestAsync::evaluatorEndsWithTheRun_data()
{
    QTest::addColumn<QString>("end");
    QTest::newRow("stopped while it scores") << "stop";
    QTest::newRow("stopped while it is held") << "stop held";
    QTest::newRow("a worker fails") << "worker fault";
    QTest::newRow("the evaluator fails") << "evaluator fault";
}

void TestAsync::evaluatorEndsWithTheRun()
{
    // However the run ends, the evaluator is joined (waitFor returns) and what it recorded is
    // kept: an eval span and a loss point per evaluation in the history.
    QFETCH(QString, end);
    constexpr int workers = 3;
    json c = base(workers, 100000000); // only the stop or the failure ends it
    c["eval"] = {{"samples", 300}, {"every", 2}};
    PreparedRun p = prepareRun(c);
    Engine e(p.config, p.train, p.eval);
    if (end == QLatin1String("stop held"))
        e.holdEvaluator(true);
    if (end == QLatin1String("worker fault"))
        e.injectFault(1, 30, Phase::Forward);
    if (end == QLatin1String("evaluator fault"))
        // The evaluator's snapshot of version 4: the two oldest are never skipped (only the
        // newest waiting one is, and three slots leave room for two waiting).
        e.injectFault(workers, 4, Phase::Eval);
    e.start();
    if (end.startsWith(QLatin1String("stop"))) {
        const bool held = end.endsWith(QLatin1String("held"));
        QVERIFY(QTest::qWaitFor([&] { return held ? e.evaluatorStatus().scoring >= 0 : e.evalHistory().size() >= 3; }, 30000));
        QCOMPARE(e.state(), RunState::Running);
        e.requestStop();
    }
    QVERIFY2(e.waitFor(std::chrono::seconds(30)), "the run did not end within 30 s");
    if (end.startsWith(QLatin1String("stop"))) {
        QCOMPARE(e.state(), RunState::Stopped);
        QVERIFY(e.error().empty());
    } else {
        QCOMPARE(e.state(), RunState::Failed);
        const QString expected = end == QLatin1String("worker fault")
                                     ? QStringLiteral("worker 1 failed at step 30 (forward): injected fault")
                                     : QStringLiteral("the evaluator failed at step 4 (eval): injected fault");
        QCOMPARE(QString::fromStdString(e.error()), expected);
    }
    const auto evals = e.evalHistory();
    int spans = 0, losses = 0;
    for (const Record &r : e.events().all()) {
        if (r.worker != workers)
            continue;
        spans += r.isSpan() ? 1 : 0;
        losses += !r.isSpan() && r.counter() == CounterId::EvalLoss ? 1 : 0;
    }
    QCOMPARE(spans, int(evals.size()));
    QCOMPARE(losses, int(evals.size()));
    if (end == QLatin1String("stop held"))
        QVERIFY(evals.empty());
    if (end == QLatin1String("evaluator fault")) // 2 scored before it, none after
        QCOMPARE(int(evals.size()), 1);
    const EvaluatorStatus st = e.evaluatorStatus();
    QVERIFY(st.active && st.scoring < 0);
    QCOMPARE(e.summary()["status"].get<std::string>(), std::string(end.startsWith(QLatin1String("stop")) ? "stopped" : "failed"));
}

QTEST_APPLESS_MAIN(TestAsync)
#include "tst_async.moc"
