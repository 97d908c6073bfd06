// One worker's state, shared by the engine and its strategies (not part of the engine's API).
#pragma once

#include "device.h"
#include "model.h"
#include "optimizer.h"
#include "random.h"
#include "trace.h"

#include <tbb/task_group.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace syncopate {

// Host-side batch buffers; two of them when the next batch is prefetched.
struct BatchBuffers {
    std::vector<float> x;
    std::vector<std::int32_t> labels;
    std::vector<float> y;
    std::int64_t gatheredFrom = 0, gatheredTo = 0; // when the prefetch task assembled it
    // Hand-off between the worker and the prefetch task: oneTBB orders them, but inside its
    // uninstrumented library, so the ordering is restated here for ThreadSanitizer.
    std::atomic<int> handoff{0};
};

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
    BatchBuffers buffers[2];
    int current = 0;
    tbb::task_group prefetch;
    bool prefetchPending = false;
    std::atomic<double> slowdown{1.0};
    std::atomic<bool> paused{false};
    std::unique_ptr<Rng> jitterRng;
    std::int64_t pulledVersion = 0;
    std::vector<float> snapshot; // parameters handed to evaluation
    Phase phase = Phase::Data;
    std::int64_t step = 0;
    std::thread thread;
};

} // namespace syncopate
