// Benchmarks (not part of ctest): what a training step costs next to its GEMMs, what recording
// a span costs, and what each mode costs with and without a straggler. Figures are ratios
// measured in one run, since the machine may be shared.
#include "cpu/cpudevice.h"
#include "engine.h"
#include "metrics.h"
#include "model.h"
#include "optimizer.h"
#include "random.h"
#include "session.h"
#include "chunkfile.h"
#include "tracemodel.h"

#include <unistd.h>
#include <filesystem>

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

using namespace syncopate;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point a, Clock::time_point b)
{
    return std::chrono::duration<double>(b - a).count();
}

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

void stepVersusGemms()
{
    const std::vector<int> layers = {784, 1024, 1024, 10};
    const int batch = 128;
    CpuDevice dev;
    ModelSpec spec{layers, Activation::Relu, true, 0};
    Model model(dev, spec, batch);
    model.setParams(Model::initialParams(spec, 1));
    Optimizer opt(dev, Optimizer::Kind::Sgd, spec.paramCount(), 0.01f);
    Rng rng(1);
    std::vector<float> x(std::size_t(batch) * 784);
    for (auto &v : x)
        v = float(rng.uniform());
    std::vector<std::int32_t> labels(batch);
    for (auto &l : labels)
        l = int(rng.below(10));

    auto step = [&] {
        model.forwardLoss(x.data(), labels.data(), nullptr, nullptr, 0);
        model.backward(nullptr, 0);
        opt.step(model.params(), model.grads());
    };
    // The same GEMMs alone: forward, weight gradient, and input gradient (not for layer 0).
    std::vector<std::vector<float>> bufs;
    const int L = int(layers.size()) - 1;
    std::vector<float> w(spec.paramCount(), 0.01f), a(std::size_t(batch) * 1024, 0.5f),
        z(std::size_t(batch) * 1024), g(std::size_t(batch) * 1024, 0.1f), dw(spec.paramCount());
    auto gemms = [&] {
        const float *in = x.data();
        for (int l = 0; l < L; ++l) {
            const int i = layers[l], o = layers[l + 1];
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, o, i, 1, in, i,
                        w.data() + spec.weightOffset(l), i, 0, z.data(), o);
            in = a.data();
        }
        for (int l = L - 1; l >= 0; --l) {
            const int i = layers[l], o = layers[l + 1];
            const float *inp = l == 0 ? x.data() : a.data();
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o, i, batch, 1, g.data(), o, inp,
                        i, 0, dw.data() + spec.weightOffset(l), i);
            if (l > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, i, o, 1, g.data(), o,
                            w.data() + spec.weightOffset(l), i, 0, z.data(), i);
        }
    };
    for (int i = 0; i < 5; ++i) {
        step();
        gemms();
    }
    // Interleave the two so that both see the same machine load.
    std::vector<double> ts, tg;
    for (int r = 0; r < 15; ++r) {
        ts.push_back(medianSeconds(3, step));
        tg.push_back(medianSeconds(3, gemms));
    }
    std::sort(ts.begin(), ts.end());
    std::sort(tg.begin(), tg.end());
    const double s = ts[ts.size() / 2], gm = tg[tg.size() / 2];
    const double flops = 2.0 * batch *
                         (784.0 * 1024 * 2 + 1024.0 * 1024 * 3 + 1024.0 * 10 * 3);
    std::printf("step 784-1024-1024-10, batch 128, one worker (OpenBLAS, 1 thread)\n");
    std::printf("  training step        %8.3f ms\n", s * 1e3);
    std::printf("  same GEMMs alone     %8.3f ms  (%.1f GFLOP/s)\n", gm * 1e3, flops / gm / 1e9);
    std::printf("  ratio step / GEMMs   %8.3f  (goal <= 1.15)\n\n", s / gm);
}

void spanCost()
{
    RunClock clock;
    // Large enough that this loop, which records far faster than any worker (40 M spans/s),
    // never waits for the collector: what is measured is the worker's own cost while the
    // collector streams beside it. The collector's cost per record is reported apart.
    RecordRing ring(std::size_t(1) << 23);
    Recorder rec(0, clock, ring);
    std::atomic<std::int64_t> collectNs{0}, collected{0};
    std::atomic<bool> done{false};
    // The collector streams what it drains as a run does: row file and summaries.
    const std::string dir = "/tmp/syncopate-bench-span-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    std::thread collector([&] {
        ChunkWriter file(dir + "/w0.syr", {0, RowKind::Worker, "worker 0"});
        TraceModel summary(1, false, 1);
        summary.setKeepRaw(false);
        std::vector<Record> out;
        out.reserve(1 << 16);
        auto take = [&] {
            out.clear();
            ring.drain(out);
            const auto a = Clock::now();
            for (const Record &r : out)
                file.append(r);
            summary.append(out);
            collectNs += std::int64_t(seconds(a, Clock::now()) * 1e9);
            collected += std::int64_t(out.size());
        };
        while (!done.load()) {
            take();
            std::this_thread::sleep_for(std::chrono::microseconds(500));
        }
        take();
        file.flush();
    });
    const int n = 3'000'000; // both loops together stay inside the ring
    // Back-to-back phases, as a worker's step records them: each span starts where the last
    // ended, one clock read and one ring push per span.
    const auto a = Clock::now();
    std::int64_t last = rec.now();
    for (int i = 0; i < n; ++i)
        last = rec.spanToNow(Phase::Forward, std::uint32_t(i), last);
    const double t = seconds(a, Clock::now());
    // A span on its own (ScopedSpan): two clock reads. (Reduce: a compute phase would add its
    // CPU clock reads, reported apart.)
    const auto a2 = Clock::now();
    for (int i = 0; i < n; ++i) {
        ScopedSpan s(&rec, Phase::Reduce, std::uint32_t(i));
    }
    const double tScoped = seconds(a2, Clock::now());
    done = true;
    collector.join();
    const auto b = Clock::now();
    volatile std::int64_t sink = 0;
    for (int i = 0; i < n; ++i)
        sink = sink + clock.now();
    const double clockOnly = seconds(b, Clock::now());
    // The thread's CPU clock, which compute spans read to tell time off the CPU (a system call).
    const int m = 200'000;
    const auto c = Clock::now();
    for (int i = 0; i < m; ++i)
        sink = sink + Recorder::threadCpuNs();
    const double cpuClock = seconds(c, Clock::now()) / m;
    std::printf("recording\n");
    std::printf("  back-to-back span (one clock read + ring push) %6.1f ns\n", t / n * 1e9);
    std::printf("  one ScopedSpan (two clock reads + ring push)  %6.1f ns\n", tScoped / n * 1e9);
    std::printf("  of which one clock read                        %6.1f ns\n", clockOnly / n * 1e9);
    std::printf("  thread CPU clock read (compute spans, ~4/step) %6.1f ns\n", cpuClock * 1e9);
    std::printf("  collector: row file + summaries per record     %6.1f ns\n",
                double(collectNs.load()) / double(std::max<std::int64_t>(1, collected.load())));
    std::printf("span_ns=%.1f\n\n", t / n * 1e9);
    std::filesystem::remove_all(dir);
}

