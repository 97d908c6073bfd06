// Async mode over MPI ranks: workers of ranks other than 0 reach rank 0's parameter server by
// point-to-point messages on a communicator of their own. One request per worker in flight
// (a pull, or a push with its gradient), tagged with the worker's index; rank 0's serving
// thread keeps a receive posted for each remote worker and answers, through the server's
// non-blocking calls, every request the server lets go. Every wait polls (MpiCommunicator::
// await), so a stop or a lost rank ends it.
#pragma once

#include "communicator.h"

#include <memory>

namespace syncopate {

class MpiCommunicator;

// mpiComm: the MPI_Comm reserved for this traffic (passed by address: this header has no
// mpi.h). count: parameters; stats: batch-norm statistics per worker (0 without batch norm).
// Throws CommError when a message would pass what one MPI message counts.
std::unique_ptr<AsyncLink> makeMpiAsyncLink(MpiCommunicator &comm, const void *mpiComm,
                                            std::size_t count, std::size_t stats, int workers);

} // namespace syncopate
