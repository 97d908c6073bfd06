#include "mainwindow.h"

#include "cpu/cpudevice.h"

#include "charts.h"
#include "comparison.h"
#include "experimentform.h"
#include "exporter.h"
#include "kineto.h"
#include "lesson.h"
#include "phasestyle.h"
#include "runcontroller.h"
#include "runsbrowser.h"
#include "session.h"
#include "timelineview.h"

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QCloseEvent>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGridLayout>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QFontDatabase>
#include <QPlainTextEdit>
#include <QTextCursor>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QSettings>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QTableWidget>
#include <QThread>
#include <QDateTime>
#include <QToolBar>
#include <QToolButton>
#include <QVBoxLayout>
#include <QWhatsThis>

#include <algorithm>

namespace syncopate {
namespace {

QString formatSeconds(double s)
{
    if (s < 0)
        return QStringLiteral("--");
    const int total = int(s + 0.5);
    return total >= 60 ? QStringLiteral("%1:%2").arg(total / 60).arg(total % 60, 2, 10, QLatin1Char('0'))
                       : QStringLiteral("%1 s").arg(s, 0, 'f', 1);
}

// The views with their metricHelp() keys: Help > What the Views Show, and What's This on each.
std::vector<std::pair<QString, QString>> viewHelp()
{
    return {{QStringLiteral("timeline"), QObject::tr("Timeline")}, {QStringLiteral("off cpu"), QObject::tr("Off CPU")},
            {QStringLiteral("loss"), QObject::tr("Loss")},         {QStringLiteral("stalls"), QObject::tr("Stalls")},
            {QStringLiteral("staleness"), QObject::tr("Staleness")},
            {QStringLiteral("memory"), QObject::tr("Activation memory")},
            {QStringLiteral("throughput"), QObject::tr("Throughput")}};
}

QString helpParagraph(const QString &key)
{
    for (const auto &[k, name] : viewHelp())
        if (k == key)
            return QStringLiteral("<p><b>%1</b>: %2</p>").arg(name, metricHelp(key).toHtmlEscaped());
    return {};
}

} // namespace

MainWindow::MainWindow(QWidget *parent) : QMainWindow(parent), m_controller(new RunController(this))
{
    setWindowTitle(tr("Syncopate"));
    setObjectName(QStringLiteral("MainWindow"));
    m_baseFont = QApplication::font();

    // Central area: error banner, timeline, range summary, charts.
    auto *central = new QWidget;
    auto *layout = new QVBoxLayout(central);
    layout->setContentsMargins(4, 4, 4, 4);
    m_banner = new QFrame;
    m_banner->setObjectName(QStringLiteral("banner"));
    auto *bannerLayout = new QHBoxLayout(m_banner);
    m_bannerText = new QLabel;
    m_bannerText->setWordWrap(true);
    // Messages are escaped and use <br>; without this a message with no tag shows its entities.
    m_bannerText->setTextFormat(Qt::RichText);
    m_bannerText->setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::LinksAccessibleByMouse);
    connect(m_bannerText, &QLabel::linkActivated, this, [this](const QString &link) {
        if (link == QLatin1String("save-elsewhere"))
            saveRunElsewhere();
        else if (link == QLatin1String("choose-runs-folder") && chooseRunsFolder())
            hideBanner();
    });
    auto *close = new QToolButton;
    close->setText(QStringLiteral("\u2715"));
    close->setToolTip(tr("Dismiss"));
    connect(close, &QToolButton::clicked, this, &MainWindow::hideBanner);
    bannerLayout->addWidget(m_bannerText, 1);
    bannerLayout->addWidget(close);
    m_banner->hide();
    layout->addWidget(m_banner);

    auto *splitter = new QSplitter(Qt::Vertical);
    splitter->setObjectName(QStringLiteral("centralSplitter"));
    auto *top = new QWidget;
    auto *topLayout = new QVBoxLayout(top);
    topLayout->setContentsMargins(0, 0, 0, 0);
    m_timeline = new TimelineView;
    m_timeline->setMinimumHeight(220);
    m_rangeSummary = new QLabel(tr("Shift+drag on the timeline to summarise a time range."));
    m_rangeSummary->setWordWrap(true);
    m_rangeSummary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    topLayout->addWidget(m_timeline, 1);
    topLayout->addWidget(m_rangeSummary);
    m_charts = new ChartsWidget;
    m_charts->setMinimumHeight(200);
    splitter->addWidget(top);
    splitter->addWidget(m_charts);
    splitter->setStretchFactor(0, 1);
    splitter->setStretchFactor(1, 1);
    splitter->setSizes({480, 420});
    layout->addWidget(splitter, 1);
    setCentralWidget(central);

    connect(m_timeline, &TimelineView::rangeSummaryAvailable, m_rangeSummary, &QLabel::setText);

    createDocks();
    createActions();
    // Help > What's This (Shift+F1), then a click on a view: the metric it draws, in the words of
    // its tooltip. The timeline's hatching is the off-CPU time, so its help says that too.
    m_timeline->setWhatsThis(helpParagraph(QStringLiteral("timeline")) + helpParagraph(QStringLiteral("off cpu")));
    for (const auto &[key, plot] : m_charts->plots())
        plot->setWhatsThis(helpParagraph(key));

    // Status bar: step, rate, time, progress.
    m_stepLabel = new QLabel(tr("ready"));
    m_rateLabel = new QLabel;
    // The kernels in use, as oneDNN reports them, so that a rate is read against its machine.
    const QString cpuKernels = tr("CPU matmuls: %1, kernels for %2")
                                   .arg(QString::fromStdString(cpuLibrary()), QString::fromStdString(cpuIsa()));
    m_rateLabel->setToolTip(metricHelp(QStringLiteral("throughput")) + QStringLiteral("\n\n") + cpuKernels);
    statusBar()->setToolTip(cpuKernels);
    m_timeLabel = new QLabel;
    m_progress = new QProgressBar;
    m_progress->setMaximumWidth(260);
    m_progress->setRange(0, 1000);
    m_progress->setValue(0);
    m_progress->setTextVisible(true);
    // On the right, beside the progress bar: the left is for messages, which would otherwise
    // be drawn over the step count.
    statusBar()->addPermanentWidget(m_stepLabel);
    statusBar()->addPermanentWidget(m_rateLabel);
    statusBar()->addPermanentWidget(m_timeLabel);
    statusBar()->addPermanentWidget(m_progress);

    connect(m_controller, &RunController::runStarted, this, &MainWindow::onRunStarted);
    connect(m_controller, &RunController::progressChanged, this, &MainWindow::onProgress);
    connect(m_controller, &RunController::runFinished, this, &MainWindow::onRunFinished);
    connect(m_controller, &RunController::runFailed, this, &MainWindow::onRunFailed);
    connect(m_controller, &RunController::dataAvailable, this, [this] {
        m_timeline->refresh();
        // Charts at a fifteenth of the timeline's rate (2 Hz): they redraw every point (sixteen
        // workers' curves were a fifth of the GUI thread's time at 3 Hz), and a curve that
        // moves twice a second still reads as live.
        if (++m_chartTick % 15 == 0)
            m_charts->refresh();
    });
    connect(m_timeline, &TimelineView::followLiveChanged, m_followAction, &QAction::setChecked);

    m_defaultState = saveState(AppSettings::kLayoutVersion); // what View > Reset Layout restores
    QSettings qs;
    m_settings.load(qs);
    resize(defaultSize());
    if (!m_settings.windowGeometry.isEmpty())
        restoreGeometry(m_settings.windowGeometry);
    if (!m_settings.windowState.isEmpty())
        restoreState(m_settings.windowState, AppSettings::kLayoutVersion);
    const auto last = nlohmann::json::parse(m_settings.lastExperiment.toStdString(), nullptr, false);
    if (!m_settings.lastPreset.isEmpty())
        m_form->selectPreset(m_settings.lastPreset);
    if (last.is_object() && !last.empty())
        m_form->setFromJson(last);
    rebuildWorkerControls(m_form->workers(), false);
    m_followAction->setChecked(m_settings.followLive);
    m_charts->setCurrentIndex(std::clamp(m_settings.chartTab, 0, m_charts->count() - 1));
    m_charts->setLossAgainstTime(m_settings.lossAgainstTime);
    m_charts->setSmoothing(m_settings.lossSmoothing); // the spin box clamps it to its range
    m_charts->setLogLoss(m_settings.lossLog);
    if (m_settings.presentation)
        setPresentationMode(true);
    updateRecentMenus();
    updateActions();
}

