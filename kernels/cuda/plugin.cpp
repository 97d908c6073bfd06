// The CUDA backend as a plugin: GPU discovery, per-worker devices and the NCCL exchange.
// Loaded by kernels/gpubackend.cpp through syncopate_gpu_backend().
#include "cudadevice.h"
#include "gpubackend.h"

#ifdef SYNCOPATE_HAVE_NCCL
#include <nccl.h>
#endif

#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include <mutex>
#include <set>

namespace syncopate::cuda {
namespace {

#ifdef SYNCOPATE_HAVE_NCCL
// NCCL is opened at run time, not linked: the backend loads on machines without it and then
// falls back to staging through host memory.
struct Nccl {
    decltype(&ncclCommInitAll) commInitAll = nullptr;
    decltype(&ncclGetUniqueId) getUniqueId = nullptr;
    decltype(&ncclCommInitRank) commInitRank = nullptr;
    decltype(&ncclGroupStart) groupStart = nullptr;
    decltype(&ncclGroupEnd) groupEnd = nullptr;
    decltype(&ncclAllReduce) allReduce = nullptr;
    decltype(&ncclCommDestroy) commDestroy = nullptr;
    decltype(&ncclGetErrorString) errorString = nullptr;
    decltype(&ncclGetVersion) getVersion = nullptr;
    std::string whyNot;

    static const Nccl &get()
    {
        static const Nccl nccl = [] {
            Nccl n;
            void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
            if (!h) {
                n.whyNot = dlerror();
                return n;
            }
            n.commInitAll = reinterpret_cast<decltype(n.commInitAll)>(dlsym(h, "ncclCommInitAll"));
            n.getUniqueId = reinterpret_cast<decltype(n.getUniqueId)>(dlsym(h, "ncclGetUniqueId"));
            n.commInitRank = reinterpret_cast<decltype(n.commInitRank)>(dlsym(h, "ncclCommInitRank"));
            n.groupStart = reinterpret_cast<decltype(n.groupStart)>(dlsym(h, "ncclGroupStart"));
            n.groupEnd = reinterpret_cast<decltype(n.groupEnd)>(dlsym(h, "ncclGroupEnd"));
            n.allReduce = reinterpret_cast<decltype(n.allReduce)>(dlsym(h, "ncclAllReduce"));
            n.commDestroy = reinterpret_cast<decltype(n.commDestroy)>(dlsym(h, "ncclCommDestroy"));
            n.errorString = reinterpret_cast<decltype(n.errorString)>(dlsym(h, "ncclGetErrorString"));
            n.getVersion = reinterpret_cast<decltype(n.getVersion)>(dlsym(h, "ncclGetVersion"));
            if (!n.available())
                n.whyNot = "libnccl.so.2 lacks the functions used";
            return n;
        }();
        return nccl;
    }
    bool available() const
    {
        return commInitAll && getUniqueId && commInitRank && groupStart && groupEnd && allReduce &&
               commDestroy && errorString && getVersion;
    }
};

void checkNccl(ncclResult_t r, const char *what)
{
    if (r != ncclSuccess)
        throw DeviceError(std::string("NCCL: ") + what + " failed: " + Nccl::get().errorString(r));
}

// One communicator per worker, each on its own GPU; every rank calls ncclAllReduce from its own
// thread on its own stream, which NCCL supports within one process. Across processes (MPI
// ranks) this process holds NCCL ranks firstRank.. of a communicator made from a shared id.
class NcclExchange final : public GradientExchange {
public:
    // Every device of this one process.
    NcclExchange(const std::vector<Device *> &devices, const std::vector<float *> &grads,
                 std::size_t count)
        : m_grads(grads), m_count(count)
    {
        const std::vector<int> gpus = adopt(devices);
        checkNccl(Nccl::get().commInitAll(m_comms.data(), int(m_comms.size()), gpus.data()),
                  "ncclCommInitAll");
    }

