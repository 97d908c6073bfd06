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
#include <zlib.h>

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

// A gzip member of data, with a small window (fast): inputs for the readers of .gz files, for
// the fuzz targets and tst_untrusted alike.
inline std::string gzip(std::string_view data, int level = 6)
{
    z_stream z{};
    deflateInit2(&z, level, Z_DEFLATED, 9 + 16, 1, Z_DEFAULT_STRATEGY); // 16: the gzip wrapper
    std::string out(deflateBound(&z, uLong(data.size())), '\0');
    z.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(data.data()));
    z.avail_in = uInt(data.size());
    z.next_out = reinterpret_cast<Bytef *>(out.data());
    z.avail_out = uInt(out.size());
    deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    return out;
}

} // namespace syncopate::fuzz
