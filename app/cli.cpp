// syncopate-cli: runs experiments headless, lists presets, validates configs.
#include "config.h"
#include "cpu/cpudevice.h"
#include "exporter.h"
#include "gpubackend.h"
#include "kineto.h"
#include "manpage.h"
#include "rundata.h"
#include "session.h"
#include "settings.h"
#ifdef SYNCOPATE_HAVE_MPI
#include "mpicomm.h"
#endif

#include <QApplication>
#include <QDir>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace syncopate;

namespace {

std::atomic<int> g_interrupts{0};

#ifdef SYNCOPATE_HAVE_MPI
// Set when mpirun started this process: it is one rank of the run.
std::shared_ptr<MpiCommunicator> g_mpi;
#endif
// Rank 0, or the only process: the one that prints and writes.
bool g_root = true;

// Under mpirun a rank may get Ctrl-C's SIGINT and mpirun's SIGTERM both: mpirun's SIGKILL a
// second later is the "now" there, and rank 0 uses that second to close the run.
std::atomic<bool> g_rank{false};

std::atomic<int> g_signal{0}; // the first stopping signal: SIGINT (Ctrl-C) or SIGTERM

void onInterrupt(int sig)
{
    int none = 0;
    g_signal.compare_exchange_strong(none, sig);
    if (g_interrupts.fetch_add(1) >= 1 && !g_rank.load())
        std::_Exit(130); // a second Ctrl-C means now
}

// Also the man page's synopsis (up to the blank line) and description (after it).
constexpr const char *kUsage =
    "usage:\n"
    "  syncopate-cli run [--preset NAME | --config FILE] [--set KEY=VALUE ...] [--out DIR]\n"
    "                    [--images [--window STEP_FROM:STEP_TO]]\n"
    "  syncopate-cli presets            list the presets with their explanation\n"
    "  syncopate-cli validate FILE      check a config (or preset) file\n"
    "  syncopate-cli keys               list every config key, its default and meaning\n"
    "  syncopate-cli devices            list the CPU and the CUDA GPUs a run can use\n"
    "  syncopate-cli info DIR           status, mode, workers, steps, spans, time and files\n"
    "                                   of a run folder (also one that was interrupted)\n"
    "  syncopate-cli export DIR [FILE]  write the run's trace.json (Perfetto) from its row files\n"
    "  syncopate-cli import FILE|FOLDER... [--out DIR] [--images [--window N_FROM:N_TO]]\n"
    "                    [--align-clocks]\n"
    "                                   read PyTorch profiler (Kineto) traces, one per rank\n"
    "                                   (.json or .json.gz), into a run folder: stalls per rank\n"
    "                                   per step, the straggler, per-rank timeline rows\n"
    "\n"
    "run streams into DIR (default: runs/<time>) as it goes: config.json, one row file per\n"
    "timeline row (w0.syr, ...) and metrics.csv, flushed every second, and summary.json every\n"
    "few seconds; at the end index.syi, the parameters (params-init/final.safetensors) and\n"
    "trace.json. A run killed at any moment opens as \"interrupted\" with all but its last second.\n"
    "--set takes dotted keys (train.lr=0.05, workers_slowdown=[1,3,1,1]); the value is\n"
    "JSON where it parses, else a string. --images also draws timeline.png, loss.png,\n"
    "stalls.png, staleness.png, memory.png and throughput.png into DIR; the timeline shows\n"
    "steps STEP_FROM to STEP_TO (default: five steps from a tenth of the way in).\n";

void printUsage(std::FILE *to)
{
    std::fputs(kUsage, to);
}

std::string defaultOutDir(const char *prefix = "")
{
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
    const std::string buf = std::string("runs/") + prefix + stamp;
    // Two runs started in the same second get folders of their own.
    std::string dir = buf;
    std::error_code ec;
    for (int i = 2; std::filesystem::exists(dir, ec); ++i)
        dir = buf + "-" + std::to_string(i);
    return dir;
}

void drawProgress(std::int64_t done, std::int64_t total, double elapsedS)
{
    const int width = 30;
    const double f = total > 0 ? double(done) / double(total) : 0.0;
    const int filled = int(f * width);
    std::string bar(std::size_t(filled), '#');
    bar.resize(width, '.');
    const double remaining = done > 0 ? elapsedS * double(total - done) / double(done) : 0.0;
    std::fprintf(stderr, "\r[%s] %3d%%  step %lld/%lld  %.1fs elapsed  %.1fs left  ", bar.c_str(),
                 int(f * 100), (long long)done, (long long)total, elapsedS, remaining);
    std::fflush(stderr);
}

// Which kernels the CPU ran: oneDNN's instruction set (and the threads of each CPU worker).
void printCpu(const nlohmann::json &s)
{
    if (!s.contains("cpu_isa"))
        return;
    std::printf("cpu isa   %s", s["cpu_isa"].get<std::string>().c_str());
    if (s.contains("threads_per_worker"))
        std::printf(", %lld OpenMP thread(s) per worker",
                    (long long)s["threads_per_worker"].get<std::int64_t>());
    std::printf("\n");
}

void printSummary(const RunConfig &config, const nlohmann::json &s, const std::string &dir)
{
    auto num = [&](const char *key) {
        return s.contains(key) && s[key].is_number() ? s[key].get<double>() : 0.0;
    };
    std::printf("run       %s: %s, %d workers, batch %d per worker, %s\n", dir.c_str(),
                config.mode.c_str(), config.workers, config.batch,
                s.value("status", "").c_str());
    std::printf("steps     %lld of %d in %.2f s, %.0f samples/s\n",
                (long long)s.value("steps_completed", 0), config.steps, num("wall_s"),
                num("samples_per_s"));
    if (s.contains("final_loss") && s["final_loss"].is_number())
        std::printf("loss      %.5f (mean over workers at the last step)\n", num("final_loss"));
    std::printf("stalls    %.1f%% of worker time waiting;", 100.0 * num("stall_fraction"));
    for (const auto &v : s["stall_ms_per_worker"])
        std::printf(" %.0f", v.get<double>());
    std::printf(" ms per worker\n");
    if (s.contains("descheduled_fraction")) {
        std::printf("cpu       %.1f%% of worker time the OS did not run a worker that could run;",
                    100.0 * num("descheduled_fraction"));
        for (const auto &v : s["descheduled_ms_per_worker"])
            std::printf(" %.0f", v.get<double>());
        std::printf(" ms per worker\n");
        if (s.contains("stall_descheduled_fraction"))
            std::printf("          %.1f%% of the stalls were waits for a worker the OS was not running\n",
                        100.0 * num("stall_descheduled_fraction"));
    }
    if (config.async())
        std::printf("staleness mean %.2f, max %lld\n", num("staleness_mean"),
                    (long long)s.value("staleness_max", 0));
    std::printf("memory    peak activations %.2f MiB per worker%s\n",
                num("peak_activation_bytes") / 1048576.0,
                config.checkpoint ? (", recompute " + std::to_string(int(num("recompute_ms"))) +
                                         " ms in all")
                                            .c_str()
                                      : "");
    if (s.contains("final_eval_loss")) {
        std::printf("eval      loss %.5f", num("final_eval_loss"));
        if (s.contains("final_eval_accuracy"))
            std::printf(", accuracy %.2f%%", 100.0 * num("final_eval_accuracy"));
        std::printf(" on held-out data\n");
    }
    if (s.contains("evals_skipped") && s["evals_skipped"].is_number_integer() && s["evals_skipped"].get<std::int64_t>() > 0)
        std::printf("note      the evaluator fell behind: %lld snapshot(s) skipped, replaced by newer ones while it "
                    "scored (eval.every smaller than one evaluation's worth of pushes)\n",
                    (long long)s["evals_skipped"].get<std::int64_t>());
    if (s.contains("reduce") && s["reduce"].value("bytes_per_worker", 0.0) > 0) { // one worker: none
        const auto &r = s["reduce"];
        std::printf("reduce    %s: %.3f ms per step for %.2f MiB, algbw %.2f GB/s, busbw %.2f GB/s\n",
                    r.value("algorithm", "").c_str(), r.value("time_ms_mean", 0.0),
                    r.value("bytes_per_worker", 0.0) / 1048576.0, r.value("algbw_gb_s", 0.0),
                    r.value("busbw_gb_s", 0.0));
    }
    if (s.contains("devices") && !s["devices"].empty() && s["devices"][0] != "cpu") {
        std::printf("devices  ");
        for (const auto &d : s["devices"])
            std::printf(" %s", d.get<std::string>().c_str());
        std::printf("\n");
    }
    printCpu(s);
    if (s.contains("error"))
        std::printf("error     %s\n", s["error"].get<std::string>().c_str());
}

// The same drawing code as the app, on the offscreen platform when there is no display.
bool writeImages(const std::string &dir, std::int64_t fromStep, std::int64_t toStep)
{
    if (!std::getenv("DISPLAY") && !std::getenv("WAYLAND_DISPLAY") && !std::getenv("QT_QPA_PLATFORM"))
        setenv("QT_QPA_PLATFORM", "offscreen", 1);
    prepareRuntimeDirectory();
    static int argc = 1;
    static char name[] = "syncopate-cli";
    static char *argv[] = {name, nullptr};
    QApplication app(argc, argv);
    RunDataPtr data;
    try {
        data = RunData::fromOpened(openRunDirectory(dir), QDir(QString::fromStdString(dir)).dirName());
    } catch (const std::exception &e) {
        std::fprintf(stderr, "syncopate-cli: images: %s\n", e.what());
        return false;
    }
    QString error;
    if (toStep < 0) {
        // A readable default: five steps from a tenth of the way in (past the warm-up).
        std::int64_t steps = 0;
        for (int w = 0; w < data->workers(); ++w)
            steps = std::max<std::int64_t>(steps, std::int64_t(data->steps(w).size()) * data->stepsPerPoint(w));
        fromStep = steps / 10;
        toStep = std::min<std::int64_t>(steps - 1, fromStep + 4);
    }
    const QStringList files = renderRunImages(data, QString::fromStdString(dir), QSize(1600, 800), &error,
                                              fromStep, toStep);
    if (files.size() < 6) {
        std::fprintf(stderr, "syncopate-cli: images: %s\n", qPrintable(error));
        return false;
    }
    std::printf("images    %s\n", qPrintable(files.join(QStringLiteral(", "))));
    return true;
}

// control.json in the run folder: live knobs from outside the process, as the app writes them
// for a run over MPI ranks: {"slowdown": [factor per worker], "paused": [bool per worker]},
// replaced atomically. Read when its time stamp changes; a value that changed is applied (a
// worker of another rank gets it over MPI); a file that does not parse is left for the next.
class ControlFile {
public:
    ControlFile(std::string path, int workers)
        : m_path(std::move(path)), m_slowdown(std::size_t(workers), -1.0), m_paused(std::size_t(workers), -1)
    {
    }
    void apply(Engine &engine)
    {
        std::error_code ec;
        const auto stamp = std::filesystem::last_write_time(m_path, ec);
        if (ec || stamp == m_stamp)
            return;
        nlohmann::json j;
        try {
            j = readJsonFile(m_path, 1 << 20);
        } catch (const std::exception &) {
            return;
        }
        m_stamp = stamp;
        if (!j.is_object())
            return;
        const auto slow = j.find("slowdown"), pause = j.find("paused");
        for (std::size_t w = 0; w < m_slowdown.size(); ++w) {
            if (slow != j.end() && slow->is_array() && w < slow->size() && (*slow)[w].is_number()) {
                const double f = std::clamp((*slow)[w].get<double>(), 1.0, 1000.0);
                if (f != m_slowdown[w])
                    engine.setSlowdown(int(w), m_slowdown[w] = f);
            }
            if (pause != j.end() && pause->is_array() && w < pause->size() && (*pause)[w].is_boolean()) {
                const int p = (*pause)[w].get<bool>() ? 1 : 0;
                if (p != m_paused[w])
                    engine.setPaused(int(w), (m_paused[w] = p) != 0);
            }
        }
    }

private:
    std::string m_path;
    std::filesystem::file_time_type m_stamp{};
    std::vector<double> m_slowdown;
    std::vector<int> m_paused;
};

// --window STEP_FROM:STEP_TO, the steps the timeline image shows.
void parseWindow(const std::string &w, std::int64_t *fromStep, std::int64_t *toStep)
{
    const auto colon = w.find(':');
    char *endA = nullptr, *endB = nullptr;
    const long long f = colon == std::string::npos ? -1 : std::strtoll(w.c_str(), &endA, 10);
    const long long t = colon == std::string::npos ? -1 : std::strtoll(w.c_str() + colon + 1, &endB, 10);
    if (colon == std::string::npos || endA != w.c_str() + colon || *endB != '\0' || f < 0 || t < f)
        throw ConfigError("--window takes STEP_FROM:STEP_TO, e.g. 10:14 (got \"" + w + "\")", {});
    *fromStep = f;
    *toStep = t;
}

int commandRun(const std::vector<std::string> &args)
{
    bool images = false;
    std::int64_t fromStep = 0, toStep = -1; // the timeline image's steps; -1: a default window
    nlohmann::json flat = nlohmann::json::object();
    std::string outDir;
    std::vector<std::string> sets;
    std::vector<int> serverOrder;
    bool haveSource = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size())
                throw ConfigError(a + " needs a value", {});
            return args[++i];
        };
        if (a == "--preset" || a == "--config") {
            if (haveSource)
                throw ConfigError("give --preset or --config once", {});
            haveSource = true;
            const std::string source = value();
            const nlohmann::json cfg = a == "--preset" ? loadPreset(source).config : readJsonFile(source);
            flat = flattenConfig(cfg.contains("config") && cfg["config"].is_object()
                                     ? cfg["config"]
                                     : cfg);
            if (a == "--config")
                resolveDataPaths(flat, source);
        } else if (a == "--set") {
            sets.push_back(value());
        } else if (a == "--out") {
            outDir = value();
            if (outDir.empty())
                throw ConfigError("--out needs a folder (an empty one writes runs/<time>: leave --out out)", {});
        } else if (a == "--images") {
            images = true;
        } else if (a == "--window") {
            parseWindow(value(), &fromStep, &toStep);
        } else if (a == "--server-order") {
            // Hidden, a test hook: async's scripted server order (Engine::scriptServerOrder),
            // comma-separated, so that threads and ranks can be compared on one schedule.
            std::stringstream in(value());
            for (std::string op; std::getline(in, op, ',');) {
                try {
                    serverOrder.push_back(std::stoi(op));
                } catch (const std::exception &) {
                    throw ConfigError("--server-order: \"" + op + "\" is not a worker's +/-(index + 1)", {});
                }
            }
        } else {
            throw ConfigError("run: unknown argument \"" + a + "\"", {});
        }
    }
    for (const auto &s : sets)
        applyAssignment(flat, s);
    std::shared_ptr<Communicator> comm;
