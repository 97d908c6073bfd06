// Stop is prompt from every blocking state, and a failing worker ends the run with a message
// naming worker, step and phase while keeping what was recorded.
#include "gpubackend.h"
#include "testutil.h"

using namespace syncopate;
using namespace syncopate::test;
using nlohmann::json;

class TestFaults : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void stopFromEveryBlockingState_data();
    void stopFromEveryBlockingState();
    void workerFaultAtEveryPhase_data();
    void workerFaultAtEveryPhase();
    void nonFiniteLossStopsTheRun();
    void missingGpuIsAnErrorOfTheDeviceKey();
};

static json sixteen(const char *mode)
{
    return json{{"mode", mode},
                {"workers", 16},
                {"model", {{"layers", {8, 16, 4}}}},
                {"data", {{"source", "blobs"}, {"samples", 256}}},
                {"train", {{"steps", 100000}, {"batch", 4}}},
                {"eval", {{"samples", 0}}}};
}

void TestFaults::stopFromEveryBlockingState_data()
{
    QTest::addColumn<QString>("mode");
    QTest::addColumn<QString>("state");
    QTest::newRow("sync: barrier behind a paused worker") << "sync" << "pause";
    QTest::newRow("sync: barrier behind a 1000x straggler") << "sync" << "delay";
    QTest::newRow("sync: running") << "sync" << "run";
    QTest::newRow("async: SSP wait behind a paused worker") << "async" << "ssp";
    QTest::newRow("async: server turn that never comes") << "async" << "script";
    QTest::newRow("async: running") << "async" << "run";
}

void TestFaults::stopFromEveryBlockingState()
{
    QFETCH(QString, mode);
    QFETCH(QString, state);
    json c = sixteen(mode.toLatin1().constData());
    c["train"]["steps"] = 100000000; // so that only the stop ends it, however fast the machine
    if (state == QLatin1String("ssp"))
        c["async"] = {{"max_staleness", 0}};
    if (state == QLatin1String("delay")) {
        std::vector<double> slow(16, 1.0);
        slow[5] = 1000.0;
        c["workers_slowdown"] = slow;
    }
    PreparedRun p = prepareRun(c);
    Engine e(p.config, p.train, p.eval);
    if (state == QLatin1String("pause") || state == QLatin1String("ssp"))
        e.setPaused(3, true);
    if (state == QLatin1String("script"))
        e.scriptServerOrder({1, 2, 3, -16}); // worker 15 never gets to pull, so never pushes
    e.start();
    // Waits for the state itself, never for a time: the workers have recorded spans (so a
    // blocking state is reached or about to be: the paused or scripted worker keeps the others
    // from going on), and a running run has done steps.
    const bool running = state == QLatin1String("run");
    QVERIFY2(QTest::qWaitFor([&] { return (running ? e.progress() >= 20 : e.events().size() >= 16) || e.finished(); }, 30000),
             "the workers recorded nothing for 30 s");
    QCOMPARE(e.state(), RunState::Running);
    // A stop that is honoured ends the run in milliseconds. The deadline only tells a hang from
    // a stop, so it is generous for a loaded machine.
    e.requestStop();
    QVERIFY2(e.waitFor(std::chrono::seconds(30)), "the run did not stop within 30 s of the request");
    QCOMPARE(e.state(), RunState::Stopped);
    QVERIFY(e.error().empty());
    QVERIFY(e.events().size() > 0);
    // What ran can still be written out.
    QCOMPARE(e.summary()["status"].get<std::string>(), std::string("stopped"));
}

void TestFaults::workerFaultAtEveryPhase_data()
{
    QTest::addColumn<QString>("mode");
    QTest::addColumn<int>("phase");
    for (Phase p : {Phase::Data, Phase::Forward, Phase::Backward, Phase::Delay, Phase::Wait,
                    Phase::Reduce, Phase::Apply})
        QTest::newRow(qPrintable(QStringLiteral("sync ") + QLatin1String(phaseName(p))))
            << "sync" << int(p);
    for (Phase p : {Phase::Pull, Phase::Data, Phase::Forward, Phase::Backward, Phase::Delay,
                    Phase::Push})
        QTest::newRow(qPrintable(QStringLiteral("async ") + QLatin1String(phaseName(p))))
            << "async" << int(p);
}

void TestFaults::workerFaultAtEveryPhase()
{
    QFETCH(QString, mode);
    QFETCH(int, phase);
    json c = sixteen(mode.toLatin1().constData());
    c["workers"] = 4;
    // The fault ends the run long before this; in async mode the others cannot finish it
    // before worker 1, however late its thread starts, reaches step 3.
    c["model"]["layers"] = {8, 64, 4};
    c["workers_slowdown"] = {1, 3, 1, 1}; // so that a delay phase exists
    PreparedRun p = prepareRun(c);
    Engine e(p.config, p.train, p.eval);
    e.injectFault(1, 3, Phase(phase));
    e.start();
    QVERIFY(e.waitFor(std::chrono::seconds(10)));
    QCOMPARE(e.state(), RunState::Failed);
    const QString expected = QStringLiteral("worker 1 failed at step 3 (%1): injected fault")
                                 .arg(QLatin1String(phaseName(Phase(phase))));
    QCOMPARE(QString::fromStdString(e.error()), expected);
    // The trace up to the failure is kept, including worker 1's earlier steps.
    bool sawEarlierStep = false;
    for (const auto &r : e.events().all())
        sawEarlierStep = sawEarlierStep || (r.worker == 1 && r.isSpan() && r.step == 2);
    QVERIFY(sawEarlierStep);
    const auto summary = e.summary();
    QCOMPARE(summary["status"].get<std::string>(), std::string("failed"));
    QVERIFY(summary.contains("error"));
}

void TestFaults::nonFiniteLossStopsTheRun()
{
    json c = sixteen("sync");
    c["workers"] = 2;
    c["train"] = {{"steps", 200}, {"batch", 8}, {"lr", 1e5}};
    auto e = runToEnd(c);
    QCOMPARE(e->state(), RunState::Failed);
    const QString error = QString::fromStdString(e->error());
    QVERIFY2(error.contains(QStringLiteral("(forward): the loss is")), qPrintable(error));
    QVERIFY2(error.startsWith(QStringLiteral("worker ")), qPrintable(error));
}

void TestFaults::missingGpuIsAnErrorOfTheDeviceKey()
{
    GpuBackend *backend = gpuBackend();
    if (backend && !backend->devices().empty())
        QSKIP("a GPU is present: tst_gpu covers running on it");
    PreparedRun p = prepareRun(json{{"device", "cuda"}, {"eval", {{"samples", 0}}}});
    try {
        Engine e(p.config, p.train, p.eval);
        QFAIL("an engine was built on a GPU that is not there");
    } catch (const ConfigError &e) {
        const std::string what = e.what();
        QCOMPARE(e.fields(), std::vector<std::string>{"device"});
        QVERIFY2(what.rfind("device = \"cuda\": ", 0) == 0, e.what());
        // Either no backend in this build or no device under it, said in so many words.
        QVERIFY2(what.find("no CUDA backend") != std::string::npos ||
                     what.find("no CUDA device is present") != std::string::npos,
                 e.what());
    }
}

QTEST_APPLESS_MAIN(TestFaults)
#include "tst_faults.moc"
