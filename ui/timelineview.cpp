#include "timelineview.h"

#include "charts.h"
#include "phaselegend.h"
#include "phasestyle.h"
#include "timelineplottable.h"

#include <QFontMetrics>
#include <QHelpEvent>
#include <QScopeGuard>
#include <QToolTip>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace syncopate {
namespace {

// With an opaque background the view paints straight onto the widget in paintEvent (the
// plottable's ring image copied into the window's backing store once), not through a buffer
// that was then copied again, a full pass over the plot 30 times a second. QCustomPlot's own
// replot still draws every layer into its buffers: this one is a single pixel, so that drawing
// is clipped away (the plottable's image and the label caches stay current all the same).
class OpaquePaintBuffer : public QCPAbstractPaintBuffer {
public:
    OpaquePaintBuffer(const QSize &size, double dpr, const QColor &background)
        : QCPAbstractPaintBuffer(size, dpr), m_background(background)
    {
        OpaquePaintBuffer::reallocateBuffer();
    }
    QCPPainter *startPainting() override { return new QCPPainter(&m_pixel); }
    void draw(QCPPainter *) const override {}
    void clear(const QColor &) override {}
    const QColor &background() const { return m_background; }

protected:
    void reallocateBuffer() override
    {
        m_pixel = QImage(1, 1, QImage::Format_RGB32);
        m_pixel.setDevicePixelRatio(mDevicePixelRatio);
    }

private:
    QColor m_background;
    QImage m_pixel;
};

// Draws what paint() draws inside box through a pixmap, painted again only when key changes, where
// the painter is the raster engine's and may cache (exports keep real text). paint draws in the
// painter's own coordinates; the pixmap is made with the painter's transform moved by whole
// pixels, so the text lands as it would in place.
template <typename Key, typename Paint>
void drawThroughPixmap(QCPPainter *painter, const QRect &box, const Key &key,
                       std::tuple<Key, QRect, qreal> &lastKey, QPixmap &pixmap, Paint paint)
{
    const bool raster = painter->paintEngine() && painter->paintEngine()->type() == QPaintEngine::Raster;
    if (!raster || painter->modes().testFlag(QCPPainter::pmNoCaching))
        return paint(painter);
    const qreal dpr = painter->device() ? painter->device()->devicePixelRatioF() : 1.0;
    const auto full = std::make_tuple(key, box, dpr);
    if (full != lastKey || pixmap.isNull()) {
        pixmap = QPixmap(QSize(int(std::ceil(box.width() * dpr)), int(std::ceil(box.height() * dpr))));
        pixmap.setDevicePixelRatio(dpr);
        pixmap.fill(Qt::transparent);
        QCPPainter p(&pixmap);
        p.setRenderHints(painter->renderHints());
        p.setWorldTransform(painter->worldTransform() * QTransform::fromTranslate(-box.left(), -box.top()));
        paint(&p);
        lastKey = full;
    }
    const QTransform world = painter->worldTransform(); // past the plot's half-pixel shift
    painter->setWorldTransform(QTransform());
    painter->drawPixmap(box.topLeft(), pixmap);
    painter->setWorldTransform(world);
}

// The title drawn once into a pixmap and copied after: laying its text out again was a twentieth
// of the live timeline's work, 30 times a second, for a title that changes with the run shown.
class CachedTextElement : public QCPTextElement {
public:
    using QCPTextElement::QCPTextElement;

protected:
    void draw(QCPPainter *painter) override
    {
        const auto key = std::make_tuple(mRect, mText, mainFont(), mainTextColor(), mTextFlags);
        drawThroughPixmap(painter, mOuterRect, key, m_key, m_pixmap, [this](QCPPainter *p) { QCPTextElement::draw(p); });
    }

private:
    QPixmap m_pixmap;
    std::tuple<std::tuple<QRect, QString, QFont, QColor, int>, QRect, qreal> m_key;
};

} // namespace

