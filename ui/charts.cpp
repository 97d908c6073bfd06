#include "charts.h"

#include "chartfeed.h"
#include "phasestyle.h"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QEvent>
#include <QScopeGuard>
#include <QSpinBox>
#include <QVarLengthArray>
#include <QVBoxLayout>

#include <qcustomplot.h>

#include <cmath>
#include <limits>

namespace syncopate {

// Per-worker curves are 1 px: Qt's raster engine strokes pens of at most one pixel on its fast
// path, wider ones through a path fill that cost a live 16-worker run most of a core.
constexpr double kWorkerLine = 1.0;
namespace {

QCPTextElement *titleOf(QCustomPlot *plot)
{
    return plot->plotLayout()->elementCount() > 0
               ? qobject_cast<QCPTextElement *>(plot->plotLayout()->element(0, 0))
               : nullptr;
}

// Trailing mean over `window` points (1 = none), as TrailingMean gives it point by point.
QVector<double> smooth(const QVector<double> &v, int window)
{
    if (window <= 1)
        return v;
    TrailingMean mean([&](std::size_t i) { return v[int(i)]; }, window);
    QVector<double> out(v.size());
    for (int i = 0; i < v.size(); ++i)
        out[i] = mean.at(std::size_t(i));
    return out;
}

QString modeLabel(const RunData &run)
{
    const auto &c = run.config();
    QString s = QString::fromStdString(c.mode);
    if (c.checkpoint && c.mode != "checkpointed")
        s += QStringLiteral("+ckpt");
    return s;
}

// Mean over workers of a counter per step.
void meanPerStep(const RunData &run, CounterId id, QVector<double> &steps, QVector<double> &time,
                 QVector<double> &values)
{
    std::vector<double> sum, t;
    std::vector<int> n;
    for (int w = 0; w < run.workers(); ++w)
        for (const auto &p : run.counter(id, w)) {
            if (sum.size() <= p.step) {
                sum.resize(p.step + 1, 0.0);
                t.resize(p.step + 1, 0.0);
                n.resize(p.step + 1, 0);
            }
            sum[p.step] += p.value;
            t[p.step] = std::max(t[p.step], p.tNs / 1e6);
            ++n[p.step];
        }
    for (std::size_t s = 0; s < sum.size(); ++s)
        if (n[s] > 0) {
            steps.push_back(double(s));
            time.push_back(t[s]);
            values.push_back(sum[s] / n[s]);
        }
}

} // namespace

void spreadBand(std::vector<std::pair<double, double>> points, int bins, QVector<double> &x,
                QVector<double> &lowest, QVector<double> &highest)
{
    x.clear(), lowest.clear(), highest.clear();
    if (points.empty() || bins < 1)
        return;
    std::sort(points.begin(), points.end());
    const double k0 = points.front().first, k1 = points.back().first;
    const double width = k1 > k0 ? (k1 - k0) / bins : 1.0;
    for (std::size_t i = 0; i < points.size();) {
        const auto bin = std::min<std::int64_t>(bins - 1, std::int64_t((points[i].first - k0) / width));
        double lo = points[i].second, hi = lo, keys = 0;
        std::size_t j = i;
        for (; j < points.size() && std::min<std::int64_t>(bins - 1, std::int64_t((points[j].first - k0) / width)) == bin; ++j) {
            lo = std::min(lo, points[j].second);
            hi = std::max(hi, points[j].second);
            keys += points[j].first;
        }
        x.push_back(keys / double(j - i)); // the mean key: a bin's points may not fill it
        lowest.push_back(lo);
        highest.push_back(hi);
        i = j;
    }
}

namespace {

// A graph's points given whole, or taken away, through these (or feedGraph): a ColumnGraph's
// summaries of them are then dropped.
void setPoints(QCPGraph *graph, const QVector<double> &keys, const QVector<double> &values, bool sorted = false)
{
    graph->setData(keys, values, sorted);
    pointsChanged(graph, 0);
}

void clearPoints(QCPGraph *graph)
{
    graph->data()->clear();
    pointsChanged(graph, 0);
}

// An axis' mapping as a + b * f(coordinate), f the identity or log, for ColumnGraph:
// QCPAxis::coordToPixel per point (two logs each on a log axis) cost more than the drawing.
struct AxisMap {
    bool log = false;
    double a = 0, b = 0;
    AxisMap(const QCPAxis *axis)
    {
        const QCPRange r = axis->range();
        log = axis->scaleType() == QCPAxis::stLogarithmic;
        const double f0 = log ? std::log(r.lower) : r.lower, f1 = log ? std::log(r.upper) : r.upper;
        b = (axis->coordToPixel(r.upper) - axis->coordToPixel(r.lower)) / (f1 - f0);
        a = axis->coordToPixel(r.lower) - b * f0;
    }
    double operator()(double v) const { return a + b * (log ? std::log(v) : v); }
    bool valid(const QCPAxis *axis) const
    {
        return std::isfinite(a) && std::isfinite(b) && (!log || axis->range().lower > 0);
    }
};

// A worker's curve that, while its run is live, draws itself on screen as one vertical span per
// pixel column (from the lowest to the highest point the line passes there) instead of a
// polyline. Sixteen noisy curves of thousands of points each drew their columns' heights several
// times over through Qt's antialiased line rasteriser, one pixel a span: 30 ms a replot. Only
// where the curve has at least a point per column (where a line is a column of pixels anyway),
// never for exports (their painters say pmNoCaching or pmVectorized), and the finished run is
// drawn by QCPGraph again. Dashes follow the pen's pattern along the columns' pixels.
//
// Its points are summarised in blocks (lowest and highest value, by sign), kept from one replot
// to the next for the points that did not change: the value range that rescaling asks for and
// the columns then read a block where it lies inside what they look for, not each point. A live
// chart's sixteen curves of up to 131072 points each were read whole twice a second, 40% of the
// GUI thread's time six minutes into a run.
class ColumnGraph : public QCPGraph, public PointsWatcher {
public:
    using QCPGraph::QCPGraph;
    void setLive(bool live) { m_live = live; }
    void pointsChangedFrom(std::size_t index) override
    {
        m_blocks.resize(std::min(m_blocks.size(), index / kBlock));
    }
    QCPRange getValueRange(bool &foundRange, QCP::SignDomain inSignDomain = QCP::sdBoth,
                           const QCPRange &inKeyRange = QCPRange()) const override;

