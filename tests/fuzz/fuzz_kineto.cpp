// PyTorch profiler (Kineto) traces through importKineto, from temporary files (the importer's
// own path: gzip sniffing, streamed inflate, SAX parse, then the job built across ranks), and
// the accepted ones written as a run directory with writeImportedRun. Input layout:
//   byte 0  bit 0: two files (rank0 and rank1) instead of one; bit 1: pass the folder holding
//           them instead of the file list (expandInputs)
//   byte 1  bit 0 / bit 1: gzip-compress file 0 / file 1 (by the harness, so that the JSON
//           behind the compression is fuzzed; raw gzip bytes in the input fuzz zlib's side);
//           bit 2: KinetoOptions::alignClocks; bit 3 / bit 4: name file 0 / file 1 without a
//           rank ("a.json", "b.json": ranks from distributedInfo or the order given)
//   two files: bytes 2-3 the length of file 0 (little-endian, clamped), then file 0, file 1
//   one file:  the rest is the file
// An accepted job must hold what kineto.h promises for any input (records are spans with
// 0 <= start <= end on a loaded worker, sorted by worker then start, with a valid phase and
// lane; steps and stepExtras parallel, finite and non-negative; straggler -1 or a loaded
// worker; ranks sorted), its summaryFields dump to JSON, and for inputs under 4 KiB
// writeImportedRun succeeds or throws StoreError. Any exception other than ImportError (and
// StoreError from the writer) is a bug, and so is a broken invariant, a crash or a hang.
#include "chunkfile.h"
#include "fuzzfile.h"
#include "kineto.h"
#include "trace.h"

#include <zlib.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

using namespace syncopate;
namespace fs = std::filesystem;

namespace {

const std::string kDir = fuzz::tempPath("kineto");
const std::string kInDir = kDir + "/in", kOutDir = kDir + "/out";
constexpr std::size_t kWriteLimit = 4096; // writeImportedRun writes ~10 files: small inputs only

void removeAll()
{
    std::error_code ec;
    fs::remove_all(kDir, ec);
}

void check(bool ok)
{
    if (!ok)
        __builtin_trap();
}

bool finiteNonNegative(double v) { return std::isfinite(v) && v >= 0; }

void checkJob(const KinetoJob &job)
{
    const std::size_t n = job.ranks.size();
    check(n >= 1);
    for (std::size_t i = 1; i < n; ++i)
        check(job.ranks[i - 1].rank < job.ranks[i].rank);
    for (std::size_t i = 0; i < job.records.size(); ++i) {
        const Record &r = job.records[i];
        check(r.isSpan());
        check(0 <= r.start && r.start <= r.end);
        check(r.worker < n);
        check(r.phase() < Phase::Count);
        check(r.lane() < Lane::Count);
        if (i > 0) {
            const Record &p = job.records[i - 1];
            check(p.worker < r.worker || (p.worker == r.worker && p.start <= r.start));
        }
    }
    check(job.steps.size() == job.stepExtras.size());
    for (std::size_t i = 0; i < job.steps.size(); ++i) {
        const StepRow &s = job.steps[i];
        check(s.worker >= 0 && std::size_t(s.worker) < n);
        check(finiteNonNegative(s.waitMs) && finiteNonNegative(s.stepMs));
        const KinetoJob::StepExtra &x = job.stepExtras[i];
        check(finiteNonNegative(x.computeMs) && finiteNonNegative(x.commMs));
    }
    check(job.straggler == -1 || (job.straggler >= 0 && std::size_t(job.straggler) < n));
    // Names may be invalid UTF-8: dumped as the project's error messages dump them.
    const nlohmann::json s = job.summaryFields();
    (void)s.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    static const bool cleanup = (std::atexit(removeAll), true);
    (void)cleanup;
    if (size < 2)
        return 0;
    const unsigned files = data[0], flags = data[1];
    std::string_view body(reinterpret_cast<const char *>(data) + 2, size - 2);
    std::vector<std::string_view> parts;
    if (files & 1) {
        if (body.size() < 2)
            return 0;
        const std::size_t first =
            std::min<std::size_t>(body.size() - 2, std::uint8_t(body[0]) | std::uint8_t(body[1]) << 8);
        body.remove_prefix(2);
        parts = {body.substr(0, first), body.substr(first)};
    } else {
        parts = {body};
    }

    removeAll();
    fs::create_directories(kInDir);
    std::vector<std::string> paths;
    for (std::size_t i = 0; i < parts.size(); ++i) {
        const bool compress = flags & (1u << i);
        const bool unnamed = flags & (8u << i);
        const std::string stem = unnamed ? std::string(1, char('a' + i)) : "rank" + std::to_string(i);
        const std::string name = stem + (compress ? ".json.gz" : ".json");
        paths.push_back(kInDir + "/" + name);
        fuzz::writeFile(paths.back(), compress ? fuzz::gzip(parts[i]) : std::string(parts[i]));
    }
    if (files & 2)
        paths = {kInDir};
    KinetoOptions options;
    options.alignClocks = flags & 4;

    KinetoJob job;
    try {
        job = importKineto(paths, options);
    } catch (const ImportError &) {
        removeAll();
        return 0;
    }
    checkJob(job);
    if (size < kWriteLimit) {
        try {
            writeImportedRun(job, kOutDir);
        } catch (const StoreError &) {
        }
    }
    removeAll();
    return 0;
}
