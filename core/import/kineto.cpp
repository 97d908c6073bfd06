// PyTorch profiler (Kineto) traces read into Syncopate's records, one file per rank.
//
// Reading one file into compact events: kineto_read.cpp.
//
// Rules.
// - Rank: distributedInfo.rank, else "rank" or "worker" in the file name followed by an optional
//   '_', '-' or '.' and digits ("rank3", "rank_3", "worker-3"; Kineto's own "host_PID.TS.json"
//   names hold a pid, so a bare "_3." is not taken, nor a host named worker-3 there: digits
//   followed by "_PID." are a host's), else the smallest rank not claimed by
//   another file, in the order given, with a warning. World size: distributedInfo, else the
//   number of files (at least the highest rank + 1).
// - Same job: distributedInfo world_size and backend must agree, and no file's events may start
//   more than an hour after all earlier files' events ended.
// - Steps: X events named "ProfilerStep#N" on a CPU thread (the GPU-side copies that newer
//   Kineto writes with cat gpu_user_annotation are skipped). A trace without any is one step 0.
// - CPU rows, one per thread (tid) with operators kept: cpu_op events (not ProfilerStep#N); one
//   fully inside another of the same thread is dropped, one that overlaps the previous one's end
//   starts at that end. Each belongs to the step window holding its start.
// - GPU rows, one per stream (args.stream, else tid) with kernels kept: cat kernel
//   (ncclKernel* / ncclDevKernel* are NCCL kernels, Lane::Comm; others Lane::Compute),
//   gpu_memcpy and gpu_memset (Copy). NCCL and compute kernels of one stream share its row:
//   a stream runs one kernel at a time, so the stall stays in view. A kernel belongs to the
//   step window holding its launching runtime call (cat cuda_runtime / cuda_driver, same
//   args.correlation), else the window holding its own start; in none, it is left out.
// - Phase of a kernel: from the CPU annotations enclosing its launch on the launching thread;
//   of a CPU operator: those enclosing its start on its thread. Backward if any enclosing event
//   (cat user_annotation, cpu_op or python_function) is named "autograd::...", contains
//   "autograd::engine::evaluate_function" or "backward" (any case); else Apply if one starts with
//   "Optimizer." or contains "optimizer" or "zero_grad"; else Forward if one contains "forward"
//   or starts with "nn.Module:"; else Compute. Backward wins over the others because
//   activation recomputation runs forward code inside the backward pass.
// - Collectives: an NCCL kernel is linked to the innermost record_param_comms event on its
//   launching thread that holds the launch; its process group ("Process Group Name", "pg_name",
//   else "Process Group ID", "pg_id") and "Seq"/"seq" identify it. When every NCCL kernel of
//   every loaded rank has both, kernels are matched across ranks by (group, seq, k-th kernel of
//   that call); else by order: within each step N, the k-th NCCL kernel (by start) of each rank
//   that has step N, the common prefix when the counts differ (with a warning). Per step rather
//   than over the whole trace so that ranks whose profiler windows differ still line up.
// - Stall of a rank in a collective found on >= 2 loaded ranks = latest start among them - its
//   own start; 0 in one found on one rank. The comm row splits the kernel into Wait [start,
//   start + stall] (clipped to the kernel) and Reduce (the rest, value = bytes: the larger of
//   In/Out msg nelems times the dtype's size, where record_param_comms gives them).
// - Straggler: the rank that starts last most often (a tie for the latest start names nobody);
//   lateness = its start - the second latest start. Count ties: more lateness, then lower rank.
// - Clock alignment (asked for): offset of a rank = median over the collectives it shares with
//   the first loaded rank of (that rank's kernel end - its own), as collectives end nearly
//   together; without such a collective for some rank, no rank is shifted.
#include "kineto.h"

#include "kineto_read.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <unordered_map>

namespace syncopate {
namespace {
namespace fs = std::filesystem;
using namespace kineto_detail;
constexpr Ns kHourNs = 3600LL * 1000 * 1000 * 1000;

// ---------------------------------------------------------------------------------------------
// One rank, reduced to what the job needs: its step windows and the spans kept.

struct Interval {
    Ns start, end;
};
struct Span {
    Ns start, end;
    int window;
    Phase phase;
    long long row; // tid (CPU) or stream (GPU)
};
struct NcclKernel {
    Ns start, end;
    int window;
    long long stream;
    int comm = -1; // record_param_comms index, -1 none
    int pg = -1;
    long long seq = 0;
    int sub = 0;
    bool hasSeq = false;
    double bytes = 0;
    Ns stall = 0;
};
struct RankWork {
    std::string path;
    bool hasRank = false, hasWorld = false;
    long long rank = 0, world = 0;
    std::string backend;
    Ns first = 0, last = 0;
    bool noSteps = false;
    std::size_t gpuEvents = 0;
    std::vector<Window> windows;
    std::vector<Span> cpu, gpu;
    std::vector<NcclKernel> nccl;
    std::vector<long long> cpuThreads, gpuStreams, ncclStreams;
    std::vector<std::pair<long long, long long>> streamIds; // FileData::streams
    int rankIndex = 0;
    std::string rankSource;
    Ns offset = 0;

