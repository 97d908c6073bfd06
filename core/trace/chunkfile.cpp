#include "chunkfile.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

namespace syncopate {
namespace {

constexpr char kFileMagic[8] = {'S', 'Y', 'N', 'C', 'R', 'O', 'W', '\0'};
constexpr std::uint32_t kBlockMagic = 0x4b4c4253; // "SBLK"
// Bytes of one record's columns before compression (the file header states it, so a reader
// of another layout refuses the file instead of misreading it).
constexpr std::uint32_t kRawRecordBytes = 32;
constexpr std::size_t kNameBytes = 40;

template <typename T> void put(unsigned char *&p, T v)
{
    std::memcpy(p, &v, sizeof v); // little-endian hosts only, as the safetensors files
    p += sizeof v;
}
template <typename T> T get(const unsigned char *&p)
{
    T v;
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
    return v;
}

std::string at(const std::string &path, std::uint64_t offset)
{
    return path + " at byte " + std::to_string(offset);
}

} // namespace

std::string rowFileName(const RowDescriptor &row)
{
    if (row.kind == RowKind::Evaluator)
        return "evaluator.syr";
    const std::string w = "w" + std::to_string(row.worker);
    if (row.sub != 0) {
        const char *prefix = row.kind == RowKind::DataLane   ? "-t"
                             : row.kind == RowKind::CommLane ? "-comm"
                             : row.kind == RowKind::Counters ? "-counters"
                                                             : "-s";
        return w + prefix + std::to_string(row.sub) + ".syr";
    }
    const char *suffix = row.kind == RowKind::DataLane ? "-data" : row.kind == RowKind::CommLane ? "-comm" : "";
    return w + suffix + ".syr";
}

ChunkWriter::ChunkWriter(std::string path, const RowDescriptor &row) : m_path(std::move(path))
{
    if (row.sub < 0 || row.sub > 65535)
        throw StoreError(m_path + ": sub-row " + std::to_string(row.sub) + " is out of range (0 to 65535)");
    m_file = std::fopen(m_path.c_str(), "wb");
    if (!m_file)
        throw StoreError(m_path + ": cannot write (" + std::strerror(errno) + ")");
    unsigned char header[kChunkFileHeaderBytes] = {};
    unsigned char *p = header;
    std::memcpy(p, kFileMagic, sizeof kFileMagic);
    p += sizeof kFileMagic;
    put<std::uint32_t>(p, row.kind == RowKind::Evaluator ? 3 : row.sub == 0 ? 1 : 2);
    put<std::uint32_t>(p, kRawRecordBytes);
    put<std::uint32_t>(p, std::uint32_t(row.worker));
    put<std::uint8_t>(p, std::uint8_t(row.kind));
    put<std::uint16_t>(p, std::uint16_t(row.sub));
    p += 1;
    std::memcpy(p, row.name.data(), std::min(row.name.size(), kNameBytes - 1));
    if (std::fwrite(header, 1, sizeof header, m_file) != sizeof header || std::fflush(m_file) != 0) {
        const int err = errno;
        std::fclose(m_file); // the destructor does not run for a constructor that throws
        throw StoreError(m_path + ": write failed (" + std::strerror(err) + ")");
    }
    m_bytes = sizeof header;
    m_pending.reserve(kBlockRecords);
    m_raw.resize(kBlockRecords * kRawRecordBytes);
    m_packed.resize(ZSTD_compressBound(m_raw.size()));
}

ChunkWriter::~ChunkWriter()
{
    if (m_file)
        std::fclose(m_file);
}

void ChunkWriter::writeBlock()
{
    if (m_pending.empty())
        return;
    // Sorted by start inside a block, so a reader can binary-search it; columns compress far
    // better than rows because each holds one kind of slowly changing number.
    std::stable_sort(m_pending.begin(), m_pending.end(),
                     [](const Record &a, const Record &b) { return a.start < b.start; });
    const std::size_t n = m_pending.size();
    std::int64_t minStart = m_pending.front().start, maxEnd = std::numeric_limits<std::int64_t>::min();
    unsigned char *p = m_raw.data();
    std::int64_t prev = 0; // the first record's start is stored whole
    for (const Record &r : m_pending) {
        put<std::int64_t>(p, r.start - prev);
        prev = r.start;
        maxEnd = std::max(maxEnd, r.end);
    }
    for (const Record &r : m_pending)
        put<std::int64_t>(p, r.end - r.start);
    for (const Record &r : m_pending)
        put<std::uint32_t>(p, r.step);
    for (const Record &r : m_pending)
        put<std::uint16_t>(p, r.worker);
    for (const Record &r : m_pending)
        put<std::uint8_t>(p, std::uint8_t(r.kind));
    for (const Record &r : m_pending)
        put<std::uint8_t>(p, r.code);
    for (const Record &r : m_pending)
        put<double>(p, r.value);
    const std::size_t rawBytes = n * kRawRecordBytes;
    const std::size_t packed = ZSTD_compress(m_packed.data(), m_packed.size(), m_raw.data(), rawBytes, 1);
    if (ZSTD_isError(packed))
        throw StoreError(m_path + ": compressing a block failed (" + ZSTD_getErrorName(packed) + ")");
    unsigned char header[kBlockHeaderBytes] = {};
    unsigned char *h = header;
    put<std::uint32_t>(h, kBlockMagic);
    put<std::uint32_t>(h, std::uint32_t(n));
    put<std::uint32_t>(h, std::uint32_t(rawBytes));
    put<std::uint32_t>(h, std::uint32_t(packed));
    put<std::int64_t>(h, minStart);
    put<std::int64_t>(h, maxEnd);
    put<std::uint32_t>(h, std::uint32_t(crc32(0, m_packed.data(), uInt(packed))));
    // The header's own checksum: a block cut inside its header is told from a foreign one.
    put<std::uint32_t>(h, std::uint32_t(crc32(0, header, 36)));
    if (std::fwrite(header, 1, sizeof header, m_file) != sizeof header ||
        std::fwrite(m_packed.data(), 1, packed, m_file) != packed)
        throw StoreError(m_path + ": write failed (" + std::strerror(errno) + ")");
    m_bytes += sizeof header + packed;
    m_records += n;
    m_pending.clear();
}

void ChunkWriter::flush()
{
    writeBlock();
    if (std::fflush(m_file) != 0)
        throw StoreError(m_path + ": write failed (" + std::strerror(errno) + ")");
}

ChunkReader::ChunkReader(std::string path) : m_path(std::move(path))
{
    std::FILE *f = std::fopen(m_path.c_str(), "rb");
    if (!f)
        throw StoreError(m_path + ": cannot open (" + std::strerror(errno) + ")");
    unsigned char header[kChunkFileHeaderBytes];
    const std::size_t got = std::fread(header, 1, sizeof header, f);
    std::fclose(f);
    if (got < sizeof header)
        throw StoreError(m_path + ": " + std::to_string(got) +
                         " bytes, shorter than a row file's 64-byte header");
    const unsigned char *p = header;
    if (std::memcmp(p, kFileMagic, sizeof kFileMagic) != 0)
        throw StoreError(m_path + ": not a Syncopate row file (bad magic at byte 0)");
    p += sizeof kFileMagic;
    const auto version = get<std::uint32_t>(p);
    if (version < 1 || version > kChunkVersion)
        throw StoreError(m_path + ": row file version " + std::to_string(version) +
                         " at byte 8; this Syncopate reads versions 1 to " + std::to_string(kChunkVersion));
    const auto recordBytes = get<std::uint32_t>(p);
    if (recordBytes != kRawRecordBytes)
        throw StoreError(m_path + ": record size " + std::to_string(recordBytes) +
                         " at byte 12; expected " + std::to_string(kRawRecordBytes));
    const auto worker = get<std::uint32_t>(p);
    const auto kind = get<std::uint8_t>(p);
    const auto sub = get<std::uint16_t>(p); // version 1 left these bytes zero
    p += 1;
    if (worker > 65535)
        throw StoreError(m_path + ": worker " + std::to_string(worker) +
                         " at byte 16 is out of range (at most 65535)");
    if (kind >= std::uint8_t(RowKind::Count) || (kind == std::uint8_t(RowKind::Evaluator) && version < 3))
        throw StoreError(m_path + ": row kind " + std::to_string(kind) + " at byte 20 is unknown" +
                         (version < 3 ? " to a version " + std::to_string(version) + " file" : std::string()));
    m_row.worker = int(worker);
    m_row.kind = RowKind(kind);
    m_row.sub = version >= 2 ? int(sub) : 0;
    const char *name = reinterpret_cast<const char *>(p);
    m_row.name.assign(name, strnlen(name, kNameBytes - 1));
    scanFrom(kChunkFileHeaderBytes);
}

std::size_t ChunkReader::refresh()
{
    const std::size_t before = m_blocks.size();
    scanFrom(m_validEnd);
    return m_blocks.size() - before;
}

void ChunkReader::scanFrom(std::uint64_t offset)
{
    if (!m_damage.empty())
        return; // nothing past damage is read
    std::FILE *f = std::fopen(m_path.c_str(), "rb");
    if (!f)
        throw StoreError(m_path + ": cannot open (" + std::strerror(errno) + ")");
    std::error_code ec;
    m_fileSize = std::filesystem::file_size(m_path, ec);
    if (ec)
        m_fileSize = offset;
    // Whether the bytes from `from` to the end are all zero: what a power loss leaves where
    // the file system had grown the file and not yet written its data.
    auto zeroTail = [&](std::uint64_t from) {
        unsigned char buf[4096];
        if (fseeko(f, off_t(from), SEEK_SET) != 0)
            return false;
        for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;)
            if (std::any_of(buf, buf + n, [](unsigned char c) { return c != 0; }))
                return false;
        return true;
    };
    while (offset + kBlockHeaderBytes <= m_fileSize) {
        unsigned char header[kBlockHeaderBytes];
        if (fseeko(f, off_t(offset), SEEK_SET) != 0 || std::fread(header, 1, sizeof header, f) != sizeof header)
            break;
        const unsigned char *h = header;
        const auto magic = get<std::uint32_t>(h);
        BlockInfo b;
        b.offset = offset;
        b.count = get<std::uint32_t>(h);
        const auto rawBytes = get<std::uint32_t>(h);
        b.packedBytes = get<std::uint32_t>(h);
        b.minStart = get<std::int64_t>(h);
        b.maxEnd = get<std::int64_t>(h);
        h += 4; // data checksum, checked when the block is read
        const auto headerCrc = get<std::uint32_t>(h);
        const bool headerOk = magic == kBlockMagic && headerCrc == std::uint32_t(crc32(0, header, 36));
        if (!headerOk) {
            // A kill cuts a file at its end, inside a header or a block's data, never through a
            // whole header (each block is one write after the last): a whole header that does
            // not check is damage, wherever it is, and its length cannot be trusted to say
            // whether it is the last. Only zeros to the end are a tail never written.
            if (zeroTail(offset))
                break;
            m_damage = at(m_path, offset) + ": damaged block header (bad magic or checksum)";
            break;
        }
        if (b.count == 0 || b.count > kBlockRecords || rawBytes != b.count * kRawRecordBytes ||
            b.packedBytes > ZSTD_compressBound(kBlockRecords * kRawRecordBytes) || b.maxEnd < b.minStart) {
            m_damage = at(m_path, offset) + ": block header of " + std::to_string(b.count) + " records, " +
                       std::to_string(rawBytes) + " raw and " + std::to_string(b.packedBytes) +
                       " packed bytes, times " + std::to_string(b.minStart) + " to " + std::to_string(b.maxEnd) +
                       " ns: not a block this version writes (at most " + std::to_string(kBlockRecords) +
                       " records of " + std::to_string(kRawRecordBytes) + " bytes, ending after they start)";
            break;
        }
        if (offset + kBlockHeaderBytes + b.packedBytes > m_fileSize)
            break; // torn: its bytes were never all written
        m_blocks.push_back(b);
        m_records += b.count;
        offset += kBlockHeaderBytes + b.packedBytes;
    }
    m_validEnd = offset;
    std::fclose(f);
}

