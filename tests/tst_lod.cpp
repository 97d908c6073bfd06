// RowLod summarises a span only at its finest level and carries totals to the coarser levels
// when a bucket closes. These tests hold it to the algorithm it replaced (every level per span,
// kept here as the reference): seeded streams with late and out-of-order spans, zero and negative
// lengths, huge times and durations, starts on bucket edges, gaps and runs that outgrow levels,
// settle() at random moments and a restore halfway, must leave every level's buckets identical.
#include "lod.h"
#include "random.h"
#include "tracemodel.h"

#include <QTest>

#include <algorithm>
#include <limits>

using namespace syncopate;

namespace {

// The summary as it was built before carries: every level updated for every span.
class ReferenceLod {
public:
    using Level = RowLod::Level;
    static constexpr int kLevels = RowLod::kLevels;

    void add(const Record &r)
    {
        const std::int64_t start = std::max<std::int64_t>(0, r.start);
        const std::int64_t dur = std::max<std::int64_t>(1, r.end - r.start);
        const auto phase = std::size_t(r.phase());
        ++m_spans;
        m_maxEnd = std::max(m_maxEnd, r.end);
        for (int l = m_finest; l < kLevels; ++l) {
            Level &lv = m_levels[std::size_t(l)];
            const std::int64_t i = start >> (RowLod::kFirstShift + 2 * l);
            if (std::size_t(i) >= lv.buckets.size()) {
                if (std::size_t(i) >= RowLod::kMaxBuckets) {
                    if (l == m_finest) {
                        lv = Level{};
                        ++m_finest;
                        continue;
                    }
                    break;
                }
                lv.buckets.resize(std::size_t(i) + 1);
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
                RowLod::close(lv);
                lv.open = i;
            }
            std::int64_t &ns = lv.openNs[phase];
            if (__builtin_add_overflow(ns, dur, &ns))
                ns = std::numeric_limits<std::int64_t>::max();
        }
    }
    void settle()
    {
        for (Level &lv : m_levels) {
            const std::int64_t open = lv.open;
            auto ns = lv.openNs;
            RowLod::close(lv);
            lv.open = open;
            lv.openNs = ns;
        }
    }
    void restore(int finest, std::uint64_t spans, std::int64_t maxEnd, std::vector<Level> levels)
    {
        m_finest = std::clamp(finest, 0, kLevels - 1);
        m_spans = spans;
        m_maxEnd = maxEnd;
        for (std::size_t l = 0; l < m_levels.size(); ++l)
            m_levels[l] = l < levels.size() && int(l) >= m_finest ? std::move(levels[l]) : Level{};
    }
    std::uint64_t countIn(std::int64_t t0, std::int64_t t1) const
    {
        const auto &b = m_levels[std::size_t(m_finest)].buckets;
        const int shift = RowLod::kFirstShift + 2 * m_finest;
        std::uint64_t n = 0;
        for (std::int64_t i = std::max<std::int64_t>(0, t0) >> shift;
             i <= std::max<std::int64_t>(0, t1) >> shift && std::size_t(i) < b.size(); ++i)
            n += b[std::size_t(i)].count;
        return n;
    }

