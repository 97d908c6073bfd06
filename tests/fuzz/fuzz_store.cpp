// The run store's readers, through the paths Open Run and syncopate-cli take: a run directory
// is written from the input and opened with openRunDirectory, then drawn from (spans and
// summaries over the whole run and a zoomed window, counters, phase times) and exported to
// trace.json. The row files and the index carry checksums, so bytes mutated at random would
// stop at the checksum; the harness builds them from the input instead and checksums them
// itself, so that what lies behind the checksums is fuzzed too. The first byte chooses:
//   mode 0: one block's columns (zstd-compressed by the harness, or taken raw with bit 2)
//   mode 1: w0.syr built from the input: a 64-byte file header from the input (made valid
//           unless bit 2), then blocks of (count, columns) the harness compresses and checksums
//           (bit 3: as written by the input, without fixing); w1.syr is a valid row
//   mode 2: index.syi from the input, compressed and checksummed by the harness, its version,
//           worker count and record count made to match unless bit 2
//   mode 3: summary.json from the input, beside valid row files
// Any exception other than StoreError or ConfigError is a bug, and so is a crash or a hang.
#include "chunkfile.h"
#include "config.h"
#include "fuzzfile.h"
#include "runstore.h"
#include "tracemodel.h"

#include <zlib.h>
#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

using namespace syncopate;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kRecordBytes = 32;
constexpr int kPhaseColours[int(Phase::Count)] = {};

const std::string kDir = fuzz::tempPath("run");

template <typename T> void put(std::string &s, T v)
{
    s.append(reinterpret_cast<const char *>(&v), sizeof v);
}

std::string zstd(std::string_view raw)
{
    std::string out(ZSTD_compressBound(raw.size()), '\0');
    const std::size_t n = ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), 1);
    out.resize(ZSTD_isError(n) ? 0 : n);
    return out;
}

std::uint32_t crc(std::string_view s)
{
    return std::uint32_t(crc32(0, reinterpret_cast<const Bytef *>(s.data()), uInt(s.size())));
}

// A block as ChunkWriter writes it, around columns taken as they come.
std::string block(std::string_view columns, std::uint32_t count, std::int64_t minStart, std::int64_t maxEnd)
{
    const std::string packed = zstd(columns);
    std::string h;
    put<std::uint32_t>(h, 0x4b4c4253);
    put<std::uint32_t>(h, count);
    put<std::uint32_t>(h, std::uint32_t(columns.size()));
    put<std::uint32_t>(h, std::uint32_t(packed.size()));
    put<std::int64_t>(h, minStart);
    put<std::int64_t>(h, maxEnd);
    put<std::uint32_t>(h, crc(packed));
    put<std::uint32_t>(h, crc(h));
    return h + packed;
}

std::string fileHeader(int worker, RowKind kind, const char *name, int sub = 0)
{
    std::string h("SYNCROW", 8);
    put<std::uint32_t>(h, kind == RowKind::Evaluator ? 3 : sub == 0 ? 1 : 2); // as ChunkWriter writes them
    put<std::uint32_t>(h, kRecordBytes);
    put<std::uint32_t>(h, std::uint32_t(worker));
    put<std::uint8_t>(h, std::uint8_t(kind));
    put<std::uint16_t>(h, std::uint16_t(sub));
    h.resize(24, '\0');
    h += name;
    h.resize(kChunkFileHeaderBytes, '\0');
    return h;
}

// A valid row of a few compute spans and a loss counter, through the writer itself.
void writeValidRow(const std::string &path, int worker)
{
    ChunkWriter w(path, {worker, RowKind::Worker, "worker " + std::to_string(worker)});
    for (std::uint32_t s = 0; s < 40; ++s) {
        Record r;
        r.worker = std::uint16_t(worker);
        r.step = s;
        r.start = 1000 * s;
        r.end = r.start + 700;
        r.kind = RecordKind::Span;
        r.code = std::uint8_t(s % 3);
        w.append(r);
        Record c;
        c.worker = std::uint16_t(worker);
        c.step = s;
        c.start = c.end = r.end;
        c.kind = RecordKind::Counter;
        c.code = std::uint8_t(CounterId::Loss);
        c.value = 1.0 / (1 + s);
        w.append(c);
    }
    w.flush();
}

