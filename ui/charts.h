// The charts of a run, and of the runs checked for comparison: loss, barrier stalls, staleness,
// activation memory and throughput. Graphs are created when the set of runs changes and only
// refilled on updates.
#pragma once

#include "rundata.h"

#include <QTabWidget>
#include <QVector>

#include <utility>
#include <vector>

class QCustomPlot;
class QCheckBox;
class QComboBox;
class QSpinBox;

namespace syncopate {

class ChartsWidget : public QTabWidget {
    Q_OBJECT
public:
    explicit ChartsWidget(QWidget *parent = nullptr);

    // current: the run shown per worker; compare: further runs overlaid (mean per step).
    void setRuns(RunDataPtr current, std::vector<RunDataPtr> compare);
    void refresh();
    void setPresentationScale(double scale);

    QCustomPlot *lossPlot() const { return m_loss; }
    QCustomPlot *stallPlot() const { return m_stalls; }
    QCustomPlot *stalenessPlot() const { return m_staleness; }
    QCustomPlot *memoryPlot() const { return m_memory; }
    QCustomPlot *throughputPlot() const { return m_throughput; }
    QCustomPlot *batchNormPlot() const { return m_batchNorm; }
    // The charts that apply to the runs shown, by name, in tab order (the batch norm chart only
    // while a run shown has batch norm).
    std::vector<std::pair<QString, QCustomPlot *>> plots() const;
    // Brings the named chart's tab forward (the batch norm chart as soon as a run with batch
    // norm is shown); false for an unknown name.
    bool showChart(const QString &name);
    // The name of the chart whose tab is current (plots()' names).
    QString currentChartName() const;

    // Loss options.
    void setLossAgainstTime(bool time);
    void setSmoothing(int window);
    void setLogLoss(bool log);
    bool lossAgainstTime() const;
    int smoothing() const;
    bool logLoss() const;
    void setSplitStaleness(bool split);
    bool splitStaleness() const;

protected:
    bool eventFilter(QObject *watched, QEvent *event) override;

private:
    void rebuild();
    void fillLoss();
    void fillStalls();
    void fillCompareStalls(int firstGraph);
    void fillStaleness();
    void fillMemory();
    void fillThroughput();
    void fillBatchNorm();
    bool showsBatchNorm() const;
    std::vector<std::pair<QString, QCustomPlot *>> allPlots() const;

    RunDataPtr m_current;
    std::vector<RunDataPtr> m_compare;
    QCustomPlot *m_loss, *m_stalls, *m_staleness, *m_memory, *m_throughput, *m_batchNorm;
    QComboBox *m_lossAxis;
    QSpinBox *m_smoothing;
    QCheckBox *m_logLoss;
    QCheckBox *m_splitStaleness;
    // The stall chart's cumulative curves up to the step point that no worker's later spans
    // change: the sums there, and how many points each curve had by then.
    struct StallTotals {
        const RunData *run = nullptr;
        std::vector<int> strides; // stepsPerPoint per worker: thinning starts the sums again
        std::size_t upTo = 0;     // step points summed
        double waited = 0, elapsed = 0, lostToOs = 0;
        std::vector<double> lastEnd;
        int shares = 0, osMeans = 0; // points of the share curves and of the OS mean
    };
    StallTotals m_stallTotals;
    double m_scale = 1.0;
    bool m_wantBatchNorm = false; // asked for before a run with batch norm was shown
};

// Title row and styling shared by every chart (and used by exports).
void setupChart(QCustomPlot *plot, const QString &title, const QString &xLabel,
                const QString &yLabel);

// The legend beside the plot, its rows as the plot's height holds (the rest wrap into further
// columns); below it, in columns, where its widest entry would take over a third of the width.
void fitLegendToHeight(QCustomPlot *plot);
// The same, the title elided to the width and the horizontal axes' tick count by their room.
void fitChartToWidth(QCustomPlot *plot);

// A line of text centred in the plot's first axis rect, for a plot with nothing to show yet; an
// empty text hides it. A legend inset in the axis rect is shown only while it has entries, so an
// empty chart does not draw an empty legend box.
void setPlaceholder(QCustomPlot *plot, const QString &text);

// Whether the charts' curves read their points through summaries of blocks of them (the
// default). Off, every point is read, as QCPGraph does: for tests that compare the two.
void setCurveSummaries(bool on);
QString placeholderText(QCustomPlot *plot);

// Points (key, value) cut into `bins` equal spans of their keys: for each span holding any, the
// mean key, the lowest and the highest value (the loss chart's band of async workers' losses).
void spreadBand(std::vector<std::pair<double, double>> points, int bins, QVector<double> &x,
                QVector<double> &lowest, QVector<double> &highest);

// What an empty plot says: before any run, or while a run has not finished its first step.
QString emptyPlotText(bool haveRun);

} // namespace syncopate
