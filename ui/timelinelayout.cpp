#include "timelinelayout.h"

#include "rundata.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace syncopate {
namespace {

// First span that ends at or after t (ends are sorted too, since spans do not overlap).
std::size_t firstEndingAfter(const std::vector<Record> &spans, double t, std::size_t from = 0)
{
    return std::size_t(std::lower_bound(spans.begin() + std::ptrdiff_t(from), spans.end(), t,
                                        [](const Record &r, double v) { return double(r.end) < v; }) -
                       spans.begin());
}

std::size_t firstStartingAtOrAfter(const std::vector<Record> &spans, double t, std::size_t from)
{
    return std::size_t(std::lower_bound(spans.begin() + std::ptrdiff_t(from), spans.end(), t,
                                        [](const Record &r, double v) { return double(r.start) < v; }) -
                       spans.begin());
}

// The phase that covers most of a folded group, from at most 16 evenly spread samples, so a
// mark costs the same however many spans it hides.
Phase dominantPhase(const std::vector<Record> &spans, std::size_t first, std::size_t last)
{
    std::array<double, std::size_t(Phase::Count)> weight{};
    const std::size_t n = last - first;
    const std::size_t samples = std::min<std::size_t>(n, 16);
    for (std::size_t k = 0; k < samples; ++k) {
        const Record &r = spans[first + k * n / samples];
        weight[std::size_t(r.phase())] += double(std::max<std::int64_t>(1, r.duration()));
    }
    return Phase(std::max_element(weight.begin(), weight.end()) - weight.begin());
}

} // namespace

void layoutRow(const std::vector<Record> &spans, const TimeMapping &m, double minWidthPx,
               std::vector<TimelineMark> &out)
{
    const std::size_t n = spans.size();
    std::size_t i = firstEndingAfter(spans, m.startNs());
    const double t1 = m.endNs();
    while (i < n && double(spans[i].start) <= t1) {
        const Record &r = spans[i];
        const double x0 = m.toPixel(double(r.start)), x1 = m.toPixel(double(r.end));
        if (x1 - x0 >= minWidthPx) {
            out.push_back({x0, x1, r.phase(), 1, i});
            ++i;
            continue;
        }
        // Fold everything that starts within the next minWidthPx pixels, but leave a wide span
        // that starts there to be drawn as itself.
        std::size_t j = firstStartingAtOrAfter(spans, m.toTime(x0 + minWidthPx), i + 1);
        if (j - 1 > i) {
            const Record &lastOne = spans[j - 1];
            if (m.toPixel(double(lastOne.end)) - m.toPixel(double(lastOne.start)) >= minWidthPx)
                --j;
        }
        const std::size_t count = j - i;
        const double xEnd = m.toPixel(double(spans[j - 1].end));
        out.push_back({x0, std::max(xEnd, x0 + 1.0),
                       count == 1 ? r.phase() : dominantPhase(spans, i, j),
                       std::uint32_t(count), i});
        i = j;
    }
}

void layoutSummary(const std::vector<LodBucket> &buckets, std::int64_t bucketNs, const TimeMapping &m,
                   double minWidthPx, std::vector<TimelineMark> &out)
{
    const auto n = std::int64_t(buckets.size());
    std::int64_t i = std::max<std::int64_t>(0, std::int64_t(m.startNs()) / bucketNs);
    // A long span that starts before the view still shows: look back a little for it.
    for (std::int64_t back = i - 1; back >= 0 && back >= i - 64; --back)
        if (back < n && buckets[std::size_t(back)].count && double(buckets[std::size_t(back)].maxEnd) >= m.startNs()) {
            i = back;
            break;
        }
    const std::int64_t last = std::min<std::int64_t>(n - 1, std::int64_t(m.endNs()) / bucketNs);
    std::array<double, std::size_t(Phase::Count)> weight{};
    TimelineMark group;
    auto emit = [&] {
        if (group.count == 0)
            return;
        group.phase = Phase(std::max_element(weight.begin(), weight.end()) - weight.begin());
        out.push_back(group);
        group = {};
        weight.fill(0);
    };
    for (; i <= last; ++i) {
        const LodBucket &b = buckets[std::size_t(i)];
        if (b.count == 0)
            continue;
        const double x0 = m.toPixel(double(i * bucketNs));
        const double x1 = std::max(m.toPixel(double(b.maxEnd)), x0 + 1.0);
        if (group.count && (x0 >= group.x0 + minWidthPx || x1 - x0 >= minWidthPx))
            emit();
        if (group.count == 0)
            group.x0 = x0;
        group.x1 = std::max(group.x1, x1);
        group.count += b.count;
        weight[b.dominant] += double(b.count) * (double(b.share) + 1);
        if (x1 - x0 >= minWidthPx)
            emit(); // wide enough to stand alone (a long span)
    }
    emit();
}

