#include "cudadevice.h"

#include <cmath>
#include <cstring>

namespace syncopate::cuda {

// ---- Scratch ---------------------------------------------------------------------------------

Scratch::~Scratch()
{
    for (void *p : m_ptr)
        if (p)
            cudaFree(p);
}

void *Scratch::get(int slot, std::size_t bytes, cudaStream_t stream)
{
    if (bytes <= m_bytes[slot] && m_ptr[slot])
        return m_ptr[slot];
    const std::size_t grown = std::max(bytes, m_bytes[slot] * 2);
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (scratch)");
    if (m_ptr[slot])
        check(cudaFree(m_ptr[slot]), "cudaFree (scratch)");
    m_ptr[slot] = nullptr;
    m_bytes[slot] = 0;
    check(cudaMalloc(&m_ptr[slot], grown ? grown : 16), "cudaMalloc (scratch)");
    m_bytes[slot] = grown;
    return m_ptr[slot];
}

// ---- CudaTimer -------------------------------------------------------------------------------

CudaTimer::CudaTimer(int gpu, cudaStream_t stream) : m_gpu(gpu), m_stream(stream), m_ring(kCapacity)
{
    m_ready.reserve(kCapacity);
    for (Pending &p : m_ring) {
        check(cudaEventCreate(&p.begin), "cudaEventCreate");
        check(cudaEventCreate(&p.end), "cudaEventCreate");
    }
    check(cudaEventCreate(&m_anchor), "cudaEventCreate");
}

CudaTimer::~CudaTimer()
{
    cudaSetDevice(m_gpu);
    for (Pending &p : m_ring) {
        cudaEventDestroy(p.begin);
        cudaEventDestroy(p.end);
    }
    cudaEventDestroy(m_anchor);
}

void CudaTimer::reanchor()
{
    // The stream is idle, so the anchor completes as soon as it is recorded: its GPU time and
    // the host time read beside it name the same moment (to a few microseconds).
    check(cudaEventRecord(m_anchor, m_stream), "cudaEventRecord (clock anchor)");
    m_anchorHost = m_hostNow();
}

void CudaTimer::calibrate(std::function<std::int64_t()> hostNow)
{
    m_hostNow = std::move(hostNow);
    check(cudaSetDevice(m_gpu), "cudaSetDevice");
    check(cudaStreamSynchronize(m_stream), "cudaStreamSynchronize (clock calibration)");
    reanchor();
    check(cudaEventSynchronize(m_anchor), "cudaEventSynchronize (clock calibration)");
}

void CudaTimer::begin()
{
    const int depth = m_depth++;
    if (depth >= kMaxDepth)
        return; // nested deeper than anyone needs: not timed
    m_open[depth] = kUntimed;
    if (!m_hostNow)
        return; // not calibrated
    if (m_head - m_tail == kCapacity) {
        // Every slot is in flight: wait for the oldest and keep its result, so nothing is lost.
        Pending &old = m_ring[m_tail % kCapacity];
        if (!old.closed)
            return;
        if (!old.failed) {
            check(cudaEventSynchronize(old.end), "cudaEventSynchronize (span timer)");
            m_ready.push_back(resolve(old));
        }
        ++m_tail;
    }
    Pending &p = m_ring[m_head % kCapacity];
    p.closed = false;
    p.failed = false;
    check(cudaEventRecord(p.begin, m_stream), "cudaEventRecord (span begin)");
    m_open[depth] = m_head++;
}

void CudaTimer::end(std::uint64_t tag, double value)
{
    // Called from destructors, also while an exception unwinds: never throws.
    if (m_depth == 0)
        return;
    const int depth = --m_depth;
    if (depth >= kMaxDepth || m_open[depth] == kUntimed)
        return;
    Pending &p = m_ring[m_open[depth] % kCapacity];
    p.tag = tag;
    p.value = value;
    p.failed = cudaEventRecord(p.end, m_stream) != cudaSuccess;
    p.closed = true;
}

TimedSpan CudaTimer::resolve(const Pending &p) const
{
    float beginMs = 0, endMs = 0;
    check(cudaEventElapsedTime(&beginMs, m_anchor, p.begin), "cudaEventElapsedTime");
    check(cudaEventElapsedTime(&endMs, m_anchor, p.end), "cudaEventElapsedTime");
    TimedSpan s;
    s.tag = p.tag;
    s.value = p.value;
    s.start = m_anchorHost + std::int64_t(std::llround(double(beginMs) * 1e6));
    s.end = m_anchorHost + std::int64_t(std::llround(double(endMs) * 1e6));
    if (s.end < s.start)
        s.end = s.start;
    return s;
}

std::size_t CudaTimer::poll(TimedSpan *out, std::size_t max)
{
    std::size_t n = 0;
    std::size_t taken = 0;
    while (taken < m_ready.size() && n < max)
        out[n++] = m_ready[taken++];
    m_ready.erase(m_ready.begin(), m_ready.begin() + std::ptrdiff_t(taken));
    // Spans finish in the order they were opened only when they do not nest; an enclosing span
    // closes after its children, so stop at the first one still open or still running.
    while (m_tail < m_head && n < max) {
        Pending &p = m_ring[m_tail % kCapacity];
        if (!p.closed)
            break;
        if (p.failed) {
            ++m_tail;
            continue;
        }
        const cudaError_t q = cudaEventQuery(p.end);
        if (q == cudaErrorNotReady)
            break;
        check(q, "cudaEventQuery (span timer)");
        out[n++] = resolve(p);
        ++m_tail;
    }
    // Float milliseconds lose precision as the anchor ages: move it while nothing refers to it
    // and the stream is idle.
    if (m_hostNow && m_tail == m_head && m_depth == 0 && m_ready.empty() &&
        m_hostNow() - m_anchorHost > 1'000'000'000 && cudaStreamQuery(m_stream) == cudaSuccess)
        reanchor();
    return n;
}

// ---- CudaDevice ------------------------------------------------------------------------------

namespace {

const char *blasStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
    }
}

std::string mib(std::size_t bytes)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
    return buf;
}

} // namespace

