// The PyTorch profiler importer: small traces written here with known steps, kernels, stalls,
// a known straggler and known clock offsets, each figure checked against the value the trace
// was built to have; every kind of bad input rejected with the file named; the run folder's rows
// (one per GPU stream, one per CPU thread) against counts from the trace's own JSON; and the
// real Kineto traces in tests/data/kineto checked against figures computed here from a plain
// JSON parse.
#include "kineto.h"
#include "runstore.h"

#include <QDir>
#include <QTemporaryDir>
#include <QTest>

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

using namespace syncopate;
using nlohmann::json;

// GCC 12 warns about designated initializers that leave members to their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace {

using Ns = std::int64_t;
constexpr Ns kMs = 1000000;
constexpr Ns kT0 = 1700000000000000LL * 1000; // an epoch time in ns

// Exact microseconds as a Chrome trace writes them ("1700000000000123.456").
std::string us(Ns ns)
{
    char b[64];
    const Ns a = ns < 0 ? -ns : ns;
    std::snprintf(b, sizeof b, "%s%lld.%03lld", ns < 0 ? "-" : "", (long long)(a / 1000), (long long)(a % 1000));
    return b;
}

struct Coll {
    std::string pg;
    long long seq;
    Ns start, end; // from the step's start
};

struct RankSpec {
    int rank = 0;
    int world = 2;
    bool distInfo = true;
    std::string backend = "nccl";
    Ns shift = 0; // the whole file's clock
    Ns late = 0;  // the default collective starts this late
    std::vector<long long> steps = {5, 6, 7};
    bool withSeq = false;
    std::vector<Coll> colls; // replaces the default collective {"0", k, 60 ms + late, 70 ms}
    long long ncclStream = 20; // the j-th collective's kernels run on stream ncclStream + j
    long long ncclGpu = -1;    // the device (pid) of the NCCL kernels; -1: the rank's own
};

// One rank's trace. Each step s (100 ms apart, window [s, s+99 ms]) holds, in ms from s:
// forward annotation [1,30] on thread 10 with cpu ops linear [2,4] (addmm [2.5,3.5] nested) and
// launches of gemm_fwd [5,15] (stream 7) and relu_fwd [10,20] (stream 8); on thread 11 the
// autograd op [35,58] launching gemm_bwd [40,50]; record_param_comms calls at [52+j, 52.5+j]
// launching the NCCL kernels on stream ncclStream+j (20+j); Optimizer.step [75,85] with add_ [76,77] launching
// sgd [80,82]; a memcpy [87,88]; a launch at 98 of a kernel that runs [100.2,100.8], after the
// window. Compute union per step 15+10+2+1+0.6 = 28.6 ms.
std::string makeRank(const RankSpec &r)
{
    std::vector<std::string> ev;
    long long corr = 100;
    const long long cpu = 1000 + r.rank, gpu = r.rank;
    auto x = [&](const std::string &cat, const std::string &name, long long pid, long long tid, Ns s, Ns e,
                 const std::string &args = "{}") {
        ev.push_back("{\"ph\": \"X\", \"cat\": \"" + cat + "\", \"name\": \"" + name + "\", \"pid\": " +
                     std::to_string(pid) + ", \"tid\": " + std::to_string(tid) + ", \"ts\": " + us(s + r.shift) +
                     ", \"dur\": " + us(e - s) + ", \"args\": " + args + "}");
    };
    auto launch = [&](long long tid, Ns at, long long stream, Ns s, Ns e, const std::string &name,
                      const std::string &cat = "kernel", long long device = -1) {
        ++corr;
        const long long on = device >= 0 ? device : gpu;
        x("cuda_runtime", cat == "kernel" ? "cudaLaunchKernel" : "cudaMemcpyAsync", cpu, tid, at, at + 5000,
          "{\"External id\": 7, \"correlation\": " + std::to_string(corr) + "}");
        x(cat, name, on, stream, s, e,
          "{\"device\": " + std::to_string(on) + ", \"stream\": " + std::to_string(stream) +
              ", \"correlation\": " + std::to_string(corr) + ", \"grid\": [1, 1, 1]}");
    };
    ev.push_back("{\"name\": \"process_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": 1, \"tid\": 0, \"args\": {\"name\": \"python\"}}");
    ev.push_back("{\"ph\": \"X\", \"cat\": \"Trace\", \"ts\": " + us(kT0 - 10 * kMs + r.shift) +
                 ", \"dur\": 400000, \"pid\": \"Spans\", \"tid\": \"PyTorch Profiler\", \"name\": \"PyTorch Profiler (0)\"}");
    ev.push_back("{\"ph\": \"s\", \"id\": 3, \"pid\": 1, \"tid\": 1, \"ts\": " + us(kT0 + r.shift) + ", \"cat\": \"ac2g\", \"name\": \"ac2g\"}");
    for (std::size_t k = 0; k < r.steps.size(); ++k) {
        const Ns s = kT0 + Ns(k) * 100 * kMs;
        const std::string n = std::to_string(r.steps[k]);
        x("user_annotation", "ProfilerStep#" + n, cpu, 10, s, s + 99 * kMs);
        x("gpu_user_annotation", "ProfilerStep#" + n, gpu, 7, s + 5 * kMs, s + 101 * kMs);
        x("user_annotation", "## forward ##", cpu, 10, s + 1 * kMs, s + 30 * kMs);
        x("cpu_op", "aten::linear", cpu, 10, s + 2 * kMs, s + 4 * kMs);
        x("cpu_op", "aten::addmm", cpu, 10, s + 2500000, s + 3500000);
        launch(10, s + 3 * kMs, 7, s + 5 * kMs, s + 15 * kMs, "gemm_fwd");
        launch(10, s + 3200000, 8, s + 10 * kMs, s + 20 * kMs, "relu_fwd");
        x("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", cpu, 11, s + 35 * kMs, s + 58 * kMs);
        launch(11, s + 36 * kMs, 7, s + 40 * kMs, s + 50 * kMs, "gemm_bwd");
        std::vector<Coll> colls = r.colls;
        if (colls.empty())
            colls.push_back({"0", (long long)k, 60 * kMs + r.late, 70 * kMs});
        for (std::size_t j = 0; j < colls.size(); ++j) {
            const Coll &c = colls[j];
            const Ns at = s + (52 + Ns(j)) * kMs;
            std::string args = "{\"Collective name\": \"allreduce\", \"dtype\": \"Float\", \"In msg nelems\": 1000, "
                               "\"Out msg nelems\": 1000, \"Group size\": 2";
            if (r.withSeq)
                args += ", \"Process Group Name\": \"" + c.pg + "\", \"Seq\": " + std::to_string(c.seq);
            x("cpu_op", "record_param_comms", cpu, 11, at, at + kMs / 2, args + "}");
            launch(11, at + kMs / 10, r.ncclStream + long(j), s + c.start, s + c.end,
                   "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "kernel",
                   r.ncclGpu);
        }
        x("user_annotation", "Optimizer.step#SGD.step", cpu, 10, s + 75 * kMs, s + 85 * kMs);
        x("cpu_op", "aten::add_", cpu, 10, s + 76 * kMs, s + 77 * kMs);
        launch(10, s + 76500000, 7, s + 80 * kMs, s + 82 * kMs, "sgd_kernel");
        launch(10, s + 86 * kMs, 7, s + 87 * kMs, s + 88 * kMs, "Memcpy HtoD (Pageable -> Device)", "gpu_memcpy");
        launch(10, s + 98 * kMs, 7, s + 100200000, s + 100800000, "late_kernel");
    }
    std::string text = "{\n \"schemaVersion\": 1,\n \"deviceProperties\": [{\"id\": 0, \"name\": \"GPU\", "
                       "\"nested\": {\"a\": [1, [2, 3]]}}],\n \"traceEvents\": [\n";
    for (std::size_t i = 0; i < ev.size(); ++i)
        text += "  " + ev[i] + (i + 1 < ev.size() ? ",\n" : "\n");
    text += " ],\n \"displayTimeUnit\": \"ms\"";
    if (r.distInfo)
        text += ",\n \"distributedInfo\": {\"backend\": \"" + r.backend + "\", \"rank\": " + std::to_string(r.rank) +
                ", \"world_size\": " + std::to_string(r.world) + "}";
    return text + "\n}\n";
}

