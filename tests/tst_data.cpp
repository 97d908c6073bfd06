// IDX files (raw and gzip, every element type, good and broken), widths read off the files,
// the batch sampler and the synthetic sources.
#include "data.h"
#include "pipeline.h"
#include "random.h"
#include "session.h"

#include <tbb/task_arena.h>

#include <QTemporaryDir>
#include <QTest>
#include <zlib.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <thread>

using namespace syncopate;

class TestData : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void readsRawAndGzip();
    void rejectsBadFiles_data();
    void rejectsBadFiles();
    void labelCountMustMatch();
    void readsEveryElementType_data();
    void readsEveryElementType();
    void rejectsBadValues_data();
    void rejectsBadValues();
    void widthsComeFromTheFiles();
    void maxSamplesReadsAPrefix();
    void samplerFileOrder();
    void samplerShufflesEachEpoch();
    void samplerSplitsTheGlobalBatch();
    void permutationIsABijection_data();
    void permutationIsABijection();
    void syntheticSourcesAreSeeded();
    void fashionMnist();
    void pipelineGivesEachStepItsBatch_data();
    void pipelineGivesEachStepItsBatch();
    void pipelineSkipsAhead();
    void pipelineStopsAWaitingStep();
    void prefetchDepthIsRead();

private:
    QString path(const char *name) const { return m_dir.filePath(QString::fromLatin1(name)); }
    QTemporaryDir m_dir;
};

static std::vector<unsigned char> idxBytes(unsigned type, std::vector<std::uint32_t> dims,
                                           std::size_t payload)
{
    std::vector<unsigned char> b = {0, 0, (unsigned char)type, (unsigned char)dims.size()};
    for (auto d : dims)
        for (int s = 24; s >= 0; s -= 8)
            b.push_back((d >> s) & 0xff);
    for (std::size_t i = 0; i < payload; ++i)
        b.push_back((unsigned char)(i % 251));
    return b;
}

static void writeFile(const QString &p, const std::vector<unsigned char> &b)
{
    std::ofstream(p.toStdString(), std::ios::binary)
        .write(reinterpret_cast<const char *>(b.data()), std::streamsize(b.size()));
}

static void writeGzip(const QString &p, const std::vector<unsigned char> &b)
{
    gzFile f = gzopen(p.toStdString().c_str(), "wb");
    gzwrite(f, b.data(), unsigned(b.size()));
    gzclose(f);
}

void TestData::initTestCase()
{
    QVERIFY(m_dir.isValid());
    writeFile(path("images.idx"), idxBytes(0x08, {4, 3, 2}, 24));
    writeFile(path("labels.idx"), idxBytes(0x08, {4}, 0));
    // labels 0..3 need explicit bytes
    std::vector<unsigned char> labels = idxBytes(0x08, {4}, 0);
    for (unsigned char l : {3, 1, 0, 2})
        labels.push_back(l);
    writeFile(path("labels.idx"), labels);
    writeGzip(path("images.idx.gz"), idxBytes(0x08, {4, 3, 2}, 24));
    writeGzip(path("labels.idx.gz"), labels);
    writeFile(path("truncated.idx"), idxBytes(0x08, {4, 3, 2}, 20));
    writeFile(path("magic.idx"), {0x12, 0x34, 0x08, 0x01, 0, 0, 0, 1, 0});
    writeFile(path("type.idx"), idxBytes(0x0A, {1}, 1));
    writeFile(path("trailing.idx"), idxBytes(0x08, {4, 3, 2}, 25));
    writeFile(path("short.idx"), {0, 0});
    writeFile(path("labels3.idx"), idxBytes(0x08, {3}, 3));
    std::vector<unsigned char> corrupt = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xfe, 0xfd};
    writeFile(path("corrupt.idx.gz"), corrupt);
}

