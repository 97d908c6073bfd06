// The math a training step needs, behind one interface so that a worker's model does not know
// whether it runs on oneDNN's CPU kernels or on a GPU stream. Matrices are row-major float32.
// Pointers passed to a Device belong to that device (allocate() gives them out).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace syncopate {

enum class Activation : std::uint8_t { Relu, Tanh, Gelu, Identity };

const char *activationName(Activation a);

// Thrown by a device when it cannot do what it was asked (out of memory, a library failure).
class DeviceError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class DeviceTimer;
class LinearPlan;

// One linear layer as a model uses it: rows inputs of width in, out outputs, then activation
// (Identity for an output layer). The weight is [out, in] row-major (nn.Linear), the bias [out].
struct LinearShape {
    int rows = 0, in = 0, out = 0;
    Activation activation = Activation::Identity;
};

class Device {
public:
    virtual ~Device() = default;

    virtual std::string name() const = 0;

    // Memory. Allocations are zeroed; a zero size gives nullptr.
    virtual void *allocateBytes(std::size_t bytes) = 0;
    virtual void releaseBytes(void *p) = 0;
    virtual void uploadBytes(void *dst, const void *host, std::size_t bytes) = 0;
    virtual void downloadBytes(void *host, const void *src, std::size_t bytes) = 0;
    virtual void copyBytes(void *dst, const void *src, std::size_t bytes) = 0;
    // Copies src, which belongs to the device from, into dst on this device; ordered after
    // this device's queued work (from's queued work must be finished: synchronize it first).
    virtual void copyFrom(Device &from, void *dst, const void *src, std::size_t bytes) = 0;
    // Host memory the device copies from fastest (page-locked on a GPU).
    virtual void *allocateHost(std::size_t bytes) = 0;
    virtual void releaseHost(void *p) = 0;
    virtual void fill(float *dst, float value, std::size_t count) = 0;

    // Where this device's pointers live: -1 for host memory, else the GPU's ordinal. Devices
    // with the same memory space can read each other's buffers.
    virtual int memorySpace() const { return -1; }
    bool hostAccessible() const { return memorySpace() < 0; }

    // Sizes in floats.
    float *allocate(std::size_t count) { return static_cast<float *>(allocateBytes(count * sizeof(float))); }
    void release(float *p) { releaseBytes(p); }
    void upload(float *dst, const float *host, std::size_t count) { uploadBytes(dst, host, count * sizeof(float)); }
    void download(float *host, const float *src, std::size_t count) { downloadBytes(host, src, count * sizeof(float)); }
    void copy(float *dst, const float *src, std::size_t count) { copyBytes(dst, src, count * sizeof(float)); }

    // C[m,n] = alpha * op(A) op(B) + beta * C, op(A) is [m,k] and op(B) is [k,n].
    virtual void gemm(bool transA, bool transB, int m, int n, int k, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc) = 0;

    // Y[r,c] += bias[c]
    virtual void addBias(float *Y, const float *bias, int rows, int cols) = 0;
    // dbias[c] = sum_r dY[r,c]
    virtual void biasGrad(const float *dY, float *dbias, int rows, int cols) = 0;

    // A = f(Z); dZ = dA * f'(Z) (A is f(Z), used where cheaper, e.g. tanh).
    virtual void activationForward(Activation act, const float *Z, float *A, std::size_t n) = 0;
    virtual void activationBackward(Activation act, const float *Z, const float *A,
                                    const float *dA, float *dZ, std::size_t n) = 0;

    // Mean softmax cross-entropy over rows; writes dLogits = (softmax - onehot) / rows.
    // Labels outside [0, cols) throw DeviceError.
    virtual double softmaxCrossEntropy(const float *logits, const std::int32_t *labels, int rows,
                                       int cols, float *dLogits) = 0;
    // Number of rows whose arg-max equals the label.
    virtual int countCorrect(const float *logits, const std::int32_t *labels, int rows, int cols) = 0;
    // Mean over every element of (pred - target)^2 (PyTorch's MSELoss); dPred may be null.
    virtual double meanSquaredError(const float *pred, const float *target, std::size_t n,
                                    float *dPred) = 0;

