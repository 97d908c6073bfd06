// The store's index file (index.syi): everything a TraceModel holds except raw spans, so that
// opening a run of 100M spans draws its whole-run view without reading them. Written at the end
// of a run; a run without one (interrupted) is indexed again from its row files.
#include "tracemodel.h"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace syncopate {
namespace {

constexpr char kMagic[8] = {'S', 'Y', 'N', 'C', 'I', 'D', 'X', '\0'};
// 2: steps carry descheduled time; 3: a staleness histogram per worker
// 4: copy and compute phases, comm lanes; 5: input wait, bn divergence; 6: a row's sub-row;
// 7: the async evaluator's row and counters
constexpr std::uint32_t kIndexVersion = 7;
constexpr std::uint32_t kOldestIndexVersion = 5; // read as every row's sub-row 0, no evaluator
constexpr std::uint64_t kMaxIndexBytes = std::uint64_t(1) << 31;

class Out {
public:
    template <typename T> void put(const T &v)
    {
        const auto *p = reinterpret_cast<const unsigned char *>(&v);
        m_bytes.insert(m_bytes.end(), p, p + sizeof v);
    }
    template <typename T> void putVector(const std::vector<T> &v)
    {
        put<std::uint64_t>(v.size());
        const auto *p = reinterpret_cast<const unsigned char *>(v.data());
        m_bytes.insert(m_bytes.end(), p, p + v.size() * sizeof(T));
    }
    void putString(const std::string &s)
    {
        put<std::uint32_t>(std::uint32_t(s.size()));
        m_bytes.insert(m_bytes.end(), s.begin(), s.end());
    }
    std::vector<unsigned char> m_bytes;
};

class In {
public:
    In(const std::vector<unsigned char> &b, std::string path) : m_b(b), m_path(std::move(path)) {}
    template <typename T> T get()
    {
        need(sizeof(T), "a field");
        T v;
        std::memcpy(&v, m_b.data() + m_pos, sizeof v);
        m_pos += sizeof v;
        return v;
    }
    // A count from the file is checked against the bytes left before anything is reserved.
    template <typename T> std::vector<T> getVector(std::uint64_t limit, const char *what)
    {
        const auto at = m_pos;
        const auto n = get<std::uint64_t>();
        if (n > limit || n > (m_b.size() - m_pos) / sizeof(T))
            fail(at, std::string(what) + " claims " + std::to_string(n) + " entries");
        std::vector<T> v(n);
        if (n > 0)
            std::memcpy(v.data(), m_b.data() + m_pos, n * sizeof(T));
        m_pos += n * sizeof(T);
        return v;
    }
    std::string getString()
    {
        const auto at = m_pos;
        const auto n = get<std::uint32_t>();
        if (n > 1024 || n > m_b.size() - m_pos)
            fail(at, "a name of " + std::to_string(n) + " bytes");
        std::string s(reinterpret_cast<const char *>(m_b.data() + m_pos), n);
        m_pos += n;
        return s;
    }
    [[noreturn]] void fail(std::uint64_t at, const std::string &what) const
    {
        throw StoreError(m_path + " at byte " + std::to_string(at) + ": " + what + " (damaged index)");
    }
    std::uint64_t pos() const { return m_pos; }

private:
    void need(std::size_t n, const char *what) const
    {
        if (m_b.size() - m_pos < n)
            fail(m_pos, std::string("cut short inside ") + what);
    }
    const std::vector<unsigned char> &m_b;
    std::string m_path;
    std::uint64_t m_pos = 0;
};

} // namespace