void TestData::readsRawAndGzip()
{
    for (const char *suffix : {"", ".gz"}) {
        const Dataset d = loadIdxDataset(path("images.idx").toStdString() + suffix,
                                         path("labels.idx").toStdString() + suffix);
        QCOMPARE(d.samples, std::int64_t(4));
        QCOMPARE(d.features, 6);
        QCOMPARE(d.outputs, 4);
        QCOMPARE(d.labels, (std::vector<std::int32_t>{3, 1, 0, 2}));
        QCOMPARE(d.x[7], 7.0f / 255.0f); // row-major: sample 1, pixel 1
    }
}

void TestData::rejectsBadFiles_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("message");
    QTest::newRow("truncated") << "truncated.idx" << "truncated at byte 36";
    QTest::newRow("wrong magic") << "magic.idx" << "bad magic number 0x12340801 at byte 0";
    QTest::newRow("no such type") << "type.idx" << "data type 0x0000000a at byte 2 is not an IDX type";
    QTest::newRow("bytes after the data") << "trailing.idx" << "more bytes after byte 40";
    QTest::newRow("short header") << "short.idx" << "truncated at byte 2 while reading the magic number";
    QTest::newRow("missing") << "nothing-here.idx" << "file not found";
    QTest::newRow("corrupt gzip") << "corrupt.idx.gz" << "corrupt compressed data";
}

void TestData::rejectsBadFiles()
{
    QFETCH(QString, file);
    QFETCH(QString, message);
    try {
        readIdx(path(file.toLatin1().constData()).toStdString());
        QFAIL("accepted a bad file");
    } catch (const DataError &e) {
        const QString what = QString::fromStdString(e.what());
        QVERIFY2(what.contains(message), qPrintable(what));
        QVERIFY2(what.contains(file), qPrintable(what)); // names the file
    }
}

void TestData::labelCountMustMatch()
{
    try {
        loadIdxDataset(path("images.idx").toStdString(), path("labels3.idx").toStdString());
        QFAIL("accepted mismatched files");
    } catch (const DataError &e) {
        QVERIFY2(QString::fromStdString(e.what()).contains(QStringLiteral("3 labels, but")), e.what());
    }
}

// Big-endian elements of one IDX type, from values.
static std::vector<unsigned char> idxOf(unsigned type, std::vector<std::uint32_t> dims,
                                        const std::vector<double> &values)
{
    std::vector<unsigned char> b = idxBytes(type, std::move(dims), 0);
    for (double v : values) {
        std::uint64_t bits = 0;
        int bytes = 1;
        switch (type) {
        case 0x08: case 0x09: bits = std::uint8_t(std::int64_t(v)); break;
        case 0x0B: bits = std::uint16_t(std::int64_t(v)); bytes = 2; break;
        case 0x0C: bits = std::uint32_t(std::int64_t(v)); bytes = 4; break;
        case 0x0D: { const float f = float(v); std::uint32_t u; std::memcpy(&u, &f, 4); bits = u; bytes = 4; break; }
        default: std::memcpy(&bits, &v, 8); bytes = 8; break;
        }
        for (int s = (bytes - 1) * 8; s >= 0; s -= 8)
            b.push_back((bits >> s) & 0xff);
    }
    return b;
}

void TestData::readsEveryElementType_data()
{
    // An image file of 2 samples x 2 values per type, the values as a reader of that type
    // must see them after scaling; labels in the same type where it is an integer type.
    QTest::addColumn<int>("type");
    QTest::addColumn<QList<double>>("stored");
    QTest::addColumn<QList<double>>("expected");
    QTest::newRow("u8") << 0x08 << QList<double>{0, 51, 255, 102} << QList<double>{0, 0.2, 1, 0.4};
    QTest::newRow("i8") << 0x09 << QList<double>{-127, 0, 127, 1} << QList<double>{-1, 0, 1, 1.0 / 127};
    QTest::newRow("i16") << 0x0B << QList<double>{-32767, 300, 32767, 0} << QList<double>{-1, 300.0 / 32767, 1, 0};
    QTest::newRow("i32") << 0x0C << QList<double>{2147483647, -5, 0, 1 << 30} << QList<double>{1, -5.0 / 2147483647, 0, 0.5};
    QTest::newRow("f32") << 0x0D << QList<double>{0.25, -3.5, 1e6, 0} << QList<double>{0.25, -3.5, 1e6, 0};
    QTest::newRow("f64") << 0x0E << QList<double>{0.125, -2, 7.75, 1e-3} << QList<double>{0.125, -2, 7.75, 1e-3};
}