// A run with tracing on and streamed to disk against the same run recording only its counters
// (the loss and staleness it needs), interleaved so both see the same machine.
void tracingOverhead()
{
    nlohmann::json c = {{"mode", "sync"},
                        {"workers", 2},
                        {"model", {{"layers", {32, 256, 256, 10}}}},
                        {"train", {{"steps", 1000}, {"batch", 64}}},
                        {"eval", {{"samples", 0}}}};
    PreparedRun p = prepareRun(c);
    std::vector<double> on, off, ratios;
    for (int rep = 0; rep < 9; ++rep)
        for (bool tracing : {rep % 2 == 0, rep % 2 != 0}) {
            Engine e(p.config, p.train, p.eval);
            e.setTracing(tracing);
            const std::string dir = "/tmp/syncopate-bench-trace-" + std::to_string(::getpid());
            std::filesystem::remove_all(dir);
            if (tracing)
                e.setOutputDirectory(dir);
            e.start();
            e.wait();
            (tracing ? on : off).push_back(double(e.elapsedNs()) / 1e9);
            std::filesystem::remove_all(dir);
            if (on.size() == off.size())
                ratios.push_back(on.back() / off.back());
        }
    // Each pair ran back to back (in alternating order), so a ratio sees one state of the
    // machine; the median of the ratios is what tracing costs, with the spread beside it.
    std::sort(on.begin(), on.end());
    std::sort(off.begin(), off.end());
    std::sort(ratios.begin(), ratios.end());
    const double a = on[on.size() / 2], b = off[off.size() / 2];
    std::printf("tracing: 2 workers, 32-256-256-10, batch 64, 1000 steps, 9 pairs\n");
    std::printf("  spans recorded and streamed  %8.3f s (median)\n", a);
    std::printf("  counters only                %8.3f s (median)\n", b);
    std::printf("  ratio per pair: min %.4f, median %.4f, max %.4f\n", ratios.front(),
                ratios[ratios.size() / 2], ratios.back());
    std::printf("tracing_overhead=%.4f\n\n", ratios[ratios.size() / 2]);
}

void modes()
{
    std::printf("modes: 4 workers, 32-512-512-512-512-10 MLP, batch 64, 150 steps, blobs\n");
    std::printf("  %-30s %10s %8s %10s %10s %12s %10s\n", "mode", "samples/s", "stall",
                "stale avg", "stale max", "peak act KiB", "recompute");
    for (const char *straggler : {"none", "3x"}) {
        for (const char *mode : {"sync", "async", "checkpointed"}) {
            nlohmann::json c = {{"mode", mode},
                                {"workers", 4},
                                {"model", {{"layers", {32, 512, 512, 512, 512, 10}}}},
                                {"train", {{"steps", 150}, {"batch", 64}}},
                                {"eval", {{"samples", 0}}}};
            if (std::strcmp(straggler, "3x") == 0)
                c["workers_slowdown"] = {1, 1, 1, 3};
            PreparedRun p = prepareRun(c);
            Engine e(p.config, p.train, p.eval);
            e.start();
            e.wait();
            const auto s = e.summary();
            const std::string label = std::string(mode) + ", straggler " + straggler;
            std::printf("  %-30s %10.0f %7.1f%% %10.2f %10lld %12.0f %9.1f%%\n", label.c_str(),
                        s["samples_per_s"].get<double>(), 100 * s["stall_fraction"].get<double>(),
                        s["staleness_mean"].get<double>(), (long long)s["staleness_max"].get<std::int64_t>(),
                        s["peak_activation_bytes"].get<double>() / 1024,
                        100 * s["recompute_ms"].get<double>() / 1e3 / (s["wall_s"].get<double>() * 4));
        }
    }
    std::printf("  (recompute: share of worker time spent recomputing)\n");
}

} // namespace

int main(int argc, char **argv)
{
    const bool all = argc < 2;
    auto want = [&](const char *name) {
        return all || std::strcmp(argv[1], name) == 0;
    };
    configureCpuBlas();
    if (want("step"))
        stepVersusGemms();
    if (want("span"))
        spanCost();
    if (want("tracing"))
        tracingOverhead();
    if (want("modes"))
        modes();
    return 0;
}
