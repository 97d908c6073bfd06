// A linear layer on oneDNN: forward is one matmul with the bias and (for relu and tanh) the
// activation fused as post-ops, so z is never written and backward reads the activation's
// output (relu: a > 0 exactly where z > 0; tanh: f' = 1 - a^2). GELU needs z for its
// gradient: its matmul writes z and the activation runs after it. Backward is two matmuls
// (dW = dZ^T x, dIn = dZ W) reading the weights where they are: the optimizer updates them in
// place every step, so a blocked copy would cost a reorder per step.
#pragma once

#include "device.h"
#include "onednn.h"

namespace syncopate {

class CpuDevice;

class CpuLinearPlan final : public LinearPlan {
public:
    CpuLinearPlan(CpuDevice &device, onednn::Context &ctx, const LinearShape &shape);

    void forward(const float *x, const float *W, const float *b, float *z, float *a) override;
    void backward(const float *x, const float *W, const float *z, const float *a, float *dA,
                  float *dW, float *db, float *dIn) override;

    // oneDNN's kernels for the three products (forward, weight gradient, input gradient).
    std::string implementations() const;

private:
    CpuDevice *m_device;
    LinearShape m_s;
    bool m_fused;
    onednn::Matmul m_forward; // [rows,in] x W^T -> [rows,out]
    onednn::Matmul m_weightGrad; // dZ^T [out,rows] x x [rows,in] -> [out,in]
    onednn::Matmul m_inputGrad;  // dZ [rows,out] x W [out,in] -> [rows,in]
};

} // namespace syncopate
