#include "lod.h"

#include <algorithm>

namespace syncopate {
namespace {

constexpr int shiftOf(int level) { return RowLod::kFirstShift + 2 * level; }
constexpr unsigned kValidPhases = (1u << unsigned(Phase::Count)) - 1;

// Saturating: spans of damaged input may claim durations that sum past 2^63.
void addNs(std::int64_t &ns, std::int64_t d)
{
    if (__builtin_add_overflow(ns, d, &ns))
        ns = std::numeric_limits<std::int64_t>::max();
}

// Lengthens a level to n buckets. A level past a page of buckets (256) is headed for its cap, so
// it takes the cap's room at once: growing by doubling copied a live run's levels again and
// again, and touched fresh pages each time (a seventh of the GUI thread's time with 16
// workers). Pages reserved and not yet reached cost address space, not memory.
void growTo(std::vector<LodBucket> &buckets, std::size_t n)
{
    if (n > buckets.capacity())
        buckets.reserve(n <= 256 ? std::max(n, 2 * buckets.capacity()) : std::max(n, RowLod::kMaxBuckets));
    buckets.resize(n);
}

// Phase times (zero outside mask, never negative) to the bucket's dominant phase and share. Zero
// times change neither the double sum nor the first maximum, so only the mask's phases are read.
template <typename Ns> void setDominant(LodBucket &b, const Ns &ns, unsigned mask)
{
    // In double: phase times of damaged input may be near 2^63 each.
    double total = 0;
    std::size_t best = 0;
    for (unsigned m = mask & kValidPhases; m; m &= m - 1) {
        const auto p = std::size_t(__builtin_ctz(m));
        total += double(ns[p]);
        if (ns[p] > ns[best])
            best = p;
    }
    if (total > 0) {
        b.dominant = std::uint8_t(best);
        b.share = std::uint8_t(std::clamp(double(ns[best]) * 255.0 / total, 0.0, 255.0));
    }
}

std::uint16_t nonzero(const std::array<std::int64_t, std::size_t(Phase::Count)> &ns)
{
    std::uint16_t m = 0;
    for (std::size_t p = 0; p < ns.size(); ++p)
        if (ns[p] != 0)
            m |= std::uint16_t(1u << p);
    return m;
}

} // namespace

void RowLod::add(const Record &r)
{
    if (m_eachLevel)
        return addEachLevel(r);
    // Times before the run's start (a damaged or foreign file) are clamped, never indexed.
    const std::int64_t start = std::max<std::int64_t>(0, r.start);
    const std::int64_t dur = std::max<std::int64_t>(1, r.end - r.start);
    const auto phase = std::size_t(r.phase());
    ++m_spans;
    m_maxEnd = std::max(m_maxEnd, r.end);
    for (;;) {
        if (m_finest >= kLevels)
            return;
        Level &lv = m_levels[std::size_t(m_finest)];
        const std::int64_t i = start >> shiftOf(m_finest);
        if (i == lv.open)
            break;
        if (i < lv.open)
            return addLate(start, r.end, dur, phase);
        if (std::size_t(i) >= lv.buckets.size() && std::size_t(i) >= kMaxBuckets) {
            // The run has outgrown this level; coarser ones take over, with what it still carried.
            carryUp(m_finest);
            m_carry[std::size_t(m_finest)] = Carry{};
            lv = Level{};
            ++m_finest;
            continue;
        }
        advance(start);
        break;
    }
    Level &lv = m_levels[std::size_t(m_finest)];
    Carry &c = m_carry[std::size_t(m_finest)];
    const auto bit = std::uint16_t(1u << phase);
    LodBucket &b = lv.buckets[std::size_t(lv.open)];
    ++b.count;
    b.phases |= bit;
    b.maxEnd = std::max(b.maxEnd, r.end);
    ++c.count;
    c.phases |= bit;
    c.maxEnd = std::max(c.maxEnd, r.end);
    addNs(c.ns[phase], dur);
    c.nsMask |= bit;
}

void RowLod::advance(std::int64_t start)
{
    // Each level whose newest bucket the span passes closes it and hands its totals one level
    // up, finest first, so a level closes with everything its finer levels had gathered.
    for (int l = m_finest; l < kLevels; ++l) {
        Level &lv = m_levels[std::size_t(l)];
        const std::int64_t i = start >> shiftOf(l);
        if (i <= lv.open)
            break;
        closeAndCarry(l);
        if (std::size_t(i) >= lv.buckets.size())
            growTo(lv.buckets, std::size_t(i) + 1);
        lv.open = i;
    }
}

void RowLod::closeAndCarry(int l)
{
    Level &lv = m_levels[std::size_t(l)];
    Carry &c = m_carry[std::size_t(l)];
    const bool open = lv.open >= 0 && std::size_t(lv.open) < lv.buckets.size();
    if (open) {
        std::array<std::int64_t, 16> ns{};
        for (unsigned m = c.nsMask & kValidPhases; m; m &= m - 1) {
            const auto p = std::size_t(__builtin_ctz(m));
            ns[p] = lv.openNs[p];
            addNs(ns[p], c.ns[p]);
        }
        setDominant(lv.buckets[std::size_t(lv.open)], ns, c.nsMask);
        lv.openNs.fill(0);
    }
    carryUp(l);
    // Without an open bucket the summed times stay for the next one (as close() has it).
    c.nsMask = open ? 0 : nonzero(lv.openNs);
}

void RowLod::carryCounts(int l)
{
    // Level l's uncarried spans join the next coarser level's open bucket (and its carry).
    const Carry &c = m_carry[std::size_t(l)];
    if (l + 1 >= kLevels || !c.phases)
        return;
    Level &next = m_levels[std::size_t(l) + 1];
    if (next.open < 0 || std::size_t(next.open) >= next.buckets.size())
        return;
    Carry &up = m_carry[std::size_t(l) + 1];
    LodBucket &b = next.buckets[std::size_t(next.open)];
    b.count += c.count;
    b.phases |= c.phases;
    b.maxEnd = std::max(b.maxEnd, c.maxEnd);
    up.count += c.count;
    up.phases |= c.phases;
    up.maxEnd = std::max(up.maxEnd, c.maxEnd);
}

void RowLod::carryUp(int l)
{
    Carry &c = m_carry[std::size_t(l)];
    carryCounts(l);
    if (l + 1 < kLevels) {
        Carry &up = m_carry[std::size_t(l) + 1];
        for (unsigned m = c.nsMask; m; m &= m - 1) {
            const auto p = std::size_t(__builtin_ctz(m));
            addNs(up.ns[p], c.ns[p]);
        }
        up.nsMask |= c.nsMask;
    }
    for (unsigned m = c.nsMask; m; m &= m - 1)
        c.ns[std::size_t(__builtin_ctz(m))] = 0;
    c.count = 0;
    c.phases = 0;
    c.maxEnd = std::numeric_limits<std::int64_t>::min();
}

void RowLod::addLate(std::int64_t start, std::int64_t end, std::int64_t dur, std::size_t phase)
{
    // Rare (rows arrive mostly in order): every level at once. Its time goes to the first level
    // whose open bucket holds it, which hands it on to the coarser ones.
    const auto bit = std::uint16_t(1u << phase);
    bool summed = false;
    for (int l = m_finest; l < kLevels; ++l) {
        Level &lv = m_levels[std::size_t(l)];
        const std::int64_t i = start >> shiftOf(l);
        LodBucket &b = lv.buckets[std::size_t(i)];
        ++b.count;
        b.phases |= bit;
        b.maxEnd = std::max(b.maxEnd, end);
        if (i < lv.open) {
            // Its bucket is settled; it counts, but only shifts the dominant phase when the
            // bucket had none.
            if (b.count == 1)
                b.dominant = std::uint8_t(phase), b.share = 255;
        } else if (!summed) {
            Carry &c = m_carry[std::size_t(l)];
            addNs(c.ns[phase], dur);
            c.nsMask |= bit;
            summed = true;
        }
    }
}

void RowLod::settle()
{
    if (m_eachLevel || m_finest >= kLevels) {
        for (Level &lv : m_levels) {
            const std::int64_t open = lv.open;
            auto ns = lv.openNs;
            close(lv);
            // Keep summing into it: more spans of that bucket may come.
            lv.open = open;
            lv.openNs = ns;
        }
        return;
    }
    for (int l = m_finest; l < kLevels; ++l) {
        Carry &c = m_carry[std::size_t(l)];
        carryCounts(l);
        c.count = 0;
        c.phases = 0;
        c.maxEnd = std::numeric_limits<std::int64_t>::min();
    }
    // Each level's summed times become whole in Level::openNs (for the index file), and the
    // open buckets take their dominant phases from them; summing goes on from there.
    std::array<std::int64_t, 16> run{};
    unsigned runMask = 0;
    for (int l = m_finest; l < kLevels; ++l) {
        Level &lv = m_levels[std::size_t(l)];
        Carry &c = m_carry[std::size_t(l)];
        for (unsigned m = c.nsMask; m; m &= m - 1) {
            const auto p = std::size_t(__builtin_ctz(m));
            addNs(run[p], c.ns[p]);
            c.ns[p] = 0;
        }
        runMask |= c.nsMask;
        for (unsigned m = runMask & kValidPhases; m; m &= m - 1) {
            const auto p = std::size_t(__builtin_ctz(m));
            addNs(lv.openNs[p], run[p]);
        }
        c.nsMask = std::uint16_t(c.nsMask | runMask);
        if (lv.open >= 0 && std::size_t(lv.open) < lv.buckets.size())
            setDominant(lv.buckets[std::size_t(lv.open)], lv.openNs, c.nsMask);
    }
}

void RowLod::startAt(int level)
{
    if (m_spans == 0)
        m_finest = std::clamp(level, 0, kLevels - 1);
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
    if (lv < 0 || lv >= kLevels) // every level outgrown (times past 2^61 ns): nothing indexed
        return 0;
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
        n += lv.buckets.size() * sizeof(LodBucket); // reserved room is not touched until used
    return n;
}

void RowLod::restore(int finest, std::uint64_t spans, std::int64_t maxEnd, std::vector<Level> levels)
{
    m_finest = std::clamp(finest, 0, kLevels - 1);
    m_spans = spans;
    m_maxEnd = maxEnd;
    for (std::size_t l = 0; l < m_levels.size(); ++l)
        m_levels[l] = l < levels.size() && int(l) >= m_finest ? std::move(levels[l]) : Level{};
    m_carry.fill(Carry{});
    // Carrying needs what add() itself leaves: each level's open bucket inside the next coarser
    // one's, and no negative phase time.
    m_eachLevel = false;
    for (int l = m_finest; l < kLevels; ++l) {
        const Level &lv = m_levels[std::size_t(l)];
        if (lv.open < -1 || (lv.open >= 0 && std::size_t(lv.open) >= lv.buckets.size()) ||
            (l + 1 < kLevels && m_levels[std::size_t(l) + 1].open != lv.open >> 2) ||
            std::any_of(lv.openNs.begin(), lv.openNs.end(), [](std::int64_t ns) { return ns < 0; }))
            m_eachLevel = true;
        m_carry[std::size_t(l)].nsMask = nonzero(lv.openNs);
    }
}

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

void RowLod::addEachLevel(const Record &r)
{
    const std::int64_t start = std::max<std::int64_t>(0, r.start);
    const std::int64_t dur = std::max<std::int64_t>(1, r.end - r.start);
    const auto phase = std::size_t(r.phase());
    ++m_spans;
    m_maxEnd = std::max(m_maxEnd, r.end);
    for (int l = m_finest; l < kLevels; ++l) {
        Level &lv = m_levels[std::size_t(l)];
        const std::int64_t i = start >> shiftOf(l);
        if (std::size_t(i) >= lv.buckets.size()) {
            if (std::size_t(i) >= kMaxBuckets) {
                if (l == m_finest) {
                    lv = Level{};
                    ++m_finest;
                    continue;
                }
                break; // a time beyond even the coarse levels' reach (damaged input)
            }
            growTo(lv.buckets, std::size_t(i) + 1);
        }
        LodBucket &b = lv.buckets[std::size_t(i)];
        ++b.count;
        b.phases |= std::uint16_t(1u << phase);
        b.maxEnd = std::max(b.maxEnd, r.end);
        if (lv.open != i) {
            if (i < lv.open) {
                if (b.count == 1)
                    b.dominant = std::uint8_t(phase), b.share = 255;
                continue;
            }
            close(lv);
            lv.open = i;
        }
        addNs(lv.openNs[phase], dur);
    }
}

} // namespace syncopate
