// Legend entries for the timeline's phases (the timeline is one plottable, so QCustomPlot's own
// per-plottable legend items cannot list its phases).
#pragma once

#include "trace.h"

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
};

// Adds one item per phase that the mode can produce (Phase::Count: the off-CPU hatch).
void addPhaseLegend(QCPLegend *legend, const std::vector<Phase> &phases);

} // namespace syncopate
