// The run store's formats and reader: row files round-trip exactly, a file cut at any byte
// opens with its complete blocks and never a misread record, foreign, newer and damaged files
// are refused by name and offset; the TraceModel sorts out-of-order input in O(n log n), serves
// spans from files and memory alike, and its index round-trips; sub-rows (an import's streams
// and threads) keep their spans in their own rows through files, index and trace.json; the
// async evaluator's row and counters likewise, and a run written before it existed (an async
// run whose workers recorded the evaluations, index version 6) opens as it always did.
#include "chunkfile.h"
#include "config.h"
#include "runstore.h"
#include "tracemodel.h"

#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

using namespace syncopate;

class TestStore : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void rowFileRoundTrips();
    void tornFileDropsOnlyTheLastBlock();
    void foreignAndNewerFilesAreRefused();
    void damagedBlockIsNamed();
    void reverseOrderIsSorted();
    void spansComeFromFileAndMemory();
    void summaryCountsAndLevels();
    void indexRoundTrips();
    void subRowsKeepTheirSpans();
    void evaluatorRowKeepsItsRecords();
    void olderAsyncRunStillLoads();
    void summaryFieldsOfTheWrongTypeAreDropped();
    void hugeDurationsKeepTheSummaryDefined();
    void damagedLastHeaderIsNotATornTail();
    void unreadableRowFilesAreLeftOutAndSaid();
    void aRunFolderHoldsOneRun();

public:
    static std::vector<Record> steps(int worker, int n, std::int64_t t0 = 0);

private:
    QTemporaryDir m_dir;
};

// n steps of forward/backward/wait spans and a loss counter each, back to back.
std::vector<Record> TestStore::steps(int worker, int n, std::int64_t t0)
{
    std::vector<Record> out;
    std::int64_t t = t0;
    for (int s = 0; s < n; ++s) {
        for (Phase p : {Phase::Forward, Phase::Backward, Phase::Wait}) {
            const std::int64_t d = 1000 + (s * 7919 + int(p) * 104729) % 50000;
            out.push_back(Record::span(worker, p, defaultLane(p), std::uint32_t(s), t, t + d, p == Phase::Wait ? s : 0));
            t += d;
        }
        out.push_back(Record::counterSample(worker, CounterId::Loss, std::uint32_t(s), t, 1.0 / (s + 1)));
    }
    return out;
}

static bool same(const Record &a, const Record &b)
{
    return a.start == b.start && a.end == b.end && a.step == b.step && a.worker == b.worker &&
           a.kind == b.kind && a.code == b.code && a.value == b.value;
}

void TestStore::rowFileRoundTrips()
{
    const std::string path = m_dir.filePath(QStringLiteral("roundtrip.syr")).toStdString();
    const auto records = steps(3, 5000); // 20000 records: several blocks
    {
        ChunkWriter w(path, {3, RowKind::Worker, "worker 3"});
        for (const Record &r : records)
            w.append(r);
        w.flush();
        // Well under the 32 bytes a record takes in memory.
        QVERIFY2(double(w.bytesWritten()) / double(records.size()) < 16.0,
                 qPrintable(QString::number(double(w.bytesWritten()) / double(records.size()))));
    }
    ChunkReader r(path);
    QCOMPARE(r.row().worker, 3);
    QCOMPARE(r.row().kind, RowKind::Worker);
    QCOMPARE(r.row().name, std::string("worker 3"));
    QCOMPARE(r.records(), std::uint64_t(records.size()));
    QCOMPARE(r.tornBytes(), std::uint64_t(0));
    std::vector<Record> back, block;
    for (std::size_t b = 0; b < r.blocks().size(); ++b) {
        r.readBlock(b, block);
        back.insert(back.end(), block.begin(), block.end());
    }
    QCOMPARE(back.size(), records.size());
    // Blocks sort by start; these records were in start order already (a counter shares its
    // time with the next span's start, and the sort is stable).
    for (std::size_t i = 0; i < records.size(); ++i)
        QVERIFY2(same(back[i], records[i]), qPrintable(QString::number(i)));
}

void TestStore::tornFileDropsOnlyTheLastBlock()
{
    const std::string path = m_dir.filePath(QStringLiteral("torn.syr")).toStdString();
    const auto records = steps(0, 2500); // 10000 records: 3 blocks
    std::vector<std::uint64_t> blockEnds;
    {
        ChunkWriter w(path, {0, RowKind::Worker, "worker 0"});
        for (std::size_t i = 0; i < records.size(); ++i) {
            w.append(records[i]);
            if (i % 3000 == 2999) {
                w.flush();
                blockEnds.push_back(w.bytesWritten());
            }
        }
        w.flush();
        blockEnds.push_back(w.bytesWritten());
    }
    std::ifstream in(path, std::ios::binary);
    const std::string whole((std::istreambuf_iterator<char>(in)), {});
    const std::string cut = m_dir.filePath(QStringLiteral("cut.syr")).toStdString();
    std::mt19937 rng(7);
    // Every byte of the header region, and random bytes everywhere else.
    std::vector<std::size_t> sizes;
    for (std::size_t s = kChunkFileHeaderBytes; s < kChunkFileHeaderBytes + 2 * kBlockHeaderBytes; ++s)
        sizes.push_back(s);
    for (int i = 0; i < 200; ++i)
        sizes.push_back(kChunkFileHeaderBytes + rng() % (whole.size() - kChunkFileHeaderBytes));
    for (std::size_t size : sizes) {
        std::ofstream(cut, std::ios::binary | std::ios::trunc).write(whole.data(), std::streamsize(size));
        ChunkReader r(cut);
        std::uint64_t complete = 0;
        std::size_t blocks = 0;
        for (std::size_t b = 0; b < blockEnds.size() && blockEnds[b] <= size; ++b)
            ++blocks;
        QCOMPARE(r.blocks().size(), blocks);
        std::vector<Record> block;
        std::size_t at = 0;
        for (std::size_t b = 0; b < r.blocks().size(); ++b) {
            r.readBlock(b, block);
            for (const Record &rec : block)
                QVERIFY(same(rec, records[at++]));
            complete += block.size();
        }
        QCOMPARE(r.records(), complete);
        QCOMPARE(r.tornBytes(), std::uint64_t(size - (blocks ? blockEnds[blocks - 1] : kChunkFileHeaderBytes)));
    }
}