    int windowAt(Ns t) const
    {
        auto it = std::upper_bound(windows.begin(), windows.end(), t,
                                   [](Ns v, const Window &w) { return v < w.start; });
        if (it == windows.begin())
            return -1;
        --it;
        return t <= it->end ? int(it - windows.begin()) : -1;
    }
};

bool inside(const std::vector<Interval> &merged, Ns t)
{
    auto it = std::upper_bound(merged.begin(), merged.end(), t,
                               [](Ns v, const Interval &i) { return v < i.start; });
    return it != merged.begin() && t <= std::prev(it)->end;
}

RankWork reduce(FileData &&f)
{
    RankWork r;
    r.path = f.path;
    r.hasRank = f.hasRank, r.hasWorld = f.hasWorld, r.rank = f.rank, r.world = f.world;
    r.backend = f.backend;
    r.first = f.first, r.last = f.last;
    r.gpuEvents = f.gpu.size();
    r.streamIds = f.streams;

    // Step windows: a step written twice (one per thread) is their hull.
    std::sort(f.steps.begin(), f.steps.end(), [](const Window &a, const Window &b) { return a.n < b.n; });
    for (const Window &w : f.steps) {
        if (!r.windows.empty() && r.windows.back().n == w.n) {
            r.windows.back().start = std::min(r.windows.back().start, w.start);
            r.windows.back().end = std::max(r.windows.back().end, w.end);
        } else {
            r.windows.push_back(w);
        }
    }
    if (r.windows.empty() && f.first <= f.last) {
        r.noSteps = true;
        r.windows.push_back({0, f.first, f.last});
    }
    std::sort(r.windows.begin(), r.windows.end(), [](const Window &a, const Window &b) { return a.start < b.start; });

    // Per thread and class, the union of the classifying events, for binary search.
    std::vector<std::array<std::vector<Interval>, ClsCount>> cls(f.threads.size());
    std::sort(f.classes.begin(), f.classes.end(), [](const ClassSpan &a, const ClassSpan &b) { return a.start < b.start; });
    for (const ClassSpan &c : f.classes) {
        auto &v = cls[c.thread][c.cls];
        if (!v.empty() && c.start <= v.back().end)
            v.back().end = std::max(v.back().end, c.end);
        else
            v.push_back({c.start, c.end});
    }
    auto phaseAt = [&](std::uint32_t thread, Ns t) {
        static constexpr Phase phases[ClsCount] = {Phase::Backward, Phase::Apply, Phase::Forward};
        for (int c = 0; c < ClsCount; ++c)
            if (inside(cls[thread][c], t))
                return phases[c];
        return Phase::Compute;
    };

    // CPU row: top-level operators of each thread.
    std::sort(f.ops.begin(), f.ops.end(), [](const ThreadSpan &a, const ThreadSpan &b) {
        return a.thread != b.thread ? a.thread < b.thread : a.start != b.start ? a.start < b.start : a.end > b.end;
    });
    std::vector<bool> cpuThread(f.threads.size());
    for (std::size_t i = 0; i < f.ops.size();) {
        const std::uint32_t t = f.ops[i].thread;
        Ns reach = std::numeric_limits<Ns>::min();
        for (; i < f.ops.size() && f.ops[i].thread == t; ++i) {
            ThreadSpan op = f.ops[i];
            if (op.end <= reach)
                continue;
            op.start = std::max(op.start, reach);
            reach = op.end;
            const int w = r.windowAt(op.start);
            if (w < 0)
                continue;
            r.cpu.push_back({op.start, op.end, w, phaseAt(t, op.start), f.threads[t].second});
            cpuThread[t] = true;
        }
    }
    for (std::size_t t = 0; t < f.threads.size(); ++t)
        if (cpuThread[t])
            r.cpuThreads.push_back(f.threads[t].second);
    std::sort(r.cpuThreads.begin(), r.cpuThreads.end());
    r.cpuThreads.erase(std::unique(r.cpuThreads.begin(), r.cpuThreads.end()), r.cpuThreads.end());
    std::vector<ThreadSpan>().swap(f.ops);

    // record_param_comms per thread, by start, for the innermost one holding a launch.
    std::vector<int> commOrder(f.comms.size());
    for (std::size_t i = 0; i < commOrder.size(); ++i)
        commOrder[i] = int(i);
    std::sort(commOrder.begin(), commOrder.end(), [&](int a, int b) {
        const CommCall &x = f.comms[a], &y = f.comms[b];
        return x.thread != y.thread ? x.thread < y.thread : x.start < y.start;
    });
    auto commAt = [&](std::uint32_t thread, Ns t) {
        auto it = std::upper_bound(commOrder.begin(), commOrder.end(), std::make_pair(thread, t),
                                   [&](const std::pair<std::uint32_t, Ns> &v, int c) {
                                       const CommCall &x = f.comms[c];
                                       return v.first != x.thread ? v.first < x.thread : v.second < x.start;
                                   });
        // Calls nest a few deep at most: looking back a few calls finds the innermost one
        // holding t without a quadratic walk when none does.
        for (int looked = 0; it != commOrder.begin() && looked < 8; ++looked) {
            --it;
            const CommCall &x = f.comms[*it];
            if (x.thread != thread)
                break;
            if (t <= x.end)
                return *it; // the latest start holding t is the innermost
        }
        return -1;
    };

    // GPU rows.
    std::sort(f.launches.begin(), f.launches.end(), [](const Launch &a, const Launch &b) { return a.corr < b.corr; });
    for (const GpuEvent &g : f.gpu) {
        const Launch *launch = nullptr;
        if (g.hasCorr) {
            auto it = std::lower_bound(f.launches.begin(), f.launches.end(), g.corr,
                                       [](const Launch &l, long long c) { return l.corr < c; });
            if (it != f.launches.end() && it->corr == g.corr)
                launch = &*it;
        }
        int w = launch ? r.windowAt(launch->ts) : -1;
        if (w < 0)
            w = r.windowAt(g.start);
        if (w < 0)
            continue;
        r.gpuStreams.push_back(g.stream);
        if (g.kind == Kind::Nccl) {
            NcclKernel k{g.start, g.end, w, g.stream};
            r.ncclStreams.push_back(g.stream);
            if (launch)
                k.comm = commAt(launch->thread, launch->ts);
            if (k.comm >= 0) {
                const CommCall &c = f.comms[k.comm];
                k.pg = c.pg, k.seq = c.seq, k.hasSeq = c.hasSeq, k.bytes = c.bytes;
            }
            r.nccl.push_back(k);
        } else {
            const Phase p = g.kind == Kind::Copy ? Phase::Copy
                            : launch ? phaseAt(launch->thread, launch->ts) : Phase::Compute;
            r.gpu.push_back({g.start, g.end, w, p, g.stream});
        }
    }
    for (auto *ids : {&r.gpuStreams, &r.ncclStreams}) {
        std::sort(ids->begin(), ids->end());
        ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
    }
    // The k-th kernel one record_param_comms launched, for calls that launch several.
    std::sort(r.nccl.begin(), r.nccl.end(), [](const NcclKernel &a, const NcclKernel &b) { return a.start < b.start; });
    std::unordered_map<int, int> perCall;
    for (NcclKernel &k : r.nccl)
        if (k.comm >= 0)
            k.sub = perCall[k.comm]++;
    return r;
}

// ---------------------------------------------------------------------------------------------
// The job.

std::vector<std::string> expandInputs(const std::vector<std::string> &inputs)
{
    if (inputs.empty())
        throw ImportError("no trace files given");
    std::vector<std::string> out;
    for (const std::string &in : inputs) {
        std::error_code ec;
        if (!fs::is_directory(in, ec)) {
            out.push_back(in);
            continue;
        }
        std::vector<std::string> names;
        for (const auto &e : fs::directory_iterator(in, ec)) {
            const std::string n = e.path().filename().string();
            auto endsWith = [&](const char *s) {
                const std::size_t k = std::strlen(s);
                return n.size() > k && n.compare(n.size() - k, k, s) == 0;
            };
            if (e.is_regular_file(ec) && (endsWith(".json") || endsWith(".json.gz")))
                names.push_back(n);
        }
        if (ec)
            throw ImportError(in + ": cannot list the folder (" + ec.message() + ")");
        if (names.empty())
            throw ImportError(in + ": no *.json or *.json.gz trace in the folder");
        std::sort(names.begin(), names.end());
        for (const std::string &n : names)
            out.push_back((fs::path(in) / n).string());
    }
    // One file given twice (or by two names, or in a folder given too) would be two ranks.
    std::map<std::string, std::string> seen;
    for (const std::string &path : out) {
        std::error_code ec;
        const fs::path real = fs::weakly_canonical(path, ec);
        const auto [it, fresh] = seen.emplace(ec ? path : real.string(), path);
        if (!fresh)
            throw ImportError(path + ": given twice" + (it->second != path ? " (also as " + it->second + ")" : std::string()) +
                              "; each rank's trace once");
    }
    return out;
}

bool rankFromName(const std::string &path, long long &rank)
{
    std::string base = fs::path(path).filename().string();
    for (char &c : base)
        c = char(std::tolower(static_cast<unsigned char>(c)));
    for (const char *word : {"rank", "worker"}) {
        for (std::size_t pos = base.find(word); pos != std::string::npos; pos = base.find(word, pos + 1)) {
            std::size_t p = pos + std::strlen(word);
            if (p < base.size() && (base[p] == '_' || base[p] == '-' || base[p] == '.'))
                ++p;
            std::size_t q = p;
            while (q < base.size() && q - p < 9 && std::isdigit(static_cast<unsigned char>(base[q])))
                ++q;
            // "worker-1_4242.1700000000123.pt.trace.json" is the profiler's default name
            // (host_PID.TIME) on a host named worker-1, which runs several ranks: not a rank.
            std::size_t pid = q + 1;
            if (q < base.size() && base[q] == '_')
                while (pid < base.size() && std::isdigit(static_cast<unsigned char>(base[pid])))
                    ++pid;
            const bool hostAndPid = pid > q + 1 && pid < base.size() && base[pid] == '.';
            if (q > p && !hostAndPid) {
                rank = std::stoll(base.substr(p, q - p));
                return true;
            }
        }
    }
    return false;
}

Ns unionLength(std::vector<Interval> &v)
{
    std::sort(v.begin(), v.end(), [](const Interval &a, const Interval &b) { return a.start < b.start; });
    Ns total = 0, s = 0, e = 0;
    bool open = false;
    for (const Interval &i : v) {
        if (open && i.start <= e) {
            e = std::max(e, i.end);
            continue;
        }
        if (open)
            total += e - s;
        s = i.start, e = i.end, open = true;
    }
    return total + (open ? e - s : 0);
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string fmt(double v, int decimals)
{
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", decimals, v);
    return b;
}

void checkSameJob(const std::vector<RankWork> &w)
{
    const RankWork *world = nullptr, *backend = nullptr;
    for (const RankWork &r : w) {
        if (r.hasWorld) {
            if (world && world->world != r.world)
                throw ImportError(r.path + ": world_size " + std::to_string(r.world) + " in distributedInfo, but " +
                                  world->path + " says " + std::to_string(world->world) + ": traces of different jobs");
            world = world ? world : &r;
        }
        if (!r.backend.empty()) {
            if (backend && backend->backend != r.backend)
                throw ImportError(r.path + ": backend " + r.backend + " in distributedInfo, but " + backend->path +
                                  " says " + backend->backend + ": traces of different jobs");
            backend = backend ? backend : &r;
        }
        if (world && r.hasRank && (r.rank < 0 || r.rank >= world->world))
            throw ImportError(r.path + ": rank " + std::to_string(r.rank) + " outside world_size " +
                              std::to_string(world->world));
    }
    // Files whose events lie hours apart were not recorded together.
    std::vector<const RankWork *> byStart;
    for (const RankWork &r : w)
        if (r.first <= r.last)
            byStart.push_back(&r);
    std::sort(byStart.begin(), byStart.end(), [](const RankWork *a, const RankWork *b) { return a->first < b->first; });
    const RankWork *reach = nullptr;
    for (const RankWork *r : byStart) {
        // In double: two files' absolute times may lie further apart than int64 can subtract.
        const double gap = double(r->first) - double(reach ? reach->last : r->first);
        if (reach && gap > double(kHourNs))
            throw ImportError(r->path + ": its events start " + fmt(gap / 3.6e12, 1) + " h after those of " +
                              reach->path + " end: traces of different jobs");
        if (!reach || r->last > reach->last)
            reach = r;
    }
    // One job fits one run: 2^52 ns (52 days) from its first event to its last.
    if (reach && double(reach->last) - double(byStart.front()->first) > double(kMaxRunNs))
        throw ImportError(reach->path + ": the traces span " +
                          fmt((double(reach->last) - double(byStart.front()->first)) / 8.64e13, 0) +
                          " days from the first event of " + byStart.front()->path +
                          ": more than a trace can cover (52 days)");
}

using Members = std::vector<std::pair<int, int>>; // (worker, NCCL kernel index)

// Ranks from distributedInfo, the file name, the order given; sorts work by rank.
void assignRanks(std::vector<RankWork> &work, KinetoJob &job)
{
    std::map<long long, const RankWork *> taken;
    for (int pass = 0; pass < 2; ++pass) {
        for (RankWork &r : work) {
            if (pass == 0 && r.hasRank)
                r.rankSource = "distributedInfo";
            else if (pass == 1 && !r.hasRank && rankFromName(r.path, r.rank))
                r.rankSource = "file name";
            else
                continue;
            const auto [it, fresh] = taken.emplace(r.rank, &r);
            if (!fresh)
                throw ImportError(r.path + ": rank " + std::to_string(r.rank) + " again (" + it->second->path +
                                  " is rank " + std::to_string(r.rank) + " too)");
        }
    }
    long long next = 0;
    for (RankWork &r : work) {
        if (!r.rankSource.empty())
            continue;
        while (taken.count(next))
            ++next;
        r.rank = next;
        r.rankSource = "order given";
        taken.emplace(next, &r);
        job.warnings.push_back(r.path + ": no rank in distributedInfo or the file name; rank " +
                               std::to_string(next) + " from the order given");
    }
    std::sort(work.begin(), work.end(), [](const RankWork &a, const RankWork &b) { return a.rank < b.rank; });
    const int n = int(work.size());
    const auto stated = std::find_if(work.begin(), work.end(), [](const RankWork &r) { return r.hasWorld; });
    job.worldSize = n;
    for (const RankWork &r : work) {
        if (stated != work.end() && r.rank >= stated->world)
            throw ImportError(r.path + ": rank " + std::to_string(r.rank) + " (" + r.rankSource + "), but " +
                              stated->path + " says world_size " + std::to_string(stated->world) +
                              ": more files than ranks, or traces of different jobs");
        job.worldSize = stated != work.end() ? int(stated->world) : std::max<long long>(job.worldSize, r.rank + 1);
    }
    if (n < job.worldSize)
        job.notes.push_back(std::to_string(n) + " of " + std::to_string(job.worldSize) +
                            " ranks loaded: stalls and the straggler are among the loaded ranks only");
}

// Collectives found on two ranks or more.
std::vector<Members> matchCollectives(const std::vector<RankWork> &work, KinetoJob &job)
{
    const int n = int(work.size());
    std::size_t ncclKernels = 0;
    bool allSeq = true;
    for (const RankWork &r : work) {
        ncclKernels += r.nccl.size();
        for (const NcclKernel &k : r.nccl)
            allSeq = allSeq && k.hasSeq;
    }
    std::vector<Members> collectives;
    if (ncclKernels == 0) {
        job.matchMethod = "none";
    } else if (allSeq) {
        job.matchMethod = "sequence number";
        std::map<std::tuple<int, long long, int>, Members> bySeq;
        for (int w = 0; w < n; ++w)
            for (int i = 0; i < int(work[w].nccl.size()); ++i) {
                const NcclKernel &k = work[w].nccl[i];
                Members &m = bySeq[{k.pg, k.seq, k.sub}];
                if (m.empty() || m.back().first != w)
                    m.push_back({w, i});
            }
        for (auto &e : bySeq)
            collectives.push_back(std::move(e.second));
    } else {
        job.matchMethod = "order";
        if (n > 1)
            job.notes.push_back("collectives matched by the order of NCCL kernels in each step: the traces' "
                                "record_param_comms give no process group and sequence number for every kernel");
        std::map<long long, std::vector<std::vector<int>>> byStep; // N -> per worker, -1 row: absent
        for (int w = 0; w < n; ++w) {
            for (const Window &win : work[w].windows) {
                auto &rows = byStep[win.n];
                rows.resize(n);
                rows[w].push_back(-1); // marks "has step N"
            }
            for (int i = 0; i < int(work[w].nccl.size()); ++i)
                byStep[work[w].windows[work[w].nccl[i].window].n][w].push_back(i); // already by start
        }
        for (auto &[step, rows] : byStep) {
            std::size_t common = std::numeric_limits<std::size_t>::max(), most = 0, present = 0;
            for (const auto &row : rows)
                if (!row.empty()) {
                    ++present;
                    common = std::min(common, row.size() - 1);
                    most = std::max(most, row.size() - 1);
                }
            if (present < 2)
                continue;
            if (common != most) {
                std::string counts;
                for (int w = 0; w < n; ++w)
                    if (!rows[w].empty())
                        counts += (counts.empty() ? "" : ", ") + std::string("rank ") + std::to_string(work[w].rank) +
                                  ": " + std::to_string(rows[w].size() - 1);
                job.warnings.push_back("step " + std::to_string(step) + ": the ranks have different numbers of NCCL kernels (" +
                                       counts + "); the first " + std::to_string(common) + " matched by order");
            }
            for (std::size_t k = 0; k < common; ++k) {
                Members m;
                for (int w = 0; w < n; ++w)
                    if (!rows[w].empty())
                        m.push_back({w, rows[w][k + 1]});
                collectives.push_back(std::move(m));
            }
        }
    }
    collectives.erase(std::remove_if(collectives.begin(), collectives.end(), [](const Members &m) { return m.size() < 2; }),
                      collectives.end());
    job.collectivesMatched = int(collectives.size());
    return collectives;
}

// Offsets from the ends of the collectives each rank shares with the first.
void alignClocks(std::vector<RankWork> &work, const std::vector<Members> &collectives, KinetoJob &job)
{
    const int n = int(work.size());
    std::vector<std::vector<double>> diffs(n);
    for (const Members &m : collectives)
        if (m.front().first == 0)
            for (const auto &[w, i] : m)
                diffs[w].push_back(double(work[0].nccl[m.front().second].end - work[w].nccl[i].end));
    std::string missing;
    for (int w = 1; w < n; ++w)
        if (diffs[w].empty())
            missing += (missing.empty() ? "" : ", ") + std::to_string(work[w].rank);
    if (n < 2 || !missing.empty()) {
        job.alignmentSupported = false;
        job.alignmentNote = n < 2 ? "fewer than 2 ranks loaded: nothing to align clocks with"
                                  : "rank " + missing + ": fewer than 1 matched collective with rank " +
                                        std::to_string(work[0].rank) + "; clocks left unaligned";
    } else {
        for (int w = 1; w < n; ++w)
            work[w].offset = Ns(std::llround(median(diffs[w])));
        std::vector<double> spread;
        for (const Members &m : collectives) {
            Ns lo = std::numeric_limits<Ns>::max(), hi = std::numeric_limits<Ns>::min();
            for (const auto &[w, i] : m)
                lo = std::min(lo, work[w].nccl[i].end + work[w].offset),
                hi = std::max(hi, work[w].nccl[i].end + work[w].offset);
            spread.push_back(double(hi - lo) / 1e3);
        }
        job.alignmentNote = "after alignment the ends of the " + std::to_string(spread.size()) +
                            " matched collectives differ by " + fmt(median(spread), 3) + " us (median), " +
                            fmt(*std::max_element(spread.begin(), spread.end()), 3) + " us at most";
    }
}

void findStalls(std::vector<RankWork> &work, const std::vector<Members> &collectives, KinetoJob &job)
{
    const int n = int(work.size());
    std::vector<int> lastCount(n, 0);
    std::vector<double> lateSum(n, 0);
    for (const Members &m : collectives) {
        Ns latest = std::numeric_limits<Ns>::min(), second = latest;
        int last = -1;
        for (const auto &[w, i] : m) {
            const Ns s = work[w].nccl[i].start + work[w].offset;
            if (s > latest)
                second = latest, latest = s, last = w;
            else
                second = std::max(second, s);
        }
        // A rank waits in its kernel from its start until the last rank's, and no longer than
        // the kernel ran: past its end is a clock error between hosts (--align-clocks), and
        // counting it made the figures disagree with the wait drawn inside the kernel.
        for (const auto &[w, i] : m) {
            NcclKernel &k = work[w].nccl[i];
            k.stall = std::clamp<Ns>(latest - (k.start + work[w].offset), 0, std::max<Ns>(0, k.end - k.start));
        }
        if (second < latest) {
            ++lastCount[last];
            lateSum[last] += double(latest - second);
        }
    }
    for (int w = 0; w < n; ++w)
        if (lastCount[w] > 0 && (job.straggler < 0 || lastCount[w] > lastCount[job.straggler] ||
                                 (lastCount[w] == lastCount[job.straggler] && lateSum[w] > lateSum[job.straggler])))
            job.straggler = w;
    if (job.straggler >= 0) {
        job.stragglerLastCount = lastCount[job.straggler];
        job.stragglerMeanLateMs = lateSum[job.straggler] / lastCount[job.straggler] / 1e6;
    }
}

// Records, step rows and ranks, on the job's clock.
void emit(std::vector<RankWork> &work, KinetoJob &job)
{
    const int n = int(work.size());
    // The job's origin: the earliest kept time of any rank.
    Ns origin = std::numeric_limits<Ns>::max();
    long long firstStep = std::numeric_limits<long long>::max();
    for (const RankWork &r : work) {
        for (const Window &win : r.windows)
            origin = std::min(origin, win.start + r.offset), firstStep = std::min(firstStep, win.n);
        for (const Span &s : r.cpu)
            origin = std::min(origin, s.start + r.offset);
        for (const Span &s : r.gpu)
            origin = std::min(origin, s.start + r.offset);
        for (const NcclKernel &k : r.nccl)
            origin = std::min(origin, k.start + r.offset);
    }
    if (origin == std::numeric_limits<Ns>::max())
        origin = 0;
    job.firstStep = firstStep == std::numeric_limits<long long>::max() ? 0 : firstStep;

    // Records and one row per rank per step.
    struct RowAt {
        StepRow row;
        KinetoJob::StepExtra extra;
    };
    std::vector<RowAt> rows;
    struct Placed {
        Record rec;
        std::uint32_t row;
    };
    std::vector<Placed> placed;
    for (int w = 0; w < n; ++w) {
        const RankWork &r = work[w];
        const Ns shift = r.offset - origin;
        auto stepOf = [&](int win) { return std::uint32_t(r.windows[win].n - job.firstStep); };
        auto indexIn = [](const std::vector<long long> &ids, long long id) {
            return std::uint32_t(std::lower_bound(ids.begin(), ids.end(), id) - ids.begin());
        };
        for (const Span &s : r.cpu)
            placed.push_back({Record::span(w, s.phase, Lane::Data, stepOf(s.window), s.start + shift, s.end + shift),
                              indexIn(r.cpuThreads, s.row)});
        std::vector<std::vector<Interval>> compute(r.windows.size()), comm(r.windows.size());
        std::vector<Ns> wait(r.windows.size(), 0);
        for (const Span &s : r.gpu) {
            placed.push_back({Record::span(w, s.phase, Lane::Compute, stepOf(s.window), s.start + shift, s.end + shift),
                              indexIn(r.gpuStreams, s.row)});
            compute[s.window].push_back({s.start, s.end});
        }
        for (const NcclKernel &k : r.nccl) {
            const Ns s = k.start + shift, e = k.end + shift, split = std::min(e, s + k.stall);
            const std::uint32_t row = indexIn(r.gpuStreams, k.stream);
            if (split > s)
                placed.push_back({Record::span(w, Phase::Wait, Lane::Comm, stepOf(k.window), s, split), row});
            if (e > split || split == s)
                placed.push_back({Record::span(w, Phase::Reduce, Lane::Comm, stepOf(k.window), split, e, k.bytes), row});
            comm[k.window].push_back({k.start, k.end});
            wait[k.window] += k.stall;
        }
        for (std::size_t i = 0; i < r.windows.size(); ++i) {
            RowAt a;
            a.row.worker = w;
            a.row.step = r.windows[i].n;
            a.row.tMs = double(r.windows[i].end + shift) / 1e6;
            a.row.stepMs = double(r.windows[i].end - r.windows[i].start) / 1e6;
            a.row.waitMs = double(wait[i]) / 1e6;
            a.row.loss = std::numeric_limits<double>::quiet_NaN();
            a.extra.computeMs = double(unionLength(compute[i])) / 1e6;
            a.extra.commMs = double(unionLength(comm[i])) / 1e6;
            rows.push_back(a);
        }
    }
    std::stable_sort(rows.begin(), rows.end(), [](const RowAt &a, const RowAt &b) {
        return a.row.step != b.row.step ? a.row.step < b.row.step : a.row.worker < b.row.worker;
    });
    for (const RowAt &a : rows)
        job.steps.push_back(a.row), job.stepExtras.push_back(a.extra);
    std::sort(placed.begin(), placed.end(), [](const Placed &x, const Placed &y) {
        const Record &a = x.rec, &b = y.rec;
        return a.worker != b.worker ? a.worker < b.worker
               : a.start != b.start ? a.start < b.start
               : a.end != b.end     ? a.end < b.end
               : a.code != b.code   ? a.code < b.code
                                    : x.row < y.row;
    });
    job.records.reserve(placed.size());
    job.recordRows.reserve(placed.size());
    for (const Placed &p : placed) {
        job.records.push_back(p.rec);
        job.recordRows.push_back(p.row);
    }

    for (RankWork &r : work) {
        ImportedRank ir;
        ir.rank = int(r.rank);
        ir.file = r.path;
        ir.rankSource = r.rankSource;
        ir.cpuThreads = std::move(r.cpuThreads);
        ir.gpuStreams = std::move(r.gpuStreams);
        ir.ncclStreams = std::move(r.ncclStreams);
        ir.streamIds = std::move(r.streamIds);
        ir.clockOffsetNs = double(r.offset);
        job.ranks.push_back(std::move(ir));
    }
}

} // namespace

KinetoJob importKineto(const std::vector<std::string> &files, const KinetoOptions &options)
{
    const std::vector<std::string> paths = expandInputs(files);
    GroupTable groups;
    std::vector<RankWork> work;
    work.reserve(paths.size());
    for (const std::string &p : paths)
        work.push_back(reduce(parseFile(p, groups)));
    checkSameJob(work);

    KinetoJob job;
    job.alignmentRequested = options.alignClocks;
    assignRanks(work, job);
    std::size_t gpuEvents = 0;
    for (const RankWork &r : work) {
        gpuEvents += r.gpuEvents;
        if (r.noSteps)
            job.notes.push_back(r.path + ": no ProfilerStep#N annotations; the whole trace is taken as step 0");
    }
    if (gpuEvents == 0)
        job.notes.push_back("no GPU kernels (a CPU-only job): stalls cannot be computed");
    const std::vector<Members> collectives = matchCollectives(work, job);
    if (options.alignClocks)
        alignClocks(work, collectives, job);
    findStalls(work, collectives, job);
    emit(work, job);
    return job;
}

// stall_ms_per_worker is the total over all steps; the step, compute and comm figures are means
// per step.
nlohmann::json KinetoJob::summaryFields() const
{
    using nlohmann::json;
    const std::size_t n = ranks.size();
    std::vector<double> stall(n, 0), step(n, 0), compute(n, 0), comm(n, 0), count(n, 0);
    std::vector<long long> distinct;
    double endMs = 0;
    for (std::size_t i = 0; i < steps.size(); ++i) {
        const StepRow &r = steps[i];
        if (r.worker < 0 || std::size_t(r.worker) >= n)
            continue;
        stall[r.worker] += r.waitMs;
        step[r.worker] += r.stepMs;
        compute[r.worker] += i < stepExtras.size() ? stepExtras[i].computeMs : 0;
        comm[r.worker] += i < stepExtras.size() ? stepExtras[i].commMs : 0;
        count[r.worker] += 1;
        distinct.push_back(r.step);
        endMs = std::max(endMs, r.tMs);
    }
    for (const Record &r : records)
        endMs = std::max(endMs, double(r.end) / 1e6);
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    json rankList = json::array(), fileList = json::array(), offsets = json::array();
    json stallJ = json::array(), stepJ = json::array(), computeJ = json::array(), commJ = json::array();
    for (std::size_t w = 0; w < n; ++w) {
        rankList.push_back(ranks[w].rank);
        fileList.push_back(ranks[w].file);
        offsets.push_back(ranks[w].clockOffsetNs / 1e6);
        const double c = std::max(1.0, count[w]);
        stallJ.push_back(stall[w]);
        stepJ.push_back(step[w] / c);
        computeJ.push_back(compute[w] / c);
        commJ.push_back(comm[w] / c);
    }
    json straggle = nullptr;
    if (straggler >= 0 && std::size_t(straggler) < n)
        straggle = {{"rank", ranks[straggler].rank}, {"worker", straggler}, {"last_count", stragglerLastCount},
                    {"mean_late_ms", stragglerMeanLateMs}};
    return {{"source", "kineto"},
            {"world_size", worldSize},
            {"ranks", rankList},
            {"files", fileList},
            {"steps", distinct.size()},
            {"first_step", firstStep},
            {"collectives_matched", collectivesMatched},
            {"match_method", matchMethod},
            {"stall_ms_per_worker", stallJ},
            {"step_ms_mean_per_worker", stepJ},
            {"compute_ms_per_worker", computeJ},
            {"comm_ms_per_worker", commJ},
            {"straggler", straggle},
            {"clock_alignment",
             {{"enabled", alignmentRequested}, {"supported", alignmentSupported}, {"offsets_ms", offsets},
              {"note", alignmentNote}}},
            {"warnings", warnings},
            {"notes", notes},
            {"wall_s", endMs / 1e3},
            {"steps_completed", distinct.size()},
            {"workers", n},
            {"status", "finished"}};
}

} // namespace syncopate