    // For tests: whether the summaries are used (else every point is read, as QCPGraph does).
    static bool s_useBlocks;

protected:
    void draw(QCPPainter *painter) override;

private:
    static constexpr std::size_t kBlock = 16;
    struct Block {
        // Over the block's values but NaN (infinities too, as QCPDataContainer::valueRange
        // takes them): all, the positive ones and the negative ones.
        double lo, hi, posLo, posHi, negLo, negHi;
        bool gap; // a NaN key or value: a gap in the line, which the columns must see
    };
    // The summaries of the whole blocks of points, brought up to date.
    const std::vector<Block> &blocks() const;
    // The columns' pieces of pixels (dashes cut them) and the lines across columns without a
    // point.
    struct Columns {
        std::vector<QRect> rects;
        std::vector<QLineF> lines;
    };
    bool drawsColumns(const QCPPainter *painter) const;
    void columns(Columns &out) const;
    bool paintDirectly(QCPPainter *painter, const std::vector<ColumnGraph *> &group,
                       const std::vector<Columns> &pieces);
    bool m_live = false;
    mutable std::vector<Block> m_blocks;
    mutable const QCPGraphDataContainer *m_blocksOf = nullptr; // setData(container) changes it
    QImage m_pixels; // paintDirectly's, kept from one replot to the next
    const QCPPainter *m_drawnWith = nullptr; // drawn with the graph before it, by that painter
};

// The first of the graphs that follow each other on a layer and draw columns draws them all:
// the pieces of a solid curve's columns that a later solid curve covers are left out (they would
// be painted over: workers' noisy bands mostly cover each other), and the picture is the same.
void ColumnGraph::draw(QCPPainter *painter)
{
    if (m_drawnWith == painter) {
        m_drawnWith = nullptr;
        return;
    }
    m_drawnWith = nullptr;
    if (!drawsColumns(painter)) {
        QCPGraph::draw(painter);
        return;
    }
    std::vector<ColumnGraph *> group{this};
    const QList<QCPLayerable *> kids = layer()->children();
    for (auto i = kids.indexOf(this) + 1; i < kids.size(); ++i) {
        if (!kids[i]->realVisibility())
            continue;
        auto *g = dynamic_cast<ColumnGraph *>(kids[i]);
        if (!g || g->keyAxis() != keyAxis() || g->valueAxis() != valueAxis() || !g->drawsColumns(painter))
            break;
        group.push_back(g);
    }
    std::vector<Columns> pieces(group.size());
    for (std::size_t i = 0; i < group.size(); ++i)
        group[i]->columns(pieces[i]);
    if (paintDirectly(painter, group, pieces)) {
        for (std::size_t i = 1; i < group.size(); ++i)
            group[i]->m_drawnWith = painter;
        return;
    }
    // Per pixel column, the rows that later solid curves fill (one interval: where they meet).
    const QRect clip = clipRect();
    const int x0 = clip.left() - 2;
    std::vector<std::pair<int, int>> cover(std::size_t(clip.width() + 4), {1, 0});
    for (std::size_t i = group.size(); i-- > 0;) {
        std::vector<QRect> kept;
        kept.reserve(pieces[i].rects.size());
        for (const QRect &r : pieces[i].rects) {
            const int x = r.x() - x0;
            const auto [top, bottom] = x >= 0 && x < int(cover.size()) ? cover[std::size_t(x)] : std::pair(1, 0);
            if (top > bottom || bottom < r.top() || top > r.bottom()) {
                kept.push_back(r);
                continue;
            }
            if (r.top() < top)
                kept.emplace_back(r.x(), r.top(), 1, top - r.top());
            if (r.bottom() > bottom)
                kept.emplace_back(r.x(), bottom + 1, 1, r.bottom() - bottom);
        }
        const QPen &pen = group[i]->pen();
        if (pen.style() == Qt::SolidLine && pen.color().alpha() == 255)
            for (const QRect &r : pieces[i].rects) {
                const int x = r.x() - x0;
                if (x < 0 || x >= int(cover.size()))
                    continue;
                auto &[top, bottom] = cover[std::size_t(x)];
                if (top > bottom || r.height() > bottom - top + 1)
                    top = r.top(), bottom = r.bottom();
                else if (r.top() <= bottom + 1 && r.bottom() >= top - 1)
                    top = std::min(top, r.top()), bottom = std::max(bottom, r.bottom());
            }
        pieces[i].rects.swap(kept);
    }
    painter->save();
    painter->setAntialiasing(false);
    for (std::size_t i = 0; i < group.size(); ++i) {
        if (i > 0)
            group[i]->m_drawnWith = painter;
        if (!pieces[i].lines.empty()) {
            painter->setPen(group[i]->pen());
            for (const QLineF &l : pieces[i].lines)
                painter->drawLine(l);
        }
        painter->setPen(Qt::NoPen);
        painter->setBrush(group[i]->pen().color());
        painter->drawRects(pieces[i].rects.data(), int(pieces[i].rects.size()));
    }
    painter->restore();
}

// Opaque curves on a painter without a transform: their columns are written straight into an
// image of the pixels they reach, drawn onto the plot at once. Through the raster engine each
// one-pixel column cost about 0.4 us (16 live curves: half of a replot); a pixel written costs
// nanoseconds. Later curves overwrite earlier ones, as painting them in order does, so what
// they cover needs no working out. Lines across columns without a point are rasterised a
// column at a time, from where the line enters the column to where it leaves; dashed ones are
// left to QPainter (false: draw as before).
bool ColumnGraph::paintDirectly(QCPPainter *painter, const std::vector<ColumnGraph *> &group,
                                const std::vector<Columns> &pieces)
{
    // QCPPainter shifts by half a pixel while antialiasing (crisp lines); the columns are
    // whole pixels, as drawn without it. A translation by whole device pixels keeps them so.
    painter->save();
    painter->setAntialiasing(false);
    const auto restore = qScopeGuard([painter] { painter->restore(); });
    const QTransform &t = painter->transform();
    const qreal dpr = painter->device() ? painter->device()->devicePixelRatioF() : 1.0;
    auto whole = [&](qreal v) { return std::abs(v * dpr - std::round(v * dpr)) < 1e-6; };
    if (!painter->device() || t.type() > QTransform::TxTranslate || !whole(t.dx()) || !whole(t.dy()))
        return false;
    QRect box;
    for (std::size_t i = 0; i < group.size(); ++i) {
        const QPen &pen = group[i]->pen();
        if (pen.color().alpha() != 255)
            return false;
        for (const QRect &r : pieces[i].rects)
            box |= r;
        for (const QLineF &l : pieces[i].lines)
            box |= QRectF(l.p1(), l.p2()).normalized().toAlignedRect().adjusted(-1, -1, 1, 1);
    }
    box &= clipRect();
    if (box.isEmpty())
        return true;
    const bool unscaled = dpr == 1.0;
    auto dev = [&](int v, int origin) { return unscaled ? v - origin : int(std::lround((v - origin) * dpr)); };
    const QSize size(dev(box.right() + 1, box.left()), dev(box.bottom() + 1, box.top()));
    if (m_pixels.size() != size)
        m_pixels = QImage(size, QImage::Format_ARGB32_Premultiplied);
    m_pixels.fill(Qt::transparent);
    auto *bits = reinterpret_cast<QRgb *>(m_pixels.bits()); // detached once, not per row
    const auto stride = std::size_t(m_pixels.bytesPerLine()) / sizeof(QRgb);
    // Logical pixels [x] x [y0, y1], clipped to the box.
    auto fill = [&](int x, int y0, int y1, QRgb c) {
        if (x < box.left() || x > box.right())
            return;
        y0 = std::max(y0, box.top()), y1 = std::min(y1, box.bottom());
        const int dx0 = dev(x, box.left()), dx1 = std::min(size.width(), dev(x + 1, box.left()));
        const int dy1 = std::min(size.height(), dev(y1 + 1, box.top()));
        QRgb *p = bits + std::size_t(std::max(0, dev(y0, box.top()))) * stride;
        for (int y = dev(y0, box.top()); y < dy1; ++y, p += stride)
            for (int dx = dx0; dx < dx1; ++dx)
                p[dx] = c;
    };
    bool dashedLines = false;
    for (std::size_t i = 0; i < group.size(); ++i) {
        const QRgb c = group[i]->pen().color().rgba(); // opaque: premultiplied alike
        const bool solid = group[i]->pen().style() == Qt::SolidLine;
        dashedLines = dashedLines || (!solid && !pieces[i].lines.empty());
        for (const QLineF &l : pieces[i].lines) {
            if (!solid)
                break;
            QPointF a = l.p1(), b = l.p2();
            if (a.x() > b.x())
                std::swap(a, b);
            const double dx = b.x() - a.x();
            const int first = int(std::floor(a.x() + 0.5)), last = int(std::floor(b.x() + 0.5));
            for (int x = std::max(first, box.left()); x <= std::min(last, box.right()); ++x) {
                const double xs = std::max(a.x(), x - 0.5), xe = std::min(b.x(), x + 0.5);
                auto yAt = [&](double xx) { return dx > 0 ? a.y() + (xx - a.x()) / dx * (b.y() - a.y()) : a.y(); };
                const double ys = yAt(xs), ye = yAt(xe);
                fill(x, int(std::lround(std::min(ys, ye))), int(std::lround(std::max(ys, ye))), c);
            }
        }
        for (const QRect &r : pieces[i].rects)
            fill(r.x(), r.top(), r.bottom(), c);
    }
    m_pixels.setDevicePixelRatio(dpr);
    painter->drawImage(QPointF(box.topLeft()), m_pixels);
    // A dashed curve's lines across empty columns (rare: where its points thin out) keep their
    // pattern through QPainter, on top.
    if (dashedLines)
        for (std::size_t i = 0; i < group.size(); ++i)
            if (group[i]->pen().style() != Qt::SolidLine && !pieces[i].lines.empty()) {
                painter->setPen(group[i]->pen());
                for (const QLineF &l : pieces[i].lines)
                    painter->drawLine(l);
            }
    return true;
}

bool ColumnGraph::s_useBlocks = true;

const std::vector<ColumnGraph::Block> &ColumnGraph::blocks() const
{
    const QCPGraphDataContainer &data = *mDataContainer;
    if (m_blocksOf != &data) {
        m_blocks.clear();
        m_blocksOf = &data;
    }
    const std::size_t whole = std::size_t(data.size()) / kBlock;
    m_blocks.resize(std::min(m_blocks.size(), whole));
    m_blocks.reserve(whole);
    constexpr double inf = std::numeric_limits<double>::infinity();
    for (std::size_t b = m_blocks.size(); b < whole; ++b) {
        Block k{inf, -inf, inf, -inf, inf, -inf, false};
        const auto from = data.constBegin() + int(b * kBlock);
        for (auto it = from; it != from + int(kBlock); ++it) {
            const double v = it->value;
            k.gap = k.gap || std::isnan(it->key) || std::isnan(v);
            if (std::isnan(v))
                continue;
            k.lo = std::min(k.lo, v), k.hi = std::max(k.hi, v);
            if (v > 0)
                k.posLo = std::min(k.posLo, v), k.posHi = std::max(k.posHi, v);
            else if (v < 0)
                k.negLo = std::min(k.negLo, v), k.negHi = std::max(k.negHi, v);
        }
        m_blocks.push_back(k);
    }
    return m_blocks;
}

QCPRange ColumnGraph::getValueRange(bool &foundRange, QCP::SignDomain inSignDomain, const QCPRange &inKeyRange) const
{
    if (!s_useBlocks || inKeyRange != QCPRange())
        return QCPGraph::getValueRange(foundRange, inSignDomain, inKeyRange);
    // The whole blocks' summaries, then the points after them: the values QCPDataContainer's
    // valueRange takes (any but NaN; of a sign, those strictly of it).
    constexpr double inf = std::numeric_limits<double>::infinity();
    double lo = inf, hi = -inf;
    bool found = false;
    auto take = [&](double l, double h) {
        found = found || l <= h;
        lo = std::min(lo, l), hi = std::max(hi, h);
    };
    const std::vector<Block> &all = blocks();
    for (const Block &b : all) {
        if (inSignDomain == QCP::sdBoth)
            take(b.lo, b.hi);
        else if (inSignDomain == QCP::sdPositive)
            take(b.posLo, b.posHi);
        else
            take(b.negLo, b.negHi);
    }
    const QCPGraphDataContainer &data = *mDataContainer;
    for (auto it = data.constBegin() + int(all.size() * kBlock); it != data.constEnd(); ++it) {
        const double v = it->value;
        if (!std::isnan(v) && (inSignDomain == QCP::sdBoth || (inSignDomain == QCP::sdPositive ? v > 0 : v < 0)))
            take(v, v);
    }
    foundRange = found;
    return found ? QCPRange(lo, hi) : QCPRange();
}

bool ColumnGraph::drawsColumns(const QCPPainter *painter) const
{
    QCPAxis *keyAxis = mKeyAxis.data(), *valueAxis = mValueAxis.data();
    const QPen &pen = mPen;
    if (!m_live || !keyAxis || !valueAxis || keyAxis->orientation() != Qt::Horizontal ||
        painter->modes().testFlag(QCPPainter::pmNoCaching) || painter->modes().testFlag(QCPPainter::pmVectorized) ||
        mLineStyle != lsLine || !mScatterStyle.isNone() || mBrush.style() != Qt::NoBrush || selected() ||
        pen.style() == Qt::NoPen || pen.style() == Qt::CustomDashLine || pen.widthF() > 1.0 ||
        pen.brush().style() != Qt::SolidPattern || mDataContainer->isEmpty())
        return false;
    const QCPRange range = keyAxis->range();
    const auto begin = mDataContainer->findBegin(range.lower), end = mDataContainer->findEnd(range.upper);
    const double columns = std::abs(keyAxis->coordToPixel(range.upper) - keyAxis->coordToPixel(range.lower));
    if (!AxisMap(keyAxis).valid(keyAxis) || !AxisMap(valueAxis).valid(valueAxis))
        return false;
    return double(end - begin) >= std::max(2.0, columns); // sparse: QCPGraph's antialiased lines
}

void ColumnGraph::columns(Columns &out) const
{
    QCPAxis *keyAxis = mKeyAxis.data(), *valueAxis = mValueAxis.data();
    const QPen &pen = mPen;
    const QCPRange range = keyAxis->range();
    const auto begin = mDataContainer->findBegin(range.lower), end = mDataContainer->findEnd(range.upper);
    const QRect clip = clipRect();
    const double top = clip.top() - 2, bottom = clip.bottom() + 2;
    const AxisMap keyPixel(keyAxis), valuePixel(valueAxis);
    auto pixel = [&](double v) {
        return valuePixel.log && v <= 0 ? (valuePixel.b < 0 ? bottom : top) : std::clamp(valuePixel(v), top, bottom);
    };

    // Dash pattern in whole pixels (a 1 px pen's pattern is in pixels), and where along it we
    // are. The columns' pieces are gathered and filled at once: a fillRect each cost more than
    // its pixels.
    QVarLengthArray<int, 8> dashes;
    if (pen.style() != Qt::SolidLine)
        for (double d : pen.dashPattern())
            dashes.push_back(std::max(1, int(std::lround(d * std::max(1.0, pen.widthF())))));
    int dash = 0, dashLeft = dashes.isEmpty() ? 0 : dashes[0];
    std::vector<QRect> &rects = out.rects;
    rects.reserve(std::size_t(clip.width()) + 16);
    auto fillColumn = [&](int x, double y0, double y1) {
        int from = int(std::lround(std::min(y0, y1)));
        const int to = int(std::lround(std::max(y0, y1)));
        if (dashes.isEmpty()) {
            rects.emplace_back(x, from, 1, to - from + 1);
            return;
        }
        while (from <= to) {
            const int run = std::min(to - from + 1, dashLeft);
            if (dash % 2 == 0)
                rects.emplace_back(x, from, 1, run);
            from += run;
            if ((dashLeft -= run) == 0) {
                dash = (dash + 1) % int(dashes.size());
                dashLeft = dashes[dash];
            }
        }
    };

    // A column's points: the first and last (where the lines to its neighbours start), and the
    // pixel rows from its highest to its lowest.
    struct Column {
        int x = 0;
        QPointF first, last;
        double top = 0, bottom = 0;
        bool joined = false; // a line comes in from the column before
    };
    bool pending = false; // `col` waits for its right neighbour, whose line may lengthen it
    Column col;
    double lo = 0, hi = 0;
    QCPGraphData first, last;
    int x = 0;
    double nextKey = -qInf();
    bool open = false, joinNext = false;
    auto close = [&] { // the column being gathered is complete
        // A log each, so each value once: the first and last are often the lowest or highest.
        const double ylo = pixel(lo), yhi = hi == lo ? ylo : pixel(hi);
        auto y = [&](double v) { return v == lo ? ylo : v == hi ? yhi : pixel(v); };
        const double yfirst = y(first.value);
        Column c{x, QPointF(keyPixel(first.key), yfirst),
                 QPointF(keyPixel(last.key), last.value == first.value ? yfirst : y(last.value)),
                 std::min(ylo, yhi), std::max(ylo, yhi), joinNext};
        if (pending && c.joined) {
            if (c.x == col.x + 1) { // the line between them crosses from one to the other
                const QPointF a = col.last, b = c.first;
                const double t = b.x() > a.x() ? std::clamp((col.x + 0.5 - a.x()) / (b.x() - a.x()), 0.0, 1.0) : 0.5;
                const double y = a.y() + t * (b.y() - a.y());
                col.top = std::min(col.top, y), col.bottom = std::max(col.bottom, y);
                c.top = std::min(c.top, y), c.bottom = std::max(c.bottom, y);
            } else { // columns with no point between: a line across them
                out.lines.emplace_back(col.last, c.first);
            }
        }
        if (pending)
            fillColumn(col.x, col.top, col.bottom);
        col = c;
        pending = true;
        open = false;
        joinNext = true;
    };
    // Whole blocks of points inside the column being gathered are taken by their summaries.
    const auto base = mDataContainer->constBegin();
    static const std::vector<Block> kNoBlocks;
    const std::vector<Block> &summaries = s_useBlocks ? blocks() : kNoBlocks;
    for (auto it = begin; it != end; ++it) {
        if (open && it->key < nextKey) {
            for (auto i = std::size_t(it - base); i % kBlock == 0 && i / kBlock < summaries.size(); i += kBlock) {
                const Block &b = summaries[i / kBlock];
                const auto blockLast = it + int(kBlock - 1);
                if (b.gap || blockLast >= end || !(blockLast->key < nextKey))
                    break;
                lo = std::min(lo, b.lo), hi = std::max(hi, b.hi);
                last = *blockLast;
                it += int(kBlock);
            }
            if (it == end)
                break;
        }
        if (std::isnan(it->value) || std::isnan(it->key)) { // a gap in the line
            if (open)
                close();
            joinNext = false;
            continue;
        }
        if (open && it->key < nextKey) { // still in column x
            lo = std::min(lo, it->value), hi = std::max(hi, it->value);
            last = *it;
            continue;
        }
        // Column i holds the pixel coordinates [i - 0.5, i + 0.5), as a line's pixels do.
        // (Clamped: the point past each end of the range may lie far outside it.)
        const int px = int(std::floor(std::clamp(keyPixel(it->key), clip.left() - 1e6, clip.right() + 1e6) + 0.5));
        if (open && px == x) {
            lo = std::min(lo, it->value), hi = std::max(hi, it->value);
            last = *it;
            continue;
        }
        if (open)
            close();
        x = px, lo = hi = it->value;
        first = last = *it;
        open = true;
        // The first key of the next column (keys grow left to right: else every point asks).
        nextKey = keyPixel.b > 0 && !keyPixel.log ? (double(x) + 0.5 - keyPixel.a) / keyPixel.b : -qInf();
    }
    if (open)
        close();
    if (pending)
        fillColumn(col.x, col.top, col.bottom);
}

// Hands out a chart's graphs in order, creating each the first time: graphs are made once per
// set of runs and only refilled on later updates.
class GraphSlots {
public:
    GraphSlots(QCustomPlot *plot, double scale) : m_plot(plot), m_scale(scale) {}
    QCPGraph *next(const QString &name, QColor color, double width,
                   QCPGraph::LineStyle style = QCPGraph::lsLine, Qt::PenStyle pen = Qt::SolidLine)
    {
        if (m_next >= m_plot->graphCount()) {
            QCPGraph *g = new ColumnGraph(m_plot->xAxis, m_plot->yAxis);
            g->setName(name);
            g->setPen(QPen(color, width * m_scale, pen));
            g->setLineStyle(style);
            g->setAdaptiveSampling(true);
        }
        return m_plot->graph(m_next++);
    }

private:
    QCustomPlot *m_plot;
    double m_scale;
    int m_next = 0;
};

} // namespace

void setupChart(QCustomPlot *plot, const QString &title, const QString &xLabel,
                const QString &yLabel)
{
    if (!titleOf(plot)) {
        plot->plotLayout()->insertRow(0);
        auto *t = new QCPTextElement(plot, title, QFont(plot->font().family(), plot->font().pointSize() + 2, QFont::Bold));
        plot->plotLayout()->addElement(0, 0, t);
    } else {
        titleOf(plot)->setText(title);
    }
    titleOf(plot)->setProperty("fullText", title);
    plot->xAxis->setLabel(xLabel);
    plot->yAxis->setLabel(yLabel);
    plot->legend->setVisible(true);
    plot->legend->setBrush(QColor(255, 255, 255, 220));
    // Beside the plot, not over it: on a 720-line projector a chart is 200 pixels high and an
    // inset legend of seven entries covered its data. Top-aligned in its own column, above an
    // empty cell that takes the rest of the height.
    if (plot->legend->layout() == plot->axisRect()->insetLayout()) {
        plot->axisRect()->insetLayout()->take(plot->legend);
        plot->axisRect()->insetLayout()->simplify();
        auto *side = new QCPLayoutGrid;
        plot->plotLayout()->addElement(1, 1, side);
        side->addElement(0, 0, plot->legend);
        side->addElement(1, 0, new QCPLayoutElement(plot));
        side->setRowStretchFactor(0, 0.001);
        side->setMargins(QMargins(0, 6, 4, 0));
        plot->plotLayout()->setColumnStretchFactor(1, 0.001);
    }
    plot->legend->setFillOrder(QCPLayoutGrid::foRowsFirst);
    fitLegendToHeight(plot);
    plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
}

namespace {

// The plot layout's cell under the axis rects, for a legend too wide to stand beside them.
QCPLayoutGrid *legendBelow(QCustomPlot *plot, bool make)
{
    QCPLayoutGrid *layout = plot->plotLayout();
    if (layout->rowCount() > 2)
        if (auto *g = qobject_cast<QCPLayoutGrid *>(layout->element(2, 0)))
            return g;
    if (!make)
        return nullptr;
    auto *g = new QCPLayoutGrid;
    layout->addElement(2, 0, g);
    layout->setRowStretchFactor(2, 0.001);
    g->setMargins(QMargins(4, 2, 4, 4));
    return g;
}

} // namespace

void fitLegendToHeight(QCustomPlot *plot)
{
    QCPLegend *legend = plot->legend;
    auto *side = plot->plotLayout()->rowCount() > 1 && plot->plotLayout()->columnCount() > 1
                     ? qobject_cast<QCPLayoutGrid *>(plot->plotLayout()->element(1, 1))
                     : nullptr;
    // Beside the plot while its widest entry takes at most a third of the width; else below
    // it, in as many columns as fit (a narrow window squeezed the plot to a strip beside it,
    // its tick labels running into each other). Decided on the entries, not on the legend's
    // own shape, which changes with where it is.
    int widest = 0;
    for (int i = 0; i < legend->itemCount(); ++i)
        if (QCPAbstractLegendItem *item = legend->item(i))
            widest = std::max(widest, item->minimumOuterSizeHint().width());
    widest += legend->columnSpacing();
    // Below where that leaves the plot more room than beside it (a wide chart: never).
    const int n = std::max(1, legend->itemCount());
    const int rowHeight = QFontMetrics(legend->font()).height() + legend->rowSpacing() + 2;
    const int besideRows = std::max(3, (plot->height() - 40) / std::max(1, rowHeight));
    const int besideWidth = widest * ((n + besideRows - 1) / besideRows) + 12;
    const int belowColumns = std::max(1, (plot->width() - 16) / std::max(1, widest));
    const int belowHeight = rowHeight * ((n + belowColumns - 1) / belowColumns) + 12;
    const double besideArea = double(std::max(0, plot->width() - besideWidth - 90)) * std::max(0, plot->height() - 80);
    const double belowArea = double(std::max(0, plot->width() - 90)) * std::max(0, plot->height() - 80 - belowHeight);
    const bool below = side && widest * 3 > plot->width() && belowArea > besideArea;
    QCPLayoutGrid *bottom = legendBelow(plot, below);
    if (below && legend->layout() == side) {
        side->take(legend);
        bottom->addElement(0, 0, legend);
    } else if (!below && bottom && legend->layout() == bottom) {
        bottom->take(legend);
        side->addElement(0, 0, legend);
    }
    if (bottom && legend->layout() == bottom) {
        const int columns = std::max(1, (plot->width() - 16) / std::max(1, widest));
        if (legend->wrap() != columns || legend->fillOrder() != QCPLayoutGrid::foColumnsFirst) {
            legend->setWrap(columns);
            legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
        }
        return;
    }
    // Rows as the plot's height holds (at least three): sixteen workers wrap into columns
    // rather than run off the bottom.
    const int row = QFontMetrics(legend->font()).height() + legend->rowSpacing() + 2;
    const int rows = std::max(3, (plot->height() - 40) / std::max(1, row));
    if (legend->wrap() != rows || legend->fillOrder() != QCPLayoutGrid::foRowsFirst) {
        legend->setWrap(rows);
        legend->setFillOrder(QCPLayoutGrid::foRowsFirst, true);
    }
}

namespace {

// `shown` elided to `width`, from the full text kept on `holder` (property "fullText"): a text
// set anew since (not an elision of the kept one) becomes the full text.
QString elideKeepingFull(QObject *holder, const QString &shown, const QFont &font, int width)
{
    QString full = holder->property("fullText").toString();
    if (full.isEmpty() || (shown != full && !shown.endsWith(QChar(0x2026))))
        full = shown;
    holder->setProperty("fullText", full);
    return QFontMetrics(font).elidedText(full, Qt::ElideRight, width);
}

// Vertical axes' labels elided to their axis rect's height, once the layout has set it (drawn
// rotated, a longer one lost both its ends). The label's length does not change the margins.
void elideVerticalLabels(QCustomPlot *plot)
{
    for (QCPAxisRect *rect : plot->axisRects())
        for (QCPAxis *axis : rect->axes(QCPAxis::atLeft | QCPAxis::atRight))
            if (const QString shown = elideKeepingFull(axis, axis->label(), axis->labelFont(), std::max(30, rect->height()));
                shown != axis->label())
                axis->setLabel(shown);
}

} // namespace

void fitChartToWidth(QCustomPlot *plot)
{
    fitLegendToHeight(plot);
    // The title elided to the width (its full text kept): centred and wider than the plot, it
    // lost its start.
    if (QCPTextElement *t = titleOf(plot))
        if (const QString shown = elideKeepingFull(t, t->text(), t->font(), std::max(40, plot->width() - 12)); shown != t->text())
            t->setText(shown);
    // Horizontal axes: as many ticks as their labels have room for.
    for (QCPAxisRect *rect : plot->axisRects())
        for (QCPAxis *axis : rect->axes(QCPAxis::atBottom | QCPAxis::atTop)) {
            if (!axis->visible() || !axis->ticker())
                continue;
            const QCPRange r = axis->range();
            const QString widestLabel = QString::number(std::max(std::abs(r.lower), std::abs(r.upper)), 'g', 6) + QStringLiteral("0");
            const int label = QFontMetrics(axis->tickLabelFont()).horizontalAdvance(widestLabel) + 24;
            const int ticks = std::clamp(rect->width() / std::max(1, label), 2, 5);
            if (axis->ticker()->tickCount() != ticks)
                axis->ticker()->setTickCount(ticks);
        }
}

namespace {

QCPItemText *placeholderOf(QCustomPlot *plot)
{
    for (int i = 0; i < plot->itemCount(); ++i)
        if (auto *t = qobject_cast<QCPItemText *>(plot->item(i)); t && t->objectName() == QLatin1String("placeholder"))
            return t;
    return nullptr;
}

bool hasData(QCustomPlot *plot)
{
    for (int i = 0; i < plot->plottableCount(); ++i)
        if (const auto *d = plot->plottable(i)->interface1D(); d && d->dataCount() > 0)
            return true;
    return false;
}

} // namespace

void setCurveSummaries(bool on) { ColumnGraph::s_useBlocks = on; }

void setPlaceholder(QCustomPlot *plot, const QString &text)
{
    QCPItemText *t = placeholderOf(plot);
    if (!t && !text.isEmpty()) {
        t = new QCPItemText(plot);
        t->setObjectName(QStringLiteral("placeholder"));
        t->setClipToAxisRect(false);
        t->position->setType(QCPItemPosition::ptAxisRectRatio);
        t->position->setAxisRect(plot->axisRect(0));
        t->position->setCoords(0.5, 0.45);
        t->setPositionAlignment(Qt::AlignCenter);
        t->setTextAlignment(Qt::AlignCenter);
        t->setColor(QColor(90, 90, 90));
    }
    if (t) {
        QFont f = plot->font();
        f.setPointSizeF(f.pointSizeF() * 1.25);
        t->setFont(f);
        t->setText(text);
        t->setVisible(!text.isEmpty());
    }
    // Only a legend inset in the axis rect is hidden: hiding one that is a cell of the plot's
    // layout grid upsets the grid's column widths.
    // A legend beside the plot stays in its cell (hiding it upsets the grid's column widths);
    // empty, it draws no box.
    plot->legend->setBorderPen(plot->legend->itemCount() > 0 ? QPen(Qt::black) : QPen(Qt::NoPen));
    plot->legend->setBrush(plot->legend->itemCount() > 0 ? QBrush(QColor(255, 255, 255, 220)) : QBrush(Qt::NoBrush));
}

QString placeholderText(QCustomPlot *plot)
{
    const QCPItemText *t = placeholderOf(plot);
    return t && t->visible() ? t->text() : QString();
}

QString emptyPlotText(bool haveRun)
{
    return haveRun ? QObject::tr("Waiting for the first step\u2026")
                   : QObject::tr("No run yet.\nChoose an experiment and press Run (F5).");
}

ChartsWidget::ChartsWidget(QWidget *parent) : QTabWidget(parent)
{
    // A live run fills and draws only the chart on show; the one a tab change shows then.
    connect(this, &QTabWidget::currentChanged, this, [this] {
        if (m_current && m_current->state == RunState::Running)
            return refresh();
        for (auto &[name, plot] : plots())
            if (plot->isVisible())
                plot->replot(QCustomPlot::rpQueuedReplot);
    });
    auto makePlot = [&](const QString &name, const QString &helpKey) {
        auto *plot = new QCustomPlot;
        plot->setToolTip(metricHelp(helpKey));
        plot->setObjectName(helpKey);
        plot->installEventFilter(this);
        connect(plot, &QCustomPlot::afterLayout, plot, [plot] { elideVerticalLabels(plot); });
        // A set minimum, not the layout's: a legend of long run names beside the plot would
        // otherwise make the window wider than a 1280-pixel projector.
        plot->setMinimumSize(240, 160);
        Q_UNUSED(name);
        return plot;
    };
    m_loss = makePlot(tr("Loss"), QStringLiteral("loss"));
    m_stalls = makePlot(tr("Stalls"), QStringLiteral("stalls"));
    m_staleness = makePlot(tr("Staleness"), QStringLiteral("staleness"));
    m_memory = makePlot(tr("Activation memory"), QStringLiteral("memory"));
    m_throughput = makePlot(tr("Throughput"), QStringLiteral("throughput"));
    m_batchNorm = makePlot(tr("Batch norm"), QStringLiteral("batchnorm"));

    // Loss tab: the plot with its options above it.
    auto *lossPage = new QWidget;
    auto *lossLayout = new QVBoxLayout(lossPage);
    lossLayout->setContentsMargins(0, 0, 0, 0);
    auto *options = new QHBoxLayout;
    m_lossAxis = new QComboBox;
    m_lossAxis->addItems({tr("against step"), tr("against run time"), tr("against samples processed")});
    m_lossAxis->setToolTip(tr("Plot the loss against the optimizer step (async: the server's "
                              "version), wall-clock time or training samples processed: sync and "
                              "async runs compare fairly against time or samples, not steps."));
    m_smoothing = new QSpinBox;
    m_smoothing->setRange(1, 500);
    m_smoothing->setValue(1);
    m_smoothing->setPrefix(tr("smoothing "));
    m_smoothing->setSuffix(tr(" steps"));
    m_smoothing->setToolTip(tr("Trailing mean over this many points (1 = raw)."));
    m_logLoss = new QCheckBox(tr("log scale"));
    m_logLoss->setToolTip(tr("Logarithmic loss axis: late progress stays visible."));
    m_logLoss->setChecked(true);
    options->addWidget(m_lossAxis);
    options->addWidget(m_smoothing);
    options->addWidget(m_logLoss);
    options->addStretch();
    lossLayout->addLayout(options);
    lossLayout->addWidget(m_loss);
    connect(m_lossAxis, &QComboBox::currentIndexChanged, this, [this] { rebuild(); });
    connect(m_smoothing, &QSpinBox::valueChanged, this, [this] { rebuild(); });
    connect(m_logLoss, &QCheckBox::toggled, this, [this] { rebuild(); });

    addTab(lossPage, tr("Loss"));
    addTab(m_stalls, tr("Stalls"));
    // Staleness tab: the split option above the plot.
    auto *stalenessPage = new QWidget;
    auto *stalenessLayout = new QVBoxLayout(stalenessPage);
    stalenessLayout->setContentsMargins(0, 0, 0, 0);
    m_splitStaleness = new QCheckBox(tr("split per worker"));
    m_splitStaleness->setToolTip(tr("Stack the histogram by the worker that pushed each update: a "
                                    "slow worker's gradients are the stale ones."));
    auto *stalenessOptions = new QHBoxLayout;
    stalenessOptions->addWidget(m_splitStaleness);
    stalenessOptions->addStretch();
    stalenessLayout->addLayout(stalenessOptions);
    stalenessLayout->addWidget(m_staleness);
    connect(m_splitStaleness, &QCheckBox::toggled, this, [this] { rebuild(); });
    addTab(stalenessPage, tr("Staleness"));
    addTab(m_memory, tr("Activation memory"));
    addTab(m_throughput, tr("Throughput"));
    addTab(m_batchNorm, tr("Batch norm"));
    setTabVisible(indexOf(m_batchNorm), false);
    const auto all = allPlots(); // in tab order
    for (int i = 0; i < count(); ++i)
        setTabToolTip(i, metricHelp(all[std::size_t(i)].first));
    setupChart(m_loss, tr("Training loss"), tr("step"), tr("loss"));
    setupChart(m_stalls, tr("Barrier stalls per step"), tr("step"), tr("wait (ms)"));
    setupChart(m_staleness, tr("Gradient staleness"), tr("staleness (updates)"), tr("updates"));
    setupChart(m_memory, tr("Peak activation memory per step"), tr("step"), tr("activations (KiB)"));
    setupChart(m_throughput, tr("Throughput"), tr("run time (s)"), tr("samples / s"));
    setupChart(m_batchNorm, tr("Divergence of the workers' batch norm running statistics"), tr("step"),
               tr("distance from the mean (relative)"));
    refresh();
}

bool ChartsWidget::eventFilter(QObject *watched, QEvent *event)
{
    if (event->type() == QEvent::Resize)
        if (auto *plot = qobject_cast<QCustomPlot *>(watched))
            fitChartToWidth(plot);
    return QTabWidget::eventFilter(watched, event);
}

std::vector<std::pair<QString, QCustomPlot *>> ChartsWidget::allPlots() const
{
    return {{QStringLiteral("loss"), m_loss},
            {QStringLiteral("stalls"), m_stalls},
            {QStringLiteral("staleness"), m_staleness},
            {QStringLiteral("memory"), m_memory},
            {QStringLiteral("throughput"), m_throughput},
            {QStringLiteral("batchnorm"), m_batchNorm}};
}

std::vector<std::pair<QString, QCustomPlot *>> ChartsWidget::plots() const
{
    auto all = allPlots();
    if (!showsBatchNorm())
        all.pop_back();
    return all;
}

QString ChartsWidget::currentChartName() const
{
    const auto all = allPlots(); // in tab order
    const int i = currentIndex();
    return i >= 0 && i < int(all.size()) ? all[std::size_t(i)].first : QString();
}

bool ChartsWidget::showChart(const QString &name)
{
    const auto all = allPlots();
    for (std::size_t i = 0; i < all.size(); ++i)
        if (all[i].first == name) {
            m_wantBatchNorm = all[i].second == m_batchNorm && !showsBatchNorm();
            if (!m_wantBatchNorm)
                setCurrentIndex(int(i));
            return true;
        }
    return false;
}

bool ChartsWidget::showsBatchNorm() const
{
    auto bn = [](const RunDataPtr &r) { return r && !r->imported() && r->config().batchnorm != "none"; };
    return bn(m_current) || std::any_of(m_compare.begin(), m_compare.end(), bn);
}

void ChartsWidget::setLossAgainstTime(bool time) { m_lossAxis->setCurrentIndex(time ? 1 : 0); }
void ChartsWidget::setSmoothing(int window) { m_smoothing->setValue(window); }
void ChartsWidget::setLogLoss(bool log) { m_logLoss->setChecked(log); }
bool ChartsWidget::lossAgainstTime() const { return m_lossAxis->currentIndex() == 1; }
int ChartsWidget::smoothing() const { return m_smoothing->value(); }
bool ChartsWidget::logLoss() const { return m_logLoss->isChecked(); }
void ChartsWidget::setSplitStaleness(bool split) { m_splitStaleness->setChecked(split); }
bool ChartsWidget::splitStaleness() const { return m_splitStaleness->isChecked(); }

void ChartsWidget::setRuns(RunDataPtr current, std::vector<RunDataPtr> compare)
{
    m_current = std::move(current);
    m_compare = std::move(compare);
    rebuild();
}

void ChartsWidget::rebuild()
{
    setTabVisible(indexOf(m_batchNorm), showsBatchNorm());
    if (m_wantBatchNorm && showsBatchNorm()) {
        m_wantBatchNorm = false;
        setCurrentWidget(m_batchNorm);
    }
    for (auto &[name, plot] : allPlots()) {
        plot->clearGraphs();
        plot->clearPlottables();
    }
    m_stallTotals = {};
    refresh();
}

void ChartsWidget::setPresentationScale(double scale)
{
    m_scale = scale;
    for (auto &[name, plot] : allPlots()) {
        const QFont f = font();
        for (QCPAxis *a : {plot->xAxis, plot->yAxis, plot->yAxis2}) {
            a->setLabelFont(f);
            a->setTickLabelFont(f);
        }
        plot->legend->setFont(f);
        if (auto *t = titleOf(plot)) {
            QFont tf = f;
            tf.setPointSizeF(f.pointSizeF() + 2);
            tf.setBold(true);
            t->setFont(tf);
        }
    }
    rebuild();
}

void ChartsWidget::refresh()
{
    const bool haveRun = m_current || !m_compare.empty();
    const bool running = m_current && m_current->state == RunState::Running;
    // While a run is live, only the chart on show is filled and drawn, and a tab change fills
    // the one it shows: rescaling each hidden chart read every point of its 16 curves every
    // second, for nothing. The series feed only what is new, so a chart catches up when shown.
    // (A charts panel not on screen at all, a closed dock, fills them all, as it always did.)
    auto due = [&](const QCustomPlot *plot) { return !running || !isVisible() || plot->isVisible(); };
    const std::pair<QCustomPlot *, void (ChartsWidget::*)()> fills[] = {
        {m_loss, &ChartsWidget::fillLoss},         {m_stalls, &ChartsWidget::fillStalls},
        {m_staleness, &ChartsWidget::fillStaleness}, {m_memory, &ChartsWidget::fillMemory},
        {m_throughput, &ChartsWidget::fillThroughput}, {m_batchNorm, &ChartsWidget::fillBatchNorm}};
    for (const auto &[plot, fill] : fills)
        if (due(plot))
            (this->*fill)();
    for (auto &[name, plot] : plots()) {
        if (!due(plot))
            continue;
        QString text;
        if (m_current && m_current->imported() && m_compare.empty() && plot != m_stalls && !hasData(plot))
            text = plot == m_loss        ? tr("A profiler trace records no loss:\nthis chart is for Syncopate's own runs.")
                   : plot == m_staleness ? tr("A profiler trace of a synchronous job has no staleness.")
                   : plot == m_memory    ? tr("Activation memory is not read from profiler traces.")
                                         : tr("This trace has no complete ProfilerStep.");
        else if (!hasData(plot))
            text = haveRun && !running ? tr("This run recorded nothing for this chart.")
                                       : emptyPlotText(haveRun);
        setPlaceholder(plot, text);
        for (int i = 0; i < plot->graphCount(); ++i)
            if (auto *g = dynamic_cast<ColumnGraph *>(plot->graph(i)))
                g->setLive(running);
        // Only the chart on show is drawn (16 workers' curves cost milliseconds each).
        if (plot->isVisible() || !running) {
            fitChartToWidth(plot); // titles, ranges and legends were just filled
            plot->replot(QCustomPlot::rpQueuedReplot);
        }
    }
}

void ChartsWidget::fillLoss()
{
    QCustomPlot *p = m_loss;
    const bool time = m_lossAxis->currentIndex() == 1;
    // Samples processed: the fair axis between modes (a sync step is N batches, an async
    // server update one).
    const bool samples = m_lossAxis->currentIndex() == 2;
    const int window = m_smoothing->value();
    p->xAxis->setLabel(time ? tr("run time (ms)") : samples ? tr("training samples processed") : tr("step"));
    const bool log = m_logLoss->isChecked();
    p->yAxis->setScaleType(log ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (log)
        p->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    else
        p->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    GraphSlots slots_(p, m_scale);
    auto graph = [&](const QString &name, QColor color, double width, Qt::PenStyle style) {
        return slots_.next(name, color, width, QCPGraph::lsLine, style);
    };
    if (m_current) {
        const RunData &run = *m_current;
        // In async mode a worker's own step count means little: place each loss at the server
        // update its gradient became, the same axis as the held-out evaluations.
        const bool async = run.config().async();
        if (async && !time && !samples)
            p->xAxis->setLabel(tr("server update (async: the server's version, not a worker's step)"));
        // A sync step of N workers is N batches; an async update is one worker's batch.
        const double perKey = samples ? double(run.config().batch) * (async ? 1 : run.workers()) : 1.0;
        // Async: each worker's loss is of its own batch on its own (stale) copy of the
        // parameters, so the curves disagree; the band shows how far, beneath them, against the
        // held-out loss of the server's consistent snapshots.
        QCPGraph *lowest = nullptr, *highest = nullptr;
        std::vector<std::pair<double, double>> spread;
        if (async && run.workers() > 1) {
            const QColor band(0x99, 0x99, 0x99, 90);
            lowest = graph(tr("lowest"), band, 0, Qt::NoPen);
            highest = graph(tr("workers' losses, lowest to highest"), band, 0, Qt::NoPen);
            lowest->removeFromLegend();
            highest->setBrush(band);
            highest->setChannelFillGraph(lowest);
        }
        for (int w = 0; w < run.workers(); ++w) {
            QCPGraph *g = graph(run.workerName(w), seriesColor(w), kWorkerLine, seriesStyle(w));
            const auto &losses = run.counter(CounterId::Loss, w);
            if (!async) { // a point per loss sample: only the new ones are given
                TrailingMean mean([&](std::size_t i) { return losses[i].value; }, window);
                feedGraph(g, losses.size(), 1, [&](std::size_t i) {
                    const CounterPoint &pt = losses[i];
                    const double key = time ? pt.tNs / 1e6 : samples ? (double(pt.step) + 1) * perKey : double(pt.step);
                    return QCPGraphData(key, mean.at(i)); // after step s, s + 1 steps are done
                });
                continue;
            }
            QVector<double> x, y;
            std::vector<double> versionOf;
            if (!time)
                for (const auto &v : run.counter(CounterId::Version, w)) {
                    if (versionOf.size() <= v.step)
                        versionOf.resize(v.step + 1, -1.0);
                    versionOf[v.step] = v.value;
                }
            for (const auto &pt : losses) {
                double key = time ? pt.tNs / 1e6 : double(pt.step);
                if (!time) {
                    if (pt.step >= versionOf.size() || versionOf[pt.step] < 0)
                        continue; // not applied (yet, or ever: the run ended first)
                    key = versionOf[pt.step];
                }
                if (samples)
                    key *= perKey;
                x.push_back(key);
                y.push_back(pt.value);
                if (lowest)
                    spread.emplace_back(key, pt.value);
            }
            feedGraph(g, x, smooth(y, window));
        }
        if (lowest) {
            QVector<double> bx, lo, hi;
            spreadBand(spread, 150, bx, lo, hi);
            setPoints(lowest, bx, lo, true);
            setPoints(highest, bx, hi, true);
        }
        // Held-out loss as dots: sync records it on the worker that completed the evaluation,
        // async on its evaluator (series workers(); older async runs on the workers).
        QVector<double> ex, ey;
        for (int w = 0; w <= run.workers(); ++w)
            for (const auto &pt : run.counter(CounterId::EvalLoss, w)) {
                // An evaluation's step is the steps (or server updates) done when it ran.
                ex.push_back(time ? pt.tNs / 1e6 : double(pt.step) * perKey);
                ey.push_back(pt.value);
            }
        QCPGraph *eval = graph(tr("held-out loss"), Qt::black, 1.5, Qt::DashLine);
        eval->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 7 * m_scale));
        setPoints(eval, ex, ey);
    }
    for (std::size_t i = 0; i < m_compare.size(); ++i) {
        const RunData &run = *m_compare[i];
        QVector<double> steps, t, v;
        meanPerStep(run, CounterId::Loss, steps, t, v);
        if (samples) // a worker's own step: N batches a step in sync, one in async
            for (double &s : steps)
                s = (s + 1) * double(run.config().batch) * double(run.workers());
        feedGraph(graph(tr("%1: %2 (mean)").arg(run.label(), modeLabel(run)), runColor(int(i)), 2.2, runStyle(int(i))),
                  time ? t : steps, smooth(v, window));
    }
    p->rescaleAxes();
}

