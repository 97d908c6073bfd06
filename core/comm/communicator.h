// How the workers of one run reach each other. A run's workers are numbered 0..W-1 across every
// process; this process (rank r of R) runs its contiguous share of them as threads. Two
// implementations: in-process (one rank: threads and shared memory, the default) and MPI
// (mpicomm.h: Open MPI ranks, in the syncopate_mpi library that only syncopate-cli links).
// The strategies (engine/strategy.h) talk to other workers only through this seam.
#pragma once

#include "exchange.h"
#include "trace.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace syncopate {

struct EvalResult;

// A failure of the ranks' communication: a rank that stopped answering, a lost message.
class CommError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A barrier that every waiter leaves early when the run is cancelled. Where every party has a
// core of its own a waiter first spins up to spinNs (default 0: none) watching the generation:
// on a VM a thread that went to sleep on the condition variable takes 20-60 us to run again
// once woken (its vCPU halted), paid by every worker at every barrier of every step.
class CancellableBarrier {
public:
    explicit CancellableBarrier(int parties, std::int64_t spinNs = 0)
        : m_parties(parties), m_spinNs(spinNs) {}
    // False when cancelled. arrivedNs is the caller's arrival time; *releasedNs becomes the
    // last arriver's, when the barrier opened (a waiter that resumes later was not running).
    bool arriveAndWait(std::int64_t arrivedNs = 0, std::int64_t *releasedNs = nullptr);
    void cancel();
    // The spin that suits parties threads in this process: a bounded one where each has a core
    // (sched_getaffinity), none where they share cores (a spinner would take a core's time from
    // the worker it waits for).
    static std::int64_t spinFor(int parties);

private:
    std::mutex m_mutex;
    std::condition_variable m_cv;
    int m_parties;
    std::int64_t m_spinNs;
    int m_waiting = 0;
    // Written under the mutex; atomic so that a spinning waiter may read them without it.
    std::atomic<std::uint64_t> m_generation{0};
    std::atomic<std::int64_t> m_releasedNs{0};
    std::atomic<bool> m_cancelled{false};
};

// The sync strategy's collective. Each of this process's workers (local index l) calls, per step:
//   prepare(l)  arrive(l)  reduce(l)  arrive(l)  finish(l) -> the mean gradient on l's device
// The first arrive waits for every worker of the run (the barrier whose stall the timeline
// shows); after the second every worker may read the mean.
class SyncGroup {
public:
    virtual ~SyncGroup() = default;
    // "shared memory", "host staging", "nccl", "ordered (MPI)", "MPI_Allreduce".
    virtual std::string algorithm() const = 0;
    // This worker's gradients are complete. Returns the bytes it moved.
    virtual std::size_t prepare(int local) = 0;
    // False when cancelled. *releasedNs: when the wait ended for the last to arrive.
    virtual bool arrive(int local, std::int64_t arrivedNs, std::int64_t *releasedNs) = 0;
    // Returns the bytes this worker moved or combined.
    virtual std::size_t reduce(int local) = 0;
    virtual const float *finish(int local) = 0;
    // Where the workers keep one copy of the parameters and each updates its own slice with the
    // slice of the mean it reduced (GradientExchange::ownedSlice): the second arrive() then
    // comes after the update, and waits for every slice to be updated. Empty: every worker
    // applies finish()'s whole mean to its own replica after the second arrive().
    virtual std::optional<ParamSlice> ownedSlice(int /*local*/) const { return std::nullopt; }
    // Every wait returns false from now on.
    virtual void cancel() = 0;
};