void decodeBlock(const unsigned char *packed, std::size_t packedBytes, std::uint32_t count,
                 std::uint32_t rawBytes, std::vector<Record> &out, const std::string &where)
{
    if (count == 0 || count > kBlockRecords || rawBytes != count * kRawRecordBytes)
        throw StoreError(where + ": block of " + std::to_string(count) + " records is out of range");
    thread_local std::vector<unsigned char> raw;
    raw.resize(rawBytes);
    const std::size_t got = ZSTD_decompress(raw.data(), raw.size(), packed, packedBytes);
    if (ZSTD_isError(got) || got != rawBytes)
        throw StoreError(where + ": block does not decompress to " + std::to_string(rawBytes) + " bytes");
    out.resize(count);
    const unsigned char *p = raw.data();
    std::int64_t start = 0;
    for (std::uint32_t i = 0; i < count; ++i) {
        const auto delta = get<std::int64_t>(p);
        if (i > 0 && (delta < 0 || __builtin_add_overflow(start, delta, &start)))
            throw StoreError(where + ": record " + std::to_string(i) + " starts out of order");
        if (i == 0)
            start = delta;
        if (start < 0 || start > kMaxRunNs)
            throw StoreError(where + ": record " + std::to_string(i) + " starts at " +
                             std::to_string(start) + " ns, outside a run's time (0 to 2^52 ns)");
        out[i].start = start;
    }
    for (std::uint32_t i = 0; i < count; ++i) {
        const auto d = get<std::int64_t>(p);
        if (d < 0 || __builtin_add_overflow(out[i].start, d, &out[i].end) || out[i].end > kMaxRunNs)
            throw StoreError(where + ": record " + std::to_string(i) + " has duration " + std::to_string(d) +
                             " ns: negative, or ending past a run's time (2^52 ns)");
    }
    for (std::uint32_t i = 0; i < count; ++i)
        out[i].step = get<std::uint32_t>(p);
    for (std::uint32_t i = 0; i < count; ++i)
        out[i].worker = get<std::uint16_t>(p);
    for (std::uint32_t i = 0; i < count; ++i) {
        const auto kind = get<std::uint8_t>(p);
        if (kind > std::uint8_t(RecordKind::Counter))
            throw StoreError(where + ": record " + std::to_string(i) + " has unknown kind " + std::to_string(kind));
        out[i].kind = RecordKind(kind);
    }
    for (std::uint32_t i = 0; i < count; ++i) {
        const auto code = get<std::uint8_t>(p);
        const bool ok = out[i].kind == RecordKind::Span
                            ? (code & 0x0f) < std::uint8_t(Phase::Count) && (code >> 4) < std::uint8_t(Lane::Count)
                            : code < std::uint8_t(CounterId::Count);
        if (!ok)
            throw StoreError(where + ": record " + std::to_string(i) + " has unknown phase or counter " + std::to_string(code));
        out[i].code = code;
    }
    for (std::uint32_t i = 0; i < count; ++i)
        out[i].value = get<double>(p);
}

