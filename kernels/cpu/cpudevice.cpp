#include "cpudevice.h"

#include "hugepages.h"

#include "cpulinear.h"
#include "onednn.h"

#include <sched.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

namespace syncopate {
namespace {

// Below this many elements a loop is cheaper than handing chunks to oneTBB.
constexpr std::size_t kParallelThreshold = 1 << 16;

// Serial where the device has one thread (its worker's own core), else split over oneTBB
// threads of the device's own arena, so a worker never takes more cores than its share.
template <typename F>
void forRange(tbb::task_arena *arena, std::size_t n, F &&body)
{
    if (!arena || n < kParallelThreshold) {
        body(std::size_t(0), n);
        return;
    }
    // oneTBB's hand-offs happen inside its uninstrumented library; these atomics make the
    // ordering they provide visible to ThreadSanitizer, for the price of one RMW per chunk.
    std::atomic<int> handoff{0};
    handoff.store(1, std::memory_order_release);
    arena->execute([&] {
        tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, kParallelThreshold / 4),
                          [&](const tbb::blocked_range<std::size_t> &r) {
                              handoff.load(std::memory_order_acquire);
                              body(r.begin(), r.end());
                              handoff.fetch_add(1, std::memory_order_acq_rel);
                          });
    });
    handoff.load(std::memory_order_acquire);
}

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// The elementwise loops, compiled for the widest vectors the CPU has, chosen once at load time
// (GCC's function multiversioning): the build targets baseline x86-64 (SSE2), a quarter of an
// AVX-512 core. No FMA contraction (-std=c++20 turns it off) and no reassociation, so every
// version computes the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define SYNCOPATE_VECTOR_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define SYNCOPATE_VECTOR_CLONES
#endif

SYNCOPATE_VECTOR_CLONES
void sgdLoop(float *__restrict param, const float *__restrict grad, float lr, std::size_t n)
{
    for (std::size_t i = 0; i < n; ++i)
        param[i] -= lr * grad[i];
}

SYNCOPATE_VECTOR_CLONES
void momentumLoop(float *__restrict param, const float *__restrict grad, float *__restrict buf,
                  float lr, float momentum, std::size_t n)
{
    for (std::size_t i = 0; i < n; ++i) {
        buf[i] = momentum * buf[i] + grad[i];
        param[i] -= lr * buf[i];
    }
}

SYNCOPATE_VECTOR_CLONES
void adamLoop(float *__restrict param, const float *__restrict grad, float *__restrict m,
              float *__restrict v, float beta1, float beta2, float eps, float stepSize,
              float invSqrtBc2, std::size_t n)
{
    for (std::size_t i = 0; i < n; ++i) {
        m[i] = beta1 * m[i] + (1.0f - beta1) * grad[i];
        v[i] = beta2 * v[i] + (1.0f - beta2) * grad[i] * grad[i];
        param[i] -= stepSize * m[i] / (std::sqrt(v[i]) * invSqrtBc2 + eps);
    }
}

SYNCOPATE_VECTOR_CLONES
void axpyLoop(float alpha, const float *__restrict x, float *__restrict y, std::size_t n)
{
    for (std::size_t i = 0; i < n; ++i)
        y[i] += alpha * x[i];
}

SYNCOPATE_VECTOR_CLONES
void scaleLoop(float alpha, float *x, std::size_t n)
{
    for (std::size_t i = 0; i < n; ++i)
        x[i] *= alpha;
}

// One pass over the sources for their mean: each block of dst is summed and scaled while it is
// in L1, in the order of Device::mean (so the same bits), where copy + axpy + scale went over
// the whole of dst three times.
SYNCOPATE_VECTOR_CLONES
void meanLoop(const float *const *src, std::size_t k, std::size_t from, float *__restrict dst, std::size_t n)
{
    constexpr std::size_t kBlock = 1024; // 4 KiB of dst
    const float inv = 1.0f / float(k);
    for (std::size_t b = 0; b < n; b += kBlock) {
        const std::size_t e = std::min(n, b + kBlock);
        const float *__restrict first = src[0] + from;
        for (std::size_t i = b; i < e; ++i)
            dst[i] = first[i];
        for (std::size_t j = 1; j < k; ++j) {
            const float *__restrict s = src[j] + from;
            for (std::size_t i = b; i < e; ++i)
                dst[i] += s[i];
        }
        if (k > 1)
            for (std::size_t i = b; i < e; ++i)
                dst[i] *= inv;
    }
}

// dA stays where mask > 0, else 0 (relu's gradient, from z or from relu's own output).
SYNCOPATE_VECTOR_CLONES
void reluGradLoop(const float *__restrict mask, const float *dA, float *dZ, std::size_t n)
{
    for (std::size_t i = 0; i < n; ++i)
        dZ[i] = mask[i] > 0.0f ? dA[i] : 0.0f;
}

