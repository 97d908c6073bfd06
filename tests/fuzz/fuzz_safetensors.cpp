// safetensors files through readSafetensors, from a temporary file. Any exception other than
// DataError is a bug, and so is a tensor whose data does not hold its shape's elements.
#include "data.h"
#include "fuzzfile.h"
#include "safetensors.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace syncopate;

namespace {

const std::string kPath = fuzz::tempPath("params.safetensors");

void removeFile() { std::remove(kPath.c_str()); }

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    static const bool cleanup = (std::atexit(removeFile), true);
    (void)cleanup;
    fuzz::writeFile(kPath, std::string_view(reinterpret_cast<const char *>(data), size));
    try {
        for (const auto &[name, tensor] : readSafetensors(kPath)) {
            std::uint64_t elements = 1;
            for (auto d : tensor.shape)
                elements *= std::uint64_t(d);
            if (elements != tensor.data.size())
                __builtin_trap();
        }
    } catch (const DataError &) {
    }
    return 0;
}
