// Sync over MPI ranks with NCCL between their GPUs (sync.allreduce = nccl, or auto where every
// worker of the run has a GPU of its own). The communicator is bootstrapped over MPI: rank 0
// makes NCCL's unique id and broadcasts it, and each rank joins with its workers' GPUs as NCCL
// ranks firstWorker.. of the run. Part of syncopate_mpi.
#pragma once

#include "communicator.h"

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

namespace syncopate {

class MpiCommunicator;

// The run's barrier of a sync group over ranks: the rank's workers meet at a local barrier,
// the first of them meets the other ranks (MPI_Ibarrier on c, polled, so a stop or a lost rank
// ends it) and the others wait for it. A group calls arrive() twice a step: the first is the
// run's barrier, the second (after the exchange) the local one alone.
class MpiRunBarrier {
public:
    MpiRunBarrier(MpiCommunicator &comm, MPI_Comm c, int local, const RunClock *clock);
    // False when cancelled or the ranks' barrier failed. *releasedNs: when the wait ended for
    // the last to arrive.
    bool arrive(int local, std::int64_t arrivedNs, std::int64_t *releasedNs);
    // Written by the rank's first worker between two local barriers (the barrier's own, or the
    // group's exchange), read by all after the next.
    bool ok = true;
    CancellableBarrier local;
    void cancel();

private:
    MpiCommunicator &m_comm;
    MPI_Comm m_c;
    const RunClock *m_clock;
    std::vector<std::uint64_t> m_arrivals; // per local worker: even = the run's barrier
    std::int64_t m_releasedNs = 0;
};

// Whether NCCL can average this run's gradients, decided alike on every rank (collective over
// c): every worker of every rank is on a GPU, no two workers share one (by host and PCI bus id;
// NCCL refuses a GPU twice in one communicator), and NCCL loads on every rank. Empty when it
// can; otherwise why not, naming the rank, host and worker. On rank 0, *uniqueId is NCCL's id
// for the communicator when it can. Returns "cancelled" when the run stopped meanwhile.
std::string mpiNcclVerdict(MpiCommunicator &comm, MPI_Comm c, const std::vector<Device *> &devices,
                           int workers, std::string *uniqueId);

// The sync group over NCCL. Collective over c: rank 0's uniqueId is broadcast, then every rank
// joins NCCL's communicator (which returns once all have). Call only after mpiNcclVerdict
// said yes on every rank.
std::unique_ptr<SyncGroup> makeMpiNcclSyncGroup(MpiCommunicator &comm, MPI_Comm c,
                                                const std::vector<Device *> &devices,
                                                const std::vector<float *> &grads,
                                                std::size_t count, int workers,
                                                const RunClock &clock, std::string uniqueId);

} // namespace syncopate
