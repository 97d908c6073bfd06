#include "exporter.h"

#include "charts.h"
#include "timelineview.h"

#include <QDir>
#include <QFileInfo>
#include <QSvgGenerator>

#include <qcustomplot.h>

namespace syncopate {

bool exportPlot(QCustomPlot *plot, const QString &path, QSize size, double scale, QString *error)
{
    const QString suffix = QFileInfo(path).suffix().toLower();
    const int w = size.width(), h = size.height();
    bool ok = false;
    if (suffix == QLatin1String("png")) {
        ok = plot->savePng(path, w, h, scale);
    } else if (suffix == QLatin1String("pdf")) {
        ok = plot->savePdf(path, w, h, QCP::epNoCosmetic, QStringLiteral("Syncopate"));
    } else if (suffix == QLatin1String("svg")) {
        QSvgGenerator svg;
        svg.setFileName(path);
        svg.setSize(QSize(w, h));
        svg.setViewBox(QRect(0, 0, w, h));
        svg.setTitle(QStringLiteral("Syncopate"));
        QCPPainter painter;
        if (painter.begin(&svg)) {
            plot->toPainter(&painter, w, h);
            ok = painter.end();
        }
        ok = ok && QFileInfo(path).size() > 0;
    } else {
        if (error)
            *error = QObject::tr("%1: unknown image format \"%2\" (use .png, .svg or .pdf)").arg(path, suffix);
        return false;
    }
    if (!ok && error)
        *error = QObject::tr("%1: could not be written").arg(path);
    return ok;
}

QStringList renderRunImages(const RunDataPtr &run, const QString &dir, QSize size, QString *error)
{
    QStringList written;
    if (!QDir().mkpath(dir)) {
        if (error)
            *error = QObject::tr("%1: cannot create the folder").arg(dir);
        return written;
    }
    TimelineView timeline;
    timeline.resize(size);
    timeline.setRun(run);
    timeline.setTitle(run->title());
    timeline.fitAll();
    const QString path = QDir(dir).filePath(QStringLiteral("timeline.png"));
    if (exportPlot(&timeline, path, size, 1.0, error))
        written << path;
    ChartsWidget charts;
    charts.resize(size);
    charts.setRuns(run, {});
    for (const auto &[name, plot] : charts.plots()) {
        plot->resize(size);
        const QString p = QDir(dir).filePath(name + QStringLiteral(".png"));
        if (exportPlot(plot, p, size, 1.0, error))
            written << p;
    }
    return written;
}

} // namespace syncopate