#ifdef SYNCOPATE_HAVE_MPI
    if (g_mpi) {
        // The run's workers are the ranks' threads.
        const auto wpr = flat.find("mpi.workers_per_rank");
        const int perRank = wpr != flat.end() && wpr->is_number_integer() ? wpr->get<int>() : 1;
        const int workers = g_mpi->ranks() * std::max(1, perRank);
        const auto given = flat.find("workers");
        if (g_root && given != flat.end() && *given != workers)
            std::fprintf(stderr, "note: workers = %s becomes %d: %d ranks x mpi.workers_per_rank = %d\n",
                         given->dump().c_str(), workers, g_mpi->ranks(), perRank);
        flat["workers"] = workers;
        comm = g_mpi;
        g_rank = true;
    }
#endif
    // Over MPI every rank prepares its own data and replicas; a failure on one (a data file
    // missing on that host) is reported by every rank, naming it, before anything runs.
    PreparedRun prepared;
    std::unique_ptr<Engine> enginePtr;
    std::string localError;
    try {
        prepared = prepareRun(flat);
#ifdef SYNCOPATE_HAVE_MPI
        if (g_mpi) {
            g_mpi->setTimeout(prepared.config.commTimeoutS);
            g_mpi->setAllreduce(prepared.config.allreduce);
        }
#endif
        enginePtr = std::make_unique<Engine>(prepared.config, prepared.train, prepared.eval, comm);
    } catch (const std::exception &e) {
        if (!comm)
            throw;
        localError = e.what();
    }
