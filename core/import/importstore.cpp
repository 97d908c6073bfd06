// An imported job written as a run directory: the same files as a native run (config.json,
// row files, metrics.csv, summary.json, index.syi, trace.json), so every view that opens a run
// opens it; summary.json says source "kineto" and carries the import's own figures.
#include "kineto.h"

#include "runstore.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <tuple>

namespace syncopate {
namespace fs = std::filesystem;

namespace {

// A rank's rows: its GPU streams (Worker sub-rows, by stream id), then its CPU threads
// (DataLane sub-rows, by tid). A rank without either keeps one empty row in its place, so that
// the rows the reader's model starts with all have a file and a name.
std::vector<RowDescriptor> rankRows(const ImportedRank &r, int worker)
{
    const std::string rank = "rank " + std::to_string(r.rank);
    std::vector<RowDescriptor> rows;
    // A rank's kernels on one GPU (the usual case) name their rows by stream alone.
    bool oneDevice = true;
    for (const auto &[device, stream] : r.streamIds)
        oneDevice = oneDevice && device == r.streamIds.front().first;
    for (std::size_t i = 0; i < r.gpuStreams.size(); ++i) {
        const long long key = r.gpuStreams[i];
        const bool nccl = std::binary_search(r.ncclStreams.begin(), r.ncclStreams.end(), key);
        const auto &[device, stream] = r.streamIds.at(std::size_t(key));
        rows.push_back({worker, RowKind::Worker,
                        rank + (oneDevice ? "" : " GPU " + std::to_string(device)) + " stream " +
                            std::to_string(stream) + (nccl ? " NCCL" : ""),
                        int(i)});
    }
    if (r.gpuStreams.empty())
        rows.push_back({worker, RowKind::Worker, rank + " GPU (no kernels)", 0});
    for (std::size_t i = 0; i < r.cpuThreads.size(); ++i)
        rows.push_back({worker, RowKind::DataLane, rank + " thread " + std::to_string(r.cpuThreads[i]), int(i)});
    if (r.cpuThreads.empty())
        rows.push_back({worker, RowKind::DataLane, rank + " CPU (no operators)", 0});
    return rows;
}

} // namespace

namespace {

// The folder's files, each path in `written` before it is made.
void writeImportedFiles(const KinetoJob &job, const std::string &dir, std::vector<std::string> &written)
{
    const int workers = int(job.ranks.size());
    const auto in = [&](const std::string &name) {
        written.push_back((fs::path(dir) / name).string());
        return written.back();
    };

    // The config a reader needs: one worker per rank, a CPU (data) lane each, the steps seen.
    nlohmann::json s = job.summaryFields();
    RunConfig config = parseConfig(nlohmann::json::object());
    config.workers = workers;
    config.prefetch = 1;
    config.steps = std::max(1, int(s.value("steps", 1)));
    config.slowdown.assign(std::size_t(workers), 1.0);
    writeFileAtomically(in("config.json"), config.toJson().dump(2) + "\n");

    // Row files: per rank one per GPU stream and one per CPU thread, written one after the other
    // (a job with thousands of threads: a writer for each at once held a file and a block's
    // buffers each, 2 GB and more descriptors than a process may have).
    std::map<std::tuple<int, RowKind, int>, std::vector<std::size_t>> byRow;
    for (std::size_t i = 0; i < job.records.size(); ++i) {
        const Record &r = job.records[i];
        if (r.worker >= workers || !r.isSpan())
            continue;
        const RowKind kind = r.lane() == Lane::Data ? RowKind::DataLane : RowKind::Worker;
        byRow[{int(r.worker), kind, i < job.recordRows.size() ? int(job.recordRows[i]) : 0}].push_back(i);
    }
    std::vector<std::string> paths;
    for (int w = 0; w < workers; ++w)
        for (const RowDescriptor &d : rankRows(job.ranks[std::size_t(w)], w)) {
            paths.push_back(in(rowFileName(d)));
            ChunkWriter writer(paths.back(), d);
            if (const auto it = byRow.find({w, d.kind, d.sub}); it != byRow.end())
                for (const std::size_t i : it->second)
                    writer.append(job.records[i]);
            writer.flush();
        }
    // The index from the files just written, as a reader rebuilds it: a record's row is its file's.
    TraceModel model(workers, true, 0);
    {
        std::vector<std::unique_ptr<ChunkReader>> readers;
        for (const std::string &p : paths)
            readers.push_back(std::make_unique<ChunkReader>(p));
        model.adoptRowFiles(std::move(readers));
    }
    model.rebuildFromFiles([](double) { return true; });

    // metrics.csv: one row per rank per step, worker = the rank's number.
    {
        const std::string path = in("metrics.csv");
        std::FILE *o = std::fopen(path.c_str(), "wb");
        if (!o)
            throw StoreError(path + ": cannot write (" + std::strerror(errno) + ")");
        std::fputs("worker,step,t_ms,step_ms,wait_ms,compute_ms,comm_ms\n", o);
        for (std::size_t i = 0; i < job.steps.size(); ++i) {
            const StepRow &s = job.steps[i];
            const KinetoJob::StepExtra x = i < job.stepExtras.size() ? job.stepExtras[i] : KinetoJob::StepExtra{};
            const int rank = s.worker >= 0 && s.worker < workers ? job.ranks[std::size_t(s.worker)].rank : s.worker;
            std::fprintf(o, "%d,%" PRId64 ",%.4f,%.4f,%.4f,%.4f,%.4f\n", rank, s.step, s.tMs, s.stepMs, s.waitMs,
                         x.computeMs, x.commMs);
        }
        const bool ok = !std::ferror(o);
        if (std::fclose(o) != 0 || !ok)
            throw StoreError(path + ": write failed (disk full?)");
    }

    // summary.json: the import's figures, and the fields every run's summary has.
    s["source"] = "kineto";
    s["mode"] = "sync";
    s["workers"] = workers;
    s["status"] = "finished";
    double stall = 0, active = 0;
    for (const StepRow &r : job.steps) {
        stall += r.waitMs;
        active += r.stepMs;
    }
    s["stall_fraction"] = active > 0 ? stall / active : 0.0;
    // Each step's window on the job clock, earliest start to latest end over the ranks: what
    // the views zoom to when asked for steps (a trace has no loss samples to end steps by).
    std::map<std::int64_t, std::pair<double, double>> windows;
    for (const StepRow &r : job.steps) {
        auto [it, fresh] = windows.try_emplace(r.step, r.tMs - r.stepMs, r.tMs);
        if (!fresh) {
            it->second.first = std::min(it->second.first, r.tMs - r.stepMs);
            it->second.second = std::max(it->second.second, r.tMs);
        }
    }
    nlohmann::json w = nlohmann::json::array();
    for (const auto &[step, range] : windows)
        w.push_back({step, range.first, range.second});
    s["step_windows_ms"] = w; // [ProfilerStep number, start, end]
    // Each rank's step times, [worker][N - first_step] (null where the rank lacks the step).
    nlohmann::json byWorker = nlohmann::json::array();
    for (int k = 0; k < workers; ++k)
        byWorker.push_back(nlohmann::json::array());
    for (const StepRow &r : job.steps) {
        if (r.worker < 0 || r.worker >= workers || r.step < job.firstStep || r.step - job.firstStep > 100000)
            continue;
        auto &row = byWorker[std::size_t(r.worker)];
        const auto i = std::size_t(r.step - job.firstStep);
        while (row.size() <= i)
            row.push_back(nullptr);
        row[i] = r.stepMs;
    }
    s["step_ms_by_worker"] = byWorker;
    s["final_loss"] = nullptr;
    s["samples_per_s"] = nullptr;
    s["delay_ms_per_worker"] = std::vector<double>(std::size_t(workers), 0.0);
    s["descheduled_ms_per_worker"] = std::vector<double>(std::size_t(workers), 0.0);
    s["descheduled_fraction"] = 0.0;
    s["recompute_ms"] = 0.0;
    s["peak_activation_bytes"] = 0;
    s["staleness_mean"] = 0.0;
    s["staleness_max"] = 0;
    s["staleness_histogram"] = nlohmann::json::array();
    model.saveIndex(in("index.syi"));
    writeFileAtomically(in("summary.json"), s.dump(2) + "\n");
    exportTraceJson(in("trace.json"), dir);
}

} // namespace

void writeImportedRun(const KinetoJob &job, const std::string &dir)
{
    const int workers = int(job.ranks.size());
    if (workers < 1)
        throw StoreError(dir + ": nothing to write, no rank was imported");
    if (workers > 256)
        throw StoreError(dir + ": " + std::to_string(workers) + " ranks; a run folder holds at most 256");
    std::error_code ec;
    const bool existed = fs::exists(dir, ec);
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
        throw StoreError(dir + ": cannot create the run folder (" +
                         (ec ? ec.message() : std::string("a file has that name")) + ")");
    std::vector<std::string> written;
    try {
        const RunFolderClaim claim(dir);
        writeImportedFiles(job, dir, written);
    } catch (...) {
        // Half a run would open as an interrupted one: what this import made goes again.
        for (const std::string &p : written) {
            fs::remove(p, ec);
            fs::remove(p + ".tmp", ec);
        }
        if (!existed) {
            fs::remove(fs::path(dir) / "run.lock", ec);
            fs::remove(dir, ec); // only when empty
        }
        throw;
    }
}

} // namespace syncopate
