// The main window on the offscreen platform: a preset runs to the end, every chart gets data,
// exports have the requested size and are not blank, bad input lands in the banner with the
// field marked, and a saved run opens again as it was.
#include "charts.h"
#include "comparison.h"
#include "engine.h"
#include "experimentform.h"
#include "gpubackend.h"
#include "mainwindow.h"
#include "phasestyle.h"
#include "session.h"
#include "runcontroller.h"
#include "runsbrowser.h"
#include "timelineplottable.h"
#include "timelineview.h"

#include <QDir>
#include <QDockWidget>
#include <QFileInfo>
#include <QComboBox>
#include <QLineEdit>
#include <QMenu>
#include <QProcess>
#include <QPushButton>
#include <QStatusBar>
#include <QWhatsThis>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include <qcustomplot.h>

using namespace syncopate;

class TestMainWindow : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void emptyViewsSayWhy();
    void formCarriesEveryKey();
    void configFileFillsTheForm();
    void runsAPresetToTheEnd();
    void exportsEveryFormat_data();
    void exportsEveryFormat();
    void asyncRunFillsStaleness();
    void badConfigGoesToTheBanner();
    void missingGpuMarksTheDeviceField();
    void openRunShowsItAgain();
    void unwritableRunsFolderOffersAnother();
    void slowdownFollowsTheWorkerCount();
    void newRunFollowsLive();
    void comparisonTableCopies();
    void runCanBeSavedElsewhere();
    void presentationModeScalesFonts();
    void importedTraceOpensInTheViews();
    void saveConfigRoundTripsThroughTheCli();
    void recentConfigsKeepOrderAndDropMissing();
    void browserFollowsTheWindowsRuns();
    void whatsThisExplainsEachView();
    void oldSettingsAreMigratedOrDropped();
    void recentListsRoundTrip_data();
    void recentListsRoundTrip();
    void aRunWrittenElsewhereIsFollowed();

private:
    static bool runWith(MainWindow &w, const QString &preset, int steps);
    static int distinctColours(const QImage &image);
    QTemporaryDir m_dir;
    std::unique_ptr<MainWindow> m_window;
};

void TestMainWindow::initTestCase()
{
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(m_dir.isValid());
    m_window = std::make_unique<MainWindow>();
    m_window->settings().runsFolder = m_dir.filePath(QStringLiteral("runs"));
    m_window->resize(1400, 900);
    m_window->show();
}

bool TestMainWindow::runWith(MainWindow &w, const QString &preset, int steps)
{
    w.selectPreset(preset);
    static_cast<QSpinBox *>(w.form()->field(QStringLiteral("train.steps")))->setValue(steps);
    static_cast<QSpinBox *>(w.form()->field(QStringLiteral("eval.every")))->setValue(10);
    QSignalSpy finished(&w, &MainWindow::runFinished);
    const qsizetype listed = w.runListTexts().size();
    if (!w.startRun())
        return false;
    // The run is listed while it runs, not only once it has ended.
    const QStringList during = w.runListTexts();
    if (during.size() != listed + 1 || !during.back().contains(QStringLiteral("(running)")))
        return false;
    return finished.wait(60000);
}

int TestMainWindow::distinctColours(const QImage &image)
{
    QSet<QRgb> colours;
    for (int y = 0; y < image.height(); y += 3)
        for (int x = 0; x < image.width(); x += 3)
            colours.insert(image.pixel(x, y));
    return int(colours.size());
}

void TestMainWindow::emptyViewsSayWhy()
{
    // Before any run every plot says how to start one, and neither the timeline nor a chart draws
    // an empty legend.
    MainWindow &w = *m_window;
    QVERIFY(placeholderText(w.timeline()).contains(QStringLiteral("No run yet")));
    QVERIFY(!w.timeline()->legend->visible());
    for (auto &[name, plot] : w.charts()->plots()) {
        QVERIFY2(placeholderText(plot).contains(QStringLiteral("No run yet")), qPrintable(name));
        // A chart's legend sits beside it in a cell of its own: empty, it has no box to draw.
        QVERIFY2(plot->legend->itemCount() == 0 && plot->legend->borderPen().style() == Qt::NoPen, qPrintable(name));
    }
}

void TestMainWindow::formCarriesEveryKey()
{
    // A config loaded into the form comes back out whole: every key has a field, so nothing a
    // config file says (held-out IDX files, say) is dropped on its way to the run.
    ExperimentForm form;
    for (const auto &k : configKeys())
        QVERIFY2(form.field(QString::fromLatin1(k.name)), k.name);
    const nlohmann::json in = {{"data.source", "idx"},
                               {"data.images", "/data/train-images.idx"},
                               {"data.labels", "/data/train-labels.idx"},
                               {"eval.images", "/data/test-images.idx"},
                               {"eval.labels", "/data/test-labels.idx"}};
    form.setFromJson(in);
    const nlohmann::json out = form.toJson();
    for (auto it = in.begin(); it != in.end(); ++it)
        QVERIFY2(out.value(it.key(), nlohmann::json()) == it.value(), it.key().c_str());
    // The file rows apply to IDX data only.
    QVERIFY(form.field(QStringLiteral("eval.images"))->isEnabled());
    form.setFromJson({{"data.source", "blobs"}});
    QVERIFY(!form.field(QStringLiteral("eval.images"))->isEnabled());
    QVERIFY(!form.field(QStringLiteral("data.labels"))->isEnabled());
}

