#include "lesson.h"

#include "experimentform.h"
#include "mainwindow.h"
#include "runcontroller.h"

#include <QEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QLocale>
#include <QPushButton>
#include <QScrollArea>
#include <QStyle>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <optional>

namespace syncopate {

using namespace lessonstep;

LessonPanel::LessonPanel(MainWindow *window, QWidget *parent)
    : QWidget(parent), m_window(window), m_runs(lessonSteps().size())
{
    setObjectName(QStringLiteral("lessonPanel"));
    m_list = new QListWidget;
    m_list->setObjectName(QStringLiteral("lessonSteps"));
    for (std::size_t i = 0; i < lessonSteps().size(); ++i)
        m_list->addItem(QStringLiteral("%1. %2").arg(i + 1).arg(lessonSteps()[i].name));
    m_list->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_list->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_list->setTextElideMode(Qt::ElideRight);
    m_list->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Fixed);

    m_text = new QLabel;
    m_text->setObjectName(QStringLiteral("lessonText"));
    m_text->setTextFormat(Qt::RichText);
    m_text->setWordWrap(true);
    m_text->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    m_text->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_text->setMargin(4);
    // A long text scrolls rather than pushing the buttons out of a short dock.
    auto *scroll = new QScrollArea;
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll->setWidget(m_text);

    auto button = [](const char *name, const QString &text) {
        auto *b = new QPushButton(text);
        b->setObjectName(QLatin1String(name));
        return b;
    };
    m_run = button("lessonRun", {});
    m_variant = button("lessonVariant", {});
    m_back = button("lessonBack", tr("Back"));
    m_next = button("lessonNext", tr("Next"));

    // Back, run, Next in one row (the text needs the height at 720 lines), the second run
    // under it: three in a row, a narrow dock would cut its label.
    auto *nav = new QHBoxLayout;
    nav->addWidget(m_back);
    nav->addWidget(m_run, 1);
    nav->addWidget(m_next);
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(m_list);
    layout->addWidget(scroll, 1);
    layout->addLayout(nav);
    layout->addWidget(m_variant);

    connect(m_list, &QListWidget::currentRowChanged, this, &LessonPanel::setCurrentStep);
    connect(m_run, &QPushButton::clicked, this, [this] { runStep(false); });
    connect(m_variant, &QPushButton::clicked, this, [this] { runStep(true); });
    connect(m_back, &QPushButton::clicked, this, [this] { setCurrentStep(m_current - 1); });
    connect(m_next, &QPushButton::clicked, this, [this] { setCurrentStep(m_current + 1); });
    connect(window, &MainWindow::runFinished, this, &LessonPanel::refresh); // its figures, now in the summary
    // Runs started elsewhere (F5) disable the buttons too.
    connect(window->controller(), &RunController::runStarted, this, &LessonPanel::refresh);
    connect(window->controller(), &RunController::runFailed, this, &LessonPanel::refresh);
    refresh();
}

QSize LessonPanel::sizeHint() const
{
    // A readable column beside the timeline at any font size: about 40 characters wide.
    return {fontMetrics().averageCharWidth() * 40 + 40, QWidget::sizeHint().height()};
}

QSize LessonPanel::minimumSizeHint() const
{
    // Narrower, a figure's sentence breaks every two or three words; wider, a 1280-pixel
    // projector in presentation mode has no room left for the timeline.
    return {fontMetrics().averageCharWidth() * 26 + 40, QWidget::minimumSizeHint().height()};
}

void LessonPanel::setCurrentStep(int step)
{
    if (step < 0 || step >= stepCount() || step == m_current)
        return;
    m_current = step;
    refresh();
    Q_EMIT currentStepChanged(step);
}

RunDataPtr LessonPanel::stepRun(int step, bool variant) const
{
    if (step < 0 || step >= stepCount())
        return {};
    return variant ? m_runs[std::size_t(step)].second : m_runs[std::size_t(step)].first;
}

bool LessonPanel::runStep(bool variant)
{
    const LessonStep &step = lessonSteps()[std::size_t(m_current)];
    if (m_window->controller()->isRunning())
        return false;
    if (step.preset.isEmpty()) {
        if (m_window->runs().empty())
            return false;
        m_window->showComparison();
        return true;
    }
    m_startError.clear();
    m_window->selectPreset(step.preset);
    if (m_window->form()->presetName() != step.preset) {
        m_startError = tr("The preset “%1” is not installed, so this step cannot run.").arg(step.preset);
        refresh();
        return false;
    }
    if (variant) {
        nlohmann::json config = m_window->form()->toJson();
        for (const auto &[key, value] : step.variant.items())
            config[key] = value;
        m_window->form()->setFromJson(config);
    }
    if (!m_window->startRun()) {
        m_startError = tr("The run did not start: the banner above the timeline says why.");
        refresh();
        return false;
    }
    const RunDataPtr run = m_window->runs().back();
    if (variant) {
        // Named for what it changed, so that the comparison table tells the two apart.
        const QString base = step.variantLabel;
        QString name = base;
        for (int i = 2; std::any_of(m_window->runs().begin(), m_window->runs().end(),
                                    [&](const RunDataPtr &r) { return r != run && r->label() == name; });
             ++i)
            name = QStringLiteral("%1 %2").arg(base).arg(i);
        m_window->renameRun(run, name);
    }
    (variant ? m_runs[std::size_t(m_current)].second : m_runs[std::size_t(m_current)].first) = run;
    refresh();
    return true;
}

void LessonPanel::changeEvent(QEvent *event)
{
    QWidget::changeEvent(event);
    // Presentation mode scales the dock's font: the list's rows grow with it.
    if (event->type() == QEvent::FontChange)
        refresh();
}

