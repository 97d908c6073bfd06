// What the UI knows of one run: a TraceModel (core/trace/tracemodel.h: rows, spans by time range,
// level-of-detail summaries, counters, per-step series) plus what only the UI needs (label,
// directory, summary, state). Owned and read by the GUI thread only; the engine is never
// touched from here, it hands records over through RunController.
#pragma once

#include "config.h"
#include "engine.h"
#include "runstore.h"
#include "tracemodel.h"

#include <QString>
#include <QStringList>

#include <nlohmann/json.hpp>

#include <deque>
#include <limits>
#include <memory>
#include <vector>

namespace syncopate {

struct TimelineRow {
    int worker = 0;
    bool dataLane = false; // a thin row: the prefetch lane under a worker's main row, an import's CPU thread
    bool commLane = false; // an older import's GPU communication row (a newer one has a row per stream)
    QString name;          // as the store names it: "worker 3", "rank 3 stream 7", "rank 3 thread 1234"
    bool evaluator = false; // async: the evaluator's row, after the workers' (worker == workers())
};

class RunData {
public:
    RunData(RunConfig config, QString label);
    // A run directory opened from disk (its spans stay there, read on demand).
    static std::shared_ptr<RunData> fromOpened(const OpenedRun &run, const QString &label);

    const RunConfig &config() const { return m_config; }
    const QString &label() const { return m_label; }
    void setLabel(const QString &label) { m_label = label; }
    // "run 1: sync mode, 4 workers" (and the device, when not the CPU): timeline and export title.
    QString title() const;
    // An imported profiler trace (summary.json source "kineto"): workers are ranks, and it has
    // no loss, staleness or activation memory.
    bool imported() const { return m_imported; }
    // "worker 3", or "rank 3" for an import (its rank number, not its position); "evaluator"
    // for worker workers() of an async run (its evaluator's records).
    QString workerName(int worker) const;
    // The row axis label of one of rows(): the store's name for an import ("rank 3 stream 7"),
    // "rank 1 @ host ±12 µs, w3" for a run over MPI ranks (the uncertainty of the rank's clock
    // offset to rank 0, from summary.json), "evaluator", else empty (the view's own).
    QString rowLabel(const TimelineRow &row) const;
    // An import's first ProfilerStep number: step i of the trace model is step firstStep() + i.
    std::int64_t firstStep() const { return m_firstStep; }
    QString directory() const { return m_directory; }
    // A live run's directory: spans that leave the model's recent window are read back from it.
    void setDirectory(const QString &dir);

    void append(const std::vector<Record> &records);
    // Records handed to append() so far, and the earliest span start among those appended after
    // the first `appended` of them: what a cached drawing of the run must redraw from (spans
    // are recorded when they end, so one can start well before the newest). INT64_MAX when
    // nothing came since; INT64_MIN when that is too long ago to say.
    std::uint64_t appended() const { return m_appended; }
    std::int64_t earliestStartSince(std::uint64_t appended) const;

    const TraceModel &trace() const { return *m_trace; }
    // Grows by the evaluator's row when its first span comes in.
    const std::vector<TimelineRow> &rows() const { return m_rows; }
    // worker 0 to workers(); workers() is the async evaluator's (held-out loss and accuracy).
    const std::vector<CounterPoint> &counter(CounterId c, int worker) const { return m_trace->counter(c, worker); }
    // Stall time (Record::isStall) per worker and step point, in ms per step; a point stands for
    // stepsPerPoint(worker) steps once a long run has been thinned.
    const std::vector<StepPoint> &steps(int worker) const { return m_trace->steps(worker); }
    int stepsPerPoint(int worker) const { return m_trace->stepsPerPoint(worker); }
    std::int64_t startNs() const { return 0; }
    std::int64_t endNs() const { return m_trace->endNs(); }
    std::uint64_t spanCount() const { return m_trace->spanCount(); }
    int workers() const { return m_config.workers; }

    std::vector<std::array<double, std::size_t(Phase::Count)>> phaseTimeIn(double t0, double t1,
                                                                          std::vector<double> *offCpu = nullptr) const
    {
        return m_trace->phaseTimeIn(t0, t1, offCpu);
    }
    std::vector<std::pair<double, double>> throughput() const { return m_trace->throughput(); }
    const std::vector<std::uint64_t> &stalenessHistogram() const { return m_trace->stalenessHistogram(); }
    const std::vector<std::uint64_t> &stalenessHistogram(int worker) const { return m_trace->stalenessHistogram(worker); }

    // Filled when the run has ended (or was loaded from disk).
    nlohmann::json summary;
    int summaryProblems = 0; // fields of an opened summary.json dropped for their type
    QStringList problems;    // row files left out or read up to damage, an unreadable summary
    RunState state = RunState::Running;
    bool interrupted = false; // opened from a directory whose run never ended
    bool writtenElsewhere = false; // opened while another process writes it: a snapshot
    QString error;

private:
    void listRows();

    RunConfig m_config;
    QString m_label;
    bool m_imported = false;
    std::int64_t m_firstStep = 0;
    std::vector<int> m_ranks; // an import's rank number per worker
    QString m_directory;
    std::shared_ptr<TraceModel> m_trace;
    std::vector<TimelineRow> m_rows;
    struct AppendMark {
        std::uint64_t appendedAfter;
        std::int64_t earliestStart;
    };
    std::deque<AppendMark> m_appendMarks; // the last few hundred append() calls
    std::uint64_t m_appended = 0;
    std::uint64_t m_forgottenUpTo = 0; // records of the calls dropped from m_appendMarks
};

using RunDataPtr = std::shared_ptr<RunData>;

} // namespace syncopate