void ChartsWidget::fillStalls()
{
    QCustomPlot *p = m_stalls;
    // What a worker waits for depends on the mode: the barrier in sync, the server (and the
    // slowest worker, under a staleness bound) in async.
    const bool async = m_current && m_current->config().async();
    const bool imported = m_current && m_current->imported();
    titleOf(p)->setText(imported ? tr("Stalls per step: waiting in collectives for the last rank")
                        : !async ? tr("Barrier stalls per step")
                        : m_current->config().maxStaleness >= 0
                            ? tr("Waits per step: staleness bound and parameter server")
                            : tr("Waits per step: parameter server"));
    p->xAxis->setLabel(imported ? tr("step (ProfilerStep#)") : async ? tr("the worker's own step") : tr("step"));
    if (!m_current) {
        fillCompareStalls(0);
        p->rescaleAxes();
        return;
    }
    const RunData &run = *m_current;
    if (p->graphCount() == 0) {
        for (int w = 0; w < run.workers(); ++w) {
            QCPGraph *g = new ColumnGraph(p->xAxis, p->yAxis);
            g->setName(run.workerName(w));
            g->setPen(QPen(seriesColor(w), kWorkerLine * m_scale, seriesStyle(w)));
        }
        QCPGraph *share = p->addGraph(p->xAxis, p->yAxis2);
        share->setName(tr("share of time lost (right axis)"));
        share->setPen(QPen(Qt::black, 2 * m_scale, Qt::DashLine));
        // What of the stalls was the OS not running a worker (more workers than free cores):
        // waiting for no fault of the mode.
        QCPGraph *os = p->addGraph();
        os->setName(tr("of which waiting for the OS (mean)"));
        os->setPen(QPen(QColor(0x1A, 0x1A, 0x1A), 1.0 * m_scale));
        os->setBrush(QBrush(QColor(0x1A, 0x1A, 0x1A, 120), Qt::CrossPattern));
        QCPGraph *osShare = p->addGraph(p->xAxis, p->yAxis2);
        osShare->setName(tr("share lost to the OS (right axis)"));
        osShare->setPen(QPen(QColor(0x1A, 0x1A, 0x1A), 2 * m_scale, Qt::DotLine));
        p->yAxis2->setVisible(true);
        p->yAxis2->setLabel(tr("cumulative share lost (%)"));
    }
    // A point stands for stepsPerPoint steps once a long run has been thinned (its mean).
    // A step point takes its stalls as their spans end: the last few may still change.
    for (int w = 0; w < run.workers(); ++w) {
        const auto &steps = run.steps(w);
        const double stride = run.stepsPerPoint(w);
        feedGraph(p->graph(w), steps.size(), 16, [&](std::size_t s) {
            return QCPGraphData(double(run.firstStep()) + double(s) * stride, steps[s].waitMs);
        });
    }
    // Per step point, the stall spent waiting for the OS, mean over workers.
    std::vector<const std::vector<StepPoint> *> series;
    std::vector<int> strides;
    std::size_t points = 0, settled = std::numeric_limits<std::size_t>::max();
    for (int w = 0; w < run.workers(); ++w) {
        series.push_back(&run.steps(w));
        strides.push_back(run.stepsPerPoint(w));
        points = std::max(points, run.steps(w).size());
        settled = std::min(settled, run.steps(w).size());
    }
    // Points before every worker's last 16 no longer change: the sums up to there are kept, and
    // the curves computed on from there (they are cumulative: every point depends on all before).
    settled = settled > 16 ? settled - 16 : 0;
    QCPGraph *shareGraph = p->graph(run.workers()), *osGraph = p->graph(run.workers() + 1),
             *osShareGraph = p->graph(run.workers() + 2);
    StallTotals &kept = m_stallTotals;
    if (kept.run != &run || kept.strides != strides || kept.upTo > points ||
        shareGraph->data()->size() < kept.shares || osShareGraph->data()->size() < kept.shares ||
        osGraph->data()->size() < kept.osMeans)
        kept = StallTotals{&run, strides, 0, 0, 0, 0, std::vector<double>(std::size_t(run.workers()), 0.0), 0, 0};
    StallTotals t = kept;
    // Cumulative share of worker time lost to waiting, per step point, from step end times.
    QVector<double> sx, sy, ox, oy, osy;
    std::vector<double> offs;
    for (std::size_t s = t.upTo; s < points; ++s) {
        if (s == settled) {
            kept = t;
            kept.upTo = s;
            kept.shares = t.shares + int(sx.size());
            kept.osMeans = t.osMeans + int(ox.size());
        }
        bool any = false;
        double osMs = 0;
        int counted = 0;
        stallOffCpuMs(series, s, offs);
        for (int w = 0; w < run.workers(); ++w) {
            const auto &steps = run.steps(w);
            if (s >= steps.size())
                continue;
            const double off = offs[std::size_t(w)];
            osMs += off;
            ++counted;
            if (steps[s].endNs < 0)
                continue;
            any = true;
            t.waited += steps[s].waitMs * run.stepsPerPoint(w);
            t.lostToOs += off * run.stepsPerPoint(w);
            t.elapsed += steps[s].endNs / 1e6 - t.lastEnd[std::size_t(w)];
            t.lastEnd[std::size_t(w)] = steps[s].endNs / 1e6;
        }
        if (counted > 0) {
            ox.push_back(double(s) * run.stepsPerPoint(0));
            oy.push_back(osMs / counted);
        }
        if (any && t.elapsed > 0) {
            sx.push_back(double(s) * run.stepsPerPoint(0));
            sy.push_back(std::min(100.0, 100.0 * t.waited / t.elapsed));
            osy.push_back(std::min(100.0, 100.0 * t.lostToOs / t.elapsed));
        }
    }
    // The graphs keep their points up to where this refresh started and take the rest.
    auto give = [](QCPGraph *g, int keep, const QVector<double> &x, const QVector<double> &y) {
        const QCPGraphDataContainer &data = *g->data();
        feedGraph(g, std::size_t(keep + x.size()), std::size_t(data.size() - keep), [&](std::size_t i) {
            return int(i) < keep ? *data.at(int(i)) : QCPGraphData(x[int(i) - keep], y[int(i) - keep]);
        });
    };
    give(shareGraph, t.shares, sx, sy);
    give(osGraph, t.osMeans, ox, oy);
    give(osShareGraph, t.shares, sx, osy);
    // Async waits are for the bound or the server, not a barrier: no slowest worker to blame.
    // A profiler trace says nothing of the OS, and has no step ends to share time by.
    for (int g : {run.workers() + 1, run.workers() + 2}) {
        p->graph(g)->setVisible(!async && !imported);
        if (async || imported)
            p->graph(g)->removeFromLegend();
    }
    if (imported) {
        for (int g : {run.workers(), run.workers() + 1, run.workers() + 2})
            clearPoints(p->graph(g)); // hidden, and kept out of the axes' range
        p->graph(run.workers())->setVisible(false);
        p->graph(run.workers())->removeFromLegend();
        p->yAxis2->setVisible(false);
    }
    fillCompareStalls(run.workers() + 3);
    p->rescaleAxes();
    p->yAxis2->setRange(0, 100);
    p->yAxis->setLabel(imported ? tr("stall in collectives (ms per step)") : tr("wait (ms)"));
    if (imported) // a rank that never waits draws its line on 0: keep it off the axis
        p->yAxis->setRange(-0.03 * std::max(1e-3, p->yAxis->range().upper), p->yAxis->range().upper * 1.05);
}

