#include "timelineplottable.h"

#include "phasestyle.h"

#include <QPainter>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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

void TimelinePlottable::drawHeading(QPainter *painter, std::size_t slot, const QRect &area)
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

void TimelinePlottable::setCaching(bool on)
{
    m_caching = on;
    m_cache = {};
}

void TimelinePlottable::draw(QCPPainter *painter)
{
    if (m_runs.empty())
        return;
    const QRect area = mKeyAxis->axisRect()->rect();
    const QCPRange keys = mKeyAxis->range();
    const TimeMapping mapping(keys.lower * 1e6, keys.upper * 1e6, area.left(), area.width());
    if (m_caching && !painter->modes().testFlag(QCPPainter::pmVectorized) &&
        !painter->modes().testFlag(QCPPainter::pmNoCaching)) {
        drawCached(painter, area, mapping);
        return;
    }
    m_lastMarks = 0;
    m_lastFull = true;
    drawSlots(painter, area, mapping, area.left());
}

void TimelinePlottable::setBackdrop(const QColor &color)
{
    const QColor backdrop = color.isValid() && color.alpha() == 255 ? color : QColor();
    if (backdrop != m_backdrop)
        m_cache = {};
    m_backdrop = backdrop;
}

bool TimelinePlottable::opaqueImage() const
{
    // drawGrid draws the key axis' main grid; with a sub-grid or a value-axis grid beneath,
    // the image stays transparent.
    return m_backdrop.isValid() && !mKeyAxis->grid()->subGridVisible() && !mValueAxis->grid()->visible();
}

bool TimelinePlottable::coversArea() const
{
    return m_caching && !m_runs.empty() && opaqueImage() && visible();
}

void TimelinePlottable::drawGrid(QCPPainter *painter) const
{
    // As QCPGrid::drawGridLines draws the key axis' grid (which lies beneath the opaque image):
    // the zero line where the range spans 0, then a line at each tick, at the same pixels.
    const QCPGrid *grid = mKeyAxis->grid();
    if (!grid->visible() || !grid->realVisibility())
        return;
    const QRect r = mKeyAxis->axisRect()->rect();
    auto antialias = [&](bool own, QCP::AntialiasedElement e) {
        if (mParentPlot->notAntialiasedElements().testFlag(e))
            own = false;
        else if (mParentPlot->antialiasedElements().testFlag(e))
            own = true;
        painter->setAntialiasing(own);
    };
    auto line = [&](double coord) {
        const double t = mKeyAxis->coordToPixel(coord);
        painter->drawLine(QLineF(t, r.bottom(), t, r.top()));
    };
    const QVector<double> ticks = mKeyAxis->tickVector();
    int zero = -1;
    const QCPRange range = mKeyAxis->range();
    if (grid->zeroLinePen().style() != Qt::NoPen && range.lower < 0 && range.upper > 0) {
        antialias(grid->antialiasedZeroLine(), QCP::aeZeroLine);
        painter->setPen(grid->zeroLinePen());
        for (int i = 0; i < ticks.size(); ++i)
            if (std::abs(ticks[i]) < range.size() * 1e-6) {
                zero = i;
                line(ticks[i]);
                break;
            }
    }
    antialias(grid->antialiased(), QCP::aeGrid);
    painter->setPen(grid->pen());
    for (int i = 0; i < ticks.size(); ++i)
        if (i != zero)
            line(ticks[i]);
    painter->setAntialiasing(false);
}

double TimelinePlottable::tickStep() const
{
    // The ticks are multiples of a step that follows from the range's width alone: the same
    // while the view slides, so the grid scrolled with the image stays where it belongs.
    const QVector<double> ticks = mKeyAxis->tickVector();
    return ticks.size() >= 2 ? ticks[1] - ticks[0] : 0.0;
}

TimelinePlottable::Plan TimelinePlottable::plan(const QRect &area, const TimeMapping &mapping, qreal dpr) const
{
    const Cache &c = m_cache;
    Plan plan;
    for (const RunDataPtr &r : m_runs) {
        plan.runs.push_back(r.get());
        plan.rows.push_back(r->rows().size());
    }
    const double nsPerPixel = mapping.nsPerPixel();
    plan.opaque = opaqueImage();
    bool reuse = !c.image.isNull() && c.area == area && c.dpr == dpr && c.values == mValueAxis->range() &&
                 c.lineScale == m_lineScale && c.runs == plan.runs && c.rows == plan.rows && c.opaque == plan.opaque &&
                 std::abs(c.tickStep - tickStep()) <= 1e-9 * std::abs(c.tickStep) &&
                 std::abs(c.nsPerPixel - nsPerPixel) <= 1e-9 * nsPerPixel;
    // Reused when the view slid right by whole device pixels (TimelineView::refresh snaps the
    // live window to them).
    const double shift = reuse ? (mapping.startNs() - c.startNs) / nsPerPixel : 0.0;
    const long shiftPx = std::lround(shift * dpr);
    reuse = reuse && shiftPx >= 0 && std::abs(shift * dpr - double(shiftPx)) < 1e-3 && shiftPx < c.image.width();
    if (!reuse)
        return plan;
    // Redraw the time that came into view and whatever arrived since the last frame: spans
    // are recorded when they end, so one that started long ago may be new.
    const double right = double(area.left() + area.width());
    double fromX = right - double(shiftPx) / dpr;
    for (std::size_t i = 0; i < m_runs.size(); ++i) {
        const std::int64_t since = m_runs[i]->earliestStartSince(c.appended[i]);
        if (since == std::numeric_limits<std::int64_t>::min())
            fromX = area.left();
        else if (since != std::numeric_limits<std::int64_t>::max())
            fromX = std::min(fromX, std::floor(mapping.toPixel(double(since))) - 1.0);
    }
    fromX = std::max(fromX, double(area.left()));
    // Whole device pixels, so that the strip's edge meets the scrolled part exactly.
    plan.reuse = true;
    plan.shiftPx = shiftPx;
    plan.fromPx = std::clamp(long(std::floor((fromX - area.left()) * dpr)), 0L, long(c.image.width()));
    return plan;
}

