#include "timelineplottable.h"

#include "phasestyle.h"

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

void TimelinePlottable::setRun(RunDataPtr run) { m_run = std::move(run); }

double TimelinePlottable::rowHalfHeight(std::size_t row) const
{
    if (!m_run || row >= m_run->rows().size())
        return 0.4;
    return m_run->rows()[row].dataLane ? 0.22 : 0.42;
}

int TimelinePlottable::rowAt(double value) const
{
    if (!m_run)
        return -1;
    const int row = int(std::lround(value));
    if (row < 0 || row >= int(m_run->rows().size()))
        return -1;
    return std::abs(value - row) <= rowHalfHeight(std::size_t(row)) ? row : -1;
}

double TimelinePlottable::selectTest(const QPointF &, bool, QVariant *) const { return -1; }

QCPRange TimelinePlottable::getKeyRange(bool &foundRange, QCP::SignDomain) const
{
    foundRange = m_run && m_run->spanCount() > 0;
    return foundRange ? QCPRange(0, double(m_run->endNs()) / 1e6) : QCPRange(0, 1);
}

QCPRange TimelinePlottable::getValueRange(bool &foundRange, QCP::SignDomain, const QCPRange &) const
{
    foundRange = m_run != nullptr;
    return foundRange ? QCPRange(-0.6, double(m_run->rows().size()) - 0.4) : QCPRange(0, 1);
}

void TimelinePlottable::draw(QCPPainter *painter)
{
    m_lastMarks = 0;
    if (!m_run)
        return;
    const QRect area = mKeyAxis->axisRect()->rect();
    const QCPRange keys = mKeyAxis->range();
    const TimeMapping mapping(keys.lower * 1e6, keys.upper * 1e6, area.left(), area.width());
    const auto &rows = m_run->rows();
    const QCPRange values = mValueAxis->range();
    for (std::size_t r = 0; r < rows.size(); ++r) {
        const double c = rowCenter(r), h = rowHalfHeight(r);
        if (c + h < values.lower || c - h > values.upper)
            continue;
        const double yTop = mValueAxis->coordToPixel(c - h);
        const double yBottom = mValueAxis->coordToPixel(c + h);
        const double top = std::min(yTop, yBottom), height = std::abs(yBottom - yTop);
        m_marks.clear();
        layoutVisible(r, mapping);
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

void TimelinePlottable::layoutVisible(std::size_t r, const TimeMapping &mapping)
{
    const TraceModel &trace = m_run->trace();
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
