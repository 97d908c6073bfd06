// Start/stop cycles at random moments in every mode, through the engine itself and through the
// GUI's RunController: every stop is honoured, and every run directory opens as a stopped run
// (not an interrupted one), with spans whenever a step was done. Also the window closing on a
// running run (the controller destroyed mid-run). SYNCOPATE_SOAK_CYCLES sets the cycles per mode
// and front end (8 by default, for CI; 200 by hand), SYNCOPATE_SOAK_SEED the moments of stopping.
// Built without the UI (the asan and tsan presets) it soaks the engine alone, so that
// LeakSanitizer and ThreadSanitizer see every cycle.
#include "testutil.h"
#ifdef SYNCOPATE_SOAK_CONTROLLER
#include "runcontroller.h"
#endif

#include <QElapsedTimer>
#include <QSignalSpy>
#include <QTemporaryDir>

#include <algorithm>
#include <random>

using namespace syncopate;
using namespace syncopate::test;
using nlohmann::json;

class TestSoak : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void startStopCycles_data();
    void startStopCycles();
    void destroyedWhileRunning_data();
    void destroyedWhileRunning();
    void cleanupTestCase();

private:
    int m_cycles = 8;
    std::uint32_t m_seed = 1;
    double m_maxStopMs[2] = {0, 0}; // [engine, controller]
    double m_sumStopMs[2] = {0, 0};
    int m_stops[2] = {0, 0};
};

namespace {

enum FrontEnd { EngineFront, ControllerFront };
const char *frontName(int f) { return f == EngineFront ? "engine" : "controller"; }
#ifdef SYNCOPATE_SOAK_CONTROLLER
constexpr int kFronts[] = {EngineFront, ControllerFront};
#else
constexpr int kFronts[] = {EngineFront};
#endif

const char *const kModes[] = {"sync", "async", "async-bounded", "checkpointed"};
// The deadline only tells a hang from a stop; a stop that is honoured takes milliseconds, but
// ThreadSanitizer runs everything 5-15 times slower, and on a loaded 2-core machine a stop took
// over 10 s there once (then passed on a rerun): a longer deadline under it, still a hang detector.
#if defined(__SANITIZE_THREAD__)
constexpr int kStopDeadlineMs = 40000;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr int kStopDeadlineMs = 40000;
#else
constexpr int kStopDeadlineMs = 10000;
#endif
#else
constexpr int kStopDeadlineMs = 10000;
#endif
const QString kDeadline = QStringLiteral("%1 s").arg(kStopDeadlineMs / 1000);
// Stop after 0..kMaxWait steps (or 0..kMaxWait * 16 records): before the first step, inside
// the first ones, and well into the run.
constexpr int kMaxWait = 40;

// 16 workers on a tiny model, with far more steps than a cycle can reach, so only the stop
// ends the run. A held-out set evaluated every few steps puts eval spans in the mix.
json soakConfig(const QString &mode)
{
    json c{{"mode", mode.toStdString()},
           {"workers", 16},
           {"model", {{"layers", {8, 32, 4}}}},
           {"data", {{"source", "blobs"}, {"samples", 256}}},
           {"train", {{"steps", 10000000}, {"batch", 4}}},
           {"eval", {{"every", 25}, {"samples", 64}}}};
    if (mode == QLatin1String("async-bounded")) {
        c["mode"] = "async";
        c["async"] = {{"max_staleness", 2}};
    }
    if (mode == QLatin1String("checkpointed"))
        c["model"]["layers"] = {8, 32, 32, 32, 4}; // segments of two layers, so recompute happens
    return c;
}


// How far into the run to stop: a number of steps or of records, drawn from the seeded RNG.
struct StopPoint {
    bool records = false;
    std::int64_t count = 0;
    QString describe() const
    {
        return QStringLiteral("after %1 %2").arg(count).arg(records ? QStringLiteral("records")
                                                                    : QStringLiteral("steps"));
    }
};

StopPoint drawStopPoint(std::mt19937 &rng)
{
    StopPoint p;
    p.records = std::uniform_int_distribution<int>(0, 3)(rng) == 0;
    p.count = std::uniform_int_distribution<int>(0, kMaxWait)(rng) * (p.records ? 16 : 1);
    return p;
}

bool reached(const Engine &e, const StopPoint &p)
{
    return (p.records ? std::int64_t(e.events().size()) : e.progress()) >= p.count;
}

#ifdef SYNCOPATE_SOAK_CONTROLLER
// The runFailed messages a spy caught (QVERIFY2 builds its message even when it passes).
QString messages(const QSignalSpy &spy)
{
    QStringList all;
    for (const auto &args : spy)
        all << args.value(0).toString();
    return all.join(QStringLiteral("; "));
}
#endif

// What every stopped run leaves: a directory that opens as stopped, not interrupted, whole,
// with spans when a step was done. Empty when all holds, else what did not.
QString checkStoppedDirectory(const std::string &dir, std::int64_t progress)
{
    OpenedRun opened;
    try {
        opened = openRunDirectory(dir);
    } catch (const std::exception &e) {
        return QStringLiteral("the run directory does not open: ") + QString::fromStdString(e.what());
    }
    const std::string status = opened.summary.value("status", "");
    if (opened.interrupted || status != "stopped")
        return QStringLiteral("the directory's status is \"%1\"%2, not \"stopped\"")
            .arg(QString::fromStdString(status),
                 opened.interrupted ? QStringLiteral(" (interrupted)") : QString());
    if (opened.tornBytes != 0)
        return QStringLiteral("%1 torn bytes in the row files of a run that ended cleanly")
            .arg(opened.tornBytes);
    if (progress > 0 && opened.trace->spanCount() == 0)
        return QStringLiteral("%1 steps were done, but the directory holds no span").arg(progress);
    return {};
}

} // namespace