SYNCOPATE_VECTOR_CLONES
void tanhGradLoop(const float *__restrict a, const float *dA, float *dZ, std::size_t n)
{
    for (std::size_t i = 0; i < n; ++i)
        dZ[i] = dA[i] * (1.0f - a[i] * a[i]);
}

SYNCOPATE_VECTOR_CLONES
void reluLoop(const float *z, float *a, std::size_t n)
{
    for (std::size_t i = 0; i < n; ++i)
        a[i] = z[i] > 0.0f ? z[i] : 0.0f;
}

// Rows summed in order, so the result does not depend on the vector width.
SYNCOPATE_VECTOR_CLONES
void columnSumsLoop(const float *__restrict dY, float *__restrict sums, int rows, int cols)
{
    for (int c = 0; c < cols; ++c)
        sums[c] = 0.0f;
    for (int r = 0; r < rows; ++r) {
        const float *d = dY + std::size_t(r) * cols;
        for (int c = 0; c < cols; ++c)
            sums[c] += d[c];
    }
}

SYNCOPATE_VECTOR_CLONES
void addRowLoop(float *__restrict Y, const float *__restrict bias, int rows, int cols)
{
    for (int r = 0; r < rows; ++r) {
        float *y = Y + std::size_t(r) * cols;
        for (int c = 0; c < cols; ++c)
            y[c] += bias[c];
    }
}

// Batch norm: rows in order, channels across the vector lanes, as columnSumsLoop.
SYNCOPATE_VECTOR_CLONES
void centeredSquaresLoop(const float *__restrict x, const float *__restrict sum, float invCount,
                         int rows, int cols, float *__restrict sq)
{
    for (int c = 0; c < cols; ++c)
        sq[c] = 0.0f;
    for (int r = 0; r < rows; ++r) {
        const float *v = x + std::size_t(r) * cols;
        for (int c = 0; c < cols; ++c) {
            const float d = v[c] - sum[c] * invCount;
            sq[c] += d * d;
        }
    }
}

// xhat may be x, y may be x: no __restrict on the rows.
SYNCOPATE_VECTOR_CLONES
void normaliseLoop(const float *x, const float *__restrict mean, const float *__restrict invstd,
                   const float *__restrict gamma, const float *__restrict beta, int rows, int cols,
                   float *xhat, float *y)
{
    for (int r = 0; r < rows; ++r) {
        const std::size_t o = std::size_t(r) * cols;
        if (xhat) {
            for (int c = 0; c < cols; ++c) {
                const float h = (x[o + c] - mean[c]) * invstd[c];
                xhat[o + c] = h;
                y[o + c] = gamma[c] * h + beta[c];
            }
        } else {
            for (int c = 0; c < cols; ++c)
                y[o + c] = gamma[c] * ((x[o + c] - mean[c]) * invstd[c]) + beta[c];
        }
    }
}

SYNCOPATE_VECTOR_CLONES
void normBackwardSumsLoop(const float *__restrict dy, const float *__restrict xhat, int rows,
                          int cols, float *__restrict sums)
{
    float *dGamma = sums, *dBeta = sums + cols;
    for (int c = 0; c < cols; ++c) {
        dGamma[c] = 0.0f;
        dBeta[c] = 0.0f;
    }
    for (int r = 0; r < rows; ++r) {
        const std::size_t o = std::size_t(r) * cols;
        for (int c = 0; c < cols; ++c) {
            dGamma[c] += dy[o + c] * xhat[o + c];
            dBeta[c] += dy[o + c];
        }
    }
}

SYNCOPATE_VECTOR_CLONES
void normBackwardLoop(const float *dy, const float *__restrict xhat, const float *__restrict invstd,
                      const float *__restrict gamma, const float *__restrict sums, float invCount,
                      int rows, int cols, float *dx)
{
    const float *dGamma = sums, *dBeta = sums + cols;
    for (int r = 0; r < rows; ++r) {
        const std::size_t o = std::size_t(r) * cols;
        for (int c = 0; c < cols; ++c)
            dx[o + c] = gamma[c] * invstd[c] *
                        (dy[o + c] - dBeta[c] * invCount - xhat[o + c] * (dGamma[c] * invCount));
    }
}

} // namespace

std::string cpuIsa() { return onednn::cpuIsa(); }

std::string cpuLibrary() { return onednn::version(); }

int usableCores()
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return int(std::max(1u, std::thread::hardware_concurrency()));
}

int defaultThreadsPerWorker(int workers) { return std::max(1, usableCores() / std::max(1, workers)); }

CpuDevice::CpuDevice(int threads) : m_ctx(std::make_unique<onednn::Context>(threads))
{
    if (m_ctx->threads() > 1) {
        m_arena = std::make_unique<tbb::task_arena>(m_ctx->threads());
        m_arena->initialize();
    }
}

CpuDevice::~CpuDevice() = default;

int CpuDevice::threads() const { return m_ctx->threads(); }