void ChartsWidget::fillCompareStalls(int firstGraph)
{
    // Each compared run as one line: the mean over its workers of the wait per step, named with
    // the share of all its worker time lost to waiting.
    QCustomPlot *p = m_stalls;
    for (std::size_t i = 0; i < m_compare.size(); ++i) {
        const RunData &run = *m_compare[i];
        const int g = firstGraph + int(i);
        if (g >= p->graphCount()) {
            QCPGraph *graph = p->addGraph();
            graph->setPen(QPen(runColor(int(i)), 2.5 * m_scale, runStyle(int(i))));
        }
        std::size_t points = 0;
        double waited = 0, elapsed = 0;
        for (int w = 0; w < run.workers(); ++w) {
            const auto &steps = run.steps(w);
            points = std::max(points, steps.size());
            for (const StepPoint &s : steps)
                waited += s.waitMs * run.stepsPerPoint(w);
            for (auto it = steps.rbegin(); it != steps.rend(); ++it)
                if (it->endNs >= 0) {
                    elapsed += it->endNs / 1e6;
                    break;
                }
        }
        QVector<double> x, y;
        for (std::size_t s = 0; s < points; ++s) {
            double sum = 0;
            int n = 0;
            for (int w = 0; w < run.workers(); ++w)
                if (s < run.steps(w).size()) {
                    sum += run.steps(w)[s].waitMs;
                    ++n;
                }
            x.push_back(double(s) * run.stepsPerPoint(0));
            y.push_back(sum / std::max(1, n));
        }
        QCPGraph *graph = p->graph(g);
        graph->setName(tr("%1: %2 mean (%3% of time lost)")
                           .arg(run.label(), modeLabel(run))
                           .arg(elapsed > 0 ? 100.0 * waited / elapsed : 0.0, 0, 'f', 1));
        feedGraph(graph, x, y);
    }
}

