#include "onednn.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#include <cstring>

// Declared here rather than through omp.h: GCC and clang ship different omp.h files, the ABI
// of these two is the same, and the library they resolve to is the one oneDNN links (libgomp).
extern "C" {
int omp_get_max_threads(void);
void omp_set_num_threads(int);
}

namespace syncopate::onednn {
namespace {

thread_local int t_inside = 0;

// Marks the calling thread as inside oneDNN for as long as it lives.
struct Inside {
    Inside() { ++t_inside; }
    ~Inside() { --t_inside; }
};

[[noreturn]] void fail(const std::string &what, const dnnl::error &e)
{
    throw DeviceError("oneDNN: " + what + ": " + e.what());
}

void check(dnnl_status_t status, const char *what)
{
    if (status != dnnl_success)
        throw DeviceError(std::string("oneDNN: ") + what + " failed (status " +
                          std::to_string(int(status)) + ")");
}

} // namespace

int insideCalls() { return t_inside; }

std::string cpuIsa()
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_all: return "all";
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: break;
    }
    return "unknown";
}

std::string version()
{
    const dnnl_version_t *v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch) + " (OpenMP)";
}

void setThreads(int threads) { omp_set_num_threads(threads < 1 ? 1 : threads); }

int threads() { return omp_get_max_threads(); }

struct Context::Handles {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
};

Context::Context(int threads) : m_threads(threads < 1 ? 1 : threads)
{
    try {
        m_handles = std::make_unique<Handles>();
    } catch (const dnnl::error &e) {
        fail("creating the CPU engine", e);
    }
}

Context::~Context() { std::free(m_scratch); }

void Context::bindThread()
{
    if (omp_get_max_threads() != m_threads)
        omp_set_num_threads(m_threads);
}

void Context::reserveScratch(std::size_t bytes)
{
    if (bytes <= m_scratchBytes)
        return;
    const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
    void *p = std::aligned_alloc(4096, rounded);
    if (!p)
        throw DeviceError("cpu: out of memory allocating " + std::to_string(rounded) +
                          " bytes of oneDNN scratchpad");
    std::free(m_scratch);
    m_scratch = p;
    m_scratchBytes = rounded;
}

struct Matmul::Impl {
    dnnl::matmul primitive;
    // Memory objects made once; run() only points them at this call's buffers.
    dnnl::memory a, b, bias, c, scratch;
    dnnl_exec_arg_t args[5] = {};
    int nargs = 0;
    bool hasScratch = false;
};

Matmul::Matmul(Context &ctx, const MatmulShape &s) : m_impl(std::make_unique<Impl>()), m_shape(s), m_ctx(&ctx)
{
    using dnnl::memory;
    using tag = memory::format_tag;
    const auto f32 = memory::data_type::f32;
    const memory::dim M = s.m, N = s.n, K = s.k;
    // Row-major A [m,k] is tag ab; its transpose, stored as [k,m], is the [m,k] view tag ba.
    const memory::desc ad({M, K}, f32, s.transA ? tag::ba : tag::ab);
    const memory::desc bd({K, N}, f32, s.transB ? tag::ba : tag::ab);
    const memory::desc cd({M, N}, f32, tag::ab);
    const memory::desc biasd = s.bias ? memory::desc({1, N}, f32, tag::ab) : memory::desc();
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (s.post == Activation::Relu || s.post == Activation::Tanh) {
        dnnl::post_ops ops;
        ops.append_eltwise(1.0f,
                           s.post == Activation::Relu ? dnnl::algorithm::eltwise_relu
                                                      : dnnl::algorithm::eltwise_tanh,
                           0.0f, 0.0f);
        attr.set_post_ops(ops);
    }
    Impl &d = *m_impl;
    auto &h = ctx.handles();
    // Kernels choose their blocking for the thread count they will run with.
    const int before = omp_get_max_threads();
    omp_set_num_threads(ctx.threads());
    try {
        Inside inside;
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, biasd, cd), attr, h.engine);
        d.primitive = dnnl::matmul(pd);
        d.a = memory(ad, h.engine, DNNL_MEMORY_NONE);
        d.b = memory(bd, h.engine, DNNL_MEMORY_NONE);
        d.c = memory(cd, h.engine, DNNL_MEMORY_NONE);
        d.args[d.nargs++] = {DNNL_ARG_SRC, d.a.get()};
        d.args[d.nargs++] = {DNNL_ARG_WEIGHTS, d.b.get()};
        d.args[d.nargs++] = {DNNL_ARG_DST, d.c.get()};
        if (s.bias) {
            d.bias = memory(biasd, h.engine, DNNL_MEMORY_NONE);
            d.args[d.nargs++] = {DNNL_ARG_BIAS, d.bias.get()};
        }
        const memory::desc sd = pd.scratchpad_desc();
        if (sd.get_size() > 0) {
            ctx.reserveScratch(sd.get_size());
            d.scratch = memory(sd, h.engine, DNNL_MEMORY_NONE);
            d.args[d.nargs++] = {DNNL_ARG_SCRATCHPAD, d.scratch.get()};
            d.hasScratch = true;
        }
    } catch (const dnnl::error &e) {
        omp_set_num_threads(before);
        fail("preparing a " + std::to_string(s.m) + "x" + std::to_string(s.k) + "x" +
                 std::to_string(s.n) + " matmul",
             e);
    }
    omp_set_num_threads(before);
}

Matmul::~Matmul() = default;

std::string Matmul::implementation() const
{
    const_dnnl_primitive_desc_t pd = nullptr;
    check(dnnl_primitive_get_primitive_desc(m_impl->primitive.get(), &pd), "querying a matmul");
    const char *name = nullptr;
    check(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name), "querying a matmul");
    return name ? name : "?";
}

void Matmul::run(const float *A, const float *B, const float *bias, float *C)
{
    Impl &d = *m_impl;
    Inside inside;
    m_ctx->bindThread();
    // The C API: the C++ execute() builds a std::unordered_map of arguments on every call.
    check(dnnl_memory_set_data_handle_v2(d.a.get(), const_cast<float *>(A), nullptr), "binding A");
    check(dnnl_memory_set_data_handle_v2(d.b.get(), const_cast<float *>(B), nullptr), "binding B");
    check(dnnl_memory_set_data_handle_v2(d.c.get(), C, nullptr), "binding C");
    if (m_shape.bias)
        check(dnnl_memory_set_data_handle_v2(d.bias.get(), const_cast<float *>(bias), nullptr),
              "binding the bias");
    if (d.hasScratch)
        check(dnnl_memory_set_data_handle_v2(d.scratch.get(), m_ctx->scratch(), nullptr),
              "binding the scratchpad");
    check(dnnl_primitive_execute(d.primitive.get(), m_ctx->handles().stream.get(), d.nargs, d.args),
          "running a matmul");
}

void sgemm(bool transA, bool transB, int m, int n, int k, float alpha, const float *A, int lda,
           const float *B, int ldb, float beta, float *C, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    Inside inside;
    check(dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', m, n, k, alpha, A, lda, B, ldb,
                     beta, C, ldc),
          "sgemm");
}

} // namespace syncopate::onednn
