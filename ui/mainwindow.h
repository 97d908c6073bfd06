// The main window: experiment form and live worker controls in docks, the timeline over the
// charts in the centre, the runs of this session to compare, an inline banner for errors.
#pragma once

#include "runcontroller.h"
#include "rundata.h"
#include "settings.h"

#include <QElapsedTimer>
#include <QMainWindow>

#include <functional>

class QAction;
class QDockWidget;
class QGridLayout;
class QLabel;
class QListWidget;
class QListWidgetItem;
class QMenu;
class QProgressBar;
class QCustomPlot;

class QPlainTextEdit;
class QThread;

namespace syncopate {

class ChartsWidget;
class ExperimentForm;
class LessonPanel;
class RunController;
class RunsBrowser;
class TimelineView;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget *parent = nullptr);
    ~MainWindow() override;

    ExperimentForm *form() const { return m_form; }
    TimelineView *timeline() const { return m_timeline; }
    ChartsWidget *charts() const { return m_charts; }
    RunController *controller() const { return m_controller; }
    QString bannerText() const;
    QStringList runListTexts() const; // the Runs dock's entries, as shown
    const std::vector<RunDataPtr> &runs() const { return m_runs; }
    AppSettings &settings() { return m_settings; }

    void selectPreset(const QString &name);
    void loadConfigFile(const QString &path);
    // File > Save Config As: the form's experiment, checked as a run would check it, as a config
    // file that `syncopate-cli run --config` and Open Config read (asked for when path is empty).
    bool saveConfigAs(const QString &path = {});
    // File > Recent Configs and Recent Runs, rebuilt each time they open: entries whose file or
    // run folder is gone are dropped, and the status bar says which.
    void updateRecentMenus();
    QMenu *recentConfigsMenu() const { return m_recentConfigs; }
    QMenu *recentRunsMenu() const { return m_recentRuns; }
    // File > Browse Runs (Ctrl+Shift+O): the runs folder's runs, to open, rename or delete.
    RunsBrowser *showRunsBrowser();
    bool startRun();
    // Copies the current run's folder into target (asked for when empty); for a disk that filled.
    bool saveRunElsewhere(const QString &target = {});
    // Asks for the folder new runs are written into (offered when the current one is unwritable).
    bool chooseRunsFolder();
    // View > Reset Layout: the docks and toolbar as on a first start, the window's default size.
    void resetLayout();
    // Run > Compare Runs: the table of comparedRuns(), to copy as CSV or Markdown.
    void showComparison();
    std::vector<RunDataPtr> comparedRuns() const;
    // The run folder's name after its time: preset or mode, and the keys changed from it.
    QString runFolderHint() const;
    bool openRun(const QString &dir);
    // Run > Run with MPI: the form's experiment as `ranks` MPI ranks through mpirun (a child
    // process; its output in the MPI Log dock), followed live from the run folder.
    bool startMpiRun(const MpiLaunch &launch);
    QString mpiLog() const;
    // Run > Stop (Shift+F5).
    void stopRun() { m_controller->stop(); }
    // File > Import Traces: PyTorch profiler traces (files, or folders of them), one per rank,
    // read on a background thread into a run folder under the runs folder, then opened. done
    // (for tests) gets the run folder, or an empty string when the import failed.
    void importTraces(const QStringList &paths, std::function<void(const QString &)> done = {});
    // The straggler verdict of an imported run, as the banner shows it.
    static QString importVerdict(const RunData &run);
    // Run > Run Again: the shown run's configuration into the form, and started.
    bool rerunShown();
    // A run's name in the list, legends and titles (double-click in the Runs list).
    bool renameRun(const RunDataPtr &run, const QString &name);
    // Checks (or unchecks) a run in the Runs list: checked runs are overlaid on the shown one.
    void setCompared(const RunDataPtr &run, bool on);
    // Help > Lesson (F2): the guided sequence, in a tab beside the form.
    void showLesson();
    LessonPanel *lesson() const { return m_lesson; }
    // Shows a run on the timeline and the charts (as selecting it in the Runs list does).
    void showRun(const RunDataPtr &run);
    // Brings a chart's tab to the front (loss, stalls, staleness, memory, throughput).
    bool showChart(const QString &name);
    void setPresentationMode(bool on);
    // Exports the timeline or a chart (by name: timeline, loss, stalls, ...) to path.
    bool exportView(const QString &name, const QString &path, QSize size, double scale);

Q_SIGNALS:
    void runFinished();

protected:
    void closeEvent(QCloseEvent *event) override;

private:
    // The views with their metricHelp() keys, and one's help as a paragraph: Help > What the
    // Views Show and What's This.
    static std::vector<std::pair<QString, QString>> viewHelp();
    static QString helpParagraph(const QString &key);
    void createActions(); // mainwindow_actions.cpp; files and folders in mainwindow_files.cpp
    void createDocks();
    void showBanner(const QString &text, bool error = true);
    void hideBanner();
    void onRunStarted(const RunDataPtr &run);
    void onProgress(qint64 step, qint64 total, double rate, double elapsed, double remaining);
    void onRunFinished(const RunDataPtr &run);
    void onRunFailed(const QString &message, const QStringList &fields);
    void addRunToList(const RunDataPtr &run);
    QString runItemText(const RunData &run) const;
    void updateCompare();
    void rebuildWorkerControls(int workers, bool live);
    void updateActions();
    void exportDialog(const QString &name);
    void exportRunFile(const QString &file);
    void copyImage();
    QCustomPlot *viewByName(const QString &name) const;
    void fillRecentMenu(QMenu *menu, bool runs);
    void onRunFolderRenamed(const QString &from, const QString &to);

    AppSettings m_settings;
    RunController *m_controller;
    ExperimentForm *m_form;
    TimelineView *m_timeline;
    ChartsWidget *m_charts;
    QLabel *m_rangeSummary;
    QWidget *m_banner;
    QLabel *m_bannerText;
    QListWidget *m_runList;
    QDockWidget *m_lessonDock = nullptr;
    LessonPanel *m_lesson = nullptr;
    QWidget *m_workerPanel;
    QGridLayout *m_workerGrid;
    QLabel *m_stepLabel, *m_rateLabel, *m_timeLabel;
    QProgressBar *m_progress;
    QAction *m_runAction, *m_pauseAction, *m_stopAction, *m_followAction, *m_presentationAction;
    std::vector<RunDataPtr> m_runs;
    RunDataPtr m_shown;
    QFont m_baseFont;
    QElapsedTimer m_chartClock; // the charts' last live refresh
    QElapsedTimer m_statusClock; // status bar updates, a few a second
    QSize defaultSize() const;
    QByteArray m_defaultState;
    QAction *m_rerunAction = nullptr;
    QThread *m_importThread = nullptr;
    QDockWidget *m_mpiLogDock = nullptr;
    QPlainTextEdit *m_mpiLog = nullptr;
    QMenu *m_recentConfigs = nullptr, *m_recentRuns = nullptr;
    RunsBrowser *m_browser = nullptr;
    QString uniqueRunName(const QString &base) const;
    std::vector<RunDataPtr> checkedRuns() const;
};

} // namespace syncopate