std::ptrdiff_t spanAt(const std::vector<Record> &spans, double t, double slackNs)
{
    const std::size_t i = firstEndingAfter(spans, t - slackNs);
    if (i >= spans.size() || double(spans[i].start) > t + slackNs)
        return -1;
    // Prefer the span that really contains t over a neighbour within the slack.
    if (i + 1 < spans.size() && double(spans[i].end) < t && double(spans[i + 1].start) <= t + slackNs)
        return std::ptrdiff_t(i + 1);
    return std::ptrdiff_t(i);
}

std::size_t countSpansIn(const std::vector<Record> &spans, double t0, double t1)
{
    const std::size_t a = firstEndingAfter(spans, t0);
    const std::size_t b = std::size_t(std::upper_bound(spans.begin(), spans.end(), t1,
                                                       [](double v, const Record &r) {
                                                           return v < double(r.start);
                                                       }) -
                                      spans.begin());
    return b > a ? b - a : 0;
}

std::vector<TimelineSlot> stackRuns(const std::vector<const std::vector<TimelineRow> *> &runs)
{
    std::vector<TimelineSlot> stack;
    for (std::size_t g = 0; g < runs.size(); ++g) {
        if (runs.size() > 1)
            stack.push_back({g, -1, 0, false});
        if (!runs[g])
            continue;
        for (std::size_t r = 0; r < runs[g]->size(); ++r)
            stack.push_back({g, int(r), (*runs[g])[r].worker, (*runs[g])[r].dataLane});
    }
    return stack;
}

std::vector<bool> labelledSlots(const std::vector<TimelineSlot> &stack, double pxPerSlot, double labelPx)
{
    std::vector<bool> shown(stack.size(), true);
    if (stack.empty() || pxPerSlot >= labelPx)
        return shown;
    const auto minGap = std::ptrdiff_t(std::ceil(labelPx / std::max(pxPerSlot, 1e-6)));
    // Rows per worker differ between runs (a prefetch lane or not, an import's streams and
    // threads): the stride is per group, from its worker with the most rows.
    std::vector<int> stride(stack.back().run + 1, 1);
    std::vector<std::ptrdiff_t> perWorker(stride.size(), 1);
    std::vector<bool> firstOfWorker(stack.size(), false);
    std::size_t from = 0;
    bool mainSeen = false;
    for (std::size_t i = 0; i < stack.size(); ++i) {
        const TimelineSlot &s = stack[i];
        if (s.heading())
            continue;
        if (i == 0 || stack[i - 1].heading() || stack[i - 1].run != s.run || stack[i - 1].worker != s.worker)
            from = i, mainSeen = false;
        perWorker[s.run] = std::max(perWorker[s.run], std::ptrdiff_t(i - from + 1));
        // The worker's first main row carries its label once labels thin out.
        firstOfWorker[i] = !s.dataLane && !mainSeen;
        mainSeen = mainSeen || !s.dataLane;
    }
    for (std::size_t g = 0; g < stride.size(); ++g)
        while (stride[g] * perWorker[g] < minGap)
            stride[g] *= 2;
    // Labels are placed top down; a worker's label also keeps clear of the next heading.
    std::vector<std::ptrdiff_t> nextHeading(stack.size() + 1, std::numeric_limits<std::ptrdiff_t>::max() / 2);
    for (std::size_t i = stack.size(); i-- > 0;)
        nextHeading[i] = stack[i].heading() ? std::ptrdiff_t(i) : nextHeading[i + 1];
    std::ptrdiff_t last = std::numeric_limits<std::ptrdiff_t>::min() / 2;
    for (std::size_t i = 0; i < stack.size(); ++i) {
        const TimelineSlot &s = stack[i];
        const auto at = std::ptrdiff_t(i);
        if (s.heading()) {
            last = at;
            continue;
        }
        shown[i] = firstOfWorker[i] && s.worker % stride[s.run] == 0 && at - last >= minGap &&
                   nextHeading[i + 1] - at >= minGap;
        if (shown[i])
            last = at;
    }
    return shown;
}

} // namespace syncopate
