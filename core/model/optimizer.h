// The update rules of torch.optim (SGD, SGD with momentum, Adam), with their state on a device.
#pragma once

#include "device.h"

#include <cstdint>
#include <string>

namespace syncopate {

class Optimizer {
public:
    enum class Kind { Sgd, Momentum, Adam };
    static Kind parseKind(const std::string &name);

    Optimizer(Device &device, Kind kind, std::size_t count, float lr, float momentum = 0.9f,
              float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f);

    // One update with lr * lrScale (the staleness-aware rate passes 1 / staleness).
    void step(float *params, const float *grads, float lrScale = 1.0f);
    std::int64_t steps() const { return m_steps; }
    Kind kind() const { return m_kind; }

private:
    Device *m_device;
    Kind m_kind;
    std::size_t m_count;
    float m_lr, m_momentum, m_beta1, m_beta2, m_eps;
    DeviceBuffer m_state1, m_state2;
    std::int64_t m_steps = 0;
};

} // namespace syncopate