    std::array<Level, kLevels> m_levels;
    int m_finest = 0;
    std::uint64_t m_spans = 0;
    std::int64_t m_maxEnd = 0;

};

// How a stream is drawn: gaps between spans, how often and how far a span starts early, and how
// often the odd cases come.
struct StreamShape {
    std::int64_t maxGapNs;   // forward gap after each span, uniform in [0, maxGapNs]
    double lateShare;        // spans starting before the newest one
    std::int64_t lateNs;     // how far back at most
    double zeroShare;        // zero, negative and reversed lengths, negative starts
    double edgeShare;        // starts on a bucket edge of some level, or one ns beside it
    double hugeShare;        // durations near 2^52 and jumps far ahead
};

std::vector<Record> stream(std::uint64_t seed, std::size_t n, const StreamShape &s)
{
    Rng rng(seed);
    std::vector<Record> out;
    out.reserve(n);
    std::int64_t t = 0;
    for (std::size_t k = 0; k < n; ++k) {
        const auto phase = Phase(rng.below(std::uint64_t(Phase::Count)));
        std::int64_t start = t, dur = 1000 + std::int64_t(rng.below(59000));
        if (rng.uniform() < s.lateShare)
            start = std::max<std::int64_t>(0, t - std::int64_t(rng.below(std::uint64_t(s.lateNs) + 1)));
        if (rng.uniform() < s.edgeShare) {
            const std::int64_t w = RowLod::bucketNs(int(rng.below(RowLod::kLevels)));
            start = (start / w + 1) * w + std::int64_t(rng.below(3)) - 1;
            t = std::max(t, start);
        }
        if (rng.uniform() < s.zeroShare) {
            switch (rng.below(4)) {
            case 0: dur = 0; break;
            case 1: dur = -std::int64_t(rng.below(5000)); break;
            case 2: start = -std::int64_t(rng.below(100000)); break;
            default: start = -std::int64_t(rng.below(100000)), dur = std::int64_t(rng.below(3)); break;
            }
        }
        if (rng.uniform() < s.hugeShare) {
            if (rng.below(2))
                dur = kMaxRunNs - std::int64_t(rng.below(1000));
            else
                t += std::int64_t(rng.below(std::uint64_t(1) << 36));
        }
        out.push_back(Record::span(0, phase, defaultLane(phase), std::uint32_t(k), start, start + dur));
        t = std::max(t, start) + std::int64_t(rng.below(std::uint64_t(s.maxGapNs) + 1));
    }
    return out;
}

bool sameBucket(const LodBucket &a, const LodBucket &b)
{
    return a.count == b.count && a.phases == b.phases && a.maxEnd == b.maxEnd && a.dominant == b.dominant &&
           a.share == b.share;
}

// Both settled: every level, bucket by bucket, and what the index file stores of each level.
void compareSettled(const RowLod &lod, const ReferenceLod &ref)
{
    QCOMPARE(lod.finestLevel(), ref.m_finest);
    QCOMPARE(lod.spans(), ref.m_spans);
    QCOMPARE(lod.maxEnd(), ref.m_maxEnd);
    for (int l = 0; l < RowLod::kLevels; ++l) {
        const RowLod::Level &a = lod.rawLevel(l);
        const RowLod::Level &b = ref.m_levels[std::size_t(l)];
        QCOMPARE(a.buckets.size(), b.buckets.size());
        QCOMPARE(a.open, b.open);
        QVERIFY2(a.openNs == b.openNs, qPrintable(QStringLiteral("level %1: open phase times differ").arg(l)));
        const auto diff = std::mismatch(a.buckets.begin(), a.buckets.end(), b.buckets.begin(), sameBucket);
        QVERIFY2(diff.first == a.buckets.end(),
                 qPrintable(QStringLiteral("level %1, bucket %2 differs").arg(l).arg(diff.first - a.buckets.begin())));
        QCOMPARE(&lod.level(l), &a.buckets);
    }
}

} // namespace

class TestLod : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void sameAsEveryLevelPerSpan_data();
    void sameAsEveryLevelPerSpan();
    void sameAfterRestore_data();
    void sameAfterRestore();
    void restoredLevelsThatDisagreeStillMatch();
    void timesPastEveryLevel();
    void startingAtACoarserLevel();
    void traceModelRowsMatch();
};

void TestLod::sameAsEveryLevelPerSpan_data()
{
    QTest::addColumn<quint64>("seed");
    QTest::addColumn<int>("spans");
    QTest::addColumn<qint64>("maxGapNs");
    QTest::addColumn<double>("lateShare");
    QTest::addColumn<qint64>("lateNs");
    QTest::addColumn<double>("zeroShare");
    QTest::addColumn<double>("edgeShare");
    QTest::addColumn<double>("hugeShare");
    // name: seed, spans, gap, late share, late reach, zero/negative, edges, huge
    QTest::newRow("in order, back to back") << quint64(1) << 200000 << qint64(0) << 0.0 << qint64(0) << 0.0 << 0.0 << 0.0;
    QTest::newRow("in order, gaps") << quint64(2) << 100000 << qint64(2000000) << 0.0 << qint64(0) << 0.0 << 0.0 << 0.0;
    QTest::newRow("late, within a bucket") << quint64(3) << 100000 << qint64(5000) << 0.2 << qint64(8000) << 0.0
                                           << 0.0 << 0.0;
    QTest::newRow("late, across buckets") << quint64(4) << 100000 << qint64(20000) << 0.1 << qint64(5000000)
                                          << 0.0 << 0.0 << 0.0;
    QTest::newRow("late, far back") << quint64(5) << 50000 << qint64(100000) << 0.05 << qint64(100000000000)
                                    << 0.0 << 0.0 << 0.0;
    QTest::newRow("zero, negative, reversed") << quint64(6) << 100000 << qint64(10000) << 0.05 << qint64(100000)
                                              << 0.2 << 0.0 << 0.0;
    QTest::newRow("bucket edges") << quint64(7) << 100000 << qint64(10000) << 0.05 << qint64(1000000) << 0.0
                                  << 0.2 << 0.0;
    QTest::newRow("huge times and durations") << quint64(8) << 50000 << qint64(10000) << 0.05 << (qint64(1) << 40)
                                              << 0.01 << 0.01 << 0.002;
    // 2^17 buckets of 16 us are 2.1 s: gaps of up to 1 ms outgrow level 0, then 50 ms levels 1-3.
    QTest::newRow("outgrows the finest level") << quint64(9) << 300000 << qint64(1000000) << 0.02
                                               << qint64(3000000) << 0.01 << 0.01 << 0.0;
    QTest::newRow("outgrows four levels") << quint64(10) << 200000 << qint64(50000000) << 0.02
                                          << qint64(200000000) << 0.01 << 0.01 << 0.0;
    QTest::newRow("everything at once") << quint64(11) << 300000 << qint64(3000000) << 0.1 << qint64(50000000)
                                        << 0.05 << 0.05 << 0.0005;
}

