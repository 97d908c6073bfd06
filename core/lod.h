// A row's level-of-detail summary: for zoom levels 4 times apart (16 us to 5 h per bucket), per
// time bucket, how many spans start there, which phases they cover, the phase that covers the
// most time and its share, and the latest end. Built incrementally as spans arrive, so the
// whole-run view of a row of millions of spans is drawn from a few thousand buckets. A level
// whose bucket count passes a bound is dropped (the run outgrew it; the raw spans draw those
// zooms), so memory stays bounded however long the run.
#pragma once

#include "trace.h"

#include <array>
#include <cstdint>
#include <vector>

namespace syncopate {

struct LodBucket {
    std::int64_t maxEnd = 0;  // latest end of a span starting in the bucket
    std::uint32_t count = 0;  // spans starting in the bucket
    std::uint16_t phases = 0; // bit p: some span of phase p
    std::uint8_t dominant = 0;
    std::uint8_t share = 0;   // the dominant phase's share of the spans' time, 0..255
};
static_assert(sizeof(LodBucket) == 16);

class RowLod {
public:
    static constexpr int kLevels = 16;
    static constexpr int kFirstShift = 14; // level 0: 16 us buckets; finer zooms draw raw spans
    // Buckets a level may hold before it is dropped (2 MiB).
    static constexpr std::size_t kMaxBuckets = std::size_t(1) << 17;

    static std::int64_t bucketNs(int level) { return std::int64_t(1) << (kFirstShift + 2 * level); }

    void add(const Record &span);
    // Closes the open buckets (their dominant phases), e.g. before drawing or saving.
    void settle();

    // The finest level still kept.
    int finestLevel() const { return m_finest; }
    const std::vector<LodBucket> &level(int l) const { return m_levels[std::size_t(l)].buckets; }
    // Spans starting in [t0, t1) by the finest level's buckets (an estimate at the edges).
    std::uint64_t countIn(std::int64_t t0, std::int64_t t1) const { return countIn(m_finest, t0, t1); }
    std::uint64_t countIn(int level, std::int64_t t0, std::int64_t t1) const;
    // The coarsest kept level whose buckets are at most ns wide (the finest kept when none is).
    int levelFor(double ns) const;
    std::uint64_t spans() const { return m_spans; }
    std::int64_t maxEnd() const { return m_maxEnd; }
    std::size_t memoryBytes() const;

    // For the store's index file.
    struct Level {
        std::vector<LodBucket> buckets;
        std::int64_t open = -1; // bucket whose phase times are still being summed
        std::array<std::int64_t, std::size_t(Phase::Count)> openNs{};
    };
    const Level &rawLevel(int l) const { return m_levels[std::size_t(l)]; }
    void restore(int finest, std::uint64_t spans, std::int64_t maxEnd, std::vector<Level> levels);

private:
    void close(Level &lv);

    std::array<Level, kLevels> m_levels;
    int m_finest = 0;
    std::uint64_t m_spans = 0;
    std::int64_t m_maxEnd = 0;
};

} // namespace syncopate
