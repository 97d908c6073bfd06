#include "rundata.h"

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

TimelineRow &RunData::rowFor(int worker, bool dataLane)
{
    const std::size_t perWorker = m_config.prefetch ? 2 : 1;
    return m_rows[std::size_t(worker) * perWorker + (dataLane && m_config.prefetch ? 1 : 0)];
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
            if (r.phase() == Phase::Wait) {
                auto &w = m_wait[r.worker];
                if (w.size() <= r.step)
                    w.resize(std::size_t(r.step) + 1, 0.0);
                w[r.step] += double(r.duration()) / 1e6;
            }
        } else if (r.counter() < CounterId::Count) {
            m_counters[std::size_t(r.counter())][r.worker].push_back(
                {double(r.start), r.step, r.value});
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

std::vector<std::pair<double, double>> RunData::throughput(double windowNs) const
{
    // A loss sample marks one worker finishing one batch.
    std::vector<double> times;
    for (int w = 0; w < workers(); ++w)
        for (const auto &p : counter(CounterId::Loss, w))
            times.push_back(p.tNs);
    std::sort(times.begin(), times.end());
    std::vector<std::pair<double, double>> out;
    if (times.empty())
        return out;
    const double batch = m_config.batch;
    std::size_t i = 0;
    for (double end = windowNs; i < times.size(); end += windowNs) {
        std::size_t n = 0;
        while (i < times.size() && times[i] < end) {
            ++i;
            ++n;
        }
        out.emplace_back(end, double(n) * batch / (windowNs / 1e9));
    }
    return out;
}

std::vector<int> RunData::stalenessHistogram() const
{
    std::vector<int> hist;
    for (int w = 0; w < workers(); ++w)
        for (const auto &p : counter(CounterId::Staleness, w)) {
            const auto s = std::size_t(std::max(0.0, p.value));
            if (hist.size() <= s)
                hist.resize(s + 1, 0);
            ++hist[s];
        }
    return hist;
}

} // namespace syncopate