const LessonRun *LessonPanel::finished(int step, bool variant, LessonRun *out) const
{
    const RunDataPtr run = stepRun(step, variant);
    if (!run || run->state == RunState::Running)
        return nullptr;
    *out = lessonRun(*run);
    return out;
}

QString LessonPanel::figures(int step) const
{
    LessonRun runs[Comparison], variants[Comparison];
    const LessonRun *r[Comparison], *v[Comparison];
    for (int i = 0; i < Comparison; ++i) {
        r[i] = finished(i, false, &runs[i]);
        v[i] = finished(i, true, &variants[i]);
    }
    if (step == Comparison) {
        std::vector<std::pair<QString, const LessonRun *>> all;
        for (int i = 0; i < Comparison; ++i)
            all.emplace_back(r[i] ? stepRun(i)->label() : QString(), r[i]);
        for (int i = 0; i < Comparison; ++i)
            if (v[i])
                all.emplace_back(stepRun(i, true)->label(), v[i]);
        return comparisonFigures(all);
    }
    QString html;
    // A run that failed at the start of its steps may have no summary at all: its error then.
    for (const bool variant : {false, true}) {
        const RunDataPtr run = stepRun(step, variant);
        if (run && run->state == RunState::Failed && !run->summary.contains("status"))
            html += QStringLiteral("<p><b>%1</b></p>").arg(tr("The run failed: %1").arg(run->error.toHtmlEscaped()));
    }
    if (!r[step] && v[step]) // the figures compare the two runs: the step's own is missing
        return html + lessonParagraphs({tr("%1 has run: %2 Press “Run this step” for the run to compare it with.")
                                  .arg(stepRun(step, true)->label().toHtmlEscaped(), lessonRunLine(v[step]->summary))});
    if (!r[step])
        return html;
    switch (step) {
    case Baseline:
        return html + baselineFigures(*r[step]);
    case StragglerSync:
        return html + stragglerSyncFigures(*r[step], r[Baseline]);
    case StragglerAsync:
        return html + stragglerAsyncFigures(*r[step], r[StragglerSync], r[Baseline]);
    case Bounded:
        return html + boundedStalenessFigures(*r[step], v[Bounded], r[StragglerAsync]);
    case Checkpointing:
        return html + checkpointingFigures(*r[step], v[Checkpointing], r[Baseline]);
    case BackupWorkers:
        return html + backupWorkersFigures(*r[step], r[StragglerSync]);
    case InputBound:
        return html + inputBoundFigures(*r[step], v[InputBound]);
    case BatchNorm:
        return html + batchNormFigures(*r[step], v[BatchNorm]);
    default:
        return html;
    }
}

QString LessonPanel::stepText(int step) const
{
    if (step < 0 || step >= stepCount())
        return {};
    const LessonStep &s = lessonSteps()[std::size_t(step)];
    QString html = QStringLiteral("<h3>%1</h3>").arg(tr("Step %1 of %2: %3").arg(step + 1).arg(stepCount()).arg(s.title.toHtmlEscaped()));
    for (const bool variant : {false, true})
        if (const RunDataPtr run = stepRun(step, variant); run && run->state == RunState::Running)
            html += QStringLiteral("<p><i>%1</i></p>")
                        .arg(tr("%1 is running; what it measures appears here when it ends.").arg(run->label().toHtmlEscaped()));
    if (step == m_current && !m_startError.isEmpty())
        html += QStringLiteral("<p><b>%1</b></p>").arg(m_startError.toHtmlEscaped());
    const QString measured = figures(step);
    if (!measured.isEmpty()) {
        const RunDataPtr run = stepRun(step);
        html += QStringLiteral("<p><b>%1</b></p>")
                    .arg(step == Comparison || !run ? tr("What the runs measured")
                                                    : tr("What %1 measured").arg(run->label().toHtmlEscaped()))
              + measured;
    }
    html += QStringLiteral("<p><b>%1</b></p><p>%2</p>").arg(measured.isEmpty() ? tr("What to look at") : tr("What to look at again"), s.lookFor);
    return html;
}

void LessonPanel::refresh()
{
    const bool running = m_window->controller()->isRunning();
    const LessonStep &step = lessonSteps()[std::size_t(m_current)];
    {
        const QSignalBlocker block(m_list);
        m_list->setCurrentRow(m_current);
    }
    for (int i = 0; i < stepCount(); ++i) {
        const RunDataPtr run = stepRun(i);
        const bool done = i == Comparison ? false : run && run->state != RunState::Running;
        m_list->item(i)->setIcon(done ? style()->standardIcon(QStyle::SP_DialogApplyButton) : QIcon());
    }
    // Every step shows without scrolling the list; its rows follow the font.
    const int line = fontMetrics().height();
    m_list->setIconSize({line, line});
    int rows = 0;
    for (int i = 0; i < stepCount(); ++i)
        rows += m_list->sizeHintForRow(i);
    m_list->setFixedHeight(rows + 2 * m_list->frameWidth() + 2);
    m_text->setText(stepText(m_current));
    if (step.preset.isEmpty()) {
        m_run->setText(tr("Show the comparison table"));
        m_run->setEnabled(!running && !m_window->runs().empty());
    } else {
        m_run->setText(stepRun(m_current) ? tr("Run this step again") : tr("Run this step"));
        m_run->setEnabled(!running);
    }
    m_variant->setVisible(!step.variantButton.isEmpty());
    m_variant->setText(step.variantButton);
    m_variant->setEnabled(!running);
    m_back->setEnabled(m_current > 0);
    m_next->setEnabled(m_current + 1 < stepCount());
}

} // namespace syncopate
