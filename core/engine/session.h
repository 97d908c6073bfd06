// The steps every front end shares: presets, config + data in, run directory out.
#pragma once

#include "config.h"
#include "data.h"
#include "engine.h"
#include "runstore.h"

#include <memory>
#include <string>
#include <vector>

namespace syncopate {

struct Preset {
    std::string name;        // file name without .json
    std::string title;       // one line
    std::string description; // one paragraph
    nlohmann::json config;   // nested keys
};

// SYNCOPATE_PRESETS if set, else the presets of the installation the executable sits in (or beside it),
// else the source tree's, else the installed prefix's.
std::string presetDirectory();
std::vector<Preset> listPresets();
// Throws ConfigError naming the preset and the ones that exist.
Preset loadPreset(const std::string &name);
Preset readPresetFile(const std::string &path);

struct PreparedRun {
    RunConfig config;
    std::shared_ptr<const Dataset> train;
    std::shared_ptr<const Dataset> eval;
};

// Validates and loads the data. Throws ConfigError or DataError; nothing is written.
PreparedRun prepareRun(const nlohmann::json &input);

// The cores this process may run on (its affinity mask) and how many of them other programs
// keep busy (the 1-minute load average, rounded), read now.
struct CoreBudget {
    int cpus = 1;
    double load = 0;
    int free() const;
};
CoreBudget coreBudget();
// Empty when the workers fit the free cores; else a warning (not an error: the run goes on)
// that says how many fit and what exceeding them will look like.
std::string oversubscriptionWarning(const RunConfig &config, const CoreBudget &cores);

} // namespace syncopate
