#include "config.h"

#include "device.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <clocale>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <locale.h>
#include <sstream>

namespace syncopate {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Paths and device specs fit in this; longer strings come from broken or hostile files (and
// parseDeviceSpec is quadratic in the number of GPUs listed).
constexpr std::size_t kMaxStringLength = 4096;
// A section path longer than this is no config key, so flattening stops descending there.
constexpr std::size_t kMaxKeyLength = 256;
// Model and data sizes a config may ask for: beyond these a colleague's file would make the run
// allocate tens of gigabytes (or throw bad_alloc) before the first step.
constexpr std::size_t kMaxLayers = 1024;
constexpr std::uint64_t kMaxReplicaParameters = std::uint64_t(1) << 31; // workers x parameters
constexpr std::uint64_t kMaxGeneratedFloats = std::uint64_t(1) << 30;   // 4 GiB of samples
constexpr std::size_t kMaxReportedErrors = 20;

// A value as messages show it: cut short (an array of a million elements stays one line), with
// invalid UTF-8 replaced instead of thrown, and infinity named (dump() writes it as null).
std::string shortDump(const nlohmann::json &v)
{
    if (v.is_number_float() && !std::isfinite(v.get<double>()))
        return std::isnan(v.get<double>()) ? "NaN" : v.get<double>() > 0 ? "infinity" : "-infinity";
    std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (s.size() > 120)
        s = s.substr(0, 100) + "... (" + std::to_string(s.size()) + " characters)";
    return s;
}

std::string shortKey(const std::string &key)
{
    return key.size() > 120 ? key.substr(0, 100) + "... (" + std::to_string(key.size()) + " characters)"
                            : key;
}

std::string typeDescription(const ConfigKey &k)
{
    switch (k.type) {
    case KeyType::Int: return "an integer";
    case KeyType::Number: return "a number";
    case KeyType::Bool: return "true or false";
    case KeyType::String: return "a string";
    case KeyType::Enum: {
        std::string s = "one of ";
        for (std::size_t i = 0; i < k.allowed.size(); ++i)
            s += (i ? ", " : "") + std::string(k.allowed[i]);
        return s;
    }
    case KeyType::IntArray: return "an array of integers";
    case KeyType::NumberArray: return "an array of numbers";
    }
    return "?";
}

std::string formatNumber(double v)
{
    std::ostringstream s;
    s.precision(12);
    s << v;
    return s.str();
}

std::string rangeDescription(const ConfigKey &k)
{
    if (k.min > -kInf && k.max < kInf)
        return "between " + formatNumber(k.min) + " and " + formatNumber(k.max);
    if (k.min > -kInf)
        return "at least " + formatNumber(k.min);
    if (k.max < kInf)
        return "at most " + formatNumber(k.max);
    return {};
}

std::size_t editDistance(const std::string &a, const std::string &b)
{
    std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j)
        prev[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j)
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1,
                               prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

class Errors {
public:
    void add(const std::string &key, const std::string &message)
    {
        m_messages.push_back(message);
        if (std::find(m_fields.begin(), m_fields.end(), key) == m_fields.end())
            m_fields.push_back(key);
    }
    bool empty() const { return m_messages.empty(); }
    [[noreturn]] void raise() const
    {
        std::string all;
        for (std::size_t i = 0; i < m_messages.size() && i < kMaxReportedErrors; ++i)
            all += (all.empty() ? "" : "\n") + m_messages[i];
        if (m_messages.size() > kMaxReportedErrors)
            all += "\n(and " + std::to_string(m_messages.size() - kMaxReportedErrors) + " more)";
        throw ConfigError(all, m_fields);
    }

private:
    std::vector<std::string> m_messages;
    std::vector<std::string> m_fields;
};

// Checks one value against its key; on success returns true.
bool checkValue(const ConfigKey &k, const nlohmann::json &v, Errors &errors)
{
    const std::string name = k.name;
    auto fail = [&](const std::string &why) {
        errors.add(name, name + " = " + shortDump(v) + ": " + why);
        return false;
    };
    auto inRange = [&](double x) {
        if (!std::isfinite(x) || x < k.min || x > k.max)
            return fail("expected " + typeDescription(k) + " " + rangeDescription(k));
        return true;
    };
    const bool nullable = std::string_view(k.defaultJson) == "null";
    if (v.is_null()) {
        if (nullable)
            return true;
        return fail("expected " + typeDescription(k));
    }
    switch (k.type) {
    case KeyType::Int:
        if (!v.is_number_integer() &&
            !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
            return fail("expected an integer " + rangeDescription(k));
        return inRange(v.get<double>());
    case KeyType::Number:
        if (!v.is_number())
            return fail("expected a number " + rangeDescription(k));
        return inRange(v.get<double>());
    case KeyType::Bool:
        if (!v.is_boolean())
            return fail("expected true or false");
        return true;
    case KeyType::String:
        if (!v.is_string())
            return fail("expected a string");
        if (v.get_ref<const std::string &>().size() > kMaxStringLength)
            return fail("expected a string of at most " + std::to_string(kMaxStringLength) +
                        " characters");
        // Parsed JSON is valid UTF-8, but a --set value is taken as it comes; the run's
        // config.json could not be written with it (dump() throws).
        try {
            (void)v.dump();
        } catch (const nlohmann::json::type_error &) {
            return fail("expected UTF-8 text");
        }
        return true;
    case KeyType::Enum: {
        if (!v.is_string())
            return fail("expected " + typeDescription(k));
        const auto s = v.get<std::string>();
        std::vector<std::string> allowed(k.allowed.begin(), k.allowed.end());
        if (std::find(allowed.begin(), allowed.end(), s) != allowed.end())
            return true;
        const auto guess = closestMatch(s, allowed);
        return fail("expected " + typeDescription(k) +
                    (guess.empty() ? "" : " (did you mean \"" + guess + "\"?)"));
    }
    case KeyType::IntArray:
    case KeyType::NumberArray: {
        if (!v.is_array())
            return fail("expected " + typeDescription(k));
        for (const auto &e : v) {
            const bool ok = k.type == KeyType::IntArray
                                ? (e.is_number_integer() ||
                                   (e.is_number_float() &&
                                    std::floor(e.get<double>()) == e.get<double>()))
                                : e.is_number();
            if (!ok)
                return fail("expected " + typeDescription(k) + ", found " + shortDump(e));
            const double x = e.get<double>();
            if (!std::isfinite(x) || x < k.min || x > k.max)
                return fail("every element must be " + rangeDescription(k) + ", found " +
                            shortDump(e));
        }
        return true;
    }
    }
    return true;
}

std::vector<std::string> keyNames()
{
    std::vector<std::string> names;
    for (const auto &k : configKeys())
        names.emplace_back(k.name);
    return names;
}

void flattenInto(const nlohmann::json &node, const std::string &prefix, nlohmann::json &out)
{
    for (auto it = node.begin(); it != node.end(); ++it) {
        const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
        // Descend only into sections; an object given for a leaf key is reported as a bad value.
        if (it->is_object() && !findConfigKey(key) && key.size() <= kMaxKeyLength)
            flattenInto(*it, key, out);
        else
            out[key] = *it;
    }
}

std::vector<int> defaultLayers(const std::string &source)
{
    if (source == "spirals")
        return {2, 64, 64, 3};
    if (source == "teacher")
        return {16, 128, 128, 4};
    if (source == "idx" || source == "fashion-mnist")
        return {784, 256, 10};
    return {32, 256, 256, 10};
}

double defaultLr(const std::string &optimizer)
{
    if (optimizer == "adam")
        return 1e-3; // torch.optim.Adam's default
    if (optimizer == "momentum")
        return 0.05;
    return 0.1;
}

struct JsonProblem {
    std::size_t offset = 0;
    std::string what; // empty: none
};

bool isNumberChar(char c) { return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'; }

// One pass over the text before nlohmann builds anything: its parser is iterative, but copying,
// dumping and flattening the result recurse, so depth is bounded here, where the byte offset is
// known. Brackets inside strings and comments do not count. Numbers that overflow a double are
// caught here too, with their offset (nlohmann would reject them without one).
JsonProblem scanJson(std::string_view t, bool comments)
{
    // strtod_l in the C locale: a GUI's locale may use a decimal comma.
    static const locale_t cLocale = newlocale(LC_ALL_MASK, "C", locale_t(nullptr));
    int depth = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
        const char c = t[i];
        if (c == '"') {
            for (++i; i < t.size() && t[i] != '"'; ++i)
                if (t[i] == '\\')
                    ++i;
        } else if (comments && c == '/' && i + 1 < t.size() && (t[i + 1] == '/' || t[i + 1] == '*')) {
            const bool line = t[i + 1] == '/';
            const auto end = t.find(line ? "\n" : "*/", i + 2);
            i = end == std::string_view::npos ? t.size() : end + (line ? 0 : 1);
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxJsonDepth)
                return {i, "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
        } else if (c == ']' || c == '}') {
            depth -= depth > 0 ? 1 : 0;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            std::size_t j = i;
            while (j < t.size() && isNumberChar(t[j]))
                ++j;
            const std::string token(t.substr(i, j - i));
            if (std::isinf(strtod_l(token.c_str(), nullptr, cLocale)))
                return {i, "number " + shortKey(token) + " is beyond the range of a double"};
            i = j - 1;
        }
    }
    return {};
}

} // namespace

const std::vector<ConfigKey> &configKeys()
{
    static const std::vector<ConfigKey> keys = {
        {"mode", KeyType::Enum, "\"sync\"", -kInf, kInf, {"sync", "async", "checkpointed"},
         "How workers combine gradients. sync: every step waits at a barrier and averages all "
         "gradients. async: workers push to a parameter server without waiting, so gradients "
         "can be stale. checkpointed: sync with gradient checkpointing."},
        {"workers", KeyType::Int, "4", 1, 256, {},
         "Number of workers, each a thread with its own model replica."},
        {"device", KeyType::String, "\"cpu\"", -kInf, kInf, {},
         "Where workers compute: cpu (oneDNN and oneTBB), cuda (every GPU, workers spread "
         "round-robin, several per GPU allowed) or cuda:0,2 (the GPUs listed)."},
        {"device.tf32", KeyType::Bool, "false", -kInf, kInf, {},
         "On a GPU, run GEMMs on TF32 tensor cores: several times faster on Ampere and newer, "
         "with inputs rounded to a 10-bit mantissa (losses agree with FP32 to about 1e-3)."},
        {"device.threads_per_worker", KeyType::Int, "0", 0, 1024, {},
         "On the CPU, the OpenMP threads each worker's matmuls run on; 0 = the cores this "
         "process may use divided by the workers, at least 1 (more than that oversubscribes "
         "the machine)."},
        {"model.layers", KeyType::IntArray, "null", 1, 65536, {},
         "Layer widths of the MLP, input first, output last. Left out: a size that suits the "
         "data source (for idx files: their pixels per image, 256, their number of classes)."},
        {"model.activation", KeyType::Enum, "\"relu\"", -kInf, kInf, {"relu", "tanh", "gelu"},
         "Activation of the hidden layers."},
        {"model.checkpoint", KeyType::Bool, "false", -kInf, kInf, {},
         "Gradient checkpointing: keep activations only at segment boundaries and recompute "
         "each segment during the backward pass (less memory, more compute)."},
        {"model.checkpoint_every", KeyType::Int, "0", 0, 65536, {},
         "Layers per checkpointed segment; 0 picks ceil(sqrt(number of layers))."},
        {"model.batchnorm", KeyType::Enum, "\"none\"", -kInf, kInf, {"none", "local", "sync"},
         "Batch normalisation after each hidden linear layer (as torch.nn.BatchNorm1d, before "
         "the activation). local: each worker normalises by its own shard's statistics; sync: "
         "the shards' statistics are all-reduced across workers (SyncBatchNorm), so N workers "
         "x batch B normalise exactly as one worker with batch N x B."},
        {"data.source", KeyType::Enum, "\"blobs\"", -kInf, kInf,
         {"blobs", "spirals", "teacher", "idx", "fashion-mnist"},
         "blobs: Gaussian clusters; spirals: interleaved 2-D spirals; teacher: regression on a "
         "random teacher network; idx: MNIST-format files (data.images, data.labels); "
         "fashion-mnist: Debian's dataset-fashion-mnist package."},
        {"data.images", KeyType::String, "\"\"", -kInf, kInf, {},
         "IDX image file (raw or .gz) for data.source=idx: any IDX type; integers are divided "
         "by their type's largest value (bytes: / 255), floats used as stored."},
        {"data.labels", KeyType::String, "\"\"", -kInf, kInf, {},
         "IDX label file (raw or .gz) for data.source=idx: one integer class (0 to 65535) per "
         "image."},
        {"data.samples", KeyType::Int, "0", 0, 1e9, {},
         "Training samples: how many to generate, or the first N of a file; 0 = 8192 generated "
         "or the whole file."},
        {"data.shuffle", KeyType::Bool, "true", -kInf, kInf, {},
         "Visit the samples in a new seeded order each epoch; off: file order, wrapping at the "
         "end."},
        {"data.prefetch", KeyType::Int, "1", 0, 64, {},
         "Batches assembled ahead in the background while the current one computes (a buffer "
         "depth, as tf.data's prefetch); 0 = off, each step assembles its own batch first. "
         "true and false of older configurations read as 1 and 0."},
        {"data.cost_us", KeyType::Number, "0", 0, 1e6, {},
         "Extra preparation work per sample in microseconds (CPU time spent as a decoder or "
         "augmentation would), to make an input-bound run: with prefetch it overlaps compute, "
         "and a step that finds its batch not ready waits (the \"input wait\" phase)."},
        {"train.steps", KeyType::Int, "300", 1, 1e8, {},
         "Optimizer steps (in async mode: updates applied by the server)."},
        {"train.batch", KeyType::Int, "32", 1, 1e6, {}, "Samples per worker per step."},
        {"train.optimizer", KeyType::Enum, "\"sgd\"", -kInf, kInf, {"sgd", "momentum", "adam"},
         "Update rule, as torch.optim defines it."},
        {"train.lr", KeyType::Number, "null", 1e-12, 1e6, {},
         "Learning rate; left out: 0.1 for sgd, 0.05 for momentum, 0.001 for adam."},
        {"train.momentum", KeyType::Number, "0.9", 0, 0.999999, {},
         "Momentum factor of the momentum optimizer."},
        {"train.seed", KeyType::Int, "1", 0, 9.007199254740991e15, {},
         "Seed of data generation, shuffling, initial parameters and jitter."},
        {"sync.allreduce", KeyType::Enum, "\"auto\"", -kInf, kInf, {"auto", "ordered", "mpi", "nccl"},
         "Over MPI ranks, how sync averages the gradients. ordered: every rank sends each "
         "worker's gradient slices to the slice's owner, which sums them in worker order "
         "(bit for bit the result of the same workers as threads of one process); mpi: "
         "MPI_Allreduce of each rank's sum (its own algorithm and order, equal to about 1e-6); "
         "nccl: NCCL between the workers' GPUs, its communicator set up over MPI (every worker "
         "on a GPU of its own); auto: nccl where every worker has a GPU of its own and NCCL "
         "loads on every rank, ordered otherwise."},
        {"sync.backup_workers", KeyType::Int, "0", 0, 255, {},
         "Backup workers b (Chen et al. 2016): each step applies the mean of the first "
         "workers - b gradients to arrive and drops the rest, so the b slowest stall nobody. "
         "0 <= b < workers; threads of one process on the CPU or one GPU. The step's batch "
         "shrinks to (workers - b) x train.batch, and which gradients count depends on timing."},
        {"mpi.workers_per_rank", KeyType::Int, "1", 1, 256, {},
         "Under mpirun: worker threads per rank. The run's workers are then ranks times this "
         "(the workers key is ignored)."},
        {"mpi.timeout_s", KeyType::Number, "10", 0.5, 3600, {},
         "Under mpirun: a rank that has not been heard of for this long (killed, hung, cut "
         "off) ends the run with an error naming it."},
        {"async.max_staleness", KeyType::Int, "-1", -1, 1e6, {},
         "Stale-synchronous bound s: no worker starts a step more than s steps ahead of the "
         "slowest; -1 = unbounded, 0 = every worker waits for all others. It bounds running "
         "ahead, not staleness: with N workers an update can be up to (2s + 1)(N - 1) versions old "
         "(while a worker computes a step, each other one may go from s steps behind it to s + 1 ahead)."},
        {"async.staleness_lr", KeyType::Bool, "false", -kInf, kInf, {},
         "Scale each update's learning rate by 1 / max(1, staleness)."},
        {"workers_slowdown", KeyType::NumberArray, "[]", 1, 1000, {},
         "One factor per worker (1 = normal, 3 = three times slower), realised as a visible "
         "delay after compute; empty = all 1."},
        {"jitter", KeyType::Number, "0", 0, 100, {},
         "Random extra delay per step, as a fraction of the step's compute time (seeded)."},
        {"eval.every", KeyType::Int, "0", 0, 1e8, {},
         "Evaluate on held-out data every N steps (0 = only at the end when eval.samples > 0). In sync mode every worker evaluates its share of the held-out samples; in async mode the evaluator thread scores a snapshot of the server's parameters taken at every Nth update, while training goes on (a snapshot that waits while a newer one comes is skipped: summary.json's evals_skipped)."},
        {"eval.samples", KeyType::Int, "1000", 0, 1e7, {},
         "Held-out samples per evaluation (0 = no evaluation)."},
        {"eval.images", KeyType::String, "\"\"", -kInf, kInf, {},
         "IDX image file of held-out data for data.source=idx (default: none)."},
        {"eval.labels", KeyType::String, "\"\"", -kInf, kInf, {},
         "IDX label file of held-out data for data.source=idx."},
    };
    return keys;
}

const ConfigKey *findConfigKey(const std::string &name)
{
    for (const auto &k : configKeys())
        if (name == k.name)
            return &k;
    return nullptr;
}

std::string closestMatch(const std::string &word, const std::vector<std::string> &candidates)
{
    std::string best;
    std::size_t bestDistance = std::numeric_limits<std::size_t>::max();
    const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
    auto gap = [](std::size_t a, std::size_t b) { return a > b ? a - b : b - a; };
    for (const auto &c : candidates) {
        // The distance is at least the difference in length: skipping hopeless candidates keeps
        // a megabyte-long unknown key from costing seconds of quadratic work.
        const auto dot = c.rfind('.');
        const std::size_t suffix = dot == std::string::npos ? c.size() : c.size() - dot - 1;
        if (gap(word.size(), c.size()) > limit && gap(word.size(), suffix) + 1 > limit)
            continue;
        std::size_t d = editDistance(word, c);
        // A key written without its section ("lr" for "train.lr") is a near miss too.
        if (dot != std::string::npos)
            d = std::min(d, editDistance(word, c.substr(dot + 1)) + 1);
        if (d < bestDistance) {
            bestDistance = d;
            best = c;
        }
    }
    return bestDistance <= limit ? best : std::string();
}

void resolveDataPaths(nlohmann::json &flat, const std::string &configPath)
{
    namespace fs = std::filesystem;
    const fs::path beside = fs::path(configPath).parent_path();
    for (const char *key : {"data.images", "data.labels", "eval.images", "eval.labels"}) {
        const auto it = flat.find(key);
        if (it == flat.end() || !it->is_string() || it->get<std::string>().empty())
            continue;
        const fs::path p(it->get<std::string>());
        std::error_code ec;
        if (p.is_absolute() || fs::exists(p, ec) || beside.empty())
            continue;
        if (fs::exists(beside / p, ec))
            *it = (beside / p).lexically_normal().string();
    }
}

nlohmann::json flattenConfig(const nlohmann::json &input)
{
    nlohmann::json out = nlohmann::json::object();
    if (!input.is_object())
        throw ConfigError("the configuration must be a JSON object, found " +
                              std::string(input.type_name()),
                          {});
    flattenInto(input, "", out);
    return out;
}

void applyAssignment(nlohmann::json &flat, const std::string &assignment)
{
    const auto eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0)
        throw ConfigError("--set \"" + shortKey(assignment) +
                              "\": expected KEY=VALUE, e.g. train.lr=0.05",
                          {});
    const std::string key = assignment.substr(0, eq);
    const std::string text = assignment.substr(eq + 1);
    // Too deep to be a config value: kept as the string it is, like any other non-JSON value.
    nlohmann::json value = scanJson(text, false).what.empty()
                               ? nlohmann::json::parse(text, nullptr, false)
                               : nlohmann::json(nlohmann::json::value_t::discarded);
    if (value.is_discarded())
        value = text;
    flat[key] = value;
}

nlohmann::json parseJsonText(std::string_view text, const std::string &source,
                             std::uint64_t firstByte)
{
    const JsonProblem problem = scanJson(text, true);
    if (!problem.what.empty()) {
        std::string where = " at byte " + std::to_string(firstByte + problem.offset);
        if (firstByte == 0)
            where += " (line " +
                     std::to_string(1 + std::count(text.begin(), text.begin() + std::ptrdiff_t(problem.offset), '\n')) +
                     ")";
        throw ConfigError(source + ": " + problem.what + where, {});
    }
    try {
        return nlohmann::json::parse(text.begin(), text.end(), nullptr, true,
                                     /*ignore_comments=*/true);
    } catch (const nlohmann::json::parse_error &e) {
        const std::uint64_t at = firstByte + (e.byte > 0 ? e.byte - 1 : 0);
        throw ConfigError(source + ": not valid JSON at byte " + std::to_string(at) + " (" +
                              e.what() + ")",
                          {});
    } catch (const nlohmann::json::exception &e) {
        throw ConfigError(source + ": not valid JSON (" + std::string(e.what()) + ")", {});
    }
}

nlohmann::json readJsonFile(const std::string &path, std::uint64_t maxBytes)
{
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw ConfigError(path + ": cannot open the file (it is a directory)", {});
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw ConfigError(path + ": cannot open the file", {});
    // Read in pieces against the limit rather than trusting file_size: pipes have none.
    std::string text;
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec && size <= maxBytes)
        text.reserve(std::size_t(size));
    char buffer[1 << 16];
    while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
        if (text.size() + std::size_t(in.gcount()) > maxBytes)
            throw ConfigError(path + ": more than " + std::to_string(maxBytes) +
                                  " bytes, the limit for a JSON file here",
                              {});
        text.append(buffer, std::size_t(in.gcount()));
    }
    return parseJsonText(text, path);
}

