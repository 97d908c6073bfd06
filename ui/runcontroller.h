// Owns the Engine of the run in progress and a timer that pulls new records into the run's
// RunData about 30 times a second. Widgets get signals; none of them touches the engine.
#pragma once

#include "rundata.h"
#include "session.h"

#include <QElapsedTimer>
#include <QObject>
#include <QTimer>

#include <memory>

namespace syncopate {

// A run's name as a folder name: letters, digits and - = . _ , kept, anything else '_', at
// most 80 characters, never hidden.
QString runFolderName(const QString &text);

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
    void stop();
    bool isRunning() const;
    RunDataPtr run() const { return m_run; }
    Engine *engine() const { return m_engine.get(); }

    void setSlowdown(int worker, double factor);
    void setPaused(int worker, bool paused);
    void setAllPaused(bool paused);
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

private:
    void poll();
    void finish();

    std::unique_ptr<Engine> m_engine;
    RunDataPtr m_run;
    QTimer m_timer;
    std::size_t m_seen = 0;
    std::vector<Record> m_buffer;
    QString m_runsDirectory;
    bool m_allPaused = false;
};

} // namespace syncopate
