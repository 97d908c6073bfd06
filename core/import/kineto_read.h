// Internal to the Kineto importer (not installed): what reading one trace file gives, shared
// by kineto_read.cpp (which reads it) and kineto.cpp (which builds the job from it).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace syncopate::kineto_detail {
using Ns = std::int64_t;

// ---------------------------------------------------------------------------------------------
// What one file gives, its times in absolute ns.

enum class Kind : std::uint8_t { Compute, Copy, Nccl };
enum Cls : std::uint8_t { Backward, Optimizer, Forward, ClsCount };

struct ThreadSpan {
    Ns start, end;
    std::uint32_t thread;
};
struct ClassSpan {
    Ns start, end;
    std::uint32_t thread;
    Cls cls;
};
struct Launch {
    long long corr;
    Ns ts;
    std::uint32_t thread;
};
struct GpuEvent {
    Ns start, end;
    long long corr;
    long long stream; // after parseFile: an index into FileData::streams
    long long device; // the event's pid: the GPU
    bool hasCorr;
    Kind kind;
};
struct CommCall {
    Ns start, end;
    std::uint32_t thread;
    int pg;
    long long seq;
    bool hasSeq;
    double bytes;
};
struct Window {
    long long n;
    Ns start, end;
};

struct FileData {
    std::string path;
    bool hasRank = false, hasWorld = false, sawEvents = false;
    long long rank = 0, world = 0;
    std::string backend;
    Ns baseNs = 0;
    std::string baseText; // baseTimeNanoseconds as written, when it is no time
    Ns first = std::numeric_limits<Ns>::max(), last = std::numeric_limits<Ns>::min();
    std::vector<std::pair<long long, long long>> threads; // (pid, tid)
    std::vector<Window> steps;
    std::vector<ThreadSpan> ops;
    std::vector<ClassSpan> classes;
    std::vector<Launch> launches;
    std::vector<GpuEvent> gpu;
    // (device, stream id) of the GPU events' streams, ascending: one stream id on two GPUs is
    // two streams.
    std::vector<std::pair<long long, long long>> streams;
    std::vector<CommCall> comms;
};

// Process groups by name, shared by all files so that equal names match.
struct GroupTable {
    std::map<std::string, int> ids;
    int intern(const std::string &s) { return ids.emplace(s, int(ids.size())).first->second; }
};

// Reads one file (plain or gzipped JSON) into its events, every time on the absolute clock.
// Throws ImportError naming the file and what is wrong.
FileData parseFile(const std::string &path, GroupTable &groups);

} // namespace syncopate::kineto_detail
