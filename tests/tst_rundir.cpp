// The run directory, streamed as the run goes: every file exists and parses, the row files and
// the trace.json export hold every phase of every worker and step (and the same records as the
// engine collected), metrics.csv a row per worker per step, and the safetensors hold the
// parameters in nn.Linear's layout.
#include "model.h"
#include "runstore.h"
#include "safetensors.h"
#include "testutil.h"

#include <QFile>
#include <QTemporaryDir>

#include <fstream>
#include <set>
#include <sstream>

using namespace syncopate;
using namespace syncopate::test;
using nlohmann::json;

class TestRunDir : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void writesEveryFile();
};

void TestRunDir::writesEveryFile()
{
    const int workers = 3, steps = 12;
    QTemporaryDir dir;
    const std::string d = dir.path().toStdString() + "/run";
    const auto e = runToEnd(json{{"workers", workers},
                                 {"model", {{"layers", {10, 16, 5}}}},
                                 {"data", {{"source", "blobs"}, {"samples", 128}}},
                                 {"train", {{"steps", steps}, {"batch", 4}}},
                                 {"eval", {{"samples", 100}}}},
                            60000, d);
    QCOMPARE(e->state(), RunState::Finished);

    // The row files hold exactly what the engine collected, and the index agrees.
    const OpenedRun opened = openRunDirectory(d);
    QVERIFY(!opened.interrupted);
    QCOMPARE(opened.tornBytes, std::uint64_t(0));
    const auto collected = e->events().all();
    std::vector<Record> stored;
    opened.trace->forEachRecord([&](const Record &r) { stored.push_back(r); });
    QCOMPARE(stored.size(), collected.size());
    auto key = [](const Record &r) { return std::make_tuple(r.worker, r.start, r.end, r.step, r.code, int(r.kind), r.value); };
    std::multiset<decltype(key(stored[0]))> a, b;
    for (const auto &r : stored)
        a.insert(key(r));
    for (const auto &r : collected)
        b.insert(key(r));
    QVERIFY(a == b);
    QCOMPARE(opened.trace->recordCount(), std::uint64_t(collected.size()));

    // config.json: resolved, and a valid config again
    const RunConfig again = parseConfig(readJsonFile(d + "/config.json"));
    QCOMPARE(again.workers, workers);
    QCOMPARE(again.samples, std::int64_t(128));

    // trace.json
    const json trace = readJsonFile(d + "/trace.json");
    std::set<std::tuple<int, int, std::string>> spans;
    std::set<int> namedThreads;
    int counters = 0;
    for (const auto &ev : trace["traceEvents"]) {
        const std::string ph = ev["ph"];
        if (ph == "X") {
            QVERIFY(ev["dur"].get<double>() >= 0);
            spans.insert({ev["tid"].get<int>() % 1000, ev["args"]["step"].get<int>(),
                          ev["name"].get<std::string>()});
        } else if (ph == "M" && ev["name"] == "thread_name") {
            namedThreads.insert(ev["tid"].get<int>());
        } else if (ph == "C") {
            ++counters;
        }
    }
    for (int w = 0; w < workers; ++w) {
        QVERIFY(namedThreads.count(w));
        for (int s = 0; s < steps; ++s)
            for (const char *p : {"data", "forward", "backward", "wait", "reduce", "apply"})
                QVERIFY2(spans.count({w, s, p}), qPrintable(QStringLiteral("worker %1 step %2 %3")
                                                                .arg(w).arg(s).arg(QLatin1String(p))));
    }
    QVERIFY(counters >= workers * steps);

    // metrics.csv
    std::ifstream csv(d + "/metrics.csv");
    std::string header, line;
    std::getline(csv, header);
    QVERIFY(header.rfind("worker,step,t_ms,", 0) == 0);
    QVERIFY(header.find("loss") != std::string::npos && header.find("wait_ms") != std::string::npos);
    int rows = 0;
    while (std::getline(csv, line))
        rows += !line.empty();
    QCOMPARE(rows, workers * steps);

    // summary.json
    const json summary = readJsonFile(d + "/summary.json");
    for (const char *key : {"mode", "workers", "steps", "wall_s", "samples_per_s", "final_loss",
                            "stall_fraction", "stall_ms_per_worker", "staleness_mean",
                            "peak_activation_bytes", "final_eval_loss", "final_eval_accuracy"})
        QVERIFY2(summary.contains(key), key);
    QCOMPARE(summary["stall_ms_per_worker"].size(), std::size_t(workers));
    QVERIFY(summary["final_loss"].is_number());

    // safetensors
    const auto init = readSafetensors(d + "/params-init.safetensors");
    const auto final_ = readSafetensors(d + "/params-final.safetensors");
    QCOMPARE(init.at("layers.0.weight").shape, (std::vector<std::int64_t>{16, 10}));
    QCOMPARE(init.at("layers.1.bias").shape, (std::vector<std::int64_t>{5}));
    const ModelSpec spec{{10, 16, 5}, Activation::Relu, true, 0};
    const auto &w1 = final_.at("layers.1.weight").data;
    const auto finalParams = e->finalParams(), initialParams = e->initialParams();
    QCOMPARE(w1.front(), finalParams[spec.weightOffset(1)]);
    QCOMPARE(init.at("layers.0.weight").data[17], initialParams[17]);
    QVERIFY(w1 != std::vector<float>(initialParams.begin() + std::ptrdiff_t(spec.weightOffset(1)),
                                     initialParams.begin() + std::ptrdiff_t(spec.biasOffset(1))));

    // A second run into the folder is refused before it writes anything: the first run's files
    // stay as they were (a run there mixed its rows with the old ones, and `info` believed it).
    const auto rowBytes = std::filesystem::file_size(d + "/w0.syr");
    PreparedRun p = prepareRun(json{{"workers", 2}, {"data", {{"source", "blobs"}, {"samples", 64}}}, {"train", {{"steps", 3}, {"batch", 4}}}});
    Engine second(p.config, p.train, p.eval);
    second.setOutputDirectory(d);
    try {
        second.start();
        QFAIL("a second run was started in a run's folder");
    } catch (const StoreError &err) {
        QVERIFY2(std::string(err.what()).find("holds a run already") != std::string::npos, err.what());
    }
    QCOMPARE(std::filesystem::file_size(d + "/w0.syr"), rowBytes);
    QCOMPARE(parseConfig(readJsonFile(d + "/config.json")).workers, workers);
    QVERIFY(!runFolderBeingWritten(d)); // the finished run let go of it
}

QTEST_APPLESS_MAIN(TestRunDir)
#include "tst_rundir.moc"
