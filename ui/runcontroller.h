// Owns the Engine of the run in progress and a timer that pulls new records into the run's
// RunData about 30 times a second. Widgets get signals; none of them touches the engine.
#pragma once

#include "rundata.h"
#include "session.h"

#include <QElapsedTimer>
#include <QObject>
#include <QProcess>
#include <QTimer>

#include <memory>

namespace syncopate {

// A run's name as a folder name: letters, digits and - = . _ , kept, anything else '_', at
// most 80 characters, never hidden.
QString runFolderName(const QString &text);

class RunFollower;

// How Run > Run with MPI starts a run: mpirun with this many ranks (and a hostfile for other
// machines), each rank a syncopate-cli process; the GUI follows the run folder they write.
struct MpiLaunch {
    int ranks = 2;
    QString hostfile;        // empty: every rank on this machine
    QString mpirun;          // empty: found on PATH
    QString cli;             // empty: syncopate-cli beside this program, else on PATH
    QStringList extraArgs;   // passed to mpirun before the program (--mca ..., -x ...)
};

class RunController : public QObject {
    Q_OBJECT
public:
    explicit RunController(QObject *parent = nullptr);
    ~RunController() override;

    // Validates and starts; on a bad config or data emits runFailed (with the fields at fault)
    // and returns false. runsDirectory: where the run directory is written when it ends.
    // folderHint names the run folder after the time ("straggler-sync-workers=8"); the mode
    // when empty. Characters a file name cannot hold become '_'.
    bool start(const nlohmann::json &config, const QString &label, const QString &runsDirectory,
               const QString &folderHint = {});
    // The same run as MPI ranks: `mpirun -np N syncopate-cli run --config F --out DIR` as a
    // child process, its output in logAppended, the run folder followed live (RunFollower)
    // and read as it ended. Validates the config here first (runFailed with the fields).
    bool startMpi(const nlohmann::json &config, const MpiLaunch &launch, const QString &label,
                  const QString &runsDirectory, const QString &folderHint = {});
    // The mpirun arguments (and in *program, mpirun) startMpi runs; empty with *error when
    // mpirun or syncopate-cli cannot be found.
    static QStringList mpiCommand(const MpiLaunch &launch, const QString &configFile, const QString &outDir,
                                  QString *program, QString *error);
    // Follows a run that another process is writing in dir (syncopate-cli run, another window)
    // as an MPI run is followed: its records as they are flushed, the knobs through the folder's
    // control.json, until that process lets go of the folder (runFolderBeingWritten), when the
    // run is read as it ended. False while a run of this controller is going.
    bool follow(const QString &dir, const QString &label);
    bool following() const { return m_following; }
    // The run is read from its folder, not from an engine here: MPI ranks or another process.
    bool readsFolder() const { return m_mpirun || m_following; }
    // An MPI run: SIGTERM to mpirun, which passes it to every rank (rank 0 closes the run as
    // stopped); mpirun killed if it is still there after 1.5 s. A followed run: following
    // stops, the run goes on in its process (shown as far as it got). Otherwise the engine stops.
    void stop();
    bool isRunning() const;
    RunDataPtr run() const { return m_run; }
    Engine *engine() const { return m_engine.get(); }

    // Live knobs. For an MPI run they go into the run folder's control.json, which rank 0
    // reads and passes to the rank that runs the worker.
    void setSlowdown(int worker, double factor);
    void setPaused(int worker, bool paused);
    void setAllPaused(bool paused);
    double slowdown(int worker) const;
    bool paused(int worker) const;
    bool allPaused() const { return m_allPaused; }

    // Reads a run directory written by a run (or the CLI) into a finished RunData.
    static RunDataPtr openRun(const QString &dir, QString *error);

Q_SIGNALS:
    void runStarted(syncopate::RunDataPtr run);
    void dataAvailable();
    // step done, total steps, samples/s, elapsed s, remaining s (-1 until known)
    void progressChanged(qint64 step, qint64 total, double samplesPerSecond, double elapsedS,
                         double remainingS);
    void runFinished(syncopate::RunDataPtr run);
    void runFailed(const QString &message, const QStringList &fields);
    // Output of mpirun and its ranks, as it comes.
    void logAppended(const QString &text);

private:
    void poll();
    void finish();
    void pollMpi();
    void finishMpi();
    // A followed run: ended in its process (read as it ended), or no longer followed.
    void finishFollow(bool detached);
    // A new folder's path under runsDirectory: the time, the hint, "-2" ... when taken.
    static QString newRunFolder(const QString &runsDirectory, const QString &hint);
    void appendLog(const QString &text);

    std::unique_ptr<Engine> m_engine;
    RunDataPtr m_run;
    QTimer m_timer;
    std::size_t m_seen = 0;
    std::vector<Record> m_buffer;
    QString m_runsDirectory;
    bool m_allPaused = false;

    // An MPI run: the child mpirun, the folder its rank 0 writes, what has been read of it.
    std::unique_ptr<QProcess> m_mpirun;
    std::unique_ptr<RunFollower> m_follow;
    QString m_mpiDir, m_mpiLabel, m_mpiConfigFile, m_log;
    QElapsedTimer m_mpiClock;
    qint64 m_mpiStep = 0;
    bool m_mpiExited = false;
    bool m_following = false; // m_follow reads another process's run, with no mpirun of ours
    QTimer m_killTimer;
    std::vector<double> m_knobSlowdown; // an MPI run's knobs, as control.json has them
    std::vector<bool> m_knobPaused;
    void writeControl();
};

} // namespace syncopate
