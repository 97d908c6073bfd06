// Files from colleagues and students: every reader (configs and presets, IDX raw and gzip,
// safetensors) rejects a malformed or hostile file with a typed error naming the file and the
// place, without crashing, stalling or allocating what the file merely claims. Inputs the
// fuzzers in tests/fuzz found are kept here as regression cases.
#include "config.h"
#include "fuzz/fuzzfile.h"
#include "data.h"
#include "safetensors.h"
#include "session.h"

#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QTest>
#include <sys/resource.h>
#include <zlib.h>

#include <fstream>
#include <random>

using namespace syncopate;

namespace {

constexpr std::uint32_t k2to30 = 1u << 30;

std::string repeat(const std::string &s, int n)
{
    std::string out;
    out.reserve(s.size() * std::size_t(n));
    for (int i = 0; i < n; ++i)
        out += s;
    return out;
}

std::string idxHeader(unsigned type, std::initializer_list<std::uint32_t> dims)
{
    std::string b = {0, 0, char(type), char(dims.size())};
    for (auto d : dims)
        for (int s = 24; s >= 0; s -= 8)
            b += char((d >> s) & 0xff);
    return b;
}

std::string safetensors(const std::string &header, std::size_t dataBytes, std::uint64_t length)
{
    std::string b;
    for (int i = 0; i < 8; ++i)
        b += char((length >> (8 * i)) & 0xff);
    return b + header + std::string(dataBytes, '\0');
}
std::string safetensors(const std::string &header, std::size_t dataBytes)
{
    return safetensors(header, dataBytes, header.size());
}

long peakRssMb()
{
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024;
}

bool contains(const std::string &what, const QByteArray &part)
{
    return what.find(part.toStdString()) != std::string::npos;
}

// Runs f, which must throw Error with a message holding file (when not empty) and message.
template <class Error, class F>
void expectError(F f, const std::string &file, const QByteArray &message)
{
    try {
        f();
        QFAIL(qPrintable(QStringLiteral("accepted a bad file; expected: ") + QString::fromUtf8(message)));
    } catch (const Error &e) {
        QVERIFY2(contains(e.what(), message), e.what());
        QVERIFY2(file.empty() || contains(e.what(), QByteArray::fromStdString(file)), e.what());
    }
}

} // namespace

class TestUntrusted : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { QVERIFY(m_dir.isValid()); }
    void deepJson_data();
    void deepJson();
    void deepJsonElsewhere();
    void configNumbers_data();
    void configNumbers();
    void longKeysAreQuick();
    void assignmentsNeedUtf8();
    void idxHeaders_data();
    void idxHeaders();
    void gzipReadsOnlyWhatIsThere();
    void idxWidthAndFileKind();
    void safetensorsHeaders_data();
    void safetensorsHeaders();
    void safetensorsRoundTrip();

private:
    // A file for the current test row, holding bytes.
    std::string file(const std::string &bytes, const char *suffix = "")
    {
        const std::string p = m_dir.filePath(QString::fromLatin1(QTest::currentTestFunction()) +
                                             QString::number(++m_files) + QString::fromLatin1(suffix))
                                  .toStdString();
        std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
        return p;
    }
    QTemporaryDir m_dir;
    int m_files = 0;
};

void TestUntrusted::deepJson_data()
{
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QByteArray>("where"); // empty: accepted
    const int deep = 100000;
    QTest::newRow("100000 arrays") << QByteArray::fromStdString(repeat("[", deep) + repeat("]", deep)) << QByteArray("at byte 64 (line 1)");
    QTest::newRow("100000 objects") << QByteArray::fromStdString(repeat("{\"a\":", deep) + "1" + repeat("}", deep)) << QByteArray("at byte 320");
    QTest::newRow("deep inside a config") << QByteArray::fromStdString("{\"train\":\n " + repeat("[", deep)) << QByteArray("at byte 74 (line 2)");
    QTest::newRow("unterminated") << QByteArray::fromStdString(repeat("[", 65)) << QByteArray("at byte 64");
    QTest::newRow("64 levels") << QByteArray::fromStdString(repeat("[", 64) + repeat("]", 64)) << QByteArray();
    QTest::newRow("brackets in a string") << QByteArray::fromStdString("[\"\\\"" + repeat("[", 1000) + "\"]") << QByteArray();
    QTest::newRow("brackets in comments") << QByteArray::fromStdString("// " + repeat("[", 100) + "\n/* " + repeat("{", 100) + " */ []") << QByteArray();
}

