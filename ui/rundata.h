// What the UI knows of one run: the records pulled so far, arranged for drawing (spans per
// timeline row, sorted by time) and for charts (counters and waits per worker and step). Owned
// and read by the GUI thread only; the engine is never touched from here.
#pragma once

#include "config.h"
#include "engine.h"
#include "rundir.h"
#include "trace.h"

#include <QString>

#include <nlohmann/json.hpp>

#include <memory>
#include <vector>

namespace syncopate {

struct CounterPoint {
    double tNs;
    std::uint32_t step;
    double value;
};

struct TimelineRow {
    int worker = 0;
    bool dataLane = false;   // prefetch lane under the worker's main row
    std::vector<Record> spans; // sorted by start, non-overlapping
};

class RunData {
public:
    RunData(RunConfig config, QString label);
    // A run that has ended: its records, summary and state (from the summary's status).
    static std::shared_ptr<RunData> fromArtifacts(const RunArtifacts &run, const QString &label);

    const RunConfig &config() const { return m_config; }
    const QString &label() const { return m_label; }
    void setLabel(const QString &label) { m_label = label; }
    // "run 1: sync mode, 4 workers" (and the device, when not the CPU): timeline and export title.
    QString title() const;
    QString directory() const { return m_directory; }
    void setDirectory(const QString &dir) { m_directory = dir; }

    void append(const std::vector<Record> &records);

    const std::vector<TimelineRow> &rows() const { return m_rows; }
    const std::vector<CounterPoint> &counter(CounterId c, int worker) const;
    // Stall time (Record::isStall: barrier, SSP bound, server lock) per worker per step, in ms.
    const std::vector<double> &waitMs(int worker) const { return m_wait[std::size_t(worker)]; }
    std::int64_t startNs() const { return m_first; }
    std::int64_t endNs() const { return m_last; }
    std::size_t spanCount() const { return m_spans; }
    int workers() const { return m_config.workers; }

    // Time per phase of each worker inside [t0, t1] (main row only), for range summaries.
    std::vector<std::array<double, std::size_t(Phase::Count)>> phaseTimeIn(double t0, double t1) const;
    static constexpr double kThroughputWindowNs = 5e8;
    // Samples per second over consecutive half-second windows: (window end, rate).
    std::vector<std::pair<double, double>> throughput() const;
    // Updates per staleness value, all workers together.
    const std::vector<int> &stalenessHistogram() const { return m_staleness; }

    // Filled when the run has ended (or was loaded from disk).
    nlohmann::json summary;
    RunState state = RunState::Running;
    QString error;

private:
    TimelineRow &rowFor(int worker, bool dataLane);

    RunConfig m_config;
    QString m_label;
    QString m_directory;
    std::vector<TimelineRow> m_rows;
    std::vector<std::vector<std::vector<CounterPoint>>> m_counters; // [counter][worker]
    std::vector<std::vector<double>> m_wait;
    std::vector<int> m_batchesPerWindow; // loss samples per throughput window
    std::vector<int> m_staleness;        // histogram
    std::int64_t m_first = 0, m_last = 0;
    std::size_t m_spans = 0;
};

using RunDataPtr = std::shared_ptr<RunData>;

} // namespace syncopate
