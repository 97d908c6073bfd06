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
    // The timeline's legend wraps for the image's width, not the window's: every entry shows.
    auto *timeline = qobject_cast<TimelineView *>(plot);
    if (timeline)
        timeline->fitLegendToWidth(w);
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
    if (timeline)
        timeline->fitLegendToWidth();
    if (!ok && error)
        *error = QObject::tr("%1: could not be written").arg(path);
    return ok;
}

std::pair<double, double> stepWindowMs(const RunData &run, std::int64_t from, std::int64_t to)
{
    // An imported trace: its ProfilerStep windows (step i of the store is step firstStep + i).
    if (run.imported()) {
        const auto it = run.summary.find("step_windows_ms");
        double start = -1, end = -1;
        if (it != run.summary.end() && it->is_array())
            for (const auto &w : *it) {
                if (!w.is_array() || w.size() != 3 || !w[0].is_number() || !w[1].is_number() || !w[2].is_number())
                    continue;
                const std::int64_t step = w[0].get<std::int64_t>() - run.firstStep();
                if (step < from || step > to)
                    continue;
                start = start < 0 ? w[1].get<double>() : std::min(start, w[1].get<double>());
                end = std::max(end, w[2].get<double>());
            }
        return end > start && start >= 0 ? std::make_pair(start, end) : std::make_pair(-1.0, -1.0);
    }
    // A step ends at its loss sample; it starts where the step before ended.
    double start = -1, end = -1;
    for (int w = 0; w < run.workers(); ++w) {
        const auto &steps = run.steps(w);
        const std::int64_t stride = std::max(1, run.stepsPerPoint(w));
        const auto endOf = [&](std::int64_t s) -> double {
            const std::int64_t i = s / stride;
            return s >= 0 && i < std::int64_t(steps.size()) ? steps[std::size_t(i)].endNs : -1.0;
        };
        const double a = from <= 0 ? 0.0 : endOf(from - 1), b = endOf(to);
        if (a >= 0 && (start < 0 || a < start))
            start = a;
        if (b >= 0 && b > end)
            end = b;
    }
    if (start < 0 || end <= start)
        return {-1, -1};
    return {start / 1e6, end / 1e6};
}

QStringList renderRunImages(const RunDataPtr &run, const QString &dir, QSize size, QString *error,
                            std::int64_t fromStep, std::int64_t toStep)
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
    if (toStep >= fromStep) {
        const auto [t0, t1] = stepWindowMs(*run, fromStep, toStep);
        if (t1 > t0) {
            timeline.setFollowLive(false);
            timeline.xAxis->setRange(t0, t1);
            timeline.setTitle(run->imported() ? QObject::tr("%1, ProfilerStep#%2 to #%3")
                                                    .arg(run->title())
                                                    .arg(run->firstStep() + fromStep)
                                                    .arg(run->firstStep() + toStep)
                                              : QObject::tr("%1, steps %2 to %3").arg(run->title()).arg(fromStep).arg(toStep));
        }
    }
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