void writeText(const std::string &path, const std::string &text, bool gzip)
{
    if (gzip) {
        gzFile f = gzopen(path.c_str(), "wb");
        QVERIFY(f);
        QCOMPARE(gzwrite(f, text.data(), unsigned(text.size())), int(text.size()));
        gzclose(f);
    } else {
        std::ofstream(path, std::ios::binary) << text;
    }
}

std::string readAll(const std::string &path) // gzread reads plain files as they are
{
    gzFile f = gzopen(path.c_str(), "rb");
    std::string out;
    if (!f)
        return out;
    char buf[1 << 16];
    int n;
    while ((n = gzread(f, buf, sizeof buf)) > 0)
        out.append(buf, std::size_t(n));
    gzclose(f);
    return out;
}

// Records: times >= 0, ordered by worker then start, spans of one lane's CPU thread never nest.
void checkRecordOrder(const KinetoJob &job)
{
    for (std::size_t i = 0; i < job.records.size(); ++i) {
        const Record &r = job.records[i];
        QVERIFY(r.start >= 0);
        QVERIFY(r.end >= r.start);
        QVERIFY(r.worker < job.ranks.size());
        if (i > 0) {
            const Record &p = job.records[i - 1];
            QVERIFY(p.worker < r.worker || (p.worker == r.worker && p.start <= r.start));
        }
    }
    QCOMPARE(job.steps.size(), job.stepExtras.size());
    for (std::size_t i = 1; i < job.steps.size(); ++i)
        QVERIFY(job.steps[i - 1].step < job.steps[i].step ||
                (job.steps[i - 1].step == job.steps[i].step && job.steps[i - 1].worker < job.steps[i].worker));
}

const Record *findSpan(const KinetoJob &job, int worker, Lane lane, Ns start)
{
    for (const Record &r : job.records)
        if (r.worker == worker && r.lane() == lane && r.start == start)
            return &r;
    return nullptr;
}

const StepRow &row(const KinetoJob &job, int worker, long long step, const KinetoJob::StepExtra **extra = nullptr)
{
    for (std::size_t i = 0; i < job.steps.size(); ++i)
        if (job.steps[i].worker == worker && job.steps[i].step == step) {
            if (extra)
                *extra = &job.stepExtras[i];
            return job.steps[i];
        }
    static StepRow none;
    none.step = -1;
    return none;
}

bool near(double a, double b, double tol = 1e-9) { return std::abs(a - b) <= tol; }

std::string importError(const std::vector<std::string> &files, const KinetoOptions &o = {})
{
    try {
        importKineto(files, o);
    } catch (const ImportError &e) {
        return e.what();
    }
    return "(no error)";
}

bool has(const std::string &s, const std::string &part) { return s.find(part) != std::string::npos; }

const std::string kData = SYNCOPATE_TEST_DATA "/kineto/";

// Each real trace is imported once for all the tests that read it: they are up to 35 MB of
// JSON, and the sanitizer builds take minutes over each import.
const KinetoJob &importedOnce(const std::string &path)
{
    static std::map<std::string, KinetoJob> jobs;
    auto at = jobs.find(path);
    if (at == jobs.end())
        at = jobs.emplace(path, importKineto({path})).first;
    return at->second;
}

// A trace's rows as its JSON gives them, by the README's rules but not the importer's code:
// spans per GPU stream (kernels, copies and sets whose launching runtime call, else own start,
// lies in a ProfilerStep window; the whole trace when it has none) and per CPU thread
// (top-level cpu_op events, one overlapping the previous one's end starting at that end, whose
// start lies in a window).
struct JsonRows {
    std::map<long long, long long> streamSpans, threadSpans;
    std::set<long long> ncclStreams;
};

// "ts": 12.345 becomes "ts": "12.345", so that the decimal microseconds parse to exact ns
// (a double holds epoch microseconds to 0.25 us only, enough to flip which operator nests).
std::string quoteTimes(const std::string &text)
{
    std::string out;
    out.reserve(text.size() + text.size() / 16);
    std::size_t at = 0;
    for (std::size_t k = text.find('"'); k != std::string::npos; k = text.find('"', k + 1)) {
        const bool ts = text.compare(k, 4, "\"ts\"") == 0, dur = text.compare(k, 5, "\"dur\"") == 0;
        if (!ts && !dur)
            continue;
        std::size_t p = k + (ts ? 4 : 5);
        while (p < text.size() && (text[p] == ' ' || text[p] == ':'))
            ++p;
        std::size_t q = p;
        while (q < text.size() && (std::isdigit(static_cast<unsigned char>(text[q])) || text[q] == '.' || text[q] == '-'))
            ++q;
        if (q == p)
            continue;
        out.append(text, at, p - at).append("\"").append(text, p, q - p).append("\"");
        at = q;
        k = q - 1;
    }
    return out.append(text, at, std::string::npos);
}

// Decimal microseconds to ns, the fourth decimal rounding.
Ns decimalNs(const std::string &s)
{
    const bool negative = !s.empty() && s[0] == '-';
    const std::size_t dot = s.find('.');
    Ns v = std::stoll(s.substr(negative, dot == std::string::npos ? std::string::npos : dot - negative)) * 1000;
    if (dot != std::string::npos) {
        const std::string frac = (s.substr(dot + 1) + "0000").substr(0, 4);
        v += std::stoll(frac.substr(0, 3)) + (frac[3] >= '5' ? 1 : 0);
    }
    return negative ? -v : v;
}

// The trace's events whose category is one of cats, as {"traceEvents": [...]}. nlohmann's
// filtering parse (a callback) rescans the kept array at each event's end, quadratic in the
// events kept, so this parses the whole file and keeps the events afterwards.
json relevantEvents(const std::string &text, const std::set<std::string> &cats)
{
    json parsed = json::parse(text);
    json &events = parsed.is_array() ? parsed : parsed["traceEvents"];
    json kept = json::array();
    for (json &e : events)
        if (e.is_object() && e.contains("cat") && e["cat"].is_string() && cats.count(e["cat"].get<std::string>()))
            kept.push_back(std::move(e));
    return json{{"traceEvents", std::move(kept)}};
}

