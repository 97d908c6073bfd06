// Host-side launchers of the CUDA backend's kernels, one .cu file per concern. Every launcher
// enqueues on the given stream, checks the launch, and returns without waiting.
#pragma once

#include "cudacheck.h"

#include <cstddef>
#include <cstdint>

namespace syncopate::cuda {

// elementwise.cu
void fill(float *dst, float value, std::size_t n, cudaStream_t s);
void addBias(float *Y, const float *bias, int rows, int cols, cudaStream_t s);
void activationForward(Activation act, const float *Z, float *A, std::size_t n, cudaStream_t s);
void activationBackward(Activation act, const float *Z, const float *A, const float *dA, float *dZ,
                        std::size_t n, cudaStream_t s);
void axpy(float alpha, const float *x, float *y, std::size_t n, cudaStream_t s);
void scale(float alpha, float *x, std::size_t n, cudaStream_t s);

// optimizer.cu
void sgdStep(float *param, const float *grad, float lr, std::size_t n, cudaStream_t s);
void momentumStep(float *param, const float *grad, float *buf, float lr, float momentum,
                  std::size_t n, cudaStream_t s);
void adamStep(float *param, const float *grad, float *m, float *v, float stepSize,
              float invSqrtBc2, float beta1, float beta2, float eps, std::size_t n,
              cudaStream_t s);

// batchnorm.cu (see Device::batchNorm* for what each computes)
void batchNormCenteredSquares(const float *x, const float *sum, float invCount, int rows,
                              int cols, float *sq, cudaStream_t s);
void batchNormStatistics(const float *sum, const float *sq, double count, float eps,
                         float momentum, int cols, float *mean, float *invstd, float *runningMean,
                         float *runningVar, cudaStream_t s);
void batchNormForward(const float *x, const float *mean, const float *invstd, const float *gamma,
                      const float *beta, int rows, int cols, float *xhat, float *y,
                      cudaStream_t s);
void batchNormBackwardSums(const float *dy, const float *xhat, int rows, int cols, float *sums,
                           cudaStream_t s);
void batchNormBackward(const float *dy, const float *xhat, const float *invstd,
                       const float *gamma, const float *sums, float invCount, int rows, int cols,
                       float *dx, cudaStream_t s);

// Results of the reductions below, in device memory, read back in one copy.
struct Results {
    double sum = 0;       // loss sums, sums of squares
    long long count = 0;  // correct rows, non-finite elements
    int badRow = -1;      // first row whose label is outside the classes (-1: none)
    int badLabel = 0;
};

// loss.cu. Each writes into *out (device memory); reductions through CUB.
// out->sum = sum over rows of the cross-entropy; dLogits (may be null) = (softmax - onehot) / rows.
void softmaxCrossEntropy(const float *logits, const std::int32_t *labels, int rows, int cols,
                         float *dLogits, Results *out, Scratch &scratch, cudaStream_t s);
// out->count = rows whose first arg-max equals the label.
void countCorrect(const float *logits, const std::int32_t *labels, int rows, int cols,
                  Results *out, Scratch &scratch, cudaStream_t s);
// out->sum = sum of (pred - target)^2; dPred (may be null) = 2 (pred - target) / n.
void squaredError(const float *pred, const float *target, std::size_t n, float *dPred,
                  Results *out, Scratch &scratch, cudaStream_t s);
// out->sum = sum of x^2 (accumulated in double).
void sumSquares(const float *x, std::size_t n, Results *out, Scratch &scratch, cudaStream_t s);
// out->count = elements that are NaN or infinite.
void countNonFinite(const float *x, std::size_t n, Results *out, Scratch &scratch, cudaStream_t s);
// Clears *out before a reduction that adds to it.
void clearResults(Results *out, cudaStream_t s);

} // namespace syncopate::cuda
