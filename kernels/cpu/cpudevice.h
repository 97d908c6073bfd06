// The CPU backend: GEMMs through OpenBLAS (one thread per call, since every worker is already a
// thread of its own), elementwise work in plain loops the compiler vectorises, split across
// oneTBB's threads once an array is large enough to pay for it.
#pragma once

#include "device.h"

namespace syncopate {

class CpuDevice final : public Device {
public:
    CpuDevice();

    std::string name() const override { return "cpu"; }

    void *allocateBytes(std::size_t bytes) override;
    void releaseBytes(void *p) override;
    void uploadBytes(void *dst, const void *host, std::size_t bytes) override;
    void downloadBytes(void *host, const void *src, std::size_t bytes) override;
    void copyBytes(void *dst, const void *src, std::size_t bytes) override;
    void copyFrom(Device &from, void *dst, const void *src, std::size_t bytes) override;
    void *allocateHost(std::size_t bytes) override { return allocateBytes(bytes); }
    void releaseHost(void *p) override { releaseBytes(p); }
    void fill(float *dst, float value, std::size_t count) override;

    void gemm(bool transA, bool transB, int m, int n, int k, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) override;
    void addBias(float *Y, const float *bias, int rows, int cols) override;
    void biasGrad(const float *dY, float *dbias, int rows, int cols) override;
    void activationForward(Activation act, const float *Z, float *A, std::size_t n) override;
    void activationBackward(Activation act, const float *Z, const float *A, const float *dA,
                            float *dZ, std::size_t n) override;
    double softmaxCrossEntropy(const float *logits, const std::int32_t *labels, int rows, int cols,
                               float *dLogits) override;
    int countCorrect(const float *logits, const std::int32_t *labels, int rows, int cols) override;
    double meanSquaredError(const float *pred, const float *target, std::size_t n,
                            float *dPred) override;
    void sgdStep(float *param, const float *grad, float lr, std::size_t n) override;
    void momentumStep(float *param, const float *grad, float *buf, float lr, float momentum,
                      std::size_t n) override;
    void adamStep(float *param, const float *grad, float *m, float *v, float lr, float beta1,
                  float beta2, float eps, std::int64_t step, std::size_t n) override;
    void axpy(float alpha, const float *x, float *y, std::size_t n) override;
    void scale(float alpha, float *x, std::size_t n) override;
    double sumSquares(const float *x, std::size_t n) override;
    bool allFinite(const float *x, std::size_t n) override;
};

// Makes OpenBLAS single-threaded per call; safe to call more than once.
void configureCpuBlas();

} // namespace syncopate
