#include "pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <tbb/task_arena.h>

#include <pthread.h>

namespace syncopate {

void burnCpu(std::int64_t ns, const std::atomic<bool> *stop)
{
    if (ns <= 0)
        return;
    // The thread's own work, not a sleep: a decoder keeps its core busy, and the OS shares the
    // cores between it and the workers as it would share real input work.
    using clock = std::chrono::steady_clock;
    const auto end = clock::now() + std::chrono::nanoseconds(ns);
    volatile std::uint64_t sink = 0;
    while (clock::now() < end) {
        for (int i = 0; i < 64; ++i)
            sink = sink * 6364136223846793005ull + 1442695040888963407ull;
        if (stop && stop->load(std::memory_order_relaxed))
            return;
    }
}

InputPipeline::InputPipeline(const Dataset &data, const BatchSampler &sampler, int worker,
                             int rows, int depth, double costUs, const RunClock &clock,
                             const std::atomic<bool> &stop)
    : m_data(data), m_sampler(sampler), m_worker(worker), m_rows(rows),
      // Background work needs a thread besides this one: where the process may use one core
      // (an MPI rank bound to a core, taskset), oneTBB has no worker thread and a task would
      // run only when someone waits for the group, so batches are made on the worker's thread.
      m_depth(tbb::this_task_arena::max_concurrency() > 1 ? std::max(0, depth) : 0),
      m_costNs(std::int64_t(costUs * 1000.0 * rows)),
      m_clock(clock), m_runStop(stop), m_slots(std::size_t(m_depth) + 1)
{
    const std::size_t targets = data.classification ? 0 : std::size_t(rows) * data.outputs;
    for (BatchBuffers &b : m_slots) {
        b.x.resize(std::size_t(rows) * data.features);
        b.labels.resize(std::size_t(rows));
        b.y.resize(targets);
    }
}

InputPipeline::~InputPipeline()
{
    try {
        close();
    } catch (...) { // reported by the close() the engine calls; a destructor must not throw
    }
}

void InputPipeline::assemble(BatchBuffers &b, std::int64_t step)
{
    b.gatheredFrom = m_clock.now();
    gatherBatch(m_data, m_sampler, step, m_worker, m_rows, b.x.data(), b.labels.data(), b.y.data());
    burnCpu(m_costNs, &m_runStop);
    b.gatheredTo = m_clock.now();
}

void InputPipeline::publish(BatchBuffers &b, std::int64_t value)
{
    b.ready.store(value, std::memory_order_release);
}

void InputPipeline::shutSlots()
{
    for (BatchBuffers &b : m_slots)
        publish(b, kClosed);
}

namespace {
thread_local bool t_named = false;
} // namespace

void InputPipeline::markNamedThread() { t_named = true; }

void InputPipeline::produce()
{
    if (!t_named) {
        // Only a name taken from a worker: a thread of the application's own (the GUI's, when
        // it closes a pipeline) keeps its name.
        char name[16] = {};
        if (pthread_getname_np(pthread_self(), name, sizeof name) == 0 && std::strncmp(name, "syncopate-w", 11) == 0)
            pthread_setname_np(pthread_self(), "syncopate-tbb");
        t_named = true;
    }
    auto stopped = [&] {
        return m_closing.load(std::memory_order_acquire) || m_runStop.load(std::memory_order_relaxed);
    };
    // Pairs with the exchange that started this task, which followed the previous producer's
    // last store: m_next and the slots pass from one producer to the next through it (oneTBB's
    // own hand-off is invisible to ThreadSanitizer).
    m_running.load(std::memory_order_acquire);
    try {
        for (;;) {
            for (;;) {
                if (stopped()) {
                    shutSlots(); // a step waiting for a batch returns instead
                    m_running.store(false);
                    return;
                }
                const std::int64_t consumed = m_consumed.load();
                const std::int64_t next = std::max(m_next, consumed);
                if (next > consumed + m_depth)
                    break;
                // This slot last held step next - (depth + 1), before the step the worker is on.
                BatchBuffers &b = slot(next);
                assemble(b, next);
                m_next = next + 1;
                publish(b, next);
            }
            m_running.store(false);
            // The worker may have moved on between the check above and now, seen the producer
            // still running and not started another: look once more.
            const std::int64_t consumed = m_consumed.load();
            if (std::max(m_next, consumed) > consumed + m_depth && !stopped())
                return;
            if (m_running.exchange(true))
                return; // the worker started a new producer meanwhile
        }
    } catch (...) {
        m_error = std::current_exception();
        m_failed.store(true, std::memory_order_release);
        shutSlots();
        m_running.store(false);
    }
}

void InputPipeline::startProducer()
{
    if (!m_running.exchange(true))
        m_tasks.run([this] { produce(); });
}

InputPipeline::Batch InputPipeline::acquire(std::int64_t step)
{
    Batch out;
    if (m_depth == 0) {
        if (m_runStop.load(std::memory_order_relaxed))
            return out;
        assemble(m_slots[0], step);
        if (!m_runStop.load(std::memory_order_relaxed)) // else the preparation was cut short
            out.buffers = &m_slots[0];
        return out;
    }
    m_consumed.store(step); // frees the slots of earlier steps
    BatchBuffers &b = slot(step);
    std::int64_t seen = b.ready.load(std::memory_order_acquire);
    startProducer(); // to fill this step's slot, or to top the buffer up behind it
    if (seen != step) {
        // Help rather than sleep: waiting for the group runs the producer here when no oneTBB
        // thread has taken it yet (they may all be busy with other workers' pipelines), and
        // otherwise waits for it to fill the buffer up to this step + depth.
        out.waitFrom = m_clock.now();
        while (seen != step && seen != kClosed) {
            m_tasks.wait();
            seen = b.ready.load(std::memory_order_acquire);
            if (seen != step && seen != kClosed)
                startProducer();
        }
        out.waitTo = m_clock.now();
    }
    if (seen == kClosed) {
        if (m_failed.load(std::memory_order_acquire))
            std::rethrow_exception(m_error);
        return out; // stopping
    }
    out.buffers = &b;
    return out;
}

void InputPipeline::close()
{
    if (m_closed)
        return;
    m_closed = true;
    m_closing.store(true, std::memory_order_release);
    m_tasks.wait();
    if (m_failed.load(std::memory_order_acquire))
        std::rethrow_exception(m_error);
}

} // namespace syncopate
