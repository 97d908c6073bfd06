#include "runstore.h"

#include "safetensors.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace syncopate {
namespace fs = std::filesystem;

namespace {

std::string inDir(const std::string &dir, const char *name) { return (fs::path(dir) / name).string(); }

constexpr const char *kLockName = "run.lock";

} // namespace

RunFolderClaim::RunFolderClaim(const std::string &dir)
{
    const std::string lock = inDir(dir, kLockName);
    m_fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (m_fd < 0)
        throw StoreError(lock + ": cannot create (" + std::strerror(errno) + ")");
    if (::flock(m_fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        ::close(m_fd);
        m_fd = -1;
        throw StoreError(dir + ": another process is writing a run in this folder now; choose another --out");
    }
    // (A file system without locks: the check below still keeps finished runs apart.)
    std::error_code ec;
    std::vector<std::string> held;
    for (const auto &entry : fs::directory_iterator(dir, ec)) {
        const fs::path name = entry.path().filename();
        if (name == "config.json" || name == "summary.json" || name == "index.syi" || name == "metrics.csv" ||
            name.extension() == ".syr")
            held.push_back(name.string());
    }
    std::sort(held.begin(), held.end(), [](const std::string &a, const std::string &b) {
        return std::pair(a != "config.json", a) < std::pair(b != "config.json", b);
    });
    std::string found;
    for (std::size_t i = 0; i < held.size() && i < 3; ++i)
        found += (i ? ", " : "") + held[i];
    if (held.size() > 3)
        found += ", ...";
    if (!found.empty()) {
        ::close(m_fd);
        m_fd = -1;
        throw StoreError(dir + ": holds a run already (" + found +
                         "); a new run there would mix its rows with that one's. Choose another "
                         "folder, or remove this one first");
    }
}

RunFolderClaim::~RunFolderClaim()
{
    if (m_fd >= 0)
        ::close(m_fd); // and with it the lock
}

bool runFolderBeingWritten(const std::string &dir)
{
    const int fd = ::open(inDir(dir, kLockName).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ::close(fd);
    return held;
}

void writeFileAtomically(const std::string &path, const std::string &text)
{
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        throw StoreError(tmp + ": cannot write (" + std::strerror(errno) + ")");
    std::size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            const int err = errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            throw StoreError(tmp + ": write failed (" + std::strerror(err) + ")");
        }
        done += std::size_t(n);
    }
    // fsync before rename: after a power loss the name points at the old or the new text.
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        throw StoreError(tmp + ": write failed (" + std::strerror(err) + ")");
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0)
        throw StoreError(path + ": cannot replace (" + std::strerror(errno) + ")");
}

void appendMetricsCsv(std::FILE *o, const std::vector<StepRow> &rows, bool header)
{
    if (header)
        std::fputs("worker,step,t_ms,step_ms,loss,wait_ms,delay_ms,recompute_ms,staleness,"
                   "activation_bytes,descheduled_ms,dropped,input_wait_ms\n",
                   o);
    for (const auto &r : rows) {
        std::fprintf(o, "%d,%" PRId64 ",%.4f,%.4f,%.9g,%.4f,%.4f,%.4f,", r.worker, r.step, r.tMs,
                     r.stepMs, r.loss, r.waitMs, r.delayMs, r.recomputeMs);
        if (r.staleness >= 0)
            std::fprintf(o, "%.0f", r.staleness);
        std::fprintf(o, ",%.0f,%.4f,%d,%.4f\n", r.activationBytes, r.descheduledMs, r.dropped,
                     r.inputWaitMs);
    }
}

