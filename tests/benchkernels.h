// Helpers of the CPU benchmarks: the core's own FMA peak (the physical limit a GEMM is measured
// against) and timing that survives a shared machine (medians of interleaved repetitions).
#pragma once

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace syncopate::bench {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b);

// Median of reps timings of f, in seconds.
template <typename F>
double medianSeconds(int reps, F &&f)
{
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        const auto a = Clock::now();
        f();
        t.push_back(seconds(a, Clock::now()));
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

double median(std::vector<double> v);

struct Peak {
    double gflops = 0;
    std::string vectors; // "avx512", "avx2+fma" or "scalar"
};

// One thread's peak single-precision FMA rate: independent FMA chains held in registers, of
// the widest vectors this CPU has (checked at run time), best of a few runs.
Peak fmaPeak();

} // namespace syncopate::bench
