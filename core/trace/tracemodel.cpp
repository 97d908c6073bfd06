#include "tracemodel.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

namespace syncopate {
namespace {


bool startsBefore(const Record &a, const Record &b) { return a.start < b.start; }

} // namespace

TraceModel::TraceModel(int workers, bool dataLanes, int samplesPerBatch, bool commLanes)
    : m_workers(std::max(0, workers)), m_dataLanes(dataLanes), m_commLanes(commLanes),
      m_samplesPerBatch(samplesPerBatch)
{
    const auto w = std::size_t(m_workers);
    m_counters.assign(std::size_t(CounterId::Count), std::vector<std::vector<CounterPoint>>(w + 1));
    m_counterStride.assign(std::size_t(CounterId::Count) * (w + 1), 1);
    m_steps.assign(w, {});
    m_stalenessPerWorker.assign(w, {});
    for (int i = 0; i < m_workers; ++i) {
        const std::string name = "worker " + std::to_string(i);
        addRow({i, RowKind::Worker, name});
        if (dataLanes)
            addRow({i, RowKind::DataLane, name + " data"});
        if (commLanes)
            addRow({i, RowKind::CommLane, name + " comm"});
    }
}

std::size_t TraceModel::addRow(RowDescriptor desc)
{
    Row row;
    row.desc = std::move(desc);
    row.recentFrom = std::numeric_limits<std::int64_t>::min();
    row.lod.startAt(m_finestStart); // a row made after setFinestLevel starts where the others did
    const std::size_t r = m_rows.size();
    m_rowIndex[{row.desc.worker, int(row.desc.kind), row.desc.sub}] = r;
    m_rowOf.clear();
    m_rows.push_back(std::move(row));
    return r;
}

std::size_t TraceModel::rowFor(const Record &r)
{
    if (isEvaluator(r, m_workers)) {
        // Its row comes with its first span: only async runs with held-out data have one. The
        // last worker's rows sort before it, so every other row keeps its position.
        const auto it = m_rowIndex.find({m_workers, int(RowKind::Evaluator), 0});
        return it != m_rowIndex.end() ? it->second : addRow({m_workers, RowKind::Evaluator, "evaluator"});
    }
    // A worker's rows by kind, looked up in the map once: every span of a live run comes here
    // (the map's find was a sixtieth of the GUI thread's time with 16 workers).
    const auto kind = std::size_t(rowKindOf(r, m_dataLanes, m_commLanes));
    constexpr auto kKinds = std::size_t(RowKind::Count);
    const std::size_t slot = std::size_t(r.worker) * kKinds + kind;
    if (slot < m_rowOf.size() && m_rowOf[slot] != kUnlooked)
        return m_rowOf[slot];
    const auto it = m_rowIndex.find({int(r.worker), int(kind), 0});
    const std::size_t row = it == m_rowIndex.end() ? std::size_t(-1) : it->second;
    if (r.worker < kMaxCachedWorkers) {
        if (slot >= m_rowOf.size())
            m_rowOf.resize(slot + 1, kUnlooked);
        m_rowOf[slot] = row;
    }
    return row;
}

std::uint64_t TraceModel::spansStartingIn(std::size_t r, std::int64_t t0, std::int64_t t1) const
{
    return m_rows[r].lod.countIn(t0, t1);
}

void TraceModel::attachDirectory(const std::string &dir) { m_dir = dir; }

void TraceModel::setFinestLevel(int level)
{
    m_finestStart = level;
    for (Row &row : m_rows)
        row.lod.startAt(level);
}

const RowLod &TraceModel::lod(std::size_t r) const
{
    m_rows[r].lod.settle();
    return m_rows[r].lod;
}

StepPoint &TraceModel::stepPoint(int worker, std::uint32_t step)
{
    StepSeries &s = m_steps[std::size_t(worker)];
    while (std::size_t(step / std::uint32_t(s.stride)) >= kMaxStepPoints)
        thin(s);
    const std::size_t i = step / std::uint32_t(s.stride);
    if (s.points.size() <= i)
        s.points.resize(i + 1);
    return s.points[i];
}

void TraceModel::thin(StepSeries &s)
{
    // Neighbours merge: the mean wait of the pair, the end of the later step.
    const std::size_t n = s.points.size() / 2;
    for (std::size_t i = 0; i < n; ++i) {
        const StepPoint &a = s.points[2 * i], &b = s.points[2 * i + 1];
        s.points[i] = {(a.waitMs + b.waitMs) / 2, std::max(a.endNs, b.endNs),
                       (a.descheduledMs + b.descheduledMs) / 2, (a.wakeMs + b.wakeMs) / 2};
    }
    if (s.points.size() % 2) {
        StepPoint last = s.points.back();
        last.waitMs /= 2; // half of the merged point's steps are still to come
        last.descheduledMs /= 2;
        last.wakeMs /= 2;
        s.points[n] = last;
        s.points.resize(n + 1);
    } else {
        s.points.resize(n);
    }
    s.stride *= 2;
}

void stallOffCpuMs(const std::vector<const std::vector<StepPoint> *> &workers, std::size_t i,
                   std::vector<double> &out)
{
    out.assign(workers.size(), 0.0);
    std::size_t slowest = workers.size();
    for (std::size_t j = 0; j < workers.size(); ++j)
        if (i < workers[j]->size() && (slowest == workers.size() || (*workers[j])[i].waitMs < (*workers[slowest])[i].waitMs))
            slowest = j;
    if (slowest == workers.size())
        return;
    const double slowestOff = (*workers[slowest])[i].descheduledMs;
    for (std::size_t w = 0; w < workers.size(); ++w)
        if (i < workers[w]->size()) {
            const StepPoint &p = (*workers[w])[i];
            out[w] = std::min(p.waitMs, p.wakeMs + (w == slowest ? 0.0 : slowestOff));
        }
}

void TraceModel::addCounter(const Record &r)
{
    // Worker index m_workers: the async evaluator's series (its eval loss and accuracy).
    if (r.worker > m_workers || r.counter() >= CounterId::Count || !std::isfinite(r.value))
        return;
    auto &series = m_counters[std::size_t(r.counter())][r.worker];
    int &stride = m_counterStride[std::size_t(r.counter()) * std::size_t(m_workers + 1) + r.worker];
    series.push_back({double(r.start), r.step, r.value / stride});
    if (stride > 1) {
        // The newest point gathers `stride` samples before the next one starts.
        const std::size_t n = series.size();
        if (n >= 2 && series[n - 2].step / std::uint32_t(stride) == r.step / std::uint32_t(stride) &&
            r.counter() != CounterId::Version) {
            series[n - 2].value += series[n - 1].value;
            series[n - 2].tNs = series[n - 1].tNs;
            series[n - 2].step = r.step;
            series.pop_back();
        } else {
            series.back().value = r.value / stride;
        }
    }
    if (series.size() > kMaxCounterPoints) {
        // Thinned by merging neighbours (the mean of two samples at the later one's time), so
        // a long run's curves keep their shape in bounded memory.
        const std::size_t n = series.size() / 2;
        for (std::size_t i = 0; i < n; ++i) {
            const CounterPoint &a = series[2 * i], &b = series[2 * i + 1];
            series[i] = {b.tNs, b.step, (a.value + b.value) / 2};
        }
        series.resize(n);
        stride *= 2;
    }
    if (r.worker == m_workers)
        return; // the evaluator trains nothing: no steps, throughput or staleness
    if (r.counter() == CounterId::Loss) {
        stepPoint(r.worker, r.step).endNs = double(r.start);
        const auto window = std::size_t(std::clamp<double>(double(r.start) / kThroughputWindowNs, 0.0, 1e7));
        if (m_batchesPerWindow.size() <= window)
            m_batchesPerWindow.resize(window + 1, 0);
        ++m_batchesPerWindow[window];
    } else if (r.counter() == CounterId::Staleness) {
        const double v = std::clamp(r.value, 0.0, double(kMaxStaleness - 1));
        const auto s = std::size_t(v);
        if (m_staleness.size() <= s)
            m_staleness.resize(s + 1, 0);
        ++m_staleness[s];
        auto &own = m_stalenessPerWorker[std::size_t(r.worker)];
        if (own.size() <= s)
            own.resize(s + 1, 0);
        ++own[s];
    }
}

void TraceModel::ingestFromFile(const Record &r, std::size_t ri)
{
    ++m_records;
    if (r.isSpan()) {
        if (ri >= m_rows.size())
            return;
        ++m_spans;
        m_rows[ri].lod.add(r);
        m_last = std::max(m_last, r.end);
        if (r.worker < m_workers && (r.isStall() || (carriesDescheduled(r.phase()) && r.lane() != Lane::Data))) {
            StepPoint &p = stepPoint(r.worker, r.step);
            const double stride = m_steps[r.worker].stride;
            if (r.isStall())
                p.waitMs += double(r.duration()) / 1e6 / stride;
            // Compute spans: time off the CPU; barrier waits: time after the barrier opened.
            const double off = offCpuNs(r) / 1e6 / stride;
            p.descheduledMs += off;
            if (r.isStall())
                p.wakeMs += off;
        }
    } else {
        addCounter(r);
        m_last = std::max(m_last, r.start);
    }
}

void TraceModel::append(const Record *records, std::size_t n)
{
    for (std::size_t i = 0; i < n; ++i) {
        const Record &r = records[i];
        if (r.start < 0 || r.end < r.start || r.end > kMaxRunNs)
            continue; // outside any run's time: damaged, never indexed
        const std::size_t ri = r.isSpan() ? rowFor(r) : std::size_t(-1);
        ingestFromFile(r, ri);
        if (!r.isSpan() || !m_keepRaw || ri == std::size_t(-1))
            continue;
        Row &row = m_rows[ri];
        if (!row.recent.empty() && r.start < row.recent.back().start)
            row.sorted = false;
        // A trimmed row never holds more than twice the window: its room taken once, where
        // doubling copied it again and again (and touched fresh pages each time).
        if (row.recent.size() == row.recent.capacity() && !m_dir.empty())
            row.recent.reserve(std::max(2 * kRecentSpans, row.recent.size() + 1));
        row.recent.push_back(r);
        trim(row);
    }
}

void TraceModel::sortRecent(Row &row) const
{
    if (!row.sorted) {
        std::stable_sort(row.recent.begin(), row.recent.end(), startsBefore);
        row.sorted = true;
    }
}

void TraceModel::trim(Row &row)
{
    if (m_dir.empty() || row.recent.size() < 2 * kRecentSpans)
        return;
    sortRecent(row);
    const std::size_t drop = row.recent.size() - kRecentSpans;
    row.recentFrom = row.recent[drop].start;
    row.recent.erase(row.recent.begin(), row.recent.begin() + std::ptrdiff_t(drop));
}

const std::vector<Record> &TraceModel::block(std::size_t r, std::size_t b) const
{
    const auto key = std::make_pair(r, b);
    for (auto it = m_cache.begin(); it != m_cache.end(); ++it)
        if (it->first == key) {
            m_cache.splice(m_cache.end(), m_cache, it);
            return m_cache.back().second;
        }
    std::vector<Record> decoded;
    m_rows[r].file->readBlock(b, decoded);
    m_cached += decoded.size();
    m_cache.emplace_back(key, std::move(decoded));
    while (m_cached > kCacheRecords && m_cache.size() > 1) {
        m_cached -= m_cache.front().second.size();
        m_cache.pop_front();
    }
    return m_cache.back().second;
}

void TraceModel::spansIn(std::size_t r, std::int64_t t0, std::int64_t t1, std::vector<Record> &out) const
{
    out.clear();
    Row &row = m_rows[r];
    if (t0 < row.recentFrom) {
        if (!row.file && !m_dir.empty()) {
            const auto path = std::filesystem::path(m_dir) / rowFileName(row.desc);
            std::error_code ec;
            if (std::filesystem::exists(path, ec))
                row.file = std::make_unique<ChunkReader>(path.string());
        } else if (row.file && !m_dir.empty()) {
            row.file->refresh();
        }
        if (row.file) {
            const auto &blocks = row.file->blocks();
            for (std::size_t b = 0; b < blocks.size(); ++b) {
                if (blocks[b].minStart > t1 || blocks[b].maxEnd < t0 || blocks[b].minStart >= row.recentFrom)
                    continue;
                for (const Record &rec : block(r, b))
                    if (rec.isSpan() && rec.end >= t0 && rec.start <= t1 && rec.start < row.recentFrom)
                        out.push_back(rec);
            }
        }
    }
    sortRecent(row);
    auto it = std::lower_bound(row.recent.begin(), row.recent.end(), t0,
                               [](const Record &a, std::int64_t t) { return a.end < t; });
    for (; it != row.recent.end() && it->start <= t1; ++it)
        if (it->end >= t0)
            out.push_back(*it);
    if (!std::is_sorted(out.begin(), out.end(), startsBefore))
        std::stable_sort(out.begin(), out.end(), startsBefore);
}

void TraceModel::forEachRecord(const std::function<void(const Record &)> &f) const
{
    forEachRecord([&f](std::size_t, const Record &r) { f(r); });
}

void TraceModel::forEachRecord(const std::function<void(std::size_t row, const Record &)> &f,
                               std::vector<std::string> *damaged) const
{
    std::vector<Record> buf;
    for (std::size_t i = 0; i < m_rows.size(); ++i) {
        const Row &row = m_rows[i];
        if (row.file)
            for (std::size_t b = 0; b < row.file->blocks().size(); ++b) {
                if (damaged) {
                    try {
                        row.file->readBlock(b, buf);
                    } catch (const StoreError &e) {
                        damaged->push_back(std::string(e.what()) + "; its " + std::to_string(row.file->blocks()[b].count) +
                                           " records are left out");
                        continue;
                    }
                } else {
                    row.file->readBlock(b, buf);
                }
                for (const Record &r : buf)
                    f(i, r);
            }
        for (const Record &r : row.recent)
            if (r.start >= row.recentFrom || !row.file)
                f(i, r);
    }
}

std::uint64_t TraceModel::countIn(std::size_t r, std::int64_t t0, std::int64_t t1) const
{
    return m_rows[r].lod.countIn(t0, t1);
}

const std::vector<CounterPoint> &TraceModel::counter(CounterId c, int worker) const
{
    return m_counters[std::size_t(c)][std::size_t(worker)];
}

std::vector<std::pair<double, double>> TraceModel::throughput() const
{
    std::vector<std::pair<double, double>> out;
    out.reserve(m_batchesPerWindow.size());
    for (std::size_t i = 0; i < m_batchesPerWindow.size(); ++i) {
        // The newest window is still filling: its rate is over the time it has covered so far.
        const double begin = double(i) * kThroughputWindowNs;
        const double end = std::min(begin + kThroughputWindowNs, std::max(begin + 1e6, double(m_last)));
        out.emplace_back(end, double(m_batchesPerWindow[i]) * m_samplesPerBatch / ((end - begin) / 1e9));
    }
    return out;
}

std::vector<std::array<double, std::size_t(Phase::Count)>> TraceModel::phaseTimeIn(double t0, double t1,
                                                                                std::vector<double> *offCpu) const
{
    std::vector<std::array<double, std::size_t(Phase::Count)>> out(static_cast<std::size_t>(m_workers));
    for (auto &a : out)
        a.fill(0.0);
    if (offCpu)
        offCpu->assign(static_cast<std::size_t>(m_workers), 0.0);
    std::vector<Record> spans;
    for (std::size_t r = 0; r < m_rows.size(); ++r) {
        if (m_rows[r].desc.kind == RowKind::DataLane || m_rows[r].desc.kind == RowKind::Counters ||
            m_rows[r].desc.worker >= m_workers)
            continue;
        spansIn(r, std::int64_t(t0), std::int64_t(std::ceil(t1)), spans);
        for (const Record &s : spans) {
            const double a = std::max(t0, double(s.start)), b = std::min(t1, double(s.end));
            if (b > a) {
                out[std::size_t(m_rows[r].desc.worker)][std::size_t(s.phase())] += b - a;
                if (offCpu && s.duration() > 0)
                    (*offCpu)[std::size_t(m_rows[r].desc.worker)] += offCpuNs(s) * (b - a) / double(s.duration());
            }
        }
    }
    return out;
}

std::size_t TraceModel::memoryBytes() const
{
    std::size_t n = sizeof *this + m_cached * sizeof(Record);
    for (const Row &row : m_rows)
        n += row.lod.memoryBytes() + row.recent.capacity() * sizeof(Record) +
             (row.file ? row.file->blocks().capacity() * sizeof(BlockInfo) : 0);
    for (const auto &perCounter : m_counters)
        for (const auto &s : perCounter)
            n += s.capacity() * sizeof(CounterPoint);
    for (const auto &s : m_steps)
        n += s.points.capacity() * sizeof(StepPoint);
    return n;
}

void TraceModel::adoptRowFiles(std::vector<std::unique_ptr<ChunkReader>> readers)
{
    for (auto &reader : readers) {
        const RowDescriptor &d = reader->row();
        const auto it = m_rowIndex.find({d.worker, int(d.kind), d.sub});
        const std::size_t r = it == m_rowIndex.end() ? addRow(d) : it->second;
        m_rows[r].desc.name = d.name.empty() ? m_rows[r].desc.name : d.name;
        m_rows[r].file = std::move(reader);
        m_rows[r].recentFrom = std::numeric_limits<std::int64_t>::max();
    }
    sortRows();
}

void TraceModel::sortRows()
{
    // Sub-rows come from files (or the index) after the rows the constructor made; the views
    // show a worker's rows together. Stable: the constructor's order already is this one.
    const auto key = [](const Row &row) {
        static constexpr int order[] = {0, 1, 3, 2}; // Worker, DataLane, Counters, CommLane
        const auto k = std::size_t(row.desc.kind);
        return std::make_tuple(row.desc.worker, k < 4 ? order[k] : 4, row.desc.sub);
    };
    std::stable_sort(m_rows.begin(), m_rows.end(), [&](const Row &a, const Row &b) { return key(a) < key(b); });
    m_rowIndex.clear();
    m_rowOf.clear();
    for (std::size_t r = 0; r < m_rows.size(); ++r)
        m_rowIndex[{m_rows[r].desc.worker, int(m_rows[r].desc.kind), m_rows[r].desc.sub}] = r;
    m_cache.clear(); // keyed by row position
    m_cached = 0;
}

} // namespace syncopate