MainWindow::~MainWindow()
{
    // An import still reading: its thread owns nothing of the window, but must end first.
    if (m_importThread)
        m_importThread->wait();
}

void MainWindow::importTraces(const QStringList &paths, std::function<void(const QString &)> done)
{
    if (m_importThread) {
        statusBar()->showMessage(tr("An import is still running; try again when it has finished"), 5000);
        if (done)
            done(QString());
        return;
    }
    const QString out = QDir(m_settings.runsFolder)
                            .filePath(QStringLiteral("import-") +
                                      QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss")));
    std::vector<std::string> files;
    for (const QString &p : paths)
        files.push_back(QDir::toNativeSeparators(p).toStdString());
    auto error = std::make_shared<QString>();
    KinetoOptions options;
    options.alignClocks = m_settings.alignClocks;
    m_importThread = QThread::create([files, out, error, options] {
        try {
            writeImportedRun(importKineto(files, options), out.toStdString());
        } catch (const std::exception &e) {
            *error = QString::fromStdString(e.what());
        }
    });
    statusBar()->showMessage(tr("Importing %n trace file(s)\u2026", nullptr, int(paths.size())));
    connect(m_importThread, &QThread::finished, this, [this, out, error, done] {
        m_importThread->deleteLater();
        m_importThread = nullptr;
        statusBar()->clearMessage();
        if (!error->isEmpty()) {
            showBanner(tr("Cannot import the traces: %1").arg(error->toHtmlEscaped()));
            if (done)
                done(QString());
            return;
        }
        const bool opened = openRun(out);
        if (opened)
            statusBar()->showMessage(tr("Imported into %1").arg(out), 8000);
        if (done)
            done(opened ? out : QString());
    });
    m_importThread->start();
}

QString MainWindow::importVerdict(const RunData &run)
{
    const auto &s = run.summary;
    QStringList lines;
    const auto st = s.find("straggler");
    if (st != s.end() && st->is_object() && st->contains("rank"))
        lines << tr("<b>Straggler: rank %1</b>, the last to start in %2 of %3 matched collectives, "
                    "%4 ms after the next-latest rank on average.")
                     .arg(st->value("rank", -1))
                     .arg(st->value("last_count", 0))
                     .arg(s.value("collectives_matched", 0))
                     .arg(st->value("mean_late_ms", 0.0), 0, 'f', 3);
    else if (run.workers() < 2)
        lines << tr("One rank loaded: stalls are measured against the other ranks, so import them all to see who waits for whom.");
    else
        lines << tr("No straggler: no collective was matched across the loaded ranks.");
    const auto clocks = s.find("clock_alignment");
    if (clocks != s.end() && clocks->is_object() && clocks->value("enabled", false))
        lines << tr("Clocks aligned: %1").arg(QString::fromStdString(clocks->value("note", std::string())).toHtmlEscaped());
    for (const char *key : {"notes", "warnings"})
        if (s.contains(key) && s[key].is_array())
            for (const auto &n : s[key])
                if (n.is_string())
                    lines << QString::fromStdString(n.get<std::string>()).toHtmlEscaped();
    return lines.join(QStringLiteral("<br>"));
}

void MainWindow::createDocks()
{
    auto *formDock = new QDockWidget(tr("Experiment"), this);
    formDock->setObjectName(QStringLiteral("experimentDock"));
    auto *formPage = new QWidget;
    auto *formLayout = new QVBoxLayout(formPage);
    formLayout->setContentsMargins(0, 0, 0, 0);
    m_form = new ExperimentForm;
    auto *runButton = new QPushButton(tr("Run experiment"));
    runButton->setToolTip(tr("Validate the form and start the run (F5)."));
    connect(runButton, &QPushButton::clicked, this, [this] { startRun(); });
    formLayout->addWidget(m_form, 1);
    formLayout->addWidget(runButton);
    formDock->setWidget(formPage);
    formPage->setMinimumWidth(360);
    addDockWidget(Qt::LeftDockWidgetArea, formDock);
    connect(m_form, &ExperimentForm::noteChanged, this, [this](const QString &text) {
        statusBar()->showMessage(text, 8000);
    });
    connect(m_form, &ExperimentForm::workersChanged, this, [this](int n) {
        if (!m_controller->isRunning())
            rebuildWorkerControls(n, false);
    });
    connect(m_form, &ExperimentForm::presetChosen, this, [this](const QString &name, const QString &) {
        m_settings.lastPreset = name;
        hideBanner();
        if (!m_controller->isRunning())
            rebuildWorkerControls(m_form->workers(), false);
    });

    auto *workerDock = new QDockWidget(tr("Workers (live)"), this);
    workerDock->setObjectName(QStringLiteral("workersDock"));
    m_workerPanel = new QWidget;
    m_workerGrid = new QGridLayout(m_workerPanel);
    workerDock->setWidget(m_workerPanel);
    addDockWidget(Qt::LeftDockWidgetArea, workerDock);

    auto *runsDock = new QDockWidget(tr("Runs"), this);
    runsDock->setObjectName(QStringLiteral("runsDock"));
    m_runList = new QListWidget;
    m_runList->setToolTip(tr("The runs of this session and runs opened from disk. Select one to "
                             "show it; check others to overlay their loss, memory and throughput; "
                             "double-click to rename."));
    runsDock->setWidget(m_runList);
    addDockWidget(Qt::LeftDockWidgetArea, runsDock);
    resizeDocks({formDock, workerDock, runsDock}, {560, 170, 120}, Qt::Vertical);

    // Help > Lesson: a tab beside the form (at 720 lines there is no room for a column of its
    // own), hidden until asked for.
    m_lessonDock = new QDockWidget(tr("Lesson"), this);
    m_lessonDock->setObjectName(QStringLiteral("lessonDock"));
    m_lesson = new LessonPanel(this);
    m_lessonDock->setWidget(m_lesson);
    addDockWidget(Qt::LeftDockWidgetArea, m_lessonDock);
    tabifyDockWidget(formDock, m_lessonDock);
    m_lessonDock->hide();
    formDock->raise();

    // Run > Run with MPI: what mpirun and the ranks print, shown when such a run starts.
    m_mpiLogDock = new QDockWidget(tr("MPI Log"), this);
    m_mpiLogDock->setObjectName(QStringLiteral("mpiLogDock"));
    m_mpiLog = new QPlainTextEdit;
    m_mpiLog->setReadOnly(true);
    m_mpiLog->setMaximumBlockCount(5000);
    m_mpiLog->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_mpiLog->setToolTip(tr("The mpirun command line and what mpirun and every rank print (rank 0 "
                            "prints for the run; errors name the rank and host)"));
    m_mpiLogDock->setWidget(m_mpiLog);
    addDockWidget(Qt::BottomDockWidgetArea, m_mpiLogDock);
    m_mpiLogDock->hide();
    connect(m_controller, &RunController::logAppended, this, [this](const QString &text) {
        m_mpiLog->moveCursor(QTextCursor::End);
        m_mpiLog->insertPlainText(text);
        m_mpiLog->moveCursor(QTextCursor::End);
    });
    connect(m_runList, &QListWidget::currentRowChanged, this, [this](int row) {
        if (row >= 0 && row < int(m_runs.size()) && !m_controller->isRunning())
            showRun(m_runs[std::size_t(row)]);
    });
    connect(m_runList, &QListWidget::itemChanged, this, [this] { updateCompare(); });
    connect(m_runList, &QListWidget::itemDoubleClicked, this, [this](QListWidgetItem *item) {
        const int row = m_runList->row(item);
        if (row < 0 || row >= int(m_runs.size()))
            return;
        const RunDataPtr run = m_runs[std::size_t(row)];
        bool ok = false;
        const QString name = QInputDialog::getText(this, tr("Rename run"), tr("Name (in the list, legends and titles):"),
                                                   QLineEdit::Normal, run->label(), &ok);
        if (ok)
            renameRun(run, name);
    });
}

void MainWindow::createActions()
{
    QMenu *file = menuBar()->addMenu(tr("&File"));
    QAction *open = file->addAction(tr("&Open Run..."), this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a run directory"), m_settings.runsFolder);
        if (!dir.isEmpty())
            openRun(dir);
    });
    open->setShortcut(QKeySequence::Open);
    QAction *browse = file->addAction(tr("&Browse Runs..."), this, [this] { showRunsBrowser(); });
    browse->setShortcut(QKeySequence(tr("Ctrl+Shift+O")));
    browse->setToolTip(tr("The runs in the runs folder with their status and size: open, rename or delete them (Ctrl+Shift+O)"));
    m_recentRuns = file->addMenu(tr("Recent &Runs"));
    m_recentRuns->setObjectName(QStringLiteral("recentRuns"));
    connect(m_recentRuns, &QMenu::aboutToShow, this, &MainWindow::updateRecentMenus);
    QAction *importFiles = file->addAction(tr("&Import Traces..."), this, [this] {
        const QStringList files = QFileDialog::getOpenFileNames(
            this, tr("Import PyTorch profiler traces, one file per rank"), m_settings.importFolder,
            tr("PyTorch profiler traces (*.json *.json.gz *.pt.trace.json *.pt.trace.json.gz);;All files (*)"));
        if (files.isEmpty())
            return;
        m_settings.importFolder = QFileInfo(files.front()).absolutePath();
        importTraces(files);
    });
    importFiles->setShortcut(QKeySequence(tr("Ctrl+I")));
    importFiles->setToolTip(tr("Read a distributed job's PyTorch profiler (Kineto) traces, one per rank: "
                               "per-rank timeline, stalls per rank per step, the straggler"));
    file->addAction(tr("Import Trace &Folder..."), this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Import every trace in a folder"), m_settings.importFolder);
        if (dir.isEmpty())
            return;
        m_settings.importFolder = dir;
        importTraces({dir});
    });
    QAction *align = file->addAction(tr("Align Rank &Clocks on Import"));
    align->setCheckable(true);
    align->setChecked(m_settings.alignClocks);
    align->setToolTip(tr("Shift each rank's times so that the ends of its matched collectives meet the "
                         "first rank's (they end nearly together on every rank): for traces from hosts "
                         "whose clocks disagree. Off: each file's own clock."));
    connect(align, &QAction::toggled, this, [this](bool on) { m_settings.alignClocks = on; });
    file->addAction(tr("Open &Config..."), this, [this] {
        const QString f = QFileDialog::getOpenFileName(this, tr("Open a config"), QString(), tr("JSON (*.json)"));
        if (!f.isEmpty())
            loadConfigFile(f);
    });
    QAction *saveConfig = file->addAction(tr("&Save Config As..."), this, [this] { saveConfigAs(); });
    saveConfig->setShortcut(QKeySequence(tr("Ctrl+Shift+S")));
    saveConfig->setToolTip(tr("Save the form's experiment as a config file: Open Config loads it, and "
                              "syncopate-cli run --config FILE runs it (Ctrl+Shift+S)"));
    m_recentConfigs = file->addMenu(tr("Recent Con&figs"));
    m_recentConfigs->setObjectName(QStringLiteral("recentConfigs"));
    connect(m_recentConfigs, &QMenu::aboutToShow, this, &MainWindow::updateRecentMenus);
    file->addSeparator();
    QAction *exportTimeline = file->addAction(tr("Export &Timeline..."), this, [this] { exportDialog(QStringLiteral("timeline")); });
    exportTimeline->setShortcut(QKeySequence(tr("Ctrl+E")));
    QAction *exportChart = file->addAction(tr("Export &Chart..."), this, [this] {
        const QStringList names = {QStringLiteral("loss"), QStringLiteral("stalls"), QStringLiteral("staleness"),
                                   QStringLiteral("memory"), QStringLiteral("throughput")};
        exportDialog(names.value(m_charts->currentIndex()));
    });
    exportChart->setShortcut(QKeySequence(tr("Ctrl+Shift+E")));
    file->addAction(tr("Export Trace &JSON..."), this, [this] { exportRunFile(QStringLiteral("trace.json")); });
    file->addAction(tr("Export &Metrics CSV..."), this, [this] { exportRunFile(QStringLiteral("metrics.csv")); });
    QAction *copy = file->addAction(tr("Cop&y Timeline Image"), this, &MainWindow::copyImage);
    copy->setShortcut(QKeySequence(tr("Ctrl+Shift+C")));
    file->addSeparator();
    file->addAction(tr("Choose Runs &Folder..."), this, &MainWindow::chooseRunsFolder);
    QAction *quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    QMenu *run = menuBar()->addMenu(tr("&Run"));
    m_runAction = run->addAction(tr("&Run"), this, [this] { startRun(); });
    m_runAction->setShortcut(QKeySequence(Qt::Key_F5));
    m_runAction->setToolTip(tr("Start the experiment in the form (F5)"));
    m_pauseAction = run->addAction(tr("&Pause All"), this, [this] {
        m_controller->setAllPaused(!m_controller->allPaused());
        updateActions();
        rebuildWorkerControls(m_form->workers(), true);
    });
    m_pauseAction->setShortcut(QKeySequence(Qt::Key_F6));
    m_pauseAction->setToolTip(tr("Pause or resume every worker (F6)"));
    QAction *mpi = run->addAction(tr("Run with &MPI..."), this, [this] {
        if (m_controller->isRunning())
            return;
        QDialog dialog(this);
        dialog.setWindowTitle(tr("Run with MPI"));
        auto *form = new QFormLayout(&dialog);
        auto *ranks = new QSpinBox;
        ranks->setRange(1, 256);
        ranks->setValue(m_settings.mpiRanks);
        ranks->setToolTip(tr("MPI ranks (processes); each runs mpi.workers_per_rank workers, so the run "
                             "has ranks \u00d7 workers per rank workers"));
        auto *hostfile = new QLineEdit(m_settings.mpiHostfile);
        hostfile->setPlaceholderText(tr("none: every rank on this machine"));
        hostfile->setToolTip(tr("An Open MPI hostfile (one host per line, \"slots=N\" ranks on it) to run "
                                "ranks on other machines; syncopate-cli and the data must be there too"));
        auto *browse = new QPushButton(tr("Browse..."));
        connect(browse, &QPushButton::clicked, &dialog, [&] {
            const QString f = QFileDialog::getOpenFileName(&dialog, tr("Hostfile"), hostfile->text());
            if (!f.isEmpty())
                hostfile->setText(f);
        });
        auto *hostRow = new QHBoxLayout;
        hostRow->addWidget(hostfile, 1);
        hostRow->addWidget(browse);
        form->addRow(tr("Ranks"), ranks);
        form->addRow(tr("Hostfile"), hostRow);
        auto *perRank = new QLabel(tr("Workers per rank: %1 (mpi.workers_per_rank in the form)")
                                       .arg(m_form->toJson().value("mpi.workers_per_rank", 1)));
        form->addRow(perRank);
        auto *buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
        buttons->button(QDialogButtonBox::Ok)->setText(tr("Run"));
        connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
        connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
        form->addRow(buttons);
        if (dialog.exec() != QDialog::Accepted)
            return;
        m_settings.mpiRanks = ranks->value();
        m_settings.mpiHostfile = hostfile->text();
        MpiLaunch launch;
        launch.ranks = ranks->value();
        launch.hostfile = hostfile->text().trimmed();
        startMpiRun(launch);
    });
    mpi->setShortcut(QKeySequence(tr("Ctrl+Shift+M")));
    mpi->setToolTip(tr("Run the experiment as MPI ranks through mpirun (sync mode): on this machine "
                       "or, with a hostfile, on several (Ctrl+Shift+M)"));
    m_stopAction = run->addAction(tr("&Stop"), this, [this] { m_controller->stop(); });
    m_stopAction->setShortcut(QKeySequence(Qt::SHIFT | Qt::Key_F5));
    m_stopAction->setToolTip(tr("Stop the run; what ran is kept and saved (Shift+F5)"));
    run->addSeparator();
    m_rerunAction = run->addAction(tr("Run &Again"), this, [this] { rerunShown(); });
    m_rerunAction->setShortcut(QKeySequence(tr("Ctrl+R")));
    m_rerunAction->setToolTip(tr("Run the shown run's configuration again (Ctrl+R)"));
    QAction *compare = run->addAction(tr("&Compare Runs..."), this, &MainWindow::showComparison);
    compare->setShortcut(QKeySequence(tr("Ctrl+K")));
    compare->setToolTip(tr("A table of the shown run and the runs checked in the Runs list, to copy "
                           "as CSV or Markdown (Ctrl+K)"));

    QMenu *view = menuBar()->addMenu(tr("&View"));
    m_followAction = view->addAction(tr("&Follow Live"));
    m_followAction->setCheckable(true);
    m_followAction->setShortcut(QKeySequence(tr("Ctrl+L")));
    m_followAction->setToolTip(tr("Keep the newest spans in view while a run goes on"));
    connect(m_followAction, &QAction::toggled, m_timeline, &TimelineView::setFollowLive);
    QAction *fit = view->addAction(tr("Fit &Timeline"), m_timeline, &TimelineView::fitAll);
    fit->setShortcut(QKeySequence(tr("Ctrl+0")));
    m_presentationAction = view->addAction(tr("&Presentation Mode"));
    m_presentationAction->setCheckable(true);
    m_presentationAction->setShortcut(QKeySequence(tr("Ctrl+Shift+P")));
    m_presentationAction->setToolTip(tr("Larger fonts and lines, for a projector"));
    connect(m_presentationAction, &QAction::toggled, this, &MainWindow::setPresentationMode);
    view->addSeparator();
    for (QDockWidget *d : findChildren<QDockWidget *>())
        view->addAction(d->toggleViewAction());

    view->addSeparator();
    view->addAction(tr("&Reset Layout"), this, &MainWindow::resetLayout);

    QMenu *help = menuBar()->addMenu(tr("&Help"));
    QAction *metrics = help->addAction(tr("What the &Views Show"), this, [this] {
        QString text;
        for (const auto &[key, name] : viewHelp())
            text += helpParagraph(key);
        QMessageBox box(QMessageBox::Information, tr("What the views show"), text, QMessageBox::Close, this);
        box.setTextFormat(Qt::RichText);
        box.exec();
    });
    metrics->setShortcut(QKeySequence::HelpContents);
    QAction *whatsThis = QWhatsThis::createAction(this); // Shift+F1
    whatsThis->setToolTip(tr("Click a view or a field after this to read what it shows (Shift+F1)"));
    help->addAction(whatsThis);
    help->addAction(tr("&Keyboard Shortcuts"), this, [this] {
        QString rows;
        for (QAction *a : findChildren<QAction *>())
            if (!a->shortcut().isEmpty() && !a->text().isEmpty())
                rows += QStringLiteral("<tr><td>%1</td><td>&nbsp;&nbsp;%2</td></tr>")
                            .arg(a->shortcut().toString(QKeySequence::NativeText).toHtmlEscaped(),
                                 QString(a->text()).remove(QLatin1Char('&')).toHtmlEscaped());
        QMessageBox box(QMessageBox::Information, tr("Keyboard shortcuts"),
                        QStringLiteral("<table>%1</table><p>%2</p>")
                            .arg(rows, tr("Timeline: wheel zooms around the cursor, drag pans, Shift+drag "
                                          "summarises a range, double-click fits.")),
                        QMessageBox::Close, this);
        box.setTextFormat(Qt::RichText);
        box.exec();
    });
    QAction *lesson = help->addAction(tr("&Lesson"), this, &MainWindow::showLesson);
    lesson->setShortcut(QKeySequence(Qt::Key_F2));
    lesson->setToolTip(tr("A guided sequence for a class: each step runs a preset and says what to look at"));
    help->addSeparator();
    help->addAction(tr("&About Syncopate"), this, [this] {
        QMessageBox::about(this, tr("About Syncopate"),
                           tr("<b>Syncopate</b> %1<br>A lab for distributed training: watch what "
                              "synchronisation costs.<br><br>CPU matmuls: %2, kernels for %3 "
                              "(cpu_isa).")
                               .arg(QApplication::applicationVersion(),
                                    QString::fromStdString(cpuLibrary()),
                                    QString::fromStdString(cpuIsa())));
    });

    QToolBar *bar = addToolBar(tr("Run"));
    bar->setObjectName(QStringLiteral("runToolBar"));
    bar->setToolButtonStyle(Qt::ToolButtonTextOnly);
    bar->addAction(m_runAction);
    bar->addAction(m_pauseAction);
    bar->addAction(m_stopAction);
    bar->addSeparator();
    bar->addAction(m_followAction);
    bar->addAction(fit);
    bar->addAction(m_presentationAction);
}