    // Batch normalisation over the rows of x [rows, cols], one channel per column, split in
    // steps so that a model can all-reduce the per-channel sums between them (sync BN). The
    // channel sums themselves are biasGrad(x). Per-channel arrays have cols floats.
    // sq[c] = sum_r (x[r,c] - sum[c] * invCount)^2: the variance in two passes, no cancellation.
    virtual void batchNormCenteredSquares(const float *x, const float *sum, float invCount,
                                          int rows, int cols, float *sq) = 0;
    // From the sums over count rows: mean = sum / count, invstd = 1 / sqrt(sq / count + eps)
    // (the biased variance, as torch.nn.BatchNorm1d normalises). Unless runningMean is null,
    // also running = (1 - momentum) * running + momentum * batch, with the unbiased variance
    // sq / (count - 1) for runningVar (count > 1).
    virtual void batchNormStatistics(const float *sum, const float *sq, double count, float eps,
                                     float momentum, int cols, float *mean, float *invstd,
                                     float *runningMean, float *runningVar) = 0;
    // y = gamma * xhat + beta with xhat = (x - mean) * invstd; xhat is written unless null.
    // x may be xhat or y (in place).
    virtual void batchNormForward(const float *x, const float *mean, const float *invstd,
                                  const float *gamma, const float *beta, int rows, int cols,
                                  float *xhat, float *y) = 0;
    // sums[c] = sum_r dy[r,c] * xhat[r,c] (gamma's gradient), sums[cols + c] = sum_r dy[r,c]
    // (beta's): the order of gamma and beta in a model's parameters.
    virtual void batchNormBackwardSums(const float *dy, const float *xhat, int rows, int cols,
                                       float *sums) = 0;
    // dx = gamma * invstd * (dy - sums[cols + c] * invCount - xhat * sums[c] * invCount), with
    // sums over every row normalised together (invCount = 1 / their number); dx may be dy.
    virtual void batchNormBackward(const float *dy, const float *xhat, const float *invstd,
                                   const float *gamma, const float *sums, float invCount,
                                   int rows, int cols, float *dx) = 0;

    // Optimizer updates, PyTorch torch.optim semantics (no weight decay, no dampening).
    virtual void sgdStep(float *param, const float *grad, float lr, std::size_t n) = 0;
    // buf = momentum * buf + grad; param -= lr * buf
    virtual void momentumStep(float *param, const float *grad, float *buf, float lr,
                              float momentum, std::size_t n) = 0;
    // step is 1 for the first update.
    virtual void adamStep(float *param, const float *grad, float *m, float *v, float lr,
                          float beta1, float beta2, float eps, std::int64_t step,
                          std::size_t n) = 0;

    // Reductions and vector ops.
    virtual void axpy(float alpha, const float *x, float *y, std::size_t n) = 0;
    virtual void scale(float alpha, float *x, std::size_t n) = 0;
    // dst[i] = (src[0][i] + src[1][i] + ... + src[k-1][i]) / k, summed in that order (1/k not
    // applied for k == 1): the same bits as copying src[0], adding each of the others with
    // axpy(1) and scaling, which the default does in k + 1 passes; a device may do it in one.
    // Defined here: Device has no key function, and the CUDA plugin, which links none of
    // kernels/, needs its vtable and type info emitted where it is used.
    virtual void mean(const float *const *src, std::size_t k, float *dst, std::size_t n)
    {
        if (k == 0 || n == 0)
            return;
        copy(dst, src[0], n);
        for (std::size_t j = 1; j < k; ++j)
            axpy(1.0f, src[j], dst, n);
        if (k > 1)
            scale(1.0f / float(k), dst, n);
    }
    virtual double sumSquares(const float *x, std::size_t n) = 0;
    // False when any element is NaN or infinite.
    virtual bool allFinite(const float *x, std::size_t n) = 0;

    // The products of one linear layer, prepared when the model is built so that the device
    // can choose kernels, layouts and scratch memory then rather than on a worker's hot path.
    // The default composes gemm, addBias and the activation calls above (GenericLinearPlan).
    virtual std::unique_ptr<LinearPlan> planLinear(const LinearShape &shape);

    // Called on the thread that will drive this device, before its first step: per-thread
    // library state (the CPU's OpenMP thread count) is set here, outside the timed steps.
    virtual void bindThread() {}

    // Waits for queued work (a no-op on the CPU).
    virtual void synchronize() {}

    // Times spans on the device's own queue, or nullptr where the host clock is the truth.
    virtual DeviceTimer *timer() { return nullptr; }
};

// A span timed on a device, already mapped onto the host clock.
struct TimedSpan {
    std::uint64_t tag = 0; // the caller's, handed back as given
    double value = 0;
    std::int64_t start = 0, end = 0;
};

// Marks queued on a device's stream around the work of a span, read back once the device has
// passed them, so timing never waits for the device. begin()/end() nest.
class DeviceTimer {
public:
    virtual ~DeviceTimer() = default;
    // The host clock spans are mapped onto (nanoseconds); waits for the device once to line
    // the two clocks up. Call from the thread that uses the device, before begin().
    virtual void calibrate(std::function<std::int64_t()> hostNow) = 0;
    virtual void begin() = 0;
    virtual void end(std::uint64_t tag, double value) = 0;
    // Spans whose work is done, oldest first, without waiting; returns how many were written.
    virtual std::size_t poll(TimedSpan *out, std::size_t max) = 0;
};

