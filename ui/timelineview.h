// The timeline widget: the plottable on a time axis with one labelled row per worker (and its
// prefetch lane), a phase legend, follow-live or free navigation, hover details and range
// summaries.
#pragma once

#include "rundata.h"

#include <qcustomplot.h>

namespace syncopate {

class TimelinePlottable;

class TimelineView : public QCustomPlot {
    Q_OBJECT
public:
    explicit TimelineView(QWidget *parent = nullptr);

    void setRun(RunDataPtr run);
    const RunDataPtr &run() const { return m_run; }
    // Call after new records arrived; replots (queued) and slides the window when following.
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
    // Busy / wait / recompute shares per worker in [t0Ms, t1Ms].
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

private:
    void updateRowLabels();
    void placeLegend(bool show);

    void onSelectionAccepted(const QRect &rect, QMouseEvent *event);

    RunDataPtr m_run;
    TimelinePlottable *m_plottable = nullptr;
    QCPTextElement *m_title = nullptr;
    QCPItemRect *m_selection = nullptr;
    QSharedPointer<QCPAxisTickerText> m_rowTicker;
    std::size_t m_labelledRows = 0;
    bool m_follow = true;
    double m_followWindowMs = 1500;
};

} // namespace syncopate
