// One reader API for a run's trace, wherever it came from (this process's workers live, a run
// directory opened from disk, later MPI ranks and imported profiler traces): rows with names and
// kinds, the spans of a row in a time range, a level-of-detail summary per row, counters and the
// aggregates the charts draw. Memory is bounded: raw spans older than a recent window are read
// back from the row files on demand (through a small cache), counters and per-step series are
// thinned by merging neighbours once they pass a bound. Not thread-safe: one owner (the GUI
// thread, or the run's collector) feeds and reads it.
#pragma once

#include "chunkfile.h"
#include "lod.h"
#include "trace.h"

#include <array>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace syncopate {

struct CounterPoint {
    double tNs;
    std::uint32_t step;
    double value;
};

// Per worker and step: the stall time and when the step ended; thinned by merging pairs of
// neighbours (stepsPerPoint doubles) once it passes a bound.
struct StepPoint {
    double waitMs = 0;  // mean per step over the point's steps
    double endNs = -1;  // end of the point's last step (its loss sample), -1 if unknown
    double descheduledMs = 0; // mean per step: time the OS did not run the worker (all of it)
    double wakeMs = 0;        // of that, after a barrier opened (the end of its waits)
};

// Of each worker's wait at step point i, the part spent waiting for the OS: its own late
// wake-ups plus the time the point's slowest worker (the one that waited least) was not
// running. The same reading as summary.json's stall_descheduled_fraction. out[w] is 0 for a
// worker without point i.
void stallOffCpuMs(const std::vector<const std::vector<StepPoint> *> &workers, std::size_t i,
                   std::vector<double> &out);

class TraceModel {
public:
    static constexpr std::size_t kMaxCounterPoints = std::size_t(1) << 17;
    static constexpr std::size_t kMaxStepPoints = std::size_t(1) << 17;
    static constexpr std::size_t kMaxStaleness = std::size_t(1) << 16;
    static constexpr double kThroughputWindowNs = 5e8;
    static constexpr std::size_t kRecentSpans = std::size_t(1) << 16;

    // workers > 0: the rows of a local run (each worker, and its prefetch lane if any; with
    // commLanes its Lane::Comm spans get a row of their own, as imported GPU traces do). The
    // async evaluator's row, last, comes with its first span.
    TraceModel(int workers, bool dataLanes, int samplesPerBatch, bool commLanes = false);

    // Adds records as they come (any order; rows sort lazily, O(n log n)).
    void append(const Record *records, std::size_t n);
    void append(const std::vector<Record> &records) { append(records.data(), records.size()); }
    // Where the rows' files are (a live run's directory): raw spans that leave the recent window
    // are read back from there. Without it the model keeps every span.
    void attachDirectory(const std::string &dir);
    // Summaries only, no raw spans in memory at all (the run's writer, whose spans go to files).
    void setKeepRaw(bool keep) { m_keepRaw = keep; }
    // Before the first append: the rows' summaries keep no level finer than `level` (RowLod::startAt).
    void setFinestLevel(int level);

    std::size_t rowCount() const { return m_rows.size(); }
    const RowDescriptor &row(std::size_t r) const { return m_rows[r].desc; }
    const RowLod &lod(std::size_t r) const;
    // Spans of row r starting in [t0, t1), by its finest summary level's buckets (an estimate
    // at the edges): current without settling the coarser levels, as lod() does.
    std::uint64_t spansStartingIn(std::size_t r, std::int64_t t0, std::int64_t t1) const;
    // The spans of row r that overlap [t0, t1], sorted by start (replaces out). Throws
    // StoreError when a row file turns out damaged.
    void spansIn(std::size_t r, std::int64_t t0, std::int64_t t1, std::vector<Record> &out) const;
    // Every record of every row, row by row, from the row files (then the recent spans not yet
    // in a file). Throws StoreError when a row file turns out damaged.
    void forEachRecord(const std::function<void(const Record &)> &f) const;
    // The same with the row each record is in (a counter: the row whose file holds it). A block
    // that cannot be read throws StoreError, or with `damaged` is left out and said there.
    void forEachRecord(const std::function<void(std::size_t row, const Record &)> &f,
                       std::vector<std::string> *damaged = nullptr) const;
    // Spans of row r starting in [t0, t1), estimated from the summary (cheap).
    std::uint64_t countIn(std::size_t r, std::int64_t t0, std::int64_t t1) const;

    int workers() const { return m_workers; }
    // worker 0 to workers(); workers() is the async evaluator's (isEvaluator in chunkfile.h).
    const std::vector<CounterPoint> &counter(CounterId c, int worker) const;
    const std::vector<StepPoint> &steps(int worker) const { return m_steps[std::size_t(worker)].points; }
    int stepsPerPoint(int worker) const { return m_steps[std::size_t(worker)].stride; }
    // Updates per staleness value, all workers together (values past the bound counted last).
    const std::vector<std::uint64_t> &stalenessHistogram() const { return m_staleness; }
    // The same per worker (the updates that worker pushed); empty for a worker with none.
    const std::vector<std::uint64_t> &stalenessHistogram(int worker) const
    {
        return m_stalenessPerWorker[std::size_t(worker)];
    }
    // Samples per second over consecutive half-second windows: (window end, rate).
    std::vector<std::pair<double, double>> throughput() const;
    // Time per phase of each worker inside [t0, t1] (main rows), exact from the raw spans.
    // offCpu, when given, gets each worker's time off the CPU in the range (offCpuNs of its
    // spans, in proportion to how much of each span the range holds).
    std::vector<std::array<double, std::size_t(Phase::Count)>> phaseTimeIn(double t0, double t1,
                                                                          std::vector<double> *offCpu = nullptr) const;

