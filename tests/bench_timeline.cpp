// Timeline benchmark (not part of ctest). For each size (default 1M and 10M spans; pass sizes,
// e.g. `bench_timeline 1000000 10000000 100000000`): writes a run directory of that many spans
// through the store's writer, opens it as File > Open Run does, and measures the redraw at three
// zooms (whole run, a 1 s window, a 1 ms window) through the real TimelineView, beside the
// folding the timeline did before the store (every span of a row in memory, layoutRow over it,
// the same painting) where that still fits in memory. One line per figure:
//   spans=N zoom=NAME redraw_ms=X folding_ms=Y marks=M summary=0|1
//   spans=N open_ms=X rss_mb=Y disk_bytes_per_span=Z write_ns_per_span=W
// `bench_timeline --ingest [records]` measures instead what a live run costs the GUI thread per
// poll: TraceModel::append of a 16-worker stream delivered 30 times a second, then one settle of
// every row as the next draw does. Medians of 7 repetitions:
//   ingest records=N append_ns_per_record=X settle_us_per_poll=Y
#include "phasestyle.h"
#include "random.h"
#include "rundata.h"
#include "runstore.h"
#include "timelinelayout.h"
#include "timelineplottable.h"
#include "timelineview.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QImage>
#include <QPainter>
#include <QTemporaryDir>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

using namespace syncopate;

namespace {

constexpr int kWorkers = 8;

double rssMb()
{
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0)
            return std::stod(line.substr(6)) / 1024.0;
    return 0;
}

// Spans of 1 to 60 us, phases in a training step's order, as workers record them.
template <typename F> void generate(std::size_t total, F &&sink)
{
    Rng rng(1);
    const Phase cycle[] = {Phase::Data, Phase::Forward, Phase::Backward, Phase::Wait, Phase::Reduce,
                           Phase::Wait, Phase::Apply};
    std::vector<std::int64_t> t(kWorkers, 0);
    for (std::size_t i = 0; i < total; ++i) {
        const int w = int(i % kWorkers);
        const std::size_t k = i / kWorkers;
        const std::int64_t d = 1000 + std::int64_t(rng.below(59000));
        const Phase p = cycle[k % 7];
        sink(Record::span(w, p, defaultLane(p), std::uint32_t(k / 7), t[std::size_t(w)], t[std::size_t(w)] + d));
        t[std::size_t(w)] += d;
    }
}

