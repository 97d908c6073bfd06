#include "gpubackend.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <mutex>

namespace syncopate {
namespace {

constexpr const char *kPluginFile = "libsyncopate_cuda.so";

std::string executableDir()
{
    char buf[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return {};
    std::string path(buf, std::size_t(n));
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

struct Loaded {
    GpuBackend *backend = nullptr;
    std::string whyNot;
};

Loaded load()
{
    std::vector<std::string> candidates;
    if (const char *env = std::getenv("SYNCOPATE_CUDA_PLUGIN"); env && *env)
        candidates.emplace_back(env);
    if (const std::string dir = executableDir(); !dir.empty()) {
        candidates.push_back(dir + "/" + kPluginFile);
#ifdef SYNCOPATE_CUDA_PLUGIN_RELATIVE_DIR
        candidates.push_back(dir + "/" SYNCOPATE_CUDA_PLUGIN_RELATIVE_DIR "/" + kPluginFile);
#endif
    }
    // The build tree before the install prefix, so that a build-tree executable never loads a
    // plugin installed from an older build.
#ifdef SYNCOPATE_CUDA_PLUGIN_BUILD_PATH
    candidates.emplace_back(SYNCOPATE_CUDA_PLUGIN_BUILD_PATH);
#endif
#ifdef SYNCOPATE_CUDA_PLUGIN_INSTALL_PATH
    candidates.emplace_back(SYNCOPATE_CUDA_PLUGIN_INSTALL_PATH);
#endif
    std::string tried;
    for (const std::string &path : candidates) {
        if (::access(path.c_str(), R_OK) != 0) {
            tried += (tried.empty() ? "" : ", ") + path;
            continue;
        }
        void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!handle)
            return {nullptr, "the CUDA backend " + path + " could not be loaded: " + ::dlerror()};
        using Entry = GpuBackend *(*)(int);
        auto entry = reinterpret_cast<Entry>(::dlsym(handle, "syncopate_gpu_backend"));
        if (!entry)
            return {nullptr, path + " is not a Syncopate CUDA backend"};
        GpuBackend *backend = entry(kGpuBackendAbi);
        if (!backend)
            return {nullptr, path + " was built for another version of Syncopate"};
        // Never unloaded: the CUDA runtime does not survive being unmapped.
        return {backend, {}};
    }
    return {nullptr, "this build has no CUDA backend (" + std::string(kPluginFile) +
                         " not found; looked at " + (tried.empty() ? "nothing" : tried) +
                         "). Build where nvcc is installed, or use device = \"cpu\""};
}

} // namespace

GpuBackend *gpuBackend(std::string *whyNot)
{
    static std::once_flag once;
    static Loaded loaded;
    std::call_once(once, [] { loaded = load(); });
    if (!loaded.backend && whyNot)
        *whyNot = loaded.whyNot;
    return loaded.backend;
}

std::vector<int> resolveGpus(const DeviceSpec &spec, GpuBackend &backend)
{
    const std::vector<GpuInfo> devices = backend.devices();
    if (devices.empty())
        throw DeviceError("no CUDA device is present (" + backend.noDeviceReason() + ")");
    std::vector<int> gpus;
    if (spec.gpus.empty()) {
        for (const GpuInfo &g : devices)
            gpus.push_back(g.index);
        return gpus;
    }
    for (int g : spec.gpus) {
        if (g >= int(devices.size()))
            throw DeviceError("GPU " + std::to_string(g) + " does not exist: " +
                              std::to_string(devices.size()) + " visible (0 to " +
                              std::to_string(devices.size() - 1) + ")");
        gpus.push_back(g);
    }
    return gpus;
}

} // namespace syncopate