JsonRows rowsFromJson(const std::string &path)
{
    static const std::set<std::string> cats = {"user_annotation", "kernel", "gpu_memcpy", "gpu_memset",
                                               "cuda_runtime", "cuda_driver", "cpu_op"};
    const json parsed = relevantEvents(quoteTimes(readAll(path)), cats);
    const json &events = parsed.is_array() ? parsed : parsed["traceEvents"];
    auto ns = [](const json &v) { return v.is_string() ? decimalNs(v.get<std::string>()) : Ns(0); };
    std::vector<std::pair<Ns, Ns>> windows;
    std::map<long long, Ns> launches;
    struct Op {
        Ns start, end;
    };
    std::map<std::pair<long long, long long>, std::vector<Op>> ops; // (pid, tid)
    struct Gpu {
        Ns start;
        long long corr, stream;
        bool nccl;
    };
    std::vector<Gpu> gpu;
    auto id = [](const json &v) { return v.is_number_integer() ? v.get<long long>() : -1LL; };
    for (const json &e : events) {
        if (e.value("ph", "") != "X" || !e.contains("ts"))
            continue;
        const std::string cat = e["cat"], name = e.value("name", "");
        const Ns start = ns(e["ts"]), end = start + ns(e.value("dur", json(0)));
        const json args = e.value("args", json::object());
        if (cat == "user_annotation" && name.rfind("ProfilerStep#", 0) == 0)
            windows.push_back({start, end});
        else if (cat == "cpu_op")
            ops[{id(e["pid"]), id(e["tid"])}].push_back({start, end});
        else if ((cat == "cuda_runtime" || cat == "cuda_driver") && args.contains("correlation"))
            launches.emplace(args["correlation"].get<long long>(), start);
        else if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset")
            gpu.push_back({start, args.value("correlation", -1LL), args.contains("stream") ? id(args["stream"]) : id(e["tid"]),
                           cat == "kernel" && (name.rfind("ncclKernel", 0) == 0 || name.rfind("ncclDevKernel", 0) == 0)});
    }
    auto inWindow = [&](Ns t) {
        return windows.empty() || std::any_of(windows.begin(), windows.end(), [t](const auto &w) { return t >= w.first && t <= w.second; });
    };
    JsonRows rows;
    for (const Gpu &g : gpu) {
        const auto l = g.corr >= 0 ? launches.find(g.corr) : launches.end();
        if ((l != launches.end() && !windows.empty() && inWindow(l->second)) || inWindow(g.start)) {
            ++rows.streamSpans[g.stream];
            if (g.nccl)
                rows.ncclStreams.insert(g.stream);
        }
    }
    for (auto &[thread, list] : ops) {
        std::sort(list.begin(), list.end(), [](const Op &a, const Op &b) { return a.start != b.start ? a.start < b.start : a.end > b.end; });
        Ns reach = std::numeric_limits<Ns>::min();
        for (const Op &o : list) {
            if (o.end <= reach)
                continue; // inside the previous one
            const Ns start = std::max(o.start, reach);
            reach = o.end;
            if (inWindow(start))
                ++rows.threadSpans[thread.second];
        }
    }
    return rows;
}

// The labels an import's rows must have, in order: streams by id, then threads by tid.
std::vector<std::string> expectedLabels(int rank, const JsonRows &rows)
{
    std::vector<std::string> out;
    for (const auto &[stream, n] : rows.streamSpans)
        out.push_back("rank " + std::to_string(rank) + " stream " + std::to_string(stream) +
                      (rows.ncclStreams.count(stream) ? " NCCL" : ""));
    for (const auto &[tid, n] : rows.threadSpans)
        out.push_back("rank " + std::to_string(rank) + " thread " + std::to_string(tid));
    return out;
}

// Spans per row of an opened run, as its rows' files and summaries give them.
std::vector<long long> spansPerRow(const TraceModel &t)
{
    std::vector<long long> n(t.rowCount(), 0);
    t.forEachRecord([&](std::size_t row, const Record &r) { n[row] += r.isSpan(); });
    for (std::size_t r = 0; r < t.rowCount(); ++r)
        if (t.lod(r).spans() != std::uint64_t(n[r]))
            return {};
    return n;
}

} // namespace

class TestKineto : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void twoRanksFromFolder();
    void fourRanksBySequence();
    void stallIsAtMostTheKernel();
    void sequenceBeatsOrder();
    void orderCountMismatch();
    void clockAlignment();
    void cpuOnlyWithoutSteps();
    void errors_data();
    void errors();
    void twoFileErrors();
    void rowsPerStreamAndThread();
    void oneStreamIdOnTwoGpus();
    void realTracesImport();
    void realTraceRows_data();
    void realTraceRows();
    void realTraceFigures_data();
    void realTraceFigures();
};

// A rank's streams (gpuStreams or ncclStreams) as the trace's stream ids.
static std::vector<long long> streamIdsOf(const ImportedRank &r, const std::vector<long long> &keys)
{
    std::vector<long long> ids;
    for (const long long k : keys)
        ids.push_back(r.streamIds.at(std::size_t(k)).second);
    return ids;
}

void TestKineto::twoRanksFromFolder()
{
    QTemporaryDir dir;
    const std::string d = dir.path().toStdString();
    // Names that lie about the compression: gzip is told by its magic bytes.
    writeText(d + "/r0.json.gz", makeRank({.rank = 0}), false);
    writeText(d + "/r1.json", makeRank({.rank = 1, .late = 2 * kMs}), true);
    writeText(d + "/readme.txt", "not a trace", false);
    const KinetoJob job = importKineto({d});
    checkRecordOrder(job);
    QCOMPARE(job.ranks.size(), std::size_t(2));
    QCOMPARE(job.ranks[1].rank, 1);
    QCOMPARE(job.ranks[1].rankSource, std::string("distributedInfo"));
    QVERIFY(has(job.ranks[1].file, "r1.json"));
    QCOMPARE(job.worldSize, 2);
    QCOMPARE(job.ranks[0].cpuThreads, (std::vector<long long>{10, 11}));
    QCOMPARE(streamIdsOf(job.ranks[0], job.ranks[0].gpuStreams), (std::vector<long long>{7, 8, 20}));
    QVERIFY(job.warnings.empty());
    QCOMPARE(job.firstStep, 5LL);
    QCOMPARE(job.matchMethod, std::string("order"));
    QCOMPARE(job.collectivesMatched, 3);
    QCOMPARE(job.steps.size(), std::size_t(6));
    for (int w = 0; w < 2; ++w)
        for (int k = 0; k < 3; ++k) {
            const KinetoJob::StepExtra *x = nullptr;
            const StepRow &r = row(job, w, 5 + k, &x);
            QCOMPARE(r.step, 5LL + k);
            QVERIFY(near(r.stepMs, 99));
            QVERIFY(near(r.tMs, 100.0 * k + 99));
            QVERIFY2(near(r.waitMs, w == 0 ? 2.0 : 0.0), std::to_string(r.waitMs).c_str());
            QVERIFY(std::isnan(r.loss));
            QCOMPARE(r.staleness, -1.0);
            QVERIFY2(near(x->computeMs, 28.6, 1e-9), std::to_string(x->computeMs).c_str());
            QVERIFY(near(x->commMs, w == 0 ? 10.0 : 8.0));
        }
    QCOMPARE(job.straggler, 1);
    QCOMPARE(job.stragglerLastCount, 3);
    QVERIFY(near(job.stragglerMeanLateMs, 2.0));

    // The comm row: rank 0 waits [60, 62] then reduces [62, 70]; rank 1 only reduces.
    const Ns s1 = 100 * kMs; // step 6
    const Record *wait = findSpan(job, 0, Lane::Comm, s1 + 60 * kMs);
    QVERIFY(wait);
    QCOMPARE(wait->phase(), Phase::Wait);
    QCOMPARE(wait->end, s1 + 62 * kMs);
    QCOMPARE(wait->step, 1u);
    QCOMPARE(wait->value, 0.0);
    const Record *reduce = findSpan(job, 0, Lane::Comm, s1 + 62 * kMs);
    QVERIFY(reduce);
    QCOMPARE(reduce->phase(), Phase::Reduce);
    QCOMPARE(reduce->end, s1 + 70 * kMs);
    QCOMPARE(reduce->value, 4000.0); // 1000 floats
    const Record *r1 = findSpan(job, 1, Lane::Comm, s1 + 62 * kMs);
    QVERIFY(r1 && r1->phase() == Phase::Reduce && r1->end == s1 + 70 * kMs);
    int comm = 0;
    for (const Record &r : job.records)
        comm += r.worker == 1 && r.lane() == Lane::Comm;
    QCOMPARE(comm, 3);

    // CPU row: top-level operators only, phase from the annotation around them.
    const std::map<Ns, std::pair<Phase, Ns>> cpu = {{2 * kMs, {Phase::Forward, 4 * kMs}},
                                                    {35 * kMs, {Phase::Backward, 58 * kMs}},
                                                    {76 * kMs, {Phase::Apply, 77 * kMs}}};
    int cpuSpans = 0;
    for (const Record &r : job.records)
        if (r.worker == 0 && r.lane() == Lane::Data && r.step == 0) {
            ++cpuSpans;
            QVERIFY(cpu.count(r.start));
            QCOMPARE(r.phase(), cpu.at(r.start).first);
            QCOMPARE(r.end, cpu.at(r.start).second);
        }
    QCOMPARE(cpuSpans, 3);
    // GPU compute row: phase from the launch's annotation; the late kernel stays in its step.
    const std::map<Ns, Phase> gpu = {{5 * kMs, Phase::Forward}, {10 * kMs, Phase::Forward},
                                     {40 * kMs, Phase::Backward}, {80 * kMs, Phase::Apply},
                                     {87 * kMs, Phase::Copy}, {100200000, Phase::Compute}};
    for (const auto &[start, phase] : gpu) {
        const Record *r = findSpan(job, 1, Lane::Compute, start);
        QVERIFY2(r, std::to_string(start).c_str());
        QCOMPARE(r->phase(), phase);
        QCOMPARE(r->step, 0u);
    }

    const json s = job.summaryFields();
    QVERIFY(s["source"] == json("kineto"));
    QVERIFY(s["steps"] == json(3));
    QVERIFY(s["first_step"] == json(5));
    QCOMPARE(s["stall_ms_per_worker"][0].get<double>(), 6.0);
    QVERIFY(s["straggler"]["rank"] == json(1));
    QVERIFY(s["clock_alignment"]["enabled"] == json(false));
    QVERIFY(near(s["wall_s"].get<double>(), 0.3008));
}

