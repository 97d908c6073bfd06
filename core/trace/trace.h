// Recording what workers do. Each worker writes fixed-size records into its own single-producer
// ring without locks or allocation; one collector drains all rings in bulk into an EventStore.
#pragma once

#include "device.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace syncopate {

enum class Phase : std::uint8_t {
    Data, Forward, Backward, Recompute, Wait, Reduce, Push, Pull, Apply, Delay, Eval, Pause,
    Copy,    // imported traces: memory copies and sets on a GPU
    Compute, // imported traces: kernels outside any forward, backward or optimizer annotation
    // Backup workers: this worker's gradient came after the first N - b and was not used.
    // Appended, not inserted: codes are stored in run folders, and older runs keep theirs.
    Dropped,
    // The step found its prefetched batch not ready and waited for the input pipeline: the
    // run is input-bound. A wait for data, never a barrier stall.
    InputWait,
    Count    // at most 16: a phase is the low nibble of Record::code

};
enum class Lane : std::uint8_t { Compute, Data, Comm, Count };
enum class CounterId : std::uint8_t {
    Loss, Staleness, ActivationBytes, EvalLoss, EvalAccuracy, Version,
    // Batch norm: how far this worker's running statistics are from the mean of all workers'
    // (appended: codes are stored in run folders).
    BnDivergence,
    Count
};
enum class RecordKind : std::uint8_t { Span, Counter };

const char *phaseName(Phase p);
const char *laneName(Lane l);
const char *counterName(CounterId c);
// The lane a phase is drawn in unless recorded elsewhere (prefetch puts Data on the data lane).
Lane defaultLane(Phase p);

// One span or counter sample. Times are ns since the run's start on the steady clock.
struct Record {
    std::int64_t start = 0;
    std::int64_t end = 0; // == start for a counter
    double value = 0;     // staleness, bytes, or the counter's value
    std::uint32_t step = 0;
    std::uint16_t worker = 0;
    RecordKind kind = RecordKind::Span;
    std::uint8_t code = 0; // Phase for spans, CounterId for counters; lane in the high nibble

    Phase phase() const { return Phase(code & 0x0f); }
    CounterId counter() const { return CounterId(code & 0x0f); }
    Lane lane() const { return Lane(code >> 4); }
    std::int64_t duration() const { return end - start; }
    bool isSpan() const { return kind == RecordKind::Span; }
    // Time a worker stood still waiting for others (barrier, SSP bound, server lock): what the
    // summary's stall figures and the stall chart both count. Injected delay is not a stall.
    bool isStall() const { return isSpan() && phase() == Phase::Wait && lane() != Lane::Data; }

    static Record span(int worker, Phase p, Lane lane, std::uint32_t step, std::int64_t start,
                       std::int64_t end, double value = 0)
    {
        return {start, end, value, step, std::uint16_t(worker), RecordKind::Span,
                std::uint8_t(std::uint8_t(p) | (std::uint8_t(lane) << 4))};
    }
    static Record counterSample(int worker, CounterId c, std::uint32_t step, std::int64_t t,
                                double value)
    {
        return {t, t, value, step, std::uint16_t(worker), RecordKind::Counter, std::uint8_t(c)};
    }
};
static_assert(sizeof(Record) == 32, "a record is 32 bytes: keep rings and the store compact");

// The latest time any record may carry (2^52 ns, 52 days): readers reject later ones as damaged.
constexpr std::int64_t kMaxRunNs = std::int64_t(1) << 52;

// Nanoseconds per time-stamp-counter tick, calibrated once per process against the steady
// clock; 0 where the counter is not invariant (then the steady clock is used).
double tscNanosecondsPerTick();

inline std::uint64_t readTsc()
{
#if defined(__x86_64__)
    std::uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return (std::uint64_t(hi) << 32) | lo;
#else
    return 0;
#endif
}

// The run clock: ns since the run started. An invariant TSC reads in a few ns where the
// steady clock can cost 30 (kvm-clock), and a span reads the clock twice.
class RunClock {
public:
    RunClock() : m_nsPerTick(tscNanosecondsPerTick()) { restart(); }
    // Time 0 becomes now; only before anyone records.
    void restart()
    {
        m_origin = std::chrono::steady_clock::now();
        m_originTsc = readTsc();
    }
    // Time 0 becomes the steady clock's steadyNs (as originSteadyNs() gave it, perhaps in
    // another process of this host): processes on one host then share their run clock.
    void restartAt(std::int64_t steadyNs)
    {
        const auto now = std::chrono::steady_clock::now();
        const std::uint64_t tscNow = readTsc();
        m_origin = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(steadyNs));
        if (m_nsPerTick > 0)
            m_originTsc = tscNow - std::uint64_t(std::int64_t(double((now - m_origin).count()) / m_nsPerTick));
    }
    std::int64_t originSteadyNs() const
    {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(m_origin.time_since_epoch()).count();
    }
    std::int64_t now() const
    {
        if (m_nsPerTick > 0)
            return std::int64_t(double(std::int64_t(readTsc() - m_originTsc)) * m_nsPerTick);
        return std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now() - m_origin)
            .count();
    }