RunConfig parseConfig(const nlohmann::json &input)
{
    nlohmann::json flat = flattenConfig(input);
    Errors errors;
    nlohmann::json v = nlohmann::json::object();
    for (const auto &k : configKeys())
        v[k.name] = nlohmann::json::parse(k.defaultJson);

    const auto names = keyNames();
    for (auto it = flat.begin(); it != flat.end(); ++it) {
        const ConfigKey *key = findConfigKey(it.key());
        if (it.key() == "data.prefetch" && it->is_boolean()) // a switch before it was a depth
            *it = it->get<bool>() ? 1 : 0;
        if (!key) {
            const auto guess = closestMatch(it.key(), names);
            errors.add(it.key(), "unknown key \"" + shortKey(it.key()) + "\"" +
                                     (guess.empty() ? "" : " (did you mean \"" + guess + "\"?)"));
            continue;
        }
        if (checkValue(*key, *it, errors) && !it->is_null())
            v[it.key()] = *it;
    }
    if (!errors.empty())
        errors.raise();

    RunConfig c;
    c.mode = v["mode"];
    c.workers = v["workers"];
    c.device = v["device"];
    c.tf32 = v["device.tf32"];
    c.threadsPerWorker = v["device.threads_per_worker"];
    c.activation = v["model.activation"];
    c.checkpoint = v["model.checkpoint"].get<bool>() || c.mode == "checkpointed";
    c.checkpointEvery = v["model.checkpoint_every"];
    c.batchnorm = v["model.batchnorm"];
    c.source = v["data.source"];
    c.images = v["data.images"];
    c.labels = v["data.labels"];
    c.samples = v["data.samples"];
    c.shuffle = v["data.shuffle"];
    c.prefetch = v["data.prefetch"];
    c.costUs = v["data.cost_us"];
    c.steps = v["train.steps"];
    c.batch = v["train.batch"];
    c.optimizer = v["train.optimizer"];
    c.lr = v["train.lr"].is_null() ? defaultLr(c.optimizer) : v["train.lr"].get<double>();
    c.momentum = v["train.momentum"];
    c.seed = v["train.seed"].get<std::uint64_t>();
    c.allreduce = v["sync.allreduce"];
    c.backupWorkers = v["sync.backup_workers"];
    c.workersPerRank = v["mpi.workers_per_rank"];
    c.commTimeoutS = v["mpi.timeout_s"];
    c.maxStaleness = v["async.max_staleness"];
    c.stalenessLr = v["async.staleness_lr"];
    c.slowdown = v["workers_slowdown"].get<std::vector<double>>();
    c.jitter = v["jitter"];
    c.evalEvery = v["eval.every"];
    c.evalSamples = v["eval.samples"];
    const std::string evalImages = v["eval.images"], evalLabels = v["eval.labels"];

    const bool layersGiven = !v["model.layers"].is_null();
    c.layers = layersGiven ? v["model.layers"].get<std::vector<int>>() : defaultLayers(c.source);
    c.layersFromData = !layersGiven && c.source == "idx";

    // Checks that involve more than one key.
    try {
        parseDeviceSpec(c.device); // whether those GPUs exist is checked when the run starts
    } catch (const std::invalid_argument &e) {
        errors.add("device", "device = \"" + c.device + "\": " + e.what());
    }
    if (c.layers.size() < 2)
        errors.add("model.layers", "model.layers = " + shortDump(v["model.layers"]) +
                                       ": expected at least two widths (input and output)");
    if (!c.slowdown.empty() && int(c.slowdown.size()) != c.workers)
        errors.add("workers_slowdown",
                   "workers_slowdown = " + shortDump(v["workers_slowdown"]) + ": expected " +
                       std::to_string(c.workers) + " factors (one per worker) or an empty array");
    if (c.backupWorkers >= c.workers)
        errors.add("sync.backup_workers",
                   "sync.backup_workers = " + std::to_string(c.backupWorkers) +
                       ": expected 0 <= b < workers (" + std::to_string(c.workers) +
                       "), at least one gradient must count each step");
    else if (c.backupWorkers > 0 && c.async())
        errors.add("sync.backup_workers",
                   "sync.backup_workers = " + std::to_string(c.backupWorkers) +
                       ": backup workers are a sync mode's (mode = \"sync\" or \"checkpointed\"); "
                       "async never waits for the others");
    if (c.batchnorm == "sync" && c.async())
        errors.add("model.batchnorm",
                   "model.batchnorm = \"sync\": synchronised batch norm all-reduces statistics "
                   "inside every forward pass, which async workers never wait for; use \"local\" "
                   "or a sync mode");
    else if (c.batchnorm == "sync" && c.backupWorkers > 0)
        errors.add("model.batchnorm",
                   "model.batchnorm = \"sync\" with sync.backup_workers = " +
                       std::to_string(c.backupWorkers) +
                       ": every forward pass waits for every worker's statistics, so no "
                       "gradient could be left behind; use \"local\" or no backup workers");
    if (c.batchnorm != "none" && c.batch < 2)
        errors.add("model.batchnorm", "model.batchnorm = \"" + c.batchnorm +
                                          "\" with train.batch = 1: a batch's variance needs at "
                                          "least 2 samples per worker");
    if (c.source == "idx") {
        if (c.images.empty())
            errors.add("data.images", "data.images = \"\": data.source=idx needs an IDX image file");
        if (c.labels.empty())
            errors.add("data.labels", "data.labels = \"\": data.source=idx needs an IDX label file");
    }
    if (evalImages.empty() != evalLabels.empty())
        errors.add(evalImages.empty() ? "eval.images" : "eval.labels",
                   "eval.images and eval.labels go together: give both or neither");
    if (c.layers.size() >= 2 && layersGiven) {
        const int in = c.layers.front(), out = c.layers.back();
        auto needs = [&](bool ok, const std::string &what) {
            if (!ok)
                errors.add("model.layers", "model.layers = " + shortDump(v["model.layers"]) +
                                               ": data.source=" + c.source + " needs " + what);
        };
        if (c.source == "fashion-mnist") {
            needs(in == 784, "784 inputs (28x28 images)");
            needs(out == 10, "10 outputs (classes)");
        } else if (c.source == "spirals") {
            needs(in == 2, "2 inputs (points in the plane)");
            needs(out >= 2, "at least 2 outputs (one per spiral arm)");
        } else if (c.source == "blobs") {
            needs(out >= 2, "at least 2 outputs (one per cluster)");
        }
    }
    if (c.layers.size() > kMaxLayers) {
        errors.add("model.layers", "model.layers: " + std::to_string(c.layers.size()) +
                                       " widths, more than the limit of " +
                                       std::to_string(kMaxLayers));
    } else if (c.layers.size() >= 2) {
        std::uint64_t params = 0; // at most 1024 x 65537 x 65536 x 256: no overflow
        for (std::size_t i = 0; i + 1 < c.layers.size(); ++i)
            params += std::uint64_t(c.layers[i] + 1) * std::uint64_t(c.layers[i + 1]);
        if (params * std::uint64_t(c.workers) > kMaxReplicaParameters)
            errors.add("model.layers",
                       "model.layers = " + shortDump(v["model.layers"]) + ": " +
                           std::to_string(params) + " parameters x " + std::to_string(c.workers) +
                           " workers, more than the limit of " +
                           std::to_string(kMaxReplicaParameters) + " parameters in all");
    }
    if (c.layers.size() >= 2 &&
        (c.source == "blobs" || c.source == "spirals" || c.source == "teacher")) {
        const std::uint64_t samples = std::uint64_t(c.samples == 0 ? 8192 : c.samples);
        const std::uint64_t width = std::uint64_t(c.inputWidth()) +
                                    std::uint64_t(c.source == "teacher" ? c.outputWidth() : 0);
        const std::uint64_t floats = (samples + std::uint64_t(c.evalSamples)) * width;
        if (floats > kMaxGeneratedFloats)
            errors.add("data.samples", "data.samples = " + std::to_string(samples) +
                                           " and eval.samples = " + std::to_string(c.evalSamples) +
                                           " of " + std::to_string(width) + " values each: " +
                                           std::to_string(floats) +
                                           " floats to generate, more than the limit of " +
                                           std::to_string(kMaxGeneratedFloats));
    }
    if (!errors.empty())
        errors.raise();

    const int linearLayers = int(c.layers.size()) - 1;
    if (c.checkpoint && c.checkpointEvery == 0)
        c.checkpointEvery = std::max(1, int(std::ceil(std::sqrt(double(linearLayers)))));
    if (c.slowdown.empty())
        c.slowdown.assign(c.workers, 1.0);
    if (c.samples == 0 && c.source != "idx" && c.source != "fashion-mnist")
        c.samples = 8192;
    c.evalImagesPath = evalImages;
    c.evalLabelsPath = evalLabels;
    return c;
}

