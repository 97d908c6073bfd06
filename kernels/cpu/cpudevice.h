// The CPU backend: a model's layers on oneDNN matmul primitives prepared when the model is
// built (cpulinear.h), each device with its own OpenMP thread count (a worker is a thread of
// its own already: threads_per_worker splits the free cores between them), elementwise work in
// plain loops the compiler vectorises, split across a oneTBB arena of the same number of
// threads once an array is large enough to pay for it.
#pragma once

#include "device.h"

#include <tbb/task_arena.h>

#include <memory>

namespace syncopate {

namespace onednn {
class Context;
}


class CpuDevice final : public Device {
public:
    // threads: OpenMP threads of the library calls made on the thread that drives the device.
    explicit CpuDevice(int threads = 1);
    ~CpuDevice() override;

    std::string name() const override { return "cpu"; }
    int threads() const;

    std::unique_ptr<LinearPlan> planLinear(const LinearShape &shape) override;
    void bindThread() override;
    // dZ = dA where a > 0, else 0, in place: relu's gradient read off its output.
    void reluBackwardFromOutput(const float *a, float *dA, std::size_t n);

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
    void batchNormCenteredSquares(const float *x, const float *sum, float invCount, int rows,
                                  int cols, float *sq) override;
    void batchNormStatistics(const float *sum, const float *sq, double count, float eps,
                             float momentum, int cols, float *mean, float *invstd,
                             float *runningMean, float *runningVar) override;
    void batchNormForward(const float *x, const float *mean, const float *invstd,
                          const float *gamma, const float *beta, int rows, int cols, float *xhat,
                          float *y) override;
    void batchNormBackwardSums(const float *dy, const float *xhat, int rows, int cols,
                               float *sums) override;
    void batchNormBackward(const float *dy, const float *xhat, const float *invstd,
                           const float *gamma, const float *sums, float invCount, int rows,
                           int cols, float *dx) override;
    void sgdStep(float *param, const float *grad, float lr, std::size_t n) override;
    void momentumStep(float *param, const float *grad, float *buf, float lr, float momentum,
                      std::size_t n) override;
    void adamStep(float *param, const float *grad, float *m, float *v, float lr, float beta1,
                  float beta2, float eps, std::int64_t step, std::size_t n) override;
    void axpy(float alpha, const float *x, float *y, std::size_t n) override;
    void scale(float alpha, float *x, std::size_t n) override;
    void mean(const float *const *src, std::size_t k, float *dst, std::size_t n) override;
    double sumSquares(const float *x, std::size_t n) override;
    bool allFinite(const float *x, std::size_t n) override;

private:
    std::unique_ptr<onednn::Context> m_ctx;
    std::unique_ptr<tbb::task_arena> m_arena; // elementwise work; null: one thread
};

// The instruction set oneDNN uses on this CPU (dnnl_get_effective_cpu_isa), e.g. "avx512_core".
std::string cpuIsa();
// The CPU library and its version, e.g. "oneDNN 2.6.3 (OpenMP)".
std::string cpuLibrary();

// The cores this process may use (its affinity mask; where that cannot be read, the machine's),
// at least 1.
int usableCores();

// Threads per worker when device.threads_per_worker is 0: usableCores() divided by the workers,
// at least 1.
int defaultThreadsPerWorker(int workers);

} // namespace syncopate
