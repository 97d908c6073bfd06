#include "lod.h"

#include <algorithm>
#include <limits>

namespace syncopate {

void RowLod::close(Level &lv)
{
    if (lv.open < 0 || std::size_t(lv.open) >= lv.buckets.size())
        return;
    // In double: phase times of damaged input may be near 2^63 each.
    double total = 0;
    std::size_t best = 0;
    for (std::size_t p = 0; p < lv.openNs.size(); ++p) {
        total += double(std::max<std::int64_t>(0, lv.openNs[p]));
        if (lv.openNs[p] > lv.openNs[best])
            best = p;
    }
    LodBucket &b = lv.buckets[std::size_t(lv.open)];
    if (total > 0) {
        b.dominant = std::uint8_t(best);
        b.share = std::uint8_t(std::clamp(double(lv.openNs[best]) * 255.0 / total, 0.0, 255.0));
    }
    lv.openNs.fill(0);
    lv.open = -1;
}

void RowLod::add(const Record &r)
{
    // Times before the run's start (a damaged or foreign file) are clamped, never indexed.
    const std::int64_t start = std::max<std::int64_t>(0, r.start);
    const std::int64_t dur = std::max<std::int64_t>(1, r.end - r.start);
    const auto phase = std::size_t(r.phase());
    ++m_spans;
    m_maxEnd = std::max(m_maxEnd, r.end);
    for (int l = m_finest; l < kLevels; ++l) {
        Level &lv = m_levels[std::size_t(l)];
        const std::int64_t i = start >> (kFirstShift + 2 * l);
        if (std::size_t(i) >= lv.buckets.size()) {
            if (std::size_t(i) >= kMaxBuckets) {
                // The run has outgrown this level; coarser ones take over.
                if (l == m_finest) {
                    lv = Level{};
                    ++m_finest;
                    continue;
                }
                break; // a time beyond even the coarse levels' reach (damaged input)
            }
            lv.buckets.resize(std::size_t(i) + 1);
        }
        LodBucket &b = lv.buckets[std::size_t(i)];
        ++b.count;
        b.phases |= std::uint16_t(1u << phase);
        b.maxEnd = std::max(b.maxEnd, r.end);
        if (lv.open != i) {
            if (i < lv.open) {
                // A late span: its bucket is settled; it counts, but only shifts the dominant
                // phase when the bucket had none.
                if (b.count == 1)
                    b.dominant = std::uint8_t(phase), b.share = 255;
                continue;
            }
            close(lv);
            lv.open = i;
        }
        // Saturating: spans of damaged input may claim durations that sum past 2^63.
        std::int64_t &ns = lv.openNs[phase];
        if (__builtin_add_overflow(ns, dur, &ns))
            ns = std::numeric_limits<std::int64_t>::max();
    }
}

void RowLod::settle()
{
    for (Level &lv : m_levels) {
        const std::int64_t open = lv.open;
        auto ns = lv.openNs;
        close(lv);
        // Keep summing into it: more spans of that bucket may come.
        lv.open = open;
        lv.openNs = ns;
    }
}

int RowLod::levelFor(double ns) const
{
    int l = m_finest;
    while (l + 1 < kLevels && double(bucketNs(l + 1)) <= ns)
        ++l;
    return l;
}

std::uint64_t RowLod::countIn(int lv, std::int64_t t0, std::int64_t t1) const
{
    const auto &b = level(lv);
    const int shift = kFirstShift + 2 * lv;
    const std::int64_t a = std::max<std::int64_t>(0, t0) >> shift;
    const std::int64_t z = std::max<std::int64_t>(0, t1) >> shift;
    std::uint64_t n = 0;
    for (std::int64_t i = a; i <= z && std::size_t(i) < b.size(); ++i)
        n += b[std::size_t(i)].count;
    return n;
}

std::size_t RowLod::memoryBytes() const
{
    std::size_t n = sizeof *this;
    for (const Level &lv : m_levels)
        n += lv.buckets.capacity() * sizeof(LodBucket);
    return n;
}

void RowLod::restore(int finest, std::uint64_t spans, std::int64_t maxEnd, std::vector<Level> levels)
{
    m_finest = std::clamp(finest, 0, kLevels - 1);
    m_spans = spans;
    m_maxEnd = maxEnd;
    for (std::size_t l = 0; l < m_levels.size(); ++l)
        m_levels[l] = l < levels.size() && int(l) >= m_finest ? std::move(levels[l]) : Level{};
}

} // namespace syncopate
