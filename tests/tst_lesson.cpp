// Help > Lesson: the text builders against hand-made summaries (figures named and rounded,
// an oversubscribed machine said so, unfair comparisons refused, missing fields survived), and
// one step run end to end from the panel's button in a main window on the offscreen platform.
#include "lesson.h"
#include "mainwindow.h"
#include "runcontroller.h"
#include "session.h"

#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QLabel>
#include <QListWidget>
#include <QLocale>
#include <QPushButton>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

using namespace syncopate;
using json = nlohmann::json;

namespace {

RunConfig presetConfig(const char *name)
{
    return parseConfig(readPresetFile(std::string(SYNCOPATE_PRESETS_DIR "/") + name + ".json").config);
}

// Figures as an oversubscribed machine (4 workers, 2 busy cores) measured them.
json baselineSummary()
{
    return {{"status", "finished"},         {"steps", 300},
            {"steps_completed", 300},       {"wall_s", 2.026786522},
            {"samples_per_s", 37892.49},    {"stall_fraction", 0.376337},
            {"stall_ms_per_worker", {767.55, 640.53, 853.56, 773.50}},
            {"descheduled_fraction", 0.33764}, {"stall_descheduled_fraction", 0.745929},
            {"peak_activation_bytes", 526848}, {"recompute_ms", 0.0}};
}

json stragglerSyncSummary()
{
    return {{"status", "finished"},
            {"steps", 300},
            {"steps_completed", 300},
            {"wall_s", 5.4548},
            {"samples_per_s", 14079.39},
            {"stall_fraction", 0.570491},
            {"stall_ms_per_worker", {3972.42, 3984.66, 3964.34, 495.27}},
            {"delay_ms_per_worker", {0.0, 0.0, 0.0, 3182.37}},
            {"descheduled_fraction", 0.18133},
            {"stall_descheduled_fraction", 0.428078},
            {"peak_activation_bytes", 526848}};
}

QString number(qint64 v) { return QLocale().toString(v); }

} // namespace

class TestLesson : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void layersFold();
    void baselineOnAnIdleMachine();
    void baselineOversubscribedSaysSo();
    void stragglerSyncNamesTheStraggler();
    void stragglerThatDidNotSetThePace();
    void asyncComparesWithSync();
    void boundHoldsOrIsReported();
    void checkpointingComparesOnlyTheSameModel();
    void backupWorkersComparesWithTheStraggler();
    void inputBoundComparesWithoutPrefetch();
    void batchNormComparesWithSync();
    void comparisonListsEveryRun();
    void stoppedRunSaysSo();
    void missingFieldsDoNotCrash_data();
    void missingFieldsDoNotCrash();
    void stepRunsFromThePanel();

private:
    QTemporaryDir m_dir;
};

void TestLesson::initTestCase()
{
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(m_dir.isValid());
    // The presets as installed, but the baseline short: the end-to-end run stays quick.
    const QString presets = m_dir.filePath(QStringLiteral("presets"));
    QVERIFY(QDir().mkpath(presets));
    const QDir source(QStringLiteral(SYNCOPATE_PRESETS_DIR));
    for (const QString &f : source.entryList({QStringLiteral("*.json")}, QDir::Files))
        QVERIFY(QFile::copy(source.filePath(f), presets + QLatin1Char('/') + f));
    for (const auto &[name, steps] : {std::pair{"default", 40}, std::pair{"checkpointing", 20}}) {
        const Preset p = readPresetFile(std::string(SYNCOPATE_PRESETS_DIR "/") + name + ".json");
        json preset = {{"title", p.title}, {"description", "short"}, {"config", p.config}};
        preset["config"]["train"]["steps"] = steps;
        preset["config"]["eval"]["every"] = steps / 2;
        QFile f(presets + QLatin1Char('/') + QLatin1String(name) + QStringLiteral(".json"));
        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        f.write(QByteArray::fromStdString(preset.dump(2)));
    }
    qputenv("SYNCOPATE_PRESETS", presets.toLocal8Bit());
}

