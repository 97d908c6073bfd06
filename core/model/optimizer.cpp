#include "optimizer.h"

#include <stdexcept>

namespace syncopate {

Optimizer::Kind Optimizer::parseKind(const std::string &name)
{
    if (name == "sgd")
        return Kind::Sgd;
    if (name == "momentum")
        return Kind::Momentum;
    if (name == "adam")
        return Kind::Adam;
    throw std::invalid_argument("unknown optimizer \"" + name + "\"");
}

Optimizer::Optimizer(Device &device, Kind kind, std::size_t count, float lr, float momentum,
                     float beta1, float beta2, float eps)
    : m_device(&device), m_kind(kind), m_count(count), m_lr(lr), m_momentum(momentum),
      m_beta1(beta1), m_beta2(beta2), m_eps(eps)
{
    // Momentum's buffer starts at zero, which matches torch's "buf = grad" on the first step.
    if (kind != Kind::Sgd)
        m_state1 = DeviceBuffer(device, count);
    if (kind == Kind::Adam)
        m_state2 = DeviceBuffer(device, count);
}

void Optimizer::step(float *params, const float *grads, float lrScale)
{
    ++m_steps;
    const float lr = m_lr * lrScale;
    switch (m_kind) {
    case Kind::Sgd:
        m_device->sgdStep(params, grads, lr, m_count);
        break;
    case Kind::Momentum:
        m_device->momentumStep(params, grads, m_state1.data(), lr, m_momentum, m_count);
        break;
    case Kind::Adam:
        m_device->adamStep(params, grads, m_state1.data(), m_state2.data(), lr, m_beta1, m_beta2,
                           m_eps, m_steps, m_count);
        break;
    }
}

} // namespace syncopate