void ChartsWidget::fillStaleness()
{
    QCustomPlot *p = m_staleness;
    // Histogram on the left, staleness over time on the right, each with its own axes.
    QCPAxisRect *timeRect = p->axisRectCount() > 1 ? p->axisRect(1) : nullptr;
    if (!timeRect) {
        // Both rects share row 1 through a sub-grid, so the title above spans them.
        timeRect = new QCPAxisRect(p);
        QCPAxisRect *main = p->axisRect(0);
        p->plotLayout()->take(main);
        p->plotLayout()->simplify();
        auto *row = new QCPLayoutGrid;
        p->plotLayout()->addElement(1, 0, row);
        row->addElement(0, 0, main);
        row->addElement(0, 1, timeRect);
        timeRect->axis(QCPAxis::atBottom)->setLabel(tr("run time (ms)"));
        timeRect->axis(QCPAxis::atLeft)->setLabel(tr("staleness of each update"));
        timeRect->setRangeDrag(Qt::Horizontal | Qt::Vertical);
        timeRect->setRangeZoom(Qt::Horizontal | Qt::Vertical);
    }
    QCPAxis *tx = timeRect->axis(QCPAxis::atBottom), *ty = timeRect->axis(QCPAxis::atLeft);
    const bool split = m_splitStaleness->isChecked();
    // With runs to compare, counts of runs of different lengths do not compare: shares do.
    const bool shares = !m_compare.empty();
    p->yAxis->setLabel(shares ? tr("share of the run's updates (%)") : tr("updates"));
    const RunData *cur = m_current.get();
    // A sync run's every update is staleness 0: one bar of all its steps, said plainly.
    auto syncUpdates = [](const RunData &run) {
        const auto &loss = run.counter(CounterId::Loss, 0);
        return loss.empty() ? 0.0 : double(loss.back().step) + 1.0;
    };
    auto histogramOf = [&](const RunData &run, int worker) {
        std::vector<double> h;
        if (!run.config().async()) {
            if (const double n = syncUpdates(run); n > 0 && worker <= 0)
                h.push_back(n);
            return h;
        }
        for (const std::uint64_t v : worker < 0 ? run.stalenessHistogram() : run.stalenessHistogram(worker))
            h.push_back(double(v));
        return h;
    };
    if (p->plottableCount() == 0) {
        if (cur) {
            // One bar set for the run, or one per worker stacked (each on the one below it).
            QCPBars *below = nullptr;
            const int sets = split && cur->config().async() ? cur->workers() : 1;
            for (int w = 0; w < sets; ++w) {
                auto *bars = new QCPBars(p->xAxis, p->yAxis);
                const QColor c = sets > 1 ? seriesColor(w) : seriesColor(0);
                bars->setName(sets > 1 ? tr("worker %1").arg(w) : tr("%1: updates with this staleness").arg(cur->label()));
                bars->setBrush(c);
                bars->setPen(QPen(c.darker(130)));
                bars->setWidth(0.8);
                if (below)
                    bars->moveAbove(below);
                below = bars;
            }
            for (int w = 0; w < cur->workers(); ++w) {
                QCPGraph *g = p->addGraph(tx, ty);
                g->setName(tr("worker %1 over time").arg(w));
                g->setLineStyle(QCPGraph::lsNone);
                g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ScatterShape(seriesShape(w)), seriesColor(w), 5 * m_scale));
                if (!cur->config().async())
                    g->removeFromLegend();
            }
        }
        for (std::size_t i = 0; i < m_compare.size(); ++i) {
            QCPGraph *g = p->addGraph(p->xAxis, p->yAxis);
            g->setName(tr("%1: %2").arg(m_compare[i]->label(), modeLabel(*m_compare[i])));
            g->setLineStyle(QCPGraph::lsStepCenter);
            g->setPen(QPen(runColor(int(i)), 2.5 * m_scale, runStyle(int(i))));
            g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, runColor(int(i)), 6 * m_scale));
        }
    }
    // Fill: bars (total or per worker), each worker's staleness over time, compared runs' lines.
    double most = 1, widest = 5;
    int bar = 0;
    std::vector<double> stacked;
    if (cur) {
        const double total = [&] {
            double t = 0;
            for (double v : histogramOf(*cur, -1))
                t += v;
            return std::max(1.0, t);
        }();
        for (int i = 0; i < p->plottableCount(); ++i) {
            auto *bars = qobject_cast<QCPBars *>(p->plottable(i));
            if (!bars)
                continue;
            const auto h = histogramOf(*cur, bar == 0 && !(split && cur->config().async()) ? -1 : bar);
            QVector<double> k, v;
            for (std::size_t s = 0; s < h.size(); ++s) {
                k.push_back(double(s));
                v.push_back(shares ? 100.0 * h[s] / total : h[s]);
                if (stacked.size() <= s)
                    stacked.resize(s + 1, 0.0);
                stacked[s] += v.back();
                most = std::max(most, stacked[s]);
            }
            widest = std::max(widest, double(h.size()));
            bars->setData(k, v, true);
            ++bar;
        }
        for (int w = 0; w < cur->workers(); ++w) {
            const auto &points = cur->counter(CounterId::Staleness, w);
            feedGraph(p->graph(w), points.size(), 1,
                      [&](std::size_t i) { return QCPGraphData(points[i].tNs / 1e6, points[i].value); });
        }
    }
    for (std::size_t i = 0; i < m_compare.size(); ++i) {
        const auto h = histogramOf(*m_compare[i], -1);
        double total = 0;
        for (double v : h)
            total += v;
        QVector<double> k, v;
        for (std::size_t s = 0; s < h.size(); ++s) {
            k.push_back(double(s));
            v.push_back(100.0 * h[s] / std::max(1.0, total));
            most = std::max(most, v.back());
        }
        widest = std::max(widest, double(h.size()));
        setPoints(p->graph((cur ? cur->workers() : 0) + int(i)), k, v, true);
    }
    const bool sync = cur && !cur->config().async();
    titleOf(p)->setText(sync ? tr("Gradient staleness: sync, so every update is 0 stale (%1 updates)").arg(syncUpdates(*cur))
                             : tr("Gradient staleness"));
    p->rescaleAxes();
    // Staleness counts updates: whole-number ticks on both of its axes.
    for (QCPAxis *a : {p->xAxis, ty})
        if (!a->ticker().dynamicCast<QCPAxisTickerFixed>()) {
            QSharedPointer<QCPAxisTickerFixed> ticker(new QCPAxisTickerFixed);
            ticker->setTickStep(1.0);
            ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
            a->setTicker(ticker);
        }
    p->xAxis->setRange(-0.7, widest - 0.3);
    p->yAxis->setRange(0, most * 1.12);
    if (sync) { // nothing stale to plot over time: the right side shows the zero line only
        tx->setRange(0, std::max(1.0, cur->endNs() / 1e6));
        ty->setRange(-0.5, 5);
    } else {
        ty->setRange(-0.5, ty->range().upper + 1);
    }

    // The staleness bound s limits how far a worker runs ahead of the slowest (at most s
    // steps), not staleness itself: while a worker computes one step, each other worker may go
    // from s steps behind it to s + 1 ahead, so an update can be (2s + 1)(N - 1) versions old.
    // Drawn on both sides so that the figures and the preset's text agree.
    for (int i = p->itemCount() - 1; i >= 0; --i)
        if (p->item(i)->objectName() == QLatin1String("bound"))
            p->removeItem(i);
    if (sync) {
        auto *note = new QCPItemText(p);
        note->setObjectName(QStringLiteral("bound"));
        note->setClipAxisRect(timeRect);
        note->position->setAxisRect(timeRect);
        note->position->setType(QCPItemPosition::ptAxisRectRatio);
        note->position->setCoords(0.5, 0.45);
        note->setPositionAlignment(Qt::AlignCenter);
        note->setTextAlignment(Qt::AlignCenter);
        note->setFont(p->xAxis->labelFont());
        note->setColor(QColor(90, 90, 90));
        note->setText(tr("Synchronous: every gradient is computed\non the parameters every worker holds,\nso no update is stale."));
    }
    if (!cur)
        return;
    const RunConfig &c = cur->config();
    if (c.async() && c.maxStaleness >= 0) {
        const double bound = double(2 * c.maxStaleness + 1) * double(c.workers - 1);
        const QPen pen(QColor(0xD5, 0x5E, 0x00), 1.5 * m_scale, Qt::DashLine);
        auto *v = new QCPItemStraightLine(p);
        v->setObjectName(QStringLiteral("bound"));
        v->setClipAxisRect(p->axisRect(0));
        v->point1->setAxes(p->xAxis, p->yAxis);
        v->point2->setAxes(p->xAxis, p->yAxis);
        v->point1->setCoords(bound, 0);
        v->point2->setCoords(bound, 1);
        v->setPen(pen);
        auto *h = new QCPItemStraightLine(p);
        h->setObjectName(QStringLiteral("bound"));
        h->setClipAxisRect(timeRect);
        h->point1->setAxes(timeRect->axis(QCPAxis::atBottom), ty);
        h->point2->setAxes(timeRect->axis(QCPAxis::atBottom), ty);
        h->point1->setCoords(0, bound);
        h->point2->setCoords(1, bound);
        h->setPen(pen);
        auto *label = new QCPItemText(p);
        label->setObjectName(QStringLiteral("bound"));
        label->setClipAxisRect(timeRect);
        label->position->setAxes(timeRect->axis(QCPAxis::atBottom), ty);
        label->position->setAxisRect(timeRect);
        label->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords(0.02, bound);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
        label->setColor(pen.color());
        label->setFont(p->xAxis->labelFont());
        label->setText(tr("bound: (2s + 1)(N - 1) = (2\u00d7%1 + 1)(%2 - 1) = %3").arg(c.maxStaleness).arg(c.workers).arg(bound));
        p->xAxis->setRange(-0.7, std::max(p->xAxis->range().upper, bound + 1));
        ty->setRange(-0.5, std::max(ty->range().upper, bound + 1));
    }
}