void TestMainWindow::configFileFillsTheForm()
{
    MainWindow &w = *m_window;
    auto write = [&](const char *name, const QByteArray &text) {
        const QString path = m_dir.filePath(QString::fromLatin1(name));
        QFile f(path);
        if (!f.open(QIODevice::WriteOnly))
            qFatal("cannot write %s", name);
        f.write(text);
        return path;
    };
    // A good file: its values in the form, no preset shown as chosen, the file named.
    const QString good = write("good.json", R"({"workers": 3, "train": {"steps": 77}})");
    w.loadConfigFile(good);
    QVERIFY(w.bannerText().isEmpty());
    QCOMPARE(w.form()->workers(), 3);
    QCOMPARE(w.form()->presetName(), QString());
    QVERIFY2(w.form()->presetText().contains(good), qPrintable(w.form()->presetText()));

    // A file with one bad value: the rest is kept, the bad field marked, the banner says why.
    const QString bad = write("bad.json", R"({"workers": 5, "train": {"steps": 55, "lr": -1}})");
    w.loadConfigFile(bad);
    QVERIFY2(w.bannerText().contains(QStringLiteral("train.lr")), qPrintable(w.bannerText()));
    QCOMPARE(w.form()->workers(), 5);
    QCOMPARE(static_cast<QSpinBox *>(w.form()->field(QStringLiteral("train.steps")))->value(), 55);
    QVERIFY(w.form()->field(QStringLiteral("train.lr"))->property("configError").toBool());

    // Not JSON: the form keeps what it had.
    w.loadConfigFile(write("broken.json", "{\"workers\": "));
    QVERIFY2(w.bannerText().contains(QStringLiteral("not valid JSON")), qPrintable(w.bannerText()));
    QCOMPARE(w.form()->workers(), 5);
    w.selectPreset(QStringLiteral("default"));
}

void TestMainWindow::runsAPresetToTheEnd()
{
    MainWindow &w = *m_window;
    QVERIFY(runWith(w, QStringLiteral("straggler-sync"), 30));
    QCOMPARE(int(w.runs().size()), 1);
    QCOMPARE(w.runListTexts(), QStringList{QStringLiteral("straggler-sync: sync, 4 workers (finished)")});
    const RunDataPtr run = w.runs().back();
    QCOMPARE(run->state, RunState::Finished);
    QVERIFY(run->spanCount() > 4u * 30u * 6u);
    QVERIFY(!run->directory().isEmpty());
    // Named after its time, its preset and what the form changed from the preset.
    const QString folder = QDir(run->directory()).dirName();
    QVERIFY2(folder.contains(QStringLiteral("-straggler-sync-")) && folder.contains(QStringLiteral("train.steps=30")),
             qPrintable(folder));
    QVERIFY(QFile::exists(run->directory() + QStringLiteral("/trace.json")));
    // No error; on a machine with fewer free cores than workers, the note that says so.
    const std::string note = oversubscriptionWarning(run->config(), coreBudget());
    QVERIFY2(w.bannerText().isEmpty() || (!note.empty() && w.bannerText().contains(QStringLiteral("would fit"))),
             qPrintable(w.bannerText()));
    // Every chart that applies to sync has data.
    QVERIFY(w.charts()->lossPlot()->graph(0)->dataCount() >= 30);
    QVERIFY(w.charts()->stallPlot()->graph(0)->dataCount() >= 30);
    QVERIFY(w.charts()->memoryPlot()->graph(0)->dataCount() >= 30);
    QVERIFY(w.charts()->throughputPlot()->graph(0)->dataCount() >= 1);
    // Every worker has a wait figure for every step; how they compare depends on the machine's
    // load, which tst_sync's causality check and bench_engine cover.
    for (int worker = 0; worker < 4; ++worker) {
        QCOMPARE(int(run->steps(worker).size()), 30);
        for (const StepPoint &v : run->steps(worker))
            QVERIFY(v.waitMs >= 0);
    }
    // With data the placeholders are gone.
    QVERIFY(placeholderText(w.timeline()).isEmpty());
    QVERIFY(w.timeline()->legend->visible());
    for (auto &[name, plot] : w.charts()->plots())
        QVERIFY2(placeholderText(plot).isEmpty(), qPrintable(name + QStringLiteral(": ") + placeholderText(plot)));
    // Sync's staleness says it plainly: one bar, every one of the 30 updates 0 stale.
    QCustomPlot *staleness = w.charts()->stalenessPlot();
    auto *bars = qobject_cast<QCPBars *>(staleness->plottable(0));
    QVERIFY(bars);
    QCOMPARE(bars->data()->size(), 1);
    QCOMPARE(bars->data()->begin()->key, 0.0);
    QCOMPARE(bars->data()->begin()->value, 30.0);
    auto *title = qobject_cast<QCPTextElement *>(staleness->plotLayout()->element(0, 0));
    QVERIFY2(title && title->text().contains(QStringLiteral("every update is 0 stale (30 updates)")),
             qPrintable(title ? title->text() : QString()));
    // The timeline drew something.
    w.timeline()->replot();
    QVERIFY(w.timeline()->plottable_()->lastMarkCount() > 0);
}

void TestMainWindow::exportsEveryFormat_data()
{
    QTest::addColumn<QString>("view");
    QTest::addColumn<QString>("suffix");
    for (const char *view : {"timeline", "loss", "stalls", "memory", "throughput"})
        for (const char *suffix : {"png", "svg", "pdf"})
            QTest::newRow(qPrintable(QStringLiteral("%1.%2").arg(QLatin1String(view), QLatin1String(suffix))))
                << QString::fromLatin1(view) << QString::fromLatin1(suffix);
}

void TestMainWindow::exportsEveryFormat()
{
    QFETCH(QString, view);
    QFETCH(QString, suffix);
    const QString path = m_dir.filePath(view + QLatin1Char('.') + suffix);
    QVERIFY(m_window->exportView(view, path, QSize(1200, 600), 1.0));
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray bytes = f.readAll();
    if (suffix == QLatin1String("png")) {
        const QImage image(path);
        QCOMPARE(image.size(), QSize(1200, 600));
        QVERIFY2(distinctColours(image) > 8, "the image is blank");
    } else if (suffix == QLatin1String("svg")) {
        QVERIFY(bytes.contains("<svg"));
        QVERIFY(bytes.contains("width=\"1200"));
        QVERIFY(bytes.size() > 5000);
    } else {
        QVERIFY(bytes.startsWith("%PDF"));
        QVERIFY(bytes.size() > 3000);
    }
}