void MainWindow::rebuildWorkerControls(int workers, bool live)
{
    while (QLayoutItem *item = m_workerGrid->takeAt(0)) {
        delete item->widget();
        delete item;
    }
    auto *header = new QLabel(live ? tr("Change a worker's speed or pause it: the stalls respond.")
                                   : tr("Live controls appear while a run goes on."));
    header->setWordWrap(true);
    m_workerGrid->addWidget(header, 0, 0, 1, 3);
    if (!live)
        return;
    const int shown = std::min(workers, 32);
    for (int w = 0; w < shown; ++w) {
        auto *label = new QLabel(tr("worker %1").arg(w));
        auto *slow = new QDoubleSpinBox;
        slow->setRange(1.0, 50.0);
        slow->setSingleStep(0.5);
        slow->setSuffix(QStringLiteral("x"));
        slow->setValue(m_controller->slowdown(w));
        slow->setToolTip(tr("Slowdown factor of worker %1: 3x adds a delay of twice its compute time after every step.").arg(w));
        auto *pause = new QCheckBox(tr("pause"));
        pause->setChecked(m_controller->paused(w));
        pause->setToolTip(tr("Pause worker %1; in sync mode everyone else then waits at the barrier.").arg(w));
        connect(slow, &QDoubleSpinBox::valueChanged, this, [this, w](double f) { m_controller->setSlowdown(w, f); });
        connect(pause, &QCheckBox::toggled, this, [this, w](bool p) { m_controller->setPaused(w, p); });
        m_workerGrid->addWidget(label, w + 1, 0);
        m_workerGrid->addWidget(slow, w + 1, 1);
        m_workerGrid->addWidget(pause, w + 1, 2);
    }
    m_workerGrid->setRowStretch(shown + 1, 1);
}