void TestLesson::layersFold()
{
    QCOMPARE(layersText({64, 512, 512, 10}), QStringLiteral("64-512-512-10"));
    std::vector<int> deep{64};
    deep.insert(deep.end(), 16, 256);
    deep.push_back(10);
    QCOMPARE(layersText(deep), QStringLiteral("64-256x16-10"));
    QCOMPARE(layersText({}), QString());
}

void TestLesson::baselineOnAnIdleMachine()
{
    json s = baselineSummary();
    s["stall_fraction"] = 0.042;
    s["stall_descheduled_fraction"] = 0.05;
    s["descheduled_fraction"] = 0.01;
    const QString t = baselineFigures({s, presetConfig("default"), {}});
    QVERIFY2(t.contains(number(37892) + QStringLiteral(" samples/s")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("300 steps in 2.0 s")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("4.2% of their time")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("as expected")), qPrintable(t));
    QVERIFY2(!t.contains(QStringLiteral("off the CPU")), qPrintable(t));
}

void TestLesson::baselineOversubscribedSaysSo()
{
    const QString t = baselineFigures({baselineSummary(), presetConfig("default"), {}});
    QVERIFY2(t.contains(QStringLiteral("38% of their time")), qPrintable(t));
    // 767.55 + 640.53 + 853.56 + 773.50 ms over 4 workers and 300 steps.
    QVERIFY2(t.contains(QStringLiteral("2.5 ms per step")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("75%, was for a worker the OS was not running")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("off the CPU for 34%")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("descheduling explains more")), qPrintable(t));
    QVERIFY2(!t.contains(QStringLiteral("as expected")), qPrintable(t));
}

void TestLesson::stragglerSyncNamesTheStraggler()
{
    const LessonRun base{baselineSummary(), presetConfig("default"), {}};
    const QString t = stragglerSyncFigures({stragglerSyncSummary(), presetConfig("straggler-sync"), {}}, &base);
    QVERIFY2(t.contains(QStringLiteral("Worker 3 (slowed 3x)")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("delay of 11 ms")), qPrintable(t)); // 3182 ms / 300
    QVERIFY2(t.contains(QStringLiteral("the other 3 workers waited <b>13 ms per step</b>")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("worker 3 itself 1.7 ms")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("set everyone's pace")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("37% of the baseline's ") + number(37892)), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("57% of their time</b>, against 38% in step 1")), qPrintable(t));
    // 43% of the waits were for a descheduled worker: said, and not blamed on the straggler.
    QVERIFY2(t.contains(QStringLiteral("43% was for a worker the OS was not running")), qPrintable(t));

    // Step 1 with another model is no baseline: no ratio then.
    RunConfig other = presetConfig("default");
    other.layers = {64, 128, 10};
    const LessonRun unfair{baselineSummary(), other, {}};
    const QString u = stragglerSyncFigures({stragglerSyncSummary(), presetConfig("straggler-sync"), {}}, &unfair);
    QVERIFY2(!u.contains(QStringLiteral("baseline")), qPrintable(u));
}

void TestLesson::stragglerThatDidNotSetThePace()
{
    json s = stragglerSyncSummary();
    s["stall_ms_per_worker"] = {900.0, 950.0, 880.0, 800.0};
    s["stall_descheduled_fraction"] = 0.8;
    const QString t = stragglerSyncFigures({s, presetConfig("straggler-sync"), {}});
    QVERIFY2(t.contains(QStringLiteral("did not set the pace")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("80%, was for a worker the OS was not running")), qPrintable(t));
}