void TestMainWindow::asyncRunFillsStaleness()
{
    MainWindow &w = *m_window;
    QVERIFY(runWith(w, QStringLiteral("straggler-async"), 80));
    const RunDataPtr run = w.runs().back();
    QCOMPARE(run->state, RunState::Finished);
    QVERIFY(!run->stalenessHistogram().empty());
    auto *bars = qobject_cast<QCPBars *>(w.charts()->stalenessPlot()->plottable(0));
    QVERIFY(bars && bars->dataCount() > 0);
    QVERIFY(placeholderText(w.charts()->stalenessPlot()).isEmpty());
    // Split per worker: one stacked bar set per worker, which together are the whole histogram.
    w.charts()->setSplitStaleness(true);
    QCustomPlot *sp = w.charts()->stalenessPlot();
    std::vector<double> total(run->stalenessHistogram().size(), 0.0);
    int sets = 0;
    for (int i = 0; i < sp->plottableCount(); ++i)
        if (auto *b = qobject_cast<QCPBars *>(sp->plottable(i))) {
            QCOMPARE(b->name(), QStringLiteral("worker %1").arg(sets));
            QCOMPARE(b->barBelow() != nullptr, sets > 0);
            for (const QCPBarsData &d : *b->data())
                total[std::size_t(d.key)] += d.value;
            ++sets;
        }
    QCOMPARE(sets, run->workers());
    for (std::size_t s = 0; s < total.size(); ++s)
        QCOMPARE(total[s], double(run->stalenessHistogram()[s]));
    w.charts()->setSplitStaleness(false);
    // Compared with another run, each histogram is in shares of its run's updates: the compared
    // run's line sums to 100%, and the stalls chart has the compared run's mean line, named.
    const RunDataPtr other = w.runs().front();
    w.charts()->setRuns(run, {other});
    double share = 0;
    QCPGraph *line = sp->graph(sp->graphCount() - 1);
    QVERIFY(line->name().startsWith(other->label()));
    for (const QCPGraphData &d : *line->data())
        share += d.value;
    QVERIFY2(std::abs(share - 100.0) < 1e-6, qPrintable(QString::number(share)));
    QVERIFY(sp->yAxis->label().contains(QStringLiteral("share")));
    QCustomPlot *stalls = w.charts()->stallPlot();
    QCPGraph *mean = stalls->graph(stalls->graphCount() - 1);
    QVERIFY2(mean->name().startsWith(other->label()) && mean->name().contains(QStringLiteral("% of time lost")),
             qPrintable(mean->name()));
    QVERIFY(mean->dataCount() > 0);
    QVERIFY(mean->pen().color() != seriesColor(0) && mean->pen().color() != seriesColor(5));
    w.charts()->setRuns(run, {});
    // Checked in the Runs list, the other run stacks under the shown one on the timeline.
    w.setCompared(other, true);
    QCOMPARE(int(w.timeline()->runs().size()), 2);
    QCOMPARE(w.timeline()->runs().front(), run);
    QCOMPARE(w.timeline()->runs().back(), other);
    w.setCompared(other, false);
    QCOMPARE(int(w.timeline()->runs().size()), 1);

    // Against samples processed, an async update is one worker's batch: the last loss sits at
    // 80 updates x batch 64, not at the step count.
    QComboBox *axis = nullptr;
    for (QComboBox *c : w.charts()->findChildren<QComboBox *>())
        if (c->findText(QStringLiteral("against samples processed")) >= 0)
            axis = c;
    QVERIFY(axis);
    axis->setCurrentIndex(axis->findText(QStringLiteral("against samples processed")));
    w.charts()->refresh();
    bool found = false;
    const QCPRange keys = w.charts()->lossPlot()->graph(0)->getKeyRange(found);
    QVERIFY(found);
    QVERIFY2(keys.upper <= 80.0 * 64 && keys.upper > 40.0 * 64, qPrintable(QString::number(keys.upper)));
    QVERIFY(w.charts()->lossPlot()->xAxis->label().contains(QStringLiteral("samples")));
    axis->setCurrentIndex(0);
    QVERIFY(w.charts()->lossPlot()->xAxis->label().contains(QStringLiteral("server update")));
}

void TestMainWindow::badConfigGoesToTheBanner()
{
    MainWindow &w = *m_window;
    w.selectPreset(QStringLiteral("default"));
    auto *layers = qobject_cast<QLineEdit *>(w.form()->field(QStringLiteral("model.layers")));
    QVERIFY(layers);
    layers->setText(QStringLiteral("64, 512, x"));
    const std::size_t before = w.runs().size();
    QVERIFY(!w.startRun());
    QVERIFY2(w.bannerText().contains(QStringLiteral("model.layers")), qPrintable(w.bannerText()));
    QVERIFY(layers->property("configError").toBool());
    QCOMPARE(w.runs().size(), before);

    // A missing IDX file: named in the banner, nothing crashes.
    w.selectPreset(QStringLiteral("default"));
    nlohmann::json j = w.form()->toJson();
    j["data.source"] = "idx";
    j["data.images"] = "/nonexistent/images.idx";
    j["data.labels"] = "/nonexistent/labels.idx";
    j["model.layers"] = nlohmann::json::array({784, 10});
    w.form()->setFromJson(j);
    QVERIFY(!w.startRun());
    QVERIFY2(w.bannerText().contains(QStringLiteral("/nonexistent/images.idx")), qPrintable(w.bannerText()));
}

void TestMainWindow::missingGpuMarksTheDeviceField()
{
    if (GpuBackend *b = gpuBackend(); b && !b->devices().empty())
        QSKIP("a GPU is present");
    MainWindow &w = *m_window;
    w.selectPreset(QStringLiteral("default"));
    nlohmann::json j = w.form()->toJson();
    j["device"] = "cuda";
    w.form()->setFromJson(j);
    const std::size_t before = w.runs().size();
    QVERIFY(!w.startRun());
    QVERIFY2(w.bannerText().contains(QStringLiteral("device = &quot;cuda&quot;")), qPrintable(w.bannerText()));
    QVERIFY(w.form()->field(QStringLiteral("device"))->property("configError").toBool());
    QCOMPARE(w.runs().size(), before);
    w.selectPreset(QStringLiteral("default")); // back to the CPU for the tests after this one
}