void ChartsWidget::fillMemory()
{
    QCustomPlot *p = m_memory;
    GraphSlots slots_(p, m_scale);
    auto graph = [&](const QString &name, QColor c, double width) {
        return slots_.next(name, c, width, QCPGraph::lsStepLeft);
    };
    if (m_current) {
        const RunData &run = *m_current;
        for (int w = 0; w < run.workers(); ++w) {
            const auto &points = run.counter(CounterId::ActivationBytes, w);
            feedGraph(graph(tr("%1 (%2)").arg(run.workerName(w), modeLabel(run)), seriesColor(w), kWorkerLine), points.size(), 1,
                      [&](std::size_t i) { return QCPGraphData(double(points[i].step), points[i].value / 1024.0); });
        }
    }
    for (std::size_t i = 0; i < m_compare.size(); ++i) {
        const RunData &run = *m_compare[i];
        QVector<double> steps, t, v;
        meanPerStep(run, CounterId::ActivationBytes, steps, t, v);
        for (auto &x : v)
            x /= 1024.0;
        QCPGraph *g = graph(tr("%1: %2").arg(run.label(), modeLabel(run)), runColor(int(i)), 2.5);
        g->setPen(QPen(runColor(int(i)), 2.5 * m_scale, runStyle(int(i))));
        feedGraph(g, steps, v);
    }
    // For a checkpointed run, what the same model holds without checkpointing: the z and a of
    // every hidden layer and the logits (the arithmetic the plain model's counter measures).
    if (m_current && m_current->config().checkpoint) {
        const auto &c = m_current->config();
        double bytes = 0;
        for (std::size_t l = 1; l < c.layers.size(); ++l)
            bytes += double(c.batch) * c.layers[l] * 4.0 *
                     (l + 1 < c.layers.size() ? (c.batchnorm != "none" ? 3 : 2) : 1); // batch norm: z, x-hat, a
        const auto &pts = m_current->counter(CounterId::ActivationBytes, 0);
        const double last = pts.empty() ? 1.0 : double(pts.back().step);
        QCPGraph *ref = graph(tr("without checkpointing (same model, computed)"), Qt::black, 1.5);
        ref->setPen(QPen(Qt::black, 1.5 * m_scale, Qt::DashLine));
        setPoints(ref, QVector<double>{0.0, last}, QVector<double>{bytes / 1024.0, bytes / 1024.0}, true);
    }
    p->rescaleAxes();
    p->yAxis->setRange(0, p->yAxis->range().upper * 1.15);
}