void TestLesson::asyncComparesWithSync()
{
    const json a = {{"status", "finished"},          {"steps", 1200},           {"steps_completed", 1200},
                    {"wall_s", 2.3326},              {"samples_per_s", 32925.1}, {"stall_fraction", 0.0051},
                    {"descheduled_fraction", 0.108}, {"staleness_mean", 2.92},  {"staleness_max", 25}};
    const LessonRun sync{stragglerSyncSummary(), presetConfig("straggler-sync"), {}};
    const QString t = stragglerAsyncFigures({a, presetConfig("straggler-async"), {2.3, 2.2, 2.4, 6.1}}, &sync);
    QVERIFY2(t.contains(QStringLiteral("2.34x the throughput of step 2")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("0.5% of their time")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("against 57% at the barrier")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("mean 2.9, max 25")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("Worker 3 (slowed 3x) pushed the stalest gradients: mean 6.1 against 2.3")),
             qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("off the CPU for 11%")), qPrintable(t));

    // Slower than sync, and the slow worker not the stalest: both said as they are.
    json slow = a;
    slow["samples_per_s"] = 12000.0;
    const QString u = stragglerAsyncFigures({slow, presetConfig("straggler-async"), {2.9, 3.0, 2.8, 3.1}}, &sync);
    QVERIFY2(u.contains(QStringLiteral("No faster than step 2")), qPrintable(u));
    QVERIFY2(u.contains(QStringLiteral("did not push clearly staler")), qPrintable(u));
}

void TestLesson::boundHoldsOrIsReported()
{
    json s = {{"status", "finished"}, {"steps_completed", 1200}, {"wall_s", 2.52},
              {"samples_per_s", 30420.0}, {"stall_fraction", 0.1854}, {"staleness_mean", 2.39},
              {"staleness_max", 9}, {"delay_ms_per_worker", {825.8, 990.9, 863.3, 864.0}},
              {"descheduled_fraction", 0.02}};
    const RunConfig bounded = presetConfig("bounded-staleness");
    QString t = boundedStalenessFigures({s, bounded, {}});
    QVERIFY2(t.contains(QStringLiteral("Mean staleness 2.4, max 9</b>, within the bound (2s+1)(N-1) = (2\u00d72+1)(4-1) = 15")),
             qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("19% of their time")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("886 ms of delay per worker")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("Run without the bound")), qPrintable(t));

    // The same jitter without the bound: the two compared.
    RunConfig free = bounded;
    free.maxStaleness = -1;
    json u = s;
    u["staleness_max"] = 21;
    u["staleness_mean"] = 3.4;
    u["stall_fraction"] = 0.01;
    const LessonRun unbounded{u, free, {}};
    t = boundedStalenessFigures({s, bounded, {}}, &unbounded);
    QVERIFY2(t.contains(QStringLiteral("mean 3.4, max 21, waiting 1.0% of the time")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("cut the stalest update from 21 to 9 versions</b>, and its price is waiting: "
                                       "19% of the time against 1.0%")),
             qPrintable(t));

    // Step 3's run is another load: named as such, not as the bound's effect.
    const LessonRun straggler{{{"staleness_max", 25}}, presetConfig("straggler-async"), {}};
    t = boundedStalenessFigures({s, bounded, {}}, nullptr, &straggler);
    QVERIFY2(t.contains(QStringLiteral("not the same experiment")), qPrintable(t));

    // 11 passes (s+1)(N-1) = 9, which a steady straggler reaches, but not the real bound 15.
    s["staleness_max"] = 11;
    t = boundedStalenessFigures({s, bounded, {}});
    QVERIFY2(t.contains(QStringLiteral("within the bound")), qPrintable(t));
    s["staleness_max"] = 16;
    t = boundedStalenessFigures({s, bounded, {}});
    QVERIFY2(t.contains(QStringLiteral("over the bound")), qPrintable(t));
}