// A linear layer's forward and backward products for a fixed shape.
class LinearPlan {
public:
    virtual ~LinearPlan() = default;
    // z = x W^T + b and, unless the activation is Identity, a = f(z) (Identity writes z only).
    // A plan that fuses f into the product may leave z unwritten (backward() then reads a):
    // callers hand the same z and a to backward(). a == z is allowed, for evaluation;
    // backward() is not called after that.
    virtual void forward(const float *x, const float *W, const float *b, float *z, float *a) = 0;
    // dA becomes dZ in place; dW = dZ^T x, db = the column sums of dZ, and dIn = dZ W unless
    // dIn is null (the first layer).
    virtual void backward(const float *x, const float *W, const float *z, const float *a,
                          float *dA, float *dW, float *db, float *dIn) = 0;
};

// The plan any device can run: its own gemm, bias and activation calls. Inline, so that the
// CUDA plugin, built apart, has it too.
class GenericLinearPlan final : public LinearPlan {
public:
    GenericLinearPlan(Device &device, const LinearShape &shape) : m_device(&device), m_s(shape) {}

    void forward(const float *x, const float *W, const float *b, float *z, float *a) override
    {
        m_device->gemm(false, true, m_s.rows, m_s.out, m_s.in, 1.0f, x, m_s.in, W, m_s.in, 0.0f,
                       z, m_s.out);
        m_device->addBias(z, b, m_s.rows, m_s.out);
        if (m_s.activation != Activation::Identity)
            m_device->activationForward(m_s.activation, z, a, std::size_t(m_s.rows) * m_s.out);
    }
    void backward(const float *x, const float *W, const float *z, const float *a, float *dA,
                  float *dW, float *db, float *dIn) override
    {
        if (m_s.activation != Activation::Identity)
            m_device->activationBackward(m_s.activation, z, a, dA, dA,
                                         std::size_t(m_s.rows) * m_s.out);
        m_device->gemm(true, false, m_s.out, m_s.in, m_s.rows, 1.0f, dA, m_s.out, x, m_s.in,
                       0.0f, dW, m_s.in);
        m_device->biasGrad(dA, db, m_s.rows, m_s.out);
        if (dIn)
            m_device->gemm(false, false, m_s.rows, m_s.in, m_s.out, 1.0f, dA, m_s.out, W, m_s.in,
                           0.0f, dIn, m_s.in);
    }

private:
    Device *m_device;
    LinearShape m_s;
};

inline std::unique_ptr<LinearPlan> Device::planLinear(const LinearShape &shape)
{
    return std::make_unique<GenericLinearPlan>(*this, shape);
}

struct DeviceOptions {
    bool tf32 = false; // TF32 tensor-core GEMMs (10-bit mantissa inputs, FP32 accumulate)
    // OpenMP threads of a CPU device's library calls, set on the thread that drives it
    // (device.threads_per_worker resolved); at least 1.
    int cpuThreads = 1;
};

// What device = "..." asks for: "cpu", "cuda" (every visible GPU) or "cuda:0,2".
struct DeviceSpec {
    bool cuda = false;
    std::vector<int> gpus; // empty: every visible GPU
};
// Throws std::invalid_argument saying what was expected.
DeviceSpec parseDeviceSpec(const std::string &text);

// A device buffer that releases itself.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(Device &device, std::size_t count)
        : m_device(&device), m_data(device.allocate(count)), m_count(count) {}
    ~DeviceBuffer() { reset(); }
    DeviceBuffer(DeviceBuffer &&o) noexcept { *this = std::move(o); }
    DeviceBuffer &operator=(DeviceBuffer &&o) noexcept {
        if (this != &o) {
            reset();
            m_device = o.m_device;
            m_data = o.m_data;
            m_count = o.m_count;
            o.m_data = nullptr;
            o.m_count = 0;
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer &) = delete;
    DeviceBuffer &operator=(const DeviceBuffer &) = delete;

    void reset() {
        if (m_data)
            m_device->release(m_data);
        m_data = nullptr;
        m_count = 0;
    }
    float *data() const { return m_data; }
    std::size_t size() const { return m_count; }
    std::size_t bytes() const { return m_count * sizeof(float); }

private:
    Device *m_device = nullptr;
    float *m_data = nullptr;
    std::size_t m_count = 0;
};

// The device of worker workerIndex: "cpu" always works; "cuda..." spreads workers round-robin
// over the GPUs named (or all of them) through the CUDA backend, and throws DeviceError naming
// what is missing when there is no backend or no GPU.
std::unique_ptr<Device> createDevice(const std::string &spec, int workerIndex,
                                     const DeviceOptions &options = {});

} // namespace syncopate