void TestUntrusted::deepJson()
{
    QFETCH(QByteArray, text);
    QFETCH(QByteArray, where);
    const std::string path = file(text.toStdString(), ".json");
    if (where.isEmpty()) {
        readJsonFile(path);
        return;
    }
    expectError<ConfigError>([&] { readJsonFile(path); }, path, "JSON nested deeper than 64 levels");
    expectError<ConfigError>([&] { readJsonFile(path); }, path, where);
}

void TestUntrusted::deepJsonElsewhere()
{
    const std::string deep = repeat("[", 100000);
    const std::string preset = file("{\"title\": \"t\", \"config\": {\"model\": {\"layers\": " + deep, ".json");
    expectError<ConfigError>([&] { readPresetFile(preset); }, preset, "deeper than 64 levels at byte 107");
    // --set takes what is no JSON value as a string; one that deep is no JSON value here.
    nlohmann::json flat = nlohmann::json::object();
    applyAssignment(flat, "model.layers=" + deep);
    QVERIFY(flat["model.layers"].is_string());
    expectError<ConfigError>([&] { parseConfig(flat); }, "", "expected an array of integers");
    const std::string st = file(safetensors("{\"a\":" + deep, 0), ".safetensors");
    expectError<DataError>([&] { readSafetensors(st); }, st, "deeper than 64 levels at byte 76");
}

void TestUntrusted::configNumbers_data()
{
    // Each number type nlohmann has (signed, unsigned, float) at and past every kind of limit.
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QByteArray>("field"); // empty: rejected while reading, at a byte offset
    QTest::addColumn<QByteArray>("message");
    QTest::newRow("1e400") << QByteArray(R"({"workers": 1e400})") << QByteArray() << QByteArray("number 1e400 is beyond the range of a double at byte 12 (line 1)");
    QTest::newRow("-1e400") << QByteArray("{\n\"train\": {\"lr\": -1e400}}") << QByteArray() << QByteArray("number -1e400 is beyond the range of a double at byte 18 (line 2)");
    QTest::newRow("400 digits") << QByteArray::fromStdString("{\"train.steps\": " + repeat("9", 400) + "}") << QByteArray() << QByteArray("beyond the range of a double at byte 16");
    QTest::newRow("int as 1e300") << QByteArray(R"({"workers": 1e300})") << QByteArray("workers") << QByteArray("workers = 1e+300: expected an integer between 1 and 256");
    QTest::newRow("past int32") << QByteArray(R"({"train.batch": 2147483648})") << QByteArray("train.batch") << QByteArray("expected an integer between 1 and 1000000");
    QTest::newRow("past uint64") << QByteArray(R"({"train.steps": 99999999999999999999999})") << QByteArray("train.steps") << QByteArray("expected an integer between 1 and 100000000");
    QTest::newRow("uint64 max seed") << QByteArray(R"({"train.seed": 18446744073709551615})") << QByteArray("train.seed") << QByteArray("train.seed = 18446744073709551615: expected an integer between 0 and");
    QTest::newRow("negative seed") << QByteArray(R"({"train.seed": -1})") << QByteArray("train.seed") << QByteArray("train.seed = -1: expected an integer between 0 and");
    QTest::newRow("int64 min") << QByteArray(R"({"workers": -9223372036854775808})") << QByteArray("workers") << QByteArray("between 1 and 256");
    QTest::newRow("float seed") << QByteArray(R"({"train.seed": 1e19})") << QByteArray("train.seed") << QByteArray("train.seed = 1e+19");
    QTest::newRow("fraction") << QByteArray(R"({"eval.samples": 1.5})") << QByteArray("eval.samples") << QByteArray("expected an integer");
    QTest::newRow("huge width") << QByteArray(R"({"model.layers": [784, 1e10, 10]})") << QByteArray("model.layers") << QByteArray("between 1 and 65536, found 10000000000.0");
    QTest::newRow("width past uint32") << QByteArray(R"({"model.layers": [784, 4294967297, 10]})") << QByteArray("model.layers") << QByteArray("found 4294967297");
    QTest::newRow("negative width") << QByteArray(R"({"model.layers": [784, -1, 10]})") << QByteArray("model.layers") << QByteArray("found -1");
    QTest::newRow("tiny lr") << QByteArray(R"({"train.lr": 1e-400})") << QByteArray("train.lr") << QByteArray("train.lr = 0.0: expected a number between 1e-12 and 1000000");
    QTest::newRow("gigantic model") << QByteArray(R"({"model.layers": [65536, 65536, 65536, 10]})") << QByteArray("model.layers") << QByteArray("parameters x 4 workers, more than the limit of 2147483648");
    QTest::newRow("too many layers") << QByteArray::fromStdString("{\"model.layers\": [" + repeat("4, ", 2000) + "4]}") << QByteArray("model.layers") << QByteArray("2001 widths, more than the limit of 1024");
    QTest::newRow("billion samples") << QByteArray(R"({"data.samples": 1000000000})") << QByteArray("data.samples") << QByteArray("floats to generate, more than the limit");
    QTest::newRow("long device") << QByteArray::fromStdString("{\"device\": \"cuda:" + repeat("0", 5000) + "\"}") << QByteArray("device") << QByteArray("at most 4096 characters");
}

