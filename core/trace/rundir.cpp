// Reading a run directory back, and the trace.json export streamed from its row files.
#include "runstore.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <filesystem>
#include <map>
#include <tuple>

namespace syncopate {
namespace fs = std::filesystem;

namespace {

// A folder's row files. One that cannot be read (cut to nothing by a kill right after it was
// made, a directory by that name, damage in its header) is left out and said, so that the
// others still open; a row that ends early at damage keeps the blocks before it. Two files of
// one row (a stray copy from another run) are refused: which one belongs cannot be told.
struct RowFiles {
    std::vector<std::unique_ptr<ChunkReader>> readers;
    std::vector<std::string> files;    // the readers', by name
    std::vector<std::string> problems; // "PATH ...: what; what was done"
};

RowFiles openRowFiles(const std::string &dir)
{
    RowFiles out;
    std::vector<fs::directory_entry> entries;
    std::error_code ec;
    for (const auto &entry : fs::directory_iterator(dir, ec))
        if (entry.path().extension() == ".syr")
            entries.push_back(entry);
    std::sort(entries.begin(), entries.end());
    std::map<std::tuple<int, int, int>, std::string> seen;
    for (const auto &entry : entries) {
        const std::string path = entry.path().string();
        if (!entry.is_regular_file(ec)) {
            out.problems.push_back(path + ": " + (entry.is_directory(ec) ? "a directory" : "not a regular file") +
                                   ", not a row file; left out");
            continue;
        }
        std::unique_ptr<ChunkReader> reader;
        try {
            reader = std::make_unique<ChunkReader>(path);
        } catch (const StoreError &e) {
            out.problems.push_back(std::string(e.what()) + "; its row is left out");
            continue;
        }
        const RowDescriptor &row = reader->row();
        const auto [it, fresh] = seen.emplace(std::make_tuple(row.worker, int(row.kind), row.sub), path);
        if (!fresh)
            throw StoreError(it->second + " and " + path + " both hold the row \"" + row.name + "\" (worker " +
                             std::to_string(row.worker) + "): one is a stray copy, from another run perhaps; "
                             "move the one that does not belong out of the folder");
        if (!reader->damage().empty())
            out.problems.push_back(reader->damage() + "; the row ends there, the " +
                                   std::to_string(reader->damagedBytes()) + " bytes after it are not read");
        out.files.push_back(entry.path().filename().string());
        out.readers.push_back(std::move(reader));
    }
    return out;
}

// The evaluator's row is worker `workers` (chunkfile.h), and no other row may be: a row of a
// worker the config does not have is another run's.
void checkRowWorker(const ChunkReader &r, const RunConfig &config)
{
    const bool evaluator = r.row().kind == RowKind::Evaluator;
    if (evaluator ? r.row().worker != config.workers : r.row().worker >= config.workers)
        throw StoreError(r.path() + ": " + (evaluator ? "the evaluator's row" : "row") + " of worker " +
                         std::to_string(r.row().worker) + " in a run of " + std::to_string(config.workers) +
                         " workers");
}

bool hasCommLanes(const std::vector<std::unique_ptr<ChunkReader>> &readers)
{
    return std::any_of(readers.begin(), readers.end(), [](const auto &r) { return r->row().kind == RowKind::CommLane; });
}

// A run folder's config.json; a bad one is the folder's damage (StoreError naming the file).
RunConfig readRunConfig(const std::string &path)
{
    try {
        return parseConfig(readJsonFile(path));
    } catch (const ConfigError &e) {
        // readJsonFile's own errors name the file already.
        const std::string what = e.what();
        throw StoreError(what.rfind(path, 0) == 0 ? what : path + ": " + what);
    }
}

enum class Want { String, Number, Integer, Numbers, Strings, Object };

bool hasType(const nlohmann::json &v, Want want)
{
    auto all = [&](auto pred) {
        return v.is_array() && std::all_of(v.begin(), v.end(), pred);
    };
    switch (want) {
    case Want::String: return v.is_string();
    case Want::Number: return v.is_number() || v.is_null(); // null: not finite when written
    case Want::Integer: return v.is_number_integer();
    case Want::Numbers: return all([](const nlohmann::json &e) { return e.is_number(); });
    case Want::Strings: return all([](const nlohmann::json &e) { return e.is_string(); });
    case Want::Object: return v.is_object();
    }
    return false;
}

const char *wantName(Want want)
{
    switch (want) {
    case Want::String: return "a string";
    case Want::Number: return "a number";
    case Want::Integer: return "an integer";
    case Want::Numbers: return "an array of numbers";
    case Want::Strings: return "an array of strings";
    case Want::Object: return "an object";
    }
    return "?";
}

// summary.json comes from disk like any other file: a field of the wrong type is dropped (and
// said), so that every reader can take the fields it finds at their type.
void checkSummary(nlohmann::json &summary, const std::string &path, std::vector<std::string> &problems)
{
    struct Field {
        const char *key;
        Want want;
    };
    static const Field fields[] = {
        {"status", Want::String},          {"error", Want::String},
        {"mode", Want::String},            {"workers", Want::Integer},
        {"steps", Want::Integer},          {"steps_completed", Want::Integer},
        {"wall_s", Want::Number},          {"samples_per_s", Want::Number},
        {"final_loss", Want::Number},      {"stall_fraction", Want::Number},
        {"stall_ms_per_worker", Want::Numbers}, {"delay_ms_per_worker", Want::Numbers},
        {"descheduled_ms_per_worker", Want::Numbers}, {"descheduled_fraction", Want::Number},
        {"stall_descheduled_fraction", Want::Number},
        {"recompute_ms", Want::Number},    {"peak_activation_bytes", Want::Number},
        {"backup_workers", Want::Integer}, {"dropped_per_worker", Want::Numbers},
        {"input_wait_ms_per_worker", Want::Numbers}, {"input_wait_fraction", Want::Number},
        {"staleness_mean", Want::Number},  {"staleness_max", Want::Integer},
        {"staleness_histogram", Want::Numbers}, {"staleness_overflow", Want::Number},
        {"devices", Want::Strings},        {"reduce", Want::Object},
        {"cpu_isa", Want::String},         {"threads_per_worker", Want::Integer},
        {"final_eval_loss", Want::Number}, {"final_eval_accuracy", Want::Number},
        {"evals_skipped", Want::Integer},
    };
    auto drop = [&](nlohmann::json &obj, const std::string &name, const char *key, Want want) {
        auto it = obj.find(key);
        if (it == obj.end() || hasType(*it, want))
            return;
        problems.push_back(path + ": " + name + ": expected " + wantName(want) + ", dropped");
        obj.erase(it);
    };
    for (const Field &f : fields)
        drop(summary, f.key, f.key, f.want);
    if (summary.contains("reduce")) {
        auto &r = summary["reduce"];
        drop(r, "reduce.algorithm", "algorithm", Want::String);
        for (const char *k : {"bytes_per_worker", "time_ms_mean", "algbw_gb_s", "busbw_gb_s"})
            drop(r, std::string("reduce.") + k, k, Want::Number);
    }
    // Read as plain numbers where a null would throw.
    for (const char *k : {"final_eval_loss", "final_eval_accuracy"})
        if (summary.contains(k) && summary[k].is_null())
            summary.erase(k);
}

} // namespace

OpenedRun openRunDirectory(const std::string &dir, const std::function<bool(double)> &progress)
{
    const fs::path d(dir);
    std::error_code ec;
    if (!fs::exists(d, ec))
        throw StoreError(dir + ": no such folder");
    if (!fs::is_directory(d, ec))
        throw StoreError(dir + ": not a folder (a run is a folder with config.json and row files)");
    const std::string configPath = (d / "config.json").string();
    if (!fs::exists(configPath, ec))
        throw StoreError(dir + ": config.json is missing, so this is not a Syncopate run folder");
    OpenedRun run;
    run.config = readRunConfig(configPath);
    RowFiles rows = openRowFiles(dir);
    auto readers = std::move(rows.readers);
    run.files = std::move(rows.files);
    run.problems = std::move(rows.problems);
    if (readers.empty() && !run.problems.empty())
        throw StoreError(run.problems.front());
    if (readers.empty())
        throw StoreError(dir + ": no row files (w0.syr, ...); a folder of Syncopate 0.1 or another tool?");
    std::uint64_t records = 0;
    const bool commLanes = hasCommLanes(readers);
    for (const auto &r : readers) {
        run.tornBytes += r->tornBytes();
        records += r->records();
        checkRowWorker(*r, run.config);
    }
    const std::string summaryPath = (d / "summary.json").string();
    if (fs::exists(summaryPath, ec)) {
        try {
            run.summary = readJsonFile(summaryPath);
        } catch (const ConfigError &e) {
            // Cut short by a kill (it is replaced atomically, so rarely) or damaged: the run
            // is taken for one that did not end, and the reason said.
            run.summary = nlohmann::json();
            run.problems.push_back(std::string(e.what()) + "; the run is read as one that did not end");
        }
    }
    if (!run.summary.is_object())
        run.summary = nlohmann::json::object();
    checkSummary(run.summary, summaryPath, run.summaryProblems);
    const std::string status = run.summary.value("status", "running");
    run.live = runFolderBeingWritten(dir);
    run.interrupted = !run.live && (status == "running" || !run.summary.contains("status"));
    if (run.interrupted)
        run.summary["status"] = "interrupted";
    else if (run.live)
        run.summary["status"] = "running";
    for (const char *f : {"config.json", "summary.json", "metrics.csv", "index.syi", "trace.json",
                          "params-init.safetensors", "params-final.safetensors"})
        if (fs::exists(d / f, ec))
            run.files.emplace_back(f);

    const auto freshModel = [&] {
        return std::make_shared<TraceModel>(run.config.workers, run.config.prefetch, run.config.batch, commLanes);
    };
    run.trace = freshModel();
    bool indexed = false;
    const std::string indexPath = (d / "index.syi").string();
    try {
        indexed = run.trace->loadIndex(indexPath);
        // Written when the run ended, from every record: row files that hold fewer (or more)
        // now changed after it ended, cut or damaged. They are read as they are, and that said.
        if (indexed && run.trace->recordCount() != records) {
            run.problems.push_back(indexPath + ": counted " + std::to_string(run.trace->recordCount()) +
                                   " records when the run ended, the row files hold " + std::to_string(records) +
                                   " now (changed since: cut short or damaged); read as they are");
            indexed = false;
        }
    } catch (const StoreError &e) {
        // A damaged index is rebuilt from the row files, which are the truth.
        run.problems.push_back(std::string(e.what()) + "; rebuilt from the row files");
        indexed = false;
    }
    if (!indexed)
        run.trace = freshModel();
    run.trace->adoptRowFiles(std::move(readers));
    if (!indexed && !run.trace->rebuildFromFiles([&](double f) { return !progress || progress(f); }))
        throw StoreError(dir + ": opening cancelled");
    return run;
}

std::vector<std::string> exportTraceJson(const std::string &path, const std::string &runDir)
{
    const RunConfig config = readRunConfig((fs::path(runDir) / "config.json").string());
    RowFiles rows = openRowFiles(runDir);
    for (const auto &r : rows.readers)
        checkRowWorker(*r, config);
    TraceModel trace(config.workers, config.prefetch, config.batch, hasCommLanes(rows.readers));
    trace.adoptRowFiles(std::move(rows.readers));
    exportTraceJson(path, config, trace, &rows.problems);
    return rows.problems;
}


void exportTraceJson(const std::string &path, const RunConfig &config, const TraceModel &trace,
                     std::vector<std::string> *damaged)
{
    const std::string tmp = path + ".tmp";
    std::FILE *o = std::fopen(tmp.c_str(), "wb");
    if (!o)
        throw StoreError(tmp + ": cannot write (" + std::strerror(errno) + ")");
    std::fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"syncopate\",\"mode\":\"", o);
    std::fputs(config.mode.c_str(), o);
    std::fputs("\"},\"traceEvents\":[\n", o);
    std::fprintf(o, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"Syncopate %s run, %d workers\"}}",
                 config.mode.c_str(), config.workers);
    // One thread per row, named as the row is and sorted as the rows are: a worker's compute
    // (and communication, unless it has a row of its own), its prefetch lane, its communication
    // lane, an import's GPU streams and CPU threads. Row (worker w, lane l, sub-row s): thread
    // 100000 s + 1000 l + w, so a native run's threads keep the numbers they always had; the
    // async evaluator's is thread `workers`, after the workers'.
    const auto lane = [](RowKind kind) { return kind == RowKind::DataLane ? 1 : kind == RowKind::CommLane ? 2 : 0; };
    std::vector<std::int64_t> tids(trace.rowCount());
    for (std::size_t i = 0; i < trace.rowCount(); ++i) {
        const RowDescriptor &row = trace.row(i);
        tids[i] = 100000 * std::int64_t(row.sub) + 1000 * lane(row.kind) + row.worker;
        if (row.kind == RowKind::Counters)
            continue;
        // Quoted and escaped; a damaged name's bytes that are not UTF-8 become U+FFFD.
        const std::string name = nlohmann::json(row.name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        std::fprintf(o, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%" PRId64 ",\"args\":{\"name\":%s}}",
                     tids[i], name.c_str());
        std::fprintf(o, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":%" PRId64 ",\"args\":{\"sort_index\":%zu}}",
                     tids[i], i);
    }
    // A row that cannot be read to its end (a damaged block) leaves no partial file behind.
    try {
        trace.forEachRecord([&](std::size_t row, const Record &r) {
            if (r.isSpan()) {
                std::fprintf(o,
                             ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
                             "\"pid\":1,\"tid\":%" PRId64 ",\"args\":{\"step\":%" PRIu32,
                             phaseName(r.phase()), laneName(r.lane()), double(r.start) / 1e3,
                             double(r.duration()) / 1e3, tids[row], r.step);
                if (r.phase() == Phase::Push)
                    std::fprintf(o, ",\"staleness\":%.0f", r.value);
                else if (r.phase() == Phase::Pull)
                    std::fprintf(o, ",\"version\":%.0f", r.value);
                else if (r.phase() == Phase::Reduce)
                    std::fprintf(o, ",\"bytes\":%.0f", r.value);
                else if (r.phase() == Phase::Eval && config.async()) // the snapshot's server version
                    std::fprintf(o, ",\"version\":%.0f", r.value);
                std::fputs("}}", o);
            } else {
                const std::string who = isEvaluator(r, config.workers) ? std::string("evaluator")
                                                                       : "worker " + std::to_string(r.worker);
                std::fprintf(o,
                             ",\n{\"name\":\"%s\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":1,\"tid\":%d,"
                             "\"step\":%" PRIu32 ",\"args\":{\"%s\":%.9g}}",
                             counterName(r.counter()), double(r.start) / 1e3, int(r.worker), r.step,
                             who.c_str(), r.value);
            }
        }, damaged);
    } catch (...) {
        std::fclose(o);
        std::remove(tmp.c_str());
        throw;
    }
    std::fputs("\n]}\n", o);
    const bool ok = !std::ferror(o);
    if (std::fclose(o) != 0 || !ok) {
        std::remove(tmp.c_str());
        throw StoreError(path + ": write failed (disk full?)");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
        throw StoreError(path + ": cannot replace (" + std::strerror(errno) + ")");
}

} // namespace syncopate
