#include "runcontroller.h"

#include "runfollow.h"
#include "runstore.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QStandardPaths>

#include <unistd.h>

namespace syncopate {

QString runFolderName(const QString &text)
{
    QString name = text.trimmed().left(80);
    for (QChar &ch : name)
        if (!(ch.isLetterOrNumber() || ch == QLatin1Char('-') || ch == QLatin1Char('=') ||
              ch == QLatin1Char('.') || ch == QLatin1Char('_') || ch == QLatin1Char(',')))
            ch = QLatin1Char('_');
    if (name.isEmpty() || name.startsWith(QLatin1Char('.'))) // never hidden, never "." or ".."
        name.prepend(QLatin1Char('_'));
    return name;
}
namespace {

QStringList fieldsOf(const ConfigError &e)
{
    QStringList fields;
    for (const auto &f : e.fields())
        fields << QString::fromStdString(f);
    return fields;
}

} // namespace


RunController::RunController(QObject *parent) : QObject(parent)
{
    m_timer.setInterval(33);
    connect(&m_timer, &QTimer::timeout, this, &RunController::poll);
    m_killTimer.setSingleShot(true);
    m_killTimer.setInterval(1500);
    connect(&m_killTimer, &QTimer::timeout, this, [this] {
        if (m_mpirun && m_mpirun->state() != QProcess::NotRunning) {
            appendLog(tr("\n[mpirun did not end 1.5 s after SIGTERM: killed]\n"));
            m_mpirun->kill();
        }
    });
}

RunController::~RunController()
{
    if (m_engine) {
        m_engine->requestStop();
        m_engine->wait();
    }
    if (m_mpirun && m_mpirun->state() != QProcess::NotRunning) {
        m_mpirun->terminate();
        if (!m_mpirun->waitForFinished(1500))
            m_mpirun->kill();
        m_mpirun->waitForFinished(1000);
    }
    if (!m_mpiConfigFile.isEmpty())
        QFile::remove(m_mpiConfigFile);
}

QString RunController::newRunFolder(const QString &runsDirectory, const QString &hint)
{
    const QString name = QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss")) +
                         QLatin1Char('-') + runFolderName(hint);
    QString dir = QDir(runsDirectory).filePath(name);
    for (int i = 2; QDir(dir).exists(); ++i)
        dir = QDir(runsDirectory).filePath(name + QLatin1Char('-') + QString::number(i));
    return dir;
}

void RunController::appendLog(const QString &text)
{
    m_log += text;
    Q_EMIT logAppended(text);
}

QStringList RunController::mpiCommand(const MpiLaunch &launch, const QString &configFile, const QString &outDir,
                                      QString *program, QString *error)
{
    const QString mpirun = launch.mpirun.isEmpty() ? QStandardPaths::findExecutable(QStringLiteral("mpirun")) : launch.mpirun;
    if (mpirun.isEmpty()) {
        *error = tr("mpirun was not found on PATH: install Open MPI (Debian: openmpi-bin) or run in this process");
        return {};
    }
    QString cli = launch.cli;
    if (cli.isEmpty()) {
        const QString beside = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("syncopate-cli"));
        cli = QFile::exists(beside) ? beside : QStandardPaths::findExecutable(QStringLiteral("syncopate-cli"));
    }
    if (cli.isEmpty()) {
        *error = tr("syncopate-cli was not found beside this program nor on PATH: the ranks run it");
        return {};
    }
    QStringList args;
    if (::geteuid() == 0)
        args << QStringLiteral("--allow-run-as-root");
    // More ranks than cores on one machine is what a lesson does; mpirun refuses it otherwise.
    args << QStringLiteral("--oversubscribe") << QStringLiteral("-np") << QString::number(launch.ranks);
    if (!launch.hostfile.isEmpty())
        args << QStringLiteral("--hostfile") << launch.hostfile;
    args << launch.extraArgs;
    args << cli << QStringLiteral("run") << QStringLiteral("--config") << configFile << QStringLiteral("--out") << outDir;
    *program = mpirun;
    return args;
}

