// Following a run directory that another process is writing (mpirun's rank 0, a CLI run):
// config.json once it is there, then the records of every row-file block flushed since the
// last poll, and summary.json's status. The GUI draws a run over MPI ranks from this, so it
// never needs MPI itself. Not thread-safe: one owner polls it.
#pragma once

#include "chunkfile.h"
#include "config.h"

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace syncopate {

class RunFollower {
public:
    explicit RunFollower(std::string dir) : m_dir(std::move(dir)) {}

    // The run's config once config.json is complete (nullopt before). Throws StoreError when
    // the file is there but is not a valid config.
    const std::optional<RunConfig> &config();
    // Appends to out the records of the blocks flushed since the last call (each row file's
    // blocks in order; a file that appears later is read from its start). Returns how many.
    // Throws StoreError when a row file is damaged.
    std::size_t poll(std::vector<Record> &out);
    // summary.json as it is now (an empty object before the first), re-read when it changed.
    const nlohmann::json &summary();
    const std::string &directory() const { return m_dir; }

private:
    struct Row {
        std::unique_ptr<ChunkReader> reader;
        std::size_t blocksRead = 0;
    };
    std::string m_dir;
    std::optional<RunConfig> m_config;
    std::map<std::string, Row> m_rows; // by file name
    std::vector<Record> m_block;
    nlohmann::json m_summary = nlohmann::json::object();
    std::int64_t m_summaryStamp = -1;
};

} // namespace syncopate