void TestStore::foreignAndNewerFilesAreRefused()
{
    const std::string path = m_dir.filePath(QStringLiteral("foreign.syr")).toStdString();
    std::ofstream(path, std::ios::binary) << std::string(100, 'x');
    try {
        ChunkReader r(path);
        QFAIL("a foreign file was read");
    } catch (const StoreError &e) {
        QVERIFY2(std::string(e.what()).find(path + ": not a Syncopate row file") == 0, e.what());
    }
    const std::string newer = m_dir.filePath(QStringLiteral("newer.syr")).toStdString();
    {
        ChunkWriter w(newer, {0, RowKind::Worker, "w"});
    }
    std::fstream f(newer, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(8);
    const std::uint32_t version = kChunkVersion + 1;
    f.write(reinterpret_cast<const char *>(&version), 4);
    f.close();
    try {
        ChunkReader r(newer);
        QFAIL("a newer file was read");
    } catch (const StoreError &e) {
        const std::string expected = "version " + std::to_string(kChunkVersion + 1) + " at byte 8";
        QVERIFY2(std::string(e.what()).find(expected) != std::string::npos, e.what());
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << "SYN";
    QVERIFY_THROWS_EXCEPTION(StoreError, ChunkReader{path});
}

void TestStore::damagedBlockIsNamed()
{
    const std::string path = m_dir.filePath(QStringLiteral("damaged.syr")).toStdString();
    const auto records = steps(1, 3000);
    {
        ChunkWriter w(path, {1, RowKind::Worker, "worker 1"});
        for (const Record &r : records)
            w.append(r);
        w.flush();
    }
    // A flipped byte inside the first block's data: its checksum no longer matches.
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(std::streamoff(kChunkFileHeaderBytes + kBlockHeaderBytes + 10));
    char c;
    f.read(&c, 1);
    c = char(c ^ 0x5a);
    f.seekp(std::streamoff(kChunkFileHeaderBytes + kBlockHeaderBytes + 10));
    f.write(&c, 1);
    f.close();
    ChunkReader r(path);
    std::vector<Record> out;
    try {
        r.readBlock(0, out);
        QFAIL("a damaged block was read");
    } catch (const StoreError &e) {
        QVERIFY2(std::string(e.what()).find(path + " at byte 64: block checksum mismatch") == 0, e.what());
    }
    r.readBlock(1, out); // the others still read
    QVERIFY(!out.empty());
}

void TestStore::reverseOrderIsSorted()
{
    // 80000 spans in reverse order (a trace written newest first) sort in O(n log n).
    TraceModel m(1, false, 8);
    auto records = steps(0, 20000);
    std::vector<Record> spans;
    for (const Record &r : records)
        if (r.isSpan())
            spans.push_back(r);
    std::reverse(spans.begin(), spans.end());
    m.append(spans);
    QCOMPARE(m.spanCount(), std::uint64_t(spans.size()));
    std::vector<Record> out;
    m.spansIn(0, 0, m.endNs(), out);
    QCOMPARE(out.size(), spans.size());
    QVERIFY(std::is_sorted(out.begin(), out.end(), [](const Record &a, const Record &b) { return a.start < b.start; }));
}

void TestStore::spansComeFromFileAndMemory()
{
    // A live model keeps only its recent window in memory; older spans come from the row file
    // the engine writes, and a query across the boundary sees each span exactly once.
    const QString dir = m_dir.filePath(QStringLiteral("live"));
    QDir().mkpath(dir);
    const auto records = steps(0, 60000); // 180000 spans: past the recent window
    {
        ChunkWriter w(QString(dir + QStringLiteral("/w0.syr")).toStdString(), {0, RowKind::Worker, "worker 0"});
        for (const Record &r : records)
            w.append(r);
        w.flush();
    }
    TraceModel m(1, false, 8);
    m.attachDirectory(dir.toStdString());
    m.append(records);
    // Not everything is held: the summary, the (bounded) series and at most twice the recent
    // window of raw spans.
    QVERIFY(m.memoryBytes() < 2 * TraceModel::kRecentSpans * sizeof(Record) + m.lod(0).memoryBytes() +
                                  TraceModel::kMaxCounterPoints * sizeof(CounterPoint) +
                                  TraceModel::kMaxStepPoints * sizeof(StepPoint) + 65536);
    std::vector<Record> all, out;
    for (const Record &r : records)
        if (r.isSpan())
            all.push_back(r);
    m.spansIn(0, 0, m.endNs(), out);
    QCOMPARE(out.size(), all.size());
    for (std::size_t i = 0; i < all.size(); i += 997)
        QVERIFY(same(out[i], all[i]));
    // A window around the boundary between file and memory.
    const std::int64_t mid = all[all.size() - TraceModel::kRecentSpans - 10].start;
    m.spansIn(0, mid - 100000, mid + 100000, out);
    std::size_t expected = 0;
    for (const Record &r : all)
        expected += r.end >= mid - 100000 && r.start <= mid + 100000;
    QCOMPARE(out.size(), expected);
}

void TestStore::summaryCountsAndLevels()
{
    TraceModel m(2, false, 8);
    m.append(steps(0, 1000));
    m.append(steps(1, 1000, 5000));
    const RowLod &lod = m.lod(0);
    QCOMPARE(lod.spans(), std::uint64_t(3000));
    QCOMPARE(m.countIn(0, 0, m.endNs()), std::uint64_t(3000));
    // Every kept level accounts for every span, and the dominant phase is a phase.
    for (int l = lod.finestLevel(); l < RowLod::kLevels; ++l) {
        std::uint64_t n = 0;
        for (const LodBucket &b : lod.level(l)) {
            n += b.count;
            QVERIFY(b.dominant < std::uint8_t(Phase::Count));
            if (b.count)
                QVERIFY(b.phases & (1u << b.dominant));
        }
        QCOMPARE(n, std::uint64_t(3000));
    }
    // A bucket holding a single wait span says wait, all of it.
    TraceModel one(1, false, 8);
    one.append({Record::span(0, Phase::Wait, Lane::Comm, 0, 0, 1000000)});
    const LodBucket &b = one.lod(0).level(0)[0];
    QCOMPARE(b.dominant, std::uint8_t(Phase::Wait));
    QCOMPARE(b.share, std::uint8_t(255));
    QCOMPARE(b.maxEnd, std::int64_t(1000000));
    // Spans outside any run's time are not indexed.
    one.append({Record::span(0, Phase::Forward, Lane::Compute, 0, -5, 10),
                Record::span(0, Phase::Forward, Lane::Compute, 0, 0, kMaxRunNs + 1)});
    QCOMPARE(one.spanCount(), std::uint64_t(1));
}

void TestStore::indexRoundTrips()
{
    TraceModel m(2, true, 16);
    m.append(steps(0, 3000));
    m.append(steps(1, 3000, 777));
    m.append({Record::counterSample(0, CounterId::Staleness, 3, 100, 4),
              Record::counterSample(1, CounterId::Staleness, 4, 120, 2),
              Record::counterSample(1, CounterId::Staleness, 5, 130, 2),
              Record::span(1, Phase::Data, Lane::Data, 2, 50, 60)});
    // Per worker, and together: worker 0 pushed one update 4 stale, worker 1 two 2 stale.
    QCOMPARE(m.stalenessHistogram(0), (std::vector<std::uint64_t>{0, 0, 0, 0, 1}));
    QCOMPARE(m.stalenessHistogram(1), (std::vector<std::uint64_t>{0, 0, 2}));
    QCOMPARE(m.stalenessHistogram(), (std::vector<std::uint64_t>{0, 0, 2, 0, 1}));
    const std::string path = m_dir.filePath(QStringLiteral("index.syi")).toStdString();
    m.saveIndex(path);
    TraceModel back(2, true, 16);
    QVERIFY(back.loadIndex(path));
    QCOMPARE(back.spanCount(), m.spanCount());
    QCOMPARE(back.recordCount(), m.recordCount());
    QCOMPARE(back.endNs(), m.endNs());
    QCOMPARE(back.rowCount(), m.rowCount());
    for (std::size_t r = 0; r < m.rowCount(); ++r) {
        QCOMPARE(back.lod(r).finestLevel(), m.lod(r).finestLevel());
        const auto &a = m.lod(r).level(m.lod(r).finestLevel()), &b = back.lod(r).level(m.lod(r).finestLevel());
        QCOMPARE(a.size(), b.size());
        QVERIFY(std::equal(a.begin(), a.end(), b.begin(), [](const LodBucket &x, const LodBucket &y) {
            return x.count == y.count && x.maxEnd == y.maxEnd && x.dominant == y.dominant && x.phases == y.phases;
        }));
    }
    QCOMPARE(back.counter(CounterId::Loss, 1).size(), m.counter(CounterId::Loss, 1).size());
    QCOMPARE(back.steps(0).size(), m.steps(0).size());
    QCOMPARE(back.stalenessHistogram(), m.stalenessHistogram());
    QCOMPARE(back.stalenessHistogram(0), m.stalenessHistogram(0));
    QCOMPARE(back.stalenessHistogram(1), m.stalenessHistogram(1));
    // A model of another shape refuses the index by its field.
    TraceModel other(3, true, 16);
    try {
        other.loadIndex(path);
        QFAIL("an index of 2 workers was loaded into a model of 3");
    } catch (const StoreError &e) {
        QVERIFY2(std::string(e.what()).find("2 workers where the config has 3") != std::string::npos, e.what());
    }
    // A damaged index is refused, never half-read.
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(40);
    f.write("garbage!", 8);
    f.close();
    TraceModel damaged(2, true, 16);
    QVERIFY_THROWS_EXCEPTION(StoreError, damaged.loadIndex(path));
}

// Worker 0 has two main rows (sub 0 and 1) and two thin ones, worker 1 one of each: what an
// import of GPU streams and CPU threads writes.
void TestStore::subRowsKeepTheirSpans()
{
    const std::string dir = QDir(m_dir.path()).filePath(QStringLiteral("subrows")).toStdString();
    std::filesystem::create_directories(dir);
    RunConfig c = parseConfig(nlohmann::json{{"workers", 2}, {"data.prefetch", true}});
    std::ofstream(dir + "/config.json") << c.toJson().dump();
    const std::vector<RowDescriptor> rows = {{0, RowKind::Worker, "rank 0 stream 7", 0}, {0, RowKind::Worker, "rank 0 stream 9", 1},
                                             {0, RowKind::DataLane, "rank 0 thread 5", 0}, {0, RowKind::DataLane, "rank 0 thread 6", 1},
                                             {1, RowKind::Worker, "rank 1 stream 7", 0}, {1, RowKind::DataLane, "rank 1 thread 5", 0}};
    const std::vector<std::string> files = {"w0.syr", "w0-s1.syr", "w0-data.syr", "w0-t1.syr", "w1.syr", "w1-data.syr"};
    std::vector<std::uint64_t> spans;
    double wait0 = 0; // worker 0's stall in step 0, over both its main rows
    // Written in reverse, so that the reader's order is its own.
    for (std::size_t i = rows.size(); i-- > 0;) {
        QCOMPARE(rowFileName(rows[i]), files[i]);
        ChunkWriter w(dir + "/" + files[i], rows[i]);
        std::uint64_t n = 0;
        for (int s = 0; s < 10 + 5 * int(i); ++s) {
            const std::int64_t t = 1000 * s;
            const Record r = rows[i].kind == RowKind::DataLane
                                 ? Record::span(rows[i].worker, Phase::Data, Lane::Data, 0, t, t + 400)
                                 : Record::span(rows[i].worker, Phase::Wait, Lane::Comm, 0, t, t + 300 + 100 * rows[i].sub);
            w.append(r);
            ++n;
            if (r.worker == 0 && r.isStall())
                wait0 += double(r.duration()) / 1e6;
        }
        w.flush();
        spans.insert(spans.begin(), n);
    }
    // A row without a sub-row stays version 1, readable by older builds; a sub-row's is 2.
    for (const auto &[file, version] : {std::pair{"w0.syr", 1u}, std::pair{"w0-s1.syr", 2u}}) {
        std::ifstream in(dir + "/" + file, std::ios::binary);
        std::uint32_t v = 0;
        in.seekg(8);
        in.read(reinterpret_cast<char *>(&v), 4);
        QCOMPARE(v, version);
    }
    QCOMPARE(ChunkReader(dir + "/w0-t1.syr").row().sub, 1);
    QCOMPARE(ChunkReader(dir + "/w0-t1.syr").row().kind, RowKind::DataLane);
    QCOMPARE(ChunkReader(dir + "/w1.syr").row().sub, 0);
    // Rebuilt from the files, then from the index they gave.
    for (const bool indexed : {false, true}) {
        bool rebuilt = false;
        const OpenedRun run = openRunDirectory(dir, [&](double) { return rebuilt = true; });
        QCOMPARE(rebuilt, !indexed);
        const TraceModel &t = *run.trace;
        QCOMPARE(t.rowCount(), rows.size());
        for (std::size_t r = 0; r < rows.size(); ++r) {
            QCOMPARE(t.row(r).name, rows[r].name);
            QCOMPARE(t.row(r).worker, rows[r].worker);
            QCOMPARE(t.row(r).kind, rows[r].kind);
            QCOMPARE(t.row(r).sub, rows[r].sub);
            QCOMPARE(t.lod(r).spans(), spans[r]);
            std::vector<Record> in;
            t.spansIn(r, 0, t.endNs(), in);
            QCOMPARE(std::uint64_t(in.size()), spans[r]);
            if (rows[r].kind == RowKind::Worker)
                QCOMPARE(in.front().duration(), std::int64_t(300 + 100 * rows[r].sub));
        }
        QVERIFY(std::abs(t.steps(0).at(0).waitMs - wait0) < 1e-9);
        if (!indexed)
            t.saveIndex(dir + "/index.syi");
    }
    // trace.json: a thread per row, each with its row's spans.
    exportTraceJson(dir + "/trace.json", dir);
    std::ifstream in(dir + "/trace.json");
    const auto trace = nlohmann::json::parse(in);
    std::map<long long, std::uint64_t> perThread;
    std::map<long long, std::string> names;
    for (const auto &e : trace["traceEvents"]) {
        if (e["ph"] == "X")
            ++perThread[e["tid"].get<long long>()];
        else if (e["ph"] == "M" && e["name"] == "thread_name")
            names[e["tid"].get<long long>()] = e["args"]["name"];
    }
    QCOMPARE(names.size(), rows.size());
    for (const auto &[tid, name] : names) {
        const auto at = std::find_if(rows.begin(), rows.end(), [&](const RowDescriptor &d) { return d.name == name; });
        QVERIFY(at != rows.end());
        QCOMPARE(perThread[tid], spans[std::size_t(at - rows.begin())]);
    }
}

static std::uint32_t fileVersion(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    std::uint32_t v = 0;
    in.seekg(8);
    in.read(reinterpret_cast<char *>(&v), 4);
    return v;
}

// Two workers and the evaluator (worker 2): its spans and eval counters in evaluator.syr, a row
// of its own after the workers', a counter series of its own, none of the workers' figures.
void TestStore::evaluatorRowKeepsItsRecords()
{
    const std::string dir = QDir(m_dir.path()).filePath(QStringLiteral("evaluator")).toStdString();
    std::filesystem::create_directories(dir);
    RunConfig c = parseConfig(nlohmann::json{{"mode", "async"}, {"workers", 2}, {"data.prefetch", false}});
    std::ofstream(dir + "/config.json") << c.toJson().dump();
    for (int w = 0; w < 2; ++w) {
        ChunkWriter writer(dir + "/" + rowFileName({w, RowKind::Worker, {}}), {w, RowKind::Worker, "worker"});
        for (const Record &r : steps(w, 10))
            writer.append(r);
        writer.flush();
    }
    const RowDescriptor evaluator{2, RowKind::Evaluator, "evaluator"};
    QCOMPARE(rowFileName(evaluator), std::string("evaluator.syr"));
    const std::vector<double> losses = {0.9, 0.5, 0.25};
    {
        ChunkWriter writer(dir + "/evaluator.syr", evaluator);
        for (std::size_t i = 0; i < losses.size(); ++i) {
            const auto v = std::uint32_t(4 * (i + 1));
            const std::int64_t t = 1000000 * std::int64_t(i + 1);
            writer.append(Record::span(2, Phase::Eval, Lane::Compute, v, t, t + 5000, v));
            writer.append(Record::counterSample(2, CounterId::EvalLoss, v, t + 5000, losses[i]));
        }
        writer.flush();
    }
    // Only the evaluator's file is version 3: the workers' stay readable by older builds.
    QCOMPARE(fileVersion(dir + "/evaluator.syr"), 3u);
    QCOMPARE(fileVersion(dir + "/w0.syr"), 1u);
    QCOMPARE(ChunkReader(dir + "/evaluator.syr").row().kind, RowKind::Evaluator);
    for (const bool indexed : {false, true}) {
        bool rebuilt = false;
        const OpenedRun run = openRunDirectory(dir, [&](double) { return rebuilt = true; });
        QCOMPARE(rebuilt, !indexed);
        const TraceModel &t = *run.trace;
        QCOMPARE(t.rowCount(), std::size_t(3));
        QCOMPARE(t.row(2).kind, RowKind::Evaluator);
        QCOMPARE(t.row(2).worker, 2);
        QCOMPARE(t.row(2).name, std::string("evaluator"));
        QCOMPARE(t.lod(2).spans(), std::uint64_t(losses.size()));
        const auto &points = t.counter(CounterId::EvalLoss, 2);
        QCOMPARE(points.size(), losses.size());
        for (std::size_t i = 0; i < losses.size(); ++i) {
            QCOMPARE(points[i].value, losses[i]);
            QCOMPARE(points[i].step, std::uint32_t(4 * (i + 1)));
        }
        QVERIFY(t.counter(CounterId::EvalLoss, 0).empty());
        // Per-worker aggregates are the workers' alone.
        QCOMPARE(t.phaseTimeIn(0, double(t.endNs())).size(), std::size_t(2));
        QVERIFY(std::abs(t.steps(0).at(0).waitMs - double(steps(0, 1)[2].duration()) / 1e6) < 1e-9);
        if (!indexed)
            t.saveIndex(dir + "/index.syi");
    }
    // A model fed live makes the row with the evaluator's first span, last.
    TraceModel live(2, false, 8);
    live.append(steps(0, 3));
    live.append({Record::counterSample(2, CounterId::EvalLoss, 4, 10, 0.5)});
    QCOMPARE(live.rowCount(), std::size_t(2)); // a counter alone makes no row
    live.append({Record::span(2, Phase::Eval, Lane::Compute, 4, 5, 9, 4), Record::span(3, Phase::Eval, Lane::Compute, 4, 5, 9, 4)});
    QCOMPARE(live.rowCount(), std::size_t(3));
    QCOMPARE(live.row(2).kind, RowKind::Evaluator);
    QCOMPARE(live.counter(CounterId::EvalLoss, 2).size(), std::size_t(1));
    QCOMPARE(live.spanCount(), std::uint64_t(3 * 3 + 1)); // worker 3 does not exist: not counted
    // No other row may claim the evaluator's place, nor the evaluator another.
    std::filesystem::remove(dir + "/index.syi");
    {
        ChunkWriter writer(dir + "/w2.syr", {2, RowKind::Worker, "worker 2"});
    }
    QVERIFY_THROWS_EXCEPTION(StoreError, openRunDirectory(dir));
    std::filesystem::remove(dir + "/w2.syr");
    {
        ChunkWriter writer(dir + "/evaluator.syr", {1, RowKind::Evaluator, "evaluator"});
    }
    QVERIFY_THROWS_EXCEPTION(StoreError, openRunDirectory(dir));
    // A file of an older version cannot hold the evaluator's kind: damaged, refused.
    {
        ChunkWriter writer(dir + "/evaluator.syr", evaluator);
    }
    std::fstream f(dir + "/evaluator.syr", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(8);
    const std::uint32_t two = 2;
    f.write(reinterpret_cast<const char *>(&two), 4);
    f.close();
    QVERIFY_THROWS_EXCEPTION(StoreError, ChunkReader(dir + "/evaluator.syr"));
}

// tests/data/runs/async-index6: an async run (2 workers, 40 updates, an evaluation every 10)
// written by the build before the evaluator, whose workers recorded the evaluations on their
// own rows; index version 6, row files version 1. It opens from its index and from its row
// files alike, with its rows and eval points where they were.
void TestStore::olderAsyncRunStillLoads()
{
    const std::string dir = QDir(m_dir.path()).filePath(QStringLiteral("async-index6")).toStdString();
    std::filesystem::copy(SYNCOPATE_TEST_DATA "/runs/async-index6", dir, std::filesystem::copy_options::recursive);
    QCOMPARE(fileVersion(dir + "/w0.syr"), 1u);
    for (const bool indexed : {true, false}) {
        if (!indexed)
            std::filesystem::remove(dir + "/index.syi");
        bool rebuilt = false;
        const OpenedRun run = openRunDirectory(dir, [&](double) { return rebuilt = true; });
        QCOMPARE(rebuilt, !indexed);
        QVERIFY(!run.interrupted);
        QVERIFY(run.summaryProblems.empty());
        const TraceModel &t = *run.trace;
        QCOMPARE(t.rowCount(), std::size_t(4)); // each worker's and its prefetch lane, no evaluator
        for (std::size_t r = 0; r < t.rowCount(); ++r)
            QVERIFY(t.row(r).kind != RowKind::Evaluator && t.row(r).worker < 2);
        std::vector<std::uint32_t> steps;
        std::vector<double> losses;
        for (int w = 0; w < 2; ++w)
            for (const CounterPoint &p : t.counter(CounterId::EvalLoss, w)) {
                steps.push_back(p.step);
                losses.push_back(p.value);
            }
        QVERIFY(t.counter(CounterId::EvalLoss, 2).empty());
        std::sort(steps.begin(), steps.end());
        QCOMPARE(steps, (std::vector<std::uint32_t>{10, 20, 30, 40}));
        QCOMPARE(run.summary["eval"].size(), std::size_t(4));
        QVERIFY(!run.summary.contains("evals_skipped"));
        std::uint64_t evalSpans = 0;
        t.forEachRecord([&](const Record &r) { evalSpans += r.isSpan() && r.phase() == Phase::Eval ? 1 : 0; });
        QCOMPARE(evalSpans, std::uint64_t(4));
        if (!indexed) // the index written now is this build's, and opens again
            t.saveIndex(dir + "/index.syi");
    }
    QCOMPARE(openRunDirectory(dir).trace->rowCount(), std::size_t(4));
    exportTraceJson(dir + "/trace.json", dir);
}

// A run folder of two rows and the given summary.json.
static std::string runFolder(const QString &base, const std::string &summary)
{
    const std::string dir = QDir(base).filePath(QStringLiteral("typed-run")).toStdString();
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    RunConfig c = parseConfig(nlohmann::json{{"workers", 2}, {"data.prefetch", false}});
    std::ofstream(dir + "/config.json") << c.toJson().dump();
    for (int w = 0; w < 2; ++w) {
        ChunkWriter writer(dir + "/" + rowFileName({w, RowKind::Worker, {}}), {w, RowKind::Worker, "worker"});
        for (const Record &r : TestStore::steps(w, 10))
            writer.append(r);
        writer.flush();
    }
    std::ofstream(dir + "/summary.json") << summary;
    return dir;
}

// Found with fuzz_store: summary.json is read by the CLI and the app at the types the engine
// writes ("status" a string, "steps_completed" an integer...), so {"status": 5} threw
// nlohmann's type_error out of `syncopate-cli info` instead of a message.
void TestStore::summaryFieldsOfTheWrongTypeAreDropped()
{
    const std::string dir = runFolder(m_dir.path(), R"({"status": "finished", "steps_completed": "ten",
        "final_eval_accuracy": null, "stall_ms_per_worker": [1, "a"], "devices": "cpu",
        "reduce": {"algorithm": 3, "time_ms_mean": 0.5}, "wall_s": 2.5})");
    const OpenedRun run = openRunDirectory(dir);
    QCOMPARE(run.summary.value("status", ""), std::string("finished"));
    QVERIFY(!run.interrupted);
    QCOMPARE(run.summary.value("wall_s", 0.0), 2.5);
    for (const char *gone : {"steps_completed", "final_eval_accuracy", "stall_ms_per_worker", "devices"})
        QVERIFY2(!run.summary.contains(gone), gone);
    QVERIFY(!run.summary["reduce"].contains("algorithm"));
    QCOMPARE(run.summary["reduce"].value("time_ms_mean", 0.0), 0.5);
    QCOMPARE(run.summaryProblems.size(), std::size_t(4)); // a null is not a problem, only dropped
    QVERIFY2(run.summaryProblems[0].find("summary.json: steps_completed: expected an integer") != std::string::npos,
             run.summaryProblems[0].c_str());

    // A status that is not a string cannot say the run ended: interrupted.
    const OpenedRun bad = openRunDirectory(runFolder(m_dir.path(), R"({"status": 5})"));
    QVERIFY(bad.interrupted);
    QCOMPARE(bad.summary.value("status", ""), std::string("interrupted"));
}

// Found with fuzz_store: a bucket's phase times summed past 2^63 (spans of a damaged file
// claiming 2^52 ns each), and the dominant share overflowed. Summed saturating, shared in double.
void TestStore::hugeDurationsKeepTheSummaryDefined()
{
    RowLod lod;
    for (int i = 0; i < 5000; ++i) {
        Record r = Record::span(0, i % 2 ? Phase::Forward : Phase::Wait, Lane::Compute, 0, i, kMaxRunNs, 0);
        lod.add(r);
    }
    lod.settle();
    QCOMPARE(lod.spans(), std::uint64_t(5000));
    const auto &b = lod.level(lod.finestLevel()).front();
    QCOMPARE(b.count, std::uint32_t(5000));
    QVERIFY(b.dominant == std::uint8_t(Phase::Forward) || b.dominant == std::uint8_t(Phase::Wait));
    QVERIFY(b.share >= 127); // two phases of equal time: about half each, saturated alike
}

// A whole block header that does not check is damage even in the last block: its length (which
// said whether it was the last) cannot be trusted, and a kill never cuts through a whole header.
// The blocks before it are kept and the damage named; only zeros to the end are a torn tail.
void TestStore::damagedLastHeaderIsNotATornTail()
{
    const std::string path = m_dir.filePath(QStringLiteral("lasthead.syr")).toStdString();
    {
        ChunkWriter w(path, {0, RowKind::Worker, "worker 0"});
        for (const Record &r : steps(0, 6000)) // 24000 records: several blocks
            w.append(r);
        w.flush();
    }
    const ChunkReader whole(path);
    const std::size_t n = whole.blocks().size();
    QVERIFY(n >= 2);
    const std::uint64_t last = whole.blocks().back().offset;
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    for (const std::size_t at : {std::size_t(4), std::size_t(12), std::size_t(36)}) { // count, packed length, checksum
        std::string damaged = bytes;
        damaged[last + at] = char(damaged[last + at] ^ 0x7f);
        std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged;
        const ChunkReader r(path);
        QCOMPARE(r.blocks().size(), n - 1);
        QCOMPARE(r.tornBytes(), std::uint64_t(0));
        QCOMPARE(r.damagedBytes(), std::uint64_t(bytes.size() - last));
        QVERIFY2(r.damage().find(path + " at byte " + std::to_string(last) + ": damaged block header") == 0, r.damage().c_str());
    }
    // Zeros where the last block was (a power loss after the file grew): a torn tail.
    std::string zeroed = bytes.substr(0, last) + std::string(bytes.size() - last, '\0');
    std::ofstream(path, std::ios::binary | std::ios::trunc) << zeroed;
    const ChunkReader r(path);
    QCOMPARE(r.blocks().size(), n - 1);
    QVERIFY(r.damage().empty());
    QCOMPARE(r.tornBytes(), std::uint64_t(bytes.size() - last));
}

namespace {

// A run folder of `workers` workers with config.json and a row file each.
std::string smallRunFolder(const QTemporaryDir &tmp, const char *name, int workers)
{
    const std::string dir = QDir(tmp.path()).filePath(QLatin1String(name)).toStdString();
    std::filesystem::create_directories(dir);
    writeFileAtomically(dir + "/config.json", parseConfig(nlohmann::json{{"workers", workers}}).toJson().dump(2));
    for (int w = 0; w < workers; ++w) {
        ChunkWriter writer(dir + "/" + rowFileName({w, RowKind::Worker, {}}), {w, RowKind::Worker, "worker " + std::to_string(w)});
        for (const Record &r : TestStore::steps(w, 50))
            writer.append(r);
        writer.flush();
    }
    return dir;
}

} // namespace

// A row file that cannot be read (cut to nothing, a directory by its name, a damaged header)
// is left out and said; the other rows open. Two files of one row are refused, naming both.
void TestStore::unreadableRowFilesAreLeftOutAndSaid()
{
    const std::string dir = smallRunFolder(m_dir, "unreadable", 3);
    std::filesystem::resize_file(dir + "/w1.syr", 0); // killed right after it was made
    std::filesystem::remove(dir + "/w2.syr");
    std::filesystem::create_directory(dir + "/w2.syr");
    OpenedRun run = openRunDirectory(dir);
    QCOMPARE(run.problems.size(), std::size_t(2));
    QVERIFY2(run.problems[0].find("w1.syr: 0 bytes") != std::string::npos, run.problems[0].c_str());
    QVERIFY2(run.problems[0].find("left out") != std::string::npos, run.problems[0].c_str());
    QVERIFY2(run.problems[1].find("w2.syr: a directory") != std::string::npos, run.problems[1].c_str());
    QCOMPARE(run.trace->spanCount(), std::uint64_t(50 * 3)); // worker 0's
    // A run that ended wrote its index: row files cut since are said, not quietly re-indexed.
    {
        const std::string cut = smallRunFolder(m_dir, "cutafter", 2);
        OpenedRun whole = openRunDirectory(cut);
        whole.trace->saveIndex(cut + "/index.syi");
        QVERIFY(openRunDirectory(cut).problems.empty());
        ChunkWriter shorter(cut + "/w1.syr", {1, RowKind::Worker, "worker 1"});
        for (const Record &r : steps(1, 20))
            shorter.append(r);
        shorter.flush();
        const OpenedRun again = openRunDirectory(cut);
        QCOMPARE(again.problems.size(), std::size_t(1));
        QVERIFY2(again.problems[0].find("index.syi: counted 400 records when the run ended, the row files hold 280") != std::string::npos,
                 again.problems[0].c_str());
        QCOMPARE(again.trace->spanCount(), std::uint64_t(50 * 3 + 20 * 3));
    }
    // The export writes what can be read, and says what it could not.
    const auto said = exportTraceJson(dir + "/out.json", dir);
    QCOMPARE(said.size(), std::size_t(2));
    QVERIFY(readJsonFile(dir + "/out.json")["traceEvents"].is_array());

    // A stray copy of worker 0's row (from another run, say): which one belongs cannot be told.
    std::filesystem::copy_file(dir + "/w0.syr", dir + "/w0-copy.syr");
    try {
        openRunDirectory(dir);
        QFAIL("two files of one row were opened");
    } catch (const StoreError &e) {
        const std::string what = e.what();
        QVERIFY2(what.find("w0-copy.syr") != std::string::npos && what.find("/w0.syr") != std::string::npos, e.what());
    }
    std::filesystem::remove(dir + "/w0-copy.syr");

    // A row whose name is not UTF-8 (a damaged header) still exports valid JSON.
    {
        ChunkWriter writer(dir + "/w1.syr", {1, RowKind::Worker, "worker \xff\xfe"});
        for (const Record &r : steps(1, 5))
            writer.append(r);
        writer.flush();
    }
    // A block whose bytes fail their checksum: the export leaves it out, says so, writes the rest.
    {
        std::fstream f(dir + "/w0.syr", std::ios::binary | std::ios::in | std::ios::out);
        f.seekp(std::streamoff(kChunkFileHeaderBytes + kBlockHeaderBytes + 10));
        f.put('\x5a');
    }
    const auto damagedSaid = exportTraceJson(dir + "/out.json", dir);
    QVERIFY(std::any_of(damagedSaid.begin(), damagedSaid.end(), [](const std::string &p) {
        return p.find("w0.syr at byte 64: block checksum mismatch") != std::string::npos && p.find("left out") != std::string::npos;
    }));
    const auto events = readJsonFile(dir + "/out.json")["traceEvents"];
    QVERIFY(std::any_of(events.begin(), events.end(), [](const nlohmann::json &e) {
        return e["name"] == "thread_name" && e["args"]["name"].get<std::string>().rfind("worker ", 0) == 0 && e["tid"] == 1;
    }));
}

// One run per folder: a second writer while the first writes is refused (and a reader sees the
// run as being written, not interrupted), and so is one after it ended.
void TestStore::aRunFolderHoldsOneRun()
{
    const std::string dir = QDir(m_dir.path()).filePath(QStringLiteral("claimed")).toStdString();
    std::filesystem::create_directories(dir);
    auto refused = [&](const char *needle) {
        try {
            RunFolderClaim again(dir);
            return std::string("a second claim was granted");
        } catch (const StoreError &e) {
            return std::string(e.what()).find(needle) != std::string::npos ? std::string() : std::string(e.what());
        }
    };
    {
        RunFolderClaim first(dir);
        QVERIFY(runFolderBeingWritten(dir));
        const std::string problem = refused("another process is writing a run in this folder");
        QVERIFY2(problem.empty(), problem.c_str());
    }
    QVERIFY(!runFolderBeingWritten(dir));
    smallRunFolder(m_dir, "claimed", 2); // a run was written there and ended
    const std::string problem = refused("holds a run already");
    QVERIFY2(problem.empty(), problem.c_str());
    // A reader while a run is being written: running, not interrupted.
    const std::string fresh = QDir(m_dir.path()).filePath(QStringLiteral("writing")).toStdString();
    std::filesystem::create_directories(fresh);
    RunFolderClaim writing(fresh);
    smallRunFolder(m_dir, "writing", 2);
    const OpenedRun live = openRunDirectory(fresh);
    QVERIFY(live.live);
    QVERIFY(!live.interrupted);
    QCOMPARE(live.summary.value("status", ""), std::string("running"));
}

QTEST_GUILESS_MAIN(TestStore)
#include "tst_store.moc"
