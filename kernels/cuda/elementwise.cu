// Bias, activations and vector updates: one thread per element, grid-stride loops.
#include "launchers.h"

namespace syncopate::cuda {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

__global__ void fillKernel(float *dst, float value, std::size_t n)
{
    GRID_STRIDE(i, n) dst[i] = value;
}

__global__ void addBiasKernel(float *Y, const float *bias, std::size_t n, int cols)
{
    GRID_STRIDE(i, n) Y[i] += bias[i % std::size_t(cols)];
}

__global__ void activationForwardKernel(Activation act, const float *Z, float *A, std::size_t n)
{
    GRID_STRIDE(i, n)
    {
        const float z = Z[i];
        switch (act) {
        case Activation::Relu: A[i] = z > 0.0f ? z : 0.0f; break;
        case Activation::Tanh: A[i] = tanhf(z); break;
        case Activation::Gelu: A[i] = 0.5f * z * (1.0f + erff(z * kInvSqrt2)); break;
        case Activation::Identity: A[i] = z; break;
        }
    }
}

__global__ void activationBackwardKernel(Activation act, const float *Z, const float *A,
                                         const float *dA, float *dZ, std::size_t n)
{
    GRID_STRIDE(i, n)
    {
        switch (act) {
        case Activation::Relu: dZ[i] = Z[i] > 0.0f ? dA[i] : 0.0f; break;
        case Activation::Tanh: dZ[i] = dA[i] * (1.0f - A[i] * A[i]); break;
        case Activation::Gelu: {
            const float z = Z[i];
            const float cdf = 0.5f * (1.0f + erff(z * kInvSqrt2));
            const float pdf = kInvSqrt2Pi * expf(-0.5f * z * z);
            dZ[i] = dA[i] * (cdf + z * pdf);
            break;
        }
        case Activation::Identity: dZ[i] = dA[i]; break;
        }
    }
}

__global__ void axpyKernel(float alpha, const float *x, float *y, std::size_t n)
{
    GRID_STRIDE(i, n) y[i] += alpha * x[i];
}

__global__ void scaleKernel(float alpha, float *x, std::size_t n)
{
    GRID_STRIDE(i, n) x[i] *= alpha;
}

} // namespace

void fill(float *dst, float value, std::size_t n, cudaStream_t s)
{
    if (!n)
        return;
    fillKernel<<<gridFor(n), 256, 0, s>>>(dst, value, n);
    checkLaunch("fill kernel");
}

void addBias(float *Y, const float *bias, int rows, int cols, cudaStream_t s)
{
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    if (!n)
        return;
    addBiasKernel<<<gridFor(n), 256, 0, s>>>(Y, bias, n, cols);
    checkLaunch("bias kernel");
}

void activationForward(Activation act, const float *Z, float *A, std::size_t n, cudaStream_t s)
{
    if (!n || (act == Activation::Identity && A == Z))
        return;
    activationForwardKernel<<<gridFor(n), 256, 0, s>>>(act, Z, A, n);
    checkLaunch("activation forward kernel");
}

void activationBackward(Activation act, const float *Z, const float *A, const float *dA, float *dZ,
                        std::size_t n, cudaStream_t s)
{
    if (!n || (act == Activation::Identity && dZ == dA))
        return;
    activationBackwardKernel<<<gridFor(n), 256, 0, s>>>(act, Z, A, dA, dZ, n);
    checkLaunch("activation backward kernel");
}

void axpy(float alpha, const float *x, float *y, std::size_t n, cudaStream_t s)
{
    if (!n)
        return;
    axpyKernel<<<gridFor(n), 256, 0, s>>>(alpha, x, y, n);
    checkLaunch("axpy kernel");
}

void scale(float alpha, float *x, std::size_t n, cudaStream_t s)
{
    if (!n)
        return;
    scaleKernel<<<gridFor(n), 256, 0, s>>>(alpha, x, n);
    checkLaunch("scale kernel");
}

} // namespace syncopate::cuda