    // This process's share of a communicator across processes.
    NcclExchange(const std::vector<Device *> &devices, const std::vector<float *> &grads,
                 std::size_t count, const ncclUniqueId &id, int ranks, int firstRank)
        : m_grads(grads), m_count(count)
    {
        const std::vector<int> gpus = adopt(devices);
        const Nccl &nccl = Nccl::get();
        // Several ranks of one communicator from one thread: NCCL needs them in one group, or
        // the first init would wait for the others forever.
        checkNccl(nccl.groupStart(), "ncclGroupStart");
        ncclResult_t r = ncclSuccess;
        for (std::size_t l = 0; l < gpus.size() && r == ncclSuccess; ++l) {
            check(cudaSetDevice(gpus[l]), "cudaSetDevice");
            r = nccl.commInitRank(&m_comms[l], ranks, id, firstRank + int(l));
        }
        const ncclResult_t end = nccl.groupEnd();
        checkNccl(r, "ncclCommInitRank");
        checkNccl(end, "ncclCommInitRank (ncclGroupEnd)");
    }
    ~NcclExchange() override
    {
        for (std::size_t r = 0; r < m_comms.size(); ++r) {
            if (!m_comms[r])
                continue;
            cudaSetDevice(m_devices[r]->memorySpace());
            Nccl::get().commDestroy(m_comms[r]);
        }
    }

    std::string algorithm() const override { return "nccl"; }

    std::size_t reduce(int rank) override
    {
        const auto r = std::size_t(rank);
        CudaDevice &d = *m_devices[r];
        check(cudaSetDevice(d.memorySpace()), "cudaSetDevice");
        checkNccl(Nccl::get().allReduce(m_grads[r], m_out[r].data(), m_count, ncclFloat, ncclAvg,
                                m_comms[r], d.stream()),
                  "ncclAllReduce");
        // The reduce span covers the collective itself, as nccl-tests time it.
        d.synchronize();
        return m_count * sizeof(float);
    }

    const float *finish(int rank) override { return m_out[std::size_t(rank)].data(); }

private:
    std::vector<CudaDevice *> m_devices;
    std::vector<float *> m_grads;
    std::size_t m_count;
    std::vector<DeviceBuffer> m_out;
    std::vector<ncclComm_t> m_comms;

    std::vector<int> adopt(const std::vector<Device *> &devices)
    {
        std::vector<int> gpus;
        for (Device *d : devices) {
            auto *cd = dynamic_cast<CudaDevice *>(d);
            if (!cd)
                throw DeviceError("NCCL exchange: every worker must be on a GPU");
            m_devices.push_back(cd);
            gpus.push_back(cd->memorySpace());
            m_out.emplace_back(*d, m_count);
        }
        m_comms.resize(devices.size(), nullptr);
        return gpus;
    }
};
#endif

class CudaBackend final : public GpuBackend {
public:
    std::vector<GpuInfo> devices() override
    {
        std::call_once(m_scanned, [this] { scan(); });
        return m_devices;
    }

    std::string noDeviceReason() override
    {
        std::call_once(m_scanned, [this] { scan(); });
        return m_reason;
    }

    std::string versions() override
    {
        int runtime = 0, driver = 0;
        cudaRuntimeGetVersion(&runtime);
        cudaDriverGetVersion(&driver);
        auto v = [](int x) {
            return x ? std::to_string(x / 1000) + "." + std::to_string(x % 1000 / 10) : "none";
        };
        return "CUDA runtime " + v(runtime) + ", driver " + v(driver) +
               ", " + ncclVersion();
    }

    static std::string ncclVersion()
    {
#ifdef SYNCOPATE_HAVE_NCCL
        const Nccl &nccl = Nccl::get();
        int v = 0;
        if (!nccl.available() || nccl.getVersion(&v) != ncclSuccess)
            return "without NCCL (" + nccl.whyNot + ")";
        return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
               std::to_string(v % 100);
#else
        return "without NCCL (not found at build time)";
#endif
    }

    std::unique_ptr<Device> createDevice(int gpu, const DeviceOptions &options) override
    {
        enablePeers(gpu);
        return std::make_unique<CudaDevice>(gpu, options);
    }

    std::unique_ptr<GradientExchange> createNcclExchange(const std::vector<Device *> &devices,
                                                         const std::vector<float *> &grads,
                                                         std::size_t count) override
    {
#ifdef SYNCOPATE_HAVE_NCCL
        if (!Nccl::get().available())
            return nullptr;
        return std::make_unique<NcclExchange>(devices, grads, count);
#else
        (void)devices, (void)grads, (void)count;
        return nullptr;
#endif
    }

    std::string ncclUnavailable() override
    {
#ifdef SYNCOPATE_HAVE_NCCL
        return Nccl::get().available() ? std::string() : "NCCL could not be loaded (" + Nccl::get().whyNot + ")";
#else
        return "this build has no NCCL (nccl.h was not found when it was built)";
#endif
    }

