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

// An IDX file's unsigned-byte payload and its dimensions.
struct IdxArray {
    std::vector<std::int64_t> dims;
    std::vector<std::uint8_t> data;
};

// Reads an IDX file, raw or gzip-compressed. maxItems > 0 reads only the first items along the
// first dimension. Throws DataError naming the path and the byte offset of the problem.
IdxArray readIdx(const std::string &path, std::int64_t maxItems = 0);

// Images scaled to [0, 1] as byte / 255 and flattened row-major; labels as classes.
Dataset loadIdxDataset(const std::string &imagesPath, const std::string &labelsPath,
                       std::int64_t maxSamples = 0);

// Where Debian's dataset-fashion-mnist package puts its files.
std::string fashionMnistDirectory();

// The training set a config asks for. Throws DataError / ConfigError.
std::shared_ptr<const Dataset> loadTrainingData(const RunConfig &config);
// Held-out data: the t10k files for Fashion-MNIST, eval.images/labels for idx (null when not
// given), a separate seeded draw from the same distribution for synthetic sources.
std::shared_ptr<const Dataset> loadEvalData(const RunConfig &config);

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