CudaDevice::CudaDevice(int gpu, const DeviceOptions &options) : m_gpu(gpu)
{
    check(cudaSetDevice(gpu), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, gpu), "cudaGetDeviceProperties");
    m_name = "cuda:" + std::to_string(gpu) + " (" + prop.name + ")";
    check(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    checkBlas(cublasCreate(&m_blas), "cublasCreate");
    checkBlas(cublasSetStream(m_blas, m_stream), "cublasSetStream");
    checkBlas(cublasSetMathMode(m_blas, options.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                     : CUBLAS_DEFAULT_MATH),
              "cublasSetMathMode");
    check(cudaMalloc(&m_results, sizeof(Results)), "cudaMalloc (results)");
    check(cudaMallocHost(&m_resultsHost, sizeof(Results)), "cudaMallocHost (results)");
    m_timer = std::make_unique<CudaTimer>(gpu, m_stream);
}

CudaDevice::~CudaDevice()
{
    cudaSetDevice(m_gpu);
    if (m_stream)
        cudaStreamSynchronize(m_stream);
    m_timer.reset();
    if (m_ones)
        cudaFree(m_ones);
    if (m_results)
        cudaFree(m_results);
    if (m_resultsHost)
        cudaFreeHost(m_resultsHost);
    if (m_blas)
        cublasDestroy(m_blas);
    if (m_stream)
        cudaStreamDestroy(m_stream);
}

std::string CudaDevice::name() const { return m_name; }

void CudaDevice::use() const
{
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != m_gpu)
        check(cudaSetDevice(m_gpu), "cudaSetDevice");
}

void CudaDevice::checkBlas(cublasStatus_t status, const char *what) const
{
    if (status != CUBLAS_STATUS_SUCCESS)
        throw DeviceError(std::string("cuBLAS: ") + what + " failed on cuda:" +
                          std::to_string(m_gpu) + ": " + blasStatusName(status));
}

void *CudaDevice::allocateBytes(std::size_t bytes)
{
    if (bytes == 0)
        return nullptr;
    use();
    void *p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
        cudaGetLastError(); // clear the sticky-free error so the run can report and stop
        std::size_t freeBytes = 0, totalBytes = 0;
        cudaMemGetInfo(&freeBytes, &totalBytes);
        throw DeviceError("out of GPU memory on " + m_name + ": asked for " + mib(bytes) +
                          " (" + std::to_string(bytes) + " bytes), " + mib(freeBytes) +
                          " free of " + mib(totalBytes) +
                          ". Try fewer workers per GPU, a smaller train.batch or model, or "
                          "model.checkpoint");
    }
    check(status, "cudaMalloc");
    check(cudaMemsetAsync(p, 0, bytes, m_stream), "cudaMemsetAsync");
    // Other workers' streams may use this buffer next: the zeros must be there first.
    check(cudaStreamSynchronize(m_stream), "cudaStreamSynchronize (allocation)");
    return p;
}

