#include "timelineplottable.h"

#include "phasestyle.h"

#include <algorithm>
#include <cmath>

namespace syncopate {

// A span narrower than this many pixels is folded with its neighbours.
constexpr double kMinMarkWidthPx = 3.0;
// Up to this many spans in view, a row is drawn from its raw spans; past it, from its summary.
constexpr std::uint64_t kRawSpanBudget = 20000;

TimelinePlottable::TimelinePlottable(QCPAxis *keyAxis, QCPAxis *valueAxis)
    : QCPAbstractPlottable(keyAxis, valueAxis)
{
    setAntialiased(false);
    setSelectable(QCP::stNone);
}

void TimelinePlottable::setRuns(std::vector<RunDataPtr> runs)
{
    runs.erase(std::remove(runs.begin(), runs.end(), nullptr), runs.end());
    m_runs = std::move(runs);
    restack();
}

const RunDataPtr &TimelinePlottable::run() const
{
    static const RunDataPtr none;
    return m_runs.empty() ? none : m_runs.front();
}

void TimelinePlottable::restack()
{
    std::vector<const std::vector<TimelineRow> *> rows;
    for (const RunDataPtr &r : m_runs)
        rows.push_back(&r->rows());
    m_slots = stackRuns(rows);
}

double TimelinePlottable::rowHalfHeight(std::size_t slot) const
{
    if (slot >= m_slots.size())
        return 0.4;
    if (m_slots[slot].heading())
        return 0.5;
    return m_slots[slot].dataLane ? 0.22 : 0.42;
}

int TimelinePlottable::slotAt(double value) const
{
    const auto slot = std::lround(value);
    return slot >= 0 && slot < long(m_slots.size()) && std::abs(value - double(slot)) <= 0.5 ? int(slot) : -1;
}

int TimelinePlottable::rowAt(double value) const
{
    const int slot = slotAt(value);
    if (slot < 0 || m_slots[std::size_t(slot)].heading())
        return -1;
    return std::abs(value - slot) <= rowHalfHeight(std::size_t(slot)) ? slot : -1;
}

double TimelinePlottable::selectTest(const QPointF &, bool, QVariant *) const { return -1; }

QCPRange TimelinePlottable::getKeyRange(bool &foundRange, QCP::SignDomain) const
{
    // Every run's time starts at 0: the range is the longest run's.
    double end = 0;
    foundRange = false;
    for (const RunDataPtr &r : m_runs)
        if (r->spanCount() > 0) {
            foundRange = true;
            end = std::max(end, double(r->endNs()) / 1e6);
        }
    return foundRange ? QCPRange(0, end) : QCPRange(0, 1);
}

QCPRange TimelinePlottable::getValueRange(bool &foundRange, QCP::SignDomain, const QCPRange &) const
{
    foundRange = !m_runs.empty();
    return foundRange ? QCPRange(-0.6, double(m_slots.size()) - 0.4) : QCPRange(0, 1);
}

void TimelinePlottable::drawHeading(QCPPainter *painter, std::size_t slot, const QRect &area)
{
    // A tinted band across the plot under the run's name on the row axis, and a line where the
    // group above ends, so the groups read apart even on a projector.
    const double y0 = mValueAxis->coordToPixel(rowCenter(slot) - 0.5);
    const double y1 = mValueAxis->coordToPixel(rowCenter(slot) + 0.5);
    const double top = std::min(y0, y1), bottom = std::max(y0, y1);
    painter->setRenderHint(QPainter::Antialiasing, false);
    painter->setPen(Qt::NoPen);
    painter->setBrush(QColor(0x30, 0x40, 0x60, 28));
    painter->drawRect(QRectF(area.left(), top, area.width(), bottom - top));
    if (slot > 0) {
        QPen pen(QColor(0x30, 0x40, 0x60, 200));
        pen.setWidthF(2.0 * m_lineScale);
        painter->setPen(pen);
        painter->drawLine(QPointF(area.left(), top), QPointF(area.right() + 1, top));
    }
}

void TimelinePlottable::draw(QCPPainter *painter)
{
    m_lastMarks = 0;
    if (m_runs.empty())
        return;
    const QRect area = mKeyAxis->axisRect()->rect();
    const QCPRange keys = mKeyAxis->range();
    const TimeMapping mapping(keys.lower * 1e6, keys.upper * 1e6, area.left(), area.width());
    // Only the slots in view are visited: the cost follows the rows shown, not the runs held.
    const QCPRange values = mValueAxis->range();
    const auto firstSlot = std::size_t(std::clamp(std::floor(values.lower), 0.0, double(m_slots.size())));
    const auto endSlot = std::size_t(std::clamp(std::ceil(values.upper) + 1, 0.0, double(m_slots.size())));
    for (std::size_t r = firstSlot; r < endSlot; ++r) {
        const double c = rowCenter(r), h = rowHalfHeight(r);
        if (c + h < values.lower || c - h > values.upper)
            continue;
        const TimelineSlot &slot = m_slots[r];
        if (slot.heading()) {
            drawHeading(painter, r, area);
            continue;
        }
        const double yTop = mValueAxis->coordToPixel(c - h);
        const double yBottom = mValueAxis->coordToPixel(c + h);
        const double top = std::min(yTop, yBottom), height = std::abs(yBottom - yTop);
        m_marks.clear();
        layoutVisible(*m_runs[slot.run], std::size_t(slot.row), mapping);
        m_lastMarks += m_marks.size();
        // Gathered per phase and drawn with one call each: a live 16-worker view has tens of
        // thousands of marks a frame, and a fillRect each cost the GUI thread a fifth of a core.
        for (auto &b : m_batches)
            b.fills.clear(), b.outlines.clear();
        m_hatches.clear();
        for (const TimelineMark &mark : m_marks) {
            const double x0 = std::max(mark.x0, double(area.left()) - 2.0);
            const double x1 = std::min(mark.x1, double(area.right()) + 2.0);
            const QRectF rect(x0, top, std::max(1.0, x1 - x0), height);
            Batch &b = m_batches[std::size_t(mark.phase < Phase::Count ? mark.phase : Phase::Wait)];
            b.fills.push_back(rect);
            // Outlines only where there is room; a delay is always outlined.
            if (rect.width() >= 5 || mark.phase == Phase::Delay)
                b.outlines.push_back(rect.adjusted(0.5, 0.5, -0.5, -0.5));
            // The part the OS did not run the worker, hatched at the span's end (at a barrier
            // it is the end; inside compute it is spread, so its share is what is drawn).
            if (!m_lastDrawnFromSummary && mark.count == 1 && mark.first < m_spans.size()) {
                const Record &span = m_spans[mark.first];
                const double off = offCpuNs(span);
                const double width = (mark.x1 - mark.x0) * off / std::max(1.0, double(span.duration()));
                const double from = std::max(mark.x1 - width, x0), to = std::min(mark.x1, x1);
                if (width >= 1.0 && to > from)
                    m_hatches.push_back(QRectF(from, top, to - from, height));
            }
        }
        painter->setRenderHint(QPainter::Antialiasing, false);
        for (std::size_t p = 0; p < m_batches.size(); ++p) {
            const Batch &b = m_batches[p];
            if (b.fills.isEmpty())
                continue;
            const PhaseStyle &st = phaseStyle(Phase(p));
            painter->setPen(Qt::NoPen);
            if (Phase(p) == Phase::Wait || Phase(p) == Phase::Pause) {
                painter->setBrush(QColor(0xEE, 0xEE, 0xEE)); // behind the hatch
                painter->drawRects(b.fills);
            }
            painter->setBrush(st.brush);
            painter->drawRects(b.fills);
            if (!b.outlines.isEmpty()) {
                QPen pen = st.outline;
                pen.setWidthF(std::max(1.0, pen.widthF()) * m_lineScale);
                painter->setPen(pen);
                painter->setBrush(Qt::NoBrush);
                painter->drawRects(b.outlines);
            }
        }
        if (!m_hatches.isEmpty()) {
            painter->setPen(Qt::NoPen);
            painter->setBrush(offCpuStyle().brush);
            painter->drawRects(m_hatches);
        }
    }
}

void TimelinePlottable::layoutVisible(const RunData &run, std::size_t r, const TimeMapping &mapping)
{
    const TraceModel &trace = run.trace();
    const RowLod &lod = trace.lod(r);
    const auto t0 = std::int64_t(mapping.startNs()), t1 = std::int64_t(std::ceil(mapping.endNs()));
    const int level = lod.levelFor(mapping.nsPerPixel());
    if (lod.countIn(level, t0, t1) <= kRawSpanBudget) {
        try {
            trace.spansIn(r, t0, t1, m_spans);
            layoutRow(m_spans, mapping, kMinMarkWidthPx, m_marks);
            m_lastDrawnFromSummary = false;
            return;
        } catch (const StoreError &) {
            m_marks.clear(); // a damaged row file: its summary still draws
        }
    }
    layoutSummary(lod.level(level), RowLod::bucketNs(level), mapping, kMinMarkWidthPx, m_marks);
    m_lastDrawnFromSummary = true;
}

void TimelinePlottable::drawLegendIcon(QCPPainter *painter, const QRectF &rect) const
{
    painter->fillRect(rect, phaseStyle(Phase::Forward).brush);
}

} // namespace syncopate