void TestUntrusted::configNumbers()
{
    QFETCH(QByteArray, text);
    QFETCH(QByteArray, field);
    QFETCH(QByteArray, message);
    const std::string path = file(text.toStdString(), ".json");
    if (field.isEmpty()) {
        expectError<ConfigError>([&] { readJsonFile(path); }, path, message);
        return;
    }
    const nlohmann::json j = readJsonFile(path);
    try {
        parseConfig(j);
        QFAIL("accepted an out-of-range value");
    } catch (const ConfigError &e) {
        QVERIFY2(contains(e.what(), message), e.what());
        QVERIFY2(contains(e.what(), field), e.what());
        QVERIFY(std::find(e.fields().begin(), e.fields().end(), field.toStdString()) != e.fields().end());
        QVERIFY2(std::string(e.what()).size() < 2000, "the message repeats the whole value");
    }
}

void TestUntrusted::longKeysAreQuick()
{
    // Unknown keys get a "did you mean"; its edit distance is quadratic, so a key of a megabyte
    // must not reach it (this took seconds per key), nor land whole in the message.
    QElapsedTimer t;
    t.start();
    const nlohmann::json j = {{std::string(1 << 20, 'x'), 1}, {std::string(1 << 20, 'y'), 2}};
    expectError<ConfigError>([&] { parseConfig(j); }, "", "unknown key \"xxxx");
    QVERIFY2(t.elapsed() < 2000, qPrintable(QString::number(t.elapsed())));
    nlohmann::json flat = nlohmann::json::object();
    expectError<ConfigError>([&] { applyAssignment(flat, std::string(1 << 20, 'k')); }, "", "expected KEY=VALUE");
}

void TestUntrusted::assignmentsNeedUtf8()
{
    // Found with fuzz_config: --set data.images=<byte 0xff> passed validation, and writing the
    // run's config.json then threw nlohmann's type_error 316 instead of a ConfigError.
    nlohmann::json flat = nlohmann::json::object();
    applyAssignment(flat, "data.images=\xff");
    expectError<ConfigError>([&] { parseConfig(flat); }, "", "data.images = \"\xef\xbf\xbd\": expected UTF-8 text");
}

