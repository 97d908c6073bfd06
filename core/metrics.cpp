#include "metrics.h"

#include "model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace syncopate {

RunMetrics computeMetrics(const RunConfig &config, const std::vector<Record> &records,
                          const RunOutcome &outcome)
{
    const int workers = config.workers;
    std::vector<std::vector<StepRow>> perWorker{std::size_t(workers)};
    std::vector<std::vector<std::int64_t>> stepStart{std::size_t(workers)};
    std::vector<std::int64_t> firstStart(std::size_t(workers), std::numeric_limits<std::int64_t>::max());
    std::vector<std::int64_t> lastEnd(std::size_t(workers), 0);
    std::vector<double> waitNs(std::size_t(workers), 0), delayNs(std::size_t(workers), 0);
    double recomputeNs = 0, peakActivation = 0;
    std::vector<std::pair<std::int64_t, double>> losses; // (time, loss)
    std::vector<std::int64_t> staleness;
    std::vector<std::vector<double>> reduceNs; // [step][worker]

    auto row = [&](int w, std::int64_t step) -> StepRow & {
        auto &v = perWorker[std::size_t(w)];
        auto &s = stepStart[std::size_t(w)];
        while (std::int64_t(v.size()) <= step) {
            StepRow r;
            r.worker = w;
            r.step = std::int64_t(v.size());
            v.push_back(r);
            s.push_back(std::numeric_limits<std::int64_t>::max());
        }
        return v[std::size_t(step)];
    };

    for (const Record &r : records) {
        if (r.worker >= workers)
            continue;
        const int w = r.worker;
        if (r.isSpan()) {
            if (r.lane() == Lane::Data || r.phase() == Phase::Eval)
                continue; // prefetch overlaps other steps; eval is not training time
            StepRow &row_ = row(w, r.step);
            auto &start = stepStart[std::size_t(w)][r.step];
            start = std::min(start, r.start);
            row_.tMs = std::max(row_.tMs, double(r.end) / 1e6);
            row_.stepMs = row_.tMs - double(start) / 1e6;
            firstStart[std::size_t(w)] = std::min(firstStart[std::size_t(w)], r.start);
            lastEnd[std::size_t(w)] = std::max(lastEnd[std::size_t(w)], r.end);
            const double ms = double(r.duration()) / 1e6;
            switch (r.phase()) {
            case Phase::Wait:
                if (r.isStall()) {
                    row_.waitMs += ms;
                    waitNs[std::size_t(w)] += double(r.duration());
                }
                break;
            case Phase::Delay:
                row_.delayMs += ms;
                delayNs[std::size_t(w)] += double(r.duration());
                break;
            case Phase::Reduce:
                if (reduceNs.size() <= r.step)
                    reduceNs.resize(std::size_t(r.step) + 1, std::vector<double>(std::size_t(workers), 0.0));
                reduceNs[r.step][std::size_t(w)] += double(r.duration());
                break;
            case Phase::Recompute:
                row_.recomputeMs += ms;
                recomputeNs += double(r.duration());
                break;
            default:
                break;
            }
        } else {
            switch (r.counter()) {
            case CounterId::Loss:
                row(w, r.step).loss = r.value;
                losses.emplace_back(r.start, r.value);
                break;
            case CounterId::ActivationBytes:
                row(w, r.step).activationBytes = r.value;
                peakActivation = std::max(peakActivation, r.value);
                break;
            case CounterId::Staleness:
                row(w, r.step).staleness = r.value;
                staleness.push_back(std::int64_t(r.value));
                break;
            default:
                break;
            }
        }
    }

    RunMetrics m;
    // Rows that never got past data loading (a stopped run's last step) carry no loss; keep
    // only steps that computed something.
    std::int64_t maxSteps = 0;
    for (const auto &v : perWorker)
        maxSteps = std::max<std::int64_t>(maxSteps, std::int64_t(v.size()));
    for (std::int64_t s = 0; s < maxSteps; ++s)
        for (const auto &v : perWorker)
            if (s < std::int64_t(v.size()))
                m.rows.push_back(v[std::size_t(s)]);

    double totalActive = 0, totalWait = 0;
    nlohmann::json stallPerWorker = nlohmann::json::array();
    nlohmann::json delayPerWorker = nlohmann::json::array();
    for (int w = 0; w < workers; ++w) {
        const double active = lastEnd[std::size_t(w)] > firstStart[std::size_t(w)]
                                  ? double(lastEnd[std::size_t(w)] - firstStart[std::size_t(w)])
                                  : 0.0;
        totalActive += active;
        totalWait += waitNs[std::size_t(w)];
        stallPerWorker.push_back(waitNs[std::size_t(w)] / 1e6);
        delayPerWorker.push_back(delayNs[std::size_t(w)] / 1e6);
    }

    std::sort(losses.begin(), losses.end());
    double finalLoss = std::numeric_limits<double>::quiet_NaN();
    if (!losses.empty()) {
        const std::size_t k = std::min<std::size_t>(losses.size(), std::size_t(workers));
        double s = 0;
        for (std::size_t i = losses.size() - k; i < losses.size(); ++i)
            s += losses[i].second;
        finalLoss = s / double(k);
    }

    const double wallS = double(outcome.wallNs) / 1e9;
    const double samplesDone = double(outcome.stepsCompleted) * double(config.samplesPerStep());

    nlohmann::json &j = m.summary;
    j["mode"] = config.mode;
    j["workers"] = workers;
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
    j["recompute_ms"] = recomputeNs / 1e6;
    j["peak_activation_bytes"] = std::int64_t(peakActivation);
    if (!staleness.empty()) {
        const std::int64_t mx = *std::max_element(staleness.begin(), staleness.end());
        double sum = 0;
        std::vector<std::int64_t> hist(std::size_t(mx + 1), 0);
        for (auto s : staleness) {
            sum += double(s);
            ++hist[std::size_t(std::max<std::int64_t>(0, s))];
        }
        j["staleness_mean"] = sum / double(staleness.size());
        j["staleness_max"] = mx;
        j["staleness_histogram"] = hist;
    } else {
        j["staleness_mean"] = 0.0;
        j["staleness_max"] = 0;
        j["staleness_histogram"] = nlohmann::json::array();
    }
    if (!outcome.devices.empty())
        j["devices"] = outcome.devices;
    if (!config.async() && !reduceNs.empty()) {
        // As nccl-tests report an all-reduce of S bytes per rank taking t: algbw = S / t,
        // busbw = algbw * 2(n-1)/n, with t the slowest worker's reduce time of each step.
        ModelSpec spec;
        spec.layers = config.layers;
        const double bytes = double(spec.paramCount()) * sizeof(float);
        double totalNs = 0;
        std::size_t steps = 0;
        for (const auto &perStep : reduceNs) {
            const double t = *std::max_element(perStep.begin(), perStep.end());
            if (t > 0) {
                totalNs += t;
                ++steps;
            }
        }
        nlohmann::json reduce;
        reduce["algorithm"] = outcome.reduceAlgorithm;
        reduce["bytes_per_worker"] = std::int64_t(bytes);
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
    return m;
}

} // namespace syncopate
