#include "rundata.h"

#include <QObject>

#include <algorithm>

namespace syncopate {

RunData::RunData(RunConfig config, QString label)
    : m_config(std::move(config)), m_label(std::move(label))
{
    const auto w = std::size_t(m_config.workers);
    m_counters.assign(std::size_t(CounterId::Count), std::vector<std::vector<CounterPoint>>(w));
    m_wait.assign(w, {});
    for (int i = 0; i < m_config.workers; ++i) {
        m_rows.push_back({i, false, {}});
        if (m_config.prefetch)
            m_rows.push_back({i, true, {}});
    }
}

std::shared_ptr<RunData> RunData::fromArtifacts(const RunArtifacts &a, const QString &label)
{
    auto run = std::make_shared<RunData>(a.config, label);
    run->append(a.records);
    run->summary = a.metrics.summary;
    run->state = runStateFromName(a.metrics.summary.value("status", "finished"));
    run->error = QString::fromStdString(a.metrics.summary.value("error", ""));
    return run;
}

TimelineRow &RunData::rowFor(int worker, bool dataLane)
{
    const std::size_t perWorker = m_config.prefetch ? 2 : 1;
    return m_rows[std::size_t(worker) * perWorker + (dataLane && m_config.prefetch ? 1 : 0)];
}

QString RunData::title() const
{
    QString t = QObject::tr("%1: %2 mode, %3 workers")
                    .arg(m_label, QString::fromStdString(m_config.mode))
                    .arg(m_config.workers);
    if (m_config.device != "cpu")
        t += QObject::tr(" on %1%2").arg(QString::fromStdString(m_config.device),
                                         m_config.tf32 ? QObject::tr(" (TF32)") : QString());
    return t;
}

void RunData::append(const std::vector<Record> &records)
{
    for (const Record &r : records) {
        if (r.worker >= m_config.workers)
            continue;
        if (r.isSpan()) {
            auto &spans = rowFor(r.worker, r.lane() == Lane::Data).spans;
            // Spans of a row arrive in order; a late one is moved into place.
            spans.push_back(r);
            for (std::size_t i = spans.size() - 1; i > 0 && spans[i - 1].start > spans[i].start; --i)
                std::swap(spans[i - 1], spans[i]);
            ++m_spans;
            m_last = std::max(m_last, r.end);
            if (r.isStall()) {
                auto &w = m_wait[r.worker];
                if (w.size() <= r.step)
                    w.resize(std::size_t(r.step) + 1, 0.0);
                w[r.step] += double(r.duration()) / 1e6;
            }
        } else if (r.counter() < CounterId::Count) {
            m_counters[std::size_t(r.counter())][r.worker].push_back(
                {double(r.start), r.step, r.value});
            // The charts' aggregates grow with the records instead of being recounted on
            // every refresh. A loss sample marks one worker finishing one batch.
            if (r.counter() == CounterId::Loss) {
                const auto window = std::size_t(std::max<std::int64_t>(0, r.start) / std::int64_t(kThroughputWindowNs));
                if (m_batchesPerWindow.size() <= window)
                    m_batchesPerWindow.resize(window + 1, 0);
                ++m_batchesPerWindow[window];
            } else if (r.counter() == CounterId::Staleness) {
                const auto s = std::size_t(std::max(0.0, r.value));
                if (m_staleness.size() <= s)
                    m_staleness.resize(s + 1, 0);
                ++m_staleness[s];
            }
            m_last = std::max(m_last, r.start);
        }
    }
}

const std::vector<CounterPoint> &RunData::counter(CounterId c, int worker) const
{
    return m_counters[std::size_t(c)][std::size_t(worker)];
}

std::vector<std::array<double, std::size_t(Phase::Count)>> RunData::phaseTimeIn(double t0,
                                                                                double t1) const
{
    std::vector<std::array<double, std::size_t(Phase::Count)>> out(static_cast<std::size_t>(workers()));
    for (auto &a : out)
        a.fill(0.0);
    for (const auto &row : m_rows) {
        if (row.dataLane)
            continue;
        auto it = std::lower_bound(row.spans.begin(), row.spans.end(), t0,
                                   [](const Record &r, double t) { return double(r.end) < t; });
        for (; it != row.spans.end() && double(it->start) < t1; ++it) {
            const double a = std::max(t0, double(it->start)), b = std::min(t1, double(it->end));
            if (b > a)
                out[std::size_t(row.worker)][std::size_t(it->phase())] += b - a;
        }
    }
    return out;
}

std::vector<std::pair<double, double>> RunData::throughput() const
{
    std::vector<std::pair<double, double>> out;
    out.reserve(m_batchesPerWindow.size());
    for (std::size_t i = 0; i < m_batchesPerWindow.size(); ++i) {
        // The newest window is still filling: its rate is over the time it has covered so far.
        const double begin = double(i) * kThroughputWindowNs;
        const double end = std::min(begin + kThroughputWindowNs, std::max(begin + 1e6, double(m_last)));
        out.emplace_back(end, double(m_batchesPerWindow[i]) * m_config.batch / ((end - begin) / 1e9));
    }
    return out;
}

} // namespace syncopate