void TestMainWindow::openRunShowsItAgain()
{
    MainWindow &w = *m_window;
    const RunDataPtr original = w.runs().front();
    QVERIFY(w.openRun(original->directory()));
    const RunDataPtr opened = w.runs().back();
    QCOMPARE(opened->spanCount(), original->spanCount());
    QCOMPARE(opened->workers(), original->workers());
    QCOMPARE(opened->counter(CounterId::Loss, 2).size(), original->counter(CounterId::Loss, 2).size());
    QCOMPARE(opened->steps(1).size(), original->steps(1).size());
    // The form holds the opened run's configuration, ready to run again.
    const nlohmann::json form = w.form()->toJson();
    QCOMPARE(form.value("mode", std::string()), original->config().mode);
    // ... and the preset box no longer names whatever preset was chosen before.
    QCOMPARE(w.form()->presetName(), QString());
    QVERIFY2(w.form()->presetText().contains(opened->label()), qPrintable(w.form()->presetText()));
    QCOMPARE(form.value("workers", 0), original->config().workers);
    QCOMPARE(form.value("train.steps", 0), original->config().steps);
    QVERIFY(!w.openRun(m_dir.filePath(QStringLiteral("nothing-here"))));
    QVERIFY(w.bannerText().contains(QStringLiteral("no such folder")));
}

// A runs folder that cannot be written (here: under a regular file) refuses the start with a
// message naming it, and the banner offers to choose another folder.
void TestMainWindow::unwritableRunsFolderOffersAnother()
{
    MainWindow &w = *m_window;
    const QString before = w.settings().runsFolder;
    const QString file = m_dir.filePath(QStringLiteral("a-file"));
    QFile f(file);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.close();
    w.settings().runsFolder = file + QStringLiteral("/runs");
    const int runs = int(w.runs().size());
    QVERIFY(!w.startRun());
    w.settings().runsFolder = before;
    QCOMPARE(int(w.runs().size()), runs);
    QVERIFY2(w.bannerText().contains(file), qPrintable(w.bannerText()));
    QVERIFY2(w.bannerText().contains(QStringLiteral("href=\"choose-runs-folder\"")), qPrintable(w.bannerText()));
}

// What the banner's "Save a copy elsewhere" does after a disk filled: the run's folder, copied.
void TestMainWindow::runCanBeSavedElsewhere()
{
    MainWindow &w = *m_window;
    QVERIFY(runWith(w, QStringLiteral("default"), 5));
    const QString source = w.runs().back()->directory();
    const QString target = m_dir.filePath(QStringLiteral("elsewhere"));
    QVERIFY(QDir().mkpath(target));
    QVERIFY(w.saveRunElsewhere(target));
    const QString copy = QDir(target).filePath(QDir(source).dirName());
    const QStringList files = QDir(source).entryList(QDir::Files);
    QVERIFY(files.contains(QStringLiteral("w0.syr")));
    QCOMPARE(QDir(copy).entryList(QDir::Files), files);
    QVERIFY(w.openRun(copy));
    QCOMPARE(w.runs().back()->spanCount(), w.runs()[w.runs().size() - 2]->spanCount());
}

// Changing the worker count pads the slowdown list with 1 or trims it, instead of leaving a
// list the start would refuse.
void TestMainWindow::slowdownFollowsTheWorkerCount()
{
    MainWindow &w = *m_window;
    auto *workers = qobject_cast<QSpinBox *>(w.form()->field(QStringLiteral("workers")));
    auto *slowdown = qobject_cast<QLineEdit *>(w.form()->field(QStringLiteral("workers_slowdown")));
    QVERIFY(workers && slowdown);
    workers->setValue(4);
    slowdown->setText(QStringLiteral("1, 1, 1, 3"));
    workers->setValue(6);
    QCOMPARE(slowdown->text(), QStringLiteral("1, 1, 1, 3, 1, 1"));
    workers->setValue(3);
    QCOMPARE(slowdown->text(), QStringLiteral("1, 1, 1"));
    QVERIFY(w.form()->toJson().dump().find("\"workers_slowdown\":[1.0,1.0,1.0]") != std::string::npos);
    slowdown->clear();
    workers->setValue(4);
    QVERIFY(slowdown->text().isEmpty());
}

// A run started after the view was zoomed (Follow Live off) still follows live.
void TestMainWindow::newRunFollowsLive()
{
    MainWindow &w = *m_window;
    w.timeline()->setFollowLive(false);
    QVERIFY(!w.timeline()->followLive());
    QVERIFY(runWith(w, QStringLiteral("default"), 5));
    QVERIFY(w.timeline()->followLive());
    QVERIFY(w.timeline()->xAxis->range().upper > 0.01);
}

