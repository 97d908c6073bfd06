// MainWindow, continued: its menus, toolbar and their actions with shortcuts.
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
    QAction *exportChart = file->addAction(tr("Export &Chart..."), this,
                                           [this] { exportDialog(m_charts->currentChartName()); });
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

} // namespace syncopate