void CudaDevice::releaseBytes(void *p)
{
    if (!p)
        return;
    use();
    cudaStreamSynchronize(m_stream);
    cudaFree(p);
}

void CudaDevice::uploadBytes(void *dst, const void *host, std::size_t bytes)
{
    if (!bytes)
        return;
    use();
    // From pageable memory the driver stages the data before returning, so the caller may
    // reuse its buffer at once; from allocateHost() memory the copy is truly asynchronous.
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, m_stream), "cudaMemcpyAsync (upload)");
}

void CudaDevice::downloadBytes(void *host, const void *src, std::size_t bytes)
{
    if (!bytes)
        return;
    use();
    check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, m_stream), "cudaMemcpyAsync (download)");
    check(cudaStreamSynchronize(m_stream), "cudaStreamSynchronize (download)");
}

void CudaDevice::copyBytes(void *dst, const void *src, std::size_t bytes)
{
    if (!bytes || dst == src)
        return;
    use();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, m_stream), "cudaMemcpyAsync (copy)");
}

void CudaDevice::copyFrom(Device &from, void *dst, const void *src, std::size_t bytes)
{
    if (!bytes)
        return;
    const int space = from.memorySpace();
    if (space < 0) {
        uploadBytes(dst, src, bytes);
        return;
    }
    use();
    if (space == m_gpu)
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, m_stream), "cudaMemcpyAsync (copy)");
    else // direct over NVLink/PCIe where peer access is on, staged by the driver otherwise
        check(cudaMemcpyPeerAsync(dst, m_gpu, src, space, bytes, m_stream), "cudaMemcpyPeerAsync");
}

void *CudaDevice::allocateHost(std::size_t bytes)
{
    if (!bytes)
        return nullptr;
    use();
    void *p = nullptr;
    check(cudaMallocHost(&p, bytes), "cudaMallocHost");
    std::memset(p, 0, bytes);
    return p;
}

void CudaDevice::releaseHost(void *p)
{
    if (p)
        cudaFreeHost(p);
}

void CudaDevice::fill(float *dst, float value, std::size_t count)
{
    use();
    cuda::fill(dst, value, count, m_stream);
}

void CudaDevice::gemm(bool transA, bool transB, int m, int n, int k, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    use();
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
    checkBlas(cublasSgemm(m_blas, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                          transA ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, B, ldb, A, lda,
                          &beta, C, ldc),
              "cublasSgemm");
}

void CudaDevice::addBias(float *Y, const float *bias, int rows, int cols)
{
    use();
    cuda::addBias(Y, bias, rows, cols, m_stream);
}

void CudaDevice::biasGrad(const float *dY, float *dbias, int rows, int cols)
{
    use();
    if (rows > m_onesCount) {
        check(cudaStreamSynchronize(m_stream), "cudaStreamSynchronize (bias ones)");
        if (m_ones)
            check(cudaFree(m_ones), "cudaFree (bias ones)");
        m_ones = nullptr;
        m_onesCount = 0;
        check(cudaMalloc(&m_ones, std::size_t(rows) * sizeof(float)), "cudaMalloc (bias ones)");
        m_onesCount = rows;
        cuda::fill(m_ones, 1.0f, std::size_t(rows), m_stream);
    }
    // dY is [rows, cols] row-major, i.e. [cols, rows] column-major: dbias = dY^T-view * ones.
    const float one = 1.0f, zero = 0.0f;
    checkBlas(cublasSgemv(m_blas, CUBLAS_OP_N, cols, rows, &one, dY, cols, m_ones, 1, &zero,
                          dbias, 1),
              "cublasSgemv (bias gradient)");
}

void CudaDevice::activationForward(Activation act, const float *Z, float *A, std::size_t n)
{
    use();
    cuda::activationForward(act, Z, A, n, m_stream);
}

void CudaDevice::activationBackward(Activation act, const float *Z, const float *A,
                                    const float *dA, float *dZ, std::size_t n)
{
    use();
    cuda::activationBackward(act, Z, A, dA, dZ, n, m_stream);
}

const Results &CudaDevice::readResults()
{
    check(cudaMemcpyAsync(m_resultsHost, m_results, sizeof(Results), cudaMemcpyDeviceToHost,
                          m_stream),
          "cudaMemcpyAsync (results)");
    check(cudaStreamSynchronize(m_stream), "cudaStreamSynchronize (results)");
    return *m_resultsHost;
}

