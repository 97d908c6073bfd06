#include "session.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>

#ifndef SYNCOPATE_SOURCE_PRESETS
#define SYNCOPATE_SOURCE_PRESETS ""
#endif

namespace syncopate {
namespace fs = std::filesystem;

std::string presetDirectory()
{
    if (const char *env = std::getenv("SYNCOPATE_PRESETS"); env && *env)
        return env;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        for (const fs::path &candidate : {exe.parent_path() / "../share/syncopate/presets",
                                         exe.parent_path() / "presets"})
            if (fs::is_directory(candidate, ec))
                return fs::canonical(candidate, ec).string();
    }
    return SYNCOPATE_SOURCE_PRESETS;
}

Preset readPresetFile(const std::string &path)
{
    const nlohmann::json j = readJsonFile(path);
    Preset p;
    p.name = fs::path(path).stem().string();
    if (!j.is_object() || !j.contains("config") || !j["config"].is_object())
        throw ConfigError(path + ": a preset is an object with \"title\", \"description\" and "
                                 "\"config\" (an object of config keys)",
                          {});
    p.title = j.value("title", p.name);
    p.description = j.value("description", "");
    p.config = j["config"];
    return p;
}

std::vector<Preset> listPresets()
{
    std::vector<Preset> out;
    std::error_code ec;
    for (const auto &entry : fs::directory_iterator(presetDirectory(), ec))
        if (entry.path().extension() == ".json")
            out.push_back(readPresetFile(entry.path().string()));
    std::sort(out.begin(), out.end(), [](const Preset &a, const Preset &b) {
        // "default" first, then by name
        return (a.name == "default") != (b.name == "default") ? a.name == "default"
                                                              : a.name < b.name;
    });
    return out;
}

Preset loadPreset(const std::string &name)
{
    const fs::path path = fs::path(presetDirectory()) / (name + ".json");
    if (fs::exists(path))
        return readPresetFile(path.string());
    std::vector<std::string> names;
    for (const auto &p : listPresets())
        names.push_back(p.name);
    std::string list;
    for (const auto &n : names)
        list += (list.empty() ? "" : ", ") + n;
    const auto guess = closestMatch(name, names);
    throw ConfigError("preset \"" + name + "\" not found" +
                          (guess.empty() ? "" : " (did you mean \"" + guess + "\"?)") +
                          "; presets: " + list,
                      {});
}

PreparedRun prepareRun(const nlohmann::json &input)
{
    PreparedRun run;
    run.config = parseConfig(input);
    run.train = loadTrainingData(run.config);
    run.config.samples = run.train->samples;
    run.eval = loadEvalData(run.config);
    fitModelToData(run.config, *run.train, run.eval.get());
    return run;
}

} // namespace syncopate