std::optional<TimelinePlottable::NextDraw> TimelinePlottable::nextDraw(qreal dpr) const
{
    if (m_runs.empty() || !m_caching || !visible())
        return std::nullopt;
    const QRect area = mKeyAxis->axisRect()->rect();
    const QCPRange keys = mKeyAxis->range();
    const Plan p = plan(area, TimeMapping(keys.lower * 1e6, keys.upper * 1e6, area.left(), area.width()), dpr);
    if (!p.reuse)
        return std::nullopt;
    return NextDraw{p.shiftPx, p.fromPx};
}

void TimelinePlottable::drawCached(QCPPainter *painter, const QRect &area, const TimeMapping &mapping)
{
    Cache &c = m_cache;
    const qreal dpr = painter->device() ? painter->device()->devicePixelRatioF() : 1.0;
    Plan plan = this->plan(area, mapping, dpr);
    const bool reuse = plan.reuse;
    const bool opaque = plan.opaque;
    const double nsPerPixel = mapping.nsPerPixel();
    // With an opaque backdrop the image holds what lies beneath the marks too (the backdrop
    // and the key axis' grid): it is copied onto the plot, not blended, and the paint buffer
    // need not be filled beneath it (TimelineView::updateLayout).
    const double right = double(area.left() + area.width());
    const long fromPx = plan.fromPx;
    const double fromX = area.left() + double(fromPx) / dpr;
    const QRgb clear = opaque ? m_backdrop.rgba() : 0u;
    if (reuse) {
        // The image is a ring: sliding the view moves where its left edge is instead of moving
        // every pixel (a memmove of the whole image each frame was a twentieth of the GUI
        // thread's time). The columns from fromPx on are cleared for the strip.
        const long width = c.image.width();
        c.offset = (c.offset + plan.shiftPx) % width;
        for (const auto &[physical, columns] : ringPieces(c.offset, width, fromPx, width))
            for (int y = 0; y < c.image.height(); ++y) {
                auto *line = reinterpret_cast<QRgb *>(c.image.scanLine(y));
                std::fill(line + physical, line + physical + columns, clear);
            }
    } else {
        c.image = QImage(QSize(int(std::ceil(area.width() * dpr)), int(std::ceil(area.height() * dpr))),
                         opaque ? QImage::Format_RGB32 : QImage::Format_ARGB32_Premultiplied);
        c.image.setDevicePixelRatio(dpr);
        c.image.fill(clear);
        c.offset = 0;
    }
    m_lastFromPx = fromPx;
    m_lastFull = !reuse;
    const long width = c.image.width();
    if (fromX < right) {
        m_lastMarks = 0;
        QCPPainter p(&c.image);
        long logical = fromPx; // the strip's columns, in at most two pieces of the ring
        for (const auto &[physical, columns] : ringPieces(c.offset, width, fromPx, width)) {
            const double x0 = area.left() + double(logical) / dpr, x1 = area.left() + double(logical + columns) / dpr;
            p.save();
            p.translate(double(physical - logical) / dpr - area.left(), -area.top());
            p.setClipRect(QRectF(x0, area.top(), x1 - x0, area.height()));
            if (opaque)
                drawGrid(&p);
            drawSlots(&p, area, mapping, x0, x1);
            p.restore();
            logical += columns;
        }
    }
    c.area = area;
    c.dpr = dpr;
    c.startNs = mapping.startNs();
    c.nsPerPixel = nsPerPixel;
    c.values = mValueAxis->range();
    c.lineScale = m_lineScale;
    c.opaque = opaque;
    c.tickStep = tickStep();
    c.runs = std::move(plan.runs);
    c.rows = std::move(plan.rows);
    c.appended.clear();
    for (const RunDataPtr &r : m_runs)
        c.appended.push_back(r->appended());
    // The view's left edge is at column offset of the ring: two copies, end to end.
    const double height = c.image.height();
    painter->drawImage(QPointF(area.topLeft()), c.image, QRectF(double(c.offset), 0, double(width - c.offset), height));
    if (c.offset > 0)
        painter->drawImage(QPointF(area.left() + double(width - c.offset) / dpr, area.top()), c.image,
                           QRectF(0, 0, double(c.offset), height));
}

