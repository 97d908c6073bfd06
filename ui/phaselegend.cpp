#include "phaselegend.h"

#include "phasestyle.h"

#include <QPainter>

#include <algorithm>
#include <cmath>

namespace syncopate {

PhaseLegendItem::PhaseLegendItem(QCPLegend *legend, Phase phase)
    : QCPAbstractLegendItem(legend), m_phase(phase)
{
    setSelectable(false);
}

void PhaseLegendItem::prepareText(const QFont &font) const
{
    if (m_textWidth >= 0 && font == m_font)
        return;
    m_font = font;
    m_text.setText(style().label);
    m_text.setTextFormat(Qt::PlainText);
    m_text.prepare(QTransform(), font);
    m_textWidth = QFontMetrics(font).horizontalAdvance(style().label);
}

QSize PhaseLegendItem::minimumOuterSizeHint() const
{
    const QFont font = mParentLegend->font();
    prepareText(font);
    const QSize icon = mParentLegend->iconSize();
    return QSize(icon.width() + mParentLegend->iconTextPadding() + m_textWidth + mMargins.left() +
                     mMargins.right(),
                 std::max(icon.height(), QFontMetrics(font).height()) + mMargins.top() + mMargins.bottom());
}

void PhaseLegendItem::draw(QCPPainter *painter)
{
    const bool raster = painter->paintEngine() && painter->paintEngine()->type() == QPaintEngine::Raster;
    if (!raster || painter->modes().testFlag(QCPPainter::pmNoCaching)) { // SVG and PDF exports keep real text
        drawIcon(painter);
        return drawLabel(painter, raster);
    }
    Drawn key;
    // What drawing in place may paint: QCPLayer clips each layerable to its clip rect moved up
    // a pixel (an outline's antialiased edge reaches there).
    key.rect = clipRect().translated(0, -1);
    key.icon = mParentLegend->iconSize();
    key.font = mParentLegend->font();
    key.textColor = mParentLegend->textColor();
    key.padding = mParentLegend->iconTextPadding();
    key.dpr = painter->device() ? painter->device()->devicePixelRatioF() : 1.0;
    if (!(key == m_drawn) || m_drawn.pixmap.isNull()) {
        key.pixmap = QPixmap(QSize(int(std::ceil(key.rect.width() * key.dpr)), int(std::ceil(key.rect.height() * key.dpr))));
        key.pixmap.setDevicePixelRatio(key.dpr);
        key.pixmap.fill(Qt::transparent);
        QPainter p(&key.pixmap);
        // The plot's painter moved by whole pixels (its half-pixel shift when antialiased
        // included): the same pixels as drawing in place. The hatches' origin moves by whole
        // 8-pixel patterns to where the pixmap's coordinates stay positive: from a negative
        // one Qt rounds them a pixel off.
        p.setRenderHints(painter->renderHints());
        p.setWorldTransform(painter->worldTransform() * QTransform::fromTranslate(-key.rect.left(), -key.rect.top()));
        const int patterns = std::max({key.rect.left(), key.rect.top(), 0}) / 8 + 1;
        p.setBrushOrigin(painter->brushOrigin() + QPointF(8.0 * patterns, 8.0 * patterns));
        drawIcon(&p);
        drawLabel(&p, true);
        p.end();
        m_drawn = std::move(key);
    }
    // At the device pixel the pixmap was drawn for, past the plot's half-pixel shift.
    const QTransform world = painter->worldTransform();
    painter->setWorldTransform(QTransform());
    painter->drawPixmap(m_drawn.rect.topLeft(), m_drawn.pixmap);
    painter->setWorldTransform(world);
}

QRectF PhaseLegendItem::iconRect() const
{
    const QSize icon = mParentLegend->iconSize();
    const QRectF r = mRect;
    return QRectF(r.left(), r.top() + (r.height() - icon.height()) / 2.0, icon.width(), icon.height());
}

void PhaseLegendItem::drawIcon(QPainter *painter)
{
    const PhaseStyle &st = style();
    const QRectF rect = iconRect();
    if (m_phase == Phase::Wait || m_phase == Phase::Pause)
        painter->fillRect(rect, QColor(0xEE, 0xEE, 0xEE));
    else if (m_phase == Phase::Count) // off CPU: over a compute colour, as on the timeline
        painter->fillRect(rect, phaseStyle(Phase::Forward).brush);
    painter->fillRect(rect, st.brush);
    QPen pen = st.outline;
    pen.setWidthF(std::max(1.0, pen.widthF()));
    painter->setPen(pen);
    painter->setBrush(Qt::NoBrush);
    painter->drawRect(rect);
}

void PhaseLegendItem::drawLabel(QPainter *painter, bool raster)
{
    const QRectF r = mRect;
    const QFont font = mParentLegend->font();
    painter->setFont(font);
    painter->setPen(mParentLegend->textColor());
    const QRectF textRect(iconRect().right() + mParentLegend->iconTextPadding(), r.top(), r.width(), r.height());
    if (raster) {
        prepareText(font);
        const QSizeF size = m_text.size();
        painter->drawStaticText(QPointF(textRect.left(), textRect.top() + (textRect.height() - size.height()) / 2.0), m_text);
    } else {
        painter->drawText(textRect, Qt::AlignLeft | Qt::AlignVCenter, style().label);
    }
}

const PhaseStyle &PhaseLegendItem::style() const
{
    return m_phase == Phase::Count ? offCpuStyle() : phaseStyle(m_phase);
}

void addPhaseLegend(QCPLegend *legend, const std::vector<Phase> &phases)
{
    legend->clearItems();
    for (Phase p : phases)
        legend->addItem(new PhaseLegendItem(legend, p));
}

} // namespace syncopate
