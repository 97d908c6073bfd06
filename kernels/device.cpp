#include "device.h"

#include "cpu/cpudevice.h"

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

std::unique_ptr<Device> createDevice(const std::string &kind, int /*workerIndex*/)
{
    if (kind == "cpu")
        return std::make_unique<CpuDevice>();
    throw DeviceError("device \"" + kind + "\" is not available in this build (only \"cpu\")");
}

} // namespace syncopate
