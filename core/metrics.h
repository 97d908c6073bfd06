// What a run cost, computed from its records alone: per (worker, step) rows and a summary.
#pragma once

#include "config.h"
#include "engine.h"
#include "trace.h"

#include <nlohmann/json.hpp>

#include <cstdint>
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
    double staleness = -1; // async: staleness of this step's update; -1 = none
    double activationBytes = 0;
};

struct RunMetrics {
    std::vector<StepRow> rows; // ordered by step, then worker
    nlohmann::json summary;
};

struct RunOutcome {
    std::string status = "finished"; // finished | stopped | failed
    std::string error;
    std::int64_t wallNs = 0;
    std::int64_t stepsCompleted = 0;
    std::vector<EvalPoint> eval;
    std::string reduceAlgorithm;      // sync: how gradients were averaged
    std::vector<std::string> devices; // per worker
};

RunMetrics computeMetrics(const RunConfig &config, const std::vector<Record> &records,
                          const RunOutcome &outcome);

} // namespace syncopate