// The comparison table: one row per run from its summary, blank where a run has no such
// figure, and CSV and Markdown that survive a name with a comma and a pipe.
void TestMainWindow::comparisonTableCopies()
{
    auto sync = std::make_shared<RunData>(parseConfig(nlohmann::json{{"workers", 4}}), QStringLiteral("baseline, 4|w"));
    sync->summary = {{"wall_s", 1.5},           {"samples_per_s", 40000.0}, {"stall_fraction", 0.25},
                     {"descheduled_fraction", 0.125}, {"final_loss", 0.01}, {"peak_activation_bytes", 1048576}};
    auto async = std::make_shared<RunData>(
        parseConfig(nlohmann::json{{"mode", "async"}, {"async.max_staleness", 2}}), QStringLiteral("bounded"));
    async->summary = {{"staleness_mean", 2.5}, {"staleness_max", 9}, {"final_eval_accuracy", 0.995}};
    const ComparisonTable t = compareRuns({sync, async, nullptr});
    QCOMPARE(t.header.size(), 14);
    QCOMPARE(t.tips.size(), t.header.size());
    QCOMPARE(t.rows.size(), 2);
    QCOMPARE(t.rows[0].mid(0, 7), (QStringList{QStringLiteral("baseline, 4|w"), QStringLiteral("sync"), QStringLiteral("4"),
                                              QStringLiteral("1.50"), QStringLiteral("40000"), QStringLiteral("25.0"),
                                              QStringLiteral("12.5")}));
    QCOMPARE(t.rows[0][7], QStringLiteral("0")); // sync: no update is stale
    QCOMPARE(t.rows[0][12], QStringLiteral("1.00"));
    QCOMPARE(t.rows[1][1], QStringLiteral("async (bound 2)"));
    QCOMPARE(t.rows[1][8], QStringLiteral("9"));
    QCOMPARE(t.rows[1][11], QStringLiteral("99.5"));
    QCOMPARE(t.rows[1][3], QString()); // not in its summary: blank, not 0
    const QStringList csv = t.toCsv().split(QLatin1Char('\n'));
    QVERIFY(csv[0].startsWith(QStringLiteral("run,mode,workers,wall (s)")));
    QVERIFY2(csv[1].startsWith(QStringLiteral("\"baseline, 4|w\",sync,4,1.50,")), qPrintable(csv[1]));
    const QStringList md = t.toMarkdown().split(QLatin1Char('\n'));
    QVERIFY(md[1].startsWith(QStringLiteral("| --- | --- | ---: |")));
    QVERIFY2(md[2].startsWith(QStringLiteral("| baseline, 4\\|w | sync | 4 |")), qPrintable(md[2]));
    // The window compares what it has: at least the runs of this session.
    QVERIFY(m_window->comparedRuns().size() >= 2);
    // Runs are named by preset, numbered from the second, and renamed by name.
    const RunDataPtr first = m_window->runs().front();
    QVERIFY(m_window->renameRun(first, QStringLiteral("  baseline  ")));
    QCOMPARE(first->label(), QStringLiteral("baseline"));
    QVERIFY(m_window->runListTexts().front().startsWith(QStringLiteral("baseline: ")));
    QVERIFY(!m_window->renameRun(first, QStringLiteral("   ")));
    // Its folder took the name, so the run opens under it later; a second run cannot take a
    // name whose folder exists, and keeps its own.
    QVERIFY(!first->directory().isEmpty());
    QCOMPARE(QDir(first->directory()).dirName(), QStringLiteral("baseline"));
    QVERIFY(QFileInfo::exists(QDir(first->directory()).filePath(QStringLiteral("summary.json"))));
    const RunDataPtr second = m_window->runs()[1];
    const QString secondDir = second->directory();
    QVERIFY(!m_window->renameRun(second, QStringLiteral("baseline")));
    QCOMPARE(second->directory(), secondDir);
    QVERIFY(m_window->bannerText().contains(QStringLiteral("exists")));
    QVERIFY(m_window->renameRun(second, QStringLiteral("../up/and away")));
    QCOMPARE(QDir(second->directory()).dirName(), QStringLiteral("_.._up_and_away"));
    QCOMPARE(QFileInfo(second->directory()).dir().absolutePath(), QFileInfo(secondDir).dir().absolutePath());
    QStringList labels;
    for (const RunDataPtr &r : m_window->runs())
        labels << r->label();
    QCOMPARE(QSet<QString>(labels.begin(), labels.end()).size(), labels.size()); // never two alike
    QVERIFY(runWith(*m_window, QStringLiteral("default"), 5));
    QVERIFY2(m_window->runs().back()->label() == QStringLiteral("default 2"), qPrintable(m_window->runs().back()->label()));
}

void TestMainWindow::presentationModeScalesFonts()
{
    const qreal before = QApplication::font().pointSizeF();
    m_window->setPresentationMode(true);
    // By the screen's height: at least 1.15 (a 1280x720 projector), at most 1.6.
    const qreal scale = QApplication::font().pointSizeF() / before;
    QVERIFY2(scale >= 1.14 && scale <= 1.61, qPrintable(QString::number(scale)));
    // Dock titles too: a dock paints its title in the platform's small dock font only while its
    // font equals the QDockWidget class font.
    const auto docks = m_window->findChildren<QDockWidget *>();
    QVERIFY(!docks.isEmpty());
    for (QDockWidget *d : docks) {
        QVERIFY2(d->font() != QApplication::font("QDockWidget"), qPrintable(d->windowTitle()));
        QVERIFY(d->font().pointSizeF() > before * 1.1);
    }
    m_window->setPresentationMode(false);
    QCOMPARE(QApplication::font().pointSizeF(), before);
    for (QDockWidget *d : docks)
        QCOMPARE(d->font().pointSizeF(), before);
}

// File > Import Traces on a real PyTorch profiler trace: the run opens with per-rank rows named
// as the trace's, the stall chart in front with its own title, a verdict in the banner, and
// the charts a trace has no data for say so; a damaged file lands in the banner by name.
void TestMainWindow::importedTraceOpensInTheViews()
{
    MainWindow &w = *m_window;
    const QString trace = QStringLiteral(SYNCOPATE_TEST_DATA "/kineto/single_rank_allreduce.pt.trace.json.gz");
    QString folder = QStringLiteral("not called");
    w.importTraces({trace}, [&](const QString &out) { folder = out; });
    QTRY_VERIFY_WITH_TIMEOUT(folder != QStringLiteral("not called"), 60000);
    QVERIFY2(!folder.isEmpty(), qPrintable(w.bannerText()));
    const RunDataPtr run = w.runs().back();
    QVERIFY(run->imported());
    QVERIFY(run->spanCount() > 0);
    QVERIFY2(run->title().contains(QStringLiteral("PyTorch profiler trace")), qPrintable(run->title()));
    QVERIFY2(run->rowLabel(run->rows().front()).startsWith(QStringLiteral("rank ")), qPrintable(run->rowLabel(run->rows().front())));
    QVERIFY2(w.bannerText().contains(QStringLiteral("One rank loaded")), qPrintable(w.bannerText()));
    QVERIFY2(placeholderText(w.charts()->lossPlot()).contains(QStringLiteral("no loss")),
             qPrintable(placeholderText(w.charts()->lossPlot())));
    const auto *title = qobject_cast<QCPTextElement *>(w.charts()->stallPlot()->plotLayout()->element(0, 0));
    QVERIFY(title && title->text().contains(QStringLiteral("collectives")));
    const QString png = m_dir.filePath(QStringLiteral("imported-timeline.png"));
    QVERIFY(w.exportView(QStringLiteral("timeline"), png, QSize(1200, 500), 1.0));
    QVERIFY(distinctColours(QImage(png)) >= 4);

    const QString bad = m_dir.filePath(QStringLiteral("rank0.json"));
    QFile f(bad);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{\"traceEvents\": [");
    f.close();
    const int runs = int(w.runs().size());
    folder = QStringLiteral("not called");
    w.importTraces({bad}, [&](const QString &out) { folder = out; });
    QTRY_VERIFY_WITH_TIMEOUT(folder != QStringLiteral("not called"), 30000);
    QVERIFY(folder.isEmpty());
    QCOMPARE(int(w.runs().size()), runs);
    QVERIFY2(w.bannerText().contains(QStringLiteral("rank0.json")), qPrintable(w.bannerText()));
}

