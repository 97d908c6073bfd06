#include "phaselegend.h"

#include "phasestyle.h"

namespace syncopate {

PhaseLegendItem::PhaseLegendItem(QCPLegend *legend, Phase phase)
    : QCPAbstractLegendItem(legend), m_phase(phase)
{
    setSelectable(false);
}

QSize PhaseLegendItem::minimumOuterSizeHint() const
{
    const QFontMetrics fm(mParentLegend->font());
    const QSize icon = mParentLegend->iconSize();
    return QSize(icon.width() + mParentLegend->iconTextPadding() +
                     fm.horizontalAdvance(style().label) + mMargins.left() +
                     mMargins.right(),
                 std::max(icon.height(), fm.height()) + mMargins.top() + mMargins.bottom());
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
    painter->setFont(mParentLegend->font());
    painter->setPen(mParentLegend->textColor());
    painter->drawText(QRectF(iconRect.right() + mParentLegend->iconTextPadding(), r.top(),
                             r.width(), r.height()),
                      Qt::AlignLeft | Qt::AlignVCenter, st.label);
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
