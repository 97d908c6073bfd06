// GPU benchmark (not part of ctest; scripts/gpu-check runs it): a 4096-wide MLP's training step
// next to the same cuBLAS GEMMs alone, in FP32 and TF32, then 4 workers sharing one GPU in each
// mode. Figures are ratios measured in one run. Without a GPU it says why and exits 0.
#include "engine.h"
#include "gpubackend.h"
#include "metrics.h"
#include "model.h"
#include "optimizer.h"
#include "random.h"
#include "session.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

using namespace syncopate;
using Clock = std::chrono::steady_clock;

namespace {

// Seconds per call of f, over reps calls queued back to back and one wait at the end: what the
// GPU takes, not what the host takes to queue it.
template <typename F>
double perCall(Device &dev, int reps, F &&f)
{
    dev.synchronize();
    const auto a = Clock::now();
    for (int i = 0; i < reps; ++i)
        f();
    dev.synchronize();
    return std::chrono::duration<double>(Clock::now() - a).count() / reps;
}

void stepVersusGemms(GpuBackend &backend, bool tf32)
{
    const std::vector<int> layers = {4096, 4096, 4096, 4096, 4096, 10};
    const int batch = 1024;
    auto dev = backend.createDevice(0, {tf32});
    ModelSpec spec{layers, Activation::Relu, true, 0};
    Model model(*dev, spec, batch);
    model.setParams(Model::initialParams(spec, 1));
    Optimizer opt(*dev, Optimizer::Kind::Sgd, spec.paramCount(), 0.01f);
    Rng rng(1);
    std::vector<float> hostX(std::size_t(batch) * layers[0]);
    for (auto &v : hostX)
        v = float(rng.uniform());
    std::vector<std::int32_t> hostLabels(static_cast<std::size_t>(batch));
    for (auto &l : hostLabels)
        l = int(rng.below(10));
    DeviceBuffer x(*dev, hostX.size()), labels(*dev, hostLabels.size());
    dev->upload(x.data(), hostX.data(), hostX.size());
    dev->uploadBytes(labels.data(), hostLabels.data(), hostLabels.size() * sizeof(std::int32_t));
    const auto *lab = reinterpret_cast<const std::int32_t *>(labels.data());

    auto step = [&] {
        model.forwardLoss(x.data(), lab, nullptr, nullptr, 0);
        model.backward(nullptr, 0);
        opt.step(model.params(), model.grads());
    };
    // The same GEMMs alone: forward, weight gradient, and input gradient (not for layer 0).
    const int widest = 4096;
    DeviceBuffer w(*dev, spec.paramCount()), a(*dev, std::size_t(batch) * widest),
        z(*dev, std::size_t(batch) * widest), g(*dev, std::size_t(batch) * widest),
        dw(*dev, spec.paramCount());
    const int L = int(layers.size()) - 1;
    auto gemms = [&] {
        const float *in = x.data();
        for (int l = 0; l < L; ++l) {
            const int i = layers[l], o = layers[l + 1];
            dev->gemm(false, true, batch, o, i, 1, in, i, w.data() + spec.weightOffset(l), i, 0,
                      z.data(), o);
            in = a.data();
        }
        for (int l = L - 1; l >= 0; --l) {
            const int i = layers[l], o = layers[l + 1];
            const float *inp = l == 0 ? x.data() : a.data();
            dev->gemm(true, false, o, i, batch, 1, g.data(), o, inp, i, 0,
                      dw.data() + spec.weightOffset(l), i);
            if (l > 0)
                dev->gemm(false, false, batch, i, o, 1, g.data(), o,
                          w.data() + spec.weightOffset(l), i, 0, z.data(), i);
        }
    };
    for (int i = 0; i < 3; ++i) {
        step();
        gemms();
    }
    std::vector<double> ts, tg;
    for (int r = 0; r < 7; ++r) { // interleaved, so both see the same clocks and load
        ts.push_back(perCall(*dev, 5, step));
        tg.push_back(perCall(*dev, 5, gemms));
    }
    std::sort(ts.begin(), ts.end());
    std::sort(tg.begin(), tg.end());
    const double s = ts[ts.size() / 2], gm = tg[tg.size() / 2];
    double flops = 0;
    for (int l = 0; l < L; ++l)
        flops += 2.0 * batch * layers[l] * layers[l + 1] * (l == 0 ? 2 : 3);
    std::printf("step 4096x4 hidden, 10 classes, batch 1024, one worker on %s, %s\n",
                dev->name().c_str(), tf32 ? "TF32" : "FP32");
    std::printf("  training step        %8.3f ms\n", s * 1e3);
    std::printf("  same GEMMs alone     %8.3f ms  (%.1f TFLOP/s)\n", gm * 1e3, flops / gm / 1e12);
    std::printf("  ratio step / GEMMs   %8.3f  (goal <= 1.3)\n\n", s / gm);
}

void modes(int gpus)
{
    const char *device = "cuda:0";
    std::printf("modes: 4 workers on %s, 1024-4096-4096-4096-10 MLP, batch 256, 200 steps\n", device);
    std::printf("  %-30s %10s %8s %10s %10s %12s %12s\n", "mode", "samples/s", "stall",
                "stale avg", "stale max", "peak act MiB", "reduce GB/s");
    for (const char *straggler : {"none", "3x"})
        for (const char *mode : {"sync", "async", "checkpointed"}) {
            nlohmann::json c = {{"mode", mode},
                                {"workers", 4},
                                {"device", device},
                                {"model", {{"layers", {1024, 4096, 4096, 4096, 10}}}},
                                {"data", {{"samples", 16384}}},
                                {"train", {{"steps", 200}, {"batch", 256}, {"lr", 0.01}}},
                                {"eval", {{"samples", 0}}}};
            if (std::strcmp(straggler, "3x") == 0)
                c["workers_slowdown"] = {1, 1, 1, 3};
            PreparedRun p = prepareRun(c);
            Engine e(p.config, p.train, p.eval);
            e.start();
            e.wait();
            const auto s = e.summary();
            if (s.contains("error"))
                std::printf("  %s: %s\n", mode, s["error"].get<std::string>().c_str());
            const std::string label = std::string(mode) + ", straggler " + straggler;
            const double bw = s.contains("reduce") ? s["reduce"]["algbw_gb_s"].get<double>() : 0.0;
            std::printf("  %-30s %10.0f %7.1f%% %10.2f %10lld %12.1f %12.1f\n", label.c_str(),
                        s["samples_per_s"].get<double>(), 100 * s["stall_fraction"].get<double>(),
                        s["staleness_mean"].get<double>(),
                        (long long)s["staleness_max"].get<std::int64_t>(),
                        s["peak_activation_bytes"].get<double>() / 1048576.0, bw);
        }
    if (gpus > 1) {
        // One worker per GPU: the sync reduction goes through NCCL.
        nlohmann::json c = {{"workers", gpus},
                            {"device", "cuda"},
                            {"model", {{"layers", {1024, 4096, 4096, 4096, 10}}}},
                            {"train", {{"steps", 100}, {"batch", 256}}},
                            {"eval", {{"samples", 0}}}};
        PreparedRun p = prepareRun(c);
        Engine e(p.config, p.train, p.eval);
        e.start();
        e.wait();
        const auto s = e.summary();
        std::printf("  sync, one worker per GPU (%d): %s, algbw %.1f GB/s, busbw %.1f GB/s\n", gpus,
                    s["reduce"]["algorithm"].get<std::string>().c_str(),
                    s["reduce"]["algbw_gb_s"].get<double>(), s["reduce"]["busbw_gb_s"].get<double>());
    }
}

} // namespace

int main(int argc, char **argv)
{
    std::string why;
    GpuBackend *backend = gpuBackend(&why);
    if (!backend) {
        std::printf("bench_gpu: no CUDA backend: %s\n", why.c_str());
        return 0;
    }
    const auto gpus = backend->devices();
    if (gpus.empty()) {
        std::printf("bench_gpu: no CUDA device: %s\n", backend->noDeviceReason().c_str());
        return 0;
    }
    std::printf("%s, %.0f GiB, compute capability %d.%d; %s\n\n", gpus[0].name.c_str(),
                double(gpus[0].totalBytes) / 1073741824.0, gpus[0].major, gpus[0].minor,
                backend->versions().c_str());
    const bool all = argc < 2;
    auto want = [&](const char *name) { return all || std::strcmp(argv[1], name) == 0; };
    try {
        if (want("step")) {
            stepVersusGemms(*backend, false);
            stepVersusGemms(*backend, true);
        }
        if (want("modes"))
            modes(int(gpus.size()));
    } catch (const std::exception &e) {
        std::printf("bench_gpu: %s\n", e.what());
        return 1;
    }
    return 0;
}