void TestData::readsEveryElementType()
{
    QFETCH(int, type);
    QFETCH(QList<double>, stored);
    QFETCH(QList<double>, expected);
    const QString images = path(qPrintable(QStringLiteral("images-%1.idx").arg(type)));
    writeFile(images, idxOf(unsigned(type), {2, 2}, {stored.begin(), stored.end()}));
    const bool integral = type < 0x0D;
    const QString labels = path(qPrintable(QStringLiteral("labels-%1.idx.gz").arg(type)));
    writeGzip(labels, idxOf(integral ? unsigned(type) : 0x08u, {2}, {4, 1}));
    const Dataset d = loadIdxDataset(images.toStdString(), labels.toStdString());
    QCOMPARE(d.features, 2);
    QCOMPARE(d.labels, (std::vector<std::int32_t>{4, 1}));
    QCOMPARE(d.outputs, 5);
    for (int i = 0; i < 4; ++i)
        QVERIFY2(std::abs(d.x[std::size_t(i)] - expected[i]) <= 1e-6 * std::max(1.0, std::abs(expected[i])),
                 qPrintable(QStringLiteral("value %1: %2, expected %3").arg(i).arg(d.x[std::size_t(i)]).arg(expected[i])));
}

void TestData::rejectsBadValues_data()
{
    QTest::addColumn<QByteArray>("imageFile");
    QTest::addColumn<QByteArray>("labelFile");
    QTest::addColumn<QString>("named");
    QTest::addColumn<QString>("message");
    const double nan = std::numeric_limits<double>::quiet_NaN();
    writeFile(path("nan.idx"), idxOf(0x0D, {2, 2}, {0, 1, nan, 3}));
    writeFile(path("huge.idx"), idxOf(0x0E, {2, 2}, {0, 1e300, 2, 3}));
    writeFile(path("ok.idx"), idxOf(0x08, {2, 2}, {0, 1, 2, 3}));
    writeFile(path("lab-ok.idx"), idxOf(0x08, {2}, {0, 1}));
    writeFile(path("lab-neg.idx"), idxOf(0x0B, {2}, {1, -3}));
    writeFile(path("lab-big.idx"), idxOf(0x0C, {2}, {70000, 1}));
    writeFile(path("lab-float.idx"), idxOf(0x0D, {2}, {0, 1}));
    QTest::newRow("NaN pixel") << QByteArray("nan.idx") << QByteArray("lab-ok.idx") << "nan.idx"
                               << "at byte 20 (sample 1) is not a finite 32-bit float";
    QTest::newRow("beyond float") << QByteArray("huge.idx") << QByteArray("lab-ok.idx") << "huge.idx"
                                  << "at byte 20 (sample 0) is not a finite 32-bit float";
    QTest::newRow("negative label") << QByteArray("ok.idx") << QByteArray("lab-neg.idx") << "lab-neg.idx"
                                    << "label -3 at byte 10 (sample 1) is not a class";
    QTest::newRow("label too large") << QByteArray("ok.idx") << QByteArray("lab-big.idx") << "lab-big.idx"
                                     << "label 70000 at byte 8 (sample 0) is not a class";
    QTest::newRow("float labels") << QByteArray("ok.idx") << QByteArray("lab-float.idx") << "lab-float.idx"
                                  << "labels are 32-bit floats";
}

void TestData::rejectsBadValues()
{
    QFETCH(QByteArray, imageFile);
    QFETCH(QByteArray, labelFile);
    QFETCH(QString, named);
    QFETCH(QString, message);
    try {
        loadIdxDataset(path(imageFile.constData()).toStdString(), path(labelFile.constData()).toStdString());
        QFAIL("accepted a bad file");
    } catch (const DataError &e) {
        const QString what = QString::fromStdString(e.what());
        QVERIFY2(what.contains(message), qPrintable(what));
        QVERIFY2(what.contains(named), qPrintable(what));
    }
}

