// A run's configuration: one table of keys (type, default, allowed values, meaning) drives
// parsing, validation, the resolved config.json, the CLI's --set and the GUI's tooltips.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace syncopate {

// Every message names the key, the bad value and what is allowed; several errors are joined
// by newlines, and fields() lists the keys at fault (the GUI marks them).
class ConfigError : public std::runtime_error {
public:
    ConfigError(const std::string &message, std::vector<std::string> fields)
        : std::runtime_error(message), m_fields(std::move(fields)) {}
    const std::vector<std::string> &fields() const { return m_fields; }

private:
    std::vector<std::string> m_fields;
};

enum class KeyType { Int, Number, Bool, String, Enum, IntArray, NumberArray };

struct ConfigKey {
    const char *name;       // dotted, e.g. "train.lr"
    KeyType type;
    const char *defaultJson; // "null" where the default depends on other keys
    double min;
    double max;
    std::vector<const char *> allowed; // for Enum
    const char *help;        // one or two sentences, shown as tooltips and in --help
};

const std::vector<ConfigKey> &configKeys();
const ConfigKey *findConfigKey(const std::string &name);

struct RunConfig {
    std::string mode = "sync"; // sync | async | checkpointed
    int workers = 4;
    std::string device = "cpu"; // "cpu", "cuda" or "cuda:0,2"
    bool tf32 = false;
    int threadsPerWorker = 0; // CPU: OpenMP threads per worker; 0 = free cores / workers

    std::vector<int> layers; // widths, input first
    // model.layers left out for IDX files: layers holds a placeholder until fitModelToData()
    // reads the widths off the files.
    bool layersFromData = false;
    std::string activation = "relu";
    bool checkpoint = false;
    int checkpointEvery = 0; // resolved: >= 1 when checkpoint is on
    std::string batchnorm = "none"; // none | local | sync

    std::string source = "blobs";
    std::string images;
    std::string labels;
    std::int64_t samples = 0; // resolved: > 0
    bool shuffle = true;
    int prefetch = 1;     // batches assembled ahead; 0 = off
    double costUs = 0;    // extra preparation work per sample, microseconds

    int steps = 300;
    int batch = 32;
    std::string optimizer = "sgd";
    double lr = 0.1;
    double momentum = 0.9;
    std::uint64_t seed = 1;

    std::string allreduce = "auto"; // sync over MPI ranks: auto | ordered | mpi | nccl
    int backupWorkers = 0;             // sync: gradients dropped per step (the last to arrive)
    int workersPerRank = 1;            // MPI: worker threads of each rank
    double commTimeoutS = 10;          // MPI: a rank silent this long is lost
    int maxStaleness = -1;
    bool stalenessLr = false;

    std::vector<double> slowdown; // resolved: one per worker
    double jitter = 0.0;

    int evalEvery = 0;
    int evalSamples = 1000;
    std::string evalImagesPath;
    std::string evalLabelsPath;

    bool async() const { return mode == "async"; }
    bool classification() const { return source != "teacher"; }
    int inputWidth() const { return layers.front(); }
    int outputWidth() const { return layers.back(); }
    // Samples one completed step stands for: every counted worker's batch in sync (backup
    // workers' dropped gradients are not), one batch per server update in async.
    std::int64_t samplesPerStep() const
    {
        return std::int64_t(batch) * (async() ? 1 : workers - backupWorkers);
    }

    // Every key with its resolved value, nested by section (what config.json holds).
    nlohmann::json toJson() const;
};

// Dotted or nested keys in, a validated and resolved RunConfig out. Throws ConfigError.
RunConfig parseConfig(const nlohmann::json &input);

// Applies "key=value" (value parsed as JSON when it parses, else taken as a string) to a
// flat map of dotted keys. Throws ConfigError for a malformed assignment.
void applyAssignment(nlohmann::json &flat, const std::string &assignment);

// Nested objects to dotted keys: {"train":{"lr":1}} -> {"train.lr":1}.
nlohmann::json flattenConfig(const nlohmann::json &input);

// A config read from a file names its data files (data.images, data.labels, eval.images,
// eval.labels) as its author saw them: a relative path that is not there from the working
// folder but is beside the config file is made that file's (a config shipped with its data
// opens from anywhere). `flat` holds dotted keys.
void resolveDataPaths(nlohmann::json &flat, const std::string &configPath);

// Limits on JSON that comes from files (configs, presets, summary.json). nlohmann recurses on
// copy, dump and comparison (and flattenConfig on sections), so nesting is bounded before any
// of that can overflow the stack; these files nest a few levels and hold a few kilobytes.
constexpr int kMaxJsonDepth = 64;
constexpr std::uint64_t kMaxJsonFileBytes = std::uint64_t(16) << 20;

// Parses JSON text (comments allowed). source names the text in messages; firstByte is the
// offset of text in its file. Throws ConfigError naming source and the byte offset for nesting
// deeper than kMaxJsonDepth, a number beyond the range of a double or a syntax error.
nlohmann::json parseJsonText(std::string_view text, const std::string &source,
                             std::uint64_t firstByte = 0);

// Reads a JSON file of at most maxBytes with parseJsonText (ConfigError naming the file).
nlohmann::json readJsonFile(const std::string &path, std::uint64_t maxBytes = kMaxJsonFileBytes);

// The closest of candidates to word, or "" when none is close.
std::string closestMatch(const std::string &word, const std::vector<std::string> &candidates);

} // namespace syncopate