    std::int64_t startNs() const { return 0; }
    std::int64_t endNs() const { return m_last; }
    std::uint64_t spanCount() const { return m_spans; }
    std::uint64_t recordCount() const { return m_records; }
    // Resident bytes of what the model holds (summaries, recent spans, cache).
    std::size_t memoryBytes() const;

    // The summary part (everything but raw spans) to and from the store's index file.
    void saveIndex(const std::string &path) const;
    // False when the file is missing; throws StoreError when it is damaged.
    bool loadIndex(const std::string &path);
    // Rows from the files of a run directory (their spans stay on disk). A file's records belong
    // to its row, whatever their lane says (an import's sub-rows). The rows end up ordered by
    // worker, then kind (Worker, DataLane, CommLane, Counters), then sub-row.
    void adoptRowFiles(std::vector<std::unique_ptr<ChunkReader>> readers);
    // Reads every block of every row file once to rebuild summaries (a run whose index is
    // missing, e.g. interrupted). progress(fraction) may return false to cancel.
    template <typename F> bool rebuildFromFiles(F &&progress);

private:
    struct Row {
        RowDescriptor desc;
        RowLod lod;
        std::vector<Record> recent; // newest spans, sorted lazily
        bool sorted = true;
        std::int64_t recentFrom = 0; // spans starting before this are in the file, not in recent
        std::unique_ptr<ChunkReader> file;
    };
    struct StepSeries {
        std::vector<StepPoint> points;
        int stride = 1;
    };
    std::size_t rowFor(const Record &r);
    // A new row, indexed by (worker, kind, sub); its position.
    std::size_t addRow(RowDescriptor desc);
    void sortRows();
    void addCounter(const Record &r);
    void sortRecent(Row &row) const;
    void trim(Row &row);
    void thin(StepSeries &s);
    StepPoint &stepPoint(int worker, std::uint32_t step);
    const std::vector<Record> &block(std::size_t r, std::size_t b) const;
    // Counts r; a span goes into row `row` (-1: none).
    void ingestFromFile(const Record &r, std::size_t row);

    int m_workers = 0;
    bool m_dataLanes = false;
    bool m_commLanes = false;
    int m_samplesPerBatch = 1;
    std::string m_dir;
    bool m_keepRaw = true;
    mutable std::vector<Row> m_rows;
    std::map<std::tuple<int, int, int>, std::size_t> m_rowIndex; // (worker, kind, sub) -> row
    // rowFor's answers by worker * RowKind::Count + kind, for workers below kMaxCachedWorkers.
    static constexpr std::size_t kUnlooked = std::size_t(-2);
    static constexpr unsigned kMaxCachedWorkers = 4096;
    std::vector<std::size_t> m_rowOf;
    int m_finestStart = 0; // setFinestLevel's level, for rows made later
    // Per worker and one more, the evaluator's.
    std::vector<std::vector<std::vector<CounterPoint>>> m_counters; // [counter][worker]
    std::vector<int> m_counterStride;                               // [counter * (workers + 1) + worker]
    std::vector<StepSeries> m_steps;
    std::vector<std::uint64_t> m_staleness;
    std::vector<std::vector<std::uint64_t>> m_stalenessPerWorker;
    std::vector<std::uint32_t> m_batchesPerWindow;
    std::int64_t m_last = 0;
    std::uint64_t m_spans = 0, m_records = 0;

    // Decoded blocks, newest use last; bounded by kCacheRecords.
    static constexpr std::size_t kCacheRecords = std::size_t(1) << 21;
    mutable std::list<std::pair<std::pair<std::size_t, std::size_t>, std::vector<Record>>> m_cache;
    mutable std::size_t m_cached = 0;
};

template <typename F> bool TraceModel::rebuildFromFiles(F &&progress)
{
    std::uint64_t total = 0, done = 0;
    for (const Row &row : m_rows)
        total += row.file ? row.file->records() : 0;
    std::vector<Record> buf;
    for (std::size_t r = 0; r < m_rows.size(); ++r) {
        if (!m_rows[r].file)
            continue;
        for (std::size_t b = 0; b < m_rows[r].file->blocks().size(); ++b) {
            m_rows[r].file->readBlock(b, buf);
            for (const Record &rec : buf)
                ingestFromFile(rec, r);
            done += buf.size();
            if (!progress(total ? double(done) / double(total) : 1.0))
                return false;
        }
    }
    for (Row &row : m_rows)
        row.lod.settle();
    return true;
}

} // namespace syncopate
