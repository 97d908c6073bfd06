#include "rundata.h"

#include <QObject>

#include <algorithm>

namespace syncopate {

RunData::RunData(RunConfig config, QString label)
    : m_config(std::move(config)), m_label(std::move(label)),
      m_trace(std::make_shared<TraceModel>(m_config.workers, m_config.prefetch, m_config.batch))
{
    // A live run's view: 4 ms buckets and coarser. Finer ones only draw a view of 1 to 4 ms a
    // pixel holding more than 20000 spans of a row (5000 to 20000 spans a second), and with
    // 1 ms buckets most spans closed a bucket: a twentieth of the GUI thread's time taking in
    // 16 workers' spans. The run's own index keeps every level for the finished run.
    m_trace->setFinestLevel(4);
    listRows();
}

std::shared_ptr<RunData> RunData::fromOpened(const OpenedRun &opened, const QString &label)
{
    auto run = std::make_shared<RunData>(opened.config, label);
    run->m_trace = opened.trace;
    run->listRows();
    run->summary = opened.summary;
    run->summaryProblems = int(opened.summaryProblems.size());
    for (const auto &p : opened.problems)
        run->problems.push_back(QString::fromStdString(p));
    run->interrupted = opened.interrupted;
    run->writtenElsewhere = opened.live;
    // A run another process is writing is shown as far as it got; nothing here runs it.
    run->state = opened.interrupted || opened.live ? RunState::Stopped
                                                   : runStateFromName(opened.summary.value("status", "finished"));
    run->error = QString::fromStdString(opened.summary.value("error", ""));
    const auto &sm = opened.summary;
    run->m_imported = sm.value("source", "") == "kineto";
    if (run->m_imported) {
        if (sm.contains("first_step") && sm["first_step"].is_number_integer())
            run->m_firstStep = sm["first_step"].get<std::int64_t>();
        if (sm.contains("ranks") && sm["ranks"].is_array())
            for (const auto &r : sm["ranks"])
                run->m_ranks.push_back(r.is_number_integer() ? r.get<int>() : int(run->m_ranks.size()));
    }
    return run;
}

void RunData::append(const std::vector<Record> &records)
{
    m_trace->append(records);
    if (m_trace->rowCount() != m_rows.size())
        listRows();
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
        m_rows.push_back({m_trace->row(r).worker, m_trace->row(r).kind == RowKind::DataLane,
                          m_trace->row(r).kind == RowKind::CommLane, QString::fromStdString(m_trace->row(r).name),
                          m_trace->row(r).kind == RowKind::Evaluator});
}

void RunData::setDirectory(const QString &dir)
{
    m_directory = dir;
    if (state == RunState::Running)
        m_trace->attachDirectory(dir.toStdString());
}

QString RunData::rowLabel(const TimelineRow &row) const
{
    if (m_imported)
        return row.name;
    if (row.evaluator)
        return QObject::tr("evaluator");
    const auto ranks = summary.find("ranks");
    if (ranks == summary.end() || !ranks->is_array())
        return {};
    for (const auto &r : *ranks) {
        if (!r.is_object())
            continue;
        const int first = r.value("first_worker", -1), n = r.value("workers", 0);
        if (row.worker < first || row.worker >= first + n)
            continue;
        // What the rank's spans may be off rank 0's clock by: the measurements' own uncertainty,
        // or how far the model they were put on the clock with was from the end's measurement.
        const double u = std::max({r.value("clock_uncertainty_ns", 0.0), r.value("clock_uncertainty_end_ns", 0.0),
                                   r.value("clock_residual_end_ns", 0.0)});
        QString label = QObject::tr("rank %1 @ %2").arg(r.value("rank", 0)).arg(QString::fromStdString(r.value("host", "?")));
        if (r.value("rank", 0) != 0) // rank 0's clock is the run's
            label += u >= 1000 ? QObject::tr(" \u00b1%1 ms").arg(u / 1e6, 0, 'f', u >= 1e6 ? 1 : 3)
                               : QObject::tr(" \u00b1%1 \u00b5s").arg(u / 1e3, 0, 'f', 1);
        return label + (row.dataLane ? QObject::tr(", w%1 data").arg(row.worker) : QObject::tr(", w%1").arg(row.worker));
    }
    return {};
}

QString RunData::workerName(int worker) const
{
    if (m_imported)
        return QObject::tr("rank %1").arg(worker >= 0 && std::size_t(worker) < m_ranks.size() ? m_ranks[std::size_t(worker)] : worker);
    if (worker == m_config.workers) // the async evaluator records as the worker after the last
        return QObject::tr("evaluator");
    return QObject::tr("worker %1").arg(worker);
}

QString RunData::title() const
{
    if (m_imported)
        return QObject::tr("%1: PyTorch profiler trace, %n rank(s) of world size %2", nullptr, m_config.workers)
            .arg(m_label)
            .arg(summary.value("world_size", m_config.workers));
    QString t = QObject::tr("%1: %2 mode, %3 workers")
                    .arg(m_label, QString::fromStdString(m_config.mode))
                    .arg(m_config.workers);
    if (m_config.device != "cpu")
        t += QObject::tr(" on %1%2").arg(QString::fromStdString(m_config.device),
                                         m_config.tf32 ? QObject::tr(" (TF32)") : QString());
    if (interrupted)
        t += QObject::tr(" (interrupted)");
    else if (writtenElsewhere)
        t += QObject::tr(" (being written by another process: as far as it got)");
    return t;
}

} // namespace syncopate
