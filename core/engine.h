// Runs one experiment: N worker threads, each with its own model replica and device, combined
// by the sync strategy (barrier + fixed-order average) or the async one (a parameter server).
// Everything a worker does is recorded as spans; the engine's own thread drains the rings into
// the EventStore while the run goes on. Every wait is cancellable, so stop is prompt.
#pragma once

#include "config.h"
#include "data.h"
#include "device.h"
#include "exchange.h"
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

class Optimizer;
class RunWriter;
struct RunOutcome;
struct WorkerState;

enum class RunState { Idle, Running, Finished, Stopped, Failed };
const char *runStateName(RunState s);
// The state a summary's "status" names (finished when unknown).
RunState runStateFromName(const std::string &name);

// A barrier that every waiter leaves early when the run is cancelled.
class CancellableBarrier {
public:
    explicit CancellableBarrier(int parties) : m_parties(parties) {}
    // False when cancelled. arrivedNs is the caller's arrival time; *releasedNs becomes the
    // last arriver's, when the barrier opened (a waiter that resumes later was not running).
    bool arriveAndWait(std::int64_t arrivedNs = 0, std::int64_t *releasedNs = nullptr);
    void cancel();

private:
    std::mutex m_mutex;
    std::condition_variable m_cv;
    int m_parties;
    int m_waiting = 0;
    std::uint64_t m_generation = 0;
    std::int64_t m_releasedNs = 0;
    bool m_cancelled = false;
};

struct EvalPoint {
    std::int64_t step = 0; // sync: steps done; async: server version
    double loss = 0;
    double accuracy = 0;
};

class Engine {
public:
    Engine(RunConfig config, std::shared_ptr<const Dataset> train,
           std::shared_ptr<const Dataset> eval = nullptr);
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

    // Test hooks. A fault throws when the worker enters that phase of that step.
    void injectFault(int worker, std::int64_t step, Phase phase);
    // Async: server operations happen exactly in this order; each entry is a worker index,
    // positive for a pull (w + 1) and negative for a push (-(w + 1)).
    void scriptServerOrder(std::vector<int> order);

private:
    friend struct WorkerState;
    void supervise();
    void runWorker(WorkerState &w);
    // Waits at the barrier from t0 and records it; t0 becomes the span's end.
    bool barrierWait(WorkerState &w, std::uint32_t step, std::int64_t &t0);
    void syncStep(WorkerState &w, std::int64_t step);
    bool asyncStep(WorkerState &w, std::int64_t step);
    void computeStep(WorkerState &w, std::int64_t step);
    void delayStep(WorkerState &w, std::int64_t step, std::int64_t computeNs);
    void waitWhilePaused(WorkerState &w, std::int64_t step);
    void enter(WorkerState &w, Phase p, std::int64_t step);
    void flushDeviceSpans(WorkerState &w);
    bool sleepCancellable(std::int64_t ns);
    bool awaitServerTurn(WorkerState &w, bool push, std::unique_lock<std::mutex> &lock);
    void evaluate(WorkerState &w, std::int64_t step, const float *params, std::int64_t version);
    // Sync: every worker evaluates its shard of the held-out set on its own replica (all hold
    // the same parameters after an update), as distributed evaluation does; the last to finish
    // records the combined result. Nobody waits for anybody.
    void evaluateShard(WorkerState &w, std::int64_t step);
    void recordEval(WorkerState &w, std::int64_t step, const EvalResult &r);
    void fail(int worker, std::int64_t step, Phase phase, const std::string &what);
    void drain();
    void storeFailed(const std::string &what);
    std::vector<Record> m_drained; // drain()'s buffer, reused
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

    // Sync
    std::unique_ptr<CancellableBarrier> m_barrier;
    std::unique_ptr<GradientExchange> m_exchange;

    // Async parameter server: the master copy on worker 0's device (its own queue).
    mutable std::mutex m_serverMutex;
    std::condition_variable m_serverCv;
    std::unique_ptr<Device> m_sharedDevice;
    DeviceBuffer m_master;
    DeviceBuffer m_pushStaging; // a pushed gradient from another GPU, copied in first
    std::unique_ptr<Optimizer> m_serverOptimizer;
    std::int64_t m_version = 0;
    std::vector<std::int64_t> m_done; // updates pushed per worker
    std::vector<int> m_script;
    std::size_t m_scriptPos = 0;

    // Pause and cancellable sleeps
    std::mutex m_pauseMutex;
    std::condition_variable m_pauseCv;

    // Evaluation on a snapshot
    mutable std::mutex m_evalMutex;
    std::unique_ptr<Device> m_evalDevice;
    std::unique_ptr<Model> m_evalModel;
    std::vector<EvalPoint> m_evalHistory;
    std::vector<EvalResult> m_evalShards; // sync: one per worker, combined in worker order
    int m_evalShardsDone = 0;             // guarded by m_evalMutex

    struct Fault {
        int worker = -1;
        std::int64_t step = -1;
        Phase phase = Phase::Count;
    } m_fault;
};

} // namespace syncopate