    std::string ncclUniqueId(std::string *whyNot) override
    {
#ifdef SYNCOPATE_HAVE_NCCL
        const Nccl &nccl = Nccl::get();
        if (!nccl.available()) {
            if (whyNot)
                *whyNot = "NCCL could not be loaded (" + nccl.whyNot + ")";
            return {};
        }
        ::ncclUniqueId id{};
        if (const ncclResult_t r = nccl.getUniqueId(&id); r != ncclSuccess) {
            if (whyNot)
                *whyNot = std::string("ncclGetUniqueId failed: ") + nccl.errorString(r);
            return {};
        }
        return std::string(id.internal, sizeof id.internal);
#else
        if (whyNot)
            *whyNot = "this build has no NCCL (nccl.h was not found when it was built)";
        return {};
#endif
    }

    std::unique_ptr<GradientExchange> createNcclExchange(const std::vector<Device *> &devices,
                                                         const std::vector<float *> &grads,
                                                         std::size_t count,
                                                         const std::string &uniqueId, int ranks,
                                                         int firstRank) override
    {
#ifdef SYNCOPATE_HAVE_NCCL
        if (!Nccl::get().available())
            throw DeviceError("NCCL could not be loaded (" + Nccl::get().whyNot + ")");
        ::ncclUniqueId id{};
        if (uniqueId.size() != sizeof id.internal)
            throw DeviceError("NCCL: a communicator id of " + std::to_string(sizeof id.internal) +
                              " bytes expected, " + std::to_string(uniqueId.size()) + " given");
        std::memcpy(id.internal, uniqueId.data(), sizeof id.internal);
        return std::make_unique<NcclExchange>(devices, grads, count, id, ranks, firstRank);
#else
        (void)devices, (void)grads, (void)count, (void)uniqueId, (void)ranks, (void)firstRank;
        throw DeviceError("this build has no NCCL (nccl.h was not found when it was built)");
#endif
    }

private:
    void scan()
    {
        int count = 0;
        // Without a driver this is an error, not zero devices: any error means no GPU.
        const cudaError_t status = cudaGetDeviceCount(&count);
        if (status != cudaSuccess) {
            cudaGetLastError();
            m_reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
            return;
        }
        if (count == 0) {
            m_reason = "cudaGetDeviceCount found no CUDA device";
            return;
        }
        for (int i = 0; i < count; ++i) {
            cudaDeviceProp prop{};
            if (cudaGetDeviceProperties(&prop, i) != cudaSuccess)
                continue;
            GpuInfo g;
            g.index = i;
            g.name = prop.name;
            g.totalBytes = prop.totalGlobalMem;
            g.major = prop.major;
            g.minor = prop.minor;
            g.multiprocessors = prop.multiProcessorCount;
            char bus[32] = {};
            std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.0", prop.pciDomainID, prop.pciBusID,
                          prop.pciDeviceID);
            g.pciBusId = bus;
            std::size_t freeBytes = 0, totalBytes = 0;
            if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&freeBytes, &totalBytes) == cudaSuccess)
                g.freeBytes = freeBytes;
            m_devices.push_back(g);
        }
        cudaGetLastError();
    }

    // Lets gpu read and write the memory of every GPU it can reach directly, so copies between
    // workers (async pushes and pulls) go over NVLink or PCIe instead of through the host.
    void enablePeers(int gpu)
    {
        std::lock_guard lock(m_peerMutex);
        if (!m_peered.insert(gpu).second)
            return;
        const int current = [] { int d = 0; cudaGetDevice(&d); return d; }();
        for (const GpuInfo &other : devices()) {
            if (other.index == gpu)
                continue;
            int can = 0;
            if (cudaDeviceCanAccessPeer(&can, gpu, other.index) != cudaSuccess || !can)
                continue;
            cudaSetDevice(gpu);
            const cudaError_t e = cudaDeviceEnablePeerAccess(other.index, 0);
            if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
                cudaGetLastError();
            cudaGetLastError();
        }
        cudaSetDevice(current);
    }

    std::once_flag m_scanned;
    std::vector<GpuInfo> m_devices;
    std::string m_reason;
    std::mutex m_peerMutex;
    std::set<int> m_peered;
};

} // namespace
} // namespace syncopate::cuda

extern "C" __attribute__((visibility("default"))) syncopate::GpuBackend *
syncopate_gpu_backend(int abi)
{
    if (abi != syncopate::kGpuBackendAbi)
        return nullptr;
    static syncopate::cuda::CudaBackend backend;
    return &backend;
}