// The timeline's drawing before the store: fold every row's in-memory spans, paint the marks.
double foldingMs(const std::vector<std::vector<Record>> &rows, double t0, double t1, QImage &image)
{
    QElapsedTimer timer;
    timer.start();
    QPainter painter(&image);
    const TimeMapping mapping(t0, t1, 60, image.width() - 80);
    std::vector<TimelineMark> marks;
    const double rowHeight = double(image.height()) / double(rows.size());
    for (std::size_t r = 0; r < rows.size(); ++r) {
        marks.clear();
        layoutRow(rows[r], mapping, 3.0, marks);
        for (const auto &m : marks)
            painter.fillRect(QRectF(m.x0, double(r) * rowHeight, std::max(1.0, m.x1 - m.x0), rowHeight * 0.8),
                             phaseStyle(m.phase).brush);
    }
    return double(timer.nsecsElapsed()) / 1e6;
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

void benchSize(std::size_t total)
{
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString() + "/run";
    RunConfig config = parseConfig({{"workers", kWorkers}, {"data.prefetch", false}});
    std::filesystem::create_directories(dir);
    writeFileAtomically(dir + "/config.json", config.toJson().dump(2));
    QElapsedTimer timer;
    timer.start();
    {
        std::vector<std::unique_ptr<ChunkWriter>> writers;
        for (int w = 0; w < kWorkers; ++w)
            writers.push_back(std::make_unique<ChunkWriter>(dir + "/" + rowFileName({w, RowKind::Worker, {}}),
                                                            RowDescriptor{w, RowKind::Worker, "worker " + std::to_string(w)}));
        TraceModel summary(kWorkers, false, config.batch);
        summary.setKeepRaw(false);
        generate(total, [&](const Record &r) {
            writers[r.worker]->append(r);
            summary.append(&r, 1);
        });
        for (auto &w : writers)
            w->flush();
        summary.saveIndex(dir + "/index.syi");
        writeFileAtomically(dir + "/summary.json", R"({"status":"finished"})");
    }
    const double writeNs = double(timer.nsecsElapsed()) / double(total);
    std::uint64_t rowBytes = 0;
    for (const auto &e : std::filesystem::directory_iterator(dir))
        if (e.path().extension() == ".syr")
            rowBytes += std::filesystem::file_size(e.path());

    timer.restart();
    const OpenedRun opened = openRunDirectory(dir);
    auto run = RunData::fromOpened(opened, QStringLiteral("bench"));
    TimelineView view;
    view.resize(1600, 800);
    view.setRun(run);
    view.setFollowLive(false);
    view.fitAll();
    view.replot(QCustomPlot::rpImmediateRefresh);
    const double openMs = double(timer.nsecsElapsed()) / 1e6;

    const double end = double(run->endNs());
    const struct {
        const char *name;
        double widthNs;
    } zooms[] = {{"whole", end}, {"1s", 1e9}, {"1ms", 1e6}};
    struct Figure {
        double redraw;
        std::size_t marks;
        bool summary;
    };
    std::vector<Figure> figures;
    for (const auto &z : zooms) {
        const double width = std::min(end, z.widthNs);
        const double start = (end - width) / 2;
        view.xAxis->setRange(start / 1e6, (start + width) / 1e6);
        std::vector<double> ms;
        for (int r = 0; r < 15; ++r) {
            timer.restart();
            view.replot(QCustomPlot::rpImmediateRefresh);
            ms.push_back(double(timer.nsecsElapsed()) / 1e6);
        }
        figures.push_back({median(ms), view.plottable_()->lastMarkCount(), view.plottable_()->lastDrawnFromSummary()});
    }
    // Resident memory of the whole process with the run open and drawn at every zoom.
    const double rss = rssMb();

    // Today's folding needs every span in memory: only where that fits comfortably.
    std::vector<std::vector<Record>> inMemory;
    if (total <= 20000000) {
        inMemory.resize(kWorkers);
        generate(total, [&](const Record &r) { inMemory[r.worker].push_back(r); });
    }
    QImage image(1600, 800, QImage::Format_ARGB32_Premultiplied);
    for (std::size_t i = 0; i < figures.size(); ++i) {
        const double width = std::min(end, zooms[i].widthNs);
        const double start = (end - width) / 2;
        std::printf("spans=%zu zoom=%s redraw_ms=%.2f", total, zooms[i].name, figures[i].redraw);
        if (!inMemory.empty()) {
            std::vector<double> fold;
            for (int r = 0; r < 15; ++r)
                fold.push_back(foldingMs(inMemory, start, start + width, image));
            std::printf(" folding_ms=%.2f", median(fold));
        }
        std::printf(" marks=%zu summary=%d\n", figures[i].marks, int(figures[i].summary));
    }
    std::printf("spans=%zu open_ms=%.1f rss_mb=%.1f disk_bytes_per_span=%.2f write_ns_per_span=%.1f\n", total, openMs,
                rss, double(rowBytes) / double(total), writeNs);
    std::fflush(stdout);
}

// A live 16-worker run as the GUI receives it: each 33 ms poll brings every worker's records of
// that window, worker after worker (the collector drains the rings in bulk). Steps of 1-60 us
// spans with the loss, activation bytes and staleness samples a step records.
std::vector<std::vector<Record>> livePolls(std::size_t total)
{
    constexpr int workers = 16;
    constexpr std::int64_t pollNs = 33333333;
    const Phase cycle[] = {Phase::Data, Phase::Forward, Phase::Backward, Phase::Wait, Phase::Reduce,
                           Phase::Wait, Phase::Apply};
    Rng rng(2);
    std::vector<std::vector<Record>> polls;
    std::vector<std::int64_t> t(workers, 0);
    std::vector<std::uint32_t> step(workers, 0);
    std::size_t n = 0;
    for (std::int64_t until = pollNs; n < total; until += pollNs) {
        auto &poll = polls.emplace_back();
        for (int w = 0; w < workers && n < total; ++w) {
            auto &now = t[std::size_t(w)];
            auto &s = step[std::size_t(w)];
            while (now < until && n < total) {
                for (const Phase p : cycle) {
                    const std::int64_t d = 1000 + std::int64_t(rng.below(59000));
                    poll.push_back(Record::span(w, p, defaultLane(p), s, now, now + d, p == Phase::Wait ? 200.0 : 0.0));
                    now += d;
                }
                poll.push_back(Record::counterSample(w, CounterId::Loss, s, now, 2.0 / (1 + s)));
                poll.push_back(Record::counterSample(w, CounterId::ActivationBytes, s, now, 1e6));
                poll.push_back(Record::counterSample(w, CounterId::Staleness, s, now, double(rng.below(4))));
                n += 10;
                ++s;
            }
        }
    }
    return polls;
}

void benchIngest(std::size_t total)
{
    const auto polls = livePolls(total);
    std::size_t records = 0;
    for (const auto &p : polls)
        records += p.size();
    std::vector<double> appendNs, settleUs;
    for (int rep = 0; rep < 7; ++rep) {
        QTemporaryDir tmp; // the live model trims its recent spans to the run's files
        TraceModel model(16, false, 32);
        model.setFinestLevel(2); // as RunData's live view has it
        model.attachDirectory(tmp.path().toStdString());
        std::int64_t inAppend = 0, inSettle = 0;
        QElapsedTimer timer;
        for (const auto &p : polls) {
            timer.start();
            model.append(p);
            inAppend += timer.nsecsElapsed();
            timer.start();
            for (std::size_t r = 0; r < model.rowCount(); ++r)
                (void)model.lod(r);
            inSettle += timer.nsecsElapsed();
        }
        appendNs.push_back(double(inAppend) / double(records));
        settleUs.push_back(double(inSettle) / 1e3 / double(polls.size()));
    }
    std::printf("ingest records=%zu append_ns_per_record=%.1f settle_us_per_poll=%.2f\n", records, median(appendNs),
                median(settleUs));
    std::fflush(stdout);
}

} // namespace

int main(int argc, char **argv)
{
    if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    if (argc > 1 && std::string(argv[1]) == "--ingest") {
        benchIngest(argc > 2 ? std::size_t(std::atoll(argv[2])) : 3000000);
        return 0;
    }
    std::vector<std::size_t> sizes;
    for (int i = 1; i < argc; ++i)
        sizes.push_back(std::size_t(std::atoll(argv[i])));
    if (sizes.empty())
        sizes = {1000000, 10000000};
    std::printf("timeline: %d workers, spans of 1-60 us, 1600x800 px, medians of 15 redraws\n", kWorkers);
    for (std::size_t n : sizes)
        benchSize(n);
    return 0;
}
