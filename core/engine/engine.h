// Runs one experiment: N workers, each a thread with its own model replica and device (in one
// process, or this process's share of them on an MPI rank), combined by a Strategy (sync:
// barrier + fixed-order average; async: a parameter server) through a Communicator.
// Everything a worker does is recorded as spans; the engine's own thread drains the rings into
// the EventStore while the run goes on. Every wait is cancellable, so stop is prompt.
#pragma once

#include "communicator.h"
#include "config.h"
#include "data.h"
#include "device.h"
#include "model.h"
#include "trace.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace syncopate {

class BatchNormGroup;

class Optimizer;
class RunWriter;
class Strategy;
struct RunOutcome;
struct WorkerState;

enum class RunState { Idle, Running, Finished, Stopped, Failed };
const char *runStateName(RunState s);
// The state a summary's "status" names (finished when unknown).
RunState runStateFromName(const std::string &name);

struct EvalPoint {
    std::int64_t step = 0; // sync: steps done; async: server version
    double loss = 0;
    double accuracy = 0;
};

// Async: the evaluator thread scores snapshots of the server's parameters in version order.
// A push that makes an evaluation due copies the snapshot into one of a few preallocated
// slots and goes on; while the evaluator is busy with one, the others wait. With every slot
// taken, the newest waiting snapshot gives its slot to the new one and its version is
// skipped: the evaluator scores the oldest waiting first, and always the latest.
struct EvaluatorStatus {
    bool active = false;           // an async run with held-out data
    std::int64_t scoring = -1;     // the version being scored (or held by the test hook), -1: none
    std::vector<std::int64_t> pending; // versions waiting, oldest first
    std::int64_t skipped = 0;      // snapshots replaced before they were scored
};

class Engine {
public:
    // comm: how this process's workers reach the others; null: every worker a thread here.
    // With MPI, this process runs its share of config.workers and rank 0 writes the run.
    Engine(RunConfig config, std::shared_ptr<const Dataset> train,
           std::shared_ptr<const Dataset> eval = nullptr,
           std::shared_ptr<Communicator> comm = nullptr);
    ~Engine();
    Engine(const Engine &) = delete;
    Engine &operator=(const Engine &) = delete;

    // Streams the run into dir as it goes (runstore.h); before start(). start() throws
    // StoreError naming the folder when it cannot be written, before any worker runs.
    void setOutputDirectory(std::string dir) { m_outputDir = std::move(dir); }
    const std::string &outputDirectory() const { return m_outputDir; }
    // What events() keeps: every record (the default without an output directory, for tests),
    // only what a consumer has not taken yet (a GUI following the run), or nothing (headless).
    enum class Retention { All, Feed, None };
    void setRetention(Retention r) { m_retention = r; m_retentionSet = true; }

    // Benchmarks only: no spans recorded, counters still (before start()).
    void setTracing(bool on) { m_tracing = on; }

    void start();
    // Asks every worker to stop; returns at once. wait() returns promptly after it.
    void requestStop();
    void wait();
    bool waitFor(std::chrono::milliseconds timeout);

    RunState state() const { return m_state.load(); }
    bool finished() const;
    // Empty unless the run failed: names worker, step and phase.
    std::string error() const;
    const RunConfig &config() const { return m_config; }
    const EventStore &events() const { return m_events; }
    // Steps completed (async: updates applied by the server).
    std::int64_t progress() const { return m_progress.load(); }
    std::int64_t elapsedNs() const;
    std::int64_t parameterCount() const;
    std::vector<float> initialParams() const { return m_initialParams; }
    // The trained parameters (sync: replica 0, all replicas agree; async: the server's).
    std::vector<float> finalParams() const;
    std::vector<EvalPoint> evalHistory() const;
    // The run-level facts of the summary (status, wall time, steps, eval, devices).
    RunOutcome outcome() const;
    // The summary of the run once it has ended: the one written to summary.json, or computed
    // from events() when there is no output directory.
    nlohmann::json summary() const;
    // How sync mode averages gradients ("shared memory", "host staging", "nccl"); empty in async.
    std::string reduceAlgorithm() const;
    // The device of each worker, e.g. "cpu" or "cuda:0 (NVIDIA H100)".
    std::vector<std::string> deviceNames() const;
    // OpenMP threads of each CPU worker: device.threads_per_worker, or its default resolved.
    int threadsPerWorker() const;

    // Live controls.
    void setSlowdown(int worker, double factor);
    double slowdown(int worker) const;
    void setPaused(int worker, bool paused);
    bool paused(int worker) const;

    const Communicator &communicator() const { return *m_comm; }

    // Async: what the evaluator is doing (inactive in sync, or without held-out data).
    EvaluatorStatus evaluatorStatus() const;

