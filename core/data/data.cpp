#include "data.h"

#include "random.h"

#include "cpu/hugepages.h"

#include <zlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

namespace syncopate {
namespace {

// Reads through zlib, which passes uncompressed files through unchanged.
class ByteReader {
public:
    explicit ByteReader(const std::string &path) : m_path(path)
    {
        std::error_code ec;
        const auto status = std::filesystem::status(path, ec);
        if (!std::filesystem::exists(status))
            throw DataError(path + ": file not found");
        // A directory, pipe or device has no size to check claims against (/dev/zero never ends).
        if (!std::filesystem::is_regular_file(status))
            throw DataError(path + ": not a regular file");
        m_size = std::filesystem::file_size(path, ec);
        if (ec)
            throw DataError(path + ": cannot read the file size (" + ec.message() + ")");
        m_file = gzopen(path.c_str(), "rb");
        if (!m_file)
            throw DataError(path + ": cannot open the file");
        // A large buffer speeds up big files; for small ones its 768 KiB would cost more than
        // the read (the fuzzer opens thousands per second).
        if (m_size > (1u << 20))
            gzbuffer(m_file, 1 << 18);
    }
    ~ByteReader() { gzclose(m_file); }
    ByteReader(const ByteReader &) = delete;
    ByteReader &operator=(const ByteReader &) = delete;