void MainWindow::showBanner(const QString &text, bool error)
{
    m_bannerText->setText(text);
    m_banner->setStyleSheet(error ? QStringLiteral("#banner { background: #FBE3D6; border: 1px solid #D55E00; }")
                                  : QStringLiteral("#banner { background: #E0F0FA; border: 1px solid #0072B2; }"));
    m_banner->show();
}

void MainWindow::hideBanner()
{
    m_banner->hide();
    m_form->clearErrors();
}

QString MainWindow::bannerText() const { return m_banner->isVisible() ? m_bannerText->text() : QString(); }

void MainWindow::selectPreset(const QString &name) { m_form->selectPreset(name); }

void MainWindow::loadConfigFile(const QString &path)
{
    try {
        nlohmann::json j = readJsonFile(path.toStdString());
        AppSettings::addRecent(m_settings.recentConfigs, QFileInfo(path).absoluteFilePath());
        if (j.contains("config") && j["config"].is_object())
            j = j["config"];
        if (j.is_object()) {
            m_form->setFromJson(j);
            m_form->showLoadedFrom(path);
        }
        parseConfig(j); // report problems now, with the field marked
        hideBanner();
    } catch (const ConfigError &e) {
        // The file's values stay in the form (what fits a field), so the marked ones can be
        // fixed there instead of typed again.
        QStringList fields;
        for (const auto &f : e.fields())
            fields << QString::fromStdString(f);
        showBanner(tr("%1: %2").arg(path, QString::fromStdString(e.what())));
        m_form->markErrors(fields);
    }
}