void TestSoak::initTestCase()
{
    bool ok = false;
    const int cycles = qEnvironmentVariableIntValue("SYNCOPATE_SOAK_CYCLES", &ok);
    if (ok && cycles > 0)
        m_cycles = cycles;
    const int seed = qEnvironmentVariableIntValue("SYNCOPATE_SOAK_SEED", &ok);
    if (ok)
        m_seed = std::uint32_t(seed);
    qInfo("%d cycles per mode and front end, seed %u (SYNCOPATE_SOAK_CYCLES, SYNCOPATE_SOAK_SEED)",
          m_cycles, m_seed);
}

void TestSoak::startStopCycles_data()
{
    QTest::addColumn<QString>("mode");
    QTest::addColumn<int>("front");
    for (const char *mode : kModes)
        for (int front : kFronts)
            QTest::addRow("%s, %s", mode, frontName(front)) << QString::fromLatin1(mode) << front;
}

void TestSoak::startStopCycles()
{
    QFETCH(QString, mode);
    QFETCH(int, front);
    // One stream per row, so a row's moments do not depend on which rows ran before it.
    std::mt19937 rng(m_seed * 1000003u + std::uint32_t(qHash(QString::fromLatin1(QTest::currentDataTag()))));
    const json config = soakConfig(mode);
    const PreparedRun prepared = prepareRun(config);
    QTemporaryDir runs;
    QVERIFY(runs.isValid());

    double maxMs = 0, sumMs = 0;
    for (int cycle = 0; cycle < m_cycles; ++cycle) {
        const StopPoint at = drawStopPoint(rng);
        const QString where = QStringLiteral("cycle %1, stop %2").arg(cycle).arg(at.describe());
        std::string dir;
        std::int64_t progress = 0;
        QElapsedTimer stopClock;
        if (front == EngineFront) {
            Engine e(prepared.config, prepared.train, prepared.eval);
            dir = QDir(runs.path()).filePath(QStringLiteral("run-%1").arg(cycle)).toStdString();
            e.setOutputDirectory(dir);
            e.start();
            QVERIFY2(QTest::qWaitFor([&] { return reached(e, at) || e.finished(); }, kStopDeadlineMs),
                     qPrintable(where + QStringLiteral(": the run made no progress for ") + kDeadline));
            QVERIFY2(!e.finished(), qPrintable(where + QStringLiteral(": the run ended by itself (") +
                                              QString::fromLatin1(runStateName(e.state())) +
                                              QStringLiteral("): ") + QString::fromStdString(e.error())));
            stopClock.start();
            e.requestStop();
            QVERIFY2(e.waitFor(std::chrono::milliseconds(kStopDeadlineMs)),
                     qPrintable(where + QStringLiteral(": the run did not stop within ") + kDeadline));
            const double ms = double(stopClock.nsecsElapsed()) / 1e6;
            maxMs = std::max(maxMs, ms);
            sumMs += ms;
            QVERIFY2(e.state() == RunState::Stopped,
                     qPrintable(where + QStringLiteral(": state ") + QString::fromLatin1(runStateName(e.state())) +
                                QStringLiteral(", error: ") + QString::fromStdString(e.error())));
            QVERIFY2(e.error().empty(), qPrintable(where + QStringLiteral(": ") + QString::fromStdString(e.error())));
            QCOMPARE(e.summary().value("status", ""), std::string("stopped"));
            progress = e.progress();
        } else {
#ifdef SYNCOPATE_SOAK_CONTROLLER
            RunController rc;
            QSignalSpy started(&rc, &RunController::runStarted);
            QSignalSpy finished(&rc, &RunController::runFinished);
            QSignalSpy failed(&rc, &RunController::runFailed);
            QVERIFY2(rc.start(config, QStringLiteral("soak %1").arg(cycle), runs.path()),
                     qPrintable(where + QStringLiteral(": ") + messages(failed)));
            QCOMPARE(started.count(), 1);
            const RunDataPtr run = rc.run();
            QVERIFY(run);
            dir = run->directory().toStdString();
            QVERIFY2(!dir.empty(), qPrintable(where + QStringLiteral(": the run has no directory")));
            Engine *e = rc.engine();
            QVERIFY2(QTest::qWaitFor([&] { return reached(*e, at) || e->finished(); }, kStopDeadlineMs),
                     qPrintable(where + QStringLiteral(": the run made no progress for ") + kDeadline));
            QVERIFY2(!e->finished(), qPrintable(where + QStringLiteral(": the run ended by itself")));
            // From the button to the controller saying the run ended (its poll is every 33 ms).
            stopClock.start();
            rc.stop();
            QVERIFY2(finished.count() == 1 || finished.wait(kStopDeadlineMs),
                     qPrintable(where + QStringLiteral(": runFinished did not come within ") + kDeadline + QStringLiteral(" of the stop")));
            const double ms = double(stopClock.nsecsElapsed()) / 1e6;
            maxMs = std::max(maxMs, ms);
            sumMs += ms;
            QCOMPARE(finished.count(), 1);
            QVERIFY2(failed.isEmpty(), qPrintable(where + QStringLiteral(": runFailed: ") + messages(failed)));
            QVERIFY2(run->state == RunState::Stopped,
                     qPrintable(where + QStringLiteral(": state ") +
                                QString::fromLatin1(runStateName(run->state)) + QStringLiteral(", error: ") + run->error));
            QVERIFY(!rc.isRunning());
            progress = e->progress();
#endif
        }
        const QString problem = checkStoppedDirectory(dir, progress);
        QVERIFY2(problem.isEmpty(), qPrintable(where + QStringLiteral(" (progress ") +
                                               QString::number(progress) + QStringLiteral("): ") + problem));
    }
    m_maxStopMs[front] = std::max(m_maxStopMs[front], maxMs);
    m_sumStopMs[front] += sumMs;
    m_stops[front] += m_cycles;
    qInfo("%s: %d cycles, stop latency max %.1f ms, mean %.1f ms", QTest::currentDataTag(), m_cycles,
          maxMs, sumMs / m_cycles);
}