    // Test hooks. A fault throws when the worker enters that phase of that step (async: worker
    // `workers` with Phase::Eval fails the evaluator as it takes that version's snapshot).
    void injectFault(int worker, std::int64_t step, Phase phase);
    // Async: while held, the evaluator takes its next snapshot and waits before scoring it
    // (evaluatorStatus().scoring says which); a stop ends the wait.
    void holdEvaluator(bool hold);
    // Async: server operations happen exactly in this order; each entry is a worker index,
    // positive for a pull (w + 1) and negative for a push (-(w + 1)).
    void scriptServerOrder(std::vector<int> order);
    // Sync with backup workers: workers arrive at the group exactly in this order of worker
    // indices, one entry per arrival (contributing or late). Before start().
    void scriptSyncArrivals(std::vector<int> order);
    // The parameters of this process's replica of that worker; after the run.
    std::vector<float> replicaParams(int worker) const;

private:
    friend class SyncStrategy;
    friend class AsyncStrategy;
    void supervise();
    void runWorker(WorkerState &w);
    void computeStep(WorkerState &w, std::int64_t step);
    void delayStep(WorkerState &w, std::int64_t step, std::int64_t computeNs);
    void waitWhilePaused(WorkerState &w, std::int64_t step);
    void enter(WorkerState &w, Phase p, std::int64_t step);
    void flushDeviceSpans(WorkerState &w);
    bool sleepCancellable(std::int64_t ns);
    // Scores params on the held-out data with m_evalModel, recorded on rec: one thread at a
    // time (the async evaluator). running: batch norm's running statistics to evaluate with
    // (host memory; null without BN).
    void evaluate(Recorder &rec, std::int64_t step, const float *params, std::int64_t version,
                  const float *running = nullptr);
    // Caller holds m_evalMutex.
    void recordEval(Recorder &rec, std::int64_t step, const EvalResult &r);
    // The device of worker i (a ConfigError of "device" when it cannot be had).
    std::unique_ptr<Device> makeDevice(int worker) const;
    // This process's worker of that index among all the run's, or null.
    WorkerState *localWorker(int worker) const;
    void fail(int worker, std::int64_t step, Phase phase, const std::string &what);
    // who: "worker 3", "the evaluator".
    void fail(const std::string &who, std::int64_t step, Phase phase, const std::string &what);
    // final: send what a non-root rank holds now, without waiting for the next batch.
    void drain(bool final = false);
    // Heartbeats and stops between ranks; a stop of this rank is announced to the others.
    void keepInTouch();
    void storeFailed(const std::string &what);
    std::vector<Record> m_drained; // drain()'s buffer, reused
    std::vector<Communicator::Knob> m_knobs; // keepInTouch()'s buffer, reused
    std::string m_outputDir;
    Retention m_retention = Retention::All;
    bool m_retentionSet = false;
    bool m_tracing = true;
    std::unique_ptr<RunWriter> m_writer; // null once it failed
    nlohmann::json m_summary;            // guarded by m_doneMutex
    bool stopping() const { return m_stop.load(std::memory_order_relaxed); }

    RunConfig m_config;
    std::shared_ptr<const Dataset> m_train, m_eval;
    RunClock m_clock;
    EventStore m_events;
    std::vector<std::unique_ptr<WorkerState>> m_workers;
    std::vector<float> m_initialParams;

    std::atomic<RunState> m_state{RunState::Idle};
    std::atomic<bool> m_stop{false};
    std::atomic<std::int64_t> m_progress{0};
    std::atomic<std::int64_t> m_endNs{-1};
    std::atomic<int> m_running{0};
    std::thread m_supervisor;
    mutable std::mutex m_doneMutex;
    std::condition_variable m_doneCv;
    std::string m_error;

    std::shared_ptr<Communicator> m_comm;
    std::unique_ptr<Strategy> m_strategy;
    std::vector<int> m_script; // async test hook: scriptServerOrder
    std::vector<int> m_syncScript; // backup workers' test hook: scriptSyncArrivals
    // Non-root ranks: records on rank 0's clock, sent about every 100 ms.
    std::vector<Record> m_outbox;
    std::int64_t m_lastSendNs = 0;
    bool m_stopAnnounced = false;

    // Pause and cancellable sleeps
    std::mutex m_pauseMutex;
    std::condition_variable m_pauseCv;

    // Evaluation on a snapshot (async); m_evalMutex guards m_evalHistory
    mutable std::mutex m_evalMutex;
    std::unique_ptr<Device> m_evalDevice;
    std::unique_ptr<Model> m_evalModel;
    // model.batchnorm = sync: the workers' statistics summed between this process's threads.
    std::unique_ptr<BatchNormGroup> m_bnGroup;
    std::vector<EvalPoint> m_evalHistory;

    struct Fault {
        int worker = -1;
        std::int64_t step = -1;
        Phase phase = Phase::Count;
    } m_fault;
};

} // namespace syncopate
