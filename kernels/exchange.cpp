#include "exchange.h"

#include "gpubackend.h"

#include <algorithm>
#include <set>

namespace syncopate {
namespace {

std::size_t sliceBegin(std::size_t count, int rank, std::size_t ranks)
{
    return count * std::size_t(rank) / ranks;
}

// Every replica is addressable from every worker: rank r averages slice r of all replicas,
// summing in rank order, so the mean is the same bit for bit whatever the timing. One worker's
// gradients are their own mean: nothing is copied. In host memory each rank may then apply
// its slice of the mean to one shared copy of the parameters (ownedSlice): half the update's
// memory traffic per worker with two, and the other slices of the mean are never read from
// another core's cache. Not on a GPU shared by several workers, whose streams would need
// ordering between one worker's update and another's next forward.
class SharedMemoryExchange final : public GradientExchange {
public:
    SharedMemoryExchange(std::vector<Device *> devices, std::vector<float *> grads,
                         std::size_t count)
        : m_devices(std::move(devices)), m_grads(std::move(grads)), m_count(count)
    {
        const std::size_t ranks = m_devices.size();
        if (ranks < 2)
            return;
        m_mean = DeviceBuffer(*m_devices.front(), count);
        // Each rank's slice of every replica, found once rather than on every step.
        m_slices.resize(ranks);
        for (std::size_t r = 0; r < ranks; ++r)
            for (float *g : m_grads)
                m_slices[r].push_back(g + sliceBegin(m_count, int(r), ranks));
    }

    std::string algorithm() const override { return "shared memory"; }

    std::size_t reduce(int rank) override
    {
        const std::size_t ranks = m_devices.size();
        if (ranks < 2)
            return 0;
        const std::size_t lo = sliceBegin(m_count, rank, ranks);
        const std::size_t hi = sliceBegin(m_count, rank + 1, ranks);
        Device &d = *m_devices[std::size_t(rank)];
        if (hi > lo)
            d.mean(m_slices[std::size_t(rank)].data(), ranks, m_mean.data() + lo, hi - lo);
        d.synchronize(); // the others read this slice after the barrier
        return (hi - lo) * sizeof(float) * ranks;
    }

    const float *finish(int) override { return m_devices.size() < 2 ? m_grads.front() : m_mean.data(); }

    std::optional<ParamSlice> ownedSlice(int rank) const override
    {
        const std::size_t ranks = m_devices.size();
        if (ranks < 2 || !std::all_of(m_devices.begin(), m_devices.end(),
                                      [](const Device *d) { return d->hostAccessible(); }))
            return std::nullopt;
        return ParamSlice{sliceBegin(m_count, rank, ranks), sliceBegin(m_count, rank + 1, ranks)};
    }

private:
    std::vector<Device *> m_devices;
    std::vector<float *> m_grads;
    std::size_t m_count;
    DeviceBuffer m_mean; // two or more ranks
    std::vector<std::vector<const float *>> m_slices;
};

// Replicas in separate memory spaces without NCCL: each rank copies its gradients into
// page-locked host memory, averages one slice there (same order and arithmetic as above), and
// copies the whole mean back.
class HostStagingExchange final : public GradientExchange {
public:
    HostStagingExchange(std::vector<Device *> devices, std::vector<float *> grads,
                        std::size_t count)
        : m_devices(std::move(devices)), m_grads(std::move(grads)), m_count(count)
    {
        for (Device *d : m_devices) {
            m_staged.push_back(static_cast<float *>(d->allocateHost(count * sizeof(float))));
            m_out.emplace_back(*d, count);
        }
        m_mean = static_cast<float *>(m_devices.front()->allocateHost(count * sizeof(float)));
    }
    ~HostStagingExchange() override
    {
        for (std::size_t r = 0; r < m_devices.size(); ++r)
            m_devices[r]->releaseHost(m_staged[r]);
        m_devices.front()->releaseHost(m_mean);
    }

    std::string algorithm() const override { return "host staging"; }

    std::size_t prepare(int rank) override
    {
        const auto r = std::size_t(rank);
        m_devices[r]->download(m_staged[r], m_grads[r], m_count);
        return m_count * sizeof(float);
    }

    std::size_t reduce(int rank) override
    {
        const std::size_t ranks = m_devices.size();
        const std::size_t lo = sliceBegin(m_count, rank, ranks);
        const std::size_t hi = sliceBegin(m_count, rank + 1, ranks);
        const float inv = 1.0f / float(ranks);
        for (std::size_t i = lo; i < hi; ++i) {
            float s = m_staged[0][i];
            for (std::size_t k = 1; k < ranks; ++k)
                s += m_staged[k][i];
            m_mean[i] = ranks > 1 ? s * inv : s;
        }
        return (hi - lo) * sizeof(float) * ranks;
    }

    const float *finish(int rank) override
    {
        const auto r = std::size_t(rank);
        m_devices[r]->upload(m_out[r].data(), m_mean, m_count);
        return m_out[r].data();
    }

private:
    std::vector<Device *> m_devices;
    std::vector<float *> m_grads;
    std::size_t m_count;
    std::vector<float *> m_staged;
    std::vector<DeviceBuffer> m_out;
    float *m_mean = nullptr;
};

} // namespace

std::unique_ptr<GradientExchange> createGradientExchange(const std::vector<Device *> &devices,
                                                         const std::vector<float *> &grads,
                                                         std::size_t count, ExchangeKind kind)
{
    if (devices.empty() || devices.size() != grads.size())
        throw DeviceError("gradient exchange: one gradient buffer per device expected");
    if (kind == ExchangeKind::HostStaging)
        return std::make_unique<HostStagingExchange>(devices, grads, count);
    std::set<int> spaces;
    for (Device *d : devices)
        spaces.insert(d->memorySpace());
    if (spaces.size() == 1)
        return std::make_unique<SharedMemoryExchange>(devices, grads, count);
    if (kind == ExchangeKind::SharedMemory)
        throw DeviceError("gradient exchange: shared memory needs every replica in one memory space");
    const bool distinctGpus = spaces.size() == devices.size() && *spaces.begin() >= 0;
    if (distinctGpus) {
        if (GpuBackend *backend = gpuBackend())
            if (auto nccl = backend->createNcclExchange(devices, grads, count))
                return nccl;
    }
    return std::make_unique<HostStagingExchange>(devices, grads, count);
}

} // namespace syncopate
