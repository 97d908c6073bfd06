// Timeline benchmark (not part of ctest): redraw time of a run with a million spans at several
// zoom levels, on the offscreen platform, and what appending spans costs the GUI thread.
#include "rundata.h"
#include "random.h"
#include "timelineplottable.h"
#include "timelineview.h"

#include <QApplication>
#include <QElapsedTimer>

#include <algorithm>
#include <cstdio>

using namespace syncopate;

int main(int argc, char **argv)
{
    if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    const int workers = 8;
    const std::size_t total = argc > 1 ? std::size_t(std::atoll(argv[1])) : 1000000;
    RunConfig config = parseConfig({{"workers", workers}, {"data.prefetch", false}});
    auto run = std::make_shared<RunData>(config, QStringLiteral("bench"));

    // Spans of 1 to 60 us, phases in a training step's order, as workers would record them.
    std::vector<Record> records;
    records.reserve(total);
    Rng rng(1);
    const Phase cycle[] = {Phase::Data, Phase::Forward, Phase::Backward, Phase::Wait, Phase::Reduce,
                           Phase::Wait, Phase::Apply};
    std::vector<std::int64_t> t(workers, 0);
    for (std::size_t i = 0; i < total; ++i) {
        const int w = int(i % workers);
        const std::size_t k = i / workers;
        const std::int64_t d = 1000 + std::int64_t(rng.below(59000));
        records.push_back(Record::span(w, cycle[k % 7], Lane::Compute, std::uint32_t(k / 7), t[w], t[w] + d));
        t[w] += d;
    }
    QElapsedTimer timer;
    timer.start();
    for (std::size_t at = 0; at < records.size(); at += 20000)
        run->append(std::vector<Record>(records.begin() + std::ptrdiff_t(at),
                                        records.begin() + std::ptrdiff_t(std::min(records.size(), at + 20000))));
    const double appendNs = double(timer.nsecsElapsed()) / double(total);

    TimelineView view;
    view.resize(1600, 800);
    view.setRun(run);
    view.setFollowLive(false);
    const double end = double(run->endNs()) / 1e6;
    std::printf("timeline: %zu spans, %d workers, %.1f s of run time, 1600x800 px\n", run->spanCount(),
                workers, end / 1e3);
    std::printf("  appending to RunData: %.1f ns per span\n", appendNs);
    std::printf("  %-28s %10s %10s %12s\n", "view", "median ms", "max ms", "marks drawn");
    const struct {
        const char *name;
        double fraction;
    } zooms[] = {{"whole run", 1.0}, {"10% of the run", 0.1}, {"1%", 0.01}, {"0.1%", 0.001},
                 {"0.001% (a few spans)", 0.00001}};
    for (const auto &z : zooms) {
        const double width = end * z.fraction;
        const double start = (end - width) / 2;
        view.xAxis->setRange(start, start + width);
        std::vector<double> ms;
        for (int r = 0; r < 30; ++r) {
            timer.restart();
            view.replot(QCustomPlot::rpImmediateRefresh);
            ms.push_back(double(timer.nsecsElapsed()) / 1e6);
        }
        std::sort(ms.begin(), ms.end());
        std::printf("  %-28s %10.2f %10.2f %12zu\n", z.name, ms[ms.size() / 2], ms.back(),
                    view.plottable_()->lastMarkCount());
    }
    return 0;
}