private:
    double m_nsPerTick;
    std::chrono::steady_clock::time_point m_origin;
    std::uint64_t m_originTsc = 0;
};

// Single producer, single consumer. push() never allocates; when the ring is full it yields
// until the collector catches up (the ring holds many seconds of records, so that is rare).
class RecordRing {
public:
    explicit RecordRing(std::size_t capacityPow2 = std::size_t(1) << 16);

    void push(const Record &r)
    {
        const std::size_t head = m_head.load(std::memory_order_relaxed);
        if (head - m_cachedTail >= m_capacity) {
            m_cachedTail = m_tail.load(std::memory_order_acquire);
            while (head - m_cachedTail >= m_capacity) {
                std::this_thread::yield();
                m_cachedTail = m_tail.load(std::memory_order_acquire);
            }
        }
        m_records[head & m_mask] = r;
        m_head.store(head + 1, std::memory_order_release);
    }

    // Appends everything available to out; returns how many records were taken.
    std::size_t drain(std::vector<Record> &out);

private:
    std::size_t m_capacity;
    std::size_t m_mask;
    std::unique_ptr<Record[]> m_records;
    alignas(64) std::atomic<std::size_t> m_head{0};
    std::size_t m_cachedTail = 0; // producer's copy
    alignas(64) std::atomic<std::size_t> m_tail{0};
};

// What a worker records through: its ring, its index and the run clock.
class Recorder {
public:
    Recorder(int worker, const RunClock &clock, RecordRing &ring)
        : m_worker(worker), m_clock(&clock), m_ring(&ring) {}

    std::int64_t now() const { return m_clock->now(); }
    int worker() const { return m_worker; }
    // Off: spans are not recorded at all, counters still are (a benchmark's baseline for what
    // tracing costs a run).
    void setTracing(bool on) { m_tracing = on; }
    bool tracing() const { return m_tracing; }
    void span(Phase p, std::uint32_t step, std::int64_t start, std::int64_t end, double value = 0,
              Lane lane = Lane::Count)
    {
        if (!m_tracing)
            return;
        m_ring->push(Record::span(m_worker, p, lane == Lane::Count ? defaultLane(p) : lane, step,
                                  start, end, value));
    }
    // The thread's CPU time (CLOCK_THREAD_CPUTIME_ID, a system call). Compute spans carry how
    // long the thread was descheduled inside them: their wall time less this clock's advance.
    static std::int64_t threadCpuNs();
    // Where a compute span starting at wall time `start` measures from: the last CPU reading
    // when it was taken at most kCpuReuseNs before (back-to-back compute spans share one read).
    void markCpu(std::int64_t start)
    {
        if (start < m_markWall || start - m_markWall > kCpuReuseNs) {
            m_markCpu = threadCpuNs();
            m_markWall = start;
        }
        m_spanWall = m_markWall;
        m_spanCpu = m_markCpu;
    }
    // Descheduled ns of the compute span [start, end] begun by markCpu(start); marks end.
    std::int64_t descheduledUntil(std::int64_t start, std::int64_t end)
    {
        const std::int64_t cpu = threadCpuNs();
        const std::int64_t off = (end - m_spanWall) - (cpu - m_spanCpu);
        m_markWall = end;
        m_markCpu = cpu;
        return std::clamp<std::int64_t>(off, 0, std::max<std::int64_t>(0, end - start));
    }
    static constexpr std::int64_t kCpuReuseNs = 2000;

    // Records [start, now] and returns now: a phase that begins where this one ends starts
    // from it, so back-to-back phases cost one clock read per span instead of two.
    std::int64_t spanToNow(Phase p, std::uint32_t step, std::int64_t start, double value = 0)
    {
        const std::int64_t end = now();
        span(p, step, start, end, value);
        return end;
    }
    void counter(CounterId c, std::uint32_t step, double value)
    {
        m_ring->push(Record::counterSample(m_worker, c, step, now(), value));
    }

