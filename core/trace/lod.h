// A row's level-of-detail summary: for zoom levels 4 times apart (16 us to 5 h per bucket), per
// time bucket, how many spans start there, which phases they cover, the phase that covers the
// most time and its share, and the latest end. Built incrementally as spans arrive, so the
// whole-run view of a row of millions of spans is drawn from a few thousand buckets. A level
// whose bucket count passes a bound is dropped (the run outgrew it; the raw spans draw those
// zooms), so memory stays bounded however long the run.
//
// A span touches the finest level only; a bucket's totals move one level coarser when that level
// moves on to its next bucket, and settle() brings every level up to date. A late span (one
// starting before the newest bucket) updates every level at once, as before.
#pragma once

#include "trace.h"

#include <array>
#include <cstdint>
#include <limits>
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
    // Brings the coarser levels up to date and closes the open buckets (their dominant phases):
    // before drawing, saving or reading any level but the finest.
    void settle();

    // The finest level still kept.
    int finestLevel() const { return m_finest; }
    // Keeps no level finer than `level` from the start (before the first add): for a live
    // view, whose finest levels would only draw rows of more than 200000 spans a second, and
    // cost most of the indexing (a bucket per 16 us of run time per row).
    void startAt(int level);
    // Coarser levels than the finest are complete after settle().
    const std::vector<LodBucket> &level(int l) const { return m_levels[std::size_t(l)].buckets; }
    // Spans starting in [t0, t1) by the finest level's buckets (an estimate at the edges; always
    // current, settled or not).
    std::uint64_t countIn(std::int64_t t0, std::int64_t t1) const { return countIn(m_finest, t0, t1); }
    std::uint64_t countIn(int level, std::int64_t t0, std::int64_t t1) const;
    // The coarsest kept level whose buckets are at most ns wide (the finest kept when none is).
    int levelFor(double ns) const;
    std::uint64_t spans() const { return m_spans; }
    std::int64_t maxEnd() const { return m_maxEnd; }
    std::size_t memoryBytes() const;

    // For the store's index file (after settle()).
    struct Level {
        std::vector<LodBucket> buckets;
        std::int64_t open = -1; // bucket whose phase times are still being summed
        std::array<std::int64_t, std::size_t(Phase::Count)> openNs{};
    };
    const Level &rawLevel(int l) const { return m_levels[std::size_t(l)]; }
    // Settles lv's open bucket: its dominant phase and that phase's share of its time.
    static void close(Level &lv);
    void restore(int finest, std::uint64_t spans, std::int64_t maxEnd, std::vector<Level> levels);

private:
    // What level l's open bucket has gathered that the coarser levels' open buckets have not.
    struct Carry {
        // Phase times, in no coarser level's sum yet (16: a phase is a nibble of the record).
        std::array<std::int64_t, 16> ns{};
        std::uint16_t nsMask = 0; // phases whose ns here or in Level::openNs may be nonzero
        std::uint16_t phases = 0; // of the spans counted in level l but not above
        std::uint32_t count = 0;
        std::int64_t maxEnd = std::numeric_limits<std::int64_t>::min();
    };

    void advance(std::int64_t start);
    void closeAndCarry(int l);
    void carryCounts(int l);
    void carryUp(int l);
    void addLate(std::int64_t start, std::int64_t end, std::int64_t dur, std::size_t phase);
    // The algorithm before carries, every level per span: for a restored state whose levels
    // disagree (a foreign or damaged index), where carrying would not give the same buckets.
    void addEachLevel(const Record &span);

    std::array<Level, kLevels> m_levels;
    std::array<Carry, kLevels> m_carry;
    bool m_eachLevel = false;
    int m_finest = 0;
    std::uint64_t m_spans = 0;
    std::int64_t m_maxEnd = 0;
};

} // namespace syncopate