void TestLod::sameAsEveryLevelPerSpan()
{
    QFETCH(quint64, seed);
    QFETCH(int, spans);
    QFETCH(qint64, maxGapNs);
    QFETCH(double, lateShare);
    QFETCH(qint64, lateNs);
    QFETCH(double, zeroShare);
    QFETCH(double, edgeShare);
    QFETCH(double, hugeShare);
    const auto records = stream(seed, std::size_t(spans), {maxGapNs, lateShare, lateNs, zeroShare, edgeShare, hugeShare});
    RowLod lod;
    ReferenceLod ref;
    Rng when(seed, 1);
    for (const Record &r : records) {
        lod.add(r);
        ref.add(r);
        // The finest level is current without settling (the hover's count reads it).
        if (when.below(1000) == 0) {
            const auto t = std::int64_t(when.below(std::uint64_t(std::max<std::int64_t>(1, ref.m_maxEnd))));
            const auto t1 = t + std::int64_t(when.below(1000000000));
            QCOMPARE(lod.countIn(t, t1), ref.countIn(t, t1));
        }
        // Settling mid-stream (every draw does) must not change what comes after.
        if (when.below(5000) == 0) {
            lod.settle();
            ref.settle();
            compareSettled(lod, ref);
            if (QTest::currentTestFailed())
                return;
        }
    }
    lod.settle();
    ref.settle();
    compareSettled(lod, ref);
    // Settling twice changes nothing.
    lod.settle();
    compareSettled(lod, ref);
}

void TestLod::sameAfterRestore_data()
{
    QTest::addColumn<quint64>("seed");
    QTest::addColumn<qint64>("maxGapNs");
    QTest::addColumn<double>("lateShare");
    QTest::newRow("in order") << quint64(21) << qint64(20000) << 0.0;
    QTest::newRow("late spans") << quint64(22) << qint64(20000) << 0.1;
    QTest::newRow("outgrowing levels") << quint64(23) << qint64(3000000) << 0.05;
}

// The index file stores each level as settle() leaves it; a model read back from it goes on
// summing as if it had never stopped.
void TestLod::sameAfterRestore()
{
    QFETCH(quint64, seed);
    QFETCH(qint64, maxGapNs);
    QFETCH(double, lateShare);
    const auto records = stream(seed, 200000, {maxGapNs, lateShare, 10000000, 0.01, 0.01, 0.0});
    RowLod lod;
    ReferenceLod ref;
    const std::size_t half = records.size() / 2;
    for (std::size_t i = 0; i < half; ++i) {
        lod.add(records[i]);
        ref.add(records[i]);
    }
    lod.settle();
    std::vector<RowLod::Level> levels;
    for (int l = 0; l < RowLod::kLevels; ++l)
        levels.push_back(lod.rawLevel(l));
    RowLod back;
    back.restore(lod.finestLevel(), lod.spans(), lod.maxEnd(), std::move(levels));
    for (std::size_t i = half; i < records.size(); ++i) {
        back.add(records[i]);
        ref.add(records[i]);
    }
    back.settle();
    ref.settle();
    compareSettled(back, ref);
}

