// Live charts' curves given only what changed. A live run's series grow at their end: a counter
// changes only its newest point until the trace model thins it (neighbours merge, and with them
// every point), a step series its last few. Refilling sixteen workers' curves of up to 131072
// points each second cost more than drawing them; these keep what a graph holds and give it the
// rest, leaving it exactly as a refill would.
#pragma once

#include <qcustomplot.h>

#include <algorithm>
#include <cstddef>
#include <functional>

namespace syncopate {

// A graph that keeps summaries of its points (the charts' ColumnGraph) is told from which index
// on they changed. Whatever changes a chart's points says so: feedGraph here, and the charts'
// own setPoints and clearPoints.
class PointsWatcher {
public:
    virtual ~PointsWatcher() = default;
    virtual void pointsChangedFrom(std::size_t index) = 0;
};

inline void pointsChanged(QCPGraph *graph, std::size_t from)
{
    if (auto *watcher = dynamic_cast<PointsWatcher *>(graph))
        watcher->pointsChangedFrom(from);
}

// Gives `graph` the n points point(0) .. point(n - 1), sorted by key. The graph's points before
// its last `unsettled` are kept when its first and the last of them are what point() gives now
// (thinning and a new run change both); the others are given again, in place or appended.
template <class PointFn>
void feedGraph(QCPGraph *graph, std::size_t n, std::size_t unsettled, PointFn point)
{
    QCPGraphDataContainer &data = *graph->data();
    const std::size_t held = std::size_t(data.size());
    std::size_t from = std::min(held > unsettled ? held - unsettled : 0, n);
    auto same = [&](std::size_t i) {
        const QCPGraphData p = point(i), &q = *data.at(int(i));
        return p.key == q.key && p.value == q.value;
    };
    if (from > 0 && !(same(0) && same(from - 1)))
        from = 0;
    QVector<QCPGraphData> fresh;
    fresh.reserve(int(n - from));
    for (std::size_t i = from; i < n; ++i)
        fresh.push_back(point(i));
    // A shorter series, or one whose new points do not all follow the kept ones (equal keys
    // would be put in front), is given whole.
    if (from == 0 || n < held || (n > held && fresh.back().key <= data.constBegin()->key)) {
        if (from > 0) { // the kept points too
            QVector<QCPGraphData> all;
            all.reserve(int(n));
            for (std::size_t i = 0; i < from; ++i)
                all.push_back(point(i));
            fresh = all + fresh;
        }
        data.set(fresh, true);
        pointsChanged(graph, 0);
        return;
    }
    // Points held past `from` are overwritten where they are (their keys stay sorted: the
    // series' are), the rest appended.
    auto it = data.begin() + int(from);
    const std::size_t overwrite = held - from;
    std::copy(fresh.constBegin(), fresh.constBegin() + int(overwrite), it);
    if (fresh.size() > int(overwrite))
        data.add(fresh.mid(int(overwrite)), true);
    pointsChanged(graph, from);
}

// The same for a series already in two vectors (the mean of several workers, the points a
// filter lets through): the graph keeps the points it holds that are equal to the vectors'.
inline void feedGraph(QCPGraph *graph, const QVector<double> &keys, const QVector<double> &values)
{
    const QCPGraphDataContainer &data = *graph->data();
    const std::size_t n = std::size_t(std::min(keys.size(), values.size()));
    std::size_t same = 0;
    for (auto it = data.constBegin(); it != data.constEnd() && same < n; ++it, ++same)
        if (it->key != keys[int(same)] || it->value != values[int(same)])
            break;
    feedGraph(graph, n, std::size_t(data.size()) - same,
              [&](std::size_t i) { return QCPGraphData(keys[int(i)], values[int(i)]); });
}

// Trailing mean over `window` values (1: the values themselves), evaluated cheaply at increasing
// indexes. The running sum starts afresh every `window` points, so that a mean does not depend on
// where evaluation began: a curve given again from its middle equals one given whole.
class TrailingMean {
public:
    TrailingMean(std::function<double(std::size_t)> value, int window)
        : m_value(std::move(value)), m_window(std::size_t(std::max(1, window)))
    {
    }
    double at(std::size_t i)
    {
        if (m_window == 1)
            return m_value(i);
        if (i != m_next || i % m_window == 0) {
            // Restart at the last multiple of the window at or below i.
            const std::size_t s = i - i % m_window;
            m_sum = 0;
            for (std::size_t j = s >= m_window - 1 ? s - (m_window - 1) : 0; j <= s; ++j)
                m_sum += m_value(j);
            m_next = s + 1;
        }
        for (; m_next <= i; ++m_next) {
            m_sum += m_value(m_next);
            if (m_next >= m_window)
                m_sum -= m_value(m_next - m_window);
        }
        return m_sum / double(std::min(i + 1, m_window));
    }

private:
    std::function<double(std::size_t)> m_value;
    std::size_t m_window;
    std::size_t m_next = 0; // the sum is of the window ending at m_next - 1
    double m_sum = 0;
};

} // namespace syncopate
