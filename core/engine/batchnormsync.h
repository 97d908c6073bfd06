// Batch norm across a run's workers (model.batchnorm). BatchNormGroup is synchronised batch
// norm between this process's worker threads (SyncBatchNorm): the per-channel sums each
// replica hands over are added up in worker order, so every replica gets the same bits.
// RunningStatsBoard holds each sync worker's running statistics as of its latest step, for the
// divergence chart and for evaluating by worker 0's.
#pragma once

#include "communicator.h"
#include "model.h"

#include <memory>
#include <vector>

namespace syncopate {

class BatchNormGroup {
public:
    // One member per device (this process's workers, in order); sums of at most maxFloats.
    BatchNormGroup(const std::vector<Device *> &devices, std::size_t maxFloats);
    ~BatchNormGroup();
    BatchNormReducer &member(int local);
    // Every wait returns false from now on (the replicas go on with their own statistics).
    void cancel() { m_barrier.cancel(); }

private:
    class Member;
    CancellableBarrier m_barrier;
    // Per worker: its sums as handed over, read by everyone between the two barriers.
    std::vector<std::vector<float>> m_slots;
    std::vector<std::unique_ptr<Member>> m_members;
};

// The sync strategy's workers publish after computing step s, before its barrier; from the
// barrier until they arrive at step s + 1's, every worker may read step s's copies. Two copies
// per worker, by step parity: a worker publishing step s + 1 never overwrites what a slower
// one still reads, and nothing takes a lock.
class RunningStatsBoard {
public:
    RunningStatsBoard(int workers, std::size_t count);
    void publish(int local, std::int64_t step, const Model &model);
    // Host memory, count floats.
    const float *stats(int local, std::int64_t step) const;
    // How far local's running statistics are from the mean of every worker's at step: the L2
    // norm of the difference over the L2 norm of the mean.
    double divergence(int local, std::int64_t step) const;

private:
    std::size_t offset(int local, std::int64_t step) const; // of (parity, worker) in m_copies
    int m_workers;
    std::size_t m_count;
    std::vector<float> m_copies; // [parity][worker][count]
};

// The same measure between two vectors of n floats.
double relativeDistance(const float *own, const float *reference, std::size_t n);

} // namespace syncopate
