#include "cpudevice.h"

#include "cpulinear.h"
#include "onednn.h"

#include <sched.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

namespace syncopate {
namespace {

// Below this many elements a loop is cheaper than handing chunks to oneTBB.
constexpr std::size_t kParallelThreshold = 1 << 16;

template <typename F>
void forRange(std::size_t n, F &&body)
{
    if (n < kParallelThreshold) {
        body(std::size_t(0), n);
        return;
    }
    // oneTBB's hand-offs happen inside its uninstrumented library; these atomics make the
    // ordering they provide visible to ThreadSanitizer, for the price of one RMW per chunk.
    std::atomic<int> handoff{0};
    handoff.store(1, std::memory_order_release);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, kParallelThreshold / 4),
                      [&](const tbb::blocked_range<std::size_t> &r) {
                          handoff.load(std::memory_order_acquire);
                          body(r.begin(), r.end());
                          handoff.fetch_add(1, std::memory_order_acq_rel);
                      });
    handoff.load(std::memory_order_acquire);
}

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

} // namespace

std::string cpuIsa() { return onednn::cpuIsa(); }

std::string cpuLibrary() { return onednn::version(); }

int defaultThreadsPerWorker(int workers)
{
    cpu_set_t set;
    int cores = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        cores = CPU_COUNT(&set);
    if (cores <= 0)
        cores = 1;
    return std::max(1, cores / std::max(1, workers));
}

CpuDevice::CpuDevice(int threads) : m_ctx(std::make_unique<onednn::Context>(threads)) {}

CpuDevice::~CpuDevice() = default;

int CpuDevice::threads() const { return m_ctx->threads(); }

std::unique_ptr<LinearPlan> CpuDevice::planLinear(const LinearShape &shape)
{
    return std::make_unique<CpuLinearPlan>(*this, *m_ctx, shape);
}

void CpuDevice::bindThread() { m_ctx->bindThread(); }

void CpuDevice::reluBackwardFromOutput(const float *a, float *dA, std::size_t n)
{
    forRange(n, [=](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i)
            dA[i] = a[i] > 0.0f ? dA[i] : 0.0f;
    });
}

void *CpuDevice::allocateBytes(std::size_t count)
{
    if (count == 0)
        return nullptr;
    const std::size_t bytes = (count + 63) / 64 * 64;
    void *p = std::aligned_alloc(64, bytes);
    if (!p)
        throw DeviceError("cpu: out of memory allocating " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, bytes);
    return p;
}

void CpuDevice::releaseBytes(void *p) { std::free(p); }

void CpuDevice::uploadBytes(void *dst, const void *host, std::size_t bytes)
{
    if (bytes)
        std::memcpy(dst, host, bytes);
}

void CpuDevice::downloadBytes(void *host, const void *src, std::size_t bytes)
{
    if (bytes)
        std::memcpy(host, src, bytes);
}

void CpuDevice::copyBytes(void *dst, const void *src, std::size_t bytes)
{
    if (bytes && dst != src)
        std::memcpy(dst, src, bytes);
}

void CpuDevice::copyFrom(Device &from, void *dst, const void *src, std::size_t bytes)
{
    if (from.hostAccessible())
        copyBytes(dst, src, bytes);
    else
        from.downloadBytes(dst, src, bytes);
}

void CpuDevice::fill(float *dst, float value, std::size_t count) { std::fill_n(dst, count, value); }

