// Legend entries for the timeline's phases (the timeline is one plottable, so QCustomPlot's own
// per-plottable legend items cannot list its phases).
#pragma once

#include "trace.h"

#include <QPixmap>
#include <QStaticText>
#include <qcustomplot.h>

namespace syncopate {

class PhaseLegendItem : public QCPAbstractLegendItem {
    Q_OBJECT
public:
    PhaseLegendItem(QCPLegend *legend, Phase phase);

protected:
    void draw(QCPPainter *painter) override;
    QSize minimumOuterSizeHint() const override;

private:
    const struct PhaseStyle &style() const;
    Phase m_phase; // Phase::Count: the off-CPU hatch
    // The label shaped once per font: the live timeline draws the legend 30 times a second,
    // and shaping its text each time was a tenth of the GUI thread's work.
    mutable QFont m_font;
    mutable QStaticText m_text;
    mutable int m_textWidth = -1;
    void prepareText(const QFont &font) const;
    QRectF iconRect() const;
    void drawIcon(QPainter *painter);
    void drawLabel(QPainter *painter, bool raster);
    // The entry drawn once into a pixmap and copied after: even shaped, its text and icon were
    // a twentieth of the live timeline's work. Drawn again when what it shows changes.
    struct Drawn {
        QPixmap pixmap;
        QRect rect; // where: patterns are aligned to the plot, not the entry
        QSize icon;
        QFont font;
        QColor textColor;
        int padding = 0;
        qreal dpr = 0;
        bool operator==(const Drawn &o) const
        {
            return rect == o.rect && icon == o.icon && font == o.font && textColor == o.textColor &&
                   padding == o.padding && dpr == o.dpr;
        }
    } m_drawn;
};

// Adds one item per phase that the mode can produce (Phase::Count: the off-CPU hatch).
void addPhaseLegend(QCPLegend *legend, const std::vector<Phase> &phases);

} // namespace syncopate