namespace {

// A QCPGrid that leaves its drawing out while the plottable's opaque image covers the plot.
class CoverableGrid final : public QCPGrid {
public:
    using QCPGrid::QCPGrid;
    const TimelinePlottable *coveredBy = nullptr;

protected:
    void draw(QCPPainter *painter) override
    {
        if (!coveredBy || !coveredBy->coversArea())
            QCPGrid::draw(painter);
    }
};

// QCPAxisPainterPrivate builds a hash of its tick label font and colour on every draw, to know
// when its label pixmaps are stale (the font's text form: 2% of a live frame's work, for two
// axes). This one builds it again only when one of its parts compares unequal.
class HashKeepingAxisPainter final : public QCPAxisPainterPrivate {
public:
    // Takes over what the axis has set on its painter so far.
    HashKeepingAxisPainter(QCustomPlot *plot, const QCPAxisPainterPrivate &from) : QCPAxisPainterPrivate(plot)
    {
        type = from.type;
        basePen = from.basePen;
        lowerEnding = from.lowerEnding;
        upperEnding = from.upperEnding;
        labelPadding = from.labelPadding;
        labelFont = from.labelFont;
        labelColor = from.labelColor;
        label = from.label;
        tickLabelPadding = from.tickLabelPadding;
        tickLabelRotation = from.tickLabelRotation;
        tickLabelSide = from.tickLabelSide;
        substituteExponent = from.substituteExponent;
        numberMultiplyCross = from.numberMultiplyCross;
        tickLengthIn = from.tickLengthIn;
        tickLengthOut = from.tickLengthOut;
        subTickLengthIn = from.subTickLengthIn;
        subTickLengthOut = from.subTickLengthOut;
        tickPen = from.tickPen;
        subTickPen = from.subTickPen;
        tickLabelFont = from.tickLabelFont;
        tickLabelColor = from.tickLabelColor;
        axisRect = from.axisRect;
        viewportRect = from.viewportRect;
        offset = from.offset;
        abbreviateDecimalPowers = from.abbreviateDecimalPowers;
        reversedEndings = from.reversedEndings;
        subTickPositions = from.subTickPositions;
        tickPositions = from.tickPositions;
        tickLabels = from.tickLabels;
    }

protected:
    QByteArray generateLabelParameterHash() const override
    {
        const auto parts = std::make_tuple(mParentPlot->bufferDevicePixelRatio(), tickLabelRotation, tickLabelSide,
                                           substituteExponent, numberMultiplyCross, tickLabelColor, tickLabelFont);
        if (!m_hash || m_hash->first != parts)
            m_hash.emplace(parts, QCPAxisPainterPrivate::generateLabelParameterHash());
        return m_hash->second;
    }

private:
    using Parts = std::tuple<double, double, QCPAxis::LabelSide, bool, bool, QColor, QFont>;
    mutable std::optional<std::pair<Parts, QByteArray>> m_hash;
};

// A ticker that formats each tick's label once: a live view moves its ticks every frame, and
// formatting their numbers again was a fortieth of a frame's work. The labels are those of
// QCPAxisTicker, kept by tick value and what they are formatted with.
class LabelKeepingTicker final : public QCPAxisTicker {
protected:
    QString getTickLabel(double tick, const QLocale &locale, QChar formatChar, int precision) override
    {
        const auto format = std::make_tuple(locale, formatChar, precision);
        if (format != m_format || m_labels.size() > 4096) {
            m_labels.clear();
            m_format = format;
        }
        const auto it = m_labels.find(tick);
        if (it != m_labels.end())
            return it->second;
        return m_labels.emplace(tick, QCPAxisTicker::getTickLabel(tick, locale, formatChar, precision)).first->second;
    }

private:
    std::tuple<QLocale, QChar, int> m_format{QLocale::c(), QChar(), -1};
    std::map<double, QString> m_labels;
};

} // namespace

TimelineAxis::TimelineAxis(QCPAxisRect *rect, AxisType type) : QCPAxis(rect, type)
{
    QCPAxisPainterPrivate *const painter = new HashKeepingAxisPainter(rect->parentPlot(), *mAxisPainter);
    delete mAxisPainter;
    mAxisPainter = painter;
    // In place of QCPAxis' own grid (same layer, pens and visibility: it has just been made).
    auto *grid = new CoverableGrid(this);
    grid->setVisible(mGrid->visible());
    grid->setPen(mGrid->pen());
    grid->setSubGridPen(mGrid->subGridPen());
    grid->setZeroLinePen(mGrid->zeroLinePen());
    grid->setSubGridVisible(mGrid->subGridVisible());
    grid->setLayer(mGrid->layer());
    delete mGrid;
    mGrid = grid;
}

void TimelineAxis::setGridCoveredBy(const TimelinePlottable *plottable)
{
    static_cast<CoverableGrid *>(mGrid)->coveredBy = plottable;
}

// QCustomPlot lays the axis title out (its text shaped twice) on every draw; this axis keeps it
// in a pixmap, drawn where QCustomPlot would draw it: after the tick labels and the label
// padding, in a margin grown by its height.
int TimelineAxis::calculateMargin()
{
    const int base = QCPAxis::calculateMargin();
    return m_title.isEmpty() || !visible() ? base : base + labelPadding() + titleHeight();
}

int TimelineAxis::titleHeight() const
{
    const QFont font = getLabelFont();
    if (font != m_titleFont || m_title != m_measuredTitle) {
        m_titleFont = font;
        m_measuredTitle = m_title;
        m_titleHeight = QFontMetrics(font).boundingRect(0, 0, 0, 0, Qt::TextDontClip | Qt::AlignCenter, m_title).height();
    }
    return m_titleHeight;
}

void TimelineAxis::setTitle(const QString &title)
{
    if (title == m_title)
        return;
    m_title = title;
    mCachedMarginValid = false;
}

int TimelineAxis::labelReach() const
{
    const QString *longest = nullptr;
    for (const QString &label : mTickVectorLabels)
        if (!longest || label.size() > longest->size())
            longest = &label;
    if (!longest)
        return 2;
    // Labels as long as the longest are as wide give or take a glyph: one digit's room more.
    if (std::pair{longest->size(), mTickLabelFont} != m_reachFor) {
        m_reachFor = {longest->size(), mTickLabelFont};
        const QFontMetrics metrics(mTickLabelFont);
        m_reach = metrics.horizontalAdvance(*longest) / 2 + metrics.horizontalAdvance(QLatin1Char('0')) + 2;
    }
    return m_reach;
}

int TimelineAxis::tickBandBottom()
{
    return axisRect()->rect().bottom() + offset() + QCPAxis::calculateMargin() - padding();
}