// File > Save Config As writes a file that syncopate-cli runs as the form's experiment, and
// that Open Config reads back into the same form.
void TestMainWindow::saveConfigRoundTripsThroughTheCli()
{
    MainWindow &w = *m_window;
    w.selectPreset(QStringLiteral("straggler-sync"));
    static_cast<QSpinBox *>(w.form()->field(QStringLiteral("train.steps")))->setValue(4);
    static_cast<QSpinBox *>(w.form()->field(QStringLiteral("eval.every")))->setValue(2);
    const nlohmann::json expected = parseConfig(w.form()->toJson()).toJson();
    QVERIFY(QDir().mkpath(m_dir.filePath(QStringLiteral("saved"))));
    const QString file = m_dir.filePath(QStringLiteral("saved/straggler.json"));
    QVERIFY2(w.saveConfigAs(file), qPrintable(w.bannerText()));
    const nlohmann::json saved = readJsonFile(file.toStdString());
    QVERIFY2(saved.contains("train") && saved["train"].is_object(), saved.dump().c_str()); // nested, as config.json

    QProcess cli;
    const QString out = m_dir.filePath(QStringLiteral("saved/run"));
    cli.start(QStringLiteral(SYNCOPATE_CLI),
              {QStringLiteral("run"), QStringLiteral("--config"), file, QStringLiteral("--out"), out});
    QVERIFY(cli.waitForFinished(120000));
    QVERIFY2(cli.exitStatus() == QProcess::NormalExit && cli.exitCode() == 0, cli.readAllStandardError().constData());
    const nlohmann::json ran = parseConfig(readJsonFile(QDir(out).filePath(QStringLiteral("config.json")).toStdString())).toJson();
    QVERIFY2(ran == expected, (ran.dump() + "\n" + expected.dump()).c_str());

    w.selectPreset(QStringLiteral("default"));
    w.loadConfigFile(file);
    QVERIFY2(w.bannerText().isEmpty(), qPrintable(w.bannerText()));
    QVERIFY(parseConfig(w.form()->toJson()).toJson() == expected);

    // A form the CLI would refuse is not saved; the field at fault is marked instead.
    const QString bad = m_dir.filePath(QStringLiteral("saved/bad.json"));
    auto *layers = qobject_cast<QLineEdit *>(w.form()->field(QStringLiteral("model.layers")));
    QVERIFY(layers);
    layers->setText(QStringLiteral("64, 512, x"));
    QVERIFY(!w.saveConfigAs(bad));
    QVERIFY(!QFileInfo::exists(bad));
    QVERIFY2(w.bannerText().contains(QStringLiteral("not saved")), qPrintable(w.bannerText()));
    QVERIFY(layers->property("configError").toBool());
    w.selectPreset(QStringLiteral("default"));
}

// File > Recent Configs: newest first, a file opened again moves to the front, a file that is
// gone is dropped with a word in the status bar, at most kMaxRecent, and Clear List.
void TestMainWindow::recentConfigsKeepOrderAndDropMissing()
{
    MainWindow &w = *m_window;
    w.selectPreset(QStringLiteral("default"));
    w.settings().recentConfigs.clear();
    QVERIFY(QDir().mkpath(m_dir.filePath(QStringLiteral("recent"))));
    QStringList files;
    for (const char *name : {"one", "two", "three"}) {
        files << m_dir.filePath(QStringLiteral("recent/%1.json").arg(QLatin1String(name)));
        QVERIFY(w.saveConfigAs(files.back()));
    }
    QCOMPARE(w.settings().recentConfigs, (QStringList{files[2], files[1], files[0]}));
    w.loadConfigFile(files[0]);
    QCOMPARE(w.settings().recentConfigs, (QStringList{files[0], files[2], files[1]}));

    auto entries = [&] {
        QStringList paths;
        for (QAction *a : w.recentConfigsMenu()->actions())
            if (a->data().isValid())
                paths << a->data().toString();
        return paths;
    };
    w.updateRecentMenus();
    QCOMPARE(entries(), w.settings().recentConfigs);
    QCOMPARE(w.recentConfigsMenu()->actions().front()->text(), QStringLiteral("&1 one.json"));

    QVERIFY(QFile::remove(files[2]));
    w.updateRecentMenus();
    QCOMPARE(w.settings().recentConfigs, (QStringList{files[0], files[1]}));
    QCOMPARE(entries(), w.settings().recentConfigs);
    QVERIFY2(w.statusBar()->currentMessage().contains(QStringLiteral("three.json")), qPrintable(w.statusBar()->currentMessage()));

    // Gone while the menu was open: dropped when chosen.
    QAction *two = w.recentConfigsMenu()->actions().at(1);
    QVERIFY(QFile::remove(files[1]));
    two->trigger();
    QCOMPARE(w.settings().recentConfigs, QStringList{files[0]});
    QVERIFY2(w.statusBar()->currentMessage().contains(QStringLiteral("two.json")), qPrintable(w.statusBar()->currentMessage()));

    for (int i = 0; i < 12; ++i)
        AppSettings::addRecent(w.settings().recentConfigs, files[0] + QString::number(i));
    QCOMPARE(int(w.settings().recentConfigs.size()), AppSettings::kMaxRecent);
    QCOMPARE(w.settings().recentConfigs.front(), files[0] + QStringLiteral("11"));
    w.settings().recentConfigs = {files[0]};
    w.updateRecentMenus();
    QAction *clear = nullptr;
    for (QAction *a : w.recentConfigsMenu()->actions())
        if (a->text() == QLatin1String("&Clear List"))
            clear = a;
    QVERIFY(clear && clear->isEnabled());
    clear->trigger();
    QVERIFY(w.settings().recentConfigs.isEmpty());
}