std::unique_ptr<LinearPlan> CpuDevice::planLinear(const LinearShape &shape)
{
    return std::make_unique<CpuLinearPlan>(*this, *m_ctx, shape);
}

void CpuDevice::bindThread() { m_ctx->bindThread(); }

void CpuDevice::reluBackwardFromOutput(const float *a, float *dA, std::size_t n)
{
    forRange(m_arena.get(), n, [=](std::size_t b, std::size_t e) {
        reluGradLoop(a + b, dA + b, dA + b, e - b);
    });
}

void *CpuDevice::allocateBytes(std::size_t count)
{
    if (count == 0)
        return nullptr;
    void *p = allocateZeroed(count);
    if (!p)
        throw DeviceError("cpu: out of memory allocating " + std::to_string(count) + " bytes");
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
    addRowLoop(Y, bias, rows, cols);
}

void CpuDevice::biasGrad(const float *dY, float *dbias, int rows, int cols)
{
    columnSumsLoop(dY, dbias, rows, cols);
}

void CpuDevice::activationForward(Activation act, const float *Z, float *A, std::size_t n)
{
    forRange(m_arena.get(), n, [=](std::size_t b, std::size_t e) {
        switch (act) {
        case Activation::Relu:
            reluLoop(Z + b, A + b, e - b);
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
    forRange(m_arena.get(), n, [=](std::size_t b, std::size_t e) {
        switch (act) {
        case Activation::Relu:
            reluGradLoop(Z + b, dA + b, dZ + b, e - b);
            break;
        case Activation::Tanh:
            tanhGradLoop(A + b, dA + b, dZ + b, e - b);
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

void CpuDevice::batchNormCenteredSquares(const float *x, const float *sum, float invCount,
                                         int rows, int cols, float *sq)
{
    centeredSquaresLoop(x, sum, invCount, rows, cols, sq);
}

void CpuDevice::batchNormStatistics(const float *sum, const float *sq, double count, float eps,
                                    float momentum, int cols, float *mean, float *invstd,
                                    float *runningMean, float *runningVar)
{
    const double m = momentum;
    for (int c = 0; c < cols; ++c) {
        const double mu = double(sum[c]) / count;
        const double var = double(sq[c]) / count;
        mean[c] = float(mu);
        invstd[c] = float(1.0 / std::sqrt(var + double(eps)));
        if (runningMean) {
            runningMean[c] = float((1.0 - m) * runningMean[c] + m * mu);
            runningVar[c] = float((1.0 - m) * runningVar[c] + m * double(sq[c]) / (count - 1.0));
        }
    }
}

void CpuDevice::batchNormForward(const float *x, const float *mean, const float *invstd,
                                 const float *gamma, const float *beta, int rows, int cols,
                                 float *xhat, float *y)
{
    normaliseLoop(x, mean, invstd, gamma, beta, rows, cols, xhat, y);
}

void CpuDevice::batchNormBackwardSums(const float *dy, const float *xhat, int rows, int cols,
                                      float *sums)
{
    normBackwardSumsLoop(dy, xhat, rows, cols, sums);
}

void CpuDevice::batchNormBackward(const float *dy, const float *xhat, const float *invstd,
                                  const float *gamma, const float *sums, float invCount, int rows,
                                  int cols, float *dx)
{
    normBackwardLoop(dy, xhat, invstd, gamma, sums, invCount, rows, cols, dx);
}

void CpuDevice::sgdStep(float *param, const float *grad, float lr, std::size_t n)
{
    forRange(m_arena.get(), n, [=](std::size_t b, std::size_t e) {
        sgdLoop(param + b, grad + b, lr, e - b);
    });
}

void CpuDevice::momentumStep(float *param, const float *grad, float *buf, float lr, float momentum,
                             std::size_t n)
{
    forRange(m_arena.get(), n, [=](std::size_t b, std::size_t e) {
        momentumLoop(param + b, grad + b, buf + b, lr, momentum, e - b);
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
    forRange(m_arena.get(), n, [=](std::size_t b, std::size_t e) {
        adamLoop(param + b, grad + b, m + b, v + b, beta1, beta2, eps, stepSize, invSqrtBc2, e - b);
    });
}

void CpuDevice::axpy(float alpha, const float *x, float *y, std::size_t n)
{
    forRange(m_arena.get(), n, [=](std::size_t b, std::size_t e) {
        axpyLoop(alpha, x + b, y + b, e - b);
    });
}

void CpuDevice::scale(float alpha, float *x, std::size_t n)
{
    forRange(m_arena.get(), n, [=](std::size_t b, std::size_t e) {
        scaleLoop(alpha, x + b, e - b);
    });
}

void CpuDevice::mean(const float *const *src, std::size_t k, float *dst, std::size_t n)
{
    if (k == 0 || n == 0)
        return;
    forRange(m_arena.get(), n, [=](std::size_t b, std::size_t e) {
        meanLoop(src, k, b, dst + b, e - b);
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
