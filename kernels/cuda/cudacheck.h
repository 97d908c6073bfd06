// Error checks shared by the CUDA backend's kernels and host code: every runtime call and every
// launch goes through one of these, and a failure becomes a DeviceError naming the call.
#pragma once

#include "device.h"

#include <cuda_runtime.h>

#include <string>

namespace syncopate::cuda {

inline void check(cudaError_t status, const char *what)
{
    if (status != cudaSuccess)
        throw DeviceError(std::string("CUDA: ") + what + " failed: " + cudaGetErrorName(status) +
                          " (" + cudaGetErrorString(status) + ")");
}

// After a kernel launch: a bad configuration shows up here, not at the next synchronisation.
inline void checkLaunch(const char *kernel)
{
    check(cudaGetLastError(), kernel);
}

// A grid that covers n elements with a grid-stride loop, capped so huge arrays loop instead.
inline unsigned gridFor(std::size_t n, unsigned block = 256)
{
    const std::size_t blocks = (n + block - 1) / block;
    return unsigned(blocks < 65536 ? (blocks ? blocks : 1) : 65536);
}

// Inside a kernel launched with gridFor(n): i runs over this thread's share of [0, n).
#define GRID_STRIDE(i, n)                                                                          \
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);              \
         i += std::size_t(blockDim.x) * gridDim.x)

// Grow-only device scratch, in separate slots so two can be used at once.
class Scratch {
public:
    static constexpr int kSlots = 2;
    Scratch() = default;
    ~Scratch();
    Scratch(const Scratch &) = delete;
    Scratch &operator=(const Scratch &) = delete;
    // At least bytes of slot, valid until the next get() of the same slot. Growing waits for
    // the stream, so it only happens while sizes settle in the first steps.
    void *get(int slot, std::size_t bytes, cudaStream_t stream);

private:
    void *m_ptr[kSlots] = {};
    std::size_t m_bytes[kSlots] = {};
};

} // namespace syncopate::cuda
