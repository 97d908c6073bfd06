// Which marks to draw for one timeline row: only spans in view, and runs of spans narrower than
// a few pixels folded into one mark that knows how many it stands for. The work per row is
// bounded by the number of pixel columns, not by the number of spans.
#pragma once

#include "lod.h"
#include "timemapping.h"
#include "trace.h"

#include <vector>

namespace syncopate {

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