#ifdef SYNCOPATE_HAVE_MPI
    if (g_mpi)
        g_mpi->agreeReady(localError);
#endif
    Engine &engine = *enginePtr;
    if (outDir.empty())
        outDir = defaultOutDir();
    if (!comm)
        if (const std::string w = oversubscriptionWarning(prepared.config, coreBudget()); !w.empty())
            std::fprintf(stderr, "warning: %s\n", w.c_str());

    engine.setOutputDirectory(outDir);
    if (!serverOrder.empty())
        engine.scriptServerOrder(serverOrder);
    if (!g_root)
        engine.setRetention(Engine::Retention::None); // rank 0 keeps the run
    std::signal(SIGINT, onInterrupt);
    std::signal(SIGTERM, onInterrupt);
    const bool tty = g_root && isatty(STDERR_FILENO);
    engine.start(); // throws StoreError naming the folder when it cannot be written
    // Said once the handlers are in place, so a script (or a test) knows from here on that an
    // interrupt stops the run and keeps it.
    if (g_root) {
        if (comm) {
            const auto all = comm->hosts();
            std::string hosts;
            for (const auto &name : std::set<std::string>(all.begin(), all.end()))
                hosts += (hosts.empty() ? "" : ", ") + name;
            std::fprintf(stderr, "%d ranks x %d workers on %s\n", comm->ranks(),
                         prepared.config.workers / comm->ranks(), hosts.c_str());
        }
        std::fprintf(stderr, "running into %s: Ctrl-C stops and keeps what ran\n", outDir.c_str());
    }
    std::fflush(stderr);
    bool stopAsked = false;
    ControlFile control((std::filesystem::path(outDir) / "control.json").string(), prepared.config.workers);
    while (!engine.waitFor(std::chrono::milliseconds(100))) {
        if (g_root)
            control.apply(engine);
        if (g_interrupts.load() > 0 && !stopAsked) {
            stopAsked = true;
            if (g_root)
                std::fprintf(stderr, comm || g_signal.load() == SIGTERM ? "\nstopping...\n"
                                                                        : "\nstopping (Ctrl-C again to quit at once)...\n");
#ifdef SYNCOPATE_HAVE_MPI
            if (g_mpi)
                g_mpi->hurry(); // mpirun is ending the job: SIGKILL follows in a second
#endif
            engine.requestStop();
        }
        if (tty)
            drawProgress(engine.progress(), prepared.config.steps, double(engine.elapsedNs()) / 1e9);
    }
    if (tty) {
        drawProgress(engine.progress(), prepared.config.steps, double(engine.elapsedNs()) / 1e9);
        std::fputc('\n', stderr);
    }
    const int code = engine.state() == RunState::Finished  ? 0
                     : engine.state() == RunState::Stopped ? 130
                                                           : 1;
    if (!g_root) {
        // Rank 0 prints the run's error; a rank adds its own when it is the one named.
        if (engine.error().find(comm->rankName(comm->rank())) != std::string::npos)
            std::fprintf(stderr, "%s\n", engine.error().c_str());
        return code;
    }
    printSummary(prepared.config, engine.summary(), outDir);
    if (images && !writeImages(outDir, fromStep, toStep))
        return 1;
    return code;
}