bool MainWindow::startRun()
{
    if (m_controller->isRunning())
        return false;
    hideBanner();
    const QString label = uniqueRunName(m_form->presetName().isEmpty()
                                            ? QString::fromStdString(m_form->toJson().value("mode", std::string("run")))
                                            : m_form->presetName());
    if (!m_controller->start(m_form->toJson(), label, m_settings.runsFolder, runFolderHint()))
        return false;
    // Not an error: the run goes on, but what it shows depends on it.
    if (const RunDataPtr run = m_controller->run()) {
        const std::string warning = oversubscriptionWarning(run->config(), coreBudget());
        if (!warning.empty())
            showBanner(QString::fromStdString(warning).toHtmlEscaped(), false);
    }
    return true;
}

bool MainWindow::startMpiRun(const MpiLaunch &launch)
{
    if (m_controller->isRunning())
        return false;
    hideBanner();
    m_mpiLog->clear();
    m_mpiLogDock->show();
    m_mpiLogDock->raise();
    const QString label = uniqueRunName((m_form->presetName().isEmpty()
                                             ? QString::fromStdString(m_form->toJson().value("mode", std::string("run")))
                                             : m_form->presetName()) +
                                        tr(" (%n MPI rank(s))", nullptr, launch.ranks));
    if (!m_controller->startMpi(m_form->toJson(), launch, label, m_settings.runsFolder, runFolderHint()))
        return false;
    updateActions();
    statusBar()->showMessage(tr("Starting %n MPI rank(s)\u2026", nullptr, launch.ranks));
    return true;
}

QString MainWindow::mpiLog() const { return m_mpiLog->toPlainText(); }

void MainWindow::onRunStarted(const RunDataPtr &run)
{
    m_settings.lastExperiment = QString::fromStdString(m_form->toJson().dump());
    addRunToList(run); // listed while it runs, its state updated when it ends
    showRun(run);
    // A new run always starts following live, whatever zoom the last one was left at (else it
    // would open on a range it has no spans in yet).
    m_followAction->setChecked(true);
    m_timeline->setFollowLive(true);
    m_progress->setRange(0, 0); // indeterminate until the first step is done
    // Knobs act on this process's engine, or reach the ranks through the run folder.
    rebuildWorkerControls(run->workers(), true);
    updateActions();
}

void MainWindow::onProgress(qint64 step, qint64 total, double rate, double elapsed, double remaining)
{
    // Four times a second: text and a progress bar repainted 30 times a second were a tenth of
    // the GUI thread's time while a run streams, and read no better.
    if (m_statusClock.isValid() && m_statusClock.elapsed() < 250 && step > 0 && step < total)
        return;
    m_statusClock.start();
    if (step > 0 && m_progress->maximum() == 0)
        m_progress->setRange(0, 1000);
    if (step > 0)
        m_progress->setValue(int(1000 * step / std::max<qint64>(1, total)));
    m_stepLabel->setText(tr("step %1 / %2").arg(step).arg(total));
    m_rateLabel->setText(tr("%1 samples/s").arg(rate, 0, 'f', 0));
    m_timeLabel->setText(tr("elapsed %1, remaining %2").arg(formatSeconds(elapsed), formatSeconds(remaining)));
}

void MainWindow::onRunFinished(const RunDataPtr &run)
{
    m_progress->setRange(0, 1000);
    m_progress->setValue(run->state == RunState::Finished ? 1000 : m_progress->value());
    // Nothing remains of an ended run: say what it took instead.
    m_timeLabel->setText(tr("took %1").arg(formatSeconds(run->summary.value("wall_s", 0.0))));
    if (const auto it = std::find(m_runs.begin(), m_runs.end(), run); it != m_runs.end()) {
        QListWidgetItem *item = m_runList->item(int(it - m_runs.begin()));
        const QSignalBlocker block(m_runList);
        item->setText(runItemText(*run));
        item->setToolTip(run->directory());
    }
    // The whole run, now that it has ended.
    if (m_timeline->followLive())
        m_timeline->fitAll();
    m_timeline->refresh();
    m_charts->refresh();
    rebuildWorkerControls(m_form->workers(), false);
    updateActions();
    if (!run->directory().isEmpty()) {
        AppSettings::addRecent(m_settings.recentRuns, QFileInfo(run->directory()).absoluteFilePath());
        if (m_browser && m_browser->isVisible())
            m_browser->refresh();
    }
    const auto &s = run->summary;
    QString text = tr("%1 %2: %3 steps, %4 samples/s, stalls %5% of worker time")
                       .arg(run->label(), QString::fromLatin1(runStateName(run->state)))
                       .arg(s.value("steps_completed", 0))
                       .arg(s.value("samples_per_s", 0.0), 0, 'f', 0)
                       .arg(100 * s.value("stall_fraction", 0.0), 0, 'f', 1);
    if (s.contains("final_eval_accuracy"))
        text += tr(", held-out accuracy %1%").arg(100 * s["final_eval_accuracy"].get<double>(), 0, 'f', 1);
    if (!run->directory().isEmpty())
        text += tr(". Saved in %1").arg(run->directory());
    statusBar()->showMessage(text, 15000);
    // The whole sentence is the message (on the left); beside the progress bar, what stays.
    m_stepLabel->setText(tr("%1 %2, %3 steps").arg(run->label(), QString::fromLatin1(runStateName(run->state)))
                             .arg(s.value("steps_completed", 0)));
    Q_EMIT runFinished();
}

void MainWindow::onRunFailed(const QString &message, const QStringList &fields)
{
    QString html = message.toHtmlEscaped().replace(QLatin1Char('\n'), QStringLiteral("<br>"));
    const RunDataPtr run = m_controller->run();
    // A full or vanished disk: what was recorded is in the run folder still; offer a copy.
    if (run && !run->directory().isEmpty() && message.contains(QLatin1String("could not be written")))
        html += tr(" <a href=\"save-elsewhere\">Save a copy elsewhere...</a>");
    // Refused at the start: the runs folder cannot be written (read-only, full, not a folder).
    else if (!m_controller->isRunning() && message.contains(m_settings.runsFolder))
        html += tr(" <a href=\"choose-runs-folder\">Choose another runs folder</a> (also File &gt; Choose Runs Folder...).");
    showBanner(html);
    m_form->markErrors(fields);
}

QSize MainWindow::defaultSize() const
{
    // 1500x950 where the screen has room, else most of it (a 1280x720 projector).
    const QScreen *screen = this->screen() ? this->screen() : QGuiApplication::primaryScreen();
    const QRect avail = screen ? screen->availableGeometry() : QRect(0, 0, 1500, 950);
    return QSize(std::min(1500, int(avail.width() * 0.95)), std::min(950, int(avail.height() * 0.92)));
}

void MainWindow::resetLayout()
{
    restoreState(m_defaultState, AppSettings::kLayoutVersion);
    for (QDockWidget *d : findChildren<QDockWidget *>())
        d->show();
    if (!isMaximized() && !isFullScreen())
        resize(defaultSize());
    statusBar()->showMessage(tr("Layout reset"), 3000);
}

QString MainWindow::runFolderHint() const
{
    // The preset (or the mode) and up to three keys the form changed from it, so that a folder
    // of runs says what each one was: "straggler-sync-workers=8,train.lr=0.1".
    const nlohmann::json form = m_form->toJson();
    const QString preset = m_form->presetName();
    const QString mode = QString::fromStdString(form.value("mode", std::string("run")));
    if (preset.isEmpty())
        return mode;
    // What the preset sets, else each key's own default, as the form would hold them (not as
    // the config resolves them: data.samples 0 means 8192 generated).
    nlohmann::json base = nlohmann::json::object();
    try {
        for (const ConfigKey &k : configKeys())
            base[k.name] = nlohmann::json::parse(k.defaultJson);
        const nlohmann::json set = flattenConfig(loadPreset(preset.toStdString()).config);
        for (const auto &[key, value] : set.items()) // a named json: items() refers to it
            base[key] = value;
    } catch (const std::exception &) {
        return preset;
    }
    QStringList varied;
    for (const auto &[key, value] : form.items())
        if (base.contains(key) && !base[key].is_null() && base[key] != value &&
            !(base[key].is_array() && base[key].empty() && value.is_array() && value.empty()) && varied.size() < 3)
            varied << QString::fromStdString(key + "=" +
                                             (value.is_string() ? value.get<std::string>() : value.dump()));
    return varied.isEmpty() ? preset : preset + QLatin1Char('-') + varied.join(QLatin1Char(','));
}