void TimelineAxis::draw(QCPPainter *painter)
{
    // A partial frame: only the ticks whose marks or labels reach into the columns repainted.
    const bool partial = !m_drawnColumns.empty();
    const bool labels = mTickVectorLabels.size() == mTickVector.size();
    const auto swapKept = [&] {
        std::swap(m_keptTicks, mTickVector);
        std::swap(m_keptSubTicks, mSubTickVector);
        if (labels)
            std::swap(m_keptLabels, mTickVectorLabels);
    };
    if (partial) {
        const int reach = mTickLabels ? labelReach() : 2;
        const auto drawn = [this](double coord, int margin) {
            const double px = coordToPixel(coord);
            return std::any_of(m_drawnColumns.begin(), m_drawnColumns.end(),
                               [&](const auto &c) { return px + margin >= c.first && px - margin <= c.second; });
        };
        m_keptTicks.clear();
        m_keptLabels.clear();
        m_keptSubTicks.clear();
        for (qsizetype i = 0; i < mTickVector.size(); ++i) {
            if (!drawn(mTickVector[i], reach))
                continue;
            m_keptTicks.append(mTickVector[i]);
            if (labels)
                m_keptLabels.append(mTickVectorLabels[i]);
        }
        for (double sub : std::as_const(mSubTickVector))
            if (drawn(sub, 2))
                m_keptSubTicks.append(sub);
        swapKept();
    }
    const auto restore = qScopeGuard([&] {
        if (partial)
            swapKept();
    });
    if (m_labelsLeftOut) {
        // The frame repaints none of the tick labels' pixels: the line alone (placing each label,
        // even clipped away, and hashing their font was most of this axis' drawing).
        const bool ticks = mTicks;
        mTicks = false;
        QCPAxis::draw(painter);
        mTicks = ticks;
    } else {
        QCPAxis::draw(painter);
    }
    if (m_title.isEmpty() || axisType() != atBottom)
        return;
    const QRect rect = axisRect()->rect();
    const int top = tickBandBottom() + labelPadding();
    const QRect box(rect.left(), top, rect.width(), titleHeight());
    const auto key = std::make_tuple(m_title, getLabelFont(), getLabelColor());
    drawThroughPixmap(painter, box, key, m_titleKey, m_titlePixmap, [&](QCPPainter *p) {
        p->setFont(getLabelFont());
        p->setPen(QPen(getLabelColor()));
        p->drawText(box, Qt::TextDontClip | Qt::AlignCenter, m_title);
    });
}

TimelineView::TimelineView(QWidget *parent) : QCustomPlot(parent)
{
    setNoAntialiasingOnDrag(true);
    setPlottingHint(QCP::phCacheLabels, true);
    // paintEvent covers every pixel (the opaque buffer or QCustomPlot's background fill): the
    // widgets beneath need no painting first.
    setAttribute(Qt::WA_OpaquePaintEvent);
    // Axes of our own in place of QCustomPlot's bottom and left ones, on the same layers.
    auto replace = [this](QCPAxis *axis) {
        const QCPAxis::AxisType type = axis->axisType();
        const QString layer = axis->layer()->name(), gridLayer = axis->grid()->layer()->name();
        const bool grid = axis->grid()->visible();
        axisRect()->removeAxis(axis); // and QCustomPlot's pointer to it
        auto *own = new TimelineAxis(axisRect(), type);
        axisRect()->addAxis(type, own); // sets xAxis or yAxis again
        own->setLayer(layer);
        own->grid()->setLayer(gridLayer);
        own->grid()->setVisible(grid);
        return own;
    };
    m_timeAxis = replace(xAxis);
    m_timeAxis->setTicker(QSharedPointer<QCPAxisTicker>(new LabelKeepingTicker));
    m_rowAxis = replace(yAxis);
    axisRect()->setRangeDragAxes(xAxis, yAxis);
    axisRect()->setRangeZoomAxes(xAxis, yAxis);
    m_plotRect = axisRect();
    m_plottable = new TimelinePlottable(xAxis, yAxis);
    m_timeAxis->setGridCoveredBy(m_plottable);
    m_plottable->removeFromLegend(); // the legend lists phases (addPhaseLegend), not the plottable
    m_timeAxis->setTitle(tr("run time (ms)"));
    yAxis->setRangeReversed(true);
    yAxis->grid()->setVisible(false);
    yAxis->setSubTicks(false);
    yAxis->setTickLength(0, 0);
    m_rowTicker.reset(new QCPAxisTickerText);
    yAxis->setTicker(m_rowTicker);
    setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    axisRect()->setRangeDrag(Qt::Horizontal);
    axisRect()->setRangeZoom(Qt::Horizontal);
    axisRect()->setRangeZoomFactor(0.8);

    plotLayout()->insertRow(0);
    m_title = new CachedTextElement(this, QString(), QFont(font().family(), font().pointSize() + 2, QFont::Bold));
    plotLayout()->addElement(0, 0, m_title);
    axisRect()->insetLayout()->take(legend);
    legend->setFillOrder(QCPLegend::foColumnsFirst);
    legend->setWrap(12);
    legend->setBorderPen(Qt::NoPen);
    legend->setMargins(QMargins(4, 2, 4, 2));

    m_selection = new QCPItemRect(this);
    m_selection->setPen(QPen(QColor(0, 0, 0, 160), 1, Qt::DashLine));
    m_selection->setBrush(QColor(255, 220, 0, 50));
    m_selection->setVisible(false);
    m_selection->setLayer(QStringLiteral("overlay"));
    // One paint buffer instead of two: each is blended over the window on every frame, and a
    // live run draws 30 frames a second; the overlay's own buffer only spared a full replot
    // while a selection is dragged.
    layer(QStringLiteral("overlay"))->setMode(QCPLayer::lmLogical);
    connect(selectionRect(), &QCPSelectionRect::accepted, this, &TimelineView::onSelectionAccepted);
    setMouseTracking(true);
    setToolTip(metricHelp(QStringLiteral("timeline")));
    placeLegend(false);
    refresh();
}