// File > Browse Runs on the runs of this session: a rename there moves the window's run and its
// Recent Runs entry with the folder, Open adds the run to the window, Delete drops the entry.
void TestMainWindow::browserFollowsTheWindowsRuns()
{
    MainWindow &w = *m_window;
    const QString runsFolder = QFileInfo(w.settings().runsFolder).absoluteFilePath();
    RunDataPtr run;
    for (const RunDataPtr &r : w.runs())
        if (!r->imported() && QFileInfo(r->directory()).absolutePath() == runsFolder)
            run = r;
    QVERIFY(run);
    const QString from = QFileInfo(run->directory()).absoluteFilePath();
    QVERIFY(w.settings().recentRuns.contains(from));

    RunsBrowser *b = w.showRunsBrowser();
    QVERIFY(b->isVisible());
    QCOMPARE(b->runsFolder(), runsFolder);
    QVERIFY(b->model()->rowCount() >= 2);
    for (const RunFolderInfo &r : b->model()->runs())
        QVERIFY2(QStringList({QStringLiteral("finished"), QStringLiteral("stopped")}).contains(r.status),
                 qPrintable(r.name + QLatin1Char(' ') + r.status));

    const QString to = QDir(runsFolder).filePath(QStringLiteral("renamed-in-the-browser"));
    QVERIFY2(b->renameRun(from, QStringLiteral("renamed-in-the-browser")), qPrintable(b->message()));
    QCOMPARE(run->directory(), to);
    QVERIFY(w.settings().recentRuns.contains(to));
    QVERIFY(!w.settings().recentRuns.contains(from));

    const std::size_t before = w.runs().size();
    QVERIFY(b->select(to));
    b->findChild<QPushButton *>(QStringLiteral("openRun"))->click();
    QCOMPARE(w.runs().size(), before + 1);
    QCOMPARE(w.runs().back()->spanCount(), run->spanCount());
    QVERIFY(!b->isVisible());
    QCOMPARE(w.settings().recentRuns.front(), to);

    QCOMPARE(w.showRunsBrowser(), b);
    QVERIFY(b->deleteRun(to));
    QVERIFY(!w.settings().recentRuns.contains(to));
    b->close();
}

// Help > What's This (Shift+F1) on a view explains its metric in the words of its tooltip;
// Help > Keyboard Shortcuts and Help > Lesson are there beside it.
void TestMainWindow::whatsThisExplainsEachView()
{
    MainWindow &w = *m_window;
    QVERIFY(w.timeline()->whatsThis().contains(metricHelp(QStringLiteral("timeline")).toHtmlEscaped()));
    QVERIFY(w.timeline()->whatsThis().contains(metricHelp(QStringLiteral("off cpu")).toHtmlEscaped()));
    for (const auto &[name, plot] : w.charts()->plots()) {
        QVERIFY2(!metricHelp(name).isEmpty(), qPrintable(name));
        QVERIFY2(plot->whatsThis().contains(metricHelp(name).toHtmlEscaped()), qPrintable(name));
    }
    QStringList help;
    for (QAction *a : w.findChildren<QAction *>())
        if (a->shortcut() == QKeySequence(Qt::SHIFT | Qt::Key_F1) || a->text() == QLatin1String("&Keyboard Shortcuts") ||
            (a->text() == QLatin1String("&Lesson") && a->shortcut() == QKeySequence(Qt::Key_F2)))
            help << a->text();
    QCOMPARE(help.size(), 3);

    QVERIFY(w.showChart(QStringLiteral("stalls")));
    QCustomPlot *stalls = w.charts()->stallPlot();
    QHelpEvent event(QEvent::WhatsThis, QPoint(30, 30), stalls->mapToGlobal(QPoint(30, 30)));
    QApplication::sendEvent(stalls, &event);
    QTRY_VERIFY(QApplication::activePopupWidget());
    QWhatsThis::hideText();
    QTRY_VERIFY(!QApplication::activePopupWidget());
}