void TestKineto::fourRanksBySequence()
{
    QTemporaryDir dir;
    const std::string d = dir.path().toStdString();
    const Ns late[4] = {0, 1 * kMs, 3 * kMs, kMs / 2};
    // The first: the profiler's default name on a host called worker-1 (host_PID.TIME), which
    // names no rank (that host may run several).
    std::vector<std::string> files = {d + "/worker-1_4242.1700000000123.pt.trace.json", d + "/r0.json",
                                      d + "/trace_rank-2.json.gz", d + "/r1.json.gz"};
    writeText(files[1], makeRank({.rank = 0, .world = 4, .late = late[0], .withSeq = true}), false);
    writeText(files[3], makeRank({.rank = 1, .world = 4, .late = late[1], .withSeq = true}), true);
    writeText(files[2], makeRank({.rank = 2, .distInfo = false, .late = late[2], .withSeq = true}), true);
    writeText(files[0], makeRank({.rank = 3, .distInfo = false, .late = late[3], .withSeq = true}), false);
    const KinetoJob job = importKineto(files);
    checkRecordOrder(job);
    QCOMPARE(job.ranks.size(), std::size_t(4));
    QCOMPARE(job.worldSize, 4);
    QCOMPARE(job.ranks[0].rankSource, std::string("distributedInfo"));
    QCOMPARE(job.ranks[2].rankSource, std::string("file name"));
    QCOMPARE(job.ranks[2].file, files[2]);
    QCOMPARE(job.ranks[3].rankSource, std::string("order given"));
    QCOMPARE(job.ranks[3].file, files[0]);
    QCOMPARE(job.warnings.size(), std::size_t(1));
    QVERIFY(has(job.warnings[0], files[0]) && has(job.warnings[0], "rank 3"));
    QCOMPARE(job.matchMethod, std::string("sequence number"));
    QCOMPARE(job.collectivesMatched, 3);
    const double stall[4] = {3, 2, 0, 2.5};
    for (int w = 0; w < 4; ++w)
        for (int k = 0; k < 3; ++k) {
            const KinetoJob::StepExtra *x = nullptr;
            const StepRow &r = row(job, w, 5 + k, &x);
            QVERIFY(near(r.waitMs, stall[w]));
            QVERIFY(near(x->commMs, 10.0 - double(late[w]) / kMs));
        }
    QCOMPARE(job.straggler, 2);
    QCOMPARE(job.stragglerLastCount, 3);
    QVERIFY(near(job.stragglerMeanLateMs, 2.0)); // 3 ms - the second latest, 1 ms

    const json s = job.summaryFields();
    QVERIFY(s["ranks"] == json({0, 1, 2, 3}));
    QVERIFY(s["world_size"] == json(4));
    QVERIFY(s["workers"] == json(4));
    QVERIFY(s["match_method"] == json("sequence number"));
    QVERIFY(s["collectives_matched"] == json(3));
    const double total[4] = {9, 6, 0, 7.5};
    for (int w = 0; w < 4; ++w) {
        QVERIFY(near(s["stall_ms_per_worker"][w].get<double>(), total[w]));
        QVERIFY(near(s["step_ms_mean_per_worker"][w].get<double>(), 99));
        QVERIFY(near(s["compute_ms_per_worker"][w].get<double>(), 28.6));
        QVERIFY(near(s["comm_ms_per_worker"][w].get<double>(), 10.0 - double(late[w]) / kMs));
    }
    QVERIFY(s["straggler"]["rank"] == json(2));
    QVERIFY(s["straggler"]["last_count"] == json(3));
    QVERIFY(s["status"] == json("finished"));
    QCOMPARE(s["warnings"].size(), std::size_t(1));
}

// Two collectives per step on two process groups, launched in the opposite order on rank 1.
// By sequence number: A starts at 60 and 64, B at 62 and 61: rank 0 waits 4, rank 1 waits 1.
// By order (what the importer must not do here): 60/61 and 62/64: rank 0 waits 3, rank 1 0.
// A rank whose kernel ended before the last rank's started (clocks of two hosts apart): its
// stall is its kernel's duration, and the figures equal the wait spans drawn inside the kernel
// (they counted the whole gap while the timeline and the stalls chart cut it at the kernel's end).
void TestKineto::stallIsAtMostTheKernel()
{
    QTemporaryDir dir;
    const std::string d = dir.path().toStdString();
    writeText(d + "/r0.json", makeRank({.rank = 0, .colls = {{"0", 0, 60 * kMs, 62 * kMs}}}), false);
    writeText(d + "/r1.json", makeRank({.rank = 1, .colls = {{"0", 0, 65 * kMs, 70 * kMs}}}), false);
    const KinetoJob job = importKineto({d + "/r0.json", d + "/r1.json"});
    QCOMPARE(job.collectivesMatched, 3);
    for (int k = 0; k < 3; ++k) {
        QVERIFY(near(row(job, 0, 5 + k).waitMs, 2.0)); // not the 5 ms between the starts
        QVERIFY(near(row(job, 1, 5 + k).waitMs, 0.0));
        double drawn = 0;
        for (const Record &r : job.records)
            if (r.worker == 0 && r.isSpan() && r.isStall() && r.step == std::uint32_t(k))
                drawn += double(r.duration()) / 1e6;
        QVERIFY(near(drawn, 2.0));
    }
    QCOMPARE(job.straggler, 1);
}

void TestKineto::sequenceBeatsOrder()
{
    QTemporaryDir dir;
    const std::string d = dir.path().toStdString();
    for (const bool seq : {true, false}) {
        RankSpec a{.rank = 0, .steps = {5}, .withSeq = seq,
                   .colls = {{"A", 1, 60 * kMs, 70 * kMs}, {"B", 1, 62 * kMs, 72 * kMs}}};
        RankSpec b{.rank = 1, .steps = {5}, .withSeq = seq,
                   .colls = {{"B", 1, 61 * kMs, 72 * kMs}, {"A", 1, 64 * kMs, 70 * kMs}}};
        writeText(d + "/a.json", makeRank(a), false);
        writeText(d + "/b.json", makeRank(b), false);
        const KinetoJob job = importKineto({d + "/a.json", d + "/b.json"});
        checkRecordOrder(job);
        QCOMPARE(job.collectivesMatched, 2);
        QCOMPARE(job.matchMethod, std::string(seq ? "sequence number" : "order"));
        QVERIFY(near(row(job, 0, 5).waitMs, seq ? 4.0 : 3.0));
        QVERIFY(near(row(job, 1, 5).waitMs, seq ? 1.0 : 0.0));
        QCOMPARE(job.straggler, 1);
        QCOMPARE(job.stragglerLastCount, seq ? 1 : 2); // a 1-1 tie goes to the larger lateness
        QVERIFY(near(job.stragglerMeanLateMs, seq ? 4.0 : 1.5));
        if (seq) {
            const Record *w = findSpan(job, 0, Lane::Comm, 60 * kMs);
            QVERIFY(w && w->phase() == Phase::Wait && w->end == 64 * kMs);
        }
    }
}