void TestData::widthsComeFromTheFiles()
{
    // 3 samples of 5 x 4 pixels in 7 classes: left out, model.layers is read off the files;
    // given, it must fit them.
    std::vector<double> pixels(60, 9.0);
    writeFile(path("w-img.idx"), idxOf(0x08, {3, 5, 4}, pixels));
    writeFile(path("w-lab.idx"), idxOf(0x08, {3}, {0, 6, 2}));
    writeFile(path("w-eval-img.idx"), idxOf(0x08, {1, 5, 4}, std::vector<double>(20, 1.0)));
    writeFile(path("w-eval-lab.idx"), idxOf(0x08, {1}, {8})); // a class the training set lacks
    writeFile(path("w-small-img.idx"), idxOf(0x08, {1, 3, 3}, std::vector<double>(9, 1.0)));
    nlohmann::json j = {{"data.source", "idx"},
                        {"data.images", path("w-img.idx").toStdString()},
                        {"data.labels", path("w-lab.idx").toStdString()}};
    PreparedRun run = prepareRun(j);
    QCOMPARE(run.config.layers, (std::vector<int>{20, 256, 7}));
    QVERIFY(run.config.toJson()["model"]["layers"] == nlohmann::json({20, 256, 7}));

    j["eval.images"] = path("w-eval-img.idx").toStdString();
    j["eval.labels"] = path("w-eval-lab.idx").toStdString();
    run = prepareRun(j);
    QCOMPARE(run.config.layers, (std::vector<int>{20, 256, 9})); // room for the held-out class

    j["model.layers"] = {20, 32, 7};
    try {
        prepareRun(j);
        QFAIL("accepted a model without a class of the held-out set");
    } catch (const ConfigError &e) {
        QVERIFY2(QString::fromStdString(e.what()).contains(QStringLiteral("last width must be at least 9")), e.what());
        QCOMPARE(e.fields(), (std::vector<std::string>{"model.layers"}));
    }

    j.erase("model.layers");
    j["eval.images"] = path("w-small-img.idx").toStdString();
    try {
        prepareRun(j);
        QFAIL("accepted held-out images of another size");
    } catch (const DataError &e) {
        QVERIFY2(QString::fromStdString(e.what()).contains(QStringLiteral("9 features per sample, but the training data")), e.what());
    }
}

void TestData::maxSamplesReadsAPrefix()
{
    const Dataset d = loadIdxDataset(path("images.idx").toStdString(),
                                     path("labels.idx").toStdString(), 2);
    QCOMPARE(d.samples, std::int64_t(2));
    QCOMPARE(d.labels, (std::vector<std::int32_t>{3, 1}));
}

void TestData::samplerFileOrder()
{
    const BatchSampler s(10, 2, 3, false, 1);
    // Step 0: worker 0 gets 0,1,2; worker 1 gets 3,4,5. Step 1 wraps: 6,7,8 | 9,0,1.
    QCOMPARE(s.sampleIndex(0, 1, 0), std::int64_t(3));
    QCOMPARE(s.sampleIndex(1, 1, 0), std::int64_t(9));
    QCOMPARE(s.sampleIndex(1, 1, 2), std::int64_t(1));
}

void TestData::samplerShufflesEachEpoch()
{
    const int n = 1000;
    const BatchSampler s(n, 1, 1, true, 7);
    std::set<std::int64_t> epoch0, epoch1;
    bool differ = false;
    for (int i = 0; i < n; ++i) {
        epoch0.insert(s.sampleIndex(i, 0, 0));
        epoch1.insert(s.sampleIndex(n + i, 0, 0));
        differ = differ || s.sampleIndex(i, 0, 0) != s.sampleIndex(n + i, 0, 0);
    }
    QCOMPARE(int(epoch0.size()), n); // every sample once per epoch
    QCOMPARE(int(epoch1.size()), n);
    QVERIFY(differ);
    QVERIFY(s.sampleIndex(0, 0, 0) != 0 || s.sampleIndex(1, 0, 0) != 1);
}