    // A GPU worker's device work (forward, backward, recompute, apply) is timed on the device,
    // where it runs, rather than by the host thread that queues it.
    void attachTimer(DeviceTimer *timer) { m_timer = timer; }
    DeviceTimer *timer() const { return m_timer; }
    static bool timedOnDevice(Phase p)
    {
        return p == Phase::Forward || p == Phase::Backward || p == Phase::Recompute ||
               p == Phase::Apply;
    }
    static std::uint64_t deviceTag(Phase p, std::uint32_t step)
    {
        return std::uint64_t(p) | (std::uint64_t(defaultLane(p)) << 8) | (std::uint64_t(step) << 32);
    }
    // Moves the spans the device has finished timing into the ring; never waits.
    void collectDeviceSpans();

private:
    int m_worker;
    const RunClock *m_clock;
    RecordRing *m_ring;
    DeviceTimer *m_timer = nullptr;
    bool m_tracing = true;
    std::int64_t m_markWall = std::numeric_limits<std::int64_t>::min() / 2, m_markCpu = 0;
    std::int64_t m_spanWall = 0, m_spanCpu = 0;
};

// Phases whose span value is the time the thread was descheduled inside it: the host compute
// of a step (data, forward, backward, recompute run back to back and share CPU clock reads;
// the short apply after the barrier is left out, two system calls for little time).
constexpr bool carriesDescheduled(Phase p)
{
    return p == Phase::Data || p == Phase::Forward || p == Phase::Backward || p == Phase::Recompute;
}

// The ns of a span the worker could run and the OS did not run it: off the CPU inside a
// compute span, or after the barrier opened in a barrier wait (0 for other spans). At most the
// span, whatever a damaged file says.
inline double offCpuNs(const Record &r)
{
    if (!r.isSpan() || r.lane() == Lane::Data || !(r.isStall() || carriesDescheduled(r.phase())) ||
        !(r.value > 0) || r.value > 1e300)
        return 0;
    return std::min(r.value, double(r.duration()));
}

// Records one phase from construction to destruction.
class ScopedSpan {
public:
    ScopedSpan(Recorder *rec, Phase p, std::uint32_t step, std::int64_t start = -1)
        : m_rec(rec), m_phase(p), m_step(step),
          m_timer(rec && rec->timer() && Recorder::timedOnDevice(p) ? rec->timer() : nullptr),
          m_start(rec && !m_timer && rec->tracing() ? (start >= 0 ? start : rec->now()) : 0)
    {
        if (m_timer)
            m_timer->begin();
        else if (m_rec && m_rec->tracing() && carriesDescheduled(p))
            m_rec->markCpu(m_start);
    }
    ~ScopedSpan()
    {
        if (m_timer) {
            m_timer->end(Recorder::deviceTag(m_phase, m_step), m_value);
        } else if (m_rec && m_rec->tracing()) {
            const std::int64_t end = m_rec->now();
            if (carriesDescheduled(m_phase))
                m_value = double(m_rec->descheduledUntil(m_start, end));
            m_rec->span(m_phase, m_step, m_start, end, m_value);
        }
    }
    // The span's value (bytes moved, a version...); compute phases carry their descheduled
    // time there instead.
    void setValue(double v) { m_value = v; }
    ScopedSpan(const ScopedSpan &) = delete;
    ScopedSpan &operator=(const ScopedSpan &) = delete;

private:
    Recorder *m_rec;
    Phase m_phase;
    std::uint32_t m_step;
    DeviceTimer *m_timer;
    std::int64_t m_start;
    double m_value = 0;
};

// Append-only store of everything collected, per worker, in arrival order. Thread-safe: the
// collector appends while readers take copies of what they have not seen yet.
class EventStore {
public:
    // Unread: records are dropped once copied (one consumer), so a long run stays bounded.
    enum class Keep { All, Unread, Nothing };
    explicit EventStore(int workers = 0) { reset(workers); }
    void setRetention(Keep k) { m_keep = k; }

    void reset(int workers);
    int workers() const;
    void append(const std::vector<Record> &records);
    std::size_t size() const;
    // Records with arrival index >= from, appended to out; returns the new end index.
    std::size_t copySince(std::size_t from, std::vector<Record> &out) const;
    std::vector<Record> all() const;

private:
    mutable std::mutex m_mutex;
    int m_workers = 0;
    Keep m_keep = Keep::All;
    mutable std::size_t m_base = 0; // arrival index of m_records[0]
    mutable std::vector<Record> m_records;
};

} // namespace syncopate