bool RunController::startMpi(const nlohmann::json &config, const MpiLaunch &launch, const QString &label,
                             const QString &runsDirectory, const QString &folderHint)
{
    if (isRunning())
        return false;
    RunConfig parsed;
    try {
        parsed = parseConfig(config); // the fields at fault marked here, not in a rank's output
    } catch (const ConfigError &e) {
        Q_EMIT runFailed(QString::fromStdString(e.what()), fieldsOf(e));
        return false;
    }
    if (launch.ranks < 1) {
        Q_EMIT runFailed(tr("MPI: at least one rank"), {});
        return false;
    }
    if (!QDir().mkpath(runsDirectory)) {
        Q_EMIT runFailed(tr("Cannot start: %1: cannot create the runs folder").arg(runsDirectory), {});
        return false;
    }
    const QString dir = newRunFolder(runsDirectory, folderHint.isEmpty() ? QString::fromStdString(parsed.mode) + QStringLiteral("-mpi") : folderHint);
    // The config as the form has it, beside the run folder until the run has ended (rank 0
    // writes the resolved one into the folder).
    const QString configFile = dir + QStringLiteral(".launch.json");
    {
        QFile f(configFile);
        if (!f.open(QIODevice::WriteOnly) || f.write(QByteArray::fromStdString(config.dump(2))) < 0) {
            Q_EMIT runFailed(tr("Cannot start: %1: cannot write (%2)").arg(configFile, f.errorString()), {});
            return false;
        }
    }
    QString program, error;
    const QStringList args = mpiCommand(launch, configFile, dir, &program, &error);
    if (args.isEmpty()) {
        QFile::remove(configFile);
        Q_EMIT runFailed(error, {});
        return false;
    }
    m_engine.reset(); // a finished local run's: its knobs do not reach ranks
    m_mpirun = std::make_unique<QProcess>();
    m_mpirun->setProcessChannelMode(QProcess::MergedChannels);
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    if (::geteuid() == 0) {
        env.insert(QStringLiteral("OMPI_ALLOW_RUN_AS_ROOT"), QStringLiteral("1"));
        env.insert(QStringLiteral("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"), QStringLiteral("1"));
    }
    m_mpirun->setProcessEnvironment(env);
    connect(m_mpirun.get(), &QProcess::readyRead, this, [this] { appendLog(QString::fromLocal8Bit(m_mpirun->readAll())); });
    connect(m_mpirun.get(), &QProcess::finished, this, [this] { m_mpiExited = true; });
    connect(m_mpirun.get(), &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
        if (e == QProcess::FailedToStart)
            m_mpiExited = true;
    });
    m_follow = std::make_unique<RunFollower>(dir.toStdString());
    m_mpiDir = dir;
    m_mpiLabel = label;
    m_mpiConfigFile = configFile;
    m_mpiStep = 0;
    m_mpiExited = false;
    m_run.reset();
    m_log.clear();
    appendLog(QStringLiteral("$ %1 %2\n").arg(program, args.join(QLatin1Char(' '))));
    m_mpiClock.start();
    m_mpirun->start(program, args);
    m_timer.start();
    return true;
}

bool RunController::start(const nlohmann::json &config, const QString &label,
                          const QString &runsDirectory, const QString &folderHint)
{
    if (isRunning())
        return false;
    PreparedRun prepared;
    try {
        prepared = prepareRun(config);
    } catch (const ConfigError &e) {
        Q_EMIT runFailed(QString::fromStdString(e.what()), fieldsOf(e));
        return false;
    } catch (const std::exception &e) {
        Q_EMIT runFailed(QString::fromStdString(e.what()), {});
        return false;
    }
    try {
        m_engine = std::make_unique<Engine>(prepared.config, prepared.train, prepared.eval);
    } catch (const ConfigError &e) { // a device that is not there: the form marks the field
        Q_EMIT runFailed(tr("Cannot start: %1").arg(QString::fromStdString(e.what())), fieldsOf(e));
        return false;
    } catch (const std::exception &e) {
        Q_EMIT runFailed(tr("Cannot start: %1").arg(QString::fromStdString(e.what())), {});
        return false;
    }
    m_run = std::make_shared<RunData>(prepared.config, label);
    m_seen = 0;
    m_runsDirectory = runsDirectory;
    m_allPaused = false;
    // The run is streamed into its directory from the first step, so nothing seen is lost
    // when the app (or the machine) goes down.
    QString dir;
    if (!runsDirectory.isEmpty()) {
        dir = newRunFolder(runsDirectory, folderHint.isEmpty() ? QString::fromStdString(prepared.config.mode) : folderHint);
        m_engine->setOutputDirectory(dir.toStdString());
        m_engine->setRetention(Engine::Retention::Feed);
    }
    try {
        m_engine->start();
    } catch (const std::exception &e) {
        m_engine.reset();
        m_run.reset();
        Q_EMIT runFailed(tr("Cannot start: %1.")
                             .arg(QString::fromStdString(e.what())),
                         {});
        return false;
    }
    if (!dir.isEmpty())
        m_run->setDirectory(dir);
    m_timer.start();
    Q_EMIT runStarted(m_run);
    return true;
}