// Settings written before the version key are migrated (import/lastFolder became import/folder),
// and a value of the wrong type is ignored, not restored into its field as something else.
void TestMainWindow::oldSettingsAreMigratedOrDropped()
{
    QTemporaryDir dir;
    const QString file = dir.filePath(QStringLiteral("old.ini"));
    {
        QSettings s(file, QSettings::IniFormat);
        s.setValue(QStringLiteral("import/lastFolder"), QStringLiteral("/data/old-traces"));
        s.setValue(QStringLiteral("mpi/ranks"), 6);
        s.setValue(QStringLiteral("files/runsFolder"), QStringLiteral("/data/runs"));
        s.setValue(QStringLiteral("charts/tab"), QStringLiteral("Loss"));
        s.setValue(QStringLiteral("charts/lossSmoothing"), 2.5);
        s.setValue(QStringLiteral("view/presentation"), QStringLiteral("maybe"));
        s.setValue(QStringLiteral("window/geometry"), QStringLiteral("not a geometry"));
        s.setValue(QStringLiteral("files/exportFolder"), QStringList{QStringLiteral("/a"), QStringLiteral("/b")});
    }
    QSettings s(file, QSettings::IniFormat);
    AppSettings a;
    a.presentation = true;
    QStringList ignored = a.load(s);
    ignored.sort();
    const AppSettings d = AppSettings::defaults();
    QCOMPARE(a.importFolder, QStringLiteral("/data/old-traces"));
    QCOMPARE(a.mpiRanks, 6);
    QCOMPARE(a.runsFolder, QStringLiteral("/data/runs"));
    QCOMPARE(a.chartTab, d.chartTab);
    QCOMPARE(a.lossSmoothing, d.lossSmoothing);
    QCOMPARE(a.presentation, d.presentation);
    QVERIFY(a.windowGeometry.isEmpty());
    QCOMPARE(a.exportFolder, d.exportFolder);
    QCOMPARE(ignored, (QStringList{QStringLiteral("charts/lossSmoothing"), QStringLiteral("charts/tab"),
                                   QStringLiteral("files/exportFolder"), QStringLiteral("view/presentation"),
                                   QStringLiteral("window/geometry")}));

    // Saved again: this version, under the new name only, the garbled values replaced.
    a.save(s);
    s.sync();
    QCOMPARE(s.value(QStringLiteral("settings/version")).toInt(), AppSettings::kSettingsVersion);
    QVERIFY(!s.contains(QStringLiteral("import/lastFolder")));
    AppSettings b;
    QVERIFY(b.load(s).isEmpty());
    QCOMPARE(b.importFolder, QStringLiteral("/data/old-traces"));

    // In a file of this version the old name means nothing any more.
    QSettings current(dir.filePath(QStringLiteral("current.ini")), QSettings::IniFormat);
    current.setValue(QStringLiteral("settings/version"), AppSettings::kSettingsVersion);
    current.setValue(QStringLiteral("import/lastFolder"), QStringLiteral("/elsewhere"));
    AppSettings c;
    c.load(current);
    QCOMPARE(c.importFolder, d.importFolder);
}

void TestMainWindow::recentListsRoundTrip_data()
{
    QTest::addColumn<QStringList>("list");
    QTest::newRow("empty") << QStringList();
    QTest::newRow("one") << QStringList{QStringLiteral("/home/x/a b.json")};
    QTest::newRow("one with a comma") << QStringList{QStringLiteral("/runs/sync-workers=8,train.lr=0.1")};
    QTest::newRow("several") << QStringList{QStringLiteral("/a.json"), QStringLiteral("/b, c.json"), QStringLiteral("/d.json")};
}

// Recent lists through a settings file as it is written to disk (an INI file gives back one
// entry as a plain string, and no entry as an invalid value).
void TestMainWindow::recentListsRoundTrip()
{
    QFETCH(QStringList, list);
    QTemporaryDir dir;
    const QString file = dir.filePath(QStringLiteral("s.ini"));
    {
        QSettings s(file, QSettings::IniFormat);
        AppSettings a = AppSettings::defaults();
        a.recentConfigs = list;
        a.recentRuns = list;
        a.save(s);
    }
    QSettings s(file, QSettings::IniFormat);
    AppSettings b;
    QVERIFY(b.load(s).isEmpty());
    QCOMPARE(b.recentConfigs, list);
    QCOMPARE(b.recentRuns, list);
}

// A run folder another process is writing (here an Engine of the test's own, which holds the
// folder's lock as syncopate-cli would) is followed live when opened, and read as it ended once
// its writer lets go: the spans of opening the finished folder. Stop stops following only.
void TestMainWindow::aRunWrittenElsewhereIsFollowed()
{
    MainWindow &w = *m_window;
    QVERIFY(!w.controller()->isRunning());
    const nlohmann::json config = {{"workers", 2}, {"data", {{"source", "blobs"}, {"samples", 256}}},
                                   {"train", {{"steps", 300}, {"batch", 8}}}, {"eval", {{"samples", 0}}}};
    for (const bool stopFollowing : {false, true}) {
        const QString dir = m_dir.filePath(stopFollowing ? QStringLiteral("elsewhere-left") : QStringLiteral("elsewhere"));
        PreparedRun p = prepareRun(config);
        Engine e(p.config, p.train, p.eval);
        e.setOutputDirectory(dir.toStdString());
        e.setPaused(0, true); // held at its first step until the window follows it
        e.start();
        QTRY_VERIFY_WITH_TIMEOUT(QFileInfo::exists(dir + QStringLiteral("/config.json")), 20000);
        const qsizetype listed = w.runListTexts().size();
        QVERIFY(w.openRun(dir));
        QVERIFY(w.controller()->following());
        QTRY_COMPARE_WITH_TIMEOUT(w.runListTexts().size(), listed + 1, 20000);
        QVERIFY2(w.runListTexts().back().contains(QStringLiteral("(running)")), qPrintable(w.runListTexts().back()));
        QSignalSpy finished(&w, &MainWindow::runFinished);
        if (stopFollowing) {
            w.controller()->stop();
            QCOMPARE(finished.size(), 1);
            QVERIFY(!w.controller()->isRunning());
            const RunDataPtr left = w.runs().back();
            QCOMPARE(left->state, RunState::Stopped);
            QVERIFY(left->writtenElsewhere);
            e.setPaused(0, false);
            e.wait(); // the run went on without the window
            QCOMPARE(e.state(), RunState::Finished);
            continue;
        }
        e.setPaused(0, false);
        e.wait();
        QVERIFY(finished.wait(20000));
        const RunDataPtr followed = w.runs().back();
        QCOMPARE(followed->state, RunState::Finished);
        QVERIFY(!followed->interrupted && !followed->writtenElsewhere);
        QCOMPARE(followed->summary.value("steps_completed", 0), 300);
        QString error;
        const RunDataPtr opened = RunController::openRun(dir, &error);
        QVERIFY2(opened, qPrintable(error));
        QVERIFY(followed->spanCount() > 0);
        QCOMPARE(followed->spanCount(), opened->spanCount());
    }
}

QTEST_MAIN(TestMainWindow)
#include "tst_mainwindow.moc"