void ChartsWidget::fillBatchNorm()
{
    QCustomPlot *p = m_batchNorm;
    GraphSlots slots_(p, m_scale);
    auto graph = [&](const QString &name, QColor c, double width) { return slots_.next(name, c, width); };
    auto bn = [](const RunData &r) { return !r.imported() && r.config().batchnorm != "none"; };
    if (m_current && bn(*m_current)) {
        const RunData &run = *m_current;
        for (int w = 0; w < run.workers(); ++w) {
            const auto &points = run.counter(CounterId::BnDivergence, w);
            feedGraph(graph(tr("%1 (%2, %3 batch norm)").arg(run.workerName(w), modeLabel(run), QString::fromStdString(run.config().batchnorm)),
                            seriesColor(w), kWorkerLine),
                      points.size(), 1, [&](std::size_t i) { return QCPGraphData(double(points[i].step), points[i].value); });
        }
    }
    for (std::size_t i = 0; i < m_compare.size(); ++i) {
        const RunData &run = *m_compare[i];
        if (!bn(run))
            continue;
        QVector<double> steps, t, v;
        meanPerStep(run, CounterId::BnDivergence, steps, t, v);
        QCPGraph *g = graph(tr("%1: %2 batch norm").arg(run.label(), QString::fromStdString(run.config().batchnorm)),
                            runColor(int(i)), 2.5);
        g->setPen(QPen(runColor(int(i)), 2.5 * m_scale, runStyle(int(i))));
        feedGraph(g, steps, v);
    }
    p->rescaleAxes();
    // Sync batch norm's divergence is exactly 0: a flat line on the axis, with room above it.
    p->yAxis->setRange(0, std::max(1e-3, p->yAxis->range().upper * 1.15));
}

