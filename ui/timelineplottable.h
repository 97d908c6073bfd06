// The timeline as one QCustomPlot plottable: keys are run time in milliseconds (each run's own,
// so runs line up at their starts), values are row positions (slot 0 at the top; several runs
// stack, each under a heading slot, see stackRuns()). It draws only the rows in view and of
// each only what is in view, through layoutRow(), so runs of millions of spans redraw within a
// frame.
#pragma once

#include "rundata.h"
#include "timelinelayout.h"

#include <qcustomplot.h>

#include <array>
#include <limits>
#include <optional>
#include <utility>

#include <QImage>
#include <QRectF>
#include <QVector>

namespace syncopate {

class TimelinePlottable : public QCPAbstractPlottable {
    Q_OBJECT
public:
    TimelinePlottable(QCPAxis *keyAxis, QCPAxis *valueAxis);

    // runs.front() is the primary run; null runs are left out.
    void setRuns(std::vector<RunDataPtr> runs);
    void setRun(RunDataPtr run) { setRuns({std::move(run)}); }
    const std::vector<RunDataPtr> &runs() const { return m_runs; }
    const RunDataPtr &run() const; // the primary, or null
    // Lays the rows out again (a run's row list changed).
    void restack();
    const std::vector<TimelineSlot> &stack() const { return m_slots; }
    // Vertical position (centre) and half height of each slot, in value-axis units.
    double rowCenter(std::size_t slot) const { return double(slot); }
    double rowHalfHeight(std::size_t slot) const;
    // The slot of the row (not a heading) at a value-axis coordinate, or -1.
    int rowAt(double value) const;
    // The slot (row or heading) nearest to a value-axis coordinate, or -1 outside them all.
    int slotAt(double value) const;
    void setLineScale(double scale) { m_lineScale = scale; }
    // Marks laid out by the last draw that drew any (with caching, maybe only a strip).
    std::size_t lastMarkCount() const { return m_lastMarks; }
    // On screen the marks are kept in an image between frames: a view that slid by whole
    // pixels (as following live does) scrolls it and draws only the new time and what arrived
    // since, not every row again. Exports (vector or not) always draw everything.
    void setCaching(bool on);
    bool caching() const { return m_caching; }
    // The opaque colour beneath the plot area (the plot's background), or invalid when it is
    // not opaque. With one, the cached image is opaque: backdrop, key-axis grid and marks.
    void setBackdrop(const QColor &color);
    // Whether the next on-screen draw covers the whole axis rect with opaque pixels, so that
    // nothing needs painting beneath it.
    bool coversArea() const;
    // Whether the last draw redrew everything (else it scrolled the image and drew a strip).
    bool lastDrawWasFull() const { return m_lastFull; }
    // What the next on-screen draw of the range now on the axes will do, with nothing appended
    // in between: scroll its image by shiftPx device pixels and redraw from fromPx (device
    // pixels from the plot's left edge) on; nullopt where it will draw everything.
    struct NextDraw {
        long shiftPx = 0;
        long fromPx = 0;
    };
    std::optional<NextDraw> nextDraw(qreal dpr) const;
    // Where the last cached draw started redrawing (device pixels from the plot's left edge; 0
    // when it drew everything).
    long lastFromPx() const { return m_lastFromPx; }
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
    void layoutVisible(const RunData &run, std::size_t row, const TimeMapping &mapping);
    void drawHeading(QPainter *painter, std::size_t slot, const QRect &area);
    // The slots in view, their marks from pixel fromX to toX (NaN: the area's right edge).
    void drawSlots(QPainter *painter, const QRect &area, const TimeMapping &mapping, double fromX,
                   double toX = std::numeric_limits<double>::quiet_NaN());
    // Draws the marks gathered in m_batches and m_hatches, phase by phase.
    void drawBatches(QPainter *painter) const;
    struct Plan {
        bool reuse = false; // else everything is drawn again
        bool opaque = false;
        long shiftPx = 0, fromPx = 0;
        std::vector<const RunData *> runs;
        std::vector<std::size_t> rows;
    };
    Plan plan(const QRect &area, const TimeMapping &mapping, qreal dpr) const;
    void drawCached(QCPPainter *painter, const QRect &area, const TimeMapping &mapping);
    void drawGrid(QCPPainter *painter) const;
    bool opaqueImage() const;
    double tickStep() const;
    static std::array<std::pair<long, long>, 2> ringPieces(long offset, long width, long from, long to);

    std::vector<RunDataPtr> m_runs;
    std::vector<TimelineSlot> m_slots;
    std::vector<Record> m_spans; // the visible spans of one row, reused
    bool m_lastDrawnFromSummary = false;
    std::vector<TimelineMark> m_marks; // reused between frames
    struct Batch {
        QVector<QRectF> fills, outlines;
    };
    std::array<Batch, std::size_t(Phase::Count)> m_batches; // the strip's marks by phase, reused
    QVector<QRectF> m_hatches;
    std::size_t m_lastMarks = 0;
    double m_lineScale = 1.0;
    bool m_caching = true;
    bool m_lastFull = true;
    long m_lastFromPx = 0;
    QColor m_backdrop;
    struct Cache {
        // The plot area's marks (over the backdrop and grid when opaque, else transparent
        // between rows), as a ring: the view's left edge is at column offset.
        QImage image;
        long offset = 0;
        bool opaque = false;
        double tickStep = 0; // the key axis' ticks' spacing: the grid in the image is for it
        QRect area;
        qreal dpr = 0;
        double startNs = 0, nsPerPixel = 0;
        QCPRange values;
        double lineScale = 0;
        std::vector<const RunData *> runs;
        std::vector<std::size_t> rows;
        std::vector<std::uint64_t> appended; // RunData::appended() of each run when drawn
    } m_cache;
};

} // namespace syncopate