void TestLesson::checkpointingComparesOnlyTheSameModel()
{
    const json c = {{"status", "finished"},      {"steps_completed", 200},     {"wall_s", 5.56997},
                    {"samples_per_s", 4596.1},    {"stall_fraction", 0.0448},   {"recompute_ms", 2079.48},
                    {"peak_activation_bytes", 786432}, {"descheduled_fraction", 0.129},
                    {"stall_descheduled_fraction", 0.58}};
    const RunConfig ck = presetConfig("checkpointing");
    QVERIFY(ck.checkpoint);
    const LessonRun base{baselineSummary(), presetConfig("default"), {}};
    QString t = checkpointingFigures({c, ck, {}}, nullptr, &base);
    QVERIFY2(t.contains(QStringLiteral("Peak activation memory 0.75 MiB per worker</b>, with activations kept only "
                                       "every 5 layers of 17")),
             qPrintable(t));
    // 2079 ms of 2 workers x 5.57 s.
    QVERIFY2(t.contains(QStringLiteral("recompute took %1 ms, 19% of the workers' time</b> (2 workers x 5.6 s)").arg(number(2079))),
             qPrintable(t));
    // The baseline trained another model: its smaller peak is not held against checkpointing.
    QVERIFY2(t.contains(QStringLiteral("Step 1's 0.50 MiB per worker is no comparison")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("64-512-512-10")) && t.contains(QStringLiteral("64-256x16-10")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("Run without checkpointing")), qPrintable(t));

    RunConfig off = ck;
    off.mode = "sync";
    off.checkpoint = false;
    const LessonRun plain{{{"status", "finished"}, {"wall_s", 3.1}, {"peak_activation_bytes", 2099712}}, off, {}};
    t = checkpointingFigures({c, ck, {}}, &plain, &base);
    QVERIFY2(t.contains(QStringLiteral("the same model held <b>2.00 MiB per worker</b>: checkpointing kept 37% of it "
                                       "and saved 1.25 MiB")),
             qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("took 3.1 s against 5.6 s with it (80% longer with checkpointing)")), qPrintable(t));

    // Descheduling outweighed the recompute: said, not the lesson's price claimed.
    json slower = plain.summary;
    slower["wall_s"] = 6.1;
    slower["descheduled_fraction"] = 0.32;
    const LessonRun slowPlain{slower, off, {}};
    t = checkpointingFigures({c, ck, {}}, &slowPlain);
    QVERIFY2(t.contains(QStringLiteral("does not show in the wall time on this machine, where the OS kept the workers "
                                       "off the CPU for 32% of their time without checkpointing and 13% with it")),
             qPrintable(t));
    // A second run that checkpointed too is no plain run.
    const LessonRun alsoCheckpointed{c, ck, {}};
    t = checkpointingFigures({c, ck, {}}, &alsoCheckpointed);
    QVERIFY2(t.contains(QStringLiteral("checkpointed too: no comparison")), qPrintable(t));
}

void TestLesson::backupWorkersComparesWithTheStraggler()
{
    const RunConfig c = presetConfig("backup-workers");
    QCOMPARE(c.backupWorkers, 1);
    json s = stragglerSyncSummary();
    s["stall_fraction"] = 0.3104;
    s["samples_per_s"] = 17020.4;
    s["dropped_per_worker"] = {7, 2, 4, 180};
    const LessonRun straggler{stragglerSyncSummary(), presetConfig("straggler-sync"), {}};
    const QString t = backupWorkersFigures({s, c, {}}, &straggler);
    QVERIFY2(t.contains(QStringLiteral("31% of their time</b>, against 57% with the same straggler")), qPrintable(t));
    // 193 drops over 300 steps: 0.64 a step, of the 1 that b = 1 allows.
    QVERIFY2(t.contains(QStringLiteral("Worker 3's gradient was dropped in 180 of 300 steps</b>; 193 dropped in all, ") +
                        QLocale().toString(0.64, 'f', 2)), qPrintable(t));
    QVERIFY2(t.contains(number(17020) + QStringLiteral(" samples/s against step 2's ") + number(14079)), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("averages 3 batches of %1, not 4").arg(c.batch)), qPrintable(t));

    // Without a backup worker there is nothing to credit it with; another model is no comparison.
    RunConfig plain = c;
    plain.backupWorkers = 0;
    QVERIFY2(backupWorkersFigures({s, plain, {}}, &straggler).contains(QStringLiteral("had no backup worker")),
             qPrintable(backupWorkersFigures({s, plain, {}}, &straggler)));
    RunConfig other = presetConfig("straggler-sync");
    other.layers = {64, 128, 10};
    const LessonRun unfair{stragglerSyncSummary(), other, {}};
    const QString u = backupWorkersFigures({s, c, {}}, &unfair);
    QVERIFY2(!u.contains(QStringLiteral("against 57%")) && u.contains(QStringLiteral("no comparison")), qPrintable(u));
}

