// Parameters as safetensors files (PyTorch's nn.Linear layout), readable by torch and numpy.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace syncopate {

struct Tensor {
    std::vector<std::int64_t> shape;
    std::vector<float> data;
};

// Writes tensors "layers.{i}.weight" [out, in] and "layers.{i}.bias" [out] (nn.Linear's layout)
// from a flat parameter buffer. With batchNorm, hidden layer i also has "norms.{i}.weight" and
// "norms.{i}.bias" (BatchNorm1d's scale and shift, after the layer's bias in params) and, from
// runningStats where given (ModelSpec::runningMeanOffset's layout), "norms.{i}.running_mean"
// and "norms.{i}.running_var".
void writeSafetensors(const std::string &path, const std::vector<int> &layers,
                      const std::vector<float> &params, bool batchNorm = false,
                      const std::vector<float> *runningStats = nullptr);
// The header length a file may state (the format's own reference reader allows 100 MB).
constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Reads F32 tensors; throws DataError naming the file, the tensor and what is wrong. Sizes and
// offsets are checked against the file before anything is allocated: the header length against
// the limit and the file, each shape against its data_offsets (4 bytes per element), every
// range against the data section, and ranges may not overlap, so the tensors read never add up
// to more than the file holds.
std::map<std::string, Tensor> readSafetensors(const std::string &path);

} // namespace syncopate
