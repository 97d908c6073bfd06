// Batch normalisation (the same arithmetic as the CPU backend). Per-channel sums over rows run
// one block per 32 columns, 8 row groups each summed in order and then combined in order, so a
// result does not depend on scheduling; elementwise steps are one thread per element.
#include "launchers.h"

namespace syncopate::cuda {
namespace {

constexpr int kColumns = 32;
constexpr int kRowGroups = 8;

// out[c] = sum_r (x[r,c] - sum[c] * invCount)^2
__global__ void centeredSquaresKernel(const float *x, const float *sum, float invCount, int rows,
                                      int cols, float *out)
{
    __shared__ float partial[kRowGroups][kColumns];
    const int c = blockIdx.x * kColumns + threadIdx.x;
    float acc = 0.0f;
    if (c < cols) {
        const float mean = sum[c] * invCount;
        for (int r = threadIdx.y; r < rows; r += kRowGroups) {
            const float d = x[std::size_t(r) * cols + c] - mean;
            acc += d * d;
        }
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float total = 0.0f;
        for (int g = 0; g < kRowGroups; ++g)
            total += partial[g][threadIdx.x];
        out[c] = total;
    }
}

// sums[c] = sum_r dy * xhat, sums[cols + c] = sum_r dy
__global__ void backwardSumsKernel(const float *dy, const float *xhat, int rows, int cols,
                                   float *sums)
{
    __shared__ float partialGamma[kRowGroups][kColumns];
    __shared__ float partialBeta[kRowGroups][kColumns];
    const int c = blockIdx.x * kColumns + threadIdx.x;
    float g = 0.0f, b = 0.0f;
    if (c < cols) {
        for (int r = threadIdx.y; r < rows; r += kRowGroups) {
            const std::size_t i = std::size_t(r) * cols + c;
            g += dy[i] * xhat[i];
            b += dy[i];
        }
    }
    partialGamma[threadIdx.y][threadIdx.x] = g;
    partialBeta[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float tg = 0.0f, tb = 0.0f;
        for (int k = 0; k < kRowGroups; ++k) {
            tg += partialGamma[k][threadIdx.x];
            tb += partialBeta[k][threadIdx.x];
        }
        sums[c] = tg;
        sums[cols + c] = tb;
    }
}

__global__ void statisticsKernel(const float *sum, const float *sq, double count, float eps,
                                 float momentum, int cols, float *mean, float *invstd,
                                 float *runningMean, float *runningVar)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols)
        return;
    const double m = momentum;
    const double mu = double(sum[c]) / count;
    const double var = double(sq[c]) / count;
    mean[c] = float(mu);
    invstd[c] = float(1.0 / sqrt(var + double(eps)));
    if (runningMean) {
        runningMean[c] = float((1.0 - m) * runningMean[c] + m * mu);
        runningVar[c] = float((1.0 - m) * runningVar[c] + m * double(sq[c]) / (count - 1.0));
    }
}

__global__ void normaliseKernel(const float *x, const float *mean, const float *invstd,
                                const float *gamma, const float *beta, std::size_t n, int cols,
                                float *xhat, float *y)
{
    GRID_STRIDE(i, n)
    {
        const int c = int(i % std::size_t(cols));
        const float h = (x[i] - mean[c]) * invstd[c];
        if (xhat)
            xhat[i] = h;
        y[i] = gamma[c] * h + beta[c];
    }
}

__global__ void normBackwardKernel(const float *dy, const float *xhat, const float *invstd,
                                   const float *gamma, const float *sums, float invCount,
                                   std::size_t n, int cols, float *dx)
{
    GRID_STRIDE(i, n)
    {
        const int c = int(i % std::size_t(cols));
        dx[i] = gamma[c] * invstd[c] *
                (dy[i] - sums[cols + c] * invCount - xhat[i] * (sums[c] * invCount));
    }
}

dim3 columnGrid(int cols) { return dim3(unsigned((cols + kColumns - 1) / kColumns)); }

} // namespace

void batchNormCenteredSquares(const float *x, const float *sum, float invCount, int rows,
                              int cols, float *sq, cudaStream_t s)
{
    if (cols <= 0)
        return;
    centeredSquaresKernel<<<columnGrid(cols), dim3(kColumns, kRowGroups), 0, s>>>(
        x, sum, invCount, rows, cols, sq);
    checkLaunch("batch norm centred squares kernel");
}

void batchNormStatistics(const float *sum, const float *sq, double count, float eps,
                         float momentum, int cols, float *mean, float *invstd, float *runningMean,
                         float *runningVar, cudaStream_t s)
{
    if (cols <= 0)
        return;
    statisticsKernel<<<gridFor(std::size_t(cols)), 256, 0, s>>>(
        sum, sq, count, eps, momentum, cols, mean, invstd, runningMean, runningVar);
    checkLaunch("batch norm statistics kernel");
}

void batchNormForward(const float *x, const float *mean, const float *invstd, const float *gamma,
                      const float *beta, int rows, int cols, float *xhat, float *y,
                      cudaStream_t s)
{
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    if (!n)
        return;
    normaliseKernel<<<gridFor(n), 256, 0, s>>>(x, mean, invstd, gamma, beta, n, cols, xhat, y);
    checkLaunch("batch norm forward kernel");
}

void batchNormBackwardSums(const float *dy, const float *xhat, int rows, int cols, float *sums,
                           cudaStream_t s)
{
    if (cols <= 0)
        return;
    backwardSumsKernel<<<columnGrid(cols), dim3(kColumns, kRowGroups), 0, s>>>(dy, xhat, rows,
                                                                               cols, sums);
    checkLaunch("batch norm backward sums kernel");
}

void batchNormBackward(const float *dy, const float *xhat, const float *invstd,
                       const float *gamma, const float *sums, float invCount, int rows, int cols,
                       float *dx, cudaStream_t s)
{
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    if (!n)
        return;
    normBackwardKernel<<<gridFor(n), 256, 0, s>>>(dy, xhat, invstd, gamma, sums, invCount, n,
                                                  cols, dx);
    checkLaunch("batch norm backward kernel");
}

} // namespace syncopate::cuda