void TestLesson::inputBoundComparesWithoutPrefetch()
{
    const RunConfig c = presetConfig("input-bound");
    QCOMPARE(c.prefetch, 2);
    QVERIFY(c.costUs > 0);
    const json s = {{"status", "finished"}, {"steps_completed", 200}, {"wall_s", 0.538},
                    {"samples_per_s", 23785.2}, {"input_wait_fraction", 0.399}, {"descheduled_fraction", 0.016}};
    RunConfig off = c;
    off.prefetch = 0;
    const LessonRun plain{{{"status", "finished"}, {"steps_completed", 200}, {"wall_s", 0.813},
                           {"samples_per_s", 15754.0}, {"input_wait_fraction", 0.0}},
                          off, {}};
    QString t = inputBoundFigures({s, c, {}}, &plain);
    QVERIFY2(t.contains(QStringLiteral("still waited for their data 40% of the time</b>")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("gave ") + number(23785) + QStringLiteral(" samples/s against ") + number(15754) +
                        QStringLiteral(" without it</b> (") + QLocale().toString(1.51, 'f', 2) + QStringLiteral("x)")),
             qPrintable(t));
    // 64 samples at 40 us: 2.6 ms a batch.
    QVERIFY2(t.contains(QStringLiteral("cost 2.6 ms of preparation")), qPrintable(t));

    // Slower with prefetch: said plainly, not claimed as a gain.
    json slow = s;
    slow["samples_per_s"] = 12000.0;
    t = inputBoundFigures({slow, c, {}}, &plain);
    QVERIFY2(t.contains(QStringLiteral("no gain on this machine")), qPrintable(t));
    // A pipeline that kept up; a second run that changed more than the prefetch.
    json kept = s;
    kept["input_wait_fraction"] = 0.01;
    QVERIFY2(inputBoundFigures({kept, c, {}}).contains(QStringLiteral("not input-bound")), "kept up");
    RunConfig other = off;
    other.costUs = 5;
    const LessonRun unfair{plain.summary, other, {}};
    t = inputBoundFigures({s, c, {}}, &unfair);
    QVERIFY2(t.contains(QStringLiteral("no comparison")) && !t.contains(number(15754)), qPrintable(t));
}

void TestLesson::batchNormComparesWithSync()
{
    const RunConfig c = presetConfig("batchnorm-local-vs-sync");
    QCOMPARE(c.batchnorm, std::string("local"));
    const json s = {{"status", "finished"}, {"steps_completed", 300}, {"wall_s", 1.2}, {"samples_per_s", 8000.0},
                    {"final_eval_loss", 0.04609}, {"final_eval_accuracy", 0.996}};
    RunConfig sc = c;
    sc.batchnorm = "sync";
    const LessonRun sync{{{"status", "finished"}, {"steps_completed", 300}, {"wall_s", 2.4}, {"samples_per_s", 6000.0},
                          {"final_eval_loss", 0.04567}, {"final_eval_accuracy", 0.997}},
                         sc, {}};
    QString t = batchNormFigures({s, c, {}}, &sync);
    QVERIFY2(t.contains(QStringLiteral("<b>local</b> batch norm (4 workers of 8 samples) the held-out loss ended at <b>") +
                        QLocale().toString(0.0461, 'f', 4)), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("its own 8 samples, not of the step's 32")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("held-out loss of <b>") + QLocale().toString(0.0457, 'f', 4)), qPrintable(t));
    QVERIFY2(t.contains(number(6000) + QStringLiteral(" samples/s against ") + number(8000) +
                        QStringLiteral(" with local statistics (75%)")), qPrintable(t));
    // The sync run on its own; a second run that changed the batch too; a run with no batch norm.
    QVERIFY(batchNormFigures(sync).contains(QStringLiteral("same running statistics")));
    RunConfig other = sc;
    other.batch = 16;
    const LessonRun unfair{sync.summary, other, {}};
    QVERIFY(batchNormFigures({s, c, {}}, &unfair).contains(QStringLiteral("no comparison")));
    RunConfig none = c;
    none.batchnorm = "none";
    QVERIFY(batchNormFigures({s, none, {}}).contains(QStringLiteral("had no batch norm")));
}

