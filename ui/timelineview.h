// The timeline widget: the plottable on a time axis with one labelled row per worker (and its
// prefetch lane), a phase legend, follow-live or free navigation, hover details and range
// summaries. Several runs stack on the one time axis, each a group of rows under its name,
// aligned at their starts and zoomed and panned together, for comparing modes.
#pragma once

#include "rundata.h"

#include <qcustomplot.h>

#include <optional>
#include <tuple>

namespace syncopate {

class TimelinePlottable;

// The timeline's axes (timelineview.cpp): the time axis draws its title from a pixmap, and the
// row axis leaves its labels out of frames that repaint none of their pixels.

class TimelineAxis : public QCPAxis {
public:
    TimelineAxis(QCPAxisRect *rect, AxisType type);
    // The grid is not drawn while this plottable's opaque image covers the plot: the image holds
    // the same grid lines beneath its marks, and QCPGrid's were painted over every frame.
    void setGridCoveredBy(const TimelinePlottable *plottable);
    // Drawn by this axis beneath the tick labels (QCPAxis's own label stays empty).
    void setTitle(const QString &title);
    const QString &title() const { return m_title; }
    // For the draws that follow: whether they repaint none of the tick labels' pixels.
    void setLabelsLeftOut(bool out) { m_labelsLeftOut = out; }
    // The ticks for the range now set (what QCPAxisRect prepares for every axis before a draw).
    void prepareTicks() { setupTickVectors(); }
    // For the draws that follow: the columns [first, last] of widget pixels they repaint. Ticks
    // and labels wholly outside them are left out (placing and hashing every label of the axis
    // was most of its drawing). Empty: all are drawn.
    void setDrawnColumns(std::vector<std::pair<int, int>> columns) { m_drawnColumns = std::move(columns); }
    // How far a tick label reaches to either side of its tick, in pixels (its ticks' widest).
    int labelReach() const;
    // The last widget row of the ticks and their labels, above the title (a bottom axis).
    int tickBandBottom();

protected:
    int calculateMargin() override;
    void draw(QCPPainter *painter) override;

private:
    int titleHeight() const;
    QString m_title;
    bool m_labelsLeftOut = false;
    std::vector<std::pair<int, int>> m_drawnColumns;
    QVector<double> m_keptTicks, m_keptSubTicks; // the ticks a partial draw keeps (reused)
    QVector<QString> m_keptLabels;
    mutable std::pair<qsizetype, QFont> m_reachFor{-1, QFont()}; // the longest label's length, the font
    mutable int m_reach = 0;                                      // and labelReach() for them
    mutable QFont m_titleFont;
    mutable QString m_measuredTitle;
    mutable int m_titleHeight = 0;
    QPixmap m_titlePixmap;
    std::tuple<std::tuple<QString, QFont, QColor>, QRect, qreal> m_titleKey;
};

class TimelineView : public QCustomPlot {
    Q_OBJECT
public:
    explicit TimelineView(QWidget *parent = nullptr);

    // runs.front() is the primary run (the live or shown one), the others stack under it in the
    // given order; null runs are left out. A new primary starts following live and fits the
    // view as setRun always did; the same primary with other runs under it keeps the view.
    void setRuns(std::vector<RunDataPtr> runs);
    void setRun(RunDataPtr run) { setRuns({std::move(run)}); }
    const std::vector<RunDataPtr> &runs() const { return m_runs; }
    const RunDataPtr &run() const; // the primary, or null
    // Call after new records arrived (to the primary only: the others have ended); replots
    // (queued) and slides the window over the primary's end when following.
    void refresh();
    bool followLive() const { return m_follow; }
    void setFollowLive(bool follow);
    void fitAll();
    void setTitle(const QString &title);
    void setPresentationScale(double scale);
    // As many legend columns as the widest entry allows at this width (the widget's when 0).
    void fitLegendToWidth(int width = 0);
    TimelinePlottable *plottable_() const { return m_plottable; }
    // Text describing the span (or folded spans) at a widget position; empty when none.
    QString describeAt(const QPoint &pos) const;
    // Busy / wait / recompute shares per worker in [t0Ms, t1Ms], per run when several show.
    QString summarizeRange(double t0Ms, double t1Ms) const;

Q_SIGNALS:
    void followLiveChanged(bool follow);
    void rangeSummaryAvailable(const QString &text);

protected:
    void mousePressEvent(QMouseEvent *event) override;
    void mouseMoveEvent(QMouseEvent *event) override;
    void mouseDoubleClickEvent(QMouseEvent *event) override;
    void wheelEvent(QWheelEvent *event) override;
    void resizeEvent(QResizeEvent *event) override;
    bool event(QEvent *event) override;
    void paintEvent(QPaintEvent *event) override;
    void updateLayout() override;

private:
    // Whether the plot paints through one opaque buffer (installOpaqueBuffer).
    bool opaqueBuffer() const;
    void installOpaqueBuffer();
    void updateRowLabels();
    void updateLegend();
    void placeLegend(bool show);

    void onSelectionAccepted(const QRect &rect, QMouseEvent *event);

    std::vector<RunDataPtr> m_runs;
    TimelinePlottable *m_plottable = nullptr;
    // QCustomPlot's one axis rect: axisRect() walks the whole layout to find it, and a live
    // frame asked a dozen times (3% of the GUI thread's time).
    QCPAxisRect *plotRect() const { return m_plotRect; }
    QCPAxisRect *m_plotRect = nullptr;
    std::tuple<QString, int, QFont> m_placeholderFor; // what refresh() last set the placeholder for
    TimelineAxis *m_timeAxis = nullptr; // xAxis
    TimelineAxis *m_rowAxis = nullptr;  // yAxis
    QCPTextElement *m_title = nullptr;
    QCPItemRect *m_selection = nullptr;
    QSharedPointer<QCPAxisTickerText> m_rowTicker;
    std::vector<std::size_t> m_labelledRows; // each run's row count when last labelled
    std::pair<int, int> m_labelBasis{-1, -1}; // axis rect height and label height last labelled for
    // What the plot's layout was last computed for: while none of it changes (a live run only
    // slides the time axis), a replot prepares the axis ticks and reuses the layout.
    struct LayoutBasis {
        QSize size;
        qreal dpr = 0;
        QFont font;
        std::uint64_t generation = 0;
        bool operator==(const LayoutBasis &) const = default;
    };
    LayoutBasis layoutBasis() const;
    LayoutBasis m_laidOut;
    QCPRange m_rowTicksFor; // the row axis' range its ticks were last prepared for
    QCPPainter *m_direct = nullptr; // paintEvent's painter, while it draws onto the widget
    QRegion m_directRegion;         // and the region it paints
    // What was around the plot (title, row labels, legend) when the whole widget was last
    // painted: while it is the same, a live frame repaints only the plot and its time axis.
    struct Chrome {
        LayoutBasis layout;
        std::vector<std::size_t> labelledRows;
        QRect plot, outer;
        bool operator==(const Chrome &) const = default;
    };
    Chrome chrome() const;
    std::optional<Chrome> m_paintedChrome;
    long m_plannedFromPx = -1; // where the plottable's strip starts, for a scrolled live frame
    std::uint64_t m_layoutGeneration = 0; // bumped by whatever changes labels, legend or title
    bool m_follow = true;
    double m_followWindowMs = 1500;
};

} // namespace syncopate
