// Exports of the timeline and charts (PNG, SVG, PDF at a chosen size and scale) and the
// headless image set that `syncopate-cli run --images` writes.
#pragma once

#include "rundata.h"

#include <QSize>
#include <QString>
#include <QStringList>

class QCustomPlot;

namespace syncopate {

// The format follows the file's suffix (.png, .svg, .pdf). scale multiplies the pixel density
// of a PNG. Returns false and sets error when the file cannot be written.
bool exportPlot(QCustomPlot *plot, const QString &path, QSize size, double scale, QString *error);

// The run time (ms) from the start of step `from` to the end of step `to` (any worker's
// first and last); {-1, -1} when the run has no such steps.
std::pair<double, double> stepWindowMs(const RunData &run, std::int64_t from, std::int64_t to);

// Writes timeline.png, loss.png, stalls.png, staleness.png, memory.png and throughput.png into
// dir with the same drawing code as the window. The timeline shows steps [from, to] when to is
// not below from (a whole run of thousands of steps is a barcode), else the whole run.
// Returns the files written.
QStringList renderRunImages(const RunDataPtr &run, const QString &dir, QSize size, QString *error,
                            std::int64_t fromStep = 0, std::int64_t toStep = -1);

} // namespace syncopate