void TestUntrusted::idxHeaders_data()
{
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<bool>("gz");
    QTest::addColumn<qulonglong>("maxBytes");
    QTest::addColumn<QByteArray>("message");
    const qulonglong limit = kMaxIdxBytes, big = 8ull << 30;
    const std::string past64 = idxHeader(0x0E, {k2to30, k2to30, k2to30, k2to30});
    QTest::newRow("dims past 2^64") << QByteArray::fromStdString(past64) << false << limit << QByteArray("dimensions 1073741824 x 1073741824 x 1073741824 x 1073741824 (bytes 4 to 19) of 64-bit floats describe more than 2^64 bytes");
    QTest::newRow("dims past 2^64, gzip") << QByteArray::fromStdString(fuzz::gzip(past64, Z_BEST_COMPRESSION)) << true << limit << QByteArray("describe more than 2^64 bytes");
    QTest::newRow("exactly 2^64") << QByteArray::fromStdString(idxHeader(0x08, {k2to30, k2to30, 16})) << false << limit << QByteArray("describe more than 2^64 bytes");
    const std::string fourGb = idxHeader(0x08, {4, k2to30}) + std::string(88, '\1'); // 100 bytes
    QTest::newRow("4 GB in 100 bytes") << QByteArray::fromStdString(fourGb) << false << limit << QByteArray("describe 4294967296 bytes to read, more than the limit of 1073741824");
    QTest::newRow("4 GB in 100 bytes, high limit") << QByteArray::fromStdString(fourGb) << false << big << QByteArray("truncated at byte 100 while reading the data the header describes (4294967208 more bytes expected");
    QTest::newRow("1 GB in 100 bytes") << QByteArray::fromStdString(idxHeader(0x08, {1, k2to30}) + std::string(88, '\1')) << false << limit << QByteArray("truncated at byte 100");
    QTest::newRow("truncated gzip") << QByteArray::fromStdString(fuzz::gzip(idxHeader(0x08, {4, 3, 2}) + std::string(20, '\7'), Z_BEST_COMPRESSION)) << true << limit << QByteArray("truncated at byte 36");
    std::string noise(100000, '\0');
    std::mt19937 rng(1);
    for (auto &c : noise)
        c = char(rng());
    const std::string whole = fuzz::gzip(idxHeader(0x08, {100, 1000}) + noise, Z_BEST_COMPRESSION);
    QTest::newRow("gzip stream cut") << QByteArray::fromStdString(whole.substr(0, whole.size() / 2)) << true << limit << QByteArray("truncated at byte");
    const std::string bomb = fuzz::gzip(idxHeader(0x08, {4, k2to30}) + std::string(1 << 20, '\0'), Z_BEST_COMPRESSION);
    QTest::newRow("gzip bomb, over the limit") << QByteArray::fromStdString(bomb) << true << limit << QByteArray("describe 4294967296 bytes to read, more than the limit");
    QTest::newRow("gzip bomb, high limit") << QByteArray::fromStdString(bomb) << true << big << QByteArray("describe 4294967296 bytes, more than a gzip file of " + QByteArray::number(qulonglong(bomb.size())) + " bytes can hold");
}

void TestUntrusted::idxHeaders()
{
    QFETCH(QByteArray, bytes);
    QFETCH(bool, gz);
    QFETCH(qulonglong, maxBytes);
    QFETCH(QByteArray, message);
    const std::string path = file(bytes.toStdString(), gz ? ".idx.gz" : ".idx");
    const long rss = peakRssMb();
    QElapsedTimer t;
    t.start();
    expectError<DataError>([&] { readIdx(path, 0, maxBytes); }, path, message);
    QVERIFY2(t.elapsed() < 1000, qPrintable(QString::number(t.elapsed())));
    QVERIFY2(peakRssMb() - rss < 200, "allocated what the header claims");
}

void TestUntrusted::gzipReadsOnlyWhatIsThere()
{
    // Incompressible data, just enough that deflate's ratio allows the 4 GiB the header claims:
    // the reader must fail at the end of the real data having held about that much, not 4 GiB.
    std::string noise((std::size_t(4) << 30) / 1000, '\0');
    std::mt19937 rng(2);
    for (auto &c : noise)
        c = char(rng());
    const std::string path = file(fuzz::gzip(idxHeader(0x08, {4, k2to30}) + noise, 1), ".idx.gz");
    const long rss = peakRssMb();
    expectError<DataError>([&] { readIdx(path, 0, 8ull << 30); }, path,
                           "truncated at byte " + QByteArray::number(qulonglong(noise.size() + 12)));
    QVERIFY2(peakRssMb() - rss < 200, "allocated what the header claims");
}

void TestUntrusted::idxWidthAndFileKind()
{
    const std::string images = file(idxHeader(0x08, {1, 1 << 17}) + std::string(1 << 17, '\0'));
    const std::string labels = file(idxHeader(0x08, {1}) + std::string(1, '\0'));
    expectError<DataError>([&] { loadIdxDataset(images, labels); }, images,
                           "images of 131072 values each (dimensions 1 x 131072 at byte 4) are wider than the 65536 inputs");
    const std::string dir = m_dir.path().toStdString();
    expectError<DataError>([&] { readIdx(dir); }, dir, "not a regular file");
    expectError<DataError>([&] { readSafetensors(dir); }, dir, "not a regular file");
    expectError<ConfigError>([&] { readJsonFile(dir); }, dir, "it is a directory");
    const std::string big = file(std::string(100, ' ') + "{}");
    expectError<ConfigError>([&] { readJsonFile(big, 64); }, big, "more than 64 bytes");
}