std::string humanBytes(double b)
{
    char buf[32];
    if (b >= 1073741824.0)
        std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
    else if (b >= 1048576.0)
        std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
    else
        std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
    return buf;
}

// A run directory from the terminal: what it holds and whether it ended.
int commandInfo(const std::vector<std::string> &args)
{
    if (args.size() != 1)
        throw ConfigError("info takes one run folder", {});
    const std::string &dir = args[0];
    const bool tty = isatty(STDERR_FILENO);
    int shown = -1;
    const OpenedRun run = openRunDirectory(dir, [&](double f) {
        // Only a run without its index (interrupted) is read through, so this is rare.
        if (tty && int(f * 100) != shown) {
            shown = int(f * 100);
            std::fprintf(stderr, "\rindexing the row files: %3d%%", shown);
        }
        return true;
    });
    if (shown >= 0)
        std::fputc('\n', stderr);
    const auto &s = run.summary;
    const TraceModel &t = *run.trace;
    std::printf("run       %s\n", dir.c_str());
    std::printf("status    %s%s\n", s.value("status", "?").c_str(),
                run.interrupted ? " (the process ended before the run did: everything up to its last flush is here)"
                : run.live      ? " (another process is writing it now: this is what it has flushed so far)"
                                : "");
    if (s.value("source", "") == "kineto")
        std::printf("source    PyTorch profiler trace: %d rank(s) of world size %lld, one worker per rank\n",
                    run.config.workers, (long long)s.value("world_size", 0LL));
    else
        std::printf("mode      %s, %d workers, batch %d per worker, device %s\n", run.config.mode.c_str(),
                    run.config.workers, run.config.batch, run.config.device.c_str());
    std::int64_t steps = 0;
    for (int w = 0; w < t.workers(); ++w)
        steps = std::max<std::int64_t>(steps, std::int64_t(t.counter(CounterId::Loss, w).size()) *
                                                  t.stepsPerPoint(w));
    // A run that did not end: its summary.json is seconds older than its row files.
    const std::int64_t completed = run.interrupted || run.live ? std::max<std::int64_t>(steps, s.value("steps_completed", 0LL))
                                                               : s.value("steps_completed", steps);
    std::printf("steps     %lld recorded of %d configured\n", (long long)completed, run.config.steps);
    std::printf("spans     %llu in %zu rows, %llu records in all\n", (unsigned long long)t.spanCount(),
                t.rowCount(), (unsigned long long)t.recordCount());
    std::printf("time      0 to %.3f s\n", double(t.endNs()) / 1e9);
    std::uint64_t bytes = 0;
    for (const auto &f : run.files) {
        std::error_code ec;
        bytes += std::filesystem::file_size(std::filesystem::path(dir) / f, ec);
    }
    std::printf("files     %s (%s)\n", [&] {
        std::string list;
        for (const auto &f : run.files)
            list += (list.empty() ? "" : ", ") + f;
        return list;
    }().c_str(), humanBytes(double(bytes)).c_str());
    if (run.tornBytes)
        std::printf("torn      %llu bytes at the ends of row files dropped (%s)\n", (unsigned long long)run.tornBytes,
                    run.interrupted || run.live ? "written after their last flush"
                                                : "the files are shorter than when the run ended");
    printCpu(s);
    if (s.contains("error"))
        std::printf("error     %s\n", s["error"].get<std::string>().c_str());
    for (const auto &p : run.summaryProblems)
        std::printf("warning   %s\n", p.c_str());
    for (const auto &p : run.problems)
        std::printf("warning   %s\n", p.c_str());
    return 0;
}

