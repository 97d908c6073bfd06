// PyTorch profiler (Kineto) traces of a distributed job, one file per rank, read into
// Syncopate's records: per rank a row per GPU stream (kernels, copies, NCCL kernels) and a row
// per CPU thread that carries operators, steps from ProfilerStep#N, collectives matched across
// ranks and each rank's stall in them. importstore.cpp writes the result as a run directory.
//
// Definitions (the README's "Importing PyTorch profiler traces" says the same):
// - A collective is matched across ranks by (process group, sequence number) where the trace's
//   record_param_comms events give them, else by the order of its NCCL kernels on each rank.
// - A rank's stall in a collective = the latest start of that collective's kernel among the
//   loaded ranks minus the rank's own start, at most its own kernel's duration (beyond its end
//   is a clock error between hosts).
// - A kernel belongs to the step whose ProfilerStep#N window holds its launching runtime call
//   (same correlation id), else to the step window holding its own start.
#pragma once

#include "metrics.h"
#include "trace.h"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <vector>

namespace syncopate {

// Bad input: the message names the file and what is wrong with it. The CLI exits 2 on it.
class ImportError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct KinetoOptions {
    // Per-rank offsets from the ends of matched collectives (which finish nearly together on
    // all ranks), applied to every time of the rank. Off: each file's own clock.
    bool alignClocks = false;
};

struct ImportedRank {
    int rank = 0;
    std::string file;       // the path as given
    std::string rankSource; // "distributedInfo", "file name" or "order given"
    std::vector<long long> cpuThreads;  // tids of the threads that carry operators, ascending
    std::vector<long long> gpuStreams;  // streams with kernels, as indexes into streamIds, ascending
    std::vector<long long> ncclStreams; // of those, the ones with NCCL kernels
    // (device, stream id) by index: a stream id on two GPUs of one rank is two streams.
    std::vector<std::pair<long long, long long>> streamIds;
    double clockOffsetNs = 0;          // added to this rank's times (0 unless aligned)
};

struct KinetoJob {
    // Loaded ranks, sorted by rank. Record::worker and StepRow::worker index this vector
    // (worker i is rank ranks[i].rank; equal when ranks 0..n-1 are all loaded).
    std::vector<ImportedRank> ranks;
    int worldSize = 0;
    // Every span, times in ns from the job's origin (the earliest event of any loaded rank,
    // after alignment), all >= 0, sorted by worker then start. Lanes: Lane::Data = a CPU
    // operator (top-level operators only, so spans of one thread never nest), Lane::Compute = a
    // GPU kernel (Forward/Backward/Apply by the enclosing annotation, else Compute;
    // memcpy/memset: Copy), Lane::Comm = an NCCL kernel (split into Wait [own start, latest
    // start of the collective] and Reduce [the rest], value = bytes where the trace gives
    // them). Record::step = N - firstStep (0 for the first step; spans outside every step
    // window are left out).
    std::vector<Record> records;
    // Parallel to records: the row of its rank a span is drawn in, an index into
    // ranks[worker].gpuStreams for a GPU span (Lane::Compute, Lane::Comm), into
    // ranks[worker].cpuThreads for a CPU span (Lane::Data).
    std::vector<std::uint32_t> recordRows;
    // One per loaded rank per step, ordered by step then worker: worker = index into ranks,
    // step = N (as in the file), tMs = end of the step on the job clock, stepMs = the
    // ProfilerStep span, waitMs = stall, loss = NaN (a trace has none).
    std::vector<StepRow> steps;
    struct StepExtra {
        double computeMs = 0; // union of the rank's GPU compute kernels in the step
        double commMs = 0;    // union of its NCCL kernels in the step
    };
    std::vector<StepExtra> stepExtras; // parallel to steps
    long long firstStep = 0;
    int collectivesMatched = 0;
    std::string matchMethod; // "sequence number" or "order" ("none": no NCCL kernel at all)
    // The rank that arrives last most often (index into ranks), -1 when nothing was matched.
    int straggler = -1;
    int stragglerLastCount = 0;       // collectives it arrived last in
    double stragglerMeanLateMs = 0;   // mean of (its start - the second latest start) there
    bool alignmentRequested = false;  // KinetoOptions::alignClocks, for summary.json
    bool alignmentSupported = true;   // false: alignClocks asked for, too few collectives
    std::string alignmentNote;        // why not, or how well the ends agree after it
    std::vector<std::string> warnings; // e.g. "b.json: no rank in the file; rank 1 from the order given"
    std::vector<std::string> notes;    // e.g. "no GPU kernels (a CPU-only job): stalls cannot be computed"

    // Fields for summary.json: source "kineto", world_size, ranks, files, steps, first_step,
    // collectives_matched, match_method, stall_ms_per_worker, step_ms_mean_per_worker,
    // compute_ms_per_worker, comm_ms_per_worker, straggler {rank, last_count, mean_late_ms},
    // clock_alignment {enabled, supported, offsets_ms, note}, warnings, notes, wall_s.
    nlohmann::json summaryFields() const;
};

// Reads the files (plain or gzipped JSON, streamed: memory grows with the events kept, never
// with the file's text). A folder in files stands for the *.json / *.json.gz / *.pt.trace.json*
// files in it. Throws ImportError naming the file and what is wrong.
KinetoJob importKineto(const std::vector<std::string> &files, const KinetoOptions &options = {});

// Writes job as a run directory that openRunDirectory reads (summary.json has source
// "kineto"). Throws StoreError naming the file.
void writeImportedRun(const KinetoJob &job, const std::string &dir);

} // namespace syncopate
