#include "runfollow.h"

#include "runstore.h"

#include <filesystem>
#include <fstream>

namespace syncopate {
namespace fs = std::filesystem;

const std::optional<RunConfig> &RunFollower::config()
{
    if (m_config)
        return m_config;
    const fs::path path = fs::path(m_dir) / "config.json";
    std::error_code ec;
    if (!fs::exists(path, ec)) // written atomically: there means complete
        return m_config;
    try {
        m_config = parseConfig(readJsonFile(path.string()));
    } catch (const ConfigError &e) {
        throw StoreError(path.string() + ": " + e.what());
    }
    return m_config;
}

std::size_t RunFollower::poll(std::vector<Record> &out)
{
    const std::size_t before = out.size();
    std::error_code ec;
    for (const auto &entry : fs::directory_iterator(m_dir, ec)) {
        if (entry.path().extension() != ".syr")
            continue;
        const std::string name = entry.path().filename().string();
        if (m_rows.count(name))
            continue;
        Row row;
        try {
            row.reader = std::make_unique<ChunkReader>(entry.path().string());
        } catch (const StoreError &) {
            continue; // its header is not written yet: next poll
        }
        m_rows.emplace(name, std::move(row));
    }
    for (auto &[name, row] : m_rows) {
        row.reader->refresh();
        const auto &blocks = row.reader->blocks();
        for (; row.blocksRead < blocks.size(); ++row.blocksRead) {
            row.reader->readBlock(row.blocksRead, m_block);
            out.insert(out.end(), m_block.begin(), m_block.end());
        }
    }
    return out.size() - before;
}

const nlohmann::json &RunFollower::summary()
{
    const fs::path path = fs::path(m_dir) / "summary.json";
    std::error_code ec;
    const auto stamp = fs::last_write_time(path, ec);
    if (ec)
        return m_summary;
    const std::int64_t t = stamp.time_since_epoch().count();
    if (t == m_summaryStamp)
        return m_summary;
    try {
        const nlohmann::json s = readJsonFile(path.string());
        if (s.is_object()) {
            m_summary = s;
            m_summaryStamp = t;
        }
    } catch (const ConfigError &) {
        // replaced atomically, so only a foreign writer leaves it half: read it next time
    }
    return m_summary;
}

} // namespace syncopate