RunWriter::RunWriter(std::string dir, const RunConfig &config, const std::vector<float> &initialParams)
    : m_dir(std::move(dir)), m_config(config),
      m_metrics(std::make_unique<MetricsAccumulator>(config)),
      m_model(config.workers, config.prefetch, config.batch)
{
    m_model.setKeepRaw(false);
    std::error_code ec;
    fs::create_directories(m_dir, ec);
    if (ec || !fs::is_directory(m_dir))
        throw StoreError(m_dir + ": cannot create the run folder (" +
                         (ec ? ec.message() : std::string("a file has that name")) + ")");
    if (::access(m_dir.c_str(), W_OK) != 0)
        throw StoreError(m_dir + ": the run folder is not writable (" + std::strerror(errno) + ")");
    m_claim = std::make_unique<RunFolderClaim>(m_dir);
    writeFileAtomically(inDir(m_dir, "config.json"), config.toJson().dump(2) + "\n");
    for (int w = 0; w < config.workers; ++w) {
        m_rows.push_back(std::make_unique<ChunkWriter>(
            inDir(m_dir, rowFileName({w, RowKind::Worker, {}}).c_str()),
            RowDescriptor{w, RowKind::Worker, "worker " + std::to_string(w)}));
        if (config.prefetch)
            m_rows.push_back(std::make_unique<ChunkWriter>(
                inDir(m_dir, rowFileName({w, RowKind::DataLane, {}}).c_str()),
                RowDescriptor{w, RowKind::DataLane, "worker " + std::to_string(w) + " data"}));
        else
            m_rows.push_back(nullptr);
    }
    const std::string csv = inDir(m_dir, "metrics.csv");
    m_csv.reset(std::fopen(csv.c_str(), "wb"));
    if (!m_csv)
        throw StoreError(csv + ": cannot write (" + std::strerror(errno) + ")");
    appendMetricsCsv(m_csv.get(), {}, true);
    try {
        writeSafetensors(inDir(m_dir, "params-init.safetensors"), config.layers, initialParams,
                         config.batchnorm != "none");
    } catch (const std::exception &e) {
        throw StoreError(e.what());
    }
    RunOutcome starting;
    starting.status = "running";
    writeSummary(starting);
}

RunWriter::~RunWriter() = default;

ChunkWriter &RunWriter::rowWriter(const Record &r)
{
    const std::size_t i = std::size_t(r.worker) * 2 + (r.isSpan() && r.lane() == Lane::Data && m_config.prefetch ? 1 : 0);
    return *m_rows[i];
}

void RunWriter::append(const Record *records, std::size_t n)
{
    for (std::size_t i = 0; i < n; ++i) {
        if (records[i].worker < m_config.workers) {
            rowWriter(records[i]).append(records[i]);
        } else if (isEvaluator(records[i], m_config.workers)) {
            // Made with its first record: only a run with an evaluator has its file.
            if (!m_evaluator)
                m_evaluator = std::make_unique<ChunkWriter>(
                    inDir(m_dir, rowFileName({m_config.workers, RowKind::Evaluator, {}}).c_str()),
                    RowDescriptor{m_config.workers, RowKind::Evaluator, "evaluator"});
            m_evaluator->append(records[i]);
        }
    }
    m_model.append(records, n);
    m_metrics->add(records, n);
}

void RunWriter::flush()
{
    for (auto &row : m_rows)
        if (row)
            row->flush();
    if (m_evaluator)
        m_evaluator->flush();
    m_finished.clear();
    m_metrics->takeFinishedRows(m_finished);
    appendMetricsCsv(m_csv.get(), m_finished, false);
    if (std::fflush(m_csv.get()) != 0 || std::ferror(m_csv.get()))
        throw StoreError(inDir(m_dir, "metrics.csv") + ": write failed (" + std::strerror(errno) + ")");
}

void RunWriter::writeSummary(const RunOutcome &outcome)
{
    m_summary = m_metrics->summary(outcome);
    writeFileAtomically(inDir(m_dir, "summary.json"), m_summary.dump(2) + "\n");
}

void RunWriter::tick(std::int64_t nowNs, const std::function<RunOutcome()> &outcome)
{
    if (nowNs - m_lastFlush >= kFlushNs) {
        m_lastFlush = nowNs;
        flush();
    }
    if (nowNs - m_lastSummary >= kSummaryNs) {
        m_lastSummary = nowNs;
        RunOutcome o = outcome();
        o.status = "running";
        writeSummary(o);
    }
}

void RunWriter::finish(const RunOutcome &outcome, const std::vector<float> &finalParams)
{
    flush();
    m_finished.clear();
    m_metrics->finish(m_finished);
    appendMetricsCsv(m_csv.get(), m_finished, false);
    const bool csvOk = std::fflush(m_csv.get()) == 0 && !std::ferror(m_csv.get());
    const bool closed = std::fclose(m_csv.release()) == 0;
    if (!csvOk || !closed)
        throw StoreError(inDir(m_dir, "metrics.csv") + ": write failed (disk full?)");
    if (!finalParams.empty()) {
        try {
            writeSafetensors(inDir(m_dir, "params-final.safetensors"), m_config.layers, finalParams,
                             m_config.batchnorm != "none");
        } catch (const std::exception &e) {
            throw StoreError(e.what());
        }
    }
    m_model.saveIndex(inDir(m_dir, "index.syi"));
    writeSummary(outcome);
    // An export, streamed from the row files just flushed; the store itself is complete already.
    exportTraceJson(inDir(m_dir, "trace.json"), m_dir);
    m_claim.reset(); // written: readers may take it for a finished run now
}

} // namespace syncopate