void TestSoak::destroyedWhileRunning_data()
{
    QTest::addColumn<QString>("mode");
    QTest::addColumn<int>("front");
    for (const char *mode : kModes)
        for (int front : kFronts)
            QTest::addRow("%s, %s", mode, frontName(front)) << QString::fromLatin1(mode) << front;
}

// The window closes on a running run: whoever owns the engine is destroyed without a stop
// first. What was recorded is kept as a stopped run, not left as a "running" (interrupted) one.
void TestSoak::destroyedWhileRunning()
{
    QFETCH(QString, mode);
    QFETCH(int, front);
    const json config = soakConfig(mode);
    QTemporaryDir runs;
    QVERIFY(runs.isValid());
    std::string dir;
    std::int64_t progress = 0;
    if (front == EngineFront) {
        const PreparedRun prepared = prepareRun(config);
        auto e = std::make_unique<Engine>(prepared.config, prepared.train, prepared.eval);
        dir = QDir(runs.path()).filePath(QStringLiteral("run")).toStdString();
        e->setOutputDirectory(dir);
        e->start();
        QVERIFY2(QTest::qWaitFor([&] { return e->progress() >= 5 || e->finished(); }, kStopDeadlineMs),
                 qPrintable(QStringLiteral("the run made no progress for ") + kDeadline));
        QVERIFY(!e->finished());
        QElapsedTimer clock;
        clock.start();
        e.reset();
        progress = 5; // at least: the destructor is the only way left to ask
        qInfo("engine destroyed mid-run in %.1f ms", double(clock.nsecsElapsed()) / 1e6);
    } else {
#ifdef SYNCOPATE_SOAK_CONTROLLER
        auto rc = std::make_unique<RunController>();
        QSignalSpy failed(rc.get(), &RunController::runFailed);
        QVERIFY2(rc->start(config, QStringLiteral("closing"), runs.path()),
                 qPrintable(messages(failed)));
        dir = rc->run()->directory().toStdString();
        Engine *e = rc->engine();
        QVERIFY2(QTest::qWaitFor([&] { return e->progress() >= 5 || e->finished(); }, kStopDeadlineMs),
                 qPrintable(QStringLiteral("the run made no progress for ") + kDeadline));
        QVERIFY(!e->finished());
        QElapsedTimer clock;
        clock.start();
        rc.reset();
        progress = 5;
        qInfo("controller destroyed mid-run in %.1f ms", double(clock.nsecsElapsed()) / 1e6);
#endif
    }
    const QString problem = checkStoppedDirectory(dir, progress);
    QVERIFY2(problem.isEmpty(), qPrintable(problem));
}

void TestSoak::cleanupTestCase()
{
    for (int f : kFronts)
        if (m_stops[f] > 0)
            qInfo("%s: %d stops, latency max %.1f ms, mean %.1f ms", frontName(f), m_stops[f],
                  m_maxStopMs[f], m_sumStopMs[f] / m_stops[f]);
}

QTEST_MAIN(TestSoak)
#include "tst_soak.moc"
