// The Communicator over Open MPI ranks (syncopate_mpi; only syncopate-cli links it, the GUI
// starts mpirun as a child and never needs MPI itself).
//
// Each rank runs its share of the run's workers as threads. Traffic goes on separate
// communicators: gradients (the sync group), records (batches to rank 0), control (heartbeats
// and stops), evaluation, clock, async (pulls and pushes to rank 0's parameter server,
// mpiasync.h). Every wait polls its nonblocking request, so a stop or a lost
// rank ends it: no thread is ever stuck inside MPI.
#pragma once

#include "clockmodel.h"
#include "communicator.h"

#include <atomic>
#include <chrono>
#include <list>
#include <memory>
#include <mutex>

namespace syncopate {

class MpiCommunicator final : public Communicator {
public:
    // Whether this process was started by mpirun (Open MPI, or another PMI launcher).
    static bool launchedByMpirun();

    // MPI_Init_thread with MPI_THREAD_MULTIPLE. Throws CommError when MPI cannot give it.
    MpiCommunicator();
    // MPI_Finalize after a clean run; see end().
    ~MpiCommunicator() override;

    // A rank silent this long (no heartbeat) is lost.
    void setTimeout(double seconds) { m_timeoutNs = std::int64_t(seconds * 1e9); }

    std::string kind() const override { return "mpi"; }
    int rank() const override { return m_rank; }
    int ranks() const override { return m_ranks; }
    std::vector<std::string> hosts() const override { return m_hosts; }

    std::unique_ptr<SyncGroup> syncGroup(const std::vector<Device *> &devices,
                                         const std::vector<float *> &grads, std::size_t count,
                                         int workers, const RunClock &clock) override;
    // Async: rank 0's server thread and the other ranks' workers, on a communicator of their own.
    std::unique_ptr<AsyncLink> asyncLink(std::size_t count, std::size_t stats, int workers) override;
    // How sync averages (sync.allreduce): "auto", "ordered", "mpi" or "nccl".
    void setAllreduce(std::string kind) { m_allreduce = std::move(kind); }

    void agreeReady(const std::string &localError) override;
    void startClock(RunClock &clock) override;
    std::vector<ClockOffset> clockOffsets(bool atEnd) const override;
    std::vector<ClockFit> clockFits() const override;
    // The offset at the start and the drift measured since (ClockModel).
    std::int64_t toRootClock(std::int64_t ns) const override;

    void sendRecords(std::vector<Record> &batch) override;
    bool receiveRecords(std::vector<Record> &out) override;
    bool poll() override;
    std::string error() const override;
    void announceStop(const std::string &error) override;
    void sendKnob(int rank, const Knob &knob) override;
    void takeKnobs(std::vector<Knob> &out) override;
    bool gatherEval(const std::vector<EvalResult> &local, std::vector<EvalResult> &all) override;
    bool finishRun(const RunClock &clock) override;

    // The process ends: a clean run finalises MPI; one that left a collective behind (a stop
    // or a failure mid-step) has rank 0 abort the job with exitCode once it has written the
    // run, and the others wait for that.
    [[noreturn]] void end(int exitCode);

    // mpirun is ending the job (this rank got SIGTERM or SIGINT; it sends SIGKILL a second
    // later): rank 0 waits for the other ranks' last records only briefly, naming those that
    // do not answer, so that it closes the run in time. Async-signal-unsafe: call it from the
    // thread that saw the signal's flag, not from the handler.
    void hurry();

    // Polls req until it completes (true) or the run is cancelled or a rank lost (false).
    bool await(void *request);
    // One pause of a polling loop, growing with spins: prompt while a transfer completes,
    // cheap while a rank waits for a straggler on an oversubscribed machine.
    static void backoff(int &spins);
    void cancel() override { m_cancelled = true; }
    bool cancelled() const { return m_cancelled.load(std::memory_order_relaxed); }

private:
    class ChosenSyncGroup;
    ChosenSyncGroup *m_choosing = nullptr; // chosen in agreeReady
    void chooseSyncGroup();
    std::unique_ptr<SyncGroup> orderedGroup(const std::vector<Device *> &devices,
                                            const std::vector<float *> &grads, std::size_t count,
                                            int workers, const RunClock &clock, bool allreduce);
    struct Comms;
    std::unique_ptr<Comms> m_comms;
    int m_rank = 0, m_ranks = 1;
    std::vector<std::string> m_hosts;
    std::string m_allreduce = "auto";
    std::int64_t m_timeoutNs = 10'000'000'000;
    std::atomic<bool> m_cancelled{false};
    std::atomic<bool> m_abandoned{false};
    std::atomic<std::int64_t> m_hurriedNs{0}; // steady clock, when hurry() was called

    // Clock: this rank's offset to rank 0 (start, end) and, on rank 0, everyone's. *mid: this
    // rank's time in the middle of the best round trip.
    ClockOffset measureOffset(const RunClock &clock, std::int64_t *at, std::int64_t *mid = nullptr);
    ClockOffset m_offset, m_endOffset;
    std::vector<ClockOffset> m_startOffsets, m_endOffsets;
    // While the run goes, every kClockSyncMs a rank other than 0 measures again (syncClock,
    // from its poll) and rank 0 answers in its own poll (serveClock); the model takes each.
    const RunClock *m_clock = nullptr;
    mutable std::mutex m_modelMutex;
    ClockModel m_model;
    std::chrono::steady_clock::time_point m_lastSync{};
    bool m_finishing = false; // finishRun began: the end's measurement is the last
    std::vector<ClockFit> m_fits; // rank 0: everyone's
    void syncClock();
    void serveClock();

    // Control: heartbeats, stops, lost ranks. Only the collector thread calls poll().
    std::chrono::steady_clock::time_point m_lastBeat{};
    std::vector<std::chrono::steady_clock::time_point> m_lastHeard;
    mutable std::mutex m_errorMutex;
    std::string m_error;
    bool m_stopped = false;
    bool m_lost = false; // a rank stopped answering
    void setError(const std::string &e);
    void drainControl();
    bool checkAlive();

    // Sends still in flight, with their buffers.
    struct PendingSend;
    std::list<std::unique_ptr<PendingSend>> m_sends;
    std::mutex m_knobMutex;
    std::vector<std::pair<int, Knob>> m_knobsOut; // (to rank, knob): queued by any thread, sent by poll()
    std::vector<Knob> m_knobsIn;  // arrived for this rank's workers (collector thread only)
    void reapSends();

    // Rank 0: record batches that arrived, and which ranks are done.
    std::vector<Record> m_inbox;
    std::vector<bool> m_doneRanks;
    void receiveAll(std::vector<Record> &into);
};

} // namespace syncopate