int commandExport(const std::vector<std::string> &args)
{
    if (args.empty() || args.size() > 2)
        throw ConfigError("export takes a run folder and optionally the file to write", {});
    namespace fs = std::filesystem;
    const std::string whole = (fs::path(args[0]) / "trace.json").string();
    std::string out = args.size() == 2 ? args[1] : whole;
    // The run's own trace.json is written from every row when it ends; an export of rows that
    // are damaged now goes beside it rather than over it.
    std::error_code ec;
    const bool keepWhole = args.size() == 1 && fs::exists(whole, ec);
    if (keepWhole)
        out = (fs::path(args[0]) / "trace-export.json").string();
    const std::vector<std::string> problems = exportTraceJson(out, args[0]);
    for (const auto &p : problems)
        std::fprintf(stderr, "syncopate-cli: warning: %s\n", p.c_str());
    if (keepWhole && problems.empty()) {
        fs::rename(out, whole, ec);
        if (ec)
            throw StoreError(whole + ": cannot replace (" + ec.message() + ")");
        out = whole;
    } else if (keepWhole) {
        std::fprintf(stderr, "syncopate-cli: %s kept (written from every row when the run ended); what "
                             "can be read now is in %s\n", whole.c_str(), out.c_str());
    }
    std::printf("%s\n", out.c_str());
    return 0;
}

