#include "safetensors.h"

#include "data.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

namespace syncopate {
namespace {

struct FileCloser {
    void operator()(std::FILE *f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

} // namespace

void writeSafetensors(const std::string &path, const std::vector<int> &layers,
                      const std::vector<float> &params, bool batchNorm,
                      const std::vector<float> *runningStats)
{
    nlohmann::ordered_json header;
    header["__metadata__"] = {{"format", "pt"}, {"producer", "syncopate"}};
    std::size_t offset = 0;
    const int L = int(layers.size()) - 1;
    auto vector = [&](const std::string &name, int n) {
        const std::size_t bytes = std::size_t(n) * 4;
        header[name] = {{"dtype", "F32"}, {"shape", {n}}, {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    };
    for (int l = 0; l < L; ++l) {
        const std::size_t w = std::size_t(layers[l + 1]) * layers[l] * 4;
        const std::string p = "layers." + std::to_string(l);
        header[p + ".weight"] = {{"dtype", "F32"},
                                 {"shape", {layers[l + 1], layers[l]}},
                                 {"data_offsets", {offset, offset + w}}};
        offset += w;
        vector(p + ".bias", layers[l + 1]);
        if (batchNorm && l < L - 1) {
            vector("norms." + std::to_string(l) + ".weight", layers[l + 1]);
            vector("norms." + std::to_string(l) + ".bias", layers[l + 1]);
        }
    }
    if (offset != params.size() * 4)
        throw std::runtime_error(path + ": parameter count does not match the layer widths");
    if (batchNorm && runningStats) {
        for (int l = 0; l < L - 1; ++l) {
            vector("norms." + std::to_string(l) + ".running_mean", layers[l + 1]);
            vector("norms." + std::to_string(l) + ".running_var", layers[l + 1]);
        }
        if (offset != (params.size() + runningStats->size()) * 4)
            throw std::runtime_error(path + ": running statistics do not match the layer widths");
    }
    std::string text = header.dump();
    while (text.size() % 8)
        text += ' ';
    File f(std::fopen(path.c_str(), "wb"));
    if (!f)
        throw std::runtime_error(path + ": cannot write (" + std::strerror(errno) + ")");
    std::uint64_t n = text.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i)
        le[i] = (n >> (8 * i)) & 0xff;
    std::fwrite(le, 1, 8, f.get());
    std::fwrite(text.data(), 1, text.size(), f.get());
    std::fwrite(params.data(), 4, params.size(), f.get()); // little-endian hosts only
    if (batchNorm && runningStats)
        std::fwrite(runningStats->data(), 4, runningStats->size(), f.get());
    const bool ok = std::ferror(f.get()) == 0;
    if (std::fclose(f.release()) != 0 || !ok)
        throw std::runtime_error(path + ": write failed (disk full?)");
}

namespace {

struct Entry {
    std::string name;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0, end = 0; // within the data section
};

// One tensor's header entry, checked: F32, a shape of non-negative integers whose product of
// 4-byte elements is exactly its data_offsets range, and that range inside the data section.
Entry parseEntry(const std::string &path, const std::string &name, const nlohmann::json &t,
                 std::uint64_t dataStart, std::uint64_t dataBytes)
{
    const std::string what = path + ": tensor \"" + name + "\"";
    auto dump = [](const nlohmann::json &j) {
        std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        return s.size() > 100 ? s.substr(0, 80) + "..." : s;
    };
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
        throw DataError(what + ": expected an object with dtype, shape and data_offsets");
    if (t["dtype"] != "F32")
        throw DataError(what + ": dtype " + dump(t["dtype"]) + ", expected \"F32\" (the only type read)");
    Entry e;
    e.name = name;
    const auto &shape = t["shape"];
    if (!shape.is_array())
        throw DataError(what + ": shape " + dump(shape) + ", expected an array of sizes");
    std::uint64_t elements = 1;
    bool overflow = false;
    for (const auto &d : shape) {
        // number_unsigned: JSON's non-negative integers; a float or a negative size is no size.
        if (!d.is_number_unsigned() || d.get<std::uint64_t>() > std::uint64_t(INT64_MAX))
            throw DataError(what + ": shape " + dump(shape) + ", expected non-negative integers");
        e.shape.push_back(std::int64_t(d.get<std::uint64_t>()));
        overflow = overflow || __builtin_mul_overflow(elements, d.get<std::uint64_t>(), &elements);
    }
    std::uint64_t bytes = 0;
    overflow = overflow || __builtin_mul_overflow(elements, std::uint64_t(4), &bytes);
    const auto &offsets = t["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned() || offsets[1].get<std::uint64_t>() < offsets[0].get<std::uint64_t>())
        throw DataError(what + ": data_offsets " + dump(offsets) +
                        ", expected [begin, end] with 0 <= begin <= end");
    e.begin = offsets[0].get<std::uint64_t>();
    e.end = offsets[1].get<std::uint64_t>();
    if (e.end > dataBytes)
        throw DataError(what + ": data_offsets " + dump(offsets) + " reach past the end of the data (" +
                        std::to_string(dataBytes) + " bytes from byte " + std::to_string(dataStart) +
                        " to the end of the file)");
    if (overflow || bytes != e.end - e.begin)
        throw DataError(what + ": shape " + dump(shape) + " needs " +
                        (overflow ? std::string("more than 2^64") : std::to_string(bytes)) +
                        " bytes of F32, but data_offsets " + dump(offsets) + " span " +
                        std::to_string(e.end - e.begin));
    return e;
}

} // namespace

std::map<std::string, Tensor> readSafetensors(const std::string &path)
{
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        throw DataError(path + ": cannot open the file (missing, or not a regular file)");
    const std::uint64_t size = std::filesystem::file_size(path, ec);
    std::ifstream in(path, std::ios::binary);
    if (ec || !in)
        throw DataError(path + ": cannot open the file");
    unsigned char le[8];
    if (size < 8 || !in.read(reinterpret_cast<char *>(le), 8))
        throw DataError(path + ": truncated at byte " + std::to_string(std::min<std::uint64_t>(size, 8)) +
                        " (a safetensors file starts with an 8-byte header length)");
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i)
        n |= std::uint64_t(le[i]) << (8 * i);
    if (n > kMaxSafetensorsHeaderBytes)
        throw DataError(path + ": header length " + std::to_string(n) +
                        " at byte 0 is more than the limit of " +
                        std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
    if (n > size - 8)
        throw DataError(path + ": header length " + std::to_string(n) + " at byte 0 exceeds the file (" +
                        std::to_string(size) + " bytes)");
    std::string text(std::size_t(n), '\0');
    if (!in.read(text.data(), std::streamsize(n)))
        throw DataError(path + ": truncated in the header (byte " + std::to_string(8 + in.gcount()) + ")");
    nlohmann::json header;
    try {
        header = parseJsonText(text, path, 8);
    } catch (const ConfigError &e) {
        throw DataError(e.what());
    }
    if (!header.is_object())
        throw DataError(path + ": the header at byte 8 is not a JSON object");
    const std::uint64_t dataStart = 8 + n, dataBytes = size - dataStart;
    std::vector<Entry> entries;
    for (auto it = header.begin(); it != header.end(); ++it)
        if (it.key() != "__metadata__")
            entries.push_back(parseEntry(path, it.key(), *it, dataStart, dataBytes));
    // Without overlaps the tensors add up to at most the data section: a small file cannot make
    // many tensors share one large range.
    std::vector<const Entry *> byBegin;
    for (const auto &e : entries)
        if (e.end > e.begin)
            byBegin.push_back(&e);
    std::sort(byBegin.begin(), byBegin.end(),
              [](const Entry *a, const Entry *b) { return a->begin < b->begin; });
    for (std::size_t i = 1; i < byBegin.size(); ++i)
        if (byBegin[i]->begin < byBegin[i - 1]->end)
            throw DataError(path + ": tensors \"" + byBegin[i - 1]->name + "\" and \"" +
                            byBegin[i]->name + "\" overlap (data_offsets from " +
                            std::to_string(byBegin[i]->begin) + ")");
    std::map<std::string, Tensor> out;
    for (auto &e : entries) {
        Tensor tensor;
        tensor.shape = std::move(e.shape);
        tensor.data.resize(std::size_t((e.end - e.begin) / 4));
        in.seekg(std::streamoff(dataStart + e.begin));
        if (!in.read(reinterpret_cast<char *>(tensor.data.data()), std::streamsize(e.end - e.begin)))
            throw DataError(path + ": tensor \"" + e.name + "\": truncated at byte " +
                            std::to_string(dataStart + e.begin + std::uint64_t(in.gcount())));
        out[e.name] = std::move(tensor);
    }
    return out;
}

} // namespace syncopate
