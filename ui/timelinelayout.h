// Which marks to draw for one timeline row: only spans in view, and runs of spans narrower than
// a few pixels folded into one mark that knows how many it stands for. The work per row is
// bounded by the number of pixel columns, not by the number of spans.
#pragma once

#include "lod.h"
#include "timemapping.h"
#include "trace.h"

#include <vector>

namespace syncopate {

struct TimelineRow;

// One row position (value-axis unit) of the timeline with runs stacked on one time axis: the
// heading of a run's group (row < 0), or row `row` of run `run`.
struct TimelineSlot {
    std::size_t run = 0;
    int row = -1;
    int worker = 0;
    bool dataLane = false;
    bool heading() const { return row < 0; }
};

// The rows of the given runs top to bottom in that order, each run's under a heading slot that
// also keeps the groups apart. A lone run gets no heading: its rows stay at 0..n-1.
std::vector<TimelineSlot> stackRuns(const std::vector<const std::vector<TimelineRow> *> &runs);

// Which slots get a label on the row axis, slots pxPerSlot apart, labels labelPx tall. All when
// they fit. Past that no two labels come closer than labelPx: every heading keeps its label
// (it names the run), worker rows keep one every k workers (k a power of two, counted from w0
// so the labels read w0, w4, w8 ... or w4, w8 ... under a heading) on the worker's first main
// row, data lanes and a worker's further rows (an import's other streams) lose theirs.
std::vector<bool> labelledSlots(const std::vector<TimelineSlot> &stack, double pxPerSlot, double labelPx);

struct TimelineMark {
    double x0 = 0, x1 = 0;   // pixels
    Phase phase = Phase::Count;
    std::uint32_t count = 0; // spans this mark stands for
    std::size_t first = 0;   // index of its first span in the row
};

// spans: sorted by start and non-overlapping. Marks are appended to out.
void layoutRow(const std::vector<Record> &spans, const TimeMapping &mapping, double minWidthPx,
               std::vector<TimelineMark> &out);

// The same from one level of a row's summary (buckets of bucketNs): buckets closer than
// minWidthPx fold into one mark whose phase is the one that covers most of them.
void layoutSummary(const std::vector<LodBucket> &buckets, std::int64_t bucketNs, const TimeMapping &mapping,
                   double minWidthPx, std::vector<TimelineMark> &out);

// Index of the span under time t, or of the nearest within slackNs; -1 when none.
std::ptrdiff_t spanAt(const std::vector<Record> &spans, double t, double slackNs);

// How many spans overlap [t0, t1].
std::size_t countSpansIn(const std::vector<Record> &spans, double t0, double t1);

} // namespace syncopate