void TestKineto::orderCountMismatch()
{
    QTemporaryDir dir;
    const std::string d = dir.path().toStdString();
    writeText(d + "/a.json", makeRank({.rank = 0, .late = kMs}), false);
    writeText(d + "/b.json", makeRank({.rank = 1, .colls = {{"0", 0, 60 * kMs, 70 * kMs}, {"0", 1, 71 * kMs, 74 * kMs}}}), false);
    const KinetoJob job = importKineto({d + "/a.json", d + "/b.json"});
    QCOMPARE(job.matchMethod, std::string("order"));
    QCOMPARE(job.collectivesMatched, 3);
    QCOMPARE(job.warnings.size(), std::size_t(3)); // one per step
    QVERIFY(has(job.warnings[0], "different numbers of NCCL kernels"));
    QVERIFY(near(row(job, 1, 6).waitMs, 1.0)); // the unmatched second kernel adds nothing
    QVERIFY(near(row(job, 0, 6).waitMs, 0.0));
}

// Rank 1's clock runs 5.0004 ms ahead; its collective starts 1 ms late on the true clock, and
// every collective ends at the same true time on both ranks.
void TestKineto::clockAlignment()
{
    QTemporaryDir dir;
    const std::string d = dir.path().toStdString();
    const Ns shift = 5000400;
    writeText(d + "/rank0.json", makeRank({.rank = 0}), false);
    writeText(d + "/rank1.json", makeRank({.rank = 1, .shift = shift, .late = kMs}), true);
    const std::vector<std::string> files = {d + "/rank0.json", d + "/rank1.json"};

    const KinetoJob on = importKineto(files, {.alignClocks = true});
    checkRecordOrder(on);
    QVERIFY(on.alignmentSupported);
    QVERIFY(std::abs(on.ranks[1].clockOffsetNs + double(shift)) <= 1000);
    QCOMPARE(on.ranks[0].clockOffsetNs, 0.0);
    QVERIFY(!on.alignmentNote.empty());
    for (int k = 0; k < 3; ++k) {
        QVERIFY(near(row(on, 0, 5 + k).waitMs, 1.0, 1e-3));
        QVERIFY(near(row(on, 1, 5 + k).waitMs, 0.0, 1e-3));
        QVERIFY(near(row(on, 1, 5 + k).tMs, row(on, 0, 5 + k).tMs, 1e-3));
    }
    const json s = on.summaryFields();
    QVERIFY(s["clock_alignment"]["enabled"] == json(true));
    QVERIFY(s["clock_alignment"]["supported"] == json(true));
    QVERIFY(std::abs(s["clock_alignment"]["offsets_ms"][1].get<double>() + 5.0004) < 1e-3);

    const KinetoJob off = importKineto(files);
    QCOMPARE(off.ranks[1].clockOffsetNs, 0.0);
    QVERIFY(near(row(off, 0, 5).waitMs, 6.0004, 1e-9));
    QVERIFY(near(row(off, 1, 6).tMs - row(off, 0, 6).tMs, 5.0004, 1e-9));

    // One rank: nothing to align with.
    const KinetoJob one = importKineto({files[0]}, {.alignClocks = true});
    QVERIFY(!one.alignmentSupported);
    QVERIFY(has(one.alignmentNote, "fewer than"));
    QCOMPARE(one.collectivesMatched, 0);
    QCOMPARE(one.straggler, -1);
    QVERIFY(near(row(one, 0, 5).waitMs, 0));
}

void TestKineto::cpuOnlyWithoutSteps()
{
    QTemporaryDir dir;
    const std::string p = dir.path().toStdString() + "/cpu.json";
    writeText(p, "[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": 1, \"tid\": 2, \"ts\": 1000.5, \"dur\": 10},"
                 " {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::add\", \"pid\": 1, \"tid\": 2, \"ts\": 1020, \"dur\": 4.25}]",
              false);
    const KinetoJob job = importKineto({p});
    checkRecordOrder(job);
    QCOMPARE(job.steps.size(), std::size_t(1));
    QCOMPARE(job.steps[0].step, 0LL);
    QVERIFY(near(job.steps[0].stepMs, 0.02375)); // 1000.5 .. 1024.25 us
    QCOMPARE(job.steps[0].waitMs, 0.0);
    QCOMPARE(job.matchMethod, std::string("none"));
    QCOMPARE(job.records.size(), std::size_t(2));
    QCOMPARE(job.records[1].start, Ns(19500));
    bool gpuNote = false, stepNote = false;
    for (const std::string &n : job.notes) {
        gpuNote |= has(n, "no GPU kernels");
        stepNote |= has(n, "cpu.json") && has(n, "ProfilerStep");
    }
    QVERIFY(gpuNote && stepNote);
    QCOMPARE(job.ranks[0].rankSource, std::string("order given"));
    QVERIFY(!job.warnings.empty() && has(job.warnings[0], "cpu.json"));
}

void TestKineto::errors_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("text");
    QTest::addColumn<int>("mode"); // 0 plain, 1 gzip, 2 gzip cut short, 3 not written
    QTest::addColumn<QStringList>("words");
    QTest::newRow("not JSON") << QStringLiteral("bad.json") << QStringLiteral(R"({"traceEvents": [ {"ph": "X", "ts": 1,, } ] })") << 0
                              << QStringList{QStringLiteral("not JSON"), QStringLiteral("byte 39")};
    QTest::newRow("not JSON, gzipped") << QStringLiteral("bad.json.gz") << QStringLiteral("{\"traceEvents\": [ oops ]}") << 1
                                       << QStringList{QStringLiteral("not JSON"), QStringLiteral("byte")};
    QTest::newRow("truncated gzip") << QStringLiteral("cut.json.gz") << QString::fromStdString(makeRank({})) << 2
                                    << QStringList{QStringLiteral("truncated gzip")};
    QTest::newRow("no traceEvents") << QStringLiteral("none.json") << QStringLiteral(R"({"schemaVersion": 1, "events": []})") << 0
                                    << QStringList{QStringLiteral("no traceEvents")};
    QTest::newRow("traceEvents not an array") << QStringLiteral("obj.json") << QStringLiteral(R"({"traceEvents": {"ph": "X"}})") << 0
                                              << QStringList{QStringLiteral("no traceEvents")};
    QTest::newRow("X without ts")
        << QStringLiteral("nots.json") << QStringLiteral(R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "dur": 5}]})") << 0
        << QStringList{QStringLiteral("no ts"), QStringLiteral("aten::mm")};
    QTest::newRow("X without dur")
        << QStringLiteral("nodur.json") << QStringLiteral(R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 5}]})") << 0
        << QStringList{QStringLiteral("no dur"), QStringLiteral("gemm"), QStringLiteral("event 1")};
    QTest::newRow("dur a string")
        << QStringLiteral("strdur.json") << QStringLiteral(R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 5, "dur": "9"}]})") << 0
        << QStringList{QStringLiteral("no dur"), QStringLiteral("gemm")};
    QTest::newRow("negative dur")
        << QStringLiteral("negdur.json") << QStringLiteral(R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 5, "dur": -3}]})") << 0
        << QStringList{QStringLiteral("negative dur"), QStringLiteral("-3 us")};
    QTest::newRow("step number past 32 bits")
        << QStringLiteral("bigstep.json")
        << QStringLiteral(R"({"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#99999999999999999999", "pid": 1, "tid": 1, "ts": 5, "dur": 9}]})") << 0
        << QStringList{QStringLiteral("step number past"), QStringLiteral("event 1")};
    QTest::newRow("no events") << QStringLiteral("noevents.json") << QStringLiteral(R"({"traceEvents": []})") << 0
                               << QStringList{QStringLiteral("no complete events"), QStringLiteral("nothing to import")};
    QTest::newRow("B and E only")
        << QStringLiteral("begin.json")
        << QStringLiteral(R"({"traceEvents": [{"ph": "B", "name": "a", "pid": 1, "tid": 1, "ts": 1}, {"ph": "E", "pid": 1, "tid": 1, "ts": 2}]})") << 0
        << QStringList{QStringLiteral("no complete events")};
    // Found by fuzz_kineto: times whose sums overflowed int64.
    QTest::newRow("duration past a run")
        << QStringLiteral("dur.json")
        << QStringLiteral(R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 3000000000000000, "dur": 3000000000000000}]})")
        << 0 << QStringList{QStringLiteral("aten::mm"), QStringLiteral("52 days")};
    QTest::newRow("base time out of range")
        << QStringLiteral("base.json")
        << QStringLiteral(R"({"baseTimeNanoseconds": 9000000000000000000, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1, "ts": 1000, "dur": 1}]})")
        << 0 << QStringList{QStringLiteral("baseTimeNanoseconds")};
    // Written as a float: it was read as 0, and the trace imported unaligned.
    QTest::newRow("base time out of range, a float")
        << QStringLiteral("basef.json")
        << QStringLiteral(R"({"baseTimeNanoseconds": 9e18, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1, "ts": 1000, "dur": 1}]})")
        << 0 << QStringList{QStringLiteral("baseTimeNanoseconds 9e18 is out of range")};
    QTest::newRow("events years apart")
        << QStringLiteral("apart.json")
        << QStringLiteral(R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": -3000000000000000, "dur": 1},)"
                          R"({"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 3000000000000000, "dur": 1}]})")
        << 0 << QStringList{QStringLiteral("52 days")};
    QTest::newRow("cannot open") << QStringLiteral("missing.json") << QString() << 3 << QStringList{QStringLiteral("cannot open")};
    QTest::newRow("empty file") << QStringLiteral("empty.json") << QString() << 0 << QStringList{QStringLiteral("not JSON")};
}