void writeText(const std::string &path, std::string_view text) { fuzz::writeFile(path, text); }

void freshDirectory()
{
    std::error_code ec;
    fs::remove_all(kDir, ec);
    fs::create_directories(kDir);
    writeText(kDir + "/config.json",
              R"({"mode":"sync","workers":2,"model":{"layers":[4,8,2]},"train":{"steps":40,"batch":4}})");
}

void removeDirectory()
{
    std::error_code ec;
    fs::remove_all(kDir, ec);
}

// What a view does with an opened run.
void drawFrom(const TraceModel &t)
{
    const std::int64_t end = std::max<std::int64_t>(t.endNs(), 1);
    for (std::size_t row = 0; row < t.rowCount(); ++row) {
        for (const std::int64_t nsPerPx : {end / 1600 + 1, std::int64_t(1000), std::int64_t(1)}) {
            const RowLod &lod = t.lod(row);
            const int level = lod.levelFor(double(nsPerPx));
            (void)t.countIn(row, 0, end);
            (void)lod.countIn(level, end / 3, end);
            // As the timeline's summary layout reads them: phase colours by index.
            std::uint64_t sink = 0;
            for (const LodBucket &b : lod.level(level))
                sink += b.count + kPhaseColours[b.dominant] + b.share;
            if (sink == 1)
                (void)sink;
        }
        std::vector<Record> spans;
        t.spansIn(row, 0, end, spans);
        t.spansIn(row, end / 3, end / 3 + end / 100 + 1, spans);
    }
    for (int w = 0; w < t.workers(); ++w) {
        for (int c = 0; c < int(CounterId::Count); ++c)
            (void)t.counter(CounterId(c), w).size();
        (void)t.steps(w).size();
    }
    (void)t.phaseTimeIn(0, end);
    t.forEachRecord([](const Record &) {});
}

void openAndDraw()
{
    const OpenedRun run = openRunDirectory(kDir);
    drawFrom(*run.trace);
    // What the CLI and the app read from the summary, at the types checkSummary promises.
    const auto &s = run.summary;
    (void)s.value("status", "").size();
    (void)s.value("error", "").size();
    (void)s.value("steps_completed", 0);
    (void)s.value("samples_per_s", 0.0);
    (void)s.value("stall_fraction", 0.0);
    (void)s.value("staleness_max", 0);
    if (s.contains("final_eval_accuracy"))
        (void)s["final_eval_accuracy"].get<double>();
    if (s.contains("stall_ms_per_worker"))
        for (const auto &v : s["stall_ms_per_worker"])
            (void)v.get<double>();
    if (s.contains("devices"))
        for (const auto &v : s["devices"])
            (void)v.get<std::string>().size();
    if (s.contains("reduce")) {
        const auto &r = s["reduce"];
        (void)r.value("algorithm", "").size();
        (void)r.value("time_ms_mean", 0.0);
    }
    exportTraceJson(kDir + "/export.json", kDir);
}

void fuzzBlock(unsigned flags, std::string_view body)
{
    const std::uint32_t count = std::uint32_t(std::min<std::size_t>(std::max<std::size_t>(body.size() / kRecordBytes, 1), kBlockRecords));
    std::string columns(body.substr(0, count * kRecordBytes));
    columns.resize(count * kRecordBytes, '\0');
    const std::string packed = (flags & 4) ? std::string(body) : zstd(columns);
    std::vector<Record> out;
    decodeBlock(reinterpret_cast<const unsigned char *>(packed.data()), packed.size(), count,
                std::uint32_t(count * kRecordBytes), out, "fuzz block");
}