void ChunkReader::readBlock(std::size_t i, std::vector<Record> &out) const
{
    const BlockInfo &b = m_blocks.at(i);
    std::FILE *f = std::fopen(m_path.c_str(), "rb");
    if (!f)
        throw StoreError(m_path + ": cannot open (" + std::strerror(errno) + ")");
    thread_local std::vector<unsigned char> buf;
    buf.resize(kBlockHeaderBytes + b.packedBytes);
    const bool ok = fseeko(f, off_t(b.offset), SEEK_SET) == 0 &&
                    std::fread(buf.data(), 1, buf.size(), f) == buf.size();
    std::fclose(f);
    if (!ok)
        throw StoreError(at(m_path, b.offset) + ": block cannot be read (the file shrank?)");
    const unsigned char *h = buf.data() + 32;
    const auto crc = get<std::uint32_t>(h);
    const unsigned char *packed = buf.data() + kBlockHeaderBytes;
    if (crc != std::uint32_t(crc32(0, packed, uInt(b.packedBytes))))
        throw StoreError(at(m_path, b.offset) + ": block checksum mismatch (damaged file)");
    decodeBlock(packed, b.packedBytes, b.count, b.count * kRawRecordBytes, out, at(m_path, b.offset));
    if (out.front().start != b.minStart)
        throw StoreError(at(m_path, b.offset) + ": block's records do not match its header");
    for (const Record &r : out)
        if (r.end > b.maxEnd)
            throw StoreError(at(m_path, b.offset) + ": a record ends after the block's stated end");
}

} // namespace syncopate