void TimelineView::setTitle(const QString &title)
{
    m_title->setText(title);
    ++m_layoutGeneration;
}

const RunDataPtr &TimelineView::run() const { return m_plottable->run(); }

void TimelineView::setRuns(std::vector<RunDataPtr> runs)
{
    runs.erase(std::remove(runs.begin(), runs.end(), nullptr), runs.end());
    // Checking a run to compare under the shown one must not throw away where the user looks.
    const bool keepView = !runs.empty() && !m_runs.empty() && runs.front() == m_runs.front() &&
                          (runs.size() > 1 || m_runs.size() > 1);
    m_runs = std::move(runs);
    m_plottable->setRuns(m_runs);
    m_labelledRows.clear();
    m_selection->setVisible(false);
    updateLegend();
    updateRowLabels();
    if (keepView) {
        refresh();
        return;
    }
    m_follow = true;
    refresh();
    fitAll();
}

void TimelineView::updateLegend()
{
    // The phases of the primary in its order, then any other run's after its predecessor there.
    std::vector<Phase> phases;
    for (const RunDataPtr &run : m_runs) {
        std::vector<Phase> own;
        if (run->imported()) // a profiler trace: its kernels and operators, and the stalls in collectives
            own = {Phase::Forward, Phase::Backward, Phase::Apply, Phase::Compute, Phase::Copy, Phase::Wait, Phase::Reduce};
        else if (run->config().async())
            own = {Phase::Pull, Phase::Data, Phase::Forward, Phase::Backward, Phase::Push, Phase::Wait, Phase::Delay};
        else
            own = {Phase::Data, Phase::Forward, Phase::Backward, Phase::Wait, Phase::Reduce, Phase::Apply, Phase::Delay};
        if (run->config().checkpoint && !run->imported())
            own.insert(own.begin() + 3, Phase::Recompute);
        if (run->config().backupWorkers > 0 && !run->imported())
            own.push_back(Phase::Dropped);
        if (run->config().prefetch > 0 && run->config().costUs > 0 && !run->imported())
            own.insert(std::find(own.begin(), own.end(), Phase::Data) + 1, Phase::InputWait);
        if (!run->imported()) {
            own.push_back(Phase::Eval);
            own.push_back(Phase::Pause);
            own.push_back(Phase::Count); // off CPU
        }
        auto at = phases.begin();
        for (Phase p : own) {
            const auto found = std::find(phases.begin(), phases.end(), p);
            at = found != phases.end() ? found + 1 : phases.insert(at, p) + 1;
        }
    }
    addPhaseLegend(legend, phases);
    ++m_layoutGeneration;
    fitLegendToWidth();
    placeLegend(!phases.empty());
}

void TimelineView::resizeEvent(QResizeEvent *event)
{
    QCustomPlot::resizeEvent(event);
    fitLegendToWidth();
}

void TimelineView::fitLegendToWidth(int width)
{
    if (width <= 0)
        width = this->width();
    // As many columns as the widest entry allows, so that no label is cut at any width or
    // font size (a projector's large text wraps onto more rows instead).
    int widest = 1;
    for (int i = 0; i < legend->itemCount(); ++i)
        if (const QCPAbstractLegendItem *item = legend->item(i)) // a grid's empty cell is null
            widest = std::max(widest, item->minimumOuterSizeHint().width());
    const int room = width - legend->margins().left() - legend->margins().right() - 8;
    const int columns = std::max(1, (room + legend->columnSpacing()) / (widest + legend->columnSpacing()));
    if (legend->wrap() != columns) {
        legend->setWrap(columns);
        // setWrap alone places only entries added later: the present ones flow again here, or
        // a narrowed window kept a row too wide for it and cut every label.
        legend->setFillOrder(QCPLegend::foColumnsFirst, true);
        ++m_layoutGeneration;
        replot(QCustomPlot::rpQueuedReplot);
    }
}

void TimelineView::placeLegend(bool show)
{
    // The legend is a row of the plot's layout below the axis rect. An empty one would cap the
    // layout's width at its own (zero), so it leaves the layout while there is nothing to list.
    const bool placed = legend->layout() == plotLayout();
    if (show && !placed) {
        plotLayout()->addElement(plotLayout()->rowCount(), 0, legend);
        plotLayout()->setRowStretchFactor(plotLayout()->rowCount() - 1, 0.001);
    } else if (!show && placed) {
        plotLayout()->take(legend);
        plotLayout()->simplify();
    }
    legend->setVisible(show);
    ++m_layoutGeneration;
}