void TestLesson::comparisonListsEveryRun()
{
    const LessonRun base{baselineSummary(), presetConfig("default"), {}};
    const LessonRun sync{stragglerSyncSummary(), presetConfig("straggler-sync"), {}};
    const LessonRun async{{{"samples_per_s", 32925.1}, {"staleness_mean", 2.92}, {"staleness_max", 25}},
                          presetConfig("straggler-async"), {}};
    const QString t = comparisonFigures({{QStringLiteral("default"), &base},
                                         {QStringLiteral("straggler-sync"), &sync},
                                         {QStringLiteral("straggler-async"), &async},
                                         {QString(), nullptr}});
    QVERIFY2(t.contains(QStringLiteral("<b>default</b>: ") + number(37892) + QStringLiteral(" samples/s, waiting 38%, off CPU 34%")),
             qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("staleness mean 2.9, max 25")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("cut sync throughput to 37% of the baseline's")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("async ran 2.34x as fast as sync")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("off the CPU for up to 34%")), qPrintable(t));
    QCOMPARE(comparisonFigures({}), QString());
}

void TestLesson::stoppedRunSaysSo()
{
    json s = baselineSummary();
    s["status"] = "stopped";
    s["steps_completed"] = 120;
    QString t = baselineFigures({s, presetConfig("default"), {}});
    QVERIFY2(t.contains(QStringLiteral("was stopped after 120 of 300 steps")), qPrintable(t));
    s["status"] = "failed";
    s["error"] = "worker 2, step 7, forward: <NaN> loss";
    t = baselineFigures({s, presetConfig("default"), {}});
    QVERIFY2(t.contains(QStringLiteral("The run failed after 120 of 300 steps")), qPrintable(t));
    QVERIFY2(t.contains(QStringLiteral("&lt;NaN&gt;")), qPrintable(t)); // escaped, not markup
}

void TestLesson::missingFieldsDoNotCrash_data()
{
    QTest::addColumn<QByteArray>("summary");
    QTest::newRow("null") << QByteArray("null");
    QTest::newRow("empty") << QByteArray("{}");
    QTest::newRow("wrong types") << QByteArray(
        R"({"status": 3, "stall_fraction": "a lot", "samples_per_s": [1], "staleness_max": null,
            "stall_ms_per_worker": [1, "x", 3, 4], "delay_ms_per_worker": 5, "peak_activation_bytes": {}})");
    QTest::newRow("wrong sizes") << QByteArray(
        R"({"steps_completed": 0, "stall_fraction": 0.5, "stall_ms_per_worker": [1, 2],
            "delay_ms_per_worker": [], "stall_descheduled_fraction": 0.9})");
}

