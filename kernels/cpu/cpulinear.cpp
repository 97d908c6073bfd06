#include "cpulinear.h"

#include "cpudevice.h"

namespace syncopate {
namespace {

bool fuses(Activation a) { return a == Activation::Relu || a == Activation::Tanh; }

onednn::MatmulShape forwardShape(const LinearShape &s)
{
    onednn::MatmulShape m;
    m.m = s.rows;
    m.n = s.out;
    m.k = s.in;
    m.transB = true;
    m.bias = true;
    m.post = fuses(s.activation) ? s.activation : Activation::Identity;
    return m;
}

onednn::MatmulShape weightGradShape(const LinearShape &s)
{
    onednn::MatmulShape m;
    m.m = s.out;
    m.n = s.in;
    m.k = s.rows;
    m.transA = true;
    return m;
}

onednn::MatmulShape inputGradShape(const LinearShape &s)
{
    onednn::MatmulShape m;
    m.m = s.rows;
    m.n = s.in;
    m.k = s.out;
    return m;
}

} // namespace

CpuLinearPlan::CpuLinearPlan(CpuDevice &device, onednn::Context &ctx, const LinearShape &shape)
    : m_device(&device), m_s(shape), m_fused(fuses(shape.activation)),
      m_forward(ctx, forwardShape(shape)), m_weightGrad(ctx, weightGradShape(shape)),
      m_inputGrad(ctx, inputGradShape(shape))
{
}

void CpuLinearPlan::forward(const float *x, const float *W, const float *b, float *z, float *a)
{
    const std::size_t n = std::size_t(m_s.rows) * m_s.out;
    if (m_fused) {
        m_forward.run(x, W, b, a);
        return;
    }
    m_forward.run(x, W, b, z);
    if (m_s.activation != Activation::Identity)
        m_device->activationForward(m_s.activation, z, a, n);
}

void CpuLinearPlan::backward(const float *x, const float *W, const float *z, const float *a,
                             float *dA, float *dW, float *db, float *dIn)
{
    const std::size_t n = std::size_t(m_s.rows) * m_s.out;
    switch (m_s.activation) {
    case Activation::Relu: // z was not written: a > 0 exactly where z > 0
        m_device->reluBackwardFromOutput(a, dA, n);
        break;
    case Activation::Tanh:
    case Activation::Gelu:
        m_device->activationBackward(m_s.activation, z, a, dA, dA, n);
        break;
    case Activation::Identity:
        break;
    }
    m_weightGrad.run(dA, x, nullptr, dW);
    m_device->biasGrad(dA, db, m_s.rows, m_s.out);
    if (dIn)
        m_inputGrad.run(dA, W, nullptr, dIn);
}

std::string CpuLinearPlan::implementations() const
{
    return m_forward.implementation() + ", " + m_weightGrad.implementation() + ", " +
           m_inputGrad.implementation();
}

} // namespace syncopate
