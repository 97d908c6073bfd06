// How a mode combines the workers' gradients. The engine owns the workers, their data and
// compute, pausing, faults and the collector; a strategy owns each worker's step loop from
// there on and talks to other workers only through the Communicator.
//   sync:  compute -> [barrier] -> reduce -> [barrier] -> apply, every replica the same update
//   async: pull (parameters, version) -> compute -> push to the parameter server
// Checkpointing is an option of the model, not a strategy.
#pragma once

#include "engine.h"
#include "trace.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace syncopate {

struct WorkerState;

class Strategy {
public:
    explicit Strategy(Engine &engine) : m_engine(engine) {}
    virtual ~Strategy() = default;
    Strategy(const Strategy &) = delete;
    Strategy &operator=(const Strategy &) = delete;

    // The worker's steps until the run ends or stops; throws what a step threw.
    virtual void runWorker(WorkerState &w) = 0;
    // Every wait of every worker returns at once from now on.
    virtual void cancel() = 0;
    // The trained parameters (sync: this process's first replica; async: the server's).
    virtual std::vector<float> finalParams() const = 0;
    // sync: how gradients are averaged; empty in async.
    virtual std::string reduceAlgorithm() const { return {}; }
    // On the run's thread, before the workers' threads start (async starts its evaluator).
    virtual void beforeWorkers() {}
    // After every worker has ended (async: the evaluator scores the server's final parameters
    // and is joined).
    virtual void afterWorkers() {}
    // The records of the strategy's own threads (async: the evaluator's), for the collector.
    virtual void drainRecords(std::vector<Record> &) {}
    // Async: the evaluator's queue (Engine::evaluatorStatus) and its test hook.
    virtual EvaluatorStatus evaluatorStatus() const { return {}; }
    virtual void holdEvaluator(bool) {}

protected:
    Engine &m_engine;
};

std::unique_ptr<Strategy> makeSyncStrategy(Engine &engine);
std::unique_ptr<Strategy> makeAsyncStrategy(Engine &engine);

} // namespace syncopate
