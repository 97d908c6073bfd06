// The timeline as one QCustomPlot plottable: keys are run time in milliseconds, values are row
// positions (row 0 at the top). It draws only what is in view, through layoutRow(), so a run
// of millions of spans redraws within a frame.
#pragma once

#include "rundata.h"
#include "timelinelayout.h"

#include <qcustomplot.h>

#include <array>

#include <QRectF>
#include <QVector>

namespace syncopate {

class TimelinePlottable : public QCPAbstractPlottable {
    Q_OBJECT
public:
    TimelinePlottable(QCPAxis *keyAxis, QCPAxis *valueAxis);

    void setRun(RunDataPtr run);
    const RunDataPtr &run() const { return m_run; }
    // Vertical position (centre) and half height of each row, in value-axis units.
    double rowCenter(std::size_t row) const { return double(row); }
    double rowHalfHeight(std::size_t row) const;
    // The row at a value-axis coordinate, or -1.
    int rowAt(double value) const;
    void setLineScale(double scale) { m_lineScale = scale; }
    std::size_t lastMarkCount() const { return m_lastMarks; }
    // Whether the last row drawn came from its level-of-detail summary rather than raw spans.
    bool lastDrawnFromSummary() const { return m_lastDrawnFromSummary; }

    double selectTest(const QPointF &pos, bool onlySelectable, QVariant *details = nullptr) const override;
    QCPRange getKeyRange(bool &foundRange, QCP::SignDomain inSignDomain = QCP::sdBoth) const override;
    QCPRange getValueRange(bool &foundRange, QCP::SignDomain inSignDomain = QCP::sdBoth,
                           const QCPRange &inKeyRange = QCPRange()) const override;

protected:
    void draw(QCPPainter *painter) override;
    void drawLegendIcon(QCPPainter *painter, const QRectF &rect) const override;

private:
    void layoutVisible(std::size_t row, const TimeMapping &mapping);

    RunDataPtr m_run;
    std::vector<Record> m_spans; // the visible spans of one row, reused
    bool m_lastDrawnFromSummary = false;
    std::vector<TimelineMark> m_marks; // reused between frames
    struct Batch {
        QVector<QRectF> fills, outlines;
    };
    std::array<Batch, std::size_t(Phase::Count)> m_batches; // one row's marks by phase, reused
    QVector<QRectF> m_hatches;
    std::size_t m_lastMarks = 0;
    double m_lineScale = 1.0;
};

} // namespace syncopate