void TraceModel::saveIndex(const std::string &path) const
{
    Out o;
    o.m_bytes.insert(o.m_bytes.end(), kMagic, kMagic + 8);
    o.put(kIndexVersion);
    o.put<std::int32_t>(m_workers);
    o.put<std::uint8_t>(std::uint8_t((m_dataLanes ? 1 : 0) | (m_commLanes ? 2 : 0)));
    o.put<std::int32_t>(m_samplesPerBatch);
    o.put(m_last);
    o.put(m_spans);
    o.put(m_records);
    o.put<std::uint64_t>(m_rows.size());
    for (Row &row : m_rows) {
        o.put<std::int32_t>(row.desc.worker);
        o.put<std::uint8_t>(std::uint8_t(row.desc.kind));
        o.put<std::uint16_t>(std::uint16_t(row.desc.sub));
        o.putString(row.desc.name);
        row.lod.settle();
        o.put<std::int32_t>(row.lod.finestLevel());
        o.put(row.lod.spans());
        o.put(row.lod.maxEnd());
        for (int l = 0; l < RowLod::kLevels; ++l) {
            const RowLod::Level &lv = row.lod.rawLevel(l);
            o.put(lv.open);
            o.put(lv.openNs);
            o.putVector(lv.buckets);
        }
    }
    for (std::size_t c = 0; c < m_counters.size(); ++c)
        for (std::size_t w = 0; w < m_counters[c].size(); ++w) {
            o.put<std::int32_t>(m_counterStride[c * std::size_t(m_workers + 1) + w]);
            o.putVector(m_counters[c][w]);
        }
    for (const StepSeries &s : m_steps) {
        o.put<std::int32_t>(s.stride);
        o.putVector(s.points);
    }
    o.putVector(m_staleness);
    for (const auto &h : m_stalenessPerWorker)
        o.putVector(h);
    o.putVector(m_batchesPerWindow);
    o.put<std::uint32_t>(std::uint32_t(crc32(0, o.m_bytes.data(), uInt(o.m_bytes.size()))));
    // Compressed: the summaries of quiet stretches are runs of empty buckets.
    std::vector<unsigned char> file(16 + ZSTD_compressBound(o.m_bytes.size()));
    std::memcpy(file.data(), kMagic, 8);
    const std::uint64_t rawSize = o.m_bytes.size();
    std::memcpy(file.data() + 8, &rawSize, 8);
    const std::size_t packed = ZSTD_compress(file.data() + 16, file.size() - 16, o.m_bytes.data(), o.m_bytes.size(), 3);
    if (ZSTD_isError(packed))
        throw StoreError(path + ": compressing the index failed");
    file.resize(16 + packed);

    // Replaced atomically: a reader sees the old index or the new one, never half of one.
    const std::string tmp = path + ".tmp";
    std::FILE *f = std::fopen(tmp.c_str(), "wb");
    if (!f)
        throw StoreError(tmp + ": cannot write (" + std::strerror(errno) + ")");
    const bool ok = std::fwrite(file.data(), 1, file.size(), f) == file.size();
    if (std::fclose(f) != 0 || !ok)
        throw StoreError(tmp + ": write failed (disk full?)");
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec)
        throw StoreError(path + ": cannot replace (" + ec.message() + ")");
}

