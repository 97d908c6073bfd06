#include "metrics.h"

#include "model.h"

#include <algorithm>
#include <cmath>

namespace syncopate {

namespace {
// A span's descheduled time: at most the span itself, whatever a damaged file says.
double boundedValue(double v, double spanNs)
{
    return std::isfinite(v) ? std::clamp(v, 0.0, std::max(0.0, spanNs)) : 0.0;
}
} // namespace

namespace {

// Values from a damaged file can be anything; casting an out-of-range double to an integer is
// undefined behaviour, so saturate instead.
std::int64_t clampToInt64(double v)
{
    if (std::isnan(v))
        return 0;
    if (v >= 9223372036854775808.0)
        return std::numeric_limits<std::int64_t>::max();
    if (v < -9223372036854775808.0)
        return std::numeric_limits<std::int64_t>::min();
    return std::int64_t(v);
}

// By time, then value; a NaN loss sorts after every number so the order stays strict.
bool lossBefore(const std::pair<std::int64_t, double> &a, const std::pair<std::int64_t, double> &b)
{
    if (a.first != b.first)
        return a.first < b.first;
    if (std::isnan(a.second))
        return false;
    return std::isnan(b.second) || a.second < b.second;
}

bool byStepThenWorker(const StepRow &a, const StepRow &b)
{
    return a.step != b.step ? a.step < b.step : a.worker < b.worker;
}

} // namespace

MetricsAccumulator::MetricsAccumulator(const RunConfig &config)
    : m_config(config), m_workers(std::max(0, config.workers)), m_state(std::size_t(m_workers))
{
}

void MetricsAccumulator::add(const Record *records, std::size_t n)
{
    for (std::size_t i = 0; i < n; ++i) {
        const Record &r = records[i];
        if (r.worker >= m_workers)
            continue;
        const int w = r.worker;
        WorkerState &ws = m_state[std::size_t(w)];
        if (!r.isSpan()) {
            OpenRow *row = nullptr;
            switch (r.counter()) {
            case CounterId::Loss:
                if ((row = rowFor(w, r.step)))
                    row->row.loss = r.value;
                addLoss(r.start, r.value);
                break;
            case CounterId::ActivationBytes:
                if ((row = rowFor(w, r.step)))
                    row->row.activationBytes = r.value;
                m_peakActivation = std::max(m_peakActivation, r.value);
                break;
            case CounterId::Staleness:
                if ((row = rowFor(w, r.step)))
                    row->row.staleness = r.value;
                addStaleness(r.value);
                break;
            default:
                break;
            }
            continue;
        }
        if (r.lane() == Lane::Data || r.phase() == Phase::Eval)
            continue; // prefetch overlaps other steps; eval is not training time
        if (std::int64_t(r.step) > ws.spanStep)
            advance(w, r.step);
        ws.firstStart = std::min(ws.firstStart, r.start);
        ws.lastEnd = std::max(ws.lastEnd, r.end);
        // In double: a damaged file's times can be far enough apart to overflow an int64.
        const double ns = double(r.end) - double(r.start);
        OpenRow *row = rowFor(w, r.step);
        if (row) {
            row->start = std::min(row->start, r.start);
            row->row.tMs = std::max(row->row.tMs, double(r.end) / 1e6);
            row->row.stepMs = row->row.tMs - double(row->start) / 1e6;
        }
        switch (r.phase()) {
        case Phase::Wait:
            if (r.isStall()) {
                if (row)
                    row->row.waitMs += ns / 1e6;
                ws.waitNs += ns;
                // Sync barrier waits carry how long the worker resumed after the barrier opened.
                const double wake = !m_config.async() ? boundedValue(r.value, ns) : 0.0;
                if (row)
                    row->row.descheduledMs += wake / 1e6;
                ws.descheduledNs += wake;
                addStallPart(r.step, w, ns, wake, wake);
            }
            break;
        case Phase::Delay:
            if (row)
                row->row.delayMs += ns / 1e6;
            ws.delayNs += ns;
            break;
        case Phase::Reduce:
            addReduce(r.step, w, ns);
            break;
        case Phase::Recompute:
            if (row)
                row->row.recomputeMs += ns / 1e6;
            m_recomputeNs += ns;
            break;
        case Phase::Dropped:
            if (row)
                row->row.dropped = 1;
            ++ws.dropped;
            break;
        case Phase::InputWait:
            if (row)
                row->row.inputWaitMs += ns / 1e6;
            ws.inputWaitNs += ns;
            break;
        default:
            break;
        }
        if (carriesDescheduled(r.phase())) {
            const double off = boundedValue(r.value, ns);
            if (row)
                row->row.descheduledMs += off / 1e6;
            ws.descheduledNs += off;
            if (off > 0)
                addStallPart(r.step, w, 0, off, 0);
        }
    }
}

MetricsAccumulator::OpenRow *MetricsAccumulator::rowFor(int worker, std::uint32_t step)
{
    WorkerState &ws = m_state[std::size_t(worker)];
    auto it = std::lower_bound(ws.open.begin(), ws.open.end(), step,
                               [](const OpenRow &o, std::uint32_t s) { return o.row.step < s; });
    if (it != ws.open.end() && it->row.step == step)
        return &*it;
    if (std::int64_t(step) <= ws.lastCompleted) {
        auto f = std::lower_bound(ws.finished.begin(), ws.finished.end(), step,
                                  [](const auto &e, std::uint32_t s) { return e.first < s; });
        if (f != ws.finished.end() && f->first == step)
            return &m_finished[f->second];
        return nullptr; // handed out already: the record counts in the totals only
    }
    OpenRow fresh;
    fresh.row.worker = worker;
    fresh.row.step = step;
    if (std::int64_t(step) < ws.spanStep) { // a step this worker skipped and has moved past
        complete(worker, std::move(fresh));
        return &m_finished.back();
    }
    const auto at = it - ws.open.begin();
    ws.open.insert(it, std::move(fresh));
    if (ws.open.size() <= kMaxOpenRowsPerWorker)
        return &ws.open[std::size_t(at)];
    // Only damaged input opens this many (counters of future steps, say): bound it.
    complete(worker, std::move(ws.open.front()));
    ws.open.erase(ws.open.begin());
    return at == 0 ? &m_finished.back() : &ws.open[std::size_t(at - 1)];
}

void MetricsAccumulator::complete(int worker, OpenRow &&row)
{
    WorkerState &ws = m_state[std::size_t(worker)];
    ws.lastCompleted = std::max(ws.lastCompleted, row.row.step);
    ws.finished.emplace_back(std::uint32_t(row.row.step), m_finished.size());
    m_finished.push_back(std::move(row));
}

void MetricsAccumulator::advance(int worker, std::int64_t step)
{
    WorkerState &ws = m_state[std::size_t(worker)];
    ws.spanStep = step;
    while (!ws.open.empty() && ws.open.front().row.step < step) {
        complete(worker, std::move(ws.open.front()));
        ws.open.erase(ws.open.begin());
    }
    if (m_reducePending.empty() && m_stallPending.empty())
        return;
    std::int64_t slowest = step;
    for (const WorkerState &o : m_state)
        slowest = std::min(slowest, o.spanStep);
    while (!m_reducePending.empty() && std::int64_t(m_reducePending.begin()->first) < slowest)
        finalizeOldestReduce();
    while (!m_stallPending.empty() && std::int64_t(m_stallPending.begin()->first) < slowest)
        finalizeOldestStall();
}

double MetricsAccumulator::explainedByDescheduling(const std::vector<StallPart> &parts)
{
    // The slowest worker of the step is the one that waited least (it arrived last); the
    // others waited for it, and as long as it was not running, for the OS. A worker's own late
    // wake-ups after the barrier opened are descheduling too.
    std::size_t slowest = 0;
    for (std::size_t i = 1; i < parts.size(); ++i)
        if (parts[i].waitNs < parts[slowest].waitNs)
            slowest = i;
    double explained = 0;
    for (std::size_t i = 0; i < parts.size(); ++i)
        explained += std::min(parts[i].waitNs,
                              parts[i].wakeNs + (i == slowest ? 0.0 : parts[slowest].descheduledNs));
    return explained;
}

void MetricsAccumulator::addStallPart(std::uint32_t step, int worker, double waitNs, double descheduledNs,
                                      double wakeNs)
{
    if (m_config.async() || m_workers < 2 || std::int64_t(step) < m_stallFloor)
        return;
    std::vector<StallPart> &parts = m_stallPending[step];
    if (parts.empty())
        parts.resize(std::size_t(m_workers));
    parts[std::size_t(worker)].waitNs += waitNs;
    parts[std::size_t(worker)].descheduledNs += descheduledNs;
    parts[std::size_t(worker)].wakeNs += wakeNs;
    if (m_stallPending.size() > kMaxPendingReduceSteps)
        finalizeOldestStall();
}

void MetricsAccumulator::finalizeOldestStall()
{
    auto it = m_stallPending.begin();
    m_stallDescheduledNs += explainedByDescheduling(it->second);
    m_stallFloor = std::int64_t(it->first) + 1;
    m_stallPending.erase(it);
}

void MetricsAccumulator::addReduce(std::uint32_t step, int worker, double ns)
{
    if (m_config.async())
        return;
    m_sawReduce = true;
    if (std::int64_t(step) < m_reduceFloor)
        return; // that step's slowest time is already in the totals
    std::vector<double> &perWorker = m_reducePending[step];
    if (perWorker.empty())
        perWorker.assign(std::size_t(m_workers), 0.0);
    perWorker[std::size_t(worker)] += ns;
    // The barrier keeps sync workers within a step of each other; a longer backlog means one
    // of them has stopped recording.
    if (m_reducePending.size() > kMaxPendingReduceSteps)
        finalizeOldestReduce();
}

void MetricsAccumulator::finalizeOldestReduce()
{
    auto it = m_reducePending.begin();
    const double t = *std::max_element(it->second.begin(), it->second.end());
    if (t > 0) {
        m_reduceNs += t;
        ++m_reduceSteps;
    }
    m_reduceFloor = std::int64_t(it->first) + 1;
    m_reducePending.erase(it);
}

void MetricsAccumulator::addLoss(std::int64_t t, double loss)
{
    if (m_workers == 0)
        return;
    const std::pair<std::int64_t, double> p{t, loss};
    if (m_lastLosses.size() == std::size_t(m_workers)) {
        if (!lossBefore(m_lastLosses.front(), p))
            return;
        m_lastLosses.erase(m_lastLosses.begin());
    }
    m_lastLosses.insert(std::upper_bound(m_lastLosses.begin(), m_lastLosses.end(), p, lossBefore),
                        p);
}

void MetricsAccumulator::addStaleness(double value)
{
    if (!std::isfinite(value))
        return; // not a staleness at all: a damaged file
    const double s = std::trunc(value);
    m_stalenessMax = m_stalenessCount == 0 ? s : std::max(m_stalenessMax, s);
    m_stalenessSum += s;
    ++m_stalenessCount;
    if (s > double(kStalenessBuckets)) {
        ++m_stalenessOverflow;
        return;
    }
    const std::size_t bucket = s > 0 ? std::size_t(s) : 0;
    if (m_stalenessHist.size() <= bucket)
        m_stalenessHist.resize(bucket + 1, 0);
    ++m_stalenessHist[bucket];
}

void MetricsAccumulator::takeFinishedRows(std::vector<StepRow> &out)
{
    out.reserve(out.size() + m_finished.size());
    for (const OpenRow &r : m_finished)
        out.push_back(r.row);
    m_finished.clear();
    for (WorkerState &ws : m_state)
        ws.finished.clear();
}

void MetricsAccumulator::finish(std::vector<StepRow> &out)
{
    takeFinishedRows(out);
    const auto from = std::ptrdiff_t(out.size());
    for (WorkerState &ws : m_state) {
        for (const OpenRow &r : ws.open) {
            ws.lastCompleted = std::max(ws.lastCompleted, r.row.step);
            out.push_back(r.row);
        }
        ws.open.clear();
    }
    std::sort(out.begin() + from, out.end(), byStepThenWorker);
}

std::size_t MetricsAccumulator::openRowCount() const
{
    std::size_t n = m_finished.size();
    for (const WorkerState &ws : m_state)
        n += ws.open.size();
    return n;
}

nlohmann::json MetricsAccumulator::summary(const RunOutcome &outcome) const
{
    double totalActive = 0, totalWait = 0;
    nlohmann::json stallPerWorker = nlohmann::json::array();
    nlohmann::json delayPerWorker = nlohmann::json::array();
    nlohmann::json descheduledPerWorker = nlohmann::json::array();
    nlohmann::json droppedPerWorker = nlohmann::json::array();
    nlohmann::json inputWaitPerWorker = nlohmann::json::array();
    double totalDescheduled = 0, totalInputWait = 0;
    for (const WorkerState &ws : m_state) {
        descheduledPerWorker.push_back(ws.descheduledNs / 1e6);
        totalDescheduled += ws.descheduledNs;
        totalActive += ws.lastEnd > ws.firstStart ? double(ws.lastEnd) - double(ws.firstStart) : 0.0;
        totalWait += ws.waitNs;
        stallPerWorker.push_back(ws.waitNs / 1e6);
        delayPerWorker.push_back(ws.delayNs / 1e6);
        droppedPerWorker.push_back(ws.dropped);
        inputWaitPerWorker.push_back(ws.inputWaitNs / 1e6);
        totalInputWait += ws.inputWaitNs;
    }

    double finalLoss = std::numeric_limits<double>::quiet_NaN();
    if (!m_lastLosses.empty()) {
        double s = 0;
        for (const auto &l : m_lastLosses)
            s += l.second;
        finalLoss = s / double(m_lastLosses.size());
    }

    const RunConfig &config = m_config;
    const double wallS = double(outcome.wallNs) / 1e9;
    const double samplesDone = double(outcome.stepsCompleted) * double(config.samplesPerStep());

    nlohmann::json j;
    j["mode"] = config.mode;
    j["workers"] = config.workers;
    j["steps"] = config.steps;
    j["steps_completed"] = outcome.stepsCompleted;
    j["status"] = outcome.status;
    if (!outcome.error.empty())
        j["error"] = outcome.error;
    j["wall_s"] = wallS;
    j["samples_per_s"] = wallS > 0 ? samplesDone / wallS : 0.0;
    j["final_loss"] = std::isfinite(finalLoss) ? nlohmann::json(finalLoss) : nlohmann::json();
    j["stall_fraction"] = totalActive > 0 ? totalWait / totalActive : 0.0;
    j["stall_ms_per_worker"] = stallPerWorker;
    j["delay_ms_per_worker"] = delayPerWorker;
    // Of worker time, the share a worker could run but the OS did not run it (more workers
    // than free cores, or other programs): time a barrier then waits for no fault of the mode.
    j["descheduled_ms_per_worker"] = descheduledPerWorker;
    j["descheduled_fraction"] = totalActive > 0 ? std::min(1.0, totalDescheduled / totalActive) : 0.0;
    if (!config.async()) {
        // Of the barrier stalls, the share spent waiting for a worker the OS was not running
        // (steps still open are counted as they stand).
        double explained = m_stallDescheduledNs;
        for (const auto &[step, parts] : m_stallPending) {
            explained += explainedByDescheduling(parts);
        }
        j["stall_descheduled_fraction"] = totalWait > 0 ? std::min(1.0, explained / totalWait) : 0.0;
    }
    if (!config.async() && config.backupWorkers > 0) {
        // Gradients computed and not used, per worker: the b late ones of each step.
        j["backup_workers"] = config.backupWorkers;
        j["dropped_per_worker"] = droppedPerWorker;
    }
    // Steps that found their batch not ready: the run is input-bound (not counted as stalls).
    j["input_wait_ms_per_worker"] = inputWaitPerWorker;
    j["input_wait_fraction"] = totalActive > 0 ? std::min(1.0, totalInputWait / totalActive) : 0.0;
    j["recompute_ms"] = m_recomputeNs / 1e6;
    j["peak_activation_bytes"] = clampToInt64(m_peakActivation);
    if (m_stalenessCount > 0) {
        j["staleness_mean"] = m_stalenessSum / double(m_stalenessCount);
        j["staleness_max"] = clampToInt64(m_stalenessMax);
        j["staleness_histogram"] = m_stalenessHist;
        if (m_stalenessOverflow > 0) // only a damaged file gets here
            j["staleness_overflow"] = m_stalenessOverflow;
    } else {
        j["staleness_mean"] = 0.0;
        j["staleness_max"] = 0;
        j["staleness_histogram"] = nlohmann::json::array();
    }
    if (!outcome.devices.empty())
        j["devices"] = outcome.devices;
    if (!outcome.cpuIsa.empty())
        j["cpu_isa"] = outcome.cpuIsa;
    if (outcome.threadsPerWorker > 0)
        j["threads_per_worker"] = outcome.threadsPerWorker;
    if (!outcome.ranks.empty()) {
        nlohmann::json ranks = nlohmann::json::array();
        for (std::size_t r = 0; r < outcome.ranks.size(); ++r) {
            const RankInfo &i = outcome.ranks[r];
            nlohmann::json k{{"rank", r},
                             {"host", i.host},
                             {"first_worker", i.firstWorker},
                             {"workers", i.workers},
                             {"clock_offset_ns", i.offsetNs},
                             {"clock_uncertainty_ns", i.uncertaintyNs},
                             {"clock_offset_end_ns", i.endOffsetNs},
                             {"clock_uncertainty_end_ns", i.endUncertaintyNs},
                             {"clock_drift_ppm", i.driftPpm},
                             {"clock_residual_end_ns", i.residualNs},
                             {"clock_measurements", i.clockMeasurements}};
            ranks.push_back(k);
        }
        j["ranks"] = ranks;
    }
    if (!config.async() && m_sawReduce) {
        // As nccl-tests report an all-reduce of S bytes per rank taking t: algbw = S / t,
        // busbw = algbw * 2(n-1)/n, with t the slowest worker's reduce time of each step.
        ModelSpec spec;
        spec.layers = config.layers;
        // One worker's gradients are their own mean: nothing moves (and a bandwidth of the
        // nothing it took would be nonsense).
        const double bytes = config.workers > 1 ? double(spec.paramCount()) * sizeof(float) : 0.0;
        double totalNs = m_reduceNs;
        std::int64_t steps = m_reduceSteps;
        for (const auto &perStep : m_reducePending) {
            const double t = *std::max_element(perStep.second.begin(), perStep.second.end());
            if (t > 0) {
                totalNs += t;
                ++steps;
            }
        }
        const int workers = config.workers;
        nlohmann::json reduce;
        reduce["algorithm"] = outcome.reduceAlgorithm;
        reduce["bytes_per_worker"] = clampToInt64(bytes);
        reduce["time_ms_mean"] = steps ? totalNs / double(steps) / 1e6 : 0.0;
        const double algbw = totalNs > 0 ? bytes * double(steps) / totalNs : 0.0; // bytes/ns = GB/s
        reduce["algbw_gb_s"] = algbw;
        reduce["busbw_gb_s"] = workers > 1 ? algbw * 2.0 * (workers - 1) / workers : 0.0;
        j["reduce"] = reduce;
    }
    if (!outcome.eval.empty()) {
        nlohmann::json evals = nlohmann::json::array();
        for (const auto &e : outcome.eval) {
            nlohmann::json p{{"step", e.step}, {"loss", e.loss}};
            if (config.classification())
                p["accuracy"] = e.accuracy;
            evals.push_back(p);
        }
        j["eval"] = evals;
        j["final_eval_loss"] = outcome.eval.back().loss;
        if (config.classification())
            j["final_eval_accuracy"] = outcome.eval.back().accuracy;
    }
    if (outcome.evalsSkipped >= 0)
        j["evals_skipped"] = outcome.evalsSkipped;
    return j;
}

RunMetrics computeMetrics(const RunConfig &config, const std::vector<Record> &records,
                          const RunOutcome &outcome)
{
    MetricsAccumulator acc(config);
    acc.add(records);
    RunMetrics m;
    acc.finish(m.rows);
    // Completion order interleaves the workers by time.
    std::sort(m.rows.begin(), m.rows.end(), byStepThenWorker);
    m.summary = acc.summary(outcome);
    return m;
}

} // namespace syncopate