// PyTorch profiler traces of one job, one file per rank, into a run folder.
int commandImport(const std::vector<std::string> &args)
{
    std::vector<std::string> files;
    std::string out;
    bool images = false;
    std::int64_t fromStep = -1, toStep = -1; // ProfilerStep numbers
    KinetoOptions options;
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--out") {
            if (i + 1 >= args.size())
                throw ConfigError("import: --out needs a folder", {});
            out = args[++i];
            if (out.empty())
                throw ConfigError("import: --out needs a folder", {});
        } else if (args[i] == "--images") {
            images = true;
        } else if (args[i] == "--align-clocks") {
            options.alignClocks = true;
        } else if (args[i] == "--window") {
            if (i + 1 >= args.size())
                throw ConfigError("import: --window needs STEP_FROM:STEP_TO (ProfilerStep numbers)", {});
            parseWindow(args[++i], &fromStep, &toStep);
        } else if (args[i].rfind("--", 0) == 0) {
            throw ConfigError("import: unknown option " + args[i] +
                                  " (expected --out DIR, --images, --window STEP_FROM:STEP_TO, --align-clocks)", {});
        } else {
            files.push_back(args[i]);
        }
    }
    if (files.empty())
        throw ConfigError("import takes one or more trace files (or a folder of them)", {});
    if (out.empty())
        out = defaultOutDir("import-");
    KinetoJob job;
    try {
        job = importKineto(files, options);
    } catch (const ImportError &e) {
        std::fprintf(stderr, "syncopate-cli: import: %s\n", e.what());
        return 2;
    }
    if (toStep >= 0) {
        const long long last = job.firstStep + std::max<long long>(1, job.summaryFields().value("steps", 1LL)) - 1;
        if (toStep < job.firstStep || fromStep > last) {
            std::fprintf(stderr, "syncopate-cli: import: --window %lld:%lld is outside the trace's steps (ProfilerStep#%lld to #%lld)\n",
                         (long long)fromStep, (long long)toStep, (long long)job.firstStep, last);
            return 2;
        }
    }
    writeImportedRun(job, out);
    for (const auto &w : job.warnings)
        std::fprintf(stderr, "warning   %s\n", w.c_str());
    std::printf("run       %s (imported from %zu file%s)\n", out.c_str(), job.ranks.size(),
                job.ranks.size() == 1 ? "" : "s");
    std::printf("ranks     %zu of world size %d\n", job.ranks.size(), job.worldSize);
    const nlohmann::json s = job.summaryFields();
    std::printf("steps     %lld (ProfilerStep#%lld on)\n", (long long)s.value("steps", 0LL), (long long)job.firstStep);
    std::printf("matched   %d collectives (by %s)\n", job.collectivesMatched, job.matchMethod.c_str());
    std::vector<double> stepMs(job.ranks.size(), 0.0), stallMs(job.ranks.size(), 0.0);
    std::vector<int> stepCount(job.ranks.size(), 0);
    for (const StepRow &r : job.steps)
        if (r.worker >= 0 && std::size_t(r.worker) < job.ranks.size()) {
            stepMs[std::size_t(r.worker)] += r.stepMs;
            stallMs[std::size_t(r.worker)] += r.waitMs;
            ++stepCount[std::size_t(r.worker)];
        }
    for (std::size_t i = 0; i < job.ranks.size(); ++i)
        std::printf("rank %-4d step %.3f ms mean, stall %.3f ms per step (%.1f%%)  %s\n", job.ranks[i].rank,
                    stepCount[i] ? stepMs[i] / stepCount[i] : 0.0, stepCount[i] ? stallMs[i] / stepCount[i] : 0.0,
                    stepMs[i] > 0 ? 100.0 * stallMs[i] / stepMs[i] : 0.0, job.ranks[i].file.c_str());
    if (job.straggler >= 0)
        std::printf("straggler rank %d: last to arrive in %d of %d collectives, %.3f ms after the next-latest on average\n",
                    job.ranks[std::size_t(job.straggler)].rank, job.stragglerLastCount, job.collectivesMatched,
                    job.stragglerMeanLateMs);
    else
        std::printf("straggler none found (%s)\n",
                    job.ranks.size() < 2         ? "one rank loaded: stalls need two or more"
                    : job.collectivesMatched > 0 ? "the ranks start every matched collective together"
                                                 : "no collective matched across ranks");
    if (options.alignClocks)
        std::printf("clocks    %s\n", job.alignmentNote.c_str());
    for (const auto &n : job.notes)
        std::printf("note      %s\n", n.c_str());
    // The store counts steps from the first ProfilerStep; --window names ProfilerStep numbers.
    if (toStep >= 0) {
        fromStep = std::max<std::int64_t>(0, fromStep - job.firstStep);
        toStep = std::max<std::int64_t>(fromStep, toStep - job.firstStep);
    }
    if (images && !writeImages(out, fromStep, toStep))
        return 1;
    return 0;
}

