// IDX files through the public loader, from a temporary file (the reader's own path, zlib
// included). The first byte chooses: bit 0 gzip-compresses the rest first (so the header behind
// the compression is fuzzed, while raw gzip bytes fuzz zlib's side), bit 1 reads a prefix of
// 1 + (byte >> 4) items, bit 2 splits the rest into a label file (length in the next two bytes)
// and an image file for loadIdxDataset, fitModelToData and a gathered batch. Any exception other
// than DataError or ConfigError is a bug.
#include "data.h"
#include "fuzzfile.h"

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace syncopate;

namespace {

const std::string kImages = fuzz::tempPath("images.idx"), kLabels = fuzz::tempPath("labels.idx");

void write(const std::string &path, std::string_view bytes, bool compress)
{
    fuzz::writeFile(path, compress ? fuzz::gzip(bytes) : std::string(bytes));
}

void removeFiles()
{
    std::remove(kImages.c_str());
    std::remove(kLabels.c_str());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    static const bool cleanup = (std::atexit(removeFiles), true);
    (void)cleanup;
    if (size < 1)
        return 0;
    const unsigned flags = data[0];
    const bool compress = flags & 1;
    const std::int64_t maxItems = (flags & 2) ? 1 + (flags >> 4) : 0;
    std::string_view body(reinterpret_cast<const char *>(data) + 1, size - 1);
    try {
        if (!(flags & 4)) {
            write(kImages, body, compress);
            const IdxArray a = readIdx(kImages, maxItems);
            if (a.data.size() % std::size_t(a.elementBytes) != 0)
                __builtin_trap();
            for (std::int64_t i = 0; i < a.size(); ++i)
                (void)a.value(i);
            return 0;
        }
        if (body.size() < 2)
            return 0;
        const std::size_t labelBytes =
            std::min<std::size_t>(body.size() - 2, std::uint8_t(body[0]) | std::uint8_t(body[1]) << 8);
        write(kLabels, body.substr(2, labelBytes), compress);
        write(kImages, body.substr(2 + labelBytes), compress);
        const Dataset d = loadIdxDataset(kImages, kLabels, maxItems);
        RunConfig c = parseConfig(
            {{"data.source", "idx"}, {"data.images", kImages}, {"data.labels", kLabels}});
        fitModelToData(c, d, nullptr);
        const int rows = int(std::min<std::int64_t>(d.samples, 4));
        std::vector<float> x(std::size_t(rows) * std::size_t(d.features));
        std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
        const BatchSampler sampler(d.samples, 1, rows, true, 1);
        gatherBatch(d, sampler, 3, 0, rows, x.data(), labels.data(), nullptr);
    } catch (const DataError &) {
    } catch (const ConfigError &) {
    }
    return 0;
}
