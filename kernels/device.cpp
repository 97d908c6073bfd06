#include "device.h"

#include "cpu/cpudevice.h"
#include "gpubackend.h"

#include <charconv>

namespace syncopate {

const char *activationName(Activation a)
{
    switch (a) {
    case Activation::Relu: return "relu";
    case Activation::Tanh: return "tanh";
    case Activation::Gelu: return "gelu";
    case Activation::Identity: return "identity";
    }
    return "?";
}

DeviceSpec parseDeviceSpec(const std::string &text)
{
    const std::string expected = "expected \"cpu\", \"cuda\" (every GPU) or \"cuda:\" followed "
                                 "by GPU numbers separated by commas, e.g. \"cuda:0,2\"";
    DeviceSpec spec;
    if (text == "cpu")
        return spec;
    if (text.rfind("cuda", 0) != 0)
        throw std::invalid_argument(expected);
    spec.cuda = true;
    if (text == "cuda")
        return spec;
    if (text[4] != ':' || text.size() == 5)
        throw std::invalid_argument(expected);
    const char *p = text.data() + 5;
    const char *end = text.data() + text.size();
    while (p < end) {
        int gpu = -1;
        const auto [next, ec] = std::from_chars(p, end, gpu);
        if (ec != std::errc() || gpu < 0 || (next < end && *next != ','))
            throw std::invalid_argument(expected);
        for (int g : spec.gpus)
            if (g == gpu)
                throw std::invalid_argument("GPU " + std::to_string(gpu) + " is listed twice");
        spec.gpus.push_back(gpu);
        p = next < end ? next + 1 : end;
        if (next < end && p == end)
            throw std::invalid_argument(expected);
    }
    return spec;
}

std::unique_ptr<Device> createDevice(const std::string &text, int workerIndex,
                                     const DeviceOptions &options)
{
    DeviceSpec spec;
    try {
        spec = parseDeviceSpec(text);
    } catch (const std::invalid_argument &e) {
        throw DeviceError("device = \"" + text + "\": " + e.what());
    }
    if (!spec.cuda)
        return std::make_unique<CpuDevice>(options.cpuThreads);
    std::string why;
    GpuBackend *backend = gpuBackend(&why);
    if (!backend)
        throw DeviceError("device = \"" + text + "\": " + why);
    std::vector<int> gpus;
    try {
        gpus = resolveGpus(spec, *backend);
    } catch (const DeviceError &e) {
        throw DeviceError("device = \"" + text + "\": " + e.what());
    }
    return backend->createDevice(gpus[std::size_t(workerIndex) % gpus.size()], options);
}

} // namespace syncopate