nlohmann::json RunConfig::toJson() const
{
    nlohmann::json j;
    j["mode"] = mode;
    j["workers"] = workers;
    j["device"] = device;
    j["device.tf32"] = tf32; // "device" holds the spec string, so this key stays dotted
    j["device.threads_per_worker"] = threadsPerWorker;
    j["model"] = {{"layers", layers},
                  {"activation", activation},
                  {"checkpoint", checkpoint},
                  {"checkpoint_every", checkpointEvery},
                  {"batchnorm", batchnorm}};
    j["data"] = {{"source", source},     {"images", images},   {"labels", labels},
                 {"samples", samples},   {"shuffle", shuffle}, {"prefetch", prefetch},
                 {"cost_us", costUs}};
    j["train"] = {{"steps", steps}, {"batch", batch},       {"optimizer", optimizer},
                  {"lr", lr},       {"momentum", momentum}, {"seed", seed}};
    j["async"] = {{"max_staleness", maxStaleness}, {"staleness_lr", stalenessLr}};
    j["sync"] = {{"allreduce", allreduce}, {"backup_workers", backupWorkers}};
    j["mpi"] = {{"workers_per_rank", workersPerRank}, {"timeout_s", commTimeoutS}};
    j["workers_slowdown"] = slowdown;
    j["jitter"] = jitter;
    j["eval"] = {{"every", evalEvery},
                 {"samples", evalSamples},
                 {"images", evalImagesPath},
                 {"labels", evalLabelsPath}};
    return j;
}

} // namespace syncopate
