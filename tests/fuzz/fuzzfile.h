// Temporary files for the fuzz targets, which read through the same path-taking API the app
// uses. /dev/shm when there is one: on this project's disks a file write costs ten times more
// than the parse under test. TMPDIR, when set, wins.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <unistd.h>

namespace syncopate::fuzz {

inline std::string tempPath(const std::string &name)
{
    std::error_code ec;
    const char *tmp = std::getenv("TMPDIR");
    const std::filesystem::path dir = tmp && *tmp                                 ? tmp
                                      : std::filesystem::is_directory("/dev/shm", ec) ? "/dev/shm"
                                      : std::filesystem::temp_directory_path();
    return (dir / ("syncopate-fuzz-" + std::to_string(getpid()) + "-" + name)).string();
}

inline void writeFile(const std::string &path, std::string_view bytes)
{
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), std::streamsize(bytes.size()));
}

} // namespace syncopate::fuzz