void TestKineto::errors()
{
    QFETCH(QString, name);
    QFETCH(QString, text);
    QFETCH(int, mode);
    QFETCH(QStringList, words);
    QTemporaryDir dir;
    const std::string p = dir.path().toStdString() + "/" + name.toStdString();
    if (mode < 3)
        writeText(p, text.toStdString(), mode > 0);
    if (mode == 2) {
        std::ifstream in(p, std::ios::binary);
        const std::string bytes(std::istreambuf_iterator<char>(in), {});
        QVERIFY(bytes.size() > 100);
        std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
    }
    const std::string e = importError({p});
    QVERIFY2(has(e, p + ": "), e.c_str());
    for (const QString &w : words)
        QVERIFY2(has(e, w.toStdString()), e.c_str());
}

void TestKineto::twoFileErrors()
{
    QTemporaryDir dir;
    const std::string d = dir.path().toStdString();
    auto write = [&](const std::string &name, const RankSpec &r) {
        writeText(d + "/" + name, makeRank(r), false);
        return d + "/" + name;
    };
    const std::string a = write("a.json", {.rank = 0}), twice = write("b.json", {.rank = 0});
    std::string e = importError({a, twice});
    QVERIFY2(has(e, twice + ": rank 0") && has(e, a), e.c_str());

    // A rank and world size written as strings are numbers all the same.
    {
        std::string quoted = makeRank({.rank = 1});
        const auto at = quoted.find("\"rank\": 1");
        QVERIFY(at != std::string::npos);
        quoted.replace(at, std::strlen("\"rank\": 1"), "\"rank\": \"1\"");
        writeText(d + "/r1quoted.json", quoted, false);
        const KinetoJob job = importKineto({a, d + "/r1quoted.json"});
        QCOMPARE(job.ranks[1].rank, 1);
        QCOMPARE(job.ranks[1].rankSource, std::string("distributedInfo"));
    }
    // The same file twice (by two names, or also in its folder) is not two ranks.
    e = importError({a, d + "/./a.json"});
    QVERIFY2(has(e, "given twice") && has(e, a), e.c_str());
    e = importError({d, twice});
    QVERIFY2(has(e, "b.json: given twice"), e.c_str());

    const std::string w4 = write("w4.json", {.rank = 1, .world = 4});
    e = importError({a, w4});
    QVERIFY2(has(e, "w4.json: world_size 4") && has(e, a) && has(e, "different jobs"), e.c_str());

    const std::string gloo = write("gloo.json", {.rank = 1, .backend = "gloo"});
    e = importError({a, gloo});
    QVERIFY2(has(e, "gloo.json: backend gloo") && has(e, "different jobs"), e.c_str());

    const std::string later = write("later.json", {.rank = 1, .shift = 2 * 3600 * 1000 * kMs});
    e = importError({a, later});
    QVERIFY2(has(e, "later.json: its events start") && has(e, a) && has(e, "different jobs"), e.c_str());
    QCOMPARE(importKineto({a, write("soon.json", {.rank = 1, .shift = 1000 * kMs})}).ranks.size(), std::size_t(2));
    // Found by fuzz_kineto: files further apart than int64 can subtract (the earlier one first).
    const std::string early = d + "/early.json", late = d + "/late.json";
    writeText(early, R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": -3900000000000000, "dur": 1}]})", false);
    writeText(late, R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 3900000000000000, "dur": 1}]})", false);
    e = importError({early, late});
    QVERIFY2(has(e, "late.json: its events start") && has(e, "different jobs"), e.c_str());

    // A third file for a two-rank job: its rank from the order given is outside the world.
    const std::string b1 = write("b1.json", {.rank = 1}), extra = write("extra.json", {.rank = 5, .distInfo = false});
    e = importError({a, b1, extra});
    QVERIFY2(has(e, extra + ": rank 2 (order given)") && has(e, "world_size 2"), e.c_str());

    const std::string empty = d + "/empty";
    QVERIFY(QDir().mkpath(QString::fromStdString(empty)));
    e = importError({empty});
    QVERIFY2(has(e, empty + ": no *.json"), e.c_str());
    QVERIFY(has(importError({}), "no trace files"));
}

// Rank 0: compute streams 7 and 8, NCCL kernels on stream 20, operators on threads 10 and 11,
// and 2 ms late to every collective. Rank 1 launches its NCCL kernels on stream 7, between its
// compute kernels there, and waits 2 ms in each: its stall stays in that one row, hatched.
// Stream ids are per GPU: a rank whose NCCL kernels run on stream 7 of GPU 5 while its compute
// uses stream 7 of GPU 0 has two rows for them, named by GPU; they shared one before.
void TestKineto::oneStreamIdOnTwoGpus()
{
    QTemporaryDir dir;
    const std::string d = dir.path().toStdString();
    const std::vector<std::string> files = {d + "/r0.json", d + "/r1.json"};
    writeText(files[0], makeRank({.rank = 0, .ncclStream = 7, .ncclGpu = 5}), false);
    writeText(files[1], makeRank({.rank = 1}), false);
    const KinetoJob job = importKineto(files);
    checkRecordOrder(job);
    const ImportedRank &r0 = job.ranks[0];
    QCOMPARE(r0.streamIds, (std::vector<std::pair<long long, long long>>{{0, 7}, {0, 8}, {5, 7}}));
    QCOMPARE(r0.gpuStreams, (std::vector<long long>{0, 1, 2}));
    QCOMPARE(r0.ncclStreams, (std::vector<long long>{2}));
    const std::string run = d + "/run";
    writeImportedRun(job, run);
    const OpenedRun opened = openRunDirectory(run);
    const TraceModel &t = *opened.trace;
    std::vector<std::string> names;
    for (std::size_t r = 0; r < t.rowCount(); ++r)
        names.push_back(t.row(r).name);
    QCOMPARE(names, (std::vector<std::string>{"rank 0 GPU 0 stream 7", "rank 0 GPU 0 stream 8",
                                              "rank 0 GPU 5 stream 7 NCCL", "rank 0 thread 10", "rank 0 thread 11",
                                              "rank 1 stream 7", "rank 1 stream 8", "rank 1 stream 20 NCCL",
                                              "rank 1 thread 10", "rank 1 thread 11"}));
    // The compute stream's row holds no collective: its waits and reduces are on GPU 5's.
    const std::vector<long long> spans = spansPerRow(t);
    std::vector<Record> out;
    t.spansIn(0, 0, std::numeric_limits<std::int64_t>::max() / 4, out);
    QVERIFY(!out.empty());
    for (const Record &rec : out)
        QVERIFY2(rec.lane() != Lane::Comm, phaseName(rec.phase()));
    QVERIFY(spans[2] > 0);
}

