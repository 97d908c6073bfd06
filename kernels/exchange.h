// How the sync strategy turns every worker's gradients into their mean. Every worker calls the
// three steps for its own rank, with a barrier between them:
//   prepare(rank)  [barrier]  reduce(rank)  [barrier]  finish(rank) -> mean on rank's device
// so an exchange may read others' buffers in reduce() and must not assume more than that.
#pragma once

#include "device.h"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace syncopate {

// The part of the parameters [begin, end) one rank updates.
struct ParamSlice {
    std::size_t begin = 0, end = 0;
};

class GradientExchange {
public:
    virtual ~GradientExchange() = default;
    // "shared memory", "host staging", "nccl".
    virtual std::string algorithm() const = 0;
    // This rank's gradients are complete (its device synchronised). Returns the bytes it moved.
    virtual std::size_t prepare(int /*rank*/) { return 0; }
    // Returns the bytes this rank moved or combined.
    virtual std::size_t reduce(int rank) = 0;
    // The mean gradients, on rank's device, valid until the next prepare(). Where
    // ownedSlice() has one, only that slice of it is complete.
    virtual const float *finish(int rank) = 0;
    // Where every replica is in host memory, the ranks may keep one copy of the parameters and
    // each update its own slice of it with that slice of the mean, the one reduce() averaged
    // (ZeRO's sharded update, with the gather free: everyone reads the one copy). Empty where
    // each rank applies the whole mean to its own replica.
    virtual std::optional<ParamSlice> ownedSlice(int /*rank*/) const { return std::nullopt; }
};

enum class ExchangeKind { Auto, SharedMemory, HostStaging };

// Picks the exchange for these devices (Auto): replicas in one memory space (the CPU, or workers
// sharing one GPU) average slices of each other's buffers in place; replicas on distinct GPUs
// use NCCL when the backend has it; anything else is staged through page-locked host memory.
// grads[r] is rank r's gradient buffer (count floats) on devices[r].
std::unique_ptr<GradientExchange> createGradientExchange(const std::vector<Device *> &devices,
                                                         const std::vector<float *> &grads,
                                                         std::size_t count,
                                                         ExchangeKind kind = ExchangeKind::Auto);

} // namespace syncopate