void TimelineView::updateRowLabels()
{
    m_rowTicker->clear();
    ++m_layoutGeneration;
    m_plottable->restack();
    m_labelledRows.clear();
    for (const RunDataPtr &run : m_runs)
        m_labelledRows.push_back(run->rows().size());
    const auto &stack = m_plottable->stack();
    const QFontMetrics metrics(yAxis->tickLabelFont());
    m_labelBasis = {plotRect()->height(), metrics.height()};
    // 3 runs of 16 workers are 51 slots: in a window a third of the screen high the labels would
    // overlap, so they thin out (labelledSlots: run names always, then every k-th worker).
    const double range = double(stack.size()) + 0.2;
    const auto shown = labelledSlots(stack, double(m_labelBasis.first) / range, metrics.height() + 2.0);
    const bool stacked = m_runs.size() > 1;
    for (std::size_t i = 0; i < stack.size(); ++i) {
        if (!shown[i])
            continue;
        const TimelineSlot &s = stack[i];
        QString label;
        if (s.heading()) // a long name is cut in the middle, where run names differ least
            label = metrics.elidedText(m_runs[s.run]->label(), Qt::ElideMiddle, 28 * metrics.averageCharWidth());
        else if (const QString own = m_runs[s.run]->rowLabel(m_runs[s.run]->rows()[std::size_t(s.row)]); !own.isEmpty())
            label = metrics.elidedText(own, Qt::ElideRight, 30 * metrics.averageCharWidth()); // ranks, imports
        else if (stacked)
            label = s.dataLane ? tr("w%1 data").arg(s.worker) : tr("w%1").arg(s.worker);
        else
            label = s.dataLane ? tr("data %1").arg(s.worker) : tr("worker %1").arg(s.worker);
        m_rowTicker->addTick(double(i), label);
    }
    yAxis->setRange(-0.6, double(stack.size()) - 0.4);
}

TimelineView::LayoutBasis TimelineView::layoutBasis() const
{
    // The viewport, not the widget: an export lays out at its own size.
    return {viewport().size(), bufferDevicePixelRatio(), font(), m_layoutGeneration};
}

bool TimelineView::opaqueBuffer() const
{
    return mPaintBuffers.size() == 1 && dynamic_cast<const OpaquePaintBuffer *>(mPaintBuffers.front().data());
}

void TimelineView::installOpaqueBuffer()
{
    // Only while every layer paints into one buffer (the overlay layer is logical) and the
    // background is opaque; otherwise QCustomPlot's own buffers and painting.
    const bool opaque = mBackgroundBrush.style() == Qt::SolidPattern && mBackgroundBrush.color().alpha() == 255 &&
                        std::all_of(mLayers.begin(), mLayers.end(), [](const QCPLayer *l) { return l->mode() == QCPLayer::lmLogical; });
    // The plottable's image holds the background beneath its marks when that is opaque.
    m_plottable->setBackdrop(mBackgroundBrush.style() == Qt::SolidPattern ? mBackgroundBrush.color() : QColor());
    const bool ours = opaqueBuffer();
    if (ours && opaque &&
        static_cast<const OpaquePaintBuffer *>(mPaintBuffers.front().data())->background() == mBackgroundBrush.color())
        return;
    if (!ours && !opaque)
        return;
    mPaintBuffers.clear(); // replot's setupPaintBuffers makes QCustomPlot's own when none is here
    if (opaque)
        mPaintBuffers.append(QSharedPointer<QCPAbstractPaintBuffer>(
            new OpaquePaintBuffer(viewport().size(), bufferDevicePixelRatio(), mBackgroundBrush.color())));
}

void TimelineView::paintEvent(QPaintEvent *event)
{
    if (!opaqueBuffer())
        return QCustomPlot::paintEvent(event);
    QCPPainter painter(this);
    if (!painter.isActive())
        return;
    m_direct = &painter; // updateLayout fills the background once the plot area is known
    m_directRegion = event->region();
    // A live frame repaints the plot and the time axis: the row labels beside the plot are
    // left out of it unless the region reaches one of them (the last row's, say, below the plot).
    const QRect plot = plotRect()->rect();
    const int half = QFontMetrics(yAxis->tickLabelFont()).height() / 2 + 2;
    int labelsBottom = plot.top();
    for (auto it = m_rowTicker->ticks().cbegin(); it != m_rowTicker->ticks().cend(); ++it)
        labelsBottom = std::max(labelsBottom, int(std::ceil(yAxis->coordToPixel(it.key()))) + half);
    m_rowAxis->setLabelsLeftOut(!event->region().intersects(QRect(QPoint(0, 0), QPoint(plot.left() - 2, labelsBottom))));
    // The time axis draws the ticks whose marks or labels reach into the columns painted.
    std::vector<std::pair<int, int>> columns;
    for (const QRect &r : event->region()) {
        if (r.left() <= 0 && r.right() >= width() - 1) {
            columns.clear();
            break;
        }
        columns.emplace_back(r.left(), r.right());
    }
    m_timeAxis->setDrawnColumns(std::move(columns));
    // Nor is the legend beneath laid out and drawn only to be clipped away.
    QCPLayer *const legendLayer = legend->layer();
    const bool legendShown = legendLayer->visible();
    legendLayer->setVisible(legendShown && event->region().intersects(legend->outerRect()));
    const auto done = qScopeGuard([=, this] {
        m_direct = nullptr;
        m_rowAxis->setLabelsLeftOut(false);
        m_timeAxis->setDrawnColumns({});
        legendLayer->setVisible(legendShown);
    });
    draw(&painter);
    if (event->region().contains(rect()))
        m_paintedChrome = chrome();
    // A strip wider than planned (records came in between) left pixels the scroll moved but
    // nobody painted: the plot once more, from the plottable's image.
    if (m_plannedFromPx >= 0 && m_plottable->lastFromPx() < m_plannedFromPx)
        update(plotRect()->rect());
    m_plannedFromPx = -1;
}

TimelineView::Chrome TimelineView::chrome() const
{
    return {layoutBasis(), m_labelledRows, plotRect()->rect(), plotRect()->outerRect()};
}

