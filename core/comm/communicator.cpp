#include "communicator.h"

#include "model.h"

#include <unistd.h>

namespace syncopate {

bool CancellableBarrier::arriveAndWait(std::int64_t arrivedNs, std::int64_t *releasedNs)
{
    std::unique_lock lock(m_mutex);
    if (m_cancelled)
        return false;
    const std::uint64_t generation = m_generation;
    if (++m_waiting == m_parties) {
        m_waiting = 0;
        ++m_generation;
        m_releasedNs = arrivedNs;
        if (releasedNs)
            *releasedNs = arrivedNs;
        m_cv.notify_all();
        return true;
    }
    m_cv.wait(lock, [&] { return m_generation != generation || m_cancelled; });
    // Read under the lock: the next opening needs this worker, so it cannot have changed.
    if (releasedNs)
        *releasedNs = m_releasedNs;
    return m_generation != generation;
}

void CancellableBarrier::cancel()
{
    {
        std::lock_guard lock(m_mutex);
        m_cancelled = true;
    }
    m_cv.notify_all();
}

std::string hostName()
{
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) != 0)
        return "localhost";
    return name;
}

std::string Communicator::rankName(int rank) const
{
    const auto h = hosts();
    return "rank " + std::to_string(rank) + " on " +
           (rank >= 0 && rank < int(h.size()) ? h[std::size_t(rank)] : std::string("?"));
}

int Communicator::rankOfWorker(int workers, int worker) const
{
    for (int r = ranks() - 1; r > 0; --r)
        if (worker >= firstWorker(workers, r))
            return r;
    return 0;
}

bool Communicator::gatherEval(const std::vector<EvalResult> &local, std::vector<EvalResult> &all)
{
    all = local;
    return true;
}

namespace {

// Threads of one process: a barrier, and the exchange that averages in place.
class InProcessSyncGroup final : public SyncGroup {
public:
    InProcessSyncGroup(const std::vector<Device *> &devices, const std::vector<float *> &grads,
                       std::size_t count)
        : m_exchange(createGradientExchange(devices, grads, count)),
          m_barrier(int(devices.size()))
    {
    }
    std::string algorithm() const override { return m_exchange->algorithm(); }
    std::size_t prepare(int local) override { return m_exchange->prepare(local); }
    bool arrive(int, std::int64_t arrivedNs, std::int64_t *releasedNs) override
    {
        return m_barrier.arriveAndWait(arrivedNs, releasedNs);
    }
    std::size_t reduce(int local) override { return m_exchange->reduce(local); }
    const float *finish(int local) override { return m_exchange->finish(local); }
    void cancel() override { m_barrier.cancel(); }

private:
    std::unique_ptr<GradientExchange> m_exchange;
    CancellableBarrier m_barrier;
};

} // namespace

std::vector<std::string> InProcessCommunicator::hosts() const { return {hostName()}; }

std::unique_ptr<SyncGroup> InProcessCommunicator::syncGroup(const std::vector<Device *> &devices,
                                                            const std::vector<float *> &grads,
                                                            std::size_t count, int,
                                                            const RunClock &)
{
    return std::make_unique<InProcessSyncGroup>(devices, grads, count);
}

} // namespace syncopate
