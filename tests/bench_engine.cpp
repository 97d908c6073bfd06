// Benchmarks (not part of ctest): the core's FMA peak, the GEMM rate of each layer shape, what a
// training step costs next to its GEMMs, how sync scales over cores, what a clock read and
// recording a span cost, and what each mode costs with and without a straggler. One line per
// figure as key=value; ratios are measured in one run, since the machine may be shared.
// Usage: bench_engine [peak|gemm|step|scaling|clock|span|tracing|modes] (none: all).
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

#include "benchkernels.h"
#include "cpu/onednn.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <thread>

using namespace syncopate;
using namespace syncopate::bench;

namespace {

// Layer shapes of the two models the figures are for.
struct Net {
    std::vector<int> layers;
    int batch;
    const char *name;
};
const Net kNets[] = {{{784, 256, 256, 10}, 64, "784-256-256-10, batch 64"},
                     {{784, 1024, 1024, 10}, 128, "784-1024-1024-10, batch 128"}};

double g_peak = 0; // GFLOP/s, once measured

double peak()
{
    if (g_peak == 0) {
        const Peak p = fmaPeak();
        g_peak = p.gflops;
        std::printf("peak: one thread, register-resident FMA chains of %s vectors\n", p.vectors.c_str());
        std::printf("peak_gflops=%.1f\n\n", p.gflops);
    }
    return g_peak;
}

std::vector<float> randomFloats(std::size_t n, std::uint64_t seed, double scale = 1.0)
{
    Rng rng(seed);
    std::vector<float> v(n);
    for (auto &x : v)
        x = float(rng.uniform(-scale, scale));
    return v;
}

// The three products of every layer of a net as one device's matmul primitives would run
// them, without bias, activation or anything else: what a step costs in GEMMs alone.
class NetGemms {
public:
    NetGemms(onednn::Context &ctx, const Net &net) : m_net(net)
    {
        const int L = int(net.layers.size()) - 1;
        std::size_t maxWidth = 0, params = 0;
        for (int l = 0; l < L; ++l) {
            const int in = net.layers[l], out = net.layers[l + 1], rows = net.batch;
            m_forward.push_back(std::make_unique<onednn::Matmul>(
                ctx, onednn::MatmulShape{rows, out, in, false, true}));
            m_weightGrad.push_back(std::make_unique<onednn::Matmul>(
                ctx, onednn::MatmulShape{out, in, rows, true, false}));
            m_inputGrad.push_back(std::make_unique<onednn::Matmul>(
                ctx, onednn::MatmulShape{rows, in, out, false, false}));
            maxWidth = std::max<std::size_t>(maxWidth, std::size_t(std::max(in, out)));
            params += std::size_t(in) * out;
        }
        m_w = randomFloats(params, 1, 0.05);
        m_dw.assign(params, 0.0f);
        m_a = randomFloats(std::size_t(net.batch) * maxWidth, 2);
        m_z.assign(m_a.size(), 0.0f);
        m_g = randomFloats(m_a.size(), 3);
    }
    void run()
    {
        const int L = int(m_forward.size());
        std::size_t off = 0;
        std::vector<std::size_t> offsets;
        for (int l = 0; l < L; ++l) {
            offsets.push_back(off);
            off += std::size_t(m_net.layers[l]) * m_net.layers[l + 1];
        }
        for (int l = 0; l < L; ++l)
            m_forward[l]->run(m_a.data(), m_w.data() + offsets[l], nullptr, m_z.data());
        for (int l = L - 1; l >= 0; --l) {
            m_weightGrad[l]->run(m_g.data(), m_a.data(), nullptr, m_dw.data() + offsets[l]);
            if (l > 0)
                m_inputGrad[l]->run(m_g.data(), m_w.data() + offsets[l], nullptr, m_z.data());
        }
    }
    double flops() const
    {
        double f = 0;
        for (std::size_t l = 0; l + 1 < m_net.layers.size(); ++l)
            f += 2.0 * m_net.batch * m_net.layers[l] * m_net.layers[l + 1] * (l > 0 ? 3 : 2);
        return f;
    }
    const std::vector<std::unique_ptr<onednn::Matmul>> &forward() const { return m_forward; }
    const std::vector<std::unique_ptr<onednn::Matmul>> &weightGrad() const { return m_weightGrad; }
    const std::vector<std::unique_ptr<onednn::Matmul>> &inputGrad() const { return m_inputGrad; }

private:
    Net m_net;
    std::vector<std::unique_ptr<onednn::Matmul>> m_forward, m_weightGrad, m_inputGrad;
    std::vector<float> m_w, m_dw, m_a, m_z, m_g;
};

// Each layer shape's products, one thread: MxKxN is op(A) [M,K] times op(B) [K,N].
void gemmRates()
{
    const double pk = peak();
    onednn::Context ctx(1);
    ctx.bindThread();
    std::printf("gemm: oneDNN matmul primitives, one thread, %s kernels\n", cpuIsa().c_str());
    for (const Net &net : kNets) {
        NetGemms g(ctx, net);
        std::printf("  %s\n", net.name);
        auto one = [&](const char *what, onednn::Matmul &m) {
            const auto &s = m.shape();
            const std::size_t aN = std::size_t(s.m) * s.k, bN = std::size_t(s.k) * s.n;
            std::vector<float> A = randomFloats(aN, 4), B = randomFloats(bN, 5, 0.05),
                               C(std::size_t(s.m) * s.n);
            const double flops = 2.0 * s.m * s.n * s.k;
            // Enough repetitions for ~20 ms per sample at 70% of peak.
            const int reps = std::max(3, int(0.02 * 0.7 * pk * 1e9 / flops));
            auto body = [&] {
                for (int r = 0; r < reps; ++r)
                    m.run(A.data(), B.data(), nullptr, C.data());
            };
            body();
            std::vector<double> t;
            for (int i = 0; i < 7; ++i)
                t.push_back(medianSeconds(1, body) / reps);
            const double gf = flops / median(t) / 1e9;
            std::printf("  %-9s gemm_shape=%dx%dx%d gemm_gflops=%.1f (%.0f%% of peak) %s\n", what,
                        s.m, s.k, s.n, gf, 100 * gf / pk, m.implementation().c_str());
        };
        for (std::size_t l = 0; l < g.forward().size(); ++l) {
            one("forward", *g.forward()[l]);
            one("dW", *g.weightGrad()[l]);
            if (l > 0)
                one("dIn", *g.inputGrad()[l]);
        }
    }
    std::printf("\n");
}

// A training step (forward with fused bias and activation, loss, backward, SGD update) next to
// its GEMMs alone, interleaved so both see the same machine load.
void stepVersusGemms()
{
    for (const Net &net : kNets) {
        CpuDevice dev(1);
        dev.bindThread();
        ModelSpec spec{net.layers, Activation::Relu, true, 0};
        Model model(dev, spec, net.batch);
        model.setParams(Model::initialParams(spec, 1));
        Optimizer opt(dev, Optimizer::Kind::Sgd, spec.paramCount(), 0.01f);
        Rng rng(1);
        std::vector<float> x(std::size_t(net.batch) * net.layers[0]);
        for (auto &v : x)
            v = float(rng.uniform());
        std::vector<std::int32_t> labels(std::size_t(net.batch));
        for (auto &l : labels)
            l = int(rng.below(std::uint64_t(net.layers.back())));
        auto step = [&] {
            model.forwardLoss(x.data(), labels.data(), nullptr, nullptr, 0);
            model.backward(nullptr, 0);
            opt.step(model.params(), model.grads());
        };
        onednn::Context ctx(1);
        NetGemms gemms(ctx, net);
        auto g = [&] { gemms.run(); };
        const int inner = net.batch == 64 ? 20 : 5;
        auto steps = [&] {
            for (int i = 0; i < inner; ++i)
                step();
        };
        auto gemmsOnly = [&] {
            for (int i = 0; i < inner; ++i)
                g();
        };
        for (int i = 0; i < 3; ++i) {
            steps();
            gemmsOnly();
        }
        std::vector<double> ts, tg;
        for (int r = 0; r < 15; ++r) {
            ts.push_back(medianSeconds(3, steps) / inner);
            tg.push_back(medianSeconds(3, gemmsOnly) / inner);
        }
        const double s = median(ts), gm = median(tg);
        std::printf("step %s, one worker, one thread (oneDNN, %s)\n", net.name, cpuIsa().c_str());
        std::printf("  GEMMs alone %.1f GFLOP/s (%.0f%% of the %.1f GFLOP/s peak)\n",
                    gemms.flops() / gm / 1e9, 100 * gemms.flops() / gm / 1e9 / peak(), peak());
        std::printf("  ratio step / GEMMs %.3f (goal <= 1.10)\n", s / gm);
        std::printf("step_ms=%.4f gemms_ms=%.4f\n\n", s * 1e3, gm * 1e3);
    }
}

// Sync, no straggler: 1, 2, 4, ... workers of one thread each, as far as the cores go. A shared
// machine's speed drifts between runs by more than the effect measured, so the counts run
// interleaved, round after round, and each round's ratio to its own 1-worker run is a sample:
// the median of those is the figure, their range beside it.
void scaling()
{
    const int cores = defaultThreadsPerWorker(1);
    constexpr int kRounds = 7;
    std::printf("scaling: sync, 784-256-256-10, batch 64 per worker, one thread per worker, %d cores, "
                "%d interleaved rounds of 1000 steps\n", cores, kRounds);
    std::vector<int> counts;
    for (int workers = 1; workers <= cores; workers *= 2)
        counts.push_back(workers);
    auto run = [](int workers) {
        nlohmann::json c = {{"mode", "sync"},
                            {"workers", workers},
                            {"device.threads_per_worker", 1},
                            {"model", {{"layers", {784, 256, 256, 10}}}},
                            {"data", {{"source", "blobs"}, {"samples", 16384}}},
                            {"train", {{"steps", 1000}, {"batch", 64}}},
                            {"eval", {{"samples", 0}}}};
        PreparedRun p = prepareRun(c);
        Engine e(p.config, p.train, p.eval);
        e.start();
        e.wait();
        return e.summary()["samples_per_s"].get<double>();
    };
    // What the machine itself allows: as many independent 1-worker runs at once as the largest
    // count has workers (no barrier, no exchange), against one alone. Shared caches, memory
    // bandwidth, the clock of a busy package and the VM's neighbours all show here; what sync
    // loses beyond it is the engine's.
    const int most = counts.back();
    std::vector<std::vector<double>> rates(counts.size()), perCore(counts.size());
    std::vector<double> apart;
    for (int round = 0; round < kRounds; ++round) {
        for (std::size_t i = 0; i < counts.size(); ++i) {
            rates[i].push_back(run(counts[i]));
            perCore[i].push_back(rates[i].back() / rates[0].back() / counts[i]);
        }
        if (most > 1) {
            std::vector<double> each(std::size_t(most), 0.0);
            std::vector<std::thread> threads;
            for (int k = 1; k < most; ++k)
                threads.emplace_back([&, k] { each[std::size_t(k)] = run(1); });
            each[0] = run(1);
            for (std::thread &t : threads)
                t.join();
            apart.push_back(std::accumulate(each.begin(), each.end(), 0.0) / rates[0].back() / most);
        }
    }
    for (std::size_t i = 0; i < counts.size(); ++i) {
        const auto [lo, hi] = std::minmax_element(perCore[i].begin(), perCore[i].end());
        std::printf("  workers=%d samples_per_s=%.0f per_core=%.3f (rounds %.3f-%.3f)\n", counts[i],
                    median(rates[i]), median(perCore[i]), *lo, *hi);
    }
    if (most > 1) {
        const auto [lo, hi] = std::minmax_element(apart.begin(), apart.end());
        std::printf("  %d independent 1-worker runs at once: per_core=%.3f (rounds %.3f-%.3f), "
                    "the machine's own bound\n", most, median(apart), *lo, *hi);
    }
    std::printf("\n");
}

// What one read of each clock costs: the steady clock (a vDSO call; kvm-clock on a VM) and the
// run clock spans use (the TSC, calibrated against the steady clock, where it is invariant).
void clockCost()
{
    const int n = 20'000'000;
    volatile std::int64_t sink = 0;
    auto a = Clock::now();
    for (int i = 0; i < n; ++i)
        sink = sink + Clock::now().time_since_epoch().count();
    const double steady = seconds(a, Clock::now()) / n;
    RunClock clock;
    a = Clock::now();
    for (int i = 0; i < n; ++i)
        sink = sink + clock.now();
    const double run = seconds(a, Clock::now()) / n;
    a = Clock::now();
    for (int i = 0; i < n; ++i)
        sink = sink + std::int64_t(readTsc());
    const double tsc = seconds(a, Clock::now()) / n;
    std::printf("clock: one read\n");
    std::printf("  steady_clock::now()                 %6.1f ns\n", steady * 1e9);
    std::printf("  run clock (%-21s) %6.1f ns\n",
                tscNanosecondsPerTick() > 0 ? "TSC, calibrated" : "steady clock fallback", run * 1e9);
    std::printf("  rdtsc alone                         %6.1f ns\n", tsc * 1e9);
    std::printf("clock_steady_ns=%.1f clock_run_ns=%.1f\n\n", steady * 1e9, run * 1e9);
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
    std::mutex doneMutex;
    std::condition_variable doneCv;
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
        // Every 500 us, as the engine's collector polls, or at once when the loops are done.
        std::unique_lock lock(doneMutex);
        while (!done.load()) {
            lock.unlock();
            take();
            lock.lock();
            doneCv.wait_for(lock, std::chrono::microseconds(500), [&] { return done.load(); });
        }
        lock.unlock();
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
    {
        std::lock_guard lock(doneMutex);
        done = true;
    }
    doneCv.notify_all();
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
    if (want("peak"))
        peak();
    if (want("gemm"))
        gemmRates();
    if (want("step"))
        stepVersusGemms();
    if (want("scaling"))
        scaling();
    if (want("clock"))
        clockCost();
    if (want("span"))
        spanCost();
    if (want("tracing"))
        tracingOverhead();
    if (want("modes"))
        modes();
    return 0;
}
