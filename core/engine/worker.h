// One worker's state, shared by the engine and its strategies (not part of the engine's API).
#pragma once

#include "device.h"
#include "model.h"
#include "optimizer.h"
#include "pipeline.h"
#include "random.h"
#include "trace.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace syncopate {

struct WorkerState {
    WorkerState(int i, int l, const RunClock &clock)
        : index(i), local(l), ring(std::size_t(1) << 16), rec(i, clock, ring)
    {
    }

    int index; // among all the run's workers
    int local; // among this process's
    std::unique_ptr<Device> device;
    // The batch on the device, where the device cannot read the host buffers below.
    DeviceBuffer devX, devLabels, devY;
    std::unique_ptr<Model> model;
    std::unique_ptr<Optimizer> optimizer; // sync: each replica applies the same update
    RecordRing ring;
    Recorder rec;
    std::unique_ptr<InputPipeline> input;
    std::atomic<double> slowdown{1.0};
    std::atomic<bool> paused{false};
    std::unique_ptr<Rng> jitterRng;
    std::int64_t pulledVersion = 0;
    // Batch norm: this replica's last batch statistics and running statistics on the host
    // (sized when the worker is made).
    std::vector<float> bnBatch, bnOwn;
    Phase phase = Phase::Data;
    std::int64_t step = 0;
    std::thread thread;
};

} // namespace syncopate
