#include "communicator.h"

#include "config.h"
#include "cpu/cpudevice.h"
#include "model.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace syncopate {
namespace {

// Tells the core this is a spin-wait: frees its sibling hyperthread's share, saves power.
inline void spinPause()
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

} // namespace

bool CancellableBarrier::arriveAndWait(std::int64_t arrivedNs, std::int64_t *releasedNs)
{
    std::unique_lock lock(m_mutex);
    if (m_cancelled.load(std::memory_order_relaxed))
        return false;
    const std::uint64_t generation = m_generation.load(std::memory_order_relaxed);
    if (++m_waiting == m_parties) {
        m_waiting = 0;
        m_releasedNs.store(arrivedNs, std::memory_order_relaxed);
        m_generation.store(generation + 1, std::memory_order_release);
        if (releasedNs)
            *releasedNs = arrivedNs;
        m_cv.notify_all();
        return true;
    }
    // The next opening needs this worker, so the generation and release time read below are
    // this opening's.
    auto opened = [&] { return m_generation.load(std::memory_order_acquire) != generation; };
    if (m_spinNs > 0) {
        lock.unlock();
        const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(m_spinNs);
        for (int i = 0; !opened() && !m_cancelled.load(std::memory_order_relaxed); ++i) {
            spinPause();
            if ((i & 63) == 63 && std::chrono::steady_clock::now() >= until)
                break;
        }
        lock.lock();
    }
    m_cv.wait(lock, [&] { return opened() || m_cancelled.load(std::memory_order_relaxed); });
    if (releasedNs)
        *releasedNs = m_releasedNs.load(std::memory_order_relaxed);
    return opened();
}

std::int64_t CancellableBarrier::spinFor(int parties)
{
    const int cores = usableCores();
    // Longer than a VM's wake-up (20-60 us), short against a step (hundreds of us): a wait
    // for a straggler spins this long once and then sleeps.
    constexpr std::int64_t kSpinNs = 200'000;
    return parties > 1 && parties <= cores ? kSpinNs : 0;
}