void TestKineto::rowsPerStreamAndThread()
{
    QTemporaryDir dir;
    const std::string d = dir.path().toStdString();
    const std::vector<std::string> files = {d + "/r0.json", d + "/r1.json"};
    writeText(files[0], makeRank({.rank = 0, .late = 2 * kMs}), false);
    writeText(files[1], makeRank({.rank = 1, .ncclStream = 7}), false);
    const KinetoJob job = importKineto(files);
    checkRecordOrder(job);
    QCOMPARE(job.recordRows.size(), job.records.size());
    QCOMPARE(streamIdsOf(job.ranks[0], job.ranks[0].gpuStreams), (std::vector<long long>{7, 8, 20}));
    QCOMPARE(streamIdsOf(job.ranks[0], job.ranks[0].ncclStreams), (std::vector<long long>{20}));
    QCOMPARE(streamIdsOf(job.ranks[1], job.ranks[1].gpuStreams), (std::vector<long long>{7, 8}));
    QCOMPARE(streamIdsOf(job.ranks[1], job.ranks[1].ncclStreams), (std::vector<long long>{7}));
    QCOMPARE(job.ranks[1].cpuThreads, (std::vector<long long>{10, 11}));
    // The per-rank figures are those of separate rows (twoRanksFromFolder), ranks swapped.
    for (int w = 0; w < 2; ++w)
        for (int k = 0; k < 3; ++k) {
            const KinetoJob::StepExtra *x = nullptr;
            const StepRow &r = row(job, w, 5 + k, &x);
            QVERIFY2(near(r.waitMs, w == 1 ? 2.0 : 0.0), std::to_string(r.waitMs).c_str());
            QVERIFY(near(x->computeMs, 28.6, 1e-9));
            QVERIFY(near(x->commMs, w == 1 ? 10.0 : 8.0));
        }
    QCOMPARE(job.straggler, 0);

    const std::string run = d + "/run";
    writeImportedRun(job, run);
    const std::vector<std::string> labels = {
        "rank 0 stream 7", "rank 0 stream 8", "rank 0 stream 20 NCCL", "rank 0 thread 10", "rank 0 thread 11",
        "rank 1 stream 7 NCCL", "rank 1 stream 8", "rank 1 thread 10", "rank 1 thread 11"};
    const JsonRows fromJson[2] = {rowsFromJson(files[0]), rowsFromJson(files[1])};
    std::vector<std::string> fromJsonLabels = expectedLabels(0, fromJson[0]);
    for (const std::string &l : expectedLabels(1, fromJson[1]))
        fromJsonLabels.push_back(l);
    QCOMPARE(fromJsonLabels, labels);
    // With its index, and rebuilt from the row files alone: the same rows, spans and stalls.
    for (const bool indexed : {true, false}) {
        if (!indexed)
            QVERIFY(std::filesystem::remove(run + "/index.syi"));
        const OpenedRun opened = openRunDirectory(run);
        const TraceModel &t = *opened.trace;
        QCOMPARE(t.rowCount(), labels.size());
        const std::vector<long long> spans = spansPerRow(t);
        QCOMPARE(spans.size(), labels.size());
        for (std::size_t r = 0; r < labels.size(); ++r) {
            const RowDescriptor &row = t.row(r);
            QCOMPARE(row.name, labels[r]);
            const int w = r < 5 ? 0 : 1;
            QCOMPARE(row.worker, w);
            const bool thread = labels[r].find("thread") != std::string::npos;
            QCOMPARE(row.kind, thread ? RowKind::DataLane : RowKind::Worker);
            const long long id = std::stoll(labels[r].substr(labels[r].rfind(thread ? "thread " : "stream ") + 7));
            // Rank 1's NCCL kernels each wait 2 ms: a Wait span beside each one's Reduce span.
            const long long waits = w == 1 && id == 7 && !thread ? 3 : 0;
            const long long expected = thread ? fromJson[w].threadSpans.at(id) : fromJson[w].streamSpans.at(id) + waits;
            QVERIFY2(spans[r] == expected, (labels[r] + ": " + std::to_string(spans[r]) + " spans, expected " +
                                            std::to_string(expected)).c_str());
            // One stream runs one kernel at a time: a row's spans never overlap.
            std::vector<Record> in;
            t.spansIn(r, 0, t.endNs(), in);
            long long waitSpans = 0;
            for (std::size_t i = 0; i < in.size(); ++i) {
                waitSpans += in[i].phase() == Phase::Wait;
                QVERIFY(i == 0 || in[i].start >= in[i - 1].end);
                QCOMPARE(in[i].lane() == Lane::Data, thread);
            }
            QCOMPARE(waitSpans, waits);
        }
        QCOMPARE(fromJson[0].streamSpans.at(7), 15LL); // 5 a step: gemm_fwd, gemm_bwd, sgd, memcpy, late
        QCOMPARE(fromJson[0].threadSpans.at(10), 6LL); // linear (addmm inside it), add_
        for (int w = 0; w < 2; ++w)
            for (int k = 0; k < 3; ++k)
                QVERIFY(near(t.steps(w).at(std::size_t(k)).waitMs, w == 1 ? 2.0 : 0.0, 1e-9));
        QVERIFY(near(opened.summary["stall_ms_per_worker"][1].get<double>(), 6.0));
    }
    // trace.json: a thread per row, named as the row, holding the row's spans.
    const json trace = json::parse(readAll(run + "/trace.json"));
    std::map<long long, std::string> names;
    std::map<long long, long long> spans;
    for (const json &e : trace["traceEvents"]) {
        if (e["ph"] == "M" && e["name"] == "thread_name")
            names[e["tid"].get<long long>()] = e["args"]["name"].get<std::string>();
        else if (e["ph"] == "X")
            ++spans[e["tid"].get<long long>()];
    }
    QCOMPARE(names.size(), labels.size());
    const OpenedRun opened = openRunDirectory(run);
    const std::vector<long long> perRow = spansPerRow(*opened.trace);
    for (const auto &[tid, name] : names) {
        const auto at = std::find(labels.begin(), labels.end(), name);
        QVERIFY2(at != labels.end(), name.c_str());
        QCOMPARE(spans[tid], perRow[std::size_t(at - labels.begin())]);
    }
}

