// How a mode combines the workers' gradients. The engine owns the workers, their data and
// compute, pausing, faults and the collector; a strategy owns each worker's step loop from
// there on and talks to other workers only through the Communicator.
//   sync:  compute -> [barrier] -> reduce -> [barrier] -> apply, every replica the same update
//   async: pull (parameters, version) -> compute -> push to the parameter server
// Checkpointing is an option of the model, not a strategy.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace syncopate {

class Engine;
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
    // After every worker has ended (async evaluates the server's final parameters here).
    virtual void afterWorkers() {}

protected:
    Engine &m_engine;
};

std::unique_ptr<Strategy> makeSyncStrategy(Engine &engine);
std::unique_ptr<Strategy> makeAsyncStrategy(Engine &engine);

} // namespace syncopate
