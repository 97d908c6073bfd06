#include "phaselegend.h"

#include "phasestyle.h"

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
    const PhaseStyle &st = style();
    const QSize icon = mParentLegend->iconSize();
    const QRectF r = mRect;
    const QRectF iconRect(r.left(), r.top() + (r.height() - icon.height()) / 2.0, icon.width(),
                          icon.height());
    if (m_phase == Phase::Wait || m_phase == Phase::Pause)
        painter->fillRect(iconRect, QColor(0xEE, 0xEE, 0xEE));
    else if (m_phase == Phase::Count) // off CPU: over a compute colour, as on the timeline
        painter->fillRect(iconRect, phaseStyle(Phase::Forward).brush);
    painter->fillRect(iconRect, st.brush);
    QPen pen = st.outline;
    pen.setWidthF(std::max(1.0, pen.widthF()));
    painter->setPen(pen);
    painter->setBrush(Qt::NoBrush);
    painter->drawRect(iconRect);
    const QFont font = mParentLegend->font();
    painter->setFont(font);
    painter->setPen(mParentLegend->textColor());
    const QRectF textRect(iconRect.right() + mParentLegend->iconTextPadding(), r.top(), r.width(), r.height());
    if (painter->paintEngine() && painter->paintEngine()->type() == QPaintEngine::Raster) {
        prepareText(font);
        const QSizeF size = m_text.size();
        painter->drawStaticText(QPointF(textRect.left(), textRect.top() + (textRect.height() - size.height()) / 2.0), m_text);
    } else { // SVG and PDF exports keep real text
        painter->drawText(textRect, Qt::AlignLeft | Qt::AlignVCenter, st.label);
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