void ChartsWidget::fillThroughput()
{
    QCustomPlot *p = m_throughput;
    GraphSlots slots_(p, m_scale);
    auto graph = [&](const QString &name, QColor c, double width) { return slots_.next(name, c, width); };
    // An imported trace has no samples: its step chart is each rank's ProfilerStep time.
    const bool imported = m_current && m_current->imported();
    titleOf(p)->setText(imported ? tr("Step time per rank") : tr("Throughput"));
    p->xAxis->setLabel(imported ? tr("step (ProfilerStep#)") : tr("run time (s)"));
    p->yAxis->setLabel(imported ? tr("step time (ms)") : tr("samples / s"));
    // Only when it changes: setting a tab's text lays the tab widget out again, and with it asks
    // every chart for its size (each legend's text measured), at every refresh.
    if (const QString tab = imported ? tr("Step time") : tr("Throughput"); tabText(4) != tab)
        setTabText(4, tab);
    if (imported) {
        const RunData &run = *m_current;
        const auto rows = run.summary.find("step_ms_by_worker");
        for (int w = 0; w < run.workers(); ++w) {
            QVector<double> x, y;
            if (rows != run.summary.end() && rows->is_array() && std::size_t(w) < rows->size() && (*rows)[std::size_t(w)].is_array()) {
                const auto &row = (*rows)[std::size_t(w)];
                for (std::size_t i = 0; i < row.size(); ++i)
                    if (row[i].is_number()) {
                        x.push_back(double(run.firstStep()) + double(i));
                        y.push_back(row[i].get<double>());
                    }
            }
            QCPGraph *g = graph(run.workerName(w), seriesColor(w), kWorkerLine);
            g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 5 * m_scale));
            setPoints(g, x, y, true);
        }
        p->rescaleAxes();
        p->xAxis->setRange(p->xAxis->range().lower - 0.5, p->xAxis->range().upper + 0.5); // whole markers
        p->yAxis->setRange(0, std::max(1e-3, p->yAxis->range().upper * 1.1));
        return;
    }
    double lastKey = 0;
    auto fill = [&](const RunData &run, const QString &name, QColor c, double width) {
        QVector<double> x, y;
        for (const auto &[t, rate] : run.throughput()) {
            x.push_back(t / 1e9);
            y.push_back(rate);
        }
        QCPGraph *g = graph(name, c, width);
        // Markers too: a run shorter than one window has a single point, which no line shows.
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 6 * m_scale));
        setPoints(g, x, y, true);
        for (double k : x)
            lastKey = std::max(lastKey, k);
    };
    if (m_current)
        fill(*m_current, tr("%1: %2").arg(m_current->label(), modeLabel(*m_current)), seriesColor(0), 2);
    for (std::size_t i = 0; i < m_compare.size(); ++i)
        fill(*m_compare[i], tr("%1: %2").arg(m_compare[i]->label(), modeLabel(*m_compare[i])),
             runColor(int(i)), 2);
    p->rescaleAxes();
    p->xAxis->setRange(0, std::max(0.5, lastKey * 1.05));
    p->yAxis->setRange(0, std::max(1.0, p->yAxis->range().upper * 1.1));
}

} // namespace syncopate
