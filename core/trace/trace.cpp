#include "trace.h"

#include <time.h>

#include <fstream>
#include <string>
#include <utility>

namespace syncopate {

double tscNanosecondsPerTick()
{
    static const double value = [] {
#if defined(__x86_64__)
        // Only a counter that ticks at a constant rate through every power state will do.
        std::ifstream cpuinfo("/proc/cpuinfo");
        std::string line;
        bool constant = false, nonstop = false;
        while (std::getline(cpuinfo, line))
            if (line.rfind("flags", 0) == 0) {
                constant = line.find(" constant_tsc") != std::string::npos;
                nonstop = line.find(" nonstop_tsc") != std::string::npos;
                break;
            }
        if (!constant || !nonstop)
            return 0.0;
        // Each end: the steady clock read between two TSC reads, the closest bracket of a few
        // tries, taken at its middle. One pair read apart (as this was) let a preemption between
        // the two reads on a loaded machine shorten every span by up to 0.5% (100 us in 20 ms).
        auto pair = [] {
            std::uint64_t bestWidth = ~std::uint64_t(0), tsc = 0;
            std::chrono::steady_clock::time_point steady;
            for (int i = 0; i < 7; ++i) {
                const std::uint64_t a = readTsc();
                const auto t = std::chrono::steady_clock::now();
                const std::uint64_t b = readTsc();
                if (b >= a && b - a < bestWidth) {
                    bestWidth = b - a;
                    tsc = a + (b - a) / 2;
                    steady = t;
                }
            }
            return std::make_pair(steady, tsc);
        };
        const auto [t0, c0] = pair();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const auto [t1, c1] = pair();
        const double ns = double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
        return c1 > c0 ? ns / double(c1 - c0) : 0.0;
#else
        return 0.0;
#endif
    }();
    return value;
}

void Recorder::collectDeviceSpans()
{
    if (!m_timer)
        return;
    TimedSpan done[64];
    std::size_t n;
    while ((n = m_timer->poll(done, 64)) > 0)
        for (std::size_t i = 0; i < n; ++i) {
            const TimedSpan &t = done[i];
            m_ring->push(Record::span(m_worker, Phase(t.tag & 0xff), Lane((t.tag >> 8) & 0xff),
                                      std::uint32_t(t.tag >> 32), t.start, t.end, t.value));
        }
}

const char *phaseName(Phase p)
{
    static const char *names[] = {"data",  "forward", "backward", "recompute",
                                  "wait",  "reduce",  "push",     "pull",
                                  "apply", "delay",   "eval",     "pause",
                                  "copy",  "compute",  "dropped", "input_wait"};
    static_assert(sizeof(names) / sizeof(names[0]) == std::size_t(Phase::Count));
    return p < Phase::Count ? names[std::size_t(p)] : "?";
}

const char *laneName(Lane l)
{
    static const char *names[] = {"compute", "data", "comm"};
    return l < Lane::Count ? names[std::size_t(l)] : "?";
}

const char *counterName(CounterId c)
{
    static const char *names[] = {"loss",          "staleness",     "activation_bytes",
                                  "eval_loss",     "eval_accuracy", "version",
                                  "bn_divergence"};
    static_assert(sizeof(names) / sizeof(names[0]) == std::size_t(CounterId::Count));
    return c < CounterId::Count ? names[std::size_t(c)] : "?";
}

Lane defaultLane(Phase p)
{
    switch (p) {
    case Phase::Wait:
    case Phase::Reduce:
    case Phase::Push:
    case Phase::Pull:
    case Phase::Dropped:
        return Lane::Comm;
    default:
        return Lane::Compute;
    }
}

RecordRing::RecordRing(std::size_t capacityPow2)
    : m_capacity(capacityPow2), m_mask(capacityPow2 - 1), m_records(new Record[capacityPow2])
{
}

std::size_t RecordRing::drain(std::vector<Record> &out)
{
    const std::size_t tail = m_tail.load(std::memory_order_relaxed);
    const std::size_t head = m_head.load(std::memory_order_acquire);
    for (std::size_t i = tail; i != head; ++i)
        out.push_back(m_records[i & m_mask]);
    m_tail.store(head, std::memory_order_release);
    return head - tail;
}

void EventStore::reset(int workers)
{
    std::lock_guard lock(m_mutex);
    m_workers = workers;
    m_records.clear();
    m_base = 0;
}

int EventStore::workers() const
{
    std::lock_guard lock(m_mutex);
    return m_workers;
}

void EventStore::append(const std::vector<Record> &records)
{
    std::lock_guard lock(m_mutex);
    if (m_keep == Keep::Nothing) {
        m_base += records.size();
        return;
    }
    m_records.insert(m_records.end(), records.begin(), records.end());
}

std::size_t EventStore::size() const
{
    std::lock_guard lock(m_mutex);
    return m_base + m_records.size();
}

std::size_t EventStore::copySince(std::size_t from, std::vector<Record> &out) const
{
    std::lock_guard lock(m_mutex);
    const std::size_t end = m_base + m_records.size();
    if (from < end) {
        const std::size_t skip = from > m_base ? from - m_base : 0;
        out.insert(out.end(), m_records.begin() + std::ptrdiff_t(skip), m_records.end());
    }
    if (m_keep == Keep::Unread) {
        // The one consumer has these now; the store keeps only what it has not taken.
        m_base = end;
        m_records.clear();
    }
    return end;
}

std::vector<Record> EventStore::all() const
{
    std::lock_guard lock(m_mutex);
    return m_records;
}

} // namespace syncopate

namespace syncopate {

std::int64_t Recorder::threadCpuNs()
{
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return std::int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

} // namespace syncopate