void TimelineView::updateLayout()
{
    // Called first in every replot, before the paint buffers are set up and drawn.
    installOpaqueBuffer();
    // Painting straight onto the widget: the background goes first, once the layout is known,
    // and not beneath the plot area when the plottable's opaque image covers it.
    const auto background = qScopeGuard([this] {
        if (!m_direct)
            return;
        // Only what this paint covers (a live frame: the time axis' strip).
        QRegion fill = m_directRegion & viewport();
        if (m_plottable->coversArea())
            fill -= plotRect()->rect();
        for (const QRect &r : fill)
            m_direct->fillRect(r, mBackgroundBrush);
    });
    if (layoutBasis() == m_laidOut) {
        // Only the range moved: new ticks, same margins (a tick label's height does not depend
        // on its text, and the row labels have not changed). The time axis' ticks; the row
        // axis' only when its range moved; none for the hidden top and right axes.
        m_timeAxis->prepareTicks();
        if (yAxis->range() != m_rowTicksFor) {
            m_rowAxis->prepareTicks();
            m_rowTicksFor = yAxis->range();
        }
        return;
    }
    QCustomPlot::updateLayout();
    m_rowTicksFor = yAxis->range();
    // Which row labels fit depends on the axis rect's height, known only now. When it (or the
    // label font) changed, label again and lay out once more: the height does not depend on
    // the labels, so once is enough.
    if (std::pair{plotRect()->height(), QFontMetrics(yAxis->tickLabelFont()).height()} != m_labelBasis) {
        updateRowLabels();
        QCustomPlot::updateLayout();
    }
    m_laidOut = layoutBasis();
}

void TimelineView::refresh()
{
    bool relabel = m_labelledRows.size() != m_runs.size();
    for (std::size_t i = 0; !relabel && i < m_runs.size(); ++i)
        relabel = m_runs[i]->rows().size() != m_labelledRows[i];
    if (relabel)
        updateRowLabels();
    const bool drawn = std::any_of(m_runs.begin(), m_runs.end(), [](const RunDataPtr &r) { return r->spanCount() > 0; });
    // Set again only when it would change (every live frame looked the item up and set its font).
    // A run that has ended (or was opened) with nothing in it is not waiting for anything.
    const bool ended = !m_runs.empty() && run() && run()->state != RunState::Running;
    const QString empty = ended ? tr("This run recorded nothing on the timeline.") : emptyPlotText(!m_runs.empty());
    const std::tuple<QString, int, QFont> placeholder{drawn ? QString() : empty, legend->itemCount(), font()};
    if (placeholder != m_placeholderFor) {
        setPlaceholder(this, std::get<0>(placeholder));
        m_placeholderFor = placeholder;
    }
    // Only the primary can be live; the others have ended.
    const RunDataPtr &primary = run();
    if (m_follow && primary && primary->state == RunState::Running) {
        const double end = double(primary->endNs()) / 1e6;
        // The window's left edge on a grid of whole device pixels, so that from one frame to
        // the next the view slides by whole pixels and the plottable scrolls its image rather
        // than drawing every row again.
        const double px = std::max(1.0, plotRect()->width() * devicePixelRatioF());
        const double step = m_followWindowMs / px;
        const double lower = std::max(0.0, std::ceil((end - m_followWindowMs) / step) * step);
        xAxis->setRange(lower, std::max(lower + m_followWindowMs, 1e-3));
    }
    // Painted straight onto the widget, a live frame needs no replot into buffers first, and
    // while the title, row labels and legend stay as they were painted, only the plot and the
    // time axis beneath it are painted again (and sent to the display).
    if (!opaqueBuffer()) {
        replot(QCustomPlot::rpQueuedReplot);
    } else if (m_paintedChrome && *m_paintedChrome == chrome()) {
        const QRect plot = plotRect()->rect();
        const auto next = m_plottable->nextDraw(devicePixelRatioF());
        // Not while a scrolled frame waits to be painted: the plan is against the last draw.
        if (next && m_plannedFromPx < 0 && devicePixelRatioF() == 1.0 && drawn && m_plottable->coversArea()) {
            // The plot's pixels slide with the view, so the window system moves them (on X11
            // the server copies within its own pixmap) and only the strip the plottable draws
            // anew is painted and sent, not the whole plot 30 times a second. The time axis'
            // ticks and labels beneath slide with it (its title stays); the row axis' line on
            // the left edge stays.
            const int shift = int(next->shiftPx), band = m_timeAxis->tickBandBottom();
            if (shift > 0)
                scroll(-shift, 0, QRect(plot.left() + 1, plot.top(), plot.width() - 1, band - plot.top() + 1));
            QRegion live(QRect(plot.left() + int(next->fromPx), plot.top() - 1, plot.width() - int(next->fromPx) + 1, plot.height() + 2));
            // Painted anew beneath: at the left end, the labels of ticks that left the range and
            // the parts of labels past the plot's edge, which did not slide; at the right end,
            // what came in, with the labels of ticks that came into the range.
            const int reach = m_timeAxis->labelReach() + 1;
            live += QRect(QPoint(plot.left() - reach, plot.bottom()), QPoint(plot.left() + reach, band));
            const int from = std::min(plot.left() + int(next->fromPx), plot.right() + 1 - shift) - reach;
            live += QRect(QPoint(from, plot.bottom()), QPoint(width() - 1, band));
            // Should records come in before the paint, paintEvent finds the strip wider.
            m_plannedFromPx = next->fromPx;
            update(live);
        } else {
            // The time axis: its tick labels slide, and reach past the plot's ends.
            QRegion live(QRect(0, plot.bottom(), width(), plotRect()->outerRect().bottom() - plot.bottom() + 1));
            live += plot.adjusted(-1, -1, 1, 1); // and the axes' lines on its edges
            if (m_plannedFromPx >= 0)
                m_plannedFromPx = 0; // the whole plot is painted
            update(live);
        }
    } else {
        update();
    }
}