bool TraceModel::loadIndex(const std::string &path)
{
    std::error_code ec;
    auto size = std::filesystem::file_size(path, ec);
    if (ec)
        return false;
    if (size > kMaxIndexBytes || size < 16)
        throw StoreError(path + ": " + std::to_string(size) + " bytes is not an index (12 bytes to 2 GiB)");
    std::vector<unsigned char> packed(size);
    std::FILE *f = std::fopen(path.c_str(), "rb");
    if (!f)
        throw StoreError(path + ": cannot open (" + std::strerror(errno) + ")");
    const bool ok = std::fread(packed.data(), 1, size, f) == size;
    std::fclose(f);
    if (!ok)
        throw StoreError(path + ": cannot be read");
    if (size < 16 || std::memcmp(packed.data(), kMagic, 8) != 0)
        throw StoreError(path + ": not a Syncopate index (bad magic at byte 0)");
    std::uint64_t rawSize;
    std::memcpy(&rawSize, packed.data() + 8, 8);
    if (rawSize > kMaxIndexBytes || rawSize < 16 ||
        ZSTD_getFrameContentSize(packed.data() + 16, size - 16) != rawSize)
        throw StoreError(path + " at byte 8: index of " + std::to_string(rawSize) +
                         " bytes does not match its compressed frame (at most 2 GiB)");
    std::vector<unsigned char> bytes(rawSize);
    if (ZSTD_decompress(bytes.data(), bytes.size(), packed.data() + 16, size - 16) != rawSize)
        throw StoreError(path + " at byte 16: the index does not decompress");
    packed = {};
    size = rawSize;
    if (std::memcmp(bytes.data(), kMagic, 8) != 0)
        throw StoreError(path + ": not a Syncopate index (bad magic inside)");
    std::uint32_t crc;
    std::memcpy(&crc, bytes.data() + size - 4, 4);
    if (crc != std::uint32_t(crc32(0, bytes.data(), uInt(size - 4))))
        throw StoreError(path + ": checksum mismatch (damaged index)");
    bytes.resize(size - 4);
    In in(bytes, path);
    for (int i = 0; i < 8; ++i)
        in.get<char>();
    const auto version = in.get<std::uint32_t>();
    if (version < kOldestIndexVersion || version > kIndexVersion)
        in.fail(8, "version " + std::to_string(version) + ", this Syncopate reads versions " +
                       std::to_string(kOldestIndexVersion) + " to " + std::to_string(kIndexVersion));
    const auto workers = in.get<std::int32_t>();
    if (workers != m_workers)
        in.fail(12, std::to_string(workers) + " workers where the config has " + std::to_string(m_workers));
    const auto lanes = in.get<std::uint8_t>();
    const bool dataLanes = (lanes & 1) != 0, commLanes = (lanes & 2) != 0;
    m_samplesPerBatch = in.get<std::int32_t>();
    m_last = in.get<std::int64_t>();
    m_spans = in.get<std::uint64_t>();
    m_records = in.get<std::uint64_t>();
    const auto rows = in.get<std::uint64_t>();
    if (rows > 65536 * 3)
        in.fail(in.pos(), std::to_string(rows) + " rows");
    TraceModel fresh(workers, dataLanes, m_samplesPerBatch, commLanes);
    m_dataLanes = dataLanes;
    m_commLanes = commLanes;
    m_rows = std::move(fresh.m_rows);
    m_rowIndex = std::move(fresh.m_rowIndex);
    m_rowOf.clear();
    for (std::uint64_t i = 0; i < rows; ++i) {
        RowDescriptor d;
        d.worker = in.get<std::int32_t>();
        const auto kind = in.get<std::uint8_t>();
        const bool evaluator = kind == std::uint8_t(RowKind::Evaluator);
        if (kind >= std::uint8_t(RowKind::Count) || d.worker < 0 || d.worker > 65535 ||
            (evaluator && (version < 7 || d.worker != workers)))
            in.fail(in.pos(), "row of worker " + std::to_string(d.worker) + ", kind " + std::to_string(kind));
        d.kind = RowKind(kind);
        d.sub = version >= 6 ? int(in.get<std::uint16_t>()) : 0;
        d.name = in.getString();
        const auto finest = in.get<std::int32_t>();
        const auto spans = in.get<std::uint64_t>();
        const auto maxEnd = in.get<std::int64_t>();
        std::vector<RowLod::Level> levels(RowLod::kLevels);
        for (auto &lv : levels) {
            lv.open = in.get<std::int64_t>();
            lv.openNs = in.get<decltype(lv.openNs)>();
            lv.buckets = in.getVector<LodBucket>(RowLod::kMaxBuckets, "a summary level");
            if (lv.open < -1 || lv.open >= std::int64_t(lv.buckets.size()))
                in.fail(in.pos(), "a summary level's open bucket " + std::to_string(lv.open) + " is not one of its " +
                                      std::to_string(lv.buckets.size()) + " buckets");
            for (const std::int64_t ns : lv.openNs)
                if (ns < 0 || ns > (kMaxRunNs << 10))
                    in.fail(in.pos(), "a summary level's phase time " + std::to_string(ns) + " ns is out of range");
            for (const LodBucket &b : lv.buckets)
                if (b.dominant >= std::uint8_t(Phase::Count))
                    in.fail(in.pos(), "a summary bucket names phase " + std::to_string(b.dominant));
        }
        auto it = m_rowIndex.find({d.worker, int(d.kind), d.sub});
        if (it == m_rowIndex.end()) {
            it = m_rowIndex.emplace(std::make_tuple(d.worker, int(d.kind), d.sub), m_rows.size()).first;
            m_rows.emplace_back();
        }
        Row &row = m_rows[it->second];
        row.desc = d;
        row.lod.restore(finest, spans, maxEnd, std::move(levels));
    }
    // Before version 7 there was no evaluator's series: left empty.
    const std::size_t series = std::size_t(m_workers) + (version >= 7 ? 1 : 0);
    for (auto &perCounter : m_counters)
        perCounter.back().clear();
    for (std::size_t c = 0; c < m_counters.size(); ++c)
        for (std::size_t w = 0; w < series; ++w) {
            const auto stride = in.get<std::int32_t>();
            if (stride < 1 || stride > (1 << 30))
                in.fail(in.pos(), "counter stride " + std::to_string(stride));
            m_counterStride[c * std::size_t(m_workers + 1) + w] = stride;
            m_counters[c][w] = in.getVector<CounterPoint>(kMaxCounterPoints + 1, "a counter series");
        }
    for (StepSeries &s : m_steps) {
        s.stride = in.get<std::int32_t>();
        if (s.stride < 1 || s.stride > (1 << 30))
            in.fail(in.pos(), "step stride " + std::to_string(s.stride));
        s.points = in.getVector<StepPoint>(kMaxStepPoints + 1, "a step series");
    }
    m_staleness = in.getVector<std::uint64_t>(kMaxStaleness, "the staleness histogram");
    m_stalenessPerWorker.assign(std::size_t(m_workers), {});
    for (auto &h : m_stalenessPerWorker)
        h = in.getVector<std::uint64_t>(kMaxStaleness, "a worker's staleness histogram");
    m_batchesPerWindow = in.getVector<std::uint32_t>(std::uint64_t(1e7) + 1, "the throughput windows");
    sortRows();
    return true;
}

} // namespace syncopate
