// A run directory is the run's store, written while the run goes on:
//   config.json               the resolved config (with seed), written first
//   w<N>.syr, w<N>-data.syr   one row file per timeline row (chunkfile.h), flushed ~1 s
//   evaluator.syr             async: the evaluator's row (its eval spans and counters)
//   metrics.csv               one row per (worker, step), appended as steps complete
//   summary.json              replaced atomically every few seconds ("running") and at the end
//   index.syi                 the summaries for drawing without reading spans (at the end)
//   params-*.safetensors      parameters before and after training
//   trace.json                Chrome Trace Event Format export, streamed from the row files
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
    std::uint64_t tornBytes = 0; // dropped from the ends of row files
    // Fields of summary.json of the wrong type, dropped: "summary.json: steps_completed: expected
    // an integer". Readers of summary may rely on every field it still has being of its type.
    std::vector<std::string> summaryProblems;
    std::vector<std::string> files;
    std::shared_ptr<TraceModel> trace;
};

// Opens a run directory through its row files (trace.json is never read). progress(fraction)
// is called while an interrupted run is indexed again and may return false to cancel (then
// StoreError "cancelled"). Throws StoreError or ConfigError naming the file.
OpenedRun openRunDirectory(const std::string &dir,
                           const std::function<bool(double)> &progress = {});

// Streams a Chrome Trace Event Format file from a model's rows (no document in memory).
void exportTraceJson(const std::string &path, const RunConfig &config, const TraceModel &trace);
// The same from a run directory's row files as they are now (a live or interrupted run too).
void exportTraceJson(const std::string &path, const std::string &runDir);

} // namespace syncopate