void TimelineView::setFollowLive(bool follow)
{
    if (follow == m_follow)
        return;
    m_follow = follow;
    if (follow)
        refresh();
    Q_EMIT followLiveChanged(follow);
}

void TimelineView::fitAll()
{
    // Runs are aligned at their starts: the longest one sets the end.
    double end = m_runs.empty() ? 1.0 : 0.0;
    for (const RunDataPtr &r : m_runs)
        end = std::max(end, double(r->endNs()) / 1e6);
    xAxis->setRange(0, std::max(end, 1e-3));
    replot(QCustomPlot::rpQueuedReplot);
}

void TimelineView::setPresentationScale(double scale)
{
    m_plottable->setLineScale(scale);
    QFont f = font();
    xAxis->setLabelFont(f);
    xAxis->setTickLabelFont(f);
    yAxis->setTickLabelFont(f);
    legend->setFont(f);
    legend->setIconSize(int(18 * scale), int(12 * scale));
    fitLegendToWidth(); // larger text: more rows rather than clipped labels
    QFont title = f;
    title.setPointSizeF(f.pointSizeF() + 2);
    title.setBold(true);
    m_title->setFont(title);
    ++m_layoutGeneration;
    refresh(); // also rescales the placeholder text
}

void TimelineView::mousePressEvent(QMouseEvent *event)
{
    setSelectionRectMode(event->modifiers() & Qt::ShiftModifier ? QCP::srmCustom : QCP::srmNone);
    if (event->button() == Qt::LeftButton && !(event->modifiers() & Qt::ShiftModifier))
        setFollowLive(false);
    QCustomPlot::mousePressEvent(event);
}

void TimelineView::wheelEvent(QWheelEvent *event)
{
    setFollowLive(false);
    QCustomPlot::wheelEvent(event);
}

void TimelineView::mouseDoubleClickEvent(QMouseEvent *event)
{
    QCustomPlot::mouseDoubleClickEvent(event);
    setFollowLive(false);
    fitAll();
}

