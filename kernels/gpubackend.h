// The seam between the CPU-only core and the CUDA backend. The backend is a plugin
// (libsyncopate_cuda.so) loaded on first use, so one build runs on machines with and without
// CUDA, and a CPU run never maps cuBLAS. Plugin and host are built together by one compiler,
// so the interface is plain C++; kGpuBackendAbi guards against a stale plugin.
#pragma once

#include "device.h"
#include "exchange.h"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace syncopate {

// 2: Device::planLinear and bindThread, DeviceOptions::cpuThreads.
// 3: GpuInfo::pciBusId, NCCL across processes (ncclUniqueId, createNcclExchange with an id).
constexpr int kGpuBackendAbi = 3;

struct GpuInfo {
    int index = 0;
    std::string name;
    std::size_t totalBytes = 0;
    std::size_t freeBytes = 0;
    int major = 0, minor = 0; // compute capability
    int multiprocessors = 0;
    std::string pciBusId; // "0000:65:00.0": the same GPU whatever CUDA_VISIBLE_DEVICES numbers it
};

class GpuBackend {
public:
    virtual ~GpuBackend() = default;
    // Visible GPUs; empty when there are none (then noDeviceReason() says why).
    virtual std::vector<GpuInfo> devices() = 0;
    virtual std::string noDeviceReason() = 0;
    // CUDA runtime and driver versions, e.g. "runtime 13.0, driver 13.0".
    virtual std::string versions() = 0;
    virtual std::unique_ptr<Device> createDevice(int gpu, const DeviceOptions &options) = 0;
    // NCCL all-reduce across devices that sit on distinct GPUs; nullptr when NCCL was not built
    // in. Every device must come from createDevice().
    virtual std::unique_ptr<GradientExchange>
    createNcclExchange(const std::vector<Device *> &devices, const std::vector<float *> &grads,
                       std::size_t count) = 0;

    // NCCL across processes (MPI ranks). One process makes the communicator's id
    // (ncclGetUniqueId, NCCL_UNIQUE_ID_BYTES bytes) and every process gets a copy (MPI broadcasts
    // it); empty when NCCL cannot be loaded, with the reason in *whyNot.
    virtual std::string ncclUniqueId(std::string *whyNot) = 0;
    // Empty when NCCL loads; otherwise why not (without making an id, which starts NCCL's
    // bootstrap listener).
    virtual std::string ncclUnavailable() = 0;
    // This process's share of a communicator of `ranks` NCCL ranks spread over processes:
    // devices[l] (distinct GPUs) is NCCL rank firstRank + l. Collective: returns once every
    // process has called it with the same id. Throws DeviceError with NCCL's reason.
    virtual std::unique_ptr<GradientExchange>
    createNcclExchange(const std::vector<Device *> &devices, const std::vector<float *> &grads,
                       std::size_t count, const std::string &uniqueId, int ranks, int firstRank) = 0;
};

// The CUDA backend, loaded once; nullptr when this build has none or it cannot be loaded, with
// the reason in *whyNot. Looked for in $SYNCOPATE_CUDA_PLUGIN, beside the executable, then in
// the build tree.
GpuBackend *gpuBackend(std::string *whyNot = nullptr);

// The GPU ordinals a spec uses (all visible ones for plain "cuda"); throws DeviceError when a
// listed GPU does not exist or there is none.
std::vector<int> resolveGpus(const DeviceSpec &spec, GpuBackend &backend);

} // namespace syncopate
