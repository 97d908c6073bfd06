// IDX files (raw and gzip, good and broken), the batch sampler and the synthetic sources.
#include "data.h"
#include "random.h"

#include <QTemporaryDir>
#include <QTest>
#include <zlib.h>

#include <fstream>
#include <set>

using namespace syncopate;

class TestData : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void readsRawAndGzip();
    void rejectsBadFiles_data();
    void rejectsBadFiles();
    void labelCountMustMatch();
    void maxSamplesReadsAPrefix();
    void samplerFileOrder();
    void samplerShufflesEachEpoch();
    void samplerSplitsTheGlobalBatch();
    void permutationIsABijection_data();
    void permutationIsABijection();
    void syntheticSourcesAreSeeded();
    void fashionMnist();

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
    writeFile(path("float.idx"), idxBytes(0x0D, {1}, 4));
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
    QTest::newRow("not bytes") << "float.idx" << "data type 0x0000000d at byte 2";
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

QTEST_APPLESS_MAIN(TestData)
#include "tst_data.moc"