std::vector<RunDataPtr> MainWindow::comparedRuns() const
{
    // The shown run first, then the checked ones in list order; every run when none is checked.
    std::vector<RunDataPtr> runs = checkedRuns();
    if (m_shown)
        runs.insert(runs.begin(), m_shown);
    if (runs.size() <= 1)
        runs = m_runs;
    return runs;
}

void MainWindow::showComparison()
{
    const ComparisonTable table = compareRuns(comparedRuns());
    QDialog dialog(this);
    dialog.setWindowTitle(tr("Compare runs"));
    auto *layout = new QVBoxLayout(&dialog);
    auto *view = new QTableWidget(int(table.rows.size()), int(table.header.size()));
    view->setObjectName(QStringLiteral("comparisonTable"));
    view->setHorizontalHeaderLabels(table.header);
    for (int c = 0; c < table.header.size(); ++c)
        view->horizontalHeaderItem(c)->setToolTip(table.tips.value(c));
    for (int r = 0; r < table.rows.size(); ++r)
        for (int c = 0; c < table.rows[r].size(); ++c) {
            auto *item = new QTableWidgetItem(table.rows[r][c]);
            item->setFlags(Qt::ItemIsSelectable | Qt::ItemIsEnabled);
            if (c >= 2)
                item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
            view->setItem(r, c, item);
        }
    view->verticalHeader()->hide();
    view->resizeColumnsToContents();
    layout->addWidget(view);
    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Close);
    QPushButton *csv = buttons->addButton(tr("Copy as &CSV"), QDialogButtonBox::ActionRole);
    QPushButton *md = buttons->addButton(tr("Copy as &Markdown"), QDialogButtonBox::ActionRole);
    connect(csv, &QPushButton::clicked, &dialog, [table] { QApplication::clipboard()->setText(table.toCsv()); });
    connect(md, &QPushButton::clicked, &dialog, [table] { QApplication::clipboard()->setText(table.toMarkdown()); });
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    layout->addWidget(buttons);
    dialog.resize(std::min(width(), view->horizontalHeader()->length() + 60), 120 + 32 * int(table.rows.size() + 1));
    if (table.rows.isEmpty())
        statusBar()->showMessage(tr("No runs to compare yet: run an experiment or open a run"), 5000);
    else
        dialog.exec();
}

bool MainWindow::chooseRunsFolder()
{
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Folder for run directories"), m_settings.runsFolder);
    if (dir.isEmpty())
        return false;
    m_settings.runsFolder = dir;
    statusBar()->showMessage(tr("Runs are written into %1").arg(dir), 5000);
    return true;
}

bool MainWindow::saveRunElsewhere(const QString &target)
{
    const RunDataPtr run = m_controller->run();
    if (!run || run->directory().isEmpty())
        return false;
    const QString dest = !target.isEmpty() ? target
                                           : QFileDialog::getExistingDirectory(this, tr("Folder to copy the run into"),
                                                                               QDir::homePath());
    if (dest.isEmpty())
        return false;
    const QDir source(run->directory());
    const QString into = QDir(dest).filePath(source.dirName());
    if (!QDir().mkpath(into)) {
        showBanner(tr("Could not create %1").arg(into.toHtmlEscaped()));
        return false;
    }
    for (const QString &f : source.entryList(QDir::Files)) {
        QFile::remove(QDir(into).filePath(f));
        if (!QFile::copy(source.filePath(f), QDir(into).filePath(f))) {
            showBanner(tr("Could not copy %1 into %2").arg(f.toHtmlEscaped(), into.toHtmlEscaped()));
            return false;
        }
    }
    showBanner(tr("The run was copied to %1").arg(into.toHtmlEscaped()), false);
    return true;
}

QStringList MainWindow::runListTexts() const
{
    QStringList texts;
    for (int i = 0; i < m_runList->count(); ++i)
        texts << m_runList->item(i)->text();
    return texts;
}

QString MainWindow::runItemText(const RunData &run) const
{
    if (run.imported())
        return tr("%1: PyTorch trace, %n rank(s)", nullptr, run.workers()).arg(run.label());
    return tr("%1: %2, %3 workers (%4)")
        .arg(run.label(), QString::fromStdString(run.config().mode))
        .arg(run.workers())
        .arg(run.interrupted ? tr("interrupted") : QString::fromLatin1(runStateName(run.state)));
}

QString MainWindow::uniqueRunName(const QString &base) const
{
    // Runs are named by what they ran (the preset, or the mode), numbered from the second on.
    auto taken = [&](const QString &name) {
        return std::any_of(m_runs.begin(), m_runs.end(), [&](const RunDataPtr &r) { return r->label() == name; });
    };
    if (!taken(base))
        return base;
    for (int i = 2;; ++i)
        if (const QString name = QStringLiteral("%1 %2").arg(base).arg(i); !taken(name))
            return name;
}

bool MainWindow::renameRun(const RunDataPtr &run, const QString &name)
{
    const QString trimmed = name.trimmed();
    const auto it = std::find(m_runs.begin(), m_runs.end(), run);
    if (trimmed.isEmpty() || it == m_runs.end())
        return false;
    // The folder on disk takes the name too, so that the run opens under it later; a run still
    // writing keeps its folder until it ends.
    QListWidgetItem *item = m_runList->item(int(it - m_runs.begin()));
    if (!run->directory().isEmpty() && run->state != RunState::Running) {
        const QString folder = runFolderName(trimmed);
        const QDir old(run->directory());
        const QString target = QFileInfo(old.absolutePath()).dir().filePath(folder);
        if (folder != old.dirName()) {
            if (QFileInfo::exists(target)) {
                showBanner(tr("Cannot rename the run's folder to %1: a file or folder of that name exists")
                               .arg(target.toHtmlEscaped()));
                return false;
            }
            if (!QDir().rename(old.absolutePath(), target)) {
                showBanner(tr("Cannot rename the run's folder %1 to %2 (is it writable?)")
                               .arg(old.absolutePath().toHtmlEscaped(), folder.toHtmlEscaped()));
                return false;
            }
            onRunFolderRenamed(old.absolutePath(), target);
            if (m_browser && m_browser->isVisible())
                m_browser->refresh();
            statusBar()->showMessage(tr("Renamed; the run's folder is now %1").arg(target), 8000);
        }
    }
    run->setLabel(trimmed);
    const QSignalBlocker block(m_runList);
    item->setText(runItemText(*run));
    if (run == m_shown)
        m_timeline->setTitle(run->title());
    m_charts->refresh();
    return true;
}

void MainWindow::showLesson()
{
    m_lessonDock->show();
    m_lessonDock->raise();
    // The lesson's text is what the class reads: most of the column's height to it.
    QList<QDockWidget *> column{m_lessonDock};
    for (const char *name : {"workersDock", "runsDock"})
        if (auto *d = findChild<QDockWidget *>(QLatin1String(name)); d && d->isVisible())
            column << d;
    const int h = height();
    resizeDocks(column, column.size() == 3 ? QList<int>{int(h * 0.66), int(h * 0.14), int(h * 0.2)}
                                           : QList<int>(column.size(), h / int(column.size())), Qt::Vertical);
}

void MainWindow::setCompared(const RunDataPtr &run, bool on)
{
    const auto it = std::find(m_runs.begin(), m_runs.end(), run);
    if (it != m_runs.end())
        m_runList->item(int(it - m_runs.begin()))->setCheckState(on ? Qt::Checked : Qt::Unchecked);
}

bool MainWindow::showChart(const QString &name)
{
    const auto plots = m_charts->plots();
    for (std::size_t i = 0; i < plots.size(); ++i)
        if (plots[i].first == name) {
            m_charts->setCurrentIndex(int(i));
            return true;
        }
    return false;
}

void MainWindow::addRunToList(const RunDataPtr &run)
{
    m_runs.push_back(run);
    auto *item = new QListWidgetItem(runItemText(*run));
    item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
    item->setCheckState(Qt::Unchecked);
    item->setToolTip(run->directory());
    const QSignalBlocker block(m_runList);
    m_runList->addItem(item);
    m_runList->setCurrentItem(item);
}

void MainWindow::showRun(const RunDataPtr &run)
{
    m_shown = run;
    m_timeline->setRun(run);
    updateCompare();
}