void CancellableBarrier::cancel()
{
    {
        std::lock_guard lock(m_mutex);
        m_cancelled.store(true, std::memory_order_relaxed);
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

std::unique_ptr<BackupSyncGroup> Communicator::backupSyncGroup(const std::vector<Device *> &,
                                                              const std::vector<float *> &,
                                                              std::size_t, int, int backups,
                                                              const RunClock &,
                                                              const std::vector<int> *)
{
    throw ConfigError("sync.backup_workers = " + std::to_string(backups) +
                          ": backup workers need every worker in one process (the threads "
                          "communicator); with " + kind() + " use sync.backup_workers = 0",
                      {"sync.backup_workers"});
}

BackupSyncGroup::BackupSyncGroup(const std::vector<Device *> &devices,
                                 const std::vector<float *> &grads, std::size_t count, int backups,
                                 const RunClock &clock, const std::vector<int> *script)
    : m_devices(devices), m_grads(grads), m_count(count),
      m_needed(int(devices.size()) - backups), m_clock(clock), m_script(script),
      m_applied(devices.size(), 0)
{
    const int workers = int(devices.size());
    if (backups < 0 || backups >= workers)
        throw ConfigError("sync.backup_workers = " + std::to_string(backups) +
                              ": expected 0 <= b < workers (" + std::to_string(workers) + ")",
                          {"sync.backup_workers"});
    // A late worker's catch-up reads means another device wrote: one memory space only, as
    // the shared-memory exchange needs (NCCL and host staging average all N, in their order).
    for (Device *d : devices)
        if (d->memorySpace() != devices.front()->memorySpace())
            throw ConfigError("sync.backup_workers = " + std::to_string(backups) +
                                  ": needs every worker on the CPU or on one GPU (here they span "
                                  "GPUs, averaged by NCCL or host staging); use "
                                  "sync.backup_workers = 0 or one GPU",
                              {"sync.backup_workers"});
    constexpr std::size_t kMaxHistoryBytes = std::size_t(256) << 20;
    const std::size_t bytes = std::max<std::size_t>(1, count * sizeof(float));
    m_slots.resize(std::clamp<std::size_t>(kMaxHistoryBytes / bytes, 2, 16));
    for (Slot &s : m_slots) {
        s.mean = DeviceBuffer(*devices.front(), count);
        s.contributors.reserve(devices.size()); // no allocation under the lock later
    }
    m_filling.reserve(devices.size());
    m_pendingContributors.reserve(devices.size());
}

bool BackupSyncGroup::slotFree(std::int64_t round) const
{
    // Free once every worker has applied the round that used it last.
    const std::int64_t last = round - std::int64_t(m_slots.size());
    return last < 0 || *std::min_element(m_applied.begin(), m_applied.end()) > last;
}

void BackupSyncGroup::installPending(std::int64_t nowNs)
{
    if (m_pending < 0 || !slotFree(m_pending))
        return;
    Slot &s = slot(m_pending);
    s.round = m_pending;
    s.contributors = m_pendingContributors;
    s.reduced = 0;
    s.ready = false;
    s.openedNs = std::max(nowNs, m_pendingNs);
    m_pending = -1;
    m_cv.notify_all();
}

BackupSyncGroup::Arrival BackupSyncGroup::arrive(int local, std::int64_t round,
                                                 std::int64_t arrivedNs, std::int64_t *releasedNs)
{
    std::unique_lock lock(m_mutex);
    if (m_script && !m_script->empty()) {
        // Test hook: arrivals happen exactly in the scripted order of workers.
        m_cv.wait(lock, [&] {
            return m_cancelled || m_scriptPos >= m_script->size() || (*m_script)[m_scriptPos] == local;
        });
        if (m_scriptPos < m_script->size())
            ++m_scriptPos;
        m_cv.notify_all();
    }
    if (m_cancelled)
        return {};
    if (round < m_open) // filled without this worker: dropped
        return {true, false, m_open};
    // round == m_open: a worker computes a round only after applying every earlier one, so
    // no other round can be filling.
    m_filling.push_back(local);
    if (int(m_filling.size()) == m_needed) {
        std::sort(m_filling.begin(), m_filling.end());
        m_pendingContributors = m_filling;
        m_filling.clear();
        m_pending = round;
        m_pendingNs = arrivedNs;
        m_open = round + 1;
        installPending(arrivedNs);
    }
    m_cv.wait(lock, [&] { return m_cancelled || slot(round).round == round; });
    if (m_cancelled)
        return {};
    if (releasedNs)
        *releasedNs = slot(round).openedNs;
    return {true, true, round + 1};
}

std::size_t BackupSyncGroup::reduce(int local, std::int64_t round)
{
    Slot &s = slot(round);
    // The slot is not reused before this worker applies the round, so its contributors hold.
    const std::vector<int> &from = s.contributors;
    const std::size_t k = from.size();
    const auto j = std::size_t(std::find(from.begin(), from.end(), local) - from.begin());
    const std::size_t lo = m_count * j / k, hi = m_count * (j + 1) / k;
    Device &d = *m_devices[std::size_t(local)];
    if (hi > lo) {
        // As the shared-memory exchange does it, over the contributors only.
        float *dst = s.mean.data() + lo;
        d.copy(dst, m_grads[std::size_t(from[0])] + lo, hi - lo);
        for (std::size_t c = 1; c < k; ++c)
            d.axpy(1.0f, m_grads[std::size_t(from[c])] + lo, dst, hi - lo);
        if (k > 1)
            d.scale(1.0f / float(k), dst, hi - lo);
    }
    d.synchronize(); // the others read this share once the round is ready
    {
        std::lock_guard lock(m_mutex);
        if (++s.reduced == int(k)) {
            s.ready = true;
            s.readyNs = m_clock.now();
            m_cv.notify_all();
        }
    }
    return (hi - lo) * sizeof(float) * k;
}

bool BackupSyncGroup::waitMean(std::int64_t round, std::int64_t *readyNs)
{
    std::unique_lock lock(m_mutex);
    const Slot &s = slot(round);
    m_cv.wait(lock, [&] { return m_cancelled || (s.round == round && s.ready); });
    if (m_cancelled)
        return false;
    if (readyNs)
        *readyNs = s.readyNs;
    return true;
}

const float *BackupSyncGroup::mean(std::int64_t round) const { return slot(round).mean.data(); }

void BackupSyncGroup::applied(int local, std::int64_t round)
{
    std::lock_guard lock(m_mutex);
    m_applied[std::size_t(local)] = round + 1;
    installPending(m_clock.now());
}

void BackupSyncGroup::cancel()
{
    {
        std::lock_guard lock(m_mutex);
        m_cancelled = true;
    }
    m_cv.notify_all();
}

namespace {

// Threads of one process: a barrier, and the exchange that averages in place.
class InProcessSyncGroup final : public SyncGroup {
public:
    InProcessSyncGroup(const std::vector<Device *> &devices, const std::vector<float *> &grads,
                       std::size_t count)
        : m_exchange(createGradientExchange(devices, grads, count)),
          m_barrier(int(devices.size()), CancellableBarrier::spinFor(int(devices.size())))
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
    std::optional<ParamSlice> ownedSlice(int local) const override
    {
        return m_exchange->ownedSlice(local);
    }
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

std::unique_ptr<BackupSyncGroup>
InProcessCommunicator::backupSyncGroup(const std::vector<Device *> &devices,
                                       const std::vector<float *> &grads, std::size_t count, int,
                                       int backups, const RunClock &clock,
                                       const std::vector<int> *script)
{
    return std::make_unique<BackupSyncGroup>(devices, grads, count, backups, clock, script);
}

} // namespace syncopate