void TimelineView::mouseMoveEvent(QMouseEvent *event)
{
    QCustomPlot::mouseMoveEvent(event);
    if (event->buttons() == Qt::NoButton) {
        const QString text = describeAt(event->pos());
        if (text.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(event->globalPosition().toPoint(), text, this);
    }
}

bool TimelineView::event(QEvent *event)
{
    // Qt's delayed tooltip would replace a span's description with the general help: over a
    // span it shows the span, elsewhere the help.
    if (event->type() == QEvent::ToolTip) {
        const auto *help = static_cast<QHelpEvent *>(event);
        const QString text = describeAt(help->pos());
        QToolTip::showText(help->globalPos(), text.isEmpty() ? toolTip() : text, this);
        return true;
    }
    return QCustomPlot::event(event);
}

QString TimelineView::describeAt(const QPoint &pos) const
{
    if (m_runs.empty() || !plotRect()->rect().contains(pos))
        return {};
    const double value = yAxis->pixelToCoord(pos.y());
    const int slot = m_plottable->slotAt(value);
    if (slot < 0)
        return {};
    const TimelineSlot &where = m_plottable->stack()[std::size_t(slot)];
    const RunData &run = *m_runs[where.run];
    if (where.heading())
        return QStringLiteral("<b>") + run.title().toHtmlEscaped() + QStringLiteral("</b>");
    if (m_plottable->rowAt(value) < 0)
        return {};
    const double t = xAxis->pixelToCoord(pos.x()) * 1e6;
    const double nsPerPx = xAxis->range().size() * 1e6 / std::max(1, plotRect()->width());
    const auto &trace = run.trace();
    const auto r = std::size_t(where.row);
    // Only the spans around the cursor are fetched; where there are many, the summary counts.
    const std::uint64_t near = trace.countIn(r, std::int64_t(t - 1.5 * nsPerPx), std::int64_t(t + 1.5 * nsPerPx));
    if (near > 1000)
        return tr("%1 spans too small to show here: zoom in (mouse wheel) to see them").arg(near);
    std::vector<Record> spans;
    try {
        trace.spansIn(r, std::int64_t(t - 2 * nsPerPx), std::int64_t(t + 2 * nsPerPx), spans);
    } catch (const StoreError &e) {
        return QString::fromStdString(e.what()).toHtmlEscaped();
    }
    const auto i = spanAt(spans, t, 2 * nsPerPx);
    if (i < 0)
        return {};
    const Record &s = spans[std::size_t(i)];
    if (double(s.duration()) < 3 * nsPerPx) {
        const std::size_t n = countSpansIn(spans, t - 1.5 * nsPerPx, t + 1.5 * nsPerPx);
        if (n > 1)
            return tr("%1 spans too small to show here: zoom in (mouse wheel) to see them").arg(n);
    }
    const PhaseStyle &st = phaseStyle(s.phase());
    // With several runs shown the same worker exists in each: the text says which run's.
    const QString who = m_runs.size() > 1 ? tr("%1, %2").arg(run.label().toHtmlEscaped(), run.workerName(s.worker))
                                          : run.workerName(s.worker);
    QString text = tr("<b>%1: %2</b><br>step %3<br>%4 ms, from %5 ms")
                       .arg(who)
                       .arg(st.label)
                       .arg(run.imported() ? run.firstStep() + std::int64_t(s.step) : std::int64_t(s.step))
                       .arg(double(s.duration()) / 1e6, 0, 'f', 3)
                       .arg(double(s.start) / 1e6, 0, 'f', 3);
    if (s.phase() == Phase::Push)
        text += tr("<br>staleness %1").arg(s.value);
    else if (s.phase() == Phase::Pull)
        text += tr("<br>pulled version %1").arg(s.value);
    else if (s.phase() == Phase::Reduce && run.imported())
        text += s.value > 0 ? tr("<br>NCCL collective, %1 KiB").arg(s.value / 1024.0, 0, 'f', 1)
                            : tr("<br>NCCL collective (the trace gives no size)");
    else if (s.phase() == Phase::Reduce)
        text += tr("<br>%1 KiB averaged").arg(s.value / 1024.0, 0, 'f', 1);
    const double offMs = offCpuNs(s) / 1e6;
    if (offMs > 0 && s.phase() == Phase::Wait)
        text += tr("<br>resumed %1 ms after the barrier opened: the OS had not run it")
                    .arg(offMs, 0, 'f', 3);
    else if (offMs > 0)
        text += tr("<br>%1 ms of it off the CPU (%2%): the OS ran something else")
                    .arg(offMs, 0, 'f', 3)
                    .arg(100.0 * offMs * 1e6 / std::max(1.0, double(s.duration())), 0, 'f', 0);
    QString help = st.tooltip;
    if (s.phase() == Phase::Wait && run.imported())
        help = tr("Stalled in the collective: this rank's NCCL kernel had started and waited for the "
                  "last rank to start it (the latest start among the loaded ranks minus this one's).");
    else if (s.phase() == Phase::Reduce && run.imported())
        help = tr("The NCCL kernel once every loaded rank had started it: the transfer itself.");
    else if (s.phase() == Phase::Wait)
        help = run.config().async()
                   ? tr("Stalled: waiting for the staleness bound or the parameter server's lock.")
                   : tr("Stalled at the barrier, waiting for the slowest worker.");
    return text + QStringLiteral("<br><i>") + help + QStringLiteral("</i>");
}

QString TimelineView::summarizeRange(double t0Ms, double t1Ms) const
{
    if (m_runs.empty() || t1Ms <= t0Ms)
        return {};
    const double total = (t1Ms - t0Ms) * 1e6;
    QString text = tr("%1 to %2 ms (%3 ms):").arg(t0Ms, 0, 'f', 1).arg(t1Ms, 0, 'f', 1).arg(t1Ms - t0Ms, 0, 'f', 1);
    // One line per run when several show (the same range of each run's own time).
    for (const RunDataPtr &run : m_runs) {
        std::vector<std::array<double, std::size_t(Phase::Count)>> shares;
        std::vector<double> offCpu;
        try {
            shares = run->phaseTimeIn(t0Ms * 1e6, t1Ms * 1e6, &offCpu);
        } catch (const StoreError &e) {
            if (m_runs.size() == 1)
                return QString::fromStdString(e.what());
            text += QLatin1Char('\n') + run->label() + QStringLiteral(": ") + QString::fromStdString(e.what()) + QLatin1Char(';');
            continue;
        }
        if (m_runs.size() > 1)
            text += QLatin1Char('\n') + run->label() + QLatin1Char(':');
        for (std::size_t w = 0; w < shares.size(); ++w) {
            const auto &a = shares[w];
            const double wait = a[std::size_t(Phase::Wait)];
            const double recompute = a[std::size_t(Phase::Recompute)];
            const double delay = a[std::size_t(Phase::Delay)];
            double busy = 0;
            for (Phase p : {Phase::Data, Phase::Forward, Phase::Backward, Phase::Reduce, Phase::Apply,
                            Phase::Push, Phase::Pull, Phase::Eval})
                busy += a[std::size_t(p)];
            text += tr("  w%1 busy %2% wait %3% recompute %4% delay %5% off CPU %6%;")
                        .arg(w)
                        .arg(100 * busy / total, 0, 'f', 0)
                        .arg(100 * wait / total, 0, 'f', 0)
                        .arg(100 * recompute / total, 0, 'f', 0)
                        .arg(100 * delay / total, 0, 'f', 0)
                        .arg(100 * offCpu[w] / total, 0, 'f', 0);
        }
        if (text.endsWith(QLatin1Char(';')))
            text.chop(1);
    }
    return text;
}

void TimelineView::onSelectionAccepted(const QRect &rect, QMouseEvent *)
{
    const double a = xAxis->pixelToCoord(rect.left()), b = xAxis->pixelToCoord(rect.right());
    const double t0 = std::min(a, b), t1 = std::max(a, b);
    m_selection->topLeft->setCoords(t0, yAxis->range().lower);
    m_selection->bottomRight->setCoords(t1, yAxis->range().upper);
    m_selection->setVisible(true);
    replot(QCustomPlot::rpQueuedReplot);
    Q_EMIT rangeSummaryAvailable(summarizeRange(t0, t1));
}

} // namespace syncopate

