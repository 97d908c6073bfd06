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
#include <QDir>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFontMetrics>
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
#include <initializer_list>

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

// Status bar text that changes while a run streams. A label of fixed size does not ask its
// parents to lay out again when its text changes; one that did relaid the window four times a
// second, which asked every chart for its size (each legend's text shaped again). The label
// grows when a text needs more room and keeps that room until fitStatusLabel.
void setStatusText(QLabel *label, const QString &text)
{
    label->setText(text);
    const QSize need = label->sizeHint();
    if (need.width() > label->maximumWidth() || need.height() != label->maximumHeight())
        label->setFixedSize(std::max(need.width(), label->minimumWidth()), need.height());
}

void fitStatusLabel(QLabel *label)
{
    label->setMinimumSize(0, 0);
    label->setMaximumSize(QWIDGETSIZE_MAX, QWIDGETSIZE_MAX);
    setStatusText(label, label->text());
}
} // namespace

// The views with their metricHelp() keys: Help > What the Views Show, and What's This on each.
std::vector<std::pair<QString, QString>> MainWindow::viewHelp()
{
    return {{QStringLiteral("timeline"), QObject::tr("Timeline")}, {QStringLiteral("off cpu"), QObject::tr("Off CPU")},
            {QStringLiteral("loss"), QObject::tr("Loss")},         {QStringLiteral("stalls"), QObject::tr("Stalls")},
            {QStringLiteral("staleness"), QObject::tr("Staleness")},
            {QStringLiteral("memory"), QObject::tr("Activation memory")},
            {QStringLiteral("throughput"), QObject::tr("Throughput")},
            {QStringLiteral("batchnorm"), QObject::tr("Batch norm")}};
}

QString MainWindow::helpParagraph(const QString &key)
{
    for (const auto &[k, name] : viewHelp())
        if (k == key)
            return QStringLiteral("<p><b>%1</b>: %2</p>").arg(name, metricHelp(key).toHtmlEscaped());
    return {};
}

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
        // Charts once a second: they redraw every point (sixteen workers' curves were a fifth
        // of the GUI thread's time at 2 Hz), and a curve that moves once a second still reads
        // as live. By the clock, not by a count of the timeline's updates: a run followed in
        // its folder (MPI ranks, another process) brings new records only when it flushes.
        if (!m_chartClock.isValid() || m_chartClock.elapsed() >= 1000) {
            m_chartClock.start();
            m_charts->refresh();
        }
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
            j = flattenConfig(j);
            resolveDataPaths(j, path.toStdString());
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
    setStatusText(m_stepLabel, tr("step %1 / %2").arg(step).arg(total));
    setStatusText(m_rateLabel, tr("%1 samples/s").arg(rate, 0, 'f', 0));
    setStatusText(m_timeLabel, tr("elapsed %1, remaining %2").arg(formatSeconds(elapsed), formatSeconds(remaining)));
}

void MainWindow::onRunFinished(const RunDataPtr &run)
{
    m_progress->setRange(0, 1000);
    m_progress->setValue(run->state == RunState::Finished ? 1000 : m_progress->value());
    // Nothing remains of an ended run: say what it took instead.
    m_timeLabel->setText(tr("took %1").arg(formatSeconds(run->summary.value("wall_s", 0.0))));
    fitStatusLabel(m_timeLabel); // no longer changing: its own size again
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
    if (run->writtenElsewhere) { // no longer followed; it goes on in its own process
        m_stepLabel->setText(tr("%1 no longer followed").arg(run->label()));
        fitStatusLabel(m_stepLabel);
        m_timeLabel->clear();
        statusBar()->showMessage(tr("Stopped following %1: the run goes on in its own process; open it again to follow it")
                                     .arg(run->label()), 15000);
        Q_EMIT runFinished();
        return;
    }
    // Beside the progress bar, what stays: the run, its steps, its rate and time.
    m_stepLabel->setText(tr("%1 %2, %3 steps").arg(run->label(), QString::fromLatin1(runStateName(run->state)))
                             .arg(s.value("steps_completed", 0)));
    fitStatusLabel(m_stepLabel);
    fitStatusLabel(m_rateLabel);
    // The message on the left says the rest, without repeating those (a sentence that did was
    // cut off by them at 1280 pixels), the folder's path elided in its middle to fit the room
    // left (the run list's tooltip has it whole).
    QString text = tr("Stalls %1% of worker time").arg(100 * s.value("stall_fraction", 0.0), 0, 'f', 1);
    if (s.contains("final_eval_accuracy"))
        text += tr(", held-out accuracy %1%").arg(100 * s["final_eval_accuracy"].get<double>(), 0, 'f', 1);
    if (!run->directory().isEmpty()) {
        text += tr(". Saved in ");
        int room = statusBar()->width() - 32;
        for (const QWidget *w : std::initializer_list<const QWidget *>{m_stepLabel, m_rateLabel, m_timeLabel, m_progress})
            if (w->isVisible()) // a label's new text, or the width the bar has
                room -= std::max(w->sizeHint().width(), w == m_progress ? w->width() : 0) + 8;
        const QFontMetrics metrics(statusBar()->font());
        const int left = room - metrics.horizontalAdvance(text);
        if (left >= 16 * metrics.averageCharWidth())
            text += metrics.elidedText(QDir::toNativeSeparators(run->directory()), Qt::ElideMiddle, left);
        else // no room for a useful part of it
            text = text.left(text.size() - tr(". Saved in ").size()) + QLatin1Char('.');
    }
    statusBar()->showMessage(text, 15000);
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
    return m_charts->showChart(name);
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