void TestUntrusted::safetensorsHeaders_data()
{
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QByteArray>("message");
    const std::string ok = R"({"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
    auto row = [](const char *name, const std::string &bytes, const char *message) {
        QTest::newRow(name) << QByteArray::fromStdString(bytes) << QByteArray(message);
    };
    row("shorter than the length", "\1\2\3", "truncated at byte 3 (a safetensors file starts with an 8-byte header length)");
    row("header length 2^63", safetensors(ok, 16, 1ull << 63), "header length 9223372036854775808 at byte 0 is more than the limit of 100000000 bytes");
    row("header length past the file", safetensors(ok, 16, 1000), "header length 1000 at byte 0 exceeds the file (81 bytes)");
    row("empty header", safetensors("", 16), "not valid JSON at byte 8");
    row("header not an object", safetensors("[1]", 0), "the header at byte 8 is not a JSON object");
    row("offsets past the end", safetensors(R"({"t":{"dtype":"F32","shape":[250],"data_offsets":[0,1000]}})", 16), "tensor \"t\": data_offsets [0,1000] reach past the end of the data (16 bytes from byte 67");
    row("shape and offsets disagree", safetensors(R"({"t":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", 16), "tensor \"t\": shape [2,3] needs 24 bytes of F32, but data_offsets [0,16] span 16");
    row("shape past 2^64", safetensors(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]}})", 16), "shape [4294967296,4294967296,16] needs more than 2^64 bytes");
    row("negative size", safetensors(R"({"t":{"dtype":"F32","shape":[-4,-1],"data_offsets":[0,16]}})", 16), "tensor \"t\": shape [-4,-1], expected non-negative integers");
    row("fractional size", safetensors(R"({"t":{"dtype":"F32","shape":[2.5],"data_offsets":[0,16]}})", 16), "expected non-negative integers");
    row("negative offset", safetensors(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[-16,0]}})", 16), "data_offsets [-16,0], expected [begin, end]");
    row("offsets reversed", safetensors(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[16,8]}})", 16), "data_offsets [16,8], expected [begin, end]");
    row("one offset", safetensors(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[16]}})", 16), "data_offsets [16], expected");
    row("huge offsets", safetensors(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}})", 16), "reach past the end");
    row("not F32", safetensors(R"({"t":{"dtype":"BF16","shape":[8],"data_offsets":[0,16]}})", 16), "tensor \"t\": dtype \"BF16\", expected \"F32\"");
    row("entry not an object", safetensors(R"({"t":5})", 16), "tensor \"t\": expected an object with dtype, shape and data_offsets");
    row("no shape", safetensors(R"({"t":{"dtype":"F32","data_offsets":[0,16]}})", 16), "expected an object with dtype, shape and data_offsets");
    row("overlapping tensors", safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 24), "tensors \"a\" and \"b\" overlap");
    row("1e400 in the header", safetensors(R"({"t":{"dtype":"F32","shape":[1e400],"data_offsets":[0,16]}})", 16), "number 1e400 is beyond the range of a double at byte 37");
}

void TestUntrusted::safetensorsHeaders()
{
    QFETCH(QByteArray, bytes);
    QFETCH(QByteArray, message);
    const std::string path = file(bytes.toStdString(), ".safetensors");
    expectError<DataError>([&] { readSafetensors(path); }, path, message);
}

void TestUntrusted::safetensorsRoundTrip()
{
    // The checks accept what writeSafetensors writes, and a tensor with a zero-size dimension.
    std::vector<float> params(3 * 2 + 2 + 2 * 3 + 3);
    for (std::size_t i = 0; i < params.size(); ++i)
        params[i] = float(i) * 0.5f;
    const std::string path = m_dir.filePath(QStringLiteral("ok.safetensors")).toStdString();
    writeSafetensors(path, {3, 2, 3}, params);
    const auto t = readSafetensors(path);
    QCOMPARE(t.size(), std::size_t(4));
    QCOMPARE(t.at("layers.0.weight").shape, (std::vector<std::int64_t>{2, 3}));
    QCOMPARE(t.at("layers.1.bias").data, (std::vector<float>{7.0f, 7.5f, 8.0f}));
    const std::string empty = file(safetensors(R"({"e":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},"__metadata__":{"x":"y"}})", 0), ".safetensors");
    QCOMPARE(readSafetensors(empty).at("e").shape, (std::vector<std::int64_t>{0, 5}));
}

QTEST_GUILESS_MAIN(TestUntrusted)
#include "tst_untrusted.moc"
