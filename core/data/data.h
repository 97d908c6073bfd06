// Training data: synthetic sources generated from the seed and IDX files (the MNIST format),
// held as one row-major float matrix plus labels (classification) or targets (regression).
#pragma once

#include "config.h"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace syncopate {

// A data file that cannot be used: the message names the file and what was wrong where.
class DataError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct Dataset {
    std::string name;
    int features = 0;
    int outputs = 0; // classes, or target width for regression
    bool classification = true;
    std::int64_t samples = 0;
    std::vector<float> x;             // samples * features
    std::vector<std::int32_t> labels; // samples (classification)
    std::vector<float> y;             // samples * outputs (regression)
};

// An IDX file's payload as stored (big-endian elements of one type) and its dimensions.
struct IdxArray {
    std::vector<std::int64_t> dims;
    std::uint32_t type = 0x08;      // 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64
    int elementBytes = 1;
    std::uint64_t dataOffset = 0;   // byte of the first element in the (uncompressed) file
    std::vector<std::uint8_t> data; // elementBytes per element

    std::int64_t size() const { return std::int64_t(data.size()) / elementBytes; }
    bool integral() const { return type < 0x0D; }
    double value(std::int64_t i) const; // element i, decoded
    std::uint64_t offsetOf(std::int64_t i) const { return dataOffset + std::uint64_t(i) * elementBytes; }
    const char *typeName() const;
};

// The most payload readIdx reads (after a maxItems prefix): 1 GiB, four times that as floats.
// EMNIST, the largest IDX set in use, holds 0.7 GB.
constexpr std::uint64_t kMaxIdxBytes = std::uint64_t(1) << 30;
// Values per sample an IDX image file may have: the widest layer model.layers allows.
constexpr std::int64_t kMaxIdxFeatures = 65536;

// Reads an IDX file, raw or gzip-compressed, of any IDX element type. maxItems > 0 reads only
// the first items along the first dimension; otherwise bytes after the data the header
// describes are an error. Throws DataError naming the path and the byte offset of the problem.
// The size the header claims is checked against maxBytes and what the file can hold (its size,
// or 1032 times it for gzip, deflate's largest ratio) before anything is allocated, and gzip
// data is read in pieces, so a lying header costs neither memory nor time.
IdxArray readIdx(const std::string &path, std::int64_t maxItems = 0,
                 std::uint64_t maxBytes = kMaxIdxBytes);

// Images flattened row-major, as floats: integer types divided by the largest value of their
// type (unsigned bytes: / 255, MNIST's convention), floating types as stored (NaN and infinity
// rejected). Labels: an integer type, values 0 to 65535, one class each.
Dataset loadIdxDataset(const std::string &imagesPath, const std::string &labelsPath,
                       std::int64_t maxSamples = 0);

// Where Debian's dataset-fashion-mnist package puts its files.
std::string fashionMnistDirectory();

// The training set a config asks for. Throws DataError.
std::shared_ptr<const Dataset> loadTrainingData(const RunConfig &config);
// Held-out data: the t10k files for Fashion-MNIST, eval.images/labels for idx (null when not
// given), a separate seeded draw from the same distribution for synthetic sources.
std::shared_ptr<const Dataset> loadEvalData(const RunConfig &config);
// Widths the config left to the data (config.layersFromData) are taken from it: input = the
// features per sample, a hidden layer of 256, output = the classes seen in either set. Then
// the model must fit both sets: ConfigError on model.layers otherwise, DataError when the
// held-out samples differ in size from the training samples.
void fitModelToData(RunConfig &config, const Dataset &train, const Dataset *eval);

// The samples of step t: the global batch of workers * batch samples is what one worker with
// that batch would take at step t; worker w gets rows [w * batch, (w + 1) * batch) of it. With
// shuffle on, each epoch visits the samples in a new seeded order.
class BatchSampler {
public:
    BatchSampler(std::int64_t samples, int workers, int batch, bool shuffle, std::uint64_t seed);
    std::int64_t sampleIndex(std::int64_t step, int worker, int row) const;

private:
    std::int64_t m_samples;
    int m_workers;
    int m_batch;
    bool m_shuffle;
    std::uint64_t m_seed;
};

// Copies rows of a dataset into a batch (no allocation: the buffers are sized by the caller).
void gatherBatch(const Dataset &data, const BatchSampler &sampler, std::int64_t step, int worker,
                 int rows, float *x, std::int32_t *labels, float *y);

} // namespace syncopate
