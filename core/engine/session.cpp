#include "session.h"

#include "cpu/cpudevice.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#ifndef SYNCOPATE_SOURCE_PRESETS
#define SYNCOPATE_SOURCE_PRESETS ""
#endif
#ifndef SYNCOPATE_RELATIVE_PRESETS
#define SYNCOPATE_RELATIVE_PRESETS "../share/syncopate/presets"
#endif
#ifndef SYNCOPATE_INSTALLED_PRESETS
#define SYNCOPATE_INSTALLED_PRESETS ""
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
        for (const fs::path &candidate : {exe.parent_path() / SYNCOPATE_RELATIVE_PRESETS,
                                         exe.parent_path() / "presets"})
            if (fs::is_directory(candidate, ec))
                return fs::canonical(candidate, ec).string();
    }
    // The source tree before the install prefix: a build-tree executable shows the presets
    // being edited, not a copy installed earlier.
    for (const char *dir : {SYNCOPATE_SOURCE_PRESETS, SYNCOPATE_INSTALLED_PRESETS})
        if (*dir && fs::is_directory(dir, ec))
            return dir;
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

int CoreBudget::free() const
{
    return std::clamp(cpus - int(std::lround(load)), 1, std::max(1, cpus));
}

CoreBudget coreBudget()
{
    CoreBudget b;
    b.cpus = usableCores();
    double loads[1] = {0};
    if (getloadavg(loads, 1) == 1 && std::isfinite(loads[0]))
        b.load = std::max(0.0, loads[0]);
    return b;
}

std::string oversubscriptionWarning(const RunConfig &config, const CoreBudget &cores)
{
    // GPU workers' host threads mostly wait for their streams; CPU workers each want a core.
    if (config.device != "cpu")
        return {};
    const int free = cores.free();
    if (config.workers <= free)
        return {};
    char load[32];
    std::snprintf(load, sizeof load, "%.1f", cores.load);
    return std::to_string(config.workers) + " workers on " + std::to_string(free) + " free core" +
           (free == 1 ? "" : "s") + " (" + std::to_string(cores.cpus) + " CPUs, load " + load +
           "): the OS will take turns running them, and the time a worker waits for one that is not "
           "running shows as stalls (hatched off CPU on the timeline). " + std::to_string(free) +
           " worker" + (free == 1 ? "" : "s") + " would fit.";
}

} // namespace syncopate