void CpuDevice::gemm(bool transA, bool transB, int m, int n, int k, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    m_ctx->bindThread();
    onednn::sgemm(transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

void CpuDevice::addBias(float *Y, const float *bias, int rows, int cols)
{
    for (int r = 0; r < rows; ++r) {
        float *y = Y + std::size_t(r) * cols;
        for (int c = 0; c < cols; ++c)
            y[c] += bias[c];
    }
}

void CpuDevice::biasGrad(const float *dY, float *dbias, int rows, int cols)
{
    std::fill_n(dbias, cols, 0.0f);
    for (int r = 0; r < rows; ++r) {
        const float *d = dY + std::size_t(r) * cols;
        for (int c = 0; c < cols; ++c)
            dbias[c] += d[c];
    }
}

void CpuDevice::activationForward(Activation act, const float *Z, float *A, std::size_t n)
{
    forRange(n, [=](std::size_t b, std::size_t e) {
        switch (act) {
        case Activation::Relu:
            for (std::size_t i = b; i < e; ++i)
                A[i] = Z[i] > 0.0f ? Z[i] : 0.0f;
            break;
        case Activation::Tanh:
            for (std::size_t i = b; i < e; ++i)
                A[i] = std::tanh(Z[i]);
            break;
        case Activation::Gelu: // exact (erf) form, PyTorch's default
            for (std::size_t i = b; i < e; ++i)
                A[i] = 0.5f * Z[i] * (1.0f + std::erf(Z[i] * kInvSqrt2));
            break;
        case Activation::Identity:
            if (A != Z)
                std::memcpy(A + b, Z + b, (e - b) * sizeof(float));
            break;
        }
    });
}

void CpuDevice::activationBackward(Activation act, const float *Z, const float *A, const float *dA,
                                   float *dZ, std::size_t n)
{
    forRange(n, [=](std::size_t b, std::size_t e) {
        switch (act) {
        case Activation::Relu:
            for (std::size_t i = b; i < e; ++i)
                dZ[i] = Z[i] > 0.0f ? dA[i] : 0.0f;
            break;
        case Activation::Tanh:
            for (std::size_t i = b; i < e; ++i)
                dZ[i] = dA[i] * (1.0f - A[i] * A[i]);
            break;
        case Activation::Gelu:
            for (std::size_t i = b; i < e; ++i) {
                const float z = Z[i];
                const float cdf = 0.5f * (1.0f + std::erf(z * kInvSqrt2));
                const float pdf = kInvSqrt2Pi * std::exp(-0.5f * z * z);
                dZ[i] = dA[i] * (cdf + z * pdf);
            }
            break;
        case Activation::Identity:
            if (dZ != dA)
                std::memcpy(dZ + b, dA + b, (e - b) * sizeof(float));
            break;
        }
    });
}

double CpuDevice::softmaxCrossEntropy(const float *logits, const std::int32_t *labels, int rows,
                                      int cols, float *dLogits)
{
    double total = 0.0;
    const float invRows = 1.0f / float(rows);
    for (int r = 0; r < rows; ++r) {
        const float *x = logits + std::size_t(r) * cols;
        const int label = labels[r];
        if (label < 0 || label >= cols)
            throw DeviceError("label " + std::to_string(label) + " at row " + std::to_string(r) +
                              " is outside the " + std::to_string(cols) + " output classes");
        const float mx = *std::max_element(x, x + cols);
        double sum = 0.0;
        for (int c = 0; c < cols; ++c)
            sum += std::exp(double(x[c] - mx));
        const double logSum = std::log(sum) + mx;
        total += logSum - x[label];
        if (dLogits) {
            float *d = dLogits + std::size_t(r) * cols;
            for (int c = 0; c < cols; ++c)
                d[c] = float(std::exp(double(x[c]) - logSum)) * invRows;
            d[label] -= invRows;
        }
    }
    return total / rows;
}

int CpuDevice::countCorrect(const float *logits, const std::int32_t *labels, int rows, int cols)
{
    int correct = 0;
    for (int r = 0; r < rows; ++r) {
        const float *x = logits + std::size_t(r) * cols;
        correct += int(std::max_element(x, x + cols) - x) == labels[r];
    }
    return correct;
}

double CpuDevice::meanSquaredError(const float *pred, const float *target, std::size_t n,
                                   float *dPred)
{
    double total = 0.0;
    const float g = 2.0f / float(n);
    for (std::size_t i = 0; i < n; ++i) {
        const float d = pred[i] - target[i];
        total += double(d) * d;
        if (dPred)
            dPred[i] = g * d;
    }
    return total / double(n);
}

void CpuDevice::sgdStep(float *param, const float *grad, float lr, std::size_t n)
{
    forRange(n, [=](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i)
            param[i] -= lr * grad[i];
    });
}

void CpuDevice::momentumStep(float *param, const float *grad, float *buf, float lr, float momentum,
                             std::size_t n)
{
    forRange(n, [=](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) {
            buf[i] = momentum * buf[i] + grad[i];
            param[i] -= lr * buf[i];
        }
    });
}

void CpuDevice::adamStep(float *param, const float *grad, float *m, float *v, float lr, float beta1,
                         float beta2, float eps, std::int64_t step, std::size_t n)
{
    // torch.optim.Adam: param -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
    const double bc1 = 1.0 - std::pow(double(beta1), double(step));
    const double bc2 = 1.0 - std::pow(double(beta2), double(step));
    const float stepSize = float(lr / bc1);
    const float invSqrtBc2 = float(1.0 / std::sqrt(bc2));
    forRange(n, [=](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) {
            m[i] = beta1 * m[i] + (1.0f - beta1) * grad[i];
            v[i] = beta2 * v[i] + (1.0f - beta2) * grad[i] * grad[i];
            param[i] -= stepSize * m[i] / (std::sqrt(v[i]) * invSqrtBc2 + eps);
        }
    });
}

void CpuDevice::axpy(float alpha, const float *x, float *y, std::size_t n)
{
    forRange(n, [=](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i)
            y[i] += alpha * x[i];
    });
}

void CpuDevice::scale(float alpha, float *x, std::size_t n)
{
    forRange(n, [=](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i)
            x[i] *= alpha;
    });
}

double CpuDevice::sumSquares(const float *x, std::size_t n)
{
    double s = 0.0;
    for (std::size_t i = 0; i < n; ++i)
        s += double(x[i]) * x[i];
    return s;
}

bool CpuDevice::allFinite(const float *x, std::size_t n)
{
    for (std::size_t i = 0; i < n; ++i)
        if (!std::isfinite(x[i]))
            return false;
    return true;
}

} // namespace syncopate
