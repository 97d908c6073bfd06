// The files of a run directory: config.json, trace.json (Chrome Trace Event Format), metrics.csv,
// summary.json and the parameters before and after training as safetensors.
#pragma once

#include "config.h"
#include "metrics.h"
#include "trace.h"

#include <map>
#include <string>
#include <vector>

namespace syncopate {

struct Tensor {
    std::vector<std::int64_t> shape;
    std::vector<float> data;
};

// Writes tensors "layers.{i}.weight" [out, in] and "layers.{i}.bias" [out] (nn.Linear's layout)
// from a flat parameter buffer.
void writeSafetensors(const std::string &path, const std::vector<int> &layers,
                      const std::vector<float> &params);
// Reads F32 tensors; throws DataError naming the file and what is wrong.
std::map<std::string, Tensor> readSafetensors(const std::string &path);

void writeTraceJson(const std::string &path, const RunConfig &config,
                    const std::vector<Record> &records);
// Reads a trace written by writeTraceJson back into records (Open Run). Throws DataError.
std::vector<Record> readTraceJson(const std::string &path);
void writeMetricsCsv(const std::string &path, const std::vector<StepRow> &rows);

struct RunArtifacts {
    RunConfig config;
    std::vector<Record> records;
    RunMetrics metrics;
    std::vector<float> initialParams;
    std::vector<float> finalParams;
};

// Creates dir if needed and writes every file; throws std::runtime_error naming the file.
void writeRunDirectory(const std::string &dir, const RunArtifacts &run);
// config.json, trace.json and summary.json of a run directory (parameters are not loaded).
RunArtifacts readRunDirectory(const std::string &dir);

} // namespace syncopate
