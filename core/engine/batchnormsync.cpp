#include "batchnormsync.h"

#include <cmath>

namespace syncopate {

class BatchNormGroup::Member final : public BatchNormReducer {
public:
    Member(BatchNormGroup &group, int local, Device &device, std::size_t maxFloats)
        : m_group(&group), m_local(local), m_device(&device), m_sum(maxFloats)
    {
    }
    int workers() const override { return int(m_group->m_slots.size()); }
    bool allreduceSum(float *data, std::size_t n) override
    {
        // Through host memory, so replicas on different GPUs (or a GPU and the CPU) can share;
        // the sums are a few floats per channel.
        auto &slots = m_group->m_slots;
        if (n > m_sum.size())
            throw std::logic_error("batch norm sums larger than the group was made for");
        m_device->download(slots[std::size_t(m_local)].data(), data, n);
        if (!m_group->m_barrier.arriveAndWait())
            return false;
        for (std::size_t i = 0; i < n; ++i) {
            float s = 0.0f;
            for (const auto &slot : slots)
                s += slot[i];
            m_sum[i] = s;
        }
        // Everyone has read the slots before anyone hands over its next sums.
        if (!m_group->m_barrier.arriveAndWait())
            return false;
        m_device->upload(data, m_sum.data(), n);
        return true;
    }

private:
    BatchNormGroup *m_group;
    int m_local;
    Device *m_device;
    std::vector<float> m_sum;
};

BatchNormGroup::BatchNormGroup(const std::vector<Device *> &devices, std::size_t maxFloats)
    : m_barrier(int(devices.size())), m_slots(devices.size(), std::vector<float>(maxFloats))
{
    for (std::size_t l = 0; l < devices.size(); ++l)
        m_members.push_back(std::make_unique<Member>(*this, int(l), *devices[l], maxFloats));
}

BatchNormGroup::~BatchNormGroup() = default;

BatchNormReducer &BatchNormGroup::member(int local) { return *m_members[std::size_t(local)]; }

double relativeDistance(const float *own, const float *reference, std::size_t n)
{
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double d = double(own[i]) - reference[i];
        diff += d * d;
        norm += double(reference[i]) * reference[i];
    }
    return norm > 0 ? std::sqrt(diff / norm) : 0.0;
}

RunningStatsBoard::RunningStatsBoard(int workers, std::size_t count)
    : m_workers(workers), m_count(count), m_copies(2 * std::size_t(workers) * count)
{
}

std::size_t RunningStatsBoard::offset(int local, std::int64_t step) const
{
    return (std::size_t(step & 1) * std::size_t(m_workers) + std::size_t(local)) * m_count;
}

void RunningStatsBoard::publish(int local, std::int64_t step, const Model &model)
{
    model.runningStatsToHost(m_copies.data() + offset(local, step));
}

const float *RunningStatsBoard::stats(int local, std::int64_t step) const
{
    return m_copies.data() + offset(local, step);
}

double RunningStatsBoard::divergence(int local, std::int64_t step) const
{
    const float *own = stats(local, step);
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < m_count; ++i) {
        double mean = 0;
        for (int w = 0; w < m_workers; ++w)
            mean += stats(w, step)[i];
        mean /= m_workers;
        const double d = double(own[i]) - mean;
        diff += d * d;
        norm += mean * mean;
    }
    return norm > 0 ? std::sqrt(diff / norm) : 0.0;
}

} // namespace syncopate
