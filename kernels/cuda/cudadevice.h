// The CUDA backend's Device: one per worker, each with its own stream, cuBLAS handle, scratch
// and span timer, so several workers can share a GPU without sharing a queue. GEMMs through
// cuBLAS (row-major calls mapped onto its column-major ones), everything else through the
// kernels in the .cu files beside this one.
#pragma once

#include "cudacheck.h"
#include "launchers.h"

#include <cublas_v2.h>

#include <functional>
#include <memory>
#include <vector>

namespace syncopate::cuda {

// Events queued around each span on the worker's stream; a span is read back once its end
// event has completed, and mapped onto the host clock through an anchor event whose host time
// is known. The event pool is allocated up front, so timing a span allocates nothing.
class CudaTimer final : public DeviceTimer {
public:
    CudaTimer(int gpu, cudaStream_t stream);
    ~CudaTimer() override;

    void calibrate(std::function<std::int64_t()> hostNow) override;
    void begin() override;
    void end(std::uint64_t tag, double value) override;
    std::size_t poll(TimedSpan *out, std::size_t max) override;

private:
    struct Pending {
        cudaEvent_t begin = nullptr, end = nullptr;
        std::uint64_t tag = 0;
        double value = 0;
        bool closed = false;
        bool failed = false; // its end could not be recorded: skipped
    };
    static constexpr std::size_t kUntimed = ~std::size_t(0);
    static constexpr std::size_t kCapacity = 1024; // spans in flight
    static constexpr int kMaxDepth = 8;

    TimedSpan resolve(const Pending &p) const;
    void reanchor();

    int m_gpu;
    cudaStream_t m_stream;
    std::function<std::int64_t()> m_hostNow;
    std::vector<Pending> m_ring;
    std::size_t m_head = 0, m_tail = 0; // m_tail..m_head are in flight
    std::size_t m_open[kMaxDepth] = {};
    int m_depth = 0;
    std::vector<TimedSpan> m_ready; // resolved early because the ring was full
    cudaEvent_t m_anchor = nullptr;
    std::int64_t m_anchorHost = 0;
};

class CudaDevice final : public Device {
public:
    CudaDevice(int gpu, const DeviceOptions &options);
    ~CudaDevice() override;

    std::string name() const override;
    int memorySpace() const override { return m_gpu; }
    cudaStream_t stream() const { return m_stream; }

    void *allocateBytes(std::size_t bytes) override;
    void releaseBytes(void *p) override;
    void uploadBytes(void *dst, const void *host, std::size_t bytes) override;
    void downloadBytes(void *host, const void *src, std::size_t bytes) override;
    void copyBytes(void *dst, const void *src, std::size_t bytes) override;
    void copyFrom(Device &from, void *dst, const void *src, std::size_t bytes) override;
    void *allocateHost(std::size_t bytes) override;
    void releaseHost(void *p) override;
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
    double sumSquares(const float *x, std::size_t n) override;
    bool allFinite(const float *x, std::size_t n) override;
    void synchronize() override;
    DeviceTimer *timer() override { return m_timer.get(); }

private:
    // Makes this device's GPU current on the calling thread (cheap when it already is).
    void use() const;
    // Waits for the stream and returns the results the last reduction wrote.
    const Results &readResults();
    void checkBlas(cublasStatus_t status, const char *what) const;

    int m_gpu;
    std::string m_name;
    cudaStream_t m_stream = nullptr;
    cublasHandle_t m_blas = nullptr;
    Scratch m_scratch;
    Results *m_results = nullptr;     // device
    Results *m_resultsHost = nullptr; // page-locked
    float *m_ones = nullptr;          // a column of ones for bias gradients (cuBLAS gemv)
    int m_onesCount = 0;
    std::unique_ptr<CudaTimer> m_timer;
};

} // namespace syncopate::cuda
