// A run directory is the run's store, written while the run goes on:
//   config.json               the resolved config (with seed), written first
//   w<N>.syr, w<N>-data.syr   one row file per timeline row (chunkfile.h), flushed ~1 s
//   evaluator.syr             async: the evaluator's row (its eval spans and counters)
//   metrics.csv               one row per (worker, step), appended as steps complete
//   summary.json              replaced atomically every few seconds ("running") and at the end
//   index.syi                 the summaries for drawing without reading spans (at the end)
//   params-*.safetensors      parameters before and after training
//   trace.json                Chrome Trace Event Format export, streamed from the row files
//   run.lock                  flock'ed by the writing process (RunFolderClaim)
// A process killed at any moment leaves a directory that opens as an "interrupted" run.
#pragma once

#include "chunkfile.h"
#include "config.h"
#include "metrics.h"
#include "tracemodel.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace syncopate {

class MetricsAccumulator;

// The one process writing a run folder holds it: an exclusive lock (flock) on DIR/run.lock for
// as long as the claim lives. Made after the folder exists and is writable; throws StoreError
// naming the folder when another process is writing a run there now, or when it holds a run
// already (its config.json, row files, summary or index: a second run there mixed its rows
// with the first one's, silently). Other files may be there (a folder made for the run).
class RunFolderClaim {
public:
    explicit RunFolderClaim(const std::string &dir);
    ~RunFolderClaim();
    RunFolderClaim(const RunFolderClaim &) = delete;
    RunFolderClaim &operator=(const RunFolderClaim &) = delete;

private:
    int m_fd = -1;
};
// Whether a process holds a claim on dir now (its run is being written as we read).
bool runFolderBeingWritten(const std::string &dir);

// Writes one run's directory. Used by the run's collector thread only.
class RunWriter {
public:
    static constexpr std::int64_t kFlushNs = 1000000000;  // row files and metrics.csv
    static constexpr std::int64_t kSummaryNs = 3000000000; // summary.json while running

    // Creates dir (and parents) and writes config.json and params-init. Throws StoreError
    // naming the folder when it cannot be created or written.
    RunWriter(std::string dir, const RunConfig &config, const std::vector<float> &initialParams);
    ~RunWriter();

    void append(const Record *records, std::size_t n);
    // Flushes when due; outcome() gives the summary's run-level fields. Throws StoreError.
    void tick(std::int64_t nowNs, const std::function<RunOutcome()> &outcome);
    // Everything flushed, final summary and index, params-final, trace.json. Throws StoreError.
    void finish(const RunOutcome &outcome, const std::vector<float> &finalParams);
    const nlohmann::json &summary() const { return m_summary; }
    const std::string &directory() const { return m_dir; }

private:
    void flush();
    void writeSummary(const RunOutcome &outcome);
    ChunkWriter &rowWriter(const Record &r);

    std::string m_dir;
    std::unique_ptr<RunFolderClaim> m_claim;
    RunConfig m_config;
    std::vector<std::unique_ptr<ChunkWriter>> m_rows; // [worker * 2 + data lane]
    std::unique_ptr<ChunkWriter> m_evaluator;         // async: the evaluator's row, once it records
    std::unique_ptr<MetricsAccumulator> m_metrics;
    TraceModel m_model; // summaries for index.syi (raw spans are not kept: no directory attached)
    struct CloseFile {
        void operator()(std::FILE *f) const { std::fclose(f); }
    };
    // Owned, so that a constructor that throws half-way (a full disk) leaves nothing open.
    std::unique_ptr<std::FILE, CloseFile> m_csv;
    std::vector<StepRow> m_finished;
    std::int64_t m_lastFlush = 0, m_lastSummary = 0;
    nlohmann::json m_summary;
};

// Writes one metrics.csv line per row (the header when header is true).
void appendMetricsCsv(std::FILE *f, const std::vector<StepRow> &rows, bool header);
// Replaces path with text: temporary file, fsync, rename. Throws StoreError.
void writeFileAtomically(const std::string &path, const std::string &text);

struct OpenedRun {
    RunConfig config;
    nlohmann::json summary;  // as read; status "interrupted" when the run never ended
    bool interrupted = false;
    // Another process is writing the run now (it holds the folder's claim): what was read is a
    // snapshot, its summary says "running", and it is not interrupted.
    bool live = false;
    std::uint64_t tornBytes = 0; // dropped from the ends of row files
    // Fields of summary.json of the wrong type, dropped: "summary.json: steps_completed: expected
    // an integer". Readers of summary may rely on every field it still has being of its type.
    std::vector<std::string> summaryProblems;
    // Row files left out or read only up to damage, a summary.json that could not be read:
    // "PATH at byte N: what; what was done".
    std::vector<std::string> problems;
    std::vector<std::string> files;
    std::shared_ptr<TraceModel> trace;
};

// Opens a run directory through its row files (trace.json is never read). progress(fraction)
// is called while an interrupted run is indexed again and may return false to cancel (then
// StoreError "cancelled"). Throws StoreError or ConfigError naming the file.
OpenedRun openRunDirectory(const std::string &dir,
                           const std::function<bool(double)> &progress = {});

// Streams a Chrome Trace Event Format file from a model's rows (no document in memory).
// With `damaged`, blocks that cannot be read are left out and said there; else they throw.
void exportTraceJson(const std::string &path, const RunConfig &config, const TraceModel &trace,
                     std::vector<std::string> *damaged = nullptr);
// The same from a run directory's row files as they are now (a live or interrupted run too).
// Returns what could not be read (row files left out, rows ending early at damage), said.
std::vector<std::string> exportTraceJson(const std::string &path, const std::string &runDir);

} // namespace syncopate
