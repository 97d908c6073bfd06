#include "rundir.h"

#include "data.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

namespace syncopate {
namespace {

struct FileCloser {
    void operator()(std::FILE *f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

File openForWrite(const std::string &path)
{
    File f(std::fopen(path.c_str(), "wb"));
    if (!f)
        throw std::runtime_error(path + ": cannot write (" + std::strerror(errno) + ")");
    return f;
}

void closeChecked(File &f, const std::string &path)
{
    const bool ok = std::ferror(f.get()) == 0;
    if (std::fclose(f.release()) != 0 || !ok)
        throw std::runtime_error(path + ": write failed (disk full?)");
}

void writeText(const std::string &path, const std::string &text)
{
    File f = openForWrite(path);
    std::fwrite(text.data(), 1, text.size(), f.get());
    closeChecked(f, path);
}

} // namespace

void writeSafetensors(const std::string &path, const std::vector<int> &layers,
                      const std::vector<float> &params)
{
    nlohmann::ordered_json header;
    header["__metadata__"] = {{"format", "pt"}, {"producer", "syncopate"}};
    std::size_t offset = 0;
    const int L = int(layers.size()) - 1;
    for (int l = 0; l < L; ++l) {
        const std::size_t w = std::size_t(layers[l + 1]) * layers[l] * 4;
        const std::size_t b = std::size_t(layers[l + 1]) * 4;
        const std::string p = "layers." + std::to_string(l);
        header[p + ".weight"] = {{"dtype", "F32"},
                                 {"shape", {layers[l + 1], layers[l]}},
                                 {"data_offsets", {offset, offset + w}}};
        offset += w;
        header[p + ".bias"] = {
            {"dtype", "F32"}, {"shape", {layers[l + 1]}}, {"data_offsets", {offset, offset + b}}};
        offset += b;
    }
    if (offset != params.size() * 4)
        throw std::runtime_error(path + ": parameter count does not match the layer widths");
    std::string text = header.dump();
    while (text.size() % 8)
        text += ' ';
    File f = openForWrite(path);
    std::uint64_t n = text.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i)
        le[i] = (n >> (8 * i)) & 0xff;
    std::fwrite(le, 1, 8, f.get());
    std::fwrite(text.data(), 1, text.size(), f.get());
    std::fwrite(params.data(), 4, params.size(), f.get()); // little-endian hosts only
    closeChecked(f, path);
}

std::map<std::string, Tensor> readSafetensors(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw DataError(path + ": cannot open the file");
    unsigned char le[8];
    if (!in.read(reinterpret_cast<char *>(le), 8))
        throw DataError(path + ": truncated at byte 0 (no header length)");
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i)
        n |= std::uint64_t(le[i]) << (8 * i);
    const auto size = std::filesystem::file_size(path);
    if (n > size - 8)
        throw DataError(path + ": header length " + std::to_string(n) + " at byte 0 exceeds the file");
    std::string text(n, '\0');
    in.read(text.data(), std::streamsize(n));
    const auto header = nlohmann::json::parse(text, nullptr, false);
    if (header.is_discarded() || !header.is_object())
        throw DataError(path + ": the header at byte 8 is not a JSON object");
    std::vector<char> blob(size - 8 - n);
    in.read(blob.data(), std::streamsize(blob.size()));
    std::map<std::string, Tensor> out;
    for (auto it = header.begin(); it != header.end(); ++it) {
        if (it.key() == "__metadata__")
            continue;
        const auto &t = *it;
        if (t.value("dtype", "") != "F32")
            throw DataError(path + ": tensor " + it.key() + " is not F32");
        const auto offsets = t.at("data_offsets").get<std::vector<std::uint64_t>>();
        if (offsets.size() != 2 || offsets[1] < offsets[0] || offsets[1] > blob.size())
            throw DataError(path + ": tensor " + it.key() + " has data offsets outside the file");
        Tensor tensor;
        tensor.shape = t.at("shape").get<std::vector<std::int64_t>>();
        tensor.data.resize((offsets[1] - offsets[0]) / 4);
        std::memcpy(tensor.data.data(), blob.data() + offsets[0], tensor.data.size() * 4);
        out[it.key()] = std::move(tensor);
    }
    return out;
}

void writeTraceJson(const std::string &path, const RunConfig &config,
                    const std::vector<Record> &records)
{
    File f = openForWrite(path);
    std::FILE *o = f.get();
    std::fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"syncopate\",\"mode\":\"", o);
    std::fputs(config.mode.c_str(), o);
    std::fputs("\"},\"traceEvents\":[\n", o);
    std::fprintf(o, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"Syncopate %s run, %d workers\"}}",
                 config.mode.c_str(), config.workers);
    // One thread per worker for compute and communication, and one for its prefetch lane.
    for (int w = 0; w < config.workers; ++w) {
        std::fprintf(o, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"worker %d\"}}", w, w);
        std::fprintf(o, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"sort_index\":%d}}", w, 2 * w);
        if (config.prefetch) {
            std::fprintf(o, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"worker %d data\"}}", 1000 + w, w);
            std::fprintf(o, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"sort_index\":%d}}", 1000 + w, 2 * w + 1);
        }
    }
    for (const Record &r : records) {
        if (r.isSpan()) {
            const int tid = r.lane() == Lane::Data ? 1000 + r.worker : r.worker;
            std::fprintf(o,
                         ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
                         "\"pid\":1,\"tid\":%d,\"args\":{\"step\":%" PRIu32,
                         phaseName(r.phase()), laneName(r.lane()), double(r.start) / 1e3,
                         double(r.duration()) / 1e3, tid, r.step);
            if (r.phase() == Phase::Push)
                std::fprintf(o, ",\"staleness\":%.0f", r.value);
            else if (r.phase() == Phase::Pull)
                std::fprintf(o, ",\"version\":%.0f", r.value);
            else if (r.phase() == Phase::Reduce)
                std::fprintf(o, ",\"bytes\":%.0f", r.value);
            std::fputs("}}", o);
        } else {
            std::fprintf(o,
                         ",\n{\"name\":\"%s\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":1,\"tid\":%d,"
                         "\"step\":%" PRIu32 ",\"args\":{\"worker %d\":%.9g}}",
                         counterName(r.counter()), double(r.start) / 1e3, int(r.worker), r.step,
                         int(r.worker), r.value);
        }
    }
    std::fputs("\n]}\n", o);
    closeChecked(f, path);
}

