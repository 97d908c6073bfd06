#include "benchkernels.h"

#include <immintrin.h>

#include <algorithm>

namespace syncopate::bench {

double seconds(Clock::time_point a, Clock::time_point b)
{
    return std::chrono::duration<double>(b - a).count();
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

namespace {

// Sixteen chains: enough to cover an FMA latency of 4 cycles on two ports with room to spare,
// and 16 of the 32 zmm registers. The result is returned so the loop cannot be dropped.
__attribute__((target("avx512f"))) float fmaLoop512(long iterations)
{
    // Named, not an array: GCC at -O2 keeps an array of vectors in memory.
    __m512 a0 = _mm512_set1_ps(0.0f), a1 = _mm512_set1_ps(0.001f), a2 = _mm512_set1_ps(0.002f),
           a3 = _mm512_set1_ps(0.003f), a4 = _mm512_set1_ps(0.004f), a5 = _mm512_set1_ps(0.005f),
           a6 = _mm512_set1_ps(0.006f), a7 = _mm512_set1_ps(0.007f), a8 = _mm512_set1_ps(0.008f),
           a9 = _mm512_set1_ps(0.009f), a10 = _mm512_set1_ps(0.010f), a11 = _mm512_set1_ps(0.011f),
           a12 = _mm512_set1_ps(0.012f), a13 = _mm512_set1_ps(0.013f), a14 = _mm512_set1_ps(0.014f),
           a15 = _mm512_set1_ps(0.015f);
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (long n = 0; n < iterations; ++n) {
        a0 = _mm512_fmadd_ps(a0, m, c);
        a1 = _mm512_fmadd_ps(a1, m, c);
        a2 = _mm512_fmadd_ps(a2, m, c);
        a3 = _mm512_fmadd_ps(a3, m, c);
        a4 = _mm512_fmadd_ps(a4, m, c);
        a5 = _mm512_fmadd_ps(a5, m, c);
        a6 = _mm512_fmadd_ps(a6, m, c);
        a7 = _mm512_fmadd_ps(a7, m, c);
        a8 = _mm512_fmadd_ps(a8, m, c);
        a9 = _mm512_fmadd_ps(a9, m, c);
        a10 = _mm512_fmadd_ps(a10, m, c);
        a11 = _mm512_fmadd_ps(a11, m, c);
        a12 = _mm512_fmadd_ps(a12, m, c);
        a13 = _mm512_fmadd_ps(a13, m, c);
        a14 = _mm512_fmadd_ps(a14, m, c);
        a15 = _mm512_fmadd_ps(a15, m, c);
    }
    const __m512 s = _mm512_add_ps(
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                      _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7))),
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
                      _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15))));
    return _mm512_reduce_add_ps(s);
}

// Twelve chains of 256 bits: 12 of the 16 ymm registers.
__attribute__((target("avx2,fma"))) float fmaLoop256(long iterations)
{
    __m256 a0 = _mm256_set1_ps(0.0f), a1 = _mm256_set1_ps(0.001f), a2 = _mm256_set1_ps(0.002f),
           a3 = _mm256_set1_ps(0.003f), a4 = _mm256_set1_ps(0.004f), a5 = _mm256_set1_ps(0.005f),
           a6 = _mm256_set1_ps(0.006f), a7 = _mm256_set1_ps(0.007f), a8 = _mm256_set1_ps(0.008f),
           a9 = _mm256_set1_ps(0.009f), a10 = _mm256_set1_ps(0.010f), a11 = _mm256_set1_ps(0.011f);
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (long n = 0; n < iterations; ++n) {
        a0 = _mm256_fmadd_ps(a0, m, c);
        a1 = _mm256_fmadd_ps(a1, m, c);
        a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c);
        a4 = _mm256_fmadd_ps(a4, m, c);
        a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c);
        a7 = _mm256_fmadd_ps(a7, m, c);
        a8 = _mm256_fmadd_ps(a8, m, c);
        a9 = _mm256_fmadd_ps(a9, m, c);
        a10 = _mm256_fmadd_ps(a10, m, c);
        a11 = _mm256_fmadd_ps(a11, m, c);
    }
    const __m256 s = _mm256_add_ps(
        _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                      _mm256_add_ps(a4, a5)),
        _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a6, a7), _mm256_add_ps(a8, a9)),
                      _mm256_add_ps(a10, a11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

float fmaLoopScalar(long iterations)
{
    float acc[8];
    for (int i = 0; i < 8; ++i)
        acc[i] = float(i) * 1e-3f;
    for (long n = 0; n < iterations; ++n)
        for (int i = 0; i < 8; ++i)
            acc[i] = acc[i] * 0.999999f + 1e-7f;
    float s = 0;
    for (float v : acc)
        s += v;
    return s;
}

} // namespace

Peak fmaPeak()
{
    __builtin_cpu_init();
    Peak p;
    double flopsPerIteration = 0;
    float (*loop)(long) = nullptr;
    if (__builtin_cpu_supports("avx512f")) {
        p.vectors = "avx512";
        loop = fmaLoop512;
        flopsPerIteration = 16 * 16 * 2;
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        p.vectors = "avx2+fma";
        loop = fmaLoop256;
        flopsPerIteration = 12 * 8 * 2;
    } else {
        p.vectors = "scalar";
        loop = fmaLoopScalar;
        flopsPerIteration = 8 * 2;
    }
    const long iterations = 20'000'000;
    volatile float sink = loop(iterations / 10); // warm up (and let the clock rise)
    double best = 0;
    for (int r = 0; r < 5; ++r) {
        const auto a = Clock::now();
        sink = sink + loop(iterations);
        best = std::max(best, flopsPerIteration * double(iterations) / seconds(a, Clock::now()) / 1e9);
    }
    p.gflops = best;
    return p;
}

} // namespace syncopate::bench
