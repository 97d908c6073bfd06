// What a run cost, computed from its records alone: per (worker, step) rows and a summary.
#pragma once

#include "config.h"
#include "engine.h"
#include "trace.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <vector>

namespace syncopate {

struct StepRow {
    int worker = 0;
    std::int64_t step = 0;
    double tMs = 0;     // end of the step since the run started
    double stepMs = 0;  // first to last span of the step (compute and comm lanes)
    double loss = 0;
    double waitMs = 0;  // barrier, SSP and server-lock waits
    double delayMs = 0; // injected straggler delay
    double recomputeMs = 0;
    // Time the OS did not run the worker while it could run: inside compute spans, and at a
    // barrier after it opened
    double descheduledMs = 0;
    double staleness = -1; // async: staleness of this step's update; -1 = none
    double activationBytes = 0;
    int dropped = 0; // backup workers: 1 when this worker's gradient of the step was not used
    double inputWaitMs = 0; // waiting for the input pipeline's batch (input-bound), not a stall
};

struct RunMetrics {
    std::vector<StepRow> rows; // ordered by step, then worker
    nlohmann::json summary;
};

// One MPI rank of a run: its host, its workers, and its clock's offset to rank 0's at the start
// and at the end (rank 0's time = the rank's + offset, within uncertainty).
struct RankInfo {
    std::string host;
    int firstWorker = 0;
    int workers = 0;
    std::int64_t offsetNs = 0, uncertaintyNs = 0;
    std::int64_t endOffsetNs = 0, endUncertaintyNs = 0;
    // The drift fitted while the run streamed (spans were put on rank 0's clock with it), and
    // how far that model was from the end's measurement.
    double driftPpm = 0;
    std::int64_t residualNs = 0;
    int clockMeasurements = 0;
};

struct RunOutcome {
    std::string status = "finished"; // finished | stopped | failed
    std::string error;
    std::int64_t wallNs = 0;
    std::int64_t stepsCompleted = 0;
    std::vector<EvalPoint> eval;
    // Async with held-out data: snapshots the evaluator never scored, replaced by a newer one
    // while it was busy; -1 where there is no evaluator.
    std::int64_t evalsSkipped = -1;
    std::string reduceAlgorithm;      // sync: how gradients were averaged
    std::vector<std::string> devices; // per worker
    std::string cpuIsa;               // the instruction set oneDNN's CPU kernels use
    int threadsPerWorker = 0;         // CPU workers: OpenMP threads each (0: not a CPU run)
    std::vector<RankInfo> ranks;      // MPI runs: one per rank; empty in one process
};

// Builds rows and the summary from records as they stream in, holding only what is still
// open: a long run's records and rows are never all in memory at once.
class MetricsAccumulator {
public:
    explicit MetricsAccumulator(const RunConfig &config);

    // Records arrive per worker roughly in time order, workers interleaved. A record of a row
    // already handed out still counts in the summary's totals but changes no row.
    void add(const Record *records, std::size_t n);
    void add(const std::vector<Record> &records) { add(records.data(), records.size()); }

    // Appends the rows completed since the last call, in completion order. A worker's row for
    // step s completes once that worker records a compute or comm span of a later step. Until
    // it is taken, a completed row still takes late records (a GPU's Apply of step s is
    // collected after the host has started step s + 1).
    void takeFinishedRows(std::vector<StepRow> &out);
    // Everything added so far, for a run still going or ended.
    nlohmann::json summary(const RunOutcome &outcome) const;
    // takeFinishedRows, then every row still open, ordered by step then worker.
    void finish(std::vector<StepRow> &out);

    // What is held, for tests of boundedness: rows not yet handed out (open, or complete and
    // waiting for takeFinishedRows), steps whose reduce times are still kept, histogram size.
    std::size_t openRowCount() const;
    std::size_t pendingReduceSteps() const { return m_reducePending.size(); }
    std::size_t stalenessBucketCount() const { return m_stalenessHist.size(); }

    // Staleness above this is counted, but in one overflow bucket.
    static constexpr std::int64_t kStalenessBuckets = 1000000;
    // Bounds for damaged or pathological input: more open rows per worker, or more steps
    // waiting for a worker's reduce, complete the oldest early.
    static constexpr std::size_t kMaxOpenRowsPerWorker = 8;
    static constexpr std::size_t kMaxPendingReduceSteps = 64;

private:
    struct OpenRow {
        StepRow row;
        std::int64_t start = std::numeric_limits<std::int64_t>::max();
    };
    struct WorkerState {
        std::vector<OpenRow> open; // by step
        // This worker's rows in m_finished, by step: late records still reach them.
        std::vector<std::pair<std::uint32_t, std::size_t>> finished;
        std::int64_t spanStep = -1;      // the latest step with a compute or comm span
        std::int64_t lastCompleted = -1; // rows up to here are complete
        std::int64_t firstStart = std::numeric_limits<std::int64_t>::max();
        std::int64_t lastEnd = 0;
        double waitNs = 0;
        double delayNs = 0;
        double descheduledNs = 0;
        double inputWaitNs = 0;
        std::int64_t dropped = 0;
    };

    OpenRow *rowFor(int worker, std::uint32_t step);
    void complete(int worker, OpenRow &&row);
    void advance(int worker, std::int64_t step);
    void addReduce(std::uint32_t step, int worker, double ns);
    void finalizeOldestReduce();
    void addStallPart(std::uint32_t step, int worker, double waitNs, double descheduledNs, double wakeNs);
    void finalizeOldestStall();
    void addLoss(std::int64_t t, double loss);
    void addStaleness(double value);

    RunConfig m_config;
    int m_workers;
    std::vector<WorkerState> m_state;
    std::vector<OpenRow> m_finished;
    double m_recomputeNs = 0;
    double m_peakActivation = 0;
    std::vector<std::pair<std::int64_t, double>> m_lastLosses; // the latest `workers`, by time
    std::vector<std::int64_t> m_stalenessHist;
    std::int64_t m_stalenessOverflow = 0;
    std::int64_t m_stalenessCount = 0;
    double m_stalenessSum = 0;
    double m_stalenessMax = 0;
    // Sync only: per step, each worker's reduce time, until every worker has moved past it.
    std::map<std::uint32_t, std::vector<double>> m_reducePending;
    std::int64_t m_reduceFloor = 0; // steps below are folded into the totals
    double m_reduceNs = 0;
    // Sync only: per step, each worker's barrier wait, its descheduled time (compute spans and
    // late wake-ups), until every worker has moved past it. A worker's wait is explained by
    // descheduling up to its own late wake-ups plus the time the step's slowest worker (the one
    // that waited least) was not running.
    struct StallPart {
        double waitNs = 0, descheduledNs = 0, wakeNs = 0;
    };
    static double explainedByDescheduling(const std::vector<StallPart> &parts);
    std::map<std::uint32_t, std::vector<StallPart>> m_stallPending;
    std::int64_t m_stallFloor = 0;
    double m_stallDescheduledNs = 0;
    std::int64_t m_reduceSteps = 0;
    bool m_sawReduce = false;
};

// The whole run at once: rows ordered by step, then worker.
RunMetrics computeMetrics(const RunConfig &config, const std::vector<Record> &records,
                          const RunOutcome &outcome);

} // namespace syncopate