std::vector<Record> readTraceJson(const std::string &path)
{
    nlohmann::json trace;
    try {
        trace = readJsonFile(path);
    } catch (const ConfigError &e) {
        throw DataError(e.what());
    }
    if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
        throw DataError(path + ": not a trace (expected an object with a traceEvents array)");
    auto phaseOf = [](const std::string &name) {
        for (int p = 0; p < int(Phase::Count); ++p)
            if (name == phaseName(Phase(p)))
                return Phase(p);
        return Phase::Count;
    };
    auto counterOf = [](const std::string &name) {
        for (int c = 0; c < int(CounterId::Count); ++c)
            if (name == counterName(CounterId(c)))
                return CounterId(c);
        return CounterId::Count;
    };
    std::vector<Record> records;
    std::size_t index = 0;
    for (const auto &ev : trace["traceEvents"]) {
        ++index;
        if (!ev.is_object())
            continue;
        const std::string ph = ev.value("ph", "");
        try {
            if (ph == "X") {
                const Phase p = phaseOf(ev.value("name", ""));
                if (p == Phase::Count)
                    continue; // events of other tools are kept out, not fatal
                const int tid = ev.at("tid").get<int>();
                const auto start = std::int64_t(std::llround(ev.at("ts").get<double>() * 1e3));
                const auto dur = std::int64_t(std::llround(ev.at("dur").get<double>() * 1e3));
                const auto &args = ev.contains("args") ? ev["args"] : nlohmann::json::object();
                double value = 0;
                for (const char *k : {"staleness", "version", "bytes"})
                    if (args.contains(k))
                        value = args[k].get<double>();
                const Lane lane = tid >= 1000 ? Lane::Data : defaultLane(p);
                records.push_back(Record::span(tid % 1000, p, lane, args.value("step", 0u), start,
                                               start + dur, value));
            } else if (ph == "C") {
                const CounterId c = counterOf(ev.value("name", ""));
                if (c == CounterId::Count || !ev.contains("args"))
                    continue;
                const auto t = std::int64_t(std::llround(ev.at("ts").get<double>() * 1e3));
                for (auto it = ev["args"].begin(); it != ev["args"].end(); ++it) {
                    int worker = 0;
                    if (std::sscanf(it.key().c_str(), "worker %d", &worker) != 1)
                        continue;
                    records.push_back(Record::counterSample(worker, c, ev.value("step", 0u), t,
                                                            it->get<double>()));
                }
            }
        } catch (const nlohmann::json::exception &e) {
            throw DataError(path + ": event " + std::to_string(index) + " is malformed (" +
                            e.what() + ")");
        }
    }
    return records;
}

RunArtifacts readRunDirectory(const std::string &dir)
{
    const std::filesystem::path d(dir);
    if (!std::filesystem::is_directory(d))
        throw DataError(dir + ": not a directory");
    for (const char *f : {"config.json", "trace.json"})
        if (!std::filesystem::exists(d / f))
            throw DataError(dir + ": " + f + " is missing, so this is not a Syncopate run directory");
    RunArtifacts run;
    try {
        run.config = parseConfig(readJsonFile((d / "config.json").string()));
    } catch (const ConfigError &e) {
        throw DataError((d / "config.json").string() + ": " + e.what());
    }
    run.records = readTraceJson((d / "trace.json").string());
    if (std::filesystem::exists(d / "summary.json"))
        run.metrics.summary = readJsonFile((d / "summary.json").string());
    return run;
}

void writeMetricsCsv(const std::string &path, const std::vector<StepRow> &rows)
{
    File f = openForWrite(path);
    std::FILE *o = f.get();
    std::fputs("worker,step,t_ms,step_ms,loss,wait_ms,delay_ms,recompute_ms,staleness,"
               "activation_bytes\n",
               o);
    for (const auto &r : rows) {
        std::fprintf(o, "%d,%" PRId64 ",%.4f,%.4f,%.9g,%.4f,%.4f,%.4f,", r.worker, r.step, r.tMs,
                     r.stepMs, r.loss, r.waitMs, r.delayMs, r.recomputeMs);
        if (r.staleness >= 0)
            std::fprintf(o, "%.0f", r.staleness);
        std::fprintf(o, ",%.0f\n", r.activationBytes);
    }
    closeChecked(f, path);
}

void writeRunDirectory(const std::string &dir, const RunArtifacts &run)
{
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
        throw std::runtime_error(dir + ": cannot create the run directory (" + ec.message() + ")");
    const std::filesystem::path d(dir);
    writeText((d / "config.json").string(), run.config.toJson().dump(2) + "\n");
    writeTraceJson((d / "trace.json").string(), run.config, run.records);
    writeMetricsCsv((d / "metrics.csv").string(), run.metrics.rows);
    writeText((d / "summary.json").string(), run.metrics.summary.dump(2) + "\n");
    writeSafetensors((d / "params-init.safetensors").string(), run.config.layers,
                     run.initialParams);
    if (!run.finalParams.empty())
        writeSafetensors((d / "params-final.safetensors").string(), run.config.layers,
                         run.finalParams);
}

} // namespace syncopate