std::array<std::pair<long, long>, 2> TimelinePlottable::ringPieces(long offset, long width, long from, long to)
{
    // Logical columns [from, to) of a ring of width columns whose logical 0 is at offset: where
    // they are (physical column, count), in logical order; a second piece only past the wrap.
    std::array<std::pair<long, long>, 2> pieces{};
    if (to <= from || width <= 0)
        return pieces;
    const long start = (offset + from) % width;
    const long first = std::min(to - from, width - start);
    pieces[0] = {start, first};
    pieces[1] = {0, to - from - first};
    return pieces;
}

void TimelinePlottable::drawSlots(QPainter *painter, const QRect &area, const TimeMapping &full, double fromX,
                                  double toX)
{
    // The strip from fromX to toX (the right edge by default), on the same scale as the view.
    const double right = double(area.left() + area.width());
    toX = std::isnan(toX) ? right : std::min(toX, right);
    const TimeMapping mapping = fromX <= area.left() && toX >= right
                                    ? full
                                    : TimeMapping(full.toTime(fromX), full.toTime(toX), fromX, toX - fromX);
    // Patterns (waits, pauses, off-CPU time) are anchored at run time 0, so that they move with
    // the marks: a scrolled image and its new strip meet without a seam.
    const double origin = full.toPixel(0.0);
    painter->setBrushOrigin(QPointF(origin - 64.0 * std::floor((origin - area.left()) / 64.0), area.top()));
    // Only the slots in view are visited: the cost follows the rows shown, not the runs held.
    const QCPRange values = mValueAxis->range();
    const auto firstSlot = std::size_t(std::clamp(std::floor(values.lower), 0.0, double(m_slots.size())));
    const auto endSlot = std::size_t(std::clamp(std::ceil(values.upper) + 1, 0.0, double(m_slots.size())));
    // Marks are gathered per phase across the rows (which do not overlap) and drawn with one
    // call each: a live 16-worker view has tens of thousands of marks a frame, and a fillRect
    // each cost the GUI thread a fifth of a core; a call per row and phase, a fourteenth.
    const auto clearBatches = [this] {
        for (auto &b : m_batches)
            b.fills.clear(), b.outlines.clear();
        m_hatches.clear();
    };
    clearBatches();
    for (std::size_t r = firstSlot; r < endSlot; ++r) {
        const double c = rowCenter(r), h = rowHalfHeight(r);
        if (c + h < values.lower || c - h > values.upper)
            continue;
        const TimelineSlot &slot = m_slots[r];
        if (slot.heading()) {
            drawBatches(painter); // the rows above first: the heading's band is drawn over none of them
            clearBatches();
            drawHeading(painter, r, area);
            continue;
        }
        const double yTop = mValueAxis->coordToPixel(c - h);
        const double yBottom = mValueAxis->coordToPixel(c + h);
        const double top = std::min(yTop, yBottom), height = std::abs(yBottom - yTop);
        m_marks.clear();
        layoutVisible(*m_runs[slot.run], std::size_t(slot.row), mapping);
        m_lastMarks += m_marks.size();
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
    }
    drawBatches(painter);
}

void TimelinePlottable::drawBatches(QPainter *painter) const
{
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

void TimelinePlottable::layoutVisible(const RunData &run, std::size_t r, const TimeMapping &mapping)
{
    const TraceModel &trace = run.trace();
    const auto t0 = std::int64_t(mapping.startNs()), t1 = std::int64_t(std::ceil(mapping.endNs()));
    // Counted on the finest level, which is always current: the coarser ones are settled only
    // for a summary (settling every row's, every live frame, was a thirtieth of the GUI thread).
    if (trace.spansStartingIn(r, t0, t1) <= kRawSpanBudget) {
        try {
            trace.spansIn(r, t0, t1, m_spans);
            layoutRow(m_spans, mapping, kMinMarkWidthPx, m_marks);
            m_lastDrawnFromSummary = false;
            return;
        } catch (const StoreError &) {
            m_marks.clear(); // a damaged row file: its summary still draws
        }
    }
    const RowLod &lod = trace.lod(r);
    const int level = lod.levelFor(mapping.nsPerPixel());
    layoutSummary(lod.level(level), RowLod::bucketNs(level), mapping, kMinMarkWidthPx, m_marks);
    m_lastDrawnFromSummary = true;
}

void TimelinePlottable::drawLegendIcon(QCPPainter *painter, const QRectF &rect) const
{
    painter->fillRect(rect, phaseStyle(Phase::Forward).brush);
}

} // namespace syncopate
