// torch.optim update rules, one thread per parameter (the same arithmetic as the CPU backend).
#include "launchers.h"

namespace syncopate::cuda {
namespace {

__global__ void sgdKernel(float *param, const float *grad, float lr, std::size_t n)
{
    GRID_STRIDE(i, n) param[i] -= lr * grad[i];
}

__global__ void momentumKernel(float *param, const float *grad, float *buf, float lr,
                               float momentum, std::size_t n)
{
    GRID_STRIDE(i, n)
    {
        const float b = momentum * buf[i] + grad[i];
        buf[i] = b;
        param[i] -= lr * b;
    }
}

__global__ void adamKernel(float *param, const float *grad, float *m, float *v, float stepSize,
                           float invSqrtBc2, float beta1, float beta2, float eps, std::size_t n)
{
    GRID_STRIDE(i, n)
    {
        const float g = grad[i];
        const float mi = beta1 * m[i] + (1.0f - beta1) * g;
        const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] -= stepSize * mi / (sqrtf(vi) * invSqrtBc2 + eps);
    }
}

} // namespace

void sgdStep(float *param, const float *grad, float lr, std::size_t n, cudaStream_t s)
{
    if (!n)
        return;
    sgdKernel<<<gridFor(n), 256, 0, s>>>(param, grad, lr, n);
    checkLaunch("SGD kernel");
}

void momentumStep(float *param, const float *grad, float *buf, float lr, float momentum,
                  std::size_t n, cudaStream_t s)
{
    if (!n)
        return;
    momentumKernel<<<gridFor(n), 256, 0, s>>>(param, grad, buf, lr, momentum, n);
    checkLaunch("momentum kernel");
}

void adamStep(float *param, const float *grad, float *m, float *v, float stepSize,
              float invSqrtBc2, float beta1, float beta2, float eps, std::size_t n, cudaStream_t s)
{
    if (!n)
        return;
    adamKernel<<<gridFor(n), 256, 0, s>>>(param, grad, m, v, stepSize, invSqrtBc2, beta1, beta2,
                                          eps, n);
    checkLaunch("Adam kernel");
}

} // namespace syncopate::cuda
