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

// Writes timeline.png, loss.png, stalls.png, staleness.png, memory.png and throughput.png into
// dir with the same drawing code as the window. Returns the files written.
QStringList renderRunImages(const RunDataPtr &run, const QString &dir, QSize size, QString *error);

} // namespace syncopate