// The sync collective with backup workers (sync.backup_workers = b, Chen et al. 2016). Round r
// is step r; every worker calls, per round it computes:
//   arrive(l, r)  ->  contributor: reduce(l, r)  waitMean(r)  apply mean(r)  applied(l, r)
//                 ->  late: for r' in [r, next): waitMean(r')  apply mean(r')  applied(l, r')
// A round fills with its first N - b arrivals, in arrival order under the group's lock; those
// are its contributors, whose mean is summed in worker order (bit for bit the same for the same
// contributors). A later arrival is dropped, and its worker applies every round it missed and
// computes next the first round not yet filled: the others never wait for it, and it never
// falls further behind. Every replica applies every round's mean in order, so all stay equal.
// Means are kept until every worker has applied them, in history() slots (16, fewer for a model
// whose 16 means would pass 256 MiB): a worker more rounds behind than that (paused, say) holds
// the others, as plain sync would.
class BackupSyncGroup {
public:
    struct Arrival {
        bool open = false;        // false: cancelled
        bool contributes = false; // among the round's first N - b
        std::int64_t next = 0;    // the round this worker computes next
    };
    // Needs every replica in one memory space (the CPU, or workers sharing one GPU); throws
    // ConfigError of sync.backup_workers otherwise. script (the test hook
    // Engine::scriptSyncArrivals) may be null or empty; it must outlive the group.
    BackupSyncGroup(const std::vector<Device *> &devices, const std::vector<float *> &grads,
                    std::size_t count, int backups, const RunClock &clock,
                    const std::vector<int> *script = nullptr);
    std::string algorithm() const { return "shared memory, first N-b"; }
    int history() const { return int(m_slots.size()); }
    // l's gradients for round r are complete at arrivedNs. A contributor returns once the round
    // has filled and its slot is free; *releasedNs: when that was. A late worker returns at once.
    Arrival arrive(int local, std::int64_t round, std::int64_t arrivedNs, std::int64_t *releasedNs);
    // A contributor averages its share of the round's mean. Returns the bytes it combined.
    std::size_t reduce(int local, std::int64_t round);
    // False when cancelled. *readyNs: when the round's last share was reduced.
    bool waitMean(std::int64_t round, std::int64_t *readyNs);
    // Valid until this worker calls applied() for the round.
    const float *mean(std::int64_t round) const;
    void applied(int local, std::int64_t round);
    void cancel();

private:
    struct Slot {
        std::int64_t round = -1;
        std::vector<int> contributors; // in worker order
        int reduced = 0;
        bool ready = false;
        std::int64_t openedNs = 0; // the contributors were let go to reduce
        std::int64_t readyNs = 0;
        DeviceBuffer mean;
    };
    Slot &slot(std::int64_t round) { return m_slots[std::size_t(round) % m_slots.size()]; }
    const Slot &slot(std::int64_t round) const
    {
        return m_slots[std::size_t(round) % m_slots.size()];
    }
    bool slotFree(std::int64_t round) const;
    // Caller holds m_mutex: the filled round moves into its slot once the slot is free.
    void installPending(std::int64_t nowNs);

    std::vector<Device *> m_devices;
    std::vector<float *> m_grads;
    std::size_t m_count;
    int m_needed; // N - b
    const RunClock &m_clock;
    const std::vector<int> *m_script;

    std::mutex m_mutex;
    std::condition_variable m_cv;
    bool m_cancelled = false;
    std::size_t m_scriptPos = 0;
    std::vector<Slot> m_slots;
    std::vector<std::int64_t> m_applied; // per worker: rounds applied
    std::int64_t m_open = 0;             // the first round not yet filled
    std::vector<int> m_filling;          // its arrivals so far
    // A filled round waiting for its slot (at most one: the next cannot fill before it is
    // reduced), and when it filled.
    std::int64_t m_pending = -1;
    std::vector<int> m_pendingContributors;
    std::int64_t m_pendingNs = 0;
};

