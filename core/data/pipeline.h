// One worker's input pipeline: the batches of its next steps assembled on oneTBB's threads
// while the current one computes, up to `depth` ahead (tf.data's prefetch buffer), in depth + 1
// buffers of their own. A step takes its batch from the buffer, waiting if the pipeline has not
// got there yet (an input-bound run); depth 0 assembles each batch on the worker's thread.
// The producer never allocates: the buffers are sized here, once.
#pragma once

#include "data.h"
#include "trace.h"

#include <tbb/task_group.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <vector>

namespace syncopate {

// Host-side rows of one batch.
struct BatchBuffers {
    std::vector<float> x;
    std::vector<std::int32_t> labels;
    std::vector<float> y;
    std::int64_t gatheredFrom = 0, gatheredTo = 0; // when it was assembled, on the run clock
    // The step whose batch this is, published by the producer (release) once complete;
    // kEmpty before, kClosed when the pipeline ends without it.
    std::atomic<std::int64_t> ready{-1};
};

// Busy CPU work of ns nanoseconds on the calling thread (as decoding or augmenting would cost),
// ending early when stop is set.
void burnCpu(std::int64_t ns, const std::atomic<bool> *stop);

class InputPipeline {
public:
    struct Batch {
        const BatchBuffers *buffers = nullptr; // null: the run is stopping
        std::int64_t waitFrom = 0, waitTo = 0; // the step waited for its batch in between
        bool waited() const { return waitTo > waitFrom; }
    };

    // Called by a thread that names itself (a worker): a producer that runs there while the
    // worker waits for its batch keeps that name. Any other thread that runs a producer is one
    // of oneTBB's, which take the name of the thread that first handed oneTBB work; one that
    // took a worker's (top -H and perf showed batch assembly as worker 0's) is renamed
    // syncopate-tbb.
    static void markNamedThread();

    // stop: the run's stop flag; set, the producer ends and a waiting step returns at once.
    InputPipeline(const Dataset &data, const BatchSampler &sampler, int worker, int rows,
                  int depth, double costUs, const RunClock &clock, const std::atomic<bool> &stop);
    ~InputPipeline();
    InputPipeline(const InputPipeline &) = delete;
    InputPipeline &operator=(const InputPipeline &) = delete;

    // The depth in effect: 0 where the process has no second core for the background work.
    int depth() const { return m_depth; }
    // The batch of `step` (steps increase; a step may skip ahead, the batches in between are
    // then not used). Valid until the next acquire. Rethrows what assembling it threw.
    Batch acquire(std::int64_t step);
    // Ends the background work and waits for it; rethrows what it threw. Idempotent.
    void close();

private:
    static constexpr std::int64_t kEmpty = -1, kClosed = -2;
    BatchBuffers &slot(std::int64_t step) { return m_slots[std::size_t(step % std::int64_t(m_slots.size()))]; }
    void assemble(BatchBuffers &b, std::int64_t step);
    void produce();
    void startProducer();
    void publish(BatchBuffers &b, std::int64_t value);
    void shutSlots();

    const Dataset &m_data;
    BatchSampler m_sampler;
    int m_worker;
    int m_rows;
    int m_depth;
    std::int64_t m_costNs;
    const RunClock &m_clock;
    const std::atomic<bool> &m_runStop;
    std::vector<BatchBuffers> m_slots;
    // The step the worker is on: the producer may fill steps up to it + depth. Slots of earlier
    // steps are free again.
    std::atomic<std::int64_t> m_consumed{-1};
    std::atomic<bool> m_running{false};
    std::atomic<bool> m_closing{false};
    std::atomic<bool> m_failed{false};
    std::int64_t m_next = 0; // the producer's next step; only one producer runs at a time
    std::exception_ptr m_error; // written by the producer before m_failed is set
    tbb::task_group m_tasks;
    bool m_closed = false;
};

} // namespace syncopate
