// How each phase looks and what it means. Colours are the Okabe-Ito palette, which stays
// distinguishable with the common forms of colour blindness; waits are also hatched and delays
// outlined, so they read in greyscale and on a washed-out projector.
#pragma once

#include "trace.h"

#include <QBrush>
#include <QColor>
#include <QPen>
#include <QString>

namespace syncopate {

struct PhaseStyle {
    QColor color;
    QBrush brush;
    QPen outline;
    QString label;
    QString tooltip;
};

const PhaseStyle &phaseStyle(Phase p);
// The hatch over the part of a span the OS did not run the worker (inside compute spans, and
// at the end of a barrier wait after the barrier opened). Its legend entry is Phase::Count.
const PhaseStyle &offCpuStyle();
// A colour per worker or run for line charts (eight colours; past eight the lines dash and the
// markers change shape, so sixteen workers stay told apart).
QColor seriesColor(int index);
Qt::PenStyle seriesStyle(int index);
int seriesShape(int index); // a QCPScatterStyle::ScatterShape
// A colour per compared run: dark hues that are neither a worker's (seriesColor) nor a
// phase's, so a run's mean line never reads as one worker. Past five they repeat, dashed
// (runStyle).
QColor runColor(int index);
Qt::PenStyle runStyle(int index);
// A one-paragraph explanation of a metric, for tooltips.
QString metricHelp(const QString &metric);

} // namespace syncopate