// Async over ranks: the parameter server lives in rank 0's async strategy. Rank 0's workers call
// it directly, as threads of one process do; the other ranks' workers reach it through an
// AsyncLink, whose rank-0 side (one thread) asks the server on their behalf. The server as that
// thread sees it: it never blocks, so one thread serves every remote worker however many of
// their requests the stale-synchronous bound or the scripted order holds back.
class ParameterServer {
public:
    enum class Answer { Later, Done, Served }; // Later: held (bound or script); Done: run complete
    struct Pulled {
        std::int64_t version = 0;
        bool heldByBound = false; // the worker was ahead: its request waited for the slowest
        std::int64_t heldNs = 0;  // how long (the link measures it)
    };
    struct Pushed {
        std::int64_t staleness = 0, version = 0;
        double bnDivergence = 0; // batch norm only
    };
    virtual ~ParameterServer() = default;
    // A remote worker's pull for its step: the parameters (host memory) and their version.
    virtual Answer tryPull(int worker, std::int64_t step, float *params, Pulled &out) = 0;
    // Its push: gradients and (batch norm, else null) its batch and running statistics.
    virtual Answer tryPush(int worker, std::int64_t step, const float *grads, const float *bnBatch,
                           const float *bnOwn, Pushed &out) = 0;
    // Changes whenever the server's state does: a held request may go now.
    virtual std::uint64_t generation() const = 0;
    // The run stops: the link's thread ends.
    virtual bool stopping() const = 0;
};

// A worker of another rank than 0 and rank 0's server, over the ranks' transport. Buffers are
// sized once: nothing on a worker's step allocates.
class AsyncLink {
public:
    enum class Result { Ok, Done, Cancelled };
    virtual ~AsyncLink() = default;
    // A worker of this rank (local index): blocks until the server answers or the run is
    // cancelled. pull fills params (count floats, host memory).
    virtual Result pull(int local, std::int64_t step, float *params, ParameterServer::Pulled &out) = 0;
    virtual Result push(int local, std::int64_t step, const float *grads, const float *bnBatch,
                        const float *bnOwn, ParameterServer::Pushed &out) = 0;
    // Rank 0, on a thread of its own: answers the other ranks' workers until each has been told
    // the run is done, or the run stops.
    virtual void serve(ParameterServer &server) = 0;
};

// What rank 0 knows of another rank's clock: rank 0's time = the rank's time + offsetNs.
struct ClockOffset {
    std::int64_t offsetNs = 0;
    std::int64_t uncertaintyNs = 0; // half the lowest round trip: the offset is within this
};

// How a rank's spans were put on rank 0's clock while the run streamed them (ClockModel).
struct ClockFit {
    double driftPpm = 0;         // the fitted drift, rank 0's clock against this rank's
    std::int64_t residualNs = 0; // the model at the end against the end's measurement
    int measurements = 0;        // ping-pong measurements the model was fitted to
};

class Communicator {
public:
    virtual ~Communicator() = default;
    // "threads" or "mpi".
    virtual std::string kind() const = 0;
    virtual int rank() const { return 0; }
    virtual int ranks() const { return 1; }
    bool root() const { return rank() == 0; }
    // The host each rank runs on.
    virtual std::vector<std::string> hosts() const = 0;
    // "rank 2 on node7", as errors name a rank.
    std::string rankName(int rank) const;

    // The workers of rank r: [firstWorker(W, r), firstWorker(W, r + 1)).
    int firstWorker(int workers, int rank) const { return workers * rank / ranks(); }
    int firstWorker(int workers) const { return firstWorker(workers, rank()); }
    int localWorkers(int workers) const
    {
        return firstWorker(workers, rank() + 1) - firstWorker(workers, rank());
    }
    int rankOfWorker(int workers, int worker) const;

    // Sync: devices and grads of this process's workers, count floats each; workers in all;
    // clock: the run's (barrier release times are on it).
    virtual std::unique_ptr<SyncGroup> syncGroup(const std::vector<Device *> &devices,
                                                 const std::vector<float *> &grads,
                                                 std::size_t count, int workers,
                                                 const RunClock &clock) = 0;
    // Sync with backup workers (sync.backup_workers > 0): only threads of one process have
    // it; the default throws ConfigError of sync.backup_workers.
    virtual std::unique_ptr<BackupSyncGroup>
    backupSyncGroup(const std::vector<Device *> &devices, const std::vector<float *> &grads,
                    std::size_t count, int workers, int backups, const RunClock &clock,
                    const std::vector<int> *script);
    // Every wait inside the communicator returns false from now on (the run stops).
    virtual void cancel() {}
    // Async: how workers of other ranks reach rank 0's parameter server (count parameters and
    // stats batch-norm statistics per worker; workers in all). Null in one process: every
    // worker calls the server directly.
    virtual std::unique_ptr<AsyncLink> asyncLink(std::size_t count, std::size_t stats, int workers)
    {
        (void)count;
        (void)stats;
        (void)workers;
        return nullptr;
    }