bool RunController::follow(const QString &dir, const QString &label)
{
    if (isRunning())
        return false;
    m_engine.reset();
    m_mpirun.reset();
    m_follow = std::make_unique<RunFollower>(dir.toStdString());
    m_following = true;
    m_mpiDir = dir;
    m_mpiLabel = label;
    m_mpiConfigFile.clear();
    m_mpiStep = 0;
    m_mpiExited = false;
    m_run.reset();
    m_log.clear();
    m_timer.start();
    poll(); // what is there already, at once
    return true;
}

void RunController::stop()
{
    if (m_following) {
        finishFollow(true);
        return;
    }
    if (m_mpirun && m_mpirun->state() != QProcess::NotRunning) {
        m_mpirun->terminate();
        m_killTimer.start();
    } else if (m_engine) {
        m_engine->requestStop();
    }
}

bool RunController::isRunning() const
{
    if (readsFolder())
        return m_timer.isActive();
    return m_engine && !m_engine->finished() && m_timer.isActive();
}

void RunController::setSlowdown(int worker, double factor)
{
    if (readsFolder()) {
        if (worker >= 0 && std::size_t(worker) < m_knobSlowdown.size()) {
            m_knobSlowdown[std::size_t(worker)] = std::max(1.0, factor);
            writeControl();
        }
        return;
    }
    if (m_engine)
        m_engine->setSlowdown(worker, factor);
}

void RunController::setPaused(int worker, bool paused)
{
    if (readsFolder()) {
        if (worker >= 0 && std::size_t(worker) < m_knobPaused.size()) {
            m_knobPaused[std::size_t(worker)] = paused;
            writeControl();
        }
        return;
    }
    if (m_engine)
        m_engine->setPaused(worker, paused);
}

void RunController::setAllPaused(bool paused)
{
    m_allPaused = paused;
    if (readsFolder()) {
        std::fill(m_knobPaused.begin(), m_knobPaused.end(), paused);
        writeControl();
        return;
    }
    if (!m_engine)
        return;
    for (int w = 0; w < m_engine->config().workers; ++w)
        m_engine->setPaused(w, paused);
}

double RunController::slowdown(int worker) const
{
    if (readsFolder())
        return worker >= 0 && std::size_t(worker) < m_knobSlowdown.size() ? m_knobSlowdown[std::size_t(worker)] : 1.0;
    return m_engine ? m_engine->slowdown(worker) : 1.0;
}

bool RunController::paused(int worker) const
{
    if (readsFolder())
        return worker >= 0 && std::size_t(worker) < m_knobPaused.size() && m_knobPaused[std::size_t(worker)];
    return m_engine && m_engine->paused(worker);
}

void RunController::writeControl()
{
    if (m_mpiDir.isEmpty() || !m_run)
        return;
    nlohmann::json j;
    j["slowdown"] = m_knobSlowdown;
    nlohmann::json paused = nlohmann::json::array();
    for (const bool p : m_knobPaused)
        paused.push_back(p);
    j["paused"] = paused;
    try {
        writeFileAtomically(QDir(m_mpiDir).filePath(QStringLiteral("control.json")).toStdString(), j.dump() + "\n");
    } catch (const std::exception &e) {
        appendLog(QStringLiteral("\n[%1]\n").arg(QString::fromStdString(e.what())));
    }
}

void RunController::pollMpi()
{
    // Read first: what rank 0 (or the followed process) wrote before it ended is all read below.
    const bool exited = m_following ? !runFolderBeingWritten(m_mpiDir.toStdString()) : m_mpiExited;
    try {
        if (!m_run && m_follow->config()) {
            m_run = std::make_shared<RunData>(*m_follow->config(), m_mpiLabel);
            m_run->setDirectory(m_mpiDir);
            const RunConfig &c = m_run->config();
            m_knobSlowdown.assign(std::size_t(c.workers), 1.0);
            for (std::size_t w = 0; w < m_knobSlowdown.size() && w < c.slowdown.size(); ++w)
                m_knobSlowdown[w] = c.slowdown[w];
            m_knobPaused.assign(std::size_t(c.workers), false);
            m_allPaused = false;
            Q_EMIT runStarted(m_run);
        }
        if (m_run) {
            m_buffer.clear();
            if (m_follow->poll(m_buffer) > 0) {
                for (const Record &r : m_buffer)
                    if (!r.isSpan() && r.counter() == CounterId::Loss)
                        m_mpiStep = std::max<qint64>(m_mpiStep, qint64(r.step) + 1);
                m_run->append(m_buffer);
                Q_EMIT dataAvailable();
            }
            const qint64 total = m_run->config().steps;
            // A followed run began before we looked: its own clock, to its newest record.
            const double elapsed = m_following ? double(m_run->endNs()) / 1e9 : double(m_mpiClock.elapsed()) / 1e3;
            const double rate = elapsed > 0 ? double(m_mpiStep) * double(m_run->config().samplesPerStep()) / elapsed : 0.0;
            const double remaining = m_mpiStep > 0 ? elapsed * double(total - m_mpiStep) / double(m_mpiStep) : -1.0;
            Q_EMIT progressChanged(m_mpiStep, total, rate, elapsed, remaining);
        }
    } catch (const std::exception &e) {
        appendLog(QStringLiteral("\n[%1]\n").arg(QString::fromStdString(e.what())));
        if (m_following) { // a damaged row file or config: shown as far as it could be read
            const QString what = QString::fromStdString(e.what());
            if (m_run)
                m_run->problems.push_back(what);
            finishFollow(true);
            Q_EMIT runFailed(tr("Stopped following %1: %2").arg(m_mpiDir, what), {});
            return;
        }
        stop();
    }
    if (exited && m_following)
        finishFollow(false);
    else if (exited)
        finishMpi();
}

