#include "mpinccl.h"

#include "gpubackend.h"
#include "mpicomm.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace syncopate {
namespace {

constexpr int kReasonChars = 512;
constexpr int kGpuChars = 320; // host name (up to 255) and PCI bus id

void copyInto(char *dst, std::size_t size, const std::string &s)
{
    std::memset(dst, 0, size);
    std::memcpy(dst, s.data(), std::min(s.size(), size - 1));
}

// The run's barrier between the ranks, then each worker all-reduces its own gradients with
// NCCL on its own stream.
class MpiNcclSyncGroup final : public SyncGroup {
public:
    MpiNcclSyncGroup(MpiCommunicator &comm, MPI_Comm c, std::unique_ptr<GradientExchange> nccl,
                     int local, const RunClock &clock)
        : m_nccl(std::move(nccl)), m_barrier(comm, c, local, &clock)
    {
    }

    std::string algorithm() const override { return "nccl (bootstrapped over MPI)"; }
    std::size_t prepare(int local) override { return m_nccl->prepare(local); }
    bool arrive(int local, std::int64_t arrivedNs, std::int64_t *releasedNs) override
    {
        return m_barrier.arrive(local, arrivedNs, releasedNs);
    }
    std::size_t reduce(int local) override { return m_barrier.ok ? m_nccl->reduce(local) : 0; }
    const float *finish(int local) override { return m_nccl->finish(local); }
    void cancel() override { m_barrier.cancel(); }

private:
    std::unique_ptr<GradientExchange> m_nccl;
    MpiRunBarrier m_barrier;
};

} // namespace

MpiRunBarrier::MpiRunBarrier(MpiCommunicator &comm, MPI_Comm c, int local, const RunClock *clock)
    : local(local), m_comm(comm), m_c(c), m_clock(clock), m_arrivals(std::size_t(local), 0)
{
}

bool MpiRunBarrier::arrive(int l, std::int64_t arrivedNs, std::int64_t *releasedNs)
{
    const bool first = (m_arrivals[std::size_t(l)]++ & 1) == 0;
    if (!local.arriveAndWait(arrivedNs, releasedNs))
        return false;
    if (!first)
        return ok;
    if (l == 0) {
        MPI_Request req;
        MPI_Ibarrier(m_c, &req);
        ok = m_comm.await(&req);
        m_releasedNs = m_clock ? m_clock->now() : 0;
    }
    if (!local.arriveAndWait())
        return false;
    if (releasedNs)
        *releasedNs = std::max(*releasedNs, m_releasedNs);
    return ok;
}

void MpiRunBarrier::cancel()
{
    m_comm.cancel();
    local.cancel();
}

std::string mpiNcclVerdict(MpiCommunicator &comm, MPI_Comm c, const std::vector<Device *> &devices,
                           int workers, std::string *uniqueId)
{
    const int ranks = comm.ranks(), rank = comm.rank();
    const std::string host = hostName();
    int maxLocal = 0;
    for (int r = 0; r < ranks; ++r)
        maxLocal = std::max(maxLocal, comm.firstWorker(workers, r + 1) - comm.firstWorker(workers, r));

    // This rank's own reason, and the GPU of each of its workers.
    std::string reason;
    std::vector<char> gpus(std::size_t(maxLocal) * kGpuChars, 0);
    std::string whyNoBackend;
    GpuBackend *backend = gpuBackend(&whyNoBackend);
    const int first = comm.firstWorker(workers);
    for (std::size_t l = 0; l < devices.size() && reason.empty(); ++l) {
        const int gpu = devices[l]->memorySpace();
        if (gpu < 0 || devices[l]->hostAccessible() || !backend) {
            reason = "worker " + std::to_string(first + int(l)) + " is on " + devices[l]->name() +
                     ", not a GPU";
            break;
        }
        const std::vector<GpuInfo> all = backend->devices();
        const auto it = std::find_if(all.begin(), all.end(), [&](const GpuInfo &g) { return g.index == gpu; });
        const std::string bus = it != all.end() && !it->pciBusId.empty() ? it->pciBusId : std::to_string(gpu);
        copyInto(gpus.data() + l * kGpuChars, kGpuChars, host + " " + bus);
    }
    std::string id;
    if (reason.empty())
        reason = backend->ncclUnavailable();
    if (reason.empty() && rank == 0) {
        // Only rank 0 makes the id: making one starts NCCL's bootstrap listener.
        std::string why;
        id = backend->ncclUniqueId(&why);
        if (id.empty())
            reason = why;
    }
    if (!reason.empty())
        reason = comm.rankName(rank) + ": " + reason;

    std::vector<char> mine(kReasonChars), reasons(std::size_t(ranks) * kReasonChars);
    copyInto(mine.data(), mine.size(), reason);
    std::vector<char> allGpus(std::size_t(ranks) * gpus.size());
    MPI_Request req[2];
    MPI_Iallgather(mine.data(), kReasonChars, MPI_CHAR, reasons.data(), kReasonChars, MPI_CHAR, c, &req[0]);
    MPI_Iallgather(gpus.data(), int(gpus.size()), MPI_CHAR, allGpus.data(), int(gpus.size()), MPI_CHAR, c, &req[1]);
    if (!comm.await(&req[0]) || !comm.await(&req[1]))
        return "cancelled";

    // The same verdict on every rank: the first reason in rank order, else a GPU used twice.
    for (int r = 0; r < ranks; ++r)
        if (const char *why = reasons.data() + std::size_t(r) * kReasonChars; *why)
            return why;
    std::vector<std::pair<std::string, int>> seen; // (host and bus, worker)
    for (int r = 0; r < ranks; ++r) {
        const int n = comm.firstWorker(workers, r + 1) - comm.firstWorker(workers, r);
        for (int l = 0; l < n; ++l) {
            const std::string g(allGpus.data() + (std::size_t(r) * std::size_t(maxLocal) + std::size_t(l)) * kGpuChars);
            const int w = comm.firstWorker(workers, r) + l;
            for (const auto &[other, ow] : seen)
                if (other == g)
                    return "workers " + std::to_string(ow) + " and " + std::to_string(w) +
                           " share the GPU " + g.substr(g.rfind(' ') + 1) + " on " +
                           g.substr(0, g.rfind(' ')) + " (NCCL needs a GPU of its own per worker)";
            seen.emplace_back(g, w);
        }
    }
    if (rank == 0 && uniqueId)
        *uniqueId = id;
    return {};
}

std::unique_ptr<SyncGroup> makeMpiNcclSyncGroup(MpiCommunicator &comm, MPI_Comm c,
                                                const std::vector<Device *> &devices,
                                                const std::vector<float *> &grads,
                                                std::size_t count, int workers,
                                                const RunClock &clock, std::string uniqueId)
{
    // The id is NCCL_UNIQUE_ID_BYTES (128) bytes: opaque to MPI, broadcast as bytes.
    constexpr int kIdBytes = 128;
    uniqueId.resize(kIdBytes);
    MPI_Request req;
    MPI_Ibcast(uniqueId.data(), kIdBytes, MPI_BYTE, 0, c, &req);
    if (!comm.await(&req))
        throw CommError("the run stopped while NCCL's communicator was being set up");
    GpuBackend *backend = gpuBackend();
    if (!backend)
        throw CommError(comm.rankName(comm.rank()) + ": the CUDA backend is gone");
    auto nccl = backend->createNcclExchange(devices, grads, count, uniqueId, workers,
                                            comm.firstWorker(workers));
    return std::make_unique<MpiNcclSyncGroup>(comm, c, std::move(nccl), int(devices.size()), clock);
}

} // namespace syncopate