    // Every rank built its replicas (or failed to: localError). Throws CommError naming the
    // rank, host and error of the first that failed, on every rank, before anything runs.
    virtual void agreeReady(const std::string &localError) { (void)localError; }
    // Right after each rank restarted its clock: ranks take rank 0's origin (on one host their
    // clocks then agree) and estimate what offset to rank 0's remains.
    virtual void startClock(RunClock &clock) { (void)clock; }
    // Rank 0: every rank's offset at the start and (after endClock) at the end.
    virtual std::vector<ClockOffset> clockOffsets(bool atEnd) const
    {
        (void)atEnd;
        return {ClockOffset{}};
    }
    // Rank 0, after finishRun: how each rank's clock was modelled.
    virtual std::vector<ClockFit> clockFits() const { return {ClockFit{}}; }
    // On this rank's clock: the time rank 0's clock showed then (the offset at the start and
    // the drift measured since, once known).
    virtual std::int64_t toRootClock(std::int64_t ns) const { return ns; }

    // Records of the other ranks, on rank 0's clock. Non-root ranks send theirs (batched by the
    // caller); rank 0 appends what has arrived to out. Returns false once a rank has stopped
    // answering or reported a failure: error() says which.
    // Takes the batch's records (leaves it empty).
    virtual void sendRecords(std::vector<Record> &batch) { batch.clear(); }
    virtual bool receiveRecords(std::vector<Record> &out)
    {
        (void)out;
        return true;
    }
    // Keeps the ranks in touch (heartbeats, stop requests); called by each rank's collector
    // every few milliseconds. False when the run must stop: a rank failed, was stopped or
    // stopped answering; error() names it (empty for a plain stop).
    virtual bool poll() { return true; }
    virtual std::string error() const { return {}; }
    // This rank stops: the others are told, with the error when it failed.
    virtual void announceStop(const std::string &error) { (void)error; }

    // Live knobs for a worker of another rank (a slowdown factor, a pause): queued by any
    // thread, sent by the collector's poll() to the rank that runs the worker, which takes
    // them in its own poll. In one process every worker is local and nothing travels.
    struct Knob {
        std::int32_t worker = 0;
        std::int32_t pause = -1; // 0 or 1: a pause; -1: a slowdown
        double slowdown = 1.0;
    };
    virtual void sendKnob(int rank, const Knob &knob)
    {
        (void)rank;
        (void)knob;
    }
    // Knobs that arrived for this rank's workers since the last call (appended to out).
    virtual void takeKnobs(std::vector<Knob> &out) { (void)out; }

    // Sync evaluation: each worker's shard (local order); rank 0 gets all W in worker order.
    // False when cancelled.
    virtual bool gatherEval(const std::vector<EvalResult> &local, std::vector<EvalResult> &all);

    // The run ended on this rank (its records sent): waits for every rank (rank 0: until each
    // has sent all its records) and measures the clocks again. False when a rank was lost.
    virtual bool finishRun(const RunClock &clock)
    {
        (void)clock;
        return true;
    }
};

// One process: every worker a thread, gradients averaged in shared memory (or staged / NCCL
// between GPUs, as createGradientExchange picks).
class InProcessCommunicator final : public Communicator {
public:
    std::string kind() const override { return "threads"; }
    std::vector<std::string> hosts() const override;
    std::unique_ptr<SyncGroup> syncGroup(const std::vector<Device *> &devices,
                                         const std::vector<float *> &grads, std::size_t count,
                                         int workers, const RunClock &clock) override;
    std::unique_ptr<BackupSyncGroup>
    backupSyncGroup(const std::vector<Device *> &devices, const std::vector<float *> &grads,
                    std::size_t count, int workers, int backups, const RunClock &clock,
                    const std::vector<int> *script) override;
};

// This machine's host name.
std::string hostName();

} // namespace syncopate
