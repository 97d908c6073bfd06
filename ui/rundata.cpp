#include "rundata.h"

#include <QObject>

namespace syncopate {

RunData::RunData(RunConfig config, QString label)
    : m_config(std::move(config)), m_label(std::move(label)),
      m_trace(std::make_shared<TraceModel>(m_config.workers, m_config.prefetch, m_config.batch))
{
    // A live run's view: 256 us buckets and coarser. Finer ones only drew rows denser than
    // 200000 spans a second (past 20000 spans in view), and building them was most of what
    // the GUI thread spent taking in 16 workers' spans. The run's own index keeps them all.
    m_trace->setFinestLevel(2);
    listRows();
}

std::shared_ptr<RunData> RunData::fromOpened(const OpenedRun &opened, const QString &label)
{
    auto run = std::make_shared<RunData>(opened.config, label);
    run->m_trace = opened.trace;
    run->listRows();
    run->summary = opened.summary;
    run->summaryProblems = int(opened.summaryProblems.size());
    run->interrupted = opened.interrupted;
    run->state = opened.interrupted ? RunState::Stopped
                                    : runStateFromName(opened.summary.value("status", "finished"));
    run->error = QString::fromStdString(opened.summary.value("error", ""));
    return run;
}

void RunData::append(const std::vector<Record> &records)
{
    m_trace->append(records);
    std::int64_t earliest = std::numeric_limits<std::int64_t>::max();
    for (const Record &r : records)
        if (r.isSpan())
            earliest = std::min(earliest, r.start);
    m_appended += records.size();
    m_appendMarks.push_back({m_appended, earliest});
    if (m_appendMarks.size() > 512) {
        m_forgottenUpTo = m_appendMarks.front().appendedAfter;
        m_appendMarks.pop_front();
    }
}

std::int64_t RunData::earliestStartSince(std::uint64_t appended) const
{
    if (appended >= m_appended)
        return std::numeric_limits<std::int64_t>::max();
    if (appended < m_forgottenUpTo) // some of those records came in calls no longer held
        return std::numeric_limits<std::int64_t>::min();
    std::int64_t earliest = std::numeric_limits<std::int64_t>::max();
    for (auto it = m_appendMarks.rbegin(); it != m_appendMarks.rend() && it->appendedAfter > appended; ++it)
        earliest = std::min(earliest, it->earliestStart);
    return earliest;
}

void RunData::listRows()
{
    m_rows.clear();
    for (std::size_t r = 0; r < m_trace->rowCount(); ++r)
        m_rows.push_back({m_trace->row(r).worker, m_trace->row(r).kind == RowKind::DataLane});
}

void RunData::setDirectory(const QString &dir)
{
    m_directory = dir;
    if (state == RunState::Running)
        m_trace->attachDirectory(dir.toStdString());
}

QString RunData::title() const
{
    QString t = QObject::tr("%1: %2 mode, %3 workers")
                    .arg(m_label, QString::fromStdString(m_config.mode))
                    .arg(m_config.workers);
    if (m_config.device != "cpu")
        t += QObject::tr(" on %1%2").arg(QString::fromStdString(m_config.device),
                                         m_config.tf32 ? QObject::tr(" (TF32)") : QString());
    if (interrupted)
        t += QObject::tr(" (interrupted)");
    return t;
}

} // namespace syncopate