std::vector<RunDataPtr> MainWindow::checkedRuns() const
{
    // Checked in the Runs list, in list order, the shown run left out.
    std::vector<RunDataPtr> runs;
    for (int i = 0; i < m_runList->count() && i < int(m_runs.size()); ++i)
        if (m_runList->item(i)->checkState() == Qt::Checked && m_runs[std::size_t(i)] != m_shown)
            runs.push_back(m_runs[std::size_t(i)]);
    return runs;
}

void MainWindow::updateCompare()
{
    const std::vector<RunDataPtr> checked = checkedRuns();
    m_charts->setRuns(m_shown, checked);
    // The timeline stacks the checked runs under the shown one (which may be live), on one
    // time axis from each run's start: sync above async above checkpointed, so the same
    // straggler lines up across the modes.
    std::vector<RunDataPtr> stacked = checked;
    auto rank = [](const RunDataPtr &r) { return r->config().checkpoint ? 2 : r->config().async() ? 1 : 0; };
    std::stable_sort(stacked.begin(), stacked.end(),
                     [&](const RunDataPtr &a, const RunDataPtr &b) { return rank(a) < rank(b); });
    if (m_shown)
        stacked.insert(stacked.begin(), m_shown);
    m_timeline->setRuns(stacked);
    if (m_shown)
        m_timeline->setTitle(stacked.size() == 1   ? m_shown->title()
                             : stacked.size() == 2 ? tr("%1, with 1 run below to compare").arg(m_shown->title())
                                                   : tr("%1, with %2 runs below to compare")
                                                         .arg(m_shown->title()).arg(stacked.size() - 1));
}

bool MainWindow::openRun(const QString &dir)
{
    QString error;
    RunDataPtr run = RunController::openRun(dir, &error);
    if (!run) {
        showBanner(tr("Cannot open the run: %1").arg(error.toHtmlEscaped()));
        return false;
    }
    hideBanner();
    AppSettings::addRecent(m_settings.recentRuns, QFileInfo(dir).absoluteFilePath());
    addRunToList(run);
    showRun(run);
    m_timeline->fitAll();
    m_charts->refresh();
    if (run->imported()) {
        // A profiler trace is not a configuration to run again: the form keeps what it had.
        showBanner(importVerdict(*run), false);
        showChart(QStringLiteral("stalls"));
        return true;
    }
    // The form holds the run's configuration, not whatever was there: F5 runs it again.
    if (!m_controller->isRunning()) {
        m_form->setFromJson(run->config().toJson());
        m_form->showLoadedFrom(tr("the run %1").arg(run->label())); // not the preset shown before
        statusBar()->showMessage(tr("The form holds the configuration of %1: Run (F5) runs it again").arg(run->label()), 8000);
    }
    if (run->summaryProblems > 0)
        showBanner(tr("%1: %n field(s) of summary.json had the wrong type and were left out", nullptr,
                      run->summaryProblems).arg(QDir(dir).dirName().toHtmlEscaped()), false);
    return true;
}

bool MainWindow::rerunShown()
{
    if (!m_shown || m_controller->isRunning())
        return false;
    m_form->setFromJson(m_shown->config().toJson());
    m_form->showLoadedFrom(tr("the run %1").arg(m_shown->label()));
    return startRun();
}

void MainWindow::updateActions()
{
    const bool running = m_controller->isRunning();
    m_runAction->setEnabled(!running);
    m_pauseAction->setEnabled(running);
    m_pauseAction->setText(m_controller->allPaused() ? tr("&Resume All") : tr("&Pause All"));
    m_stopAction->setEnabled(running);
    if (m_rerunAction)
        m_rerunAction->setEnabled(!running && m_shown);
}

void MainWindow::setPresentationMode(bool on)
{
    QFont f = m_baseFont;
    // Larger by the screen's height: 1.15 on a 1280x720 projector (so that the form still
    // fits), up to 1.6 on 1080 logical pixels and more (a 3840x2160 screen at ratio 2).
    const QScreen *screen = this->screen() ? this->screen() : QGuiApplication::primaryScreen();
    const double height = screen ? screen->availableGeometry().height() : 1080.0;
    const double scale = on ? std::clamp(1.6 * height / 1040.0, 1.15, 1.6) : 1.0;
    f.setPointSizeF(m_baseFont.pointSizeF() * scale);
    QApplication::setFont(f);
    m_timeline->setFont(f);
    m_charts->setFont(f);
    // The style gives dock titles and menus fonts of their own; scale them too. A dock whose
    // font equals the class font for QDockWidget paints its title in the platform's (small) dock
    // title font, so the class font stays the base font and a scaled dock font differs from it.
    QApplication::setFont(m_baseFont, "QDockWidget");
    QList<QDockWidget *> left;
    for (QDockWidget *d : findChildren<QDockWidget *>()) {
        d->setFont(f);
        if (dockWidgetArea(d) == Qt::LeftDockWidgetArea && d != m_lessonDock) // (a tab of the form's)
            left << d;
    }
    // Larger text needs a wider form, or its fields are cut.
    if (!left.isEmpty())
        resizeDocks(left, QList<int>(left.size(), int(std::min(380 * scale, width() * 0.34))), Qt::Horizontal);
    // Most of the height to the form (its fields are what a class reads), the rest shared.
    if (left.size() == 3) {
        const int h = this->height();
        resizeDocks(left, {int(h * 0.62), int(h * 0.2), int(h * 0.18)}, Qt::Vertical);
    }
    menuBar()->setFont(f);
    statusBar()->setFont(f);
    m_timeline->setPresentationScale(scale);
    m_charts->setPresentationScale(scale);
    m_settings.presentation = on;
    if (m_presentationAction->isChecked() != on)
        m_presentationAction->setChecked(on);
}

QCustomPlot *MainWindow::viewByName(const QString &name) const
{
    if (name == QLatin1String("timeline"))
        return m_timeline;
    for (const auto &[n, plot] : m_charts->plots())
        if (n == name)
            return plot;
    return nullptr;
}

bool MainWindow::exportView(const QString &name, const QString &path, QSize size, double scale)
{
    QCustomPlot *plot = viewByName(name);
    QString error;
    if (!plot || !exportPlot(plot, path, size, scale, &error)) {
        showBanner(error.isEmpty() ? tr("Nothing to export for %1").arg(name) : error);
        return false;
    }
    statusBar()->showMessage(tr("Exported %1").arg(path), 8000);
    return true;
}

void MainWindow::exportDialog(const QString &name)
{
    QDialog dialog(this);
    dialog.setWindowTitle(tr("Export %1").arg(name));
    auto *form = new QFormLayout(&dialog);
    auto *width = new QSpinBox;
    width->setRange(200, 10000);
    width->setValue(1600);
    auto *height = new QSpinBox;
    height->setRange(150, 10000);
    height->setValue(name == QLatin1String("timeline") ? 700 : 900);
    auto *scale = new QDoubleSpinBox;
    scale->setRange(0.5, 4.0);
    scale->setValue(1.0);
    scale->setSingleStep(0.5);
    scale->setToolTip(tr("Pixel density of PNG files: 2 gives a sharp image on slides."));
    form->addRow(tr("Width (px)"), width);
    form->addRow(tr("Height (px)"), height);
    form->addRow(tr("PNG scale"), scale);
    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    form->addRow(buttons);
    if (dialog.exec() != QDialog::Accepted)
        return;
    const QString path = QFileDialog::getSaveFileName(this, tr("Export %1").arg(name),
                                                      QDir(m_settings.exportFolder).filePath(name + QStringLiteral(".png")),
                                                      tr("PNG image (*.png);;SVG image (*.svg);;PDF document (*.pdf)"));
    if (path.isEmpty())
        return;
    m_settings.exportFolder = QFileInfo(path).absolutePath();
    exportView(name, path, QSize(width->value(), height->value()), scale->value());
}