void TestLesson::missingFieldsDoNotCrash()
{
    QFETCH(QByteArray, summary);
    const json s = json::parse(summary.toStdString());
    const LessonRun b{s, presetConfig("default"), {}}, ss{s, presetConfig("straggler-sync"), {}},
        sa{s, presetConfig("straggler-async"), {1.0}}, bs{s, presetConfig("bounded-staleness"), {}},
        ck{s, presetConfig("checkpointing"), {}}, bw{s, presetConfig("backup-workers"), {}},
        ib{s, presetConfig("input-bound"), {}}, bn{s, presetConfig("batchnorm-local-vs-sync"), {}};
    const QStringList texts{baselineFigures(b),
                            stragglerSyncFigures(ss, &b),
                            stragglerAsyncFigures(sa, &ss, &b),
                            boundedStalenessFigures(bs, &bs, &sa),
                            checkpointingFigures(ck, &ck, &b),
                            backupWorkersFigures(bw, &ss),
                            inputBoundFigures(ib, &ib),
                            batchNormFigures(bn, &bn),
                            comparisonFigures({{QStringLiteral("a"), &b}, {QStringLiteral("b"), &ss}})};
    static const QRegularExpression notANumber(QStringLiteral("\\b(nan|inf)\\b"), QRegularExpression::CaseInsensitiveOption);
    for (const QString &t : texts)
        QVERIFY2(!t.contains(notANumber), qPrintable(t));
    if (s.is_null() || s.empty())
        QVERIFY2(texts[0].contains(QStringLiteral("none of the figures")), qPrintable(texts[0]));
}