// A foreign or damaged index may hold levels whose open buckets do not nest; the summary then
// sums every level per span, as it always did, and still agrees with the reference.
void TestLod::restoredLevelsThatDisagreeStillMatch()
{
    const auto records = stream(31, 60000, {20000, 0.05, 1000000, 0.01, 0.01, 0.0});
    ReferenceLod seeded;
    for (std::size_t i = 0; i < 20000; ++i)
        seeded.add(records[i]);
    seeded.settle();
    std::vector<RowLod::Level> levels(seeded.m_levels.begin(), seeded.m_levels.end());
    levels[3].open = levels[3].open > 0 ? levels[3].open - 1 : -1; // no longer inside level 4's
    levels[5].openNs[2] = 12345;
    RowLod lod;
    ReferenceLod ref;
    lod.restore(seeded.m_finest, seeded.m_spans, seeded.m_maxEnd, levels);
    ref.restore(seeded.m_finest, seeded.m_spans, seeded.m_maxEnd, levels);
    for (std::size_t i = 20000; i < records.size(); ++i) {
        lod.add(records[i]);
        ref.add(records[i]);
    }
    lod.settle();
    ref.settle();
    compareSettled(lod, ref);
}

// A start past 2^61 ns leaves no level able to index it: every level goes, as before.
void TestLod::timesPastEveryLevel()
{
    RowLod lod;
    ReferenceLod ref;
    for (const std::int64_t start : {std::int64_t(0), std::int64_t(5000), std::int64_t(1) << 58,
                                     std::int64_t(1) << 58 | 12345, std::int64_t(1) << 40,
                                     std::int64_t(1) << 62}) {
        const Record r = Record::span(0, Phase::Forward, Lane::Compute, 0, start, start + 100);
        lod.add(r);
        ref.add(r);
        lod.settle();
        ref.settle();
        compareSettled(lod, ref);
    }
    QCOMPARE(lod.finestLevel(), RowLod::kLevels);
    QCOMPARE(lod.countIn(0, std::numeric_limits<std::int64_t>::max()), std::uint64_t(0)); // no level to read
}

// A live view keeps no level finer than 2: the same coarser levels, none finer, and a late
// request (spans already in) changes nothing.
void TestLod::startingAtACoarserLevel()
{
    const auto records = stream(12, 200000, {3000000, 0.05, 50000000, 0.02, 0.02, 0.0});
    RowLod lod;
    lod.startAt(2);
    ReferenceLod ref;
    ref.m_finest = 2;
    for (std::size_t k = 0; k < records.size(); ++k) {
        lod.add(records[k]);
        ref.add(records[k]);
        if (k == 10)
            lod.startAt(0);
    }
    lod.settle();
    ref.settle();
    compareSettled(lod, ref);
    QVERIFY(lod.level(0).empty() && lod.level(1).empty());
    QVERIFY(lod.finestLevel() >= 2);

    TraceModel model(2, false, 8);
    model.setFinestLevel(3);
    model.append(std::vector<Record>(records.begin(), records.begin() + 1000));
    QVERIFY(model.lod(0).finestLevel() >= 3);
    QVERIFY(model.lod(0).level(2).empty());
}

// Through the TraceModel: each row's summary is the reference fed that row's spans.
void TestLod::traceModelRowsMatch()
{
    constexpr int workers = 4;
    TraceModel model(workers, true, 8);
    std::vector<ReferenceLod> refs(std::size_t(workers) * 2);
    Rng rng(41);
    std::vector<std::int64_t> t(workers, 0);
    for (int poll = 0; poll < 200; ++poll) {
        std::vector<Record> batch;
        for (int w = 0; w < workers; ++w)
            for (int k = 0; k < 300; ++k) {
                const auto phase = Phase(rng.below(std::uint64_t(Phase::Count)));
                const Lane lane = rng.below(5) == 0 ? Lane::Data : defaultLane(phase);
                const std::int64_t d = 1000 + std::int64_t(rng.below(59000));
                const std::int64_t start = rng.below(20) == 0 ? std::max<std::int64_t>(0, t[w] - 300000) : t[w];
                batch.push_back(Record::span(w, phase, lane, std::uint32_t(poll), start, start + d, 10.0));
                if (k % 7 == 0)
                    batch.push_back(Record::counterSample(w, CounterId::Loss, std::uint32_t(poll), start, 1.0));
                t[w] = std::max(t[w], start + d);
            }
        model.append(batch);
        for (const Record &r : batch)
            if (r.isSpan())
                refs[std::size_t(r.worker) * 2 + (r.lane() == Lane::Data ? 1 : 0)].add(r);
        if (poll % 17 == 0)
            for (std::size_t r = 0; r < model.rowCount(); ++r) {
                const RowDescriptor &d = model.row(r);
                ReferenceLod &ref = refs[std::size_t(d.worker) * 2 + (d.kind == RowKind::DataLane ? 1 : 0)];
                ref.settle();
                compareSettled(model.lod(r), ref);
                if (QTest::currentTestFailed())
                    return;
            }
    }
}

QTEST_GUILESS_MAIN(TestLod)
#include "tst_lod.moc"
