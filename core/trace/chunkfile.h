// The run store's row files: one append-only file per timeline row (a worker's compute and
// communication, its prefetch lane, later a rank), written while the run goes on.
//
// Layout: a 64-byte file header (magic, version, record size, the row's worker, kind, sub-row
// and name), then blocks. A block is a 48-byte header (magic, record count, raw and packed
// sizes, time range, CRC-32 of the packed bytes) followed by its records, column by column,
// delta-coded and zstd-compressed. A reader trusts nothing: a block whose header or bytes are cut short by a
// kill or a power loss is dropped whole, so a torn record is never misread.
#pragma once

#include "trace.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace syncopate {

// What a row shows. Stored in the file header; readers reject values they do not know.
// CommLane: a worker's communication kept apart from its compute (imported GPU traces, where
// NCCL kernels overlap compute kernels on other streams). Evaluator: the async run's evaluator
// thread, which scores the server's snapshots (appended: kinds are stored in row files).
enum class RowKind : std::uint8_t { Worker, DataLane, Counters, CommLane, Evaluator, Count };

// The async evaluator records as the worker one past the run's last (index `workers`), so that
// everything sized or counted per worker leaves it out; its row is {workers, Evaluator}.
inline bool isEvaluator(const Record &r, int workers) { return int(r.worker) == workers; }

// The row a span is drawn in: its worker's prefetch lane (Lane::Data, in a run with data lanes),
// its communication lane (Lane::Comm, in a run with comm lanes), else the worker's main row.
inline RowKind rowKindOf(const Record &r, bool dataLanes, bool commLanes)
{
    if (r.lane() == Lane::Data && dataLanes)
        return RowKind::DataLane;
    if (r.lane() == Lane::Comm && commLanes)
        return RowKind::CommLane;
    return RowKind::Worker;
}

struct RowDescriptor {
    int worker = 0;
    RowKind kind = RowKind::Worker;
    std::string name; // "worker 3", "worker 3 data", "rank 3 stream 7"; at most 39 bytes are stored
    // Which of the worker's rows of this kind, 0 to 65535: a native run has one of each (0); an
    // imported rank has one Worker row per GPU stream and one DataLane row per CPU thread.
    int sub = 0;
};

// A foreign, newer or damaged file; the message names the file, what is wrong and the offset.
class StoreError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The file of a row in a run directory: w3.syr, w3-data.syr, w3-comm.syr; a sub-row past the
// first w3-s2.syr (Worker), w3-t2.syr (DataLane), w3-comm2.syr; the evaluator's evaluator.syr.
std::string rowFileName(const RowDescriptor &row);

// 2: the sub-row (bytes 21-22). A row with sub 0 is still written as version 1, so that older
// builds read native runs; they refuse a sub-row's file rather than merge it into row 0.
// 3: the evaluator's row kind, written only in the evaluator's file, so that an older build
// names the file as newer rather than as damaged (worker and sync rows stay version 1).
constexpr std::uint32_t kChunkVersion = 3;
constexpr std::size_t kChunkFileHeaderBytes = 64;
constexpr std::size_t kBlockHeaderBytes = 48;
// Records per block: small enough that drawing a zoomed view decompresses little.
constexpr std::size_t kBlockRecords = 4096;

struct BlockInfo {
    std::uint64_t offset = 0; // of the block header in the file
    std::uint32_t count = 0;
    std::uint32_t packedBytes = 0;
    std::int64_t minStart = 0;
    std::int64_t maxEnd = 0;
};

// Writes one row file. Not thread-safe: the run's collector thread is its only user.
class ChunkWriter {
public:
    // Creates (truncates) path and writes the file header. Throws StoreError naming the file.
    ChunkWriter(std::string path, const RowDescriptor &row);
    ~ChunkWriter();
    ChunkWriter(const ChunkWriter &) = delete;
    ChunkWriter &operator=(const ChunkWriter &) = delete;

    void append(const Record &r)
    {
        m_pending.push_back(r);
        if (m_pending.size() >= kBlockRecords)
            writeBlock();
    }
    // Writes what is pending as a block and hands it to the OS (a killed process loses
    // nothing written so far). Throws StoreError when the disk is full or the file gone.
    void flush();
    std::uint64_t bytesWritten() const { return m_bytes; }
    std::uint64_t recordsWritten() const { return m_records; }
    const std::string &path() const { return m_path; }

private:
    void writeBlock();

    std::string m_path;
    std::FILE *m_file = nullptr;
    std::vector<Record> m_pending;
    std::vector<unsigned char> m_raw, m_packed; // reused between blocks
    std::uint64_t m_bytes = 0, m_records = 0;
};

// Reads one row file. The constructor checks the header and indexes every complete block
// (headers only, no decompression); refresh() picks up blocks written since, for a live run.
class ChunkReader {
public:
    explicit ChunkReader(std::string path); // throws StoreError
    const RowDescriptor &row() const { return m_row; }
    const std::string &path() const { return m_path; }
    const std::vector<BlockInfo> &blocks() const { return m_blocks; }
    std::uint64_t records() const { return m_records; }
    // Bytes after the last complete block (a torn block, dropped); none when the blocks ended
    // at damage instead.
    std::uint64_t tornBytes() const { return m_damage.empty() ? m_fileSize - m_validEnd : 0; }
    // Where the indexed blocks end early at a damaged block header ("PATH at byte N: ..."), and
    // the bytes from there to the end, which are not read; empty and 0 when there is none.
    const std::string &damage() const { return m_damage; }
    std::uint64_t damagedBytes() const { return m_damage.empty() ? 0 : m_fileSize - m_validEnd; }
    std::uint64_t fileSize() const { return m_fileSize; }
    // Indexes blocks appended since; returns how many were new (none past damage).
    std::size_t refresh();
    // Decodes block i (sorted by start) into out (replacing it). Throws StoreError when its
    // bytes do not match their checksum or decode to records outside the block's stated range.
    void readBlock(std::size_t i, std::vector<Record> &out) const;

private:
    void scanFrom(std::uint64_t offset);

    std::string m_path;
    RowDescriptor m_row;
    std::vector<BlockInfo> m_blocks;
    std::uint64_t m_records = 0;
    std::uint64_t m_validEnd = kChunkFileHeaderBytes;
    std::uint64_t m_fileSize = 0;
    std::string m_damage;
};

// Decodes a block's packed bytes (as stored after its header) into records; exposed for the
// fuzz target. `where` names the file and offset in errors.
void decodeBlock(const unsigned char *packed, std::size_t packedBytes, std::uint32_t count,
                 std::uint32_t rawBytes, std::vector<Record> &out, const std::string &where);

} // namespace syncopate