int commandPresets()
{
    for (const auto &p : listPresets()) {
        std::printf("%s\n  %s\n", p.name.c_str(), p.title.c_str());
        if (!p.description.empty())
            std::printf("  %s\n", p.description.c_str());
        std::printf("\n");
    }
    std::printf("(from %s)\n", presetDirectory().c_str());
    return 0;
}

int commandValidate(const std::vector<std::string> &args)
{
    if (args.size() != 1)
        throw ConfigError("validate takes one file", {});
    nlohmann::json j = readJsonFile(args[0]);
    if (j.contains("config") && j["config"].is_object())
        j = j["config"];
    PreparedRun run = prepareRun(j);
    std::printf("%s: valid\n%s\n", args[0].c_str(), run.config.toJson().dump(2).c_str());
    return 0;
}

int commandDevices()
{
    std::printf("cpu       %u hardware threads; matmuls on %s, kernels for %s (cpu_isa); "
                "elementwise on oneTBB\n",
                std::thread::hardware_concurrency(), cpuLibrary().c_str(), cpuIsa().c_str());
    std::string why;
    GpuBackend *backend = gpuBackend(&why);
    if (!backend) {
        std::printf("cuda      not available: %s\n", why.c_str());
        return 0;
    }
    const auto gpus = backend->devices();
    if (gpus.empty())
        std::printf("cuda      no CUDA device is present (%s)\n", backend->noDeviceReason().c_str());
    for (const GpuInfo &g : gpus)
        std::printf("cuda:%-4d %s, %.1f GiB (%.1f GiB free), compute capability %d.%d, %d SMs\n",
                    g.index, g.name.c_str(), double(g.totalBytes) / 1073741824.0,
                    double(g.freeBytes) / 1073741824.0, g.major, g.minor, g.multiprocessors);
    std::printf("          %s\n", backend->versions().c_str());
    return 0;
}