// w0.syr from the input; w1.syr valid.
void fuzzRowFile(unsigned flags, std::string_view body)
{
    freshDirectory();
    writeValidRow(kDir + "/w1.syr", 1);
    std::string file;
    if (body.size() < kChunkFileHeaderBytes)
        return;
    if (flags & 4) {
        file = std::string(body.substr(0, kChunkFileHeaderBytes));
    } else {
        // Worker, kind and sub-row from the input (bytes 16, 20 and 21), the rest valid: the
        // header may claim w1.syr's row, a sub-row beside it, or the evaluator's.
        const unsigned char worker = static_cast<unsigned char>(body[16]) % 3;
        const unsigned char kind = static_cast<unsigned char>(body[20]) % std::uint8_t(RowKind::Count);
        const unsigned char sub = static_cast<unsigned char>(body[21]) % 3;
        file = fileHeader(worker, RowKind(kind), "fuzzed row", sub);
    }
    body.remove_prefix(kChunkFileHeaderBytes);
    if (flags & 8) {
        file += body;
    } else {
        // Blocks: u16 count, i64 minStart, i64 maxEnd, then count columns of 32 bytes.
        while (body.size() >= 18) {
            std::uint16_t count;
            std::int64_t minStart, maxEnd;
            std::memcpy(&count, body.data(), 2);
            std::memcpy(&minStart, body.data() + 2, 8);
            std::memcpy(&maxEnd, body.data() + 10, 8);
            body.remove_prefix(18);
            const std::uint32_t n = 1 + count % kBlockRecords;
            std::string columns(body.substr(0, std::min<std::size_t>(body.size(), n * kRecordBytes)));
            body.remove_prefix(columns.size());
            columns.resize(n * kRecordBytes, '\0');
            file += block(columns, n, minStart, maxEnd);
        }
        // A torn tail: whatever is left, cut short.
        file += body;
    }
    writeText(kDir + "/w0.syr", file);
    openAndDraw();
}

void fuzzIndex(unsigned flags, std::string_view body)
{
    freshDirectory();
    writeValidRow(kDir + "/w0.syr", 0);
    writeValidRow(kDir + "/w1.syr", 1);
    std::string raw("SYNCIDX", 8);
    raw += body;
    if (!(flags & 4) && raw.size() >= 37 + 8) {
        // version 6, 2 workers, 160 records: as the run's row files have, so the index is used
        const std::uint32_t version = 6;
        const std::int32_t workers = 2;
        const std::uint64_t records = 160;
        std::memcpy(raw.data() + 8, &version, 4);
        std::memcpy(raw.data() + 12, &workers, 4);
        std::memcpy(raw.data() + 37, &records, 8);
    }
    put<std::uint32_t>(raw, crc(raw));
    std::string file("SYNCIDX", 8);
    put<std::uint64_t>(file, raw.size());
    file += zstd(raw);
    writeText(kDir + "/index.syi", file);
    openAndDraw();
    // The index alone, as a model that keeps it (no fallback to the row files).
    TraceModel t(2, false, 4);
    if (t.loadIndex(kDir + "/index.syi"))
        drawFrom(t);
}

void fuzzSummary(std::string_view body)
{
    freshDirectory();
    writeValidRow(kDir + "/w0.syr", 0);
    writeValidRow(kDir + "/w1.syr", 1);
    writeText(kDir + "/summary.json", body);
    openAndDraw();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    static const bool cleanup = (std::atexit(removeDirectory), true);
    (void)cleanup;
    if (size < 1)
        return 0;
    const unsigned flags = data[0];
    const std::string_view body(reinterpret_cast<const char *>(data) + 1, size - 1);
    try {
        switch (flags & 3) {
        case 0: fuzzBlock(flags, body); break;
        case 1: fuzzRowFile(flags, body); break;
        case 2: fuzzIndex(flags, body); break;
        case 3: fuzzSummary(body); break;
        }
    } catch (const StoreError &) {
    } catch (const ConfigError &) {
    }
    return 0;
}
