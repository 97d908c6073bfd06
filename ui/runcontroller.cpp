#include "runcontroller.h"

#include <QDateTime>
#include <QDir>

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
}

RunController::~RunController()
{
    if (m_engine) {
        m_engine->requestStop();
        m_engine->wait();
    }
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
        const QString name = QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss")) +
                             QLatin1Char('-') +
                             runFolderName(folderHint.isEmpty() ? QString::fromStdString(prepared.config.mode) : folderHint);
        dir = QDir(runsDirectory).filePath(name);
        for (int i = 2; QDir(dir).exists(); ++i)
            dir = QDir(runsDirectory).filePath(name + QLatin1Char('-') + QString::number(i));
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

void RunController::stop()
{
    if (m_engine)
        m_engine->requestStop();
}

bool RunController::isRunning() const { return m_engine && !m_engine->finished() && m_timer.isActive(); }

void RunController::setSlowdown(int worker, double factor)
{
    if (m_engine)
        m_engine->setSlowdown(worker, factor);
}

void RunController::setPaused(int worker, bool paused)
{
    if (m_engine)
        m_engine->setPaused(worker, paused);
}

void RunController::setAllPaused(bool paused)
{
    if (!m_engine)
        return;
    m_allPaused = paused;
    for (int w = 0; w < m_engine->config().workers; ++w)
        m_engine->setPaused(w, paused);
}

void RunController::poll()
{
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