double CudaDevice::softmaxCrossEntropy(const float *logits, const std::int32_t *labels, int rows,
                                       int cols, float *dLogits)
{
    use();
    cuda::softmaxCrossEntropy(logits, labels, rows, cols, dLogits, m_results, m_scratch, m_stream);
    const Results &r = readResults();
    if (r.badRow >= 0)
        throw DeviceError("label " + std::to_string(r.badLabel) + " at row " +
                          std::to_string(r.badRow) + " is outside the " + std::to_string(cols) +
                          " output classes");
    return rows > 0 ? r.sum / rows : 0.0;
}

int CudaDevice::countCorrect(const float *logits, const std::int32_t *labels, int rows, int cols)
{
    use();
    cuda::countCorrect(logits, labels, rows, cols, m_results, m_scratch, m_stream);
    return int(readResults().count);
}

double CudaDevice::meanSquaredError(const float *pred, const float *target, std::size_t n,
                                    float *dPred)
{
    use();
    cuda::squaredError(pred, target, n, dPred, m_results, m_scratch, m_stream);
    return n ? readResults().sum / double(n) : 0.0;
}

void CudaDevice::batchNormCenteredSquares(const float *x, const float *sum, float invCount,
                                          int rows, int cols, float *sq)
{
    use();
    cuda::batchNormCenteredSquares(x, sum, invCount, rows, cols, sq, m_stream);
}

void CudaDevice::batchNormStatistics(const float *sum, const float *sq, double count, float eps,
                                     float momentum, int cols, float *mean, float *invstd,
                                     float *runningMean, float *runningVar)
{
    use();
    cuda::batchNormStatistics(sum, sq, count, eps, momentum, cols, mean, invstd, runningMean,
                              runningVar, m_stream);
}

void CudaDevice::batchNormForward(const float *x, const float *mean, const float *invstd,
                                  const float *gamma, const float *beta, int rows, int cols,
                                  float *xhat, float *y)
{
    use();
    cuda::batchNormForward(x, mean, invstd, gamma, beta, rows, cols, xhat, y, m_stream);
}

void CudaDevice::batchNormBackwardSums(const float *dy, const float *xhat, int rows, int cols,
                                       float *sums)
{
    use();
    cuda::batchNormBackwardSums(dy, xhat, rows, cols, sums, m_stream);
}

void CudaDevice::batchNormBackward(const float *dy, const float *xhat, const float *invstd,
                                   const float *gamma, const float *sums, float invCount,
                                   int rows, int cols, float *dx)
{
    use();
    cuda::batchNormBackward(dy, xhat, invstd, gamma, sums, invCount, rows, cols, dx, m_stream);
}

void CudaDevice::sgdStep(float *param, const float *grad, float lr, std::size_t n)
{
    use();
    cuda::sgdStep(param, grad, lr, n, m_stream);
}

void CudaDevice::momentumStep(float *param, const float *grad, float *buf, float lr,
                              float momentum, std::size_t n)
{
    use();
    cuda::momentumStep(param, grad, buf, lr, momentum, n, m_stream);
}

void CudaDevice::adamStep(float *param, const float *grad, float *m, float *v, float lr,
                          float beta1, float beta2, float eps, std::int64_t step, std::size_t n)
{
    use();
    // The bias corrections are computed on the host in double, as the CPU backend does.
    const double bc1 = 1.0 - std::pow(double(beta1), double(step));
    const double bc2 = 1.0 - std::pow(double(beta2), double(step));
    cuda::adamStep(param, grad, m, v, float(lr / bc1), float(1.0 / std::sqrt(bc2)), beta1, beta2,
                   eps, n, m_stream);
}

void CudaDevice::axpy(float alpha, const float *x, float *y, std::size_t n)
{
    use();
    cuda::axpy(alpha, x, y, n, m_stream);
}

void CudaDevice::scale(float alpha, float *x, std::size_t n)
{
    use();
    cuda::scale(alpha, x, n, m_stream);
}

double CudaDevice::sumSquares(const float *x, std::size_t n)
{
    use();
    cuda::sumSquares(x, n, m_results, m_scratch, m_stream);
    return readResults().sum;
}

bool CudaDevice::allFinite(const float *x, std::size_t n)
{
    use();
    cuda::countNonFinite(x, n, m_results, m_scratch, m_stream);
    return readResults().count == 0;
}

void CudaDevice::synchronize()
{
    use();
    check(cudaStreamSynchronize(m_stream), "cudaStreamSynchronize");
}

} // namespace syncopate::cuda