void TestKineto::realTracesImport()
{
    for (const char *f : {"no_distributed_info.json.gz", "rank1_of_2_alltoall.json.gz", "rank3_of_8_alltoall.json.gz",
                          "rocm_mi250_basetime_ns.json.gz", "single_rank_allreduce.pt.trace.json.gz"}) {
        const KinetoJob &job = importedOnce(kData + f);
        checkRecordOrder(job);
        QVERIFY(!job.steps.empty());
        std::map<std::pair<int, int>, int> spans; // (lane, phase) -> count
        for (const Record &r : job.records)
            ++spans[{int(r.lane()), int(r.phase())}];
        std::string counts;
        for (const auto &[k, c] : spans)
            counts += std::string(" ") + laneName(Lane(k.first)) + "/" + phaseName(Phase(k.second)) + "=" + std::to_string(c);
        qInfo("%s: %s;%s", f, job.summaryFields().dump().c_str(), counts.c_str());
    }
    const std::string e = importError({kData + "rank1_of_2_alltoall.json.gz", kData + "rank3_of_8_alltoall.json.gz"});
    QVERIFY2(has(e, "world_size") && has(e, "different jobs") && has(e, "rank3_of_8") && has(e, "rank1_of_2"), e.c_str());
    // Kineto's relative ts plus baseTimeNanoseconds land years from the 2022 traces.
    const std::string t = importError({kData + "rocm_mi250_basetime_ns.json.gz", kData + "no_distributed_info.json.gz"});
    QVERIFY2(has(t, "different jobs"), t.c_str());
}

void TestKineto::realTraceFigures_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<int>("rank");
    QTest::addColumn<int>("world");
    QTest::newRow("single rank allreduce") << QStringLiteral("single_rank_allreduce.pt.trace.json.gz") << 0 << 1;
    QTest::newRow("rank 1 of 2 all-to-all") << QStringLiteral("rank1_of_2_alltoall.json.gz") << 1 << 2;
    QTest::newRow("ROCm with base time") << QStringLiteral("rocm_mi250_basetime_ns.json.gz") << 0 << 1;
}

// The figures again from a plain parse of the file: the ProfilerStep windows (CPU side), and
// per step the union of the kernels and of the NCCL kernels whose launch (same correlation)
// lies in the window, else whose start does.
void TestKineto::realTraceFigures()
{
    QFETCH(QString, file);
    QFETCH(int, rank);
    QFETCH(int, world);
    const std::string path = kData + file.toStdString();
    static const std::set<std::string> cats = {"user_annotation", "kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver"};
    const json doc = relevantEvents(readAll(path), cats);
    struct Win {
        long long n;
        double ts, end, dur;
    };
    std::vector<Win> wins;
    std::map<long long, double> launchTs;
    struct K {
        double ts, end;
        long long corr;
        bool nccl;
    };
    std::vector<K> kernels;
    for (const json &e : doc["traceEvents"]) {
        const std::string cat = e["cat"], name = e.value("name", "");
        if (cat == "user_annotation" && name.rfind("ProfilerStep#", 0) == 0)
            wins.push_back({std::stoll(name.substr(13)), e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>(),
                            e["dur"].get<double>()});
        else if ((cat == "cuda_runtime" || cat == "cuda_driver") && e["args"].contains("correlation"))
            launchTs.emplace(e["args"]["correlation"].get<long long>(), e["ts"].get<double>());
        else if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset")
            kernels.push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>(),
                               e["args"].value("correlation", -1LL),
                               cat == "kernel" && (name.rfind("ncclKernel", 0) == 0 || name.rfind("ncclDevKernel", 0) == 0)});
    }
    const KinetoJob &job = importedOnce(path);
    QCOMPARE(job.ranks.size(), std::size_t(1));
    QCOMPARE(job.ranks[0].rank, rank);
    QCOMPARE(job.worldSize, world);
    QCOMPARE(job.steps.size(), wins.size());
    long long ncclInSteps = 0;
    for (const Win &w : wins) {
        const KinetoJob::StepExtra *x = nullptr;
        const StepRow &r = row(job, 0, w.n, &x);
        QCOMPARE(r.step, w.n);
        QVERIFY2(near(r.stepMs, w.dur / 1e3, 1e-9), (std::to_string(r.stepMs) + " vs " + std::to_string(w.dur / 1e3)).c_str());
        std::vector<std::pair<double, double>> compute, comm;
        for (const K &k : kernels) {
            const auto l = launchTs.find(k.corr);
            const bool byLaunch = l != launchTs.end() && std::any_of(wins.begin(), wins.end(), [&](const Win &v) {
                return l->second >= v.ts && l->second <= v.end;
            });
            const double t = byLaunch ? l->second : k.ts;
            if (t >= w.ts && t <= w.end)
                (k.nccl ? comm : compute).push_back({k.ts, k.end});
        }
        auto unionMs = [](std::vector<std::pair<double, double>> v) {
            std::sort(v.begin(), v.end());
            double total = 0, s = 0, e = -1e300;
            for (const auto &[a, b] : v) {
                if (a > e) {
                    total += std::max(0.0, e - s);
                    s = a, e = b;
                } else {
                    e = std::max(e, b);
                }
            }
            return (total + std::max(0.0, e - s)) / 1e3;
        };
        ncclInSteps += long(comm.size());
        // The doubles here hold epoch microseconds to 0.25 us; the importer reads exact ns.
        const double tol = 0.25e-3 * double(compute.size() + comm.size() + 2);
        QVERIFY2(near(x->computeMs, unionMs(compute), tol), (std::to_string(x->computeMs) + " vs " + std::to_string(unionMs(compute))).c_str());
        QVERIFY2(near(x->commMs, unionMs(comm), tol), (std::to_string(x->commMs) + " vs " + std::to_string(unionMs(comm))).c_str());
        QCOMPARE(r.waitMs, 0.0); // one rank loaded: nothing to wait for
    }
    long long reduces = 0;
    for (const Record &r : job.records)
        reduces += r.lane() == Lane::Comm && r.phase() == Phase::Reduce;
    QCOMPARE(reduces, ncclInSteps);
    if (file.startsWith(QStringLiteral("rank1")))
        QVERIFY(ncclInSteps > 0);
}

void TestKineto::realTraceRows_data()
{
    QTest::addColumn<QString>("file");
    for (const char *f : {"no_distributed_info.json.gz", "rank1_of_2_alltoall.json.gz", "rank3_of_8_alltoall.json.gz",
                          "rocm_mi250_basetime_ns.json.gz", "single_rank_allreduce.pt.trace.json.gz"})
        QTest::newRow(f) << QString::fromLatin1(f);
}

// A real trace's run folder has a row per stream with kernels and per thread with top-level
// operators, each with the spans the JSON gives it (one rank loaded: no stall splits a kernel).
void TestKineto::realTraceRows()
{
    QFETCH(QString, file);
    const std::string path = kData + file.toStdString();
    const JsonRows fromJson = rowsFromJson(path);
    const KinetoJob &job = importedOnce(path);
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString() + "/run";
    writeImportedRun(job, run);
    const OpenedRun opened = openRunDirectory(run);
    const TraceModel &t = *opened.trace;
    std::vector<std::string> labels = expectedLabels(job.ranks[0].rank, fromJson);
    std::vector<long long> expected;
    for (const auto &[stream, n] : fromJson.streamSpans)
        expected.push_back(n);
    for (const auto &[tid, n] : fromJson.threadSpans)
        expected.push_back(n);
    // A rank without kernels (or operators) keeps one empty row in their place.
    const std::string rank = "rank " + std::to_string(job.ranks[0].rank);
    if (fromJson.streamSpans.empty())
        labels.insert(labels.begin(), rank + " GPU (no kernels)"), expected.insert(expected.begin(), 0);
    if (fromJson.threadSpans.empty())
        labels.push_back(rank + " CPU (no operators)"), expected.push_back(0);
    std::vector<std::string> names;
    for (std::size_t r = 0; r < t.rowCount(); ++r)
        names.push_back(t.row(r).name);
    QCOMPARE(names, labels);
    QCOMPARE(spansPerRow(t), expected);
    qInfo("%s: %zu stream rows, %zu thread rows", qPrintable(file), fromJson.streamSpans.size(), fromJson.threadSpans.size());
}

QTEST_APPLESS_MAIN(TestKineto)
#include "tst_kineto.moc"