void MainWindow::exportRunFile(const QString &file)
{
    if (!m_shown || m_shown->directory().isEmpty()) {
        showBanner(tr("The run shown has no run folder (it was not recorded to disk), so there is nothing to export."));
        return;
    }
    const QString source = QDir(m_shown->directory()).filePath(file);
    const QString path = QFileDialog::getSaveFileName(this, tr("Export %1").arg(file),
                                                      QDir(m_settings.exportFolder).filePath(file));
    if (path.isEmpty())
        return;
    if (file == QLatin1String("trace.json") && (m_shown->state == RunState::Running || !QFile::exists(source))) {
        // A live or interrupted run: written now from its row files, up to their last flush.
        try {
            exportTraceJson(path.toStdString(), m_shown->directory().toStdString());
            m_settings.exportFolder = QFileInfo(path).absolutePath();
        } catch (const std::exception &e) {
            showBanner(QString::fromStdString(e.what()));
        }
        return;
    }
    QFile::remove(path);
    if (!QFile::copy(source, path))
        showBanner(tr("Could not copy %1 to %2").arg(source, path));
    else
        m_settings.exportFolder = QFileInfo(path).absolutePath();
}

void MainWindow::copyImage()
{
    QApplication::clipboard()->setPixmap(m_timeline->toPixmap(m_timeline->width(), m_timeline->height()));
    statusBar()->showMessage(tr("Timeline image copied"), 4000);
}

bool MainWindow::saveConfigAs(const QString &target)
{
    const nlohmann::json flat = m_form->toJson();
    try {
        parseConfig(flat); // a file the CLI would refuse is not written; the fields at fault are marked
    } catch (const ConfigError &e) {
        QStringList fields;
        for (const auto &f : e.fields())
            fields << QString::fromStdString(f);
        showBanner(tr("The config was not saved: %1").arg(QString::fromStdString(e.what()).toHtmlEscaped()));
        m_form->markErrors(fields);
        return false;
    }
    QString path = target;
    if (path.isEmpty()) {
        const QString dir = m_settings.recentConfigs.isEmpty() ? QDir::homePath()
                                                               : QFileInfo(m_settings.recentConfigs.front()).absolutePath();
        const QString base = m_form->presetName().isEmpty() ? QString::fromStdString(flat.value("mode", std::string("experiment")))
                                                            : m_form->presetName();
        path = QFileDialog::getSaveFileName(this, tr("Save config as"), QDir(dir).filePath(base + QStringLiteral(".json")),
                                            tr("JSON (*.json)"));
        if (path.isEmpty())
            return false;
    }
    // Nested by section, as the presets are; a key whose section is also a key of its own
    // ("device" and "device.tf32") stays dotted. Dotted keys throughout where that would not read
    // back as the same keys: the CLI reads both.
    nlohmann::json out = nlohmann::json::object();
    for (const auto &[key, value] : flat.items()) {
        const std::size_t dot = key.find('.');
        const std::string section = key.substr(0, dot);
        if (dot == std::string::npos || flat.contains(section))
            out[key] = value;
        else
            out[section][key.substr(dot + 1)] = value;
    }
    if (flattenConfig(out) != flat)
        out = flat;
    try {
        writeFileAtomically(path.toStdString(), out.dump(2) + "\n");
    } catch (const std::exception &e) {
        showBanner(tr("The config was not saved: %1").arg(QString::fromStdString(e.what()).toHtmlEscaped()));
        return false;
    }
    AppSettings::addRecent(m_settings.recentConfigs, QFileInfo(path).absoluteFilePath());
    statusBar()->showMessage(tr("Saved %1; syncopate-cli run --config %1 runs it").arg(QDir::toNativeSeparators(path)), 8000);
    return true;
}

void MainWindow::updateRecentMenus()
{
    fillRecentMenu(m_recentConfigs, false);
    fillRecentMenu(m_recentRuns, true);
}

void MainWindow::fillRecentMenu(QMenu *menu, bool runs)
{
    QStringList &list = runs ? m_settings.recentRuns : m_settings.recentConfigs;
    const QString title = runs ? tr("Recent Runs") : tr("Recent Configs");
    auto there = [runs](const QString &path) { return runs ? isRunFolder(path) : QFileInfo(path).isFile(); };
    QStringList gone;
    for (const QString &path : std::as_const(list))
        if (!there(path))
            gone << QDir::toNativeSeparators(path);
    list.erase(std::remove_if(list.begin(), list.end(), [&](const QString &p) { return !there(p); }), list.end());
    if (!gone.isEmpty())
        statusBar()->showMessage(tr("Removed from %1, no longer there: %2").arg(title, gone.join(QStringLiteral(", "))), 8000);
    menu->clear();
    for (int i = 0; i < list.size(); ++i) {
        const QString path = list[i];
        QString name = QFileInfo(path).fileName();
        name.replace(QLatin1Char('&'), QStringLiteral("&&"));
        QAction *a = menu->addAction(i < 9 ? QStringLiteral("&%1 %2").arg(i + 1).arg(name) : name, this, [this, path, runs, there, title] {
            if (!there(path)) {
                (runs ? m_settings.recentRuns : m_settings.recentConfigs).removeAll(path);
                statusBar()->showMessage(tr("Removed from %1, no longer there: %2").arg(title, QDir::toNativeSeparators(path)), 8000);
            } else if (runs) {
                openRun(path);
            } else {
                loadConfigFile(path);
            }
        });
        a->setData(path);
        a->setToolTip(QDir::toNativeSeparators(path));
        a->setStatusTip(QDir::toNativeSeparators(path));
    }
    if (list.isEmpty())
        menu->addAction(runs ? tr("No recent runs") : tr("No recent configs"))->setEnabled(false);
    menu->addSeparator();
    menu->addAction(tr("&Clear List"), this, [this, runs] {
        (runs ? m_settings.recentRuns : m_settings.recentConfigs).clear();
    })->setEnabled(!list.isEmpty());
}

RunsBrowser *MainWindow::showRunsBrowser()
{
    if (!m_browser) {
        m_browser = new RunsBrowser(this);
        // The live run's folder is shown as running and is never renamed or deleted under it.
        m_browser->setInUse([this](const QString &dir) {
            const RunDataPtr run = m_controller->run();
            return m_controller->isRunning() && run && !run->directory().isEmpty() &&
                   QFileInfo(run->directory()).canonicalFilePath() == QFileInfo(dir).canonicalFilePath();
        });
        connect(m_browser, &RunsBrowser::openRequested, this, [this](const QString &dir) { openRun(dir); });
        connect(m_browser, &RunsBrowser::runRenamed, this, &MainWindow::onRunFolderRenamed);
        connect(m_browser, &RunsBrowser::runDeleted, this, [this](const QString &dir) {
            m_settings.recentRuns.removeAll(dir);
            statusBar()->showMessage(tr("Deleted the run folder %1").arg(QDir::toNativeSeparators(dir)), 8000);
        });
    }
    m_browser->setRunsFolder(m_settings.runsFolder);
    m_browser->show();
    m_browser->raise();
    m_browser->activateWindow();
    return m_browser;
}

void MainWindow::onRunFolderRenamed(const QString &from, const QString &to)
{
    // Runs of this session and Recent Runs follow the folder, so that exports and reopening work.
    const QString old = QDir::cleanPath(QFileInfo(from).absoluteFilePath());
    for (std::size_t i = 0; i < m_runs.size(); ++i)
        if (!m_runs[i]->directory().isEmpty() && QDir::cleanPath(QFileInfo(m_runs[i]->directory()).absoluteFilePath()) == old) {
            m_runs[i]->setDirectory(to);
            m_runList->item(int(i))->setToolTip(to);
        }
    for (QString &path : m_settings.recentRuns)
        if (QDir::cleanPath(path) == old)
            path = QFileInfo(to).absoluteFilePath();
}

void MainWindow::closeEvent(QCloseEvent *event)
{
    m_controller->stop();
    m_settings.windowGeometry = saveGeometry();
    m_settings.windowState = saveState(AppSettings::kLayoutVersion);
    m_settings.lastExperiment = QString::fromStdString(m_form->toJson().dump());
    m_settings.followLive = m_followAction->isChecked();
    m_settings.chartTab = m_charts->currentIndex();
    m_settings.lossAgainstTime = m_charts->lossAgainstTime();
    m_settings.lossSmoothing = m_charts->smoothing();
    m_settings.lossLog = m_charts->logLoss();
    QSettings qs;
    m_settings.save(qs);
    event->accept();
}

} // namespace syncopate