void TestData::samplerSplitsTheGlobalBatch()
{
    // Worker w, row r of N workers with batch B == row w*B + r of one worker with batch N*B.
    const BatchSampler four(500, 4, 16, true, 3), one(500, 1, 64, true, 3);
    for (int step = 0; step < 20; ++step)
        for (int w = 0; w < 4; ++w)
            for (int r = 0; r < 16; ++r)
                QCOMPARE(four.sampleIndex(step, w, r), one.sampleIndex(step, 0, w * 16 + r));
}

void TestData::permutationIsABijection_data()
{
    QTest::addColumn<int>("n");
    for (int n : {1, 2, 3, 17, 64, 1000, 4097})
        QTest::newRow(qPrintable(QString::number(n))) << n;
}

void TestData::permutationIsABijection()
{
    QFETCH(int, n);
    const IndexPermutation p(std::uint64_t(n), 99);
    std::vector<bool> seen(std::size_t(n), false);
    for (int i = 0; i < n; ++i) {
        const auto v = p(std::uint64_t(i));
        QVERIFY(v < std::uint64_t(n));
        QVERIFY(!seen[v]);
        seen[v] = true;
    }
}

void TestData::syntheticSourcesAreSeeded()
{
    for (const char *source : {"blobs", "spirals", "teacher"}) {
        const RunConfig c = parseConfig({{"data.source", source}, {"data.samples", 200}});
        const auto a = loadTrainingData(c), b = loadTrainingData(c);
        QCOMPARE(a->x, b->x);
        QCOMPARE(a->samples, std::int64_t(200));
        const auto eval = loadEvalData(c);
        QVERIFY(eval);
        QVERIFY(eval->x != a->x); // a separate draw
        QCOMPARE(eval->features, a->features);
    }
}

void TestData::fashionMnist()
{
    const std::string dir = fashionMnistDirectory();
    if (!QFile::exists(QString::fromStdString(dir + "/train-images-idx3-ubyte.gz")))
        QSKIP("dataset-fashion-mnist is not installed");
    const RunConfig c = parseConfig({{"data.source", "fashion-mnist"}, {"data.samples", 100}});
    const auto d = loadTrainingData(c);
    QCOMPARE(d->features, 784);
    QCOMPARE(d->samples, std::int64_t(100));
    QCOMPARE(d->outputs, 10);
    const auto eval = loadEvalData(c);
    QCOMPARE(eval->samples, std::int64_t(1000));
}

// The batch of (step, worker) assembled directly, to compare a pipeline's against.
static std::vector<float> directBatch(const Dataset &d, const BatchSampler &s, std::int64_t step,
                                      int worker, int rows)
{
    std::vector<float> x(std::size_t(rows) * d.features), y;
    std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
    gatherBatch(d, s, step, worker, rows, x.data(), labels.data(), y.data());
    for (std::int32_t l : labels) // one vector to compare: the rows, then their labels
        x.push_back(float(l));
    return x;
}

static std::vector<float> pipelineBatch(const BatchBuffers &b)
{
    std::vector<float> x = b.x;
    for (std::int32_t l : b.labels)
        x.push_back(float(l));
    return x;
}

void TestData::pipelineGivesEachStepItsBatch_data()
{
    QTest::addColumn<int>("depth");
    QTest::addColumn<double>("costUs");
    QTest::newRow("off") << 0 << 0.0;
    QTest::newRow("depth 1") << 1 << 0.0;
    QTest::newRow("depth 3") << 3 << 0.0;
    QTest::newRow("depth 2, costly samples") << 2 << 20.0;
}

