// oneDNN behind a small surface: a context per CPU device (engine, stream, one scratchpad that
// every primitive of the device shares) and a matmul prepared once for fixed shapes and
// layouts, run on the hot path with no allocation of ours. Debian's oneDNN runs its threads on
// GNU OpenMP, whose thread count belongs to the calling thread: setThreads() sets it.
#pragma once

#include "device.h"

#include <cstddef>
#include <memory>
#include <string>

namespace syncopate::onednn {

// The instruction set oneDNN's kernels use on this machine, e.g. "avx512_core_bf16".
std::string cpuIsa();
// "oneDNN 2.6.3 (OpenMP)".
std::string version();

// OpenMP threads for the library calls of the calling thread (at least 1), and how many
// that thread has now.
void setThreads(int threads);
int threads();

// Nonzero while the calling thread is inside a oneDNN call of ours (tests count what the
// library allocates apart from what the engine allocates).
int insideCalls();

class Context;

// C[m,n] = op(A) op(B) (+ bias[n]) (then f), op(A) [m,k], op(B) [k,n], all row-major with
// their natural leading dimensions. Activation Identity: no post-op; Relu and Tanh fuse as
// post-ops; Gelu is not fused (the caller applies it).
struct MatmulShape {
    int m = 0, n = 0, k = 0;
    bool transA = false, transB = false;
    bool bias = false;
    Activation post = Activation::Identity;
};

class Matmul {
public:
    // Creates the primitive for ctx's threads; throws DeviceError when oneDNN cannot.
    Matmul(Context &ctx, const MatmulShape &shape);
    ~Matmul();
    Matmul(const Matmul &) = delete;
    Matmul &operator=(const Matmul &) = delete;

    void run(const float *A, const float *B, const float *bias, float *C);
    // oneDNN's name for the kernel it chose, e.g. "brg:avx512_core".
    std::string implementation() const;
    const MatmulShape &shape() const { return m_shape; }

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
    MatmulShape m_shape;
    Context *m_ctx;
};

// One per CPU device (so per worker): primitives of a device run on its thread only.
class Context {
public:
    explicit Context(int threads);
    ~Context();
    Context(const Context &) = delete;
    Context &operator=(const Context &) = delete;

    int threads() const { return m_threads; }
    // Makes the calling thread use this context's thread count (cheap when it already does).
    void bindThread();
    // Grows the shared scratchpad to at least bytes (at plan time only).
    void reserveScratch(std::size_t bytes);
    void *scratch() const { return m_scratch; }

    struct Handles;
    Handles &handles() { return *m_handles; }

private:
    int m_threads;
    std::unique_ptr<Handles> m_handles;
    void *m_scratch = nullptr;
    std::size_t m_scratchBytes = 0;
};

// C[m,n] = alpha op(A) op(B) + beta C with leading dimensions, oneDNN's own sgemm (for the
// generic Device::gemm; the model's layers use Matmul).
void sgemm(bool transA, bool transB, int m, int n, int k, float alpha, const float *A, int lda,
           const float *B, int ldb, float beta, float *C, int ldc);

} // namespace syncopate::onednn
