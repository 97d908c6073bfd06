// Config text as it arrives in a file or on the command line: parsed with the depth and range
// checks (parseJsonText, what readJsonFile uses), flattened and validated by parseConfig, the
// preset wrapper unwrapped; the first line is also applied as a --set assignment. Any exception
// other than ConfigError is a bug: it would reach the user untyped.
#include "config.h"

#include <cstddef>
#include <cstdint>
#include <string>

using namespace syncopate;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    const std::string_view text(reinterpret_cast<const char *>(data), size);
    try {
        nlohmann::json flat = nlohmann::json::object();
        applyAssignment(flat, std::string(text.substr(0, text.find('\n'))));
        (void)parseConfig(flat).toJson().dump();
    } catch (const ConfigError &) {
    }
    RunConfig c;
    try {
        const nlohmann::json j = parseJsonText(text, "fuzz.json");
        const bool preset = j.is_object() && j.contains("config") && j["config"].is_object();
        c = parseConfig(preset ? j["config"] : j);
    } catch (const ConfigError &) {
        return 0;
    }
    // A valid config's resolved form (a run directory's config.json) reads back as itself.
    try {
        const RunConfig again = parseConfig(parseJsonText(c.toJson().dump(), "config.json"));
        if (again.toJson() != c.toJson())
            __builtin_trap();
    } catch (const ConfigError &) {
        __builtin_trap();
    }
    return 0;
}