// Whatever the depth and however far the producer has run ahead, step s gets the batch of
// step s (the same rows and labels as assembling it directly), in shuffled epochs too.
void TestData::pipelineGivesEachStepItsBatch()
{
    QFETCH(int, depth);
    QFETCH(double, costUs);
    const RunConfig c = parseConfig({{"data.source", "blobs"}, {"data.samples", 100}});
    const auto data = loadTrainingData(c);
    const BatchSampler sampler(data->samples, 2, 16, true, 7);
    RunClock clock;
    std::atomic<bool> stop{false};
    InputPipeline pipe(*data, sampler, 1, 16, depth, costUs, clock, stop);
    QCOMPARE(pipe.depth(), tbb::this_task_arena::max_concurrency() > 1 ? depth : 0);
    for (std::int64_t step = 0; step < 20; ++step) {
        const InputPipeline::Batch b = pipe.acquire(step);
        QVERIFY(b.buffers);
        QVERIFY(b.waitTo >= b.waitFrom);
        QCOMPARE(pipelineBatch(*b.buffers), directBatch(*data, sampler, step, 1, 16));
        if (pipe.depth() > 0) { // assembled in the background, before the step could take it
            QVERIFY(b.buffers->gatheredTo >= b.buffers->gatheredFrom);
            QVERIFY(b.buffers->gatheredTo <= (b.waited() ? b.waitTo : clock.now()));
        }
        if (costUs > 0) // 16 samples at 20 us: at least 320 us of preparation
            QVERIFY(b.buffers->gatheredTo - b.buffers->gatheredFrom >= 320000);
    }
    pipe.close();
    pipe.close(); // idempotent
}

// A worker that skips steps (backup workers catch up) gets the batch of the step it asks for.
void TestData::pipelineSkipsAhead()
{
    const RunConfig c = parseConfig({{"data.source", "blobs"}, {"data.samples", 64}});
    const auto data = loadTrainingData(c);
    const BatchSampler sampler(data->samples, 1, 8, true, 3);
    RunClock clock;
    std::atomic<bool> stop{false};
    InputPipeline pipe(*data, sampler, 0, 8, 2, 0, clock, stop);
    for (std::int64_t step : {0, 1, 5, 6, 7, 12, 30, 31}) {
        const InputPipeline::Batch b = pipe.acquire(step);
        QVERIFY(b.buffers);
        QCOMPARE(pipelineBatch(*b.buffers), directBatch(*data, sampler, step, 0, 8));
    }
}

// A stop while a step waits for a batch that takes long to prepare returns the step at once
// without a batch, whether the stop comes before or while it waits.
void TestData::pipelineStopsAWaitingStep()
{
    const RunConfig c = parseConfig({{"data.source", "blobs"}, {"data.samples", 64}});
    const auto data = loadTrainingData(c);
    const BatchSampler sampler(data->samples, 1, 8, true, 3);
    RunClock clock;
    for (bool before : {true, false}) {
        std::atomic<bool> stop{before};
        // 8 samples at 100 s each: the batch would take 800 s.
        InputPipeline pipe(*data, sampler, 0, 8, 1, 1e8, clock, stop);
        std::thread stopper;
        if (!before)
            stopper = std::thread([&] { stop.store(true); });
        const InputPipeline::Batch b = pipe.acquire(0);
        if (stopper.joinable())
            stopper.join();
        QVERIFY(!b.buffers);
        pipe.close();
    }
}

// data.prefetch is a depth now; the switch of older configurations and run folders still reads.
void TestData::prefetchDepthIsRead()
{
    QCOMPARE(parseConfig({{"data.prefetch", 4}}).prefetch, 4);
    QCOMPARE(parseConfig({{"data", {{"prefetch", true}}}}).prefetch, 1);
    QCOMPARE(parseConfig({{"data.prefetch", false}}).prefetch, 0);
    QCOMPARE(parseConfig(nlohmann::json::object()).prefetch, 1);
    QCOMPARE(parseConfig({{"data.cost_us", 12.5}}).costUs, 12.5);
    for (const nlohmann::json &bad : {nlohmann::json{{"data.prefetch", -1}},
                                      nlohmann::json{{"data.prefetch", 65}},
                                      nlohmann::json{{"data.prefetch", 1.5}},
                                      nlohmann::json{{"data.cost_us", -3}}}) {
        try {
            parseConfig(bad);
            QFAIL(qPrintable(QString::fromStdString("accepted " + bad.dump())));
        } catch (const ConfigError &e) {
            QVERIFY2(std::string(e.what()).find(bad.begin().key()) != std::string::npos, e.what());
        }
    }
}

QTEST_APPLESS_MAIN(TestData)
#include "tst_data.moc"
