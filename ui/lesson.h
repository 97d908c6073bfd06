// Help > Lesson: a guided sequence for a class. Each step runs a preset and says what to look
// at; once its run has ended, the step states what that run measured (from its summary.json),
// and says so plainly where a figure contradicts the lesson (an oversubscribed machine).
// The text builders are free functions so that tests can feed them hand-made summaries.
#pragma once

#include "rundata.h"

#include <QString>
#include <QWidget>

#include <nlohmann/json.hpp>

#include <vector>

class QLabel;
class QListWidget;
class QPushButton;

namespace syncopate {

class MainWindow;

// What a step's figures are read from: a run's summary and its resolved configuration, and for
// async runs each worker's mean staleness (from the trace; the summary has only the total).
struct LessonRun {
    nlohmann::json summary;
    RunConfig config;
    std::vector<double> stalenessPerWorker; // empty when unknown
};
LessonRun lessonRun(const RunData &run);

// The steps, in order (indices of lessonSteps()).
namespace lessonstep {
enum : int { Baseline, StragglerSync, StragglerAsync, Bounded, Checkpointing, BackupWorkers, InputBound, BatchNorm, Comparison };
}

struct LessonStep {
    QString preset;         // empty for the comparison step
    QString name;           // short, for the step list
    QString title;          // the step's heading
    QString lookFor;        // rich text: what to look at, before the run
    QString variantButton;  // a second run of the same preset with overrides; empty for none
    QString variantLabel;   // that run's name in the Runs list
    nlohmann::json variant; // flat dotted keys over the preset
};
const std::vector<LessonStep> &lessonSteps();

// Rich-text paragraphs stating a finished run's figures. An earlier step's run, where given,
// is compared with only when the comparison is fair, and the text says why when it is not.
QString baselineFigures(const LessonRun &run);
QString stragglerSyncFigures(const LessonRun &run, const LessonRun *baseline = nullptr);
QString stragglerAsyncFigures(const LessonRun &run, const LessonRun *syncStraggler = nullptr,
                              const LessonRun *baseline = nullptr);
// unbounded: the same config without the bound (the step's variant); straggler: step 3's run.
QString boundedStalenessFigures(const LessonRun &run, const LessonRun *unbounded = nullptr,
                                const LessonRun *straggler = nullptr);
// plain: the same config without checkpointing (the step's variant); baseline: step 1's run.
QString checkpointingFigures(const LessonRun &run, const LessonRun *plain = nullptr,
                             const LessonRun *baseline = nullptr);
// syncStraggler: step 2's run, the same straggler with no backup worker.
QString backupWorkersFigures(const LessonRun &run, const LessonRun *syncStraggler = nullptr);
// noPrefetch: the same config with data.prefetch = 0 (the step's variant).
QString inputBoundFigures(const LessonRun &run, const LessonRun *noPrefetch = nullptr);
// syncBn: the same config with model.batchnorm = sync (the step's variant).
QString batchNormFigures(const LessonRun &run, const LessonRun *syncBn = nullptr);
// One line per run (label, run), then what the throughputs say, where the runs allow it.
QString comparisonFigures(const std::vector<std::pair<QString, const LessonRun *>> &runs);
// Paragraphs as rich text (empty ones left out), and a run's "N steps in T s, R samples/s.".
QString lessonParagraphs(const QStringList &paragraphs);
QString lessonRunLine(const nlohmann::json &summary);
// "64-256x16-10": the layer widths, repeats folded.
QString layersText(const std::vector<int> &layers);

class LessonPanel : public QWidget {
    Q_OBJECT
public:
    explicit LessonPanel(MainWindow *window, QWidget *parent = nullptr);

    int stepCount() const { return int(m_runs.size()); }
    int currentStep() const { return m_current; }
    void setCurrentStep(int step);
    // The step's text as shown: its figures once its run has ended, what to look for before.
    QString stepText(int step) const;
    // The run the step's button (variant: its second button) started; null before.
    RunDataPtr stepRun(int step, bool variant = false) const;
    // What the buttons do: select the step's preset and start it (the comparison step shows
    // the table). False when a run is in progress or the run did not start.
    bool runStep(bool variant = false);
    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

Q_SIGNALS:
    void currentStepChanged(int step);

protected:
    void changeEvent(QEvent *event) override;

private:
    void refresh();
    QString figures(int step) const;
    const LessonRun *finished(int step, bool variant, LessonRun *out) const;

    MainWindow *m_window;
    QListWidget *m_list;
    QLabel *m_text;
    QPushButton *m_run, *m_variant, *m_back, *m_next;
    std::vector<std::pair<RunDataPtr, RunDataPtr>> m_runs; // per step: its run, its variant's run
    QString m_startError;                                  // the last button press that did not start
    int m_current = 0;
};

} // namespace syncopate