    // Reads exactly n bytes or throws, saying where the data ended.
    void read(void *dst, std::size_t n, const char *what)
    {
        auto *out = static_cast<unsigned char *>(dst);
        std::size_t got = 0;
        while (got < n) {
            const unsigned chunk = unsigned(std::min<std::size_t>(n - got, 1u << 30));
            const int r = gzread(m_file, out + got, chunk);
            if (r < 0) {
                int code = 0;
                const char *msg = gzerror(m_file, &code);
                throw DataError(m_path + ": corrupt compressed data after byte " +
                                std::to_string(m_offset + got) + " (" + msg + ")");
            }
            if (r == 0)
                throw DataError(m_path + ": truncated at byte " + std::to_string(m_offset + got) +
                                " while reading " + what + " (" + std::to_string(n - got) +
                                " more bytes expected)");
            got += std::size_t(r);
        }
        m_offset += n;
    }
    std::uint32_t readBigEndian32(const char *what)
    {
        unsigned char b[4];
        read(b, 4, what);
        return (std::uint32_t(b[0]) << 24) | (std::uint32_t(b[1]) << 16) |
               (std::uint32_t(b[2]) << 8) | b[3];
    }
    // Reads n bytes into out. Gzip data arrives in pieces, so memory grows with the data that is
    // really there, not with what a header claims (raw files were checked against their size).
    void readInto(std::vector<std::uint8_t> &out, std::uint64_t n, const char *what)
    {
        constexpr std::uint64_t piece = std::uint64_t(1) << 24;
        out.clear();
        if (direct()) {
            out.resize(std::size_t(n));
            read(out.data(), out.size(), what);
            return;
        }
        while (out.size() < n) {
            const std::size_t at = out.size();
            out.resize(at + std::size_t(std::min(piece, n - at)));
            read(out.data() + at, out.size() - at, what);
        }
    }
    std::uint64_t offset() const { return m_offset; }
    std::uint64_t fileSize() const { return m_size; }
    bool direct() { return gzdirect(m_file) == 1; } // not gzip: bytes as stored
    const std::string &path() const { return m_path; }
    // Whether any byte follows what has been read.
    bool hasMore()
    {
        const int c = gzgetc(m_file);
        if (c == -1) {
            int code = 0;
            const char *msg = gzerror(m_file, &code);
            if (code != Z_OK && code != Z_BUF_ERROR)
                throw DataError(m_path + ": corrupt compressed data after byte " +
                                std::to_string(m_offset) + " (" + msg + ")");
            return false;
        }
        return true;
    }

private:
    std::string m_path;
    gzFile m_file = nullptr;
    std::uint64_t m_offset = 0;
    std::uint64_t m_size = 0;
};

// Deflate expands at most about 1032:1 (a 258-byte match per 2-bit code), so a gzip file cannot
// decompress to more than this many bytes per byte it has.
constexpr std::uint64_t kMaxGzipRatio = 1032;

std::string dimsText(const std::vector<std::int64_t> &dims)
{
    std::string d;
    for (auto n : dims)
        d += (d.empty() ? "" : " x ") + std::to_string(n);
    return d;
}

std::string hex32(std::uint32_t v)
{
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", v);
    return buf;
}

std::shared_ptr<Dataset> makeBlobs(int features, int classes, std::int64_t n, std::uint64_t seed,
                                   std::uint64_t stream)
{
    auto d = std::make_shared<Dataset>();
    d->name = "blobs";
    d->features = features;
    d->outputs = classes;
    d->samples = n;
    // The cluster centres depend on the seed only, so held-out draws share them.
    Rng centreRng(seed, 1);
    std::vector<float> centres(std::size_t(classes) * features);
    for (auto &c : centres)
        c = float(centreRng.normal() * 0.75);
    Rng rng(seed, stream);
    d->x.resize(std::size_t(n) * features);
    d->labels.resize(std::size_t(n));
    for (std::int64_t i = 0; i < n; ++i) {
        const int label = int(rng.below(std::uint64_t(classes)));
        d->labels[std::size_t(i)] = label;
        for (int f = 0; f < features; ++f)
            d->x[std::size_t(i) * features + f] =
                centres[std::size_t(label) * features + f] + float(rng.normal());
    }
    return d;
}

std::shared_ptr<Dataset> makeSpirals(int classes, std::int64_t n, std::uint64_t seed,
                                     std::uint64_t stream)
{
    auto d = std::make_shared<Dataset>();
    d->name = "spirals";
    d->features = 2;
    d->outputs = classes;
    d->samples = n;
    Rng rng(seed, stream);
    d->x.resize(std::size_t(n) * 2);
    d->labels.resize(std::size_t(n));
    for (std::int64_t i = 0; i < n; ++i) {
        const int label = int(rng.below(std::uint64_t(classes)));
        const double t = rng.uniform();
        const double angle = label * 2.0 * M_PI / classes + t * 4.0 + rng.normal() * 0.2;
        d->labels[std::size_t(i)] = label;
        d->x[std::size_t(i) * 2] = float(t * std::cos(angle));
        d->x[std::size_t(i) * 2 + 1] = float(t * std::sin(angle));
    }
    return d;
}

std::shared_ptr<Dataset> makeTeacher(int features, int outputs, std::int64_t n, std::uint64_t seed,
                                     std::uint64_t stream)
{
    auto d = std::make_shared<Dataset>();
    d->name = "teacher";
    d->features = features;
    d->outputs = outputs;
    d->classification = false;
    d->samples = n;
    // A fixed random teacher: features -> 32 tanh -> outputs.
    constexpr int hidden = 32;
    Rng teacherRng(seed, 2);
    std::vector<double> w1(std::size_t(hidden) * features), w2(std::size_t(outputs) * hidden);
    for (auto &w : w1)
        w = teacherRng.normal() / std::sqrt(double(features));
    for (auto &w : w2)
        w = teacherRng.normal() / std::sqrt(double(hidden));
    Rng rng(seed, stream);
    d->x.resize(std::size_t(n) * features);
    d->y.resize(std::size_t(n) * outputs);
    std::vector<double> h(hidden);
    for (std::int64_t i = 0; i < n; ++i) {
        float *x = &d->x[std::size_t(i) * features];
        for (int f = 0; f < features; ++f)
            x[f] = float(rng.normal());
        for (int j = 0; j < hidden; ++j) {
            double s = 0;
            for (int f = 0; f < features; ++f)
                s += w1[std::size_t(j) * features + f] * x[f];
            h[j] = std::tanh(s);
        }
        for (int o = 0; o < outputs; ++o) {
            double s = 0;
            for (int j = 0; j < hidden; ++j)
                s += w2[std::size_t(o) * hidden + j] * h[j];
            d->y[std::size_t(i) * outputs + o] = float(s + rng.normal() * 0.01);
        }
    }
    return d;
}

} // namespace

const char *IdxArray::typeName() const
{
    switch (type) {
    case 0x08: return "unsigned bytes";
    case 0x09: return "signed bytes";
    case 0x0B: return "16-bit integers";
    case 0x0C: return "32-bit integers";
    case 0x0D: return "32-bit floats";
    default: return "64-bit floats";
    }
}

double IdxArray::value(std::int64_t i) const
{
    const std::uint8_t *p = data.data() + std::size_t(i) * std::size_t(elementBytes);
    std::uint64_t bits = 0;
    for (int b = 0; b < elementBytes; ++b)
        bits = (bits << 8) | p[b];
    switch (type) {
    case 0x08: return double(p[0]);
    case 0x09: return double(std::int8_t(p[0]));
    case 0x0B: return double(std::int16_t(std::uint16_t(bits)));
    case 0x0C: return double(std::int32_t(std::uint32_t(bits)));
    case 0x0D: {
        const auto u = std::uint32_t(bits);
        float f;
        std::memcpy(&f, &u, sizeof f);
        return double(f);
    }
    default: {
        double d;
        std::memcpy(&d, &bits, sizeof d);
        return d;
    }
    }
}

IdxArray readIdx(const std::string &path, std::int64_t maxItems, std::uint64_t maxBytes)
{
    ByteReader in(path);
    const std::uint32_t magic = in.readBigEndian32("the magic number");
    const std::uint32_t type = (magic >> 8) & 0xff;
    const std::uint32_t rank = magic & 0xff;
    if ((magic >> 16) != 0 || rank == 0 || rank > 4)
        throw DataError(path + ": bad magic number " + hex32(magic) +
                        " at byte 0 (an IDX file starts with 0x0000TTNN: type TT, NN dimensions)");
    IdxArray a;
    a.type = type;
    switch (type) {
    case 0x08: case 0x09: a.elementBytes = 1; break;
    case 0x0B: a.elementBytes = 2; break;
    case 0x0C: case 0x0D: a.elementBytes = 4; break;
    case 0x0E: a.elementBytes = 8; break;
    default:
        throw DataError(path + ": data type " + hex32(type) +
                        " at byte 2 is not an IDX type (expected 0x08 unsigned bytes, 0x09 "
                        "signed bytes, 0x0B 16-bit or 0x0C 32-bit integers, 0x0D or 0x0E floats)");
    }
    // Every product is overflow-checked: four dimensions of 2^30 multiply past 2^64.
    std::uint64_t count = 1;
    bool overflow = false;
    for (std::uint32_t i = 0; i < rank; ++i) {
        const std::uint64_t at = in.offset();
        const std::uint32_t n = in.readBigEndian32("a dimension");
        if (n == 0 || n > (1u << 30))
            throw DataError(path + ": dimension " + std::to_string(i) + " at byte " +
                            std::to_string(at) + " is " + std::to_string(n) +
                            " (expected 1 to 2^30)");
        a.dims.push_back(n);
        overflow = overflow || __builtin_mul_overflow(count, std::uint64_t(n), &count);
    }
    std::uint64_t bytes = 0;
    overflow = overflow || __builtin_mul_overflow(count, std::uint64_t(a.elementBytes), &bytes);
    const std::string described = "dimensions " + dimsText(a.dims) + " (bytes 4 to " +
                                  std::to_string(in.offset() - 1) + ") of " + a.typeName();
    if (overflow)
        throw DataError(path + ": the " + described + " describe more than 2^64 bytes");
    const bool prefix = maxItems > 0 && maxItems < a.dims[0];
    if (prefix) {
        count = count / std::uint64_t(a.dims[0]) * std::uint64_t(maxItems);
        bytes = count * std::uint64_t(a.elementBytes);
        a.dims[0] = maxItems;
    }
    if (bytes > maxBytes)
        throw DataError(path + ": the " + described + " describe " + std::to_string(bytes) +
                        " bytes to read, more than the limit of " + std::to_string(maxBytes));
    a.dataOffset = in.offset();
    const std::uint64_t size = in.fileSize();
    if (in.direct() && bytes > size - a.dataOffset)
        throw DataError(path + ": truncated at byte " + std::to_string(size) +
                        " while reading the data the header describes (" +
                        std::to_string(bytes - (size - a.dataOffset)) +
                        " more bytes expected for the " + described + ")");
    if (!in.direct() && bytes / kMaxGzipRatio > size)
        throw DataError(path + ": the " + described + " describe " + std::to_string(bytes) +
                        " bytes, more than a gzip file of " + std::to_string(size) +
                        " bytes can hold (" + std::to_string(kMaxGzipRatio) +
                        " times its size): truncated, or a wrong header");
    in.readInto(a.data, bytes, "the data the header describes");
    if (!prefix && in.hasMore())
        throw DataError(path + ": more bytes after byte " + std::to_string(in.offset()) +
                        ", where the data the header describes ends (dimensions " +
                        dimsText(a.dims) + " of " + a.typeName() +
                        "): not an IDX file, or a wrong header");
    return a;
}

Dataset loadIdxDataset(const std::string &imagesPath, const std::string &labelsPath,
                       std::int64_t maxSamples)
{
    IdxArray images = readIdx(imagesPath, maxSamples);
    IdxArray labels = readIdx(labelsPath, maxSamples);
    if (labels.dims.size() != 1)
        throw DataError(labelsPath + ": a label file has one dimension, this one has " +
                        std::to_string(labels.dims.size()));
    if (!labels.integral())
        throw DataError(labelsPath + ": labels are " + labels.typeName() +
                        " (type at byte 2); classes need an integer type (0x08, 0x09, 0x0B or 0x0C)");
    if (images.dims.size() < 2)
        throw DataError(imagesPath + ": an image file has at least two dimensions (count and "
                                     "size), this one has " +
                        std::to_string(images.dims.size()));
    if (images.dims[0] != labels.dims[0])
        throw DataError(labelsPath + ": " + std::to_string(labels.dims[0]) +
                        " labels, but " + imagesPath + " holds " +
                        std::to_string(images.dims[0]) + " images");
    Dataset d;
    d.name = std::filesystem::path(imagesPath).filename().string();
    d.samples = images.dims[0];
    const std::int64_t n = images.size();
    // Checked before the float copy is made; also keeps the width within an int.
    if (n / d.samples > kMaxIdxFeatures)
        throw DataError(imagesPath + ": images of " + std::to_string(n / d.samples) +
                        " values each (dimensions " + dimsText(images.dims) +
                        " at byte 4) are wider than the " + std::to_string(kMaxIdxFeatures) +
                        " inputs a model can take");
    d.features = int(n / d.samples);
    d.x.resize(std::size_t(n));
    if (images.type == 0x08) { // MNIST and its kin: the common case, kept fast
        for (std::int64_t i = 0; i < n; ++i)
            d.x[std::size_t(i)] = float(images.data[std::size_t(i)]) / 255.0f;
    } else {
        const double scale = images.type == 0x09   ? 1.0 / 127.0
                             : images.type == 0x0B ? 1.0 / 32767.0
                             : images.type == 0x0C ? 1.0 / 2147483647.0
                                                   : 1.0;
        for (std::int64_t i = 0; i < n; ++i) {
            const double v = images.value(i) * scale;
            if (!std::isfinite(v) || std::abs(v) > double(std::numeric_limits<float>::max()))
                throw DataError(imagesPath + ": value " + std::to_string(images.value(i)) +
                                " at byte " + std::to_string(images.offsetOf(i)) + " (sample " +
                                std::to_string(i / d.features) +
                                ") is not a finite 32-bit float");
            d.x[std::size_t(i)] = float(v);
        }
    }
    d.labels.resize(std::size_t(d.samples));
    int maxLabel = 0;
    for (std::int64_t i = 0; i < d.samples; ++i) {
        const double l = labels.value(i);
        if (l < 0 || l > 65535)
            throw DataError(labelsPath + ": label " + std::to_string(std::int64_t(l)) +
                            " at byte " + std::to_string(labels.offsetOf(i)) + " (sample " +
                            std::to_string(i) + ") is not a class (expected 0 to 65535)");
        d.labels[std::size_t(i)] = std::int32_t(l);
        maxLabel = std::max(maxLabel, int(l));
    }
    d.outputs = maxLabel + 1;
    return d;
}

std::string fashionMnistDirectory() { return "/usr/share/datasets/fashion-mnist"; }

namespace {

std::shared_ptr<Dataset> loadFashion(const std::string &prefix, std::int64_t maxSamples)
{
    const std::string dir = fashionMnistDirectory();
    const std::string images = dir + "/" + prefix + "-images-idx3-ubyte.gz";
    const std::string labels = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
    if (!std::filesystem::exists(images) || !std::filesystem::exists(labels))
        throw DataError("data.source=fashion-mnist: " + images +
                        " is missing; install it with: apt-get install dataset-fashion-mnist");
    auto d = std::make_shared<Dataset>(loadIdxDataset(images, labels, maxSamples));
    d->name = "fashion-mnist/" + prefix;
    d->outputs = 10;
    return d;
}

} // namespace

namespace {

void checkFitsModel(const Dataset &d, const RunConfig &c)
{
    if (d.features != c.inputWidth())
        throw ConfigError("model.layers = " + nlohmann::json(c.layers).dump() + ": the data (" +
                              d.name + ") has " + std::to_string(d.features) +
                              " features per sample, so the first width must be " +
                              std::to_string(d.features),
                          {"model.layers"});
    if (d.classification) {
        std::int32_t maxLabel = 0;
        for (auto l : d.labels)
            maxLabel = std::max(maxLabel, l);
        if (maxLabel >= c.outputWidth())
            throw ConfigError("model.layers = " + nlohmann::json(c.layers).dump() + ": the data (" +
                                  d.name + ") has labels up to " + std::to_string(maxLabel) +
                                  ", so the last width must be at least " +
                                  std::to_string(maxLabel + 1),
                              {"model.layers"});
    }
}

} // namespace

void fitModelToData(RunConfig &c, const Dataset &train, const Dataset *eval)
{
    if (c.layersFromData) {
        int outputs = std::max(train.outputs, eval ? eval->outputs : 0);
        c.layers = {train.features, 256, std::max(outputs, 2)};
        c.layersFromData = false;
    }
    checkFitsModel(train, c);
    if (eval) {
        if (eval->features != train.features)
            throw DataError(eval->name + ": " + std::to_string(eval->features) +
                            " features per sample, but the training data (" + train.name +
                            ") has " + std::to_string(train.features));
        checkFitsModel(*eval, c);
    }
}

std::shared_ptr<const Dataset> loadTrainingData(const RunConfig &c)
{
    std::shared_ptr<Dataset> d;
    if (c.source == "blobs")
        d = makeBlobs(c.inputWidth(), c.outputWidth(), c.samples, c.seed, 10);
    else if (c.source == "spirals")
        d = makeSpirals(c.outputWidth(), c.samples, c.seed, 10);
    else if (c.source == "teacher")
        d = makeTeacher(c.inputWidth(), c.outputWidth(), c.samples, c.seed, 10);
    else if (c.source == "fashion-mnist")
        d = loadFashion("train", c.samples);
    else
        try {
            d = std::make_shared<Dataset>(loadIdxDataset(c.images, c.labels, c.samples));
        } catch (const DataError &e) { // which keys name the files, for a config's author
            throw DataError(std::string("data.images / data.labels: ") + e.what());
        }
    // Every step gathers its batch from random rows: on huge pages where the kernel has them.
    moveToHugePages(d->x);
    moveToHugePages(d->y);
    return d;
}

std::shared_ptr<const Dataset> loadEvalData(const RunConfig &c)
{
    if (c.evalSamples <= 0)
        return nullptr;
    std::shared_ptr<Dataset> d;
    if (c.source == "blobs")
        d = makeBlobs(c.inputWidth(), c.outputWidth(), c.evalSamples, c.seed, 20);
    else if (c.source == "spirals")
        d = makeSpirals(c.outputWidth(), c.evalSamples, c.seed, 20);
    else if (c.source == "teacher")
        d = makeTeacher(c.inputWidth(), c.outputWidth(), c.evalSamples, c.seed, 20);
    else if (c.source == "fashion-mnist")
        d = loadFashion("t10k", c.evalSamples);
    else if (!c.evalImagesPath.empty())
        d = std::make_shared<Dataset>(
            loadIdxDataset(c.evalImagesPath, c.evalLabelsPath, c.evalSamples));
    else
        return nullptr;
    return d;
}

BatchSampler::BatchSampler(std::int64_t samples, int workers, int batch, bool shuffle,
                           std::uint64_t seed)
    : m_samples(samples), m_workers(workers), m_batch(batch), m_shuffle(shuffle), m_seed(seed)
{
}

std::int64_t BatchSampler::sampleIndex(std::int64_t step, int worker, int row) const
{
    const std::int64_t position =
        (step * m_workers + worker) * std::int64_t(m_batch) + row;
    const std::int64_t epoch = position / m_samples;
    const std::int64_t within = position % m_samples;
    if (!m_shuffle)
        return within;
    const IndexPermutation perm(std::uint64_t(m_samples),
                                splitmix64(m_seed * 0x100000001b3ull + std::uint64_t(epoch)));
    return std::int64_t(perm(std::uint64_t(within)));
}

void gatherBatch(const Dataset &data, const BatchSampler &sampler, std::int64_t step, int worker,
                 int rows, float *x, std::int32_t *labels, float *y)
{
    const std::size_t f = std::size_t(data.features);
    const std::size_t o = std::size_t(data.outputs);
    for (int r = 0; r < rows; ++r) {
        const std::size_t i = std::size_t(sampler.sampleIndex(step, worker, r));
        std::memcpy(x + r * f, data.x.data() + i * f, f * sizeof(float));
        if (data.classification)
            labels[r] = data.labels[i];
        else
            std::memcpy(y + r * o, data.y.data() + i * o, o * sizeof(float));
    }
}

} // namespace syncopate