void TestLesson::stepRunsFromThePanel()
{
    MainWindow w;
    w.settings().runsFolder = m_dir.filePath(QStringLiteral("runs"));
    w.resize(1280, 720);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    // Help > Lesson: the window's own panel, in a tab beside the form.
    LessonPanel *panel = w.lesson();
    auto *dock = w.findChild<QDockWidget *>(QStringLiteral("lessonDock"));
    QVERIFY(panel && dock && !dock->isVisible());
    w.showLesson();
    QVERIFY(dock->isVisible() && panel->isVisible());
    QCOMPARE(w.dockWidgetArea(dock), Qt::LeftDockWidgetArea);

    auto *run = panel->findChild<QPushButton *>(QStringLiteral("lessonRun"));
    auto *next = panel->findChild<QPushButton *>(QStringLiteral("lessonNext"));
    auto *back = panel->findChild<QPushButton *>(QStringLiteral("lessonBack"));
    auto *text = panel->findChild<QLabel *>(QStringLiteral("lessonText"));
    QVERIFY(run && next && back && text);
    QCOMPARE(panel->currentStep(), 0);
    QVERIFY(!back->isEnabled());
    QVERIFY2(text->text().contains(QStringLiteral("What to look at")), qPrintable(text->text()));

    // The comparison step has nothing to compare yet; Back returns to the first step.
    for (int i = 0; i < panel->stepCount() - 1; ++i)
        QTest::mouseClick(next, Qt::LeftButton);
    QCOMPARE(panel->currentStep(), panel->stepCount() - 1);
    QVERIFY(!next->isEnabled());
    QVERIFY(!run->isEnabled());
    panel->setCurrentStep(0);
    QCOMPARE(panel->findChild<QListWidget *>(QStringLiteral("lessonSteps"))->currentRow(), 0);

    QTest::mouseClick(run, Qt::LeftButton);
    const RunDataPtr started = panel->stepRun(0);
    QVERIFY(started);
    QVERIFY(started == w.runs().back());
    QCOMPARE(started->config().steps, 40); // the short baseline of initTestCase
    QVERIFY(!run->isEnabled());            // one run at a time
    QVERIFY2(text->text().contains(QStringLiteral("is running")), qPrintable(text->text()));
    QVERIFY(QTest::qWaitFor([&] { return started->state != RunState::Running && !w.controller()->isRunning(); }, 60000));
    QVERIFY(QTest::qWaitFor([&] { return run->isEnabled(); }, 5000));
    QVERIFY(started->state == RunState::Finished);

    // The text states this run's own figures, as its summary has them.
    const nlohmann::json &s = started->summary;
    const QString shown = text->text();
    QVERIFY2(shown.contains(QStringLiteral("What %1 measured").arg(started->label())), qPrintable(shown));
    QVERIFY2(shown.contains(QStringLiteral("%1 steps in").arg(s.value("steps_completed", 0))), qPrintable(shown));
    QVERIFY2(shown.contains(number(qRound64(s.value("samples_per_s", 0.0))) + QStringLiteral(" samples/s")),
             qPrintable(shown));
    const double stall = 100.0 * s.value("stall_fraction", 0.0);
    const QString stallText = QLocale().toString(stall, 'f', stall > 0 && stall < 9.95 ? 1 : 0) + QStringLiteral("% of their time");
    QVERIFY2(shown.contains(stallText), qPrintable(shown + QStringLiteral(" / ") + stallText));
    QCOMPARE(run->text(), QStringLiteral("Run this step again"));

    // Checkpointing, then the same model without it (the step's second button): compared.
    panel->setCurrentStep(4);
    auto *variant = panel->findChild<QPushButton *>(QStringLiteral("lessonVariant"));
    QVERIFY(variant && variant->isVisible() && variant->isEnabled());
    for (const bool second : {false, true}) {
        QVERIFY(panel->runStep(second));
        const RunDataPtr r = panel->stepRun(4, second);
        QVERIFY(r && r == w.runs().back());
        QVERIFY(QTest::qWaitFor([&] { return r->state != RunState::Running && !w.controller()->isRunning(); }, 60000));
        QVERIFY(r->state == RunState::Finished);
    }
    const RunDataPtr ck = panel->stepRun(4), plain = panel->stepRun(4, true);
    QVERIFY(ck->config().checkpoint && !plain->config().checkpoint);
    QVERIFY(ck->config().layers == plain->config().layers);
    QCOMPARE(plain->label(), QStringLiteral("checkpointing off"));
    const QString compared = text->text();
    const QString plainPeak = QLocale().toString(plain->summary.value("peak_activation_bytes", 0.0) / 1048576.0, 'f', 2);
    QVERIFY2(compared.contains(QStringLiteral("Without checkpointing the same model held <b>%1 MiB").arg(plainPeak)),
             qPrintable(compared));
    // Step 1's model is another one: its peak is not held against checkpointing.
    QVERIFY2(compared.contains(QStringLiteral("is no comparison")), qPrintable(compared));

    // The comparison step now lists it.
    panel->setCurrentStep(panel->stepCount() - 1);
    QVERIFY(run->isEnabled());
    QVERIFY2(text->text().contains(QStringLiteral("<b>%1</b>:").arg(started->label())), qPrintable(text->text()));
    panel->setCurrentStep(0);

    // Seen at a projector's sizes (set SYNCOPATE_LESSON_PNG to a folder to look at them).
    const QString shots = qEnvironmentVariable("SYNCOPATE_LESSON_PNG");
    for (const int step : {0, 4}) {
        panel->setCurrentStep(step);
        for (const QSize size : {QSize(1280, 720), QSize(1920, 1080)}) {
            w.resize(size);
            for (const bool presentation : {false, true}) {
                w.setPresentationMode(presentation);
                w.showLesson();
                QCoreApplication::processEvents();
                // The window still fits the screen: nothing (a chart's legend, the lesson) widens it.
                QVERIFY2(w.minimumSizeHint().width() <= size.width() && w.width() == size.width(),
                         qPrintable(QStringLiteral("%1 px wide, at least %2").arg(w.width()).arg(w.minimumSizeHint().width())));
                // The panel follows the window's font (presentation mode scales the docks').
                QCOMPARE(text->font().pointSizeF(), dock->font().pointSizeF());
                QVERIFY(run->isVisible() && run->geometry().bottom() <= panel->height());
                // Neither button's label is cut.
                for (const QPushButton *b : {run, variant})
                    QVERIFY2(!b->isVisible() || b->width() >= b->sizeHint().width(), qPrintable(b->text()));
                if (!shots.isEmpty())
                    w.grab().save(QStringLiteral("%1/lesson-%2%3%4.png")
                                      .arg(shots)
                                      .arg(size.height())
                                      .arg(step > 0 ? QStringLiteral("-step%1").arg(step + 1) : QString(),
                                           presentation ? QStringLiteral("-presentation") : QString()));
            }
        }
    }
    w.setPresentationMode(false);
}

QTEST_MAIN(TestLesson)
#include "tst_lesson.moc"