void RunController::finishFollow(bool detached)
{
    m_timer.stop();
    m_following = false;
    if (!m_run) { // its process went before config.json was complete, or was let go of first
        if (!detached)
            Q_EMIT runFailed(tr("%1: the process writing this run ended before its config.json was complete")
                                 .arg(m_mpiDir), {});
        return;
    }
    m_run->summary = m_follow->summary(); // an empty object before the run has one
    if (detached) { // the run goes on over there
        m_run->state = RunState::Stopped;
        m_run->writtenElsewhere = true;
    } else {
        const std::string status = m_run->summary.value("status", "running");
        m_run->interrupted = status == "running"; // its process died without closing it
        m_run->state = m_run->interrupted ? RunState::Stopped : runStateFromName(status);
        m_run->error = QString::fromStdString(m_run->summary.value("error", ""));
    }
    Q_EMIT runFinished(m_run);
}

void RunController::finishMpi()
{
    m_timer.stop();
    m_killTimer.stop();
    QFile::remove(m_mpiConfigFile);
    m_mpiConfigFile.clear();
    const int code = m_mpirun->exitStatus() == QProcess::NormalExit ? m_mpirun->exitCode() : -1;
    const QString tail = m_log.right(1500).trimmed();
    if (!m_run) { // no rank got as far as writing the run folder
        m_mpirun.reset();
        Q_EMIT runFailed(tr("The MPI run did not start (mpirun exit %1):\n%2").arg(code).arg(tail), {});
        return;
    }
    m_run->summary = m_follow->summary();
    const std::string status = m_run->summary.value("status", "running");
    m_run->state = status == "running" ? RunState::Failed : runStateFromName(status);
    m_run->interrupted = status == "running";
    m_run->error = QString::fromStdString(m_run->summary.value("error", ""));
    if (m_run->state == RunState::Failed && m_run->error.isEmpty())
        m_run->error = tr("mpirun ended (exit %1) before rank 0 closed the run:\n%2").arg(code).arg(tail);
    m_mpirun.reset();
    if (m_run->state == RunState::Failed)
        Q_EMIT runFailed(m_run->error, {});
    Q_EMIT runFinished(m_run);
}

void RunController::poll()
{
    if (readsFolder()) {
        pollMpi();
        return;
    }
    if (!m_engine)
        return;
    const bool done = m_engine->finished();
    m_buffer.clear();
    m_seen = m_engine->events().copySince(m_seen, m_buffer);
    if (!m_buffer.empty()) {
        m_run->append(m_buffer);
        Q_EMIT dataAvailable();
    }
    const qint64 step = m_engine->progress();
    const qint64 total = m_engine->config().steps;
    const double elapsed = double(m_engine->elapsedNs()) / 1e9;
    const double rate =
        elapsed > 0 ? double(step) * double(m_engine->config().samplesPerStep()) / elapsed : 0.0;
    const double remaining = step > 0 ? elapsed * double(total - step) / double(step) : -1.0;
    Q_EMIT progressChanged(step, total, rate, elapsed, remaining);
    if (done)
        finish();
}

void RunController::finish()
{
    m_timer.stop();
    // The engine has written the directory (summary, index, trace.json) before it says it ended.
    m_run->summary = m_engine->summary();
    m_run->state = m_engine->state();
    m_run->error = QString::fromStdString(m_engine->error());
    if (m_run->state == RunState::Failed)
        Q_EMIT runFailed(m_run->error, {});
    Q_EMIT runFinished(m_run);
}

RunDataPtr RunController::openRun(const QString &dir, QString *error)
{
    try {
        auto run = RunData::fromOpened(openRunDirectory(dir.toStdString()), QDir(dir).dirName());
        run->setDirectory(dir);
        return run;
    } catch (const std::exception &e) {
        if (error)
            *error = QString::fromStdString(e.what());
        return nullptr;
    }
}

} // namespace syncopate