int commandKeys()
{
    for (const auto &k : configKeys())
        std::printf("%-22s default %-8s %s\n", k.name, k.defaultJson, k.help);
    return 0;
}

// Hidden (the build runs it): "man cli" writes syncopate-cli(1), "man app HELPFILE" writes
// syncopate(1) from the text of `syncopate --help`.
int commandMan(const std::vector<std::string> &args)
{
    if (args.size() == 1 && args[0] == "cli") {
        std::fputs(cliManPage(kUsage, SYNCOPATE_VERSION).c_str(), stdout);
        return 0;
    }
    if (args.size() == 2 && args[0] == "app") {
        std::ifstream in(args[1]);
        if (!in)
            throw std::runtime_error("cannot read " + args[1]);
        std::ostringstream help;
        help << in.rdbuf();
        std::fputs(appManPage(help.str(), SYNCOPATE_VERSION).c_str(), stdout);
        return 0;
    }
    throw std::runtime_error("usage: syncopate-cli man cli | man app HELPFILE");
}

} // namespace

int runCommand(const std::string &command, const std::vector<std::string> &args);

int main(int argc, char **argv)
{
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
        printUsage(args.empty() ? stderr : stdout);
        return args.empty() ? 2 : 0;
    }
    const std::string command = args[0];
    args.erase(args.begin());
#ifdef SYNCOPATE_HAVE_MPI
    if (command == "run" && MpiCommunicator::launchedByMpirun()) {
        try {
            g_mpi = std::make_shared<MpiCommunicator>();
        } catch (const std::exception &e) {
            std::fprintf(stderr, "syncopate-cli: %s\n", e.what());
            return 1;
        }
        g_root = g_mpi->root();
    }
    // Under mpirun every rank ends through MPI (finalised, or the job aborted by rank 0 after it
    // wrote the run); a failure every rank shares is printed once, by rank 0.
    const auto finish = [](int code) {
        if (g_mpi)
            g_mpi->end(code);
        return code;
    };
#else
    const auto finish = [](int code) { return code; };
#endif
    try {
        return finish(runCommand(command, args));
    } catch (const ConfigError &e) {
        if (g_root)
            std::fprintf(stderr, "syncopate-cli: configuration error:\n%s\n", e.what());
        return finish(2);
    } catch (const DataError &e) {
        if (g_root)
            std::fprintf(stderr, "syncopate-cli: data error: %s\n", e.what());
        return finish(2);
    } catch (const StoreError &e) {
        if (g_root)
            std::fprintf(stderr, "syncopate-cli: %s\n", e.what());
        return finish(2);
    } catch (const std::exception &e) {
        if (g_root)
            std::fprintf(stderr, "syncopate-cli: %s\n", e.what());
        return finish(1);
    }
}

int runCommand(const std::string &command, const std::vector<std::string> &args)
{
    if (command == "run")
        return commandRun(args);
    if (command == "presets")
        return commandPresets();
    if (command == "validate")
        return commandValidate(args);
    if (command == "keys")
        return commandKeys();
    if (command == "man")
        return commandMan(args);
    if (command == "devices")
        return commandDevices();
    if (command == "info")
        return commandInfo(args);
    if (command == "export")
        return commandExport(args);
    if (command == "import")
        return commandImport(args);
    std::fprintf(stderr, "syncopate-cli: unknown command \"%s\"\n\n", command.c_str());
    printUsage(stderr);
    return 2;
}
