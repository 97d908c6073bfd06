// The run store under faults: a folder that cannot be written stops the start before any worker
// runs, a disk that fills mid-run fails the run and keeps what it recorded, a process killed
// mid-run leaves a directory that opens as interrupted, and a row file cut anywhere inside its
// last block opens to a prefix of its records. The forking cases come first: fork copies only
// the calling thread, so the parent must not have started engine (or oneTBB) threads yet.
#include "testutil.h"

#include <QTemporaryDir>

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <tuple>

using namespace syncopate;
using namespace syncopate::test;
using nlohmann::json;
namespace fs = std::filesystem;

class TestStoreFaults : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void unwritableForAnotherUser();
    void killedRunOpensAsInterrupted();
    void tornTailAtRandomPositions();
    void unwritableFolder_data();
    void unwritableFolder();
    void fullDiskAtStart();
    void diskFullMidRun();
    void cleanup();

private:
    bool mountSmallTmpfs(const QString &dir, QString *why);
    bool unmountTmpfs(QString *why); // the one mountSmallTmpfs made

    QTemporaryDir m_killed;  // the killed run, for the torn-tail cases
    std::string m_killedRun; // empty until a run was killed
    QString m_mounted;       // a tmpfs to unmount after the test function
};

namespace {

json smallRun(int workers)
{
    return json{{"mode", "sync"},
                {"workers", workers},
                {"model", {{"layers", {8, 64, 4}}}},
                {"data", {{"source", "blobs"}, {"samples", 256}}},
                {"train", {{"steps", 10000000}, {"batch", 8}}},
                {"eval", {{"samples", 0}}}};
}

// params-init of 64*1024 + 1024 + 1024*10 + 10 floats: 307 KB of a 1 MB disk.
json bigParamsRun()
{
    json c = smallRun(4);
    c["model"]["layers"] = {64, 1024, 10};
    c["train"]["batch"] = 32;
    return c;
}

// Forks a child that runs f (its result is the exit code) and never returns into the test.
// The child gives up by itself after a while, so a lost parent leaves no orphan running.
#if defined(__SANITIZE_THREAD__)
constexpr bool kForkWorks = false; // TSan refuses threads in a child forked from threads
#else
constexpr bool kForkWorks = true;
#endif

template <typename F> pid_t forkChild(F f)
{
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::alarm(120);
        int code = 99;
        try {
            code = f();
        } catch (const std::exception &e) {
            std::fprintf(stderr, "child: %s\n", e.what());
            code = 98;
        }
        std::fflush(stderr);
        ::_exit(code);
    }
    return pid;
}

int waitChild(pid_t pid)
{
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
}

QString describeStatus(int status)
{
    if (WIFEXITED(status))
        return QStringLiteral("exited with %1").arg(WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return QStringLiteral("killed by signal %1").arg(WTERMSIG(status));
    return QStringLiteral("status %1").arg(status);
}

std::size_t openDescriptors()
{
    std::error_code ec;
    std::size_t n = 0;
    for (auto it = fs::directory_iterator("/proc/self/fd", ec); !ec && it != fs::directory_iterator(); it.increment(ec))
        ++n;
    return n;
}

using RecordKey = std::tuple<int, int, int, std::uint32_t, std::int64_t, std::int64_t, double>;
RecordKey keyOf(const Record &r)
{
    return {r.worker, int(r.kind), r.code, r.step, r.start, r.end, r.value};
}

std::map<RecordKey, int> recordsOf(const TraceModel &trace)
{
    std::map<RecordKey, int> all;
    trace.forEachRecord([&](const Record &r) { ++all[keyOf(r)]; });
    return all;
}

std::string largestRowFile(const std::string &dir)
{
    std::string best;
    std::uintmax_t bestSize = 0;
    for (const auto &entry : fs::directory_iterator(dir))
        if (entry.path().extension() == ".syr" && entry.file_size() > bestSize) {
            bestSize = entry.file_size();
            best = entry.path().filename().string();
        }
    return best;
}

// Whether the start was refused cleanly: a StoreError naming the folder, no worker started.
// Empty when so, else what went wrong.
std::string refusedStart(Engine &e, const std::string &dir)
{
    try {
        e.start();
    } catch (const StoreError &err) {
        const std::string what = err.what();
        if (what.find(dir) == std::string::npos)
            return "the error does not name the folder " + dir + ": " + what;
        if (e.state() != RunState::Idle || e.finished() || e.progress() != 0 || e.events().size() != 0)
            return std::string("a worker ran after the refused start (state ") + runStateName(e.state()) + ")";
        return {};
    } catch (const std::exception &err) {
        return std::string("not a StoreError: ") + err.what();
    }
    e.requestStop();
    e.wait();
    return "start() did not throw";
}

} // namespace

void TestStoreFaults::cleanup()
{
    QString why;
    if (!m_mounted.isEmpty() && !unmountTmpfs(&why)) {
        // Something still holds a file there (a leaked descriptor): say so, then detach.
        qWarning("%s", qPrintable(why));
        ::umount2(QFile::encodeName(m_mounted).constData(), MNT_DETACH);
        m_mounted.clear();
    }
}

bool TestStoreFaults::unmountTmpfs(QString *why)
{
    const QByteArray path = QFile::encodeName(m_mounted);
    if (::umount2(path.constData(), 0) != 0) {
        *why = QStringLiteral("umount %1: %2").arg(m_mounted, QString::fromLocal8Bit(std::strerror(errno)));
        return false;
    }
    m_mounted.clear();
    return true;
}

bool TestStoreFaults::mountSmallTmpfs(const QString &dir, QString *why)
{
    if (::geteuid() != 0) {
        *why = QStringLiteral("mounting a 1 MB tmpfs needs root");
        return false;
    }
    const QByteArray path = QFile::encodeName(dir);
    if (::mount("tmpfs", path.constData(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") != 0) {
        *why = QStringLiteral("mount -t tmpfs -o size=1m failed: ") + QString::fromLocal8Bit(std::strerror(errno));
        return false;
    }
    m_mounted = dir;
    return true;
}

// Root writes through a chmod 0500 folder, so an unwritable folder is tried as another user:
// a child that drops to nobody and starts a run into a root-owned 0700 folder.
void TestStoreFaults::unwritableForAnotherUser()
{
    if (::geteuid() != 0)
        QSKIP("not root: unwritableFolder's read-only rows cover an unprivileged user");
    if (!kForkWorks)
        QSKIP("ThreadSanitizer cannot run a child forked from a process with threads; the dev and asan runs cover it");
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    QVERIFY(::chmod(QFile::encodeName(tmp.path()).constData(), 0755) == 0); // only locked/ blocks
    const std::string locked = (fs::path(tmp.path().toStdString()) / "locked").string();
    QVERIFY(::mkdir(locked.c_str(), 0700) == 0);
    const std::vector<std::string> targets = {locked + "/run", locked};
    const pid_t pid = forkChild([&] {
        if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)
            return 40;
        PreparedRun p = prepareRun(smallRun(2));
        for (std::size_t i = 0; i < targets.size(); ++i) {
            Engine e(p.config, p.train, p.eval);
            e.setOutputDirectory(targets[i]);
            const std::string problem = refusedStart(e, targets[i]);
            if (!problem.empty()) {
                std::fprintf(stderr, "child, %s: %s\n", targets[i].c_str(), problem.c_str());
                return 10 + int(i);
            }
        }
        return 0;
    });
    QVERIFY(pid > 0);
    const int status = waitChild(pid);
    QVERIFY2(!WIFEXITED(status) || WEXITSTATUS(status) != 40, "setuid(65534) failed in the child");
    QVERIFY2(WIFEXITED(status) && WEXITSTATUS(status) == 0,
             qPrintable(QStringLiteral("the child as nobody %1 (10: locked/run, 11: locked itself; "
                                       "its stderr says why)").arg(describeStatus(status))));
    QVERIFY(!fs::exists(locked + "/run"));
}

void TestStoreFaults::killedRunOpensAsInterrupted()
{
    if (!kForkWorks)
        QSKIP("ThreadSanitizer cannot run a child forked from a process with threads; the dev and asan runs cover it");
    QVERIFY(m_killed.isValid());
    const std::string dir = (fs::path(m_killed.path().toStdString()) / "run").string();
    const pid_t pid = forkChild([&] {
        PreparedRun p = prepareRun(smallRun(4));
        Engine e(p.config, p.train, p.eval);
        e.setOutputDirectory(dir);
        e.start();
        while (!e.waitFor(std::chrono::seconds(1))) {
        }
        std::fprintf(stderr, "child: the run ended (%s) %s\n", runStateName(e.state()), e.error().c_str());
        return 3;
    });
    QVERIFY(pid > 0);
    // Until the row file holds two whole blocks (flushed about once a second) and the running
    // summary is there: polled for that state with a deadline, not slept for.
    const std::string row = dir + "/w0.syr";
    bool ready = false, ended = false;
    int status = 0;
    (void)QTest::qWaitFor([&] { // ready, or not: the kill comes either way, then the verdict
        if (::waitpid(pid, &status, WNOHANG) == pid)
            return ended = true;
        std::error_code ec;
        if (fs::exists(dir + "/summary.json", ec) && fs::file_size(row, ec) > kChunkFileHeaderBytes + kBlockHeaderBytes) {
            try {
                ready = ChunkReader(row).blocks().size() >= 2;
            } catch (const StoreError &) {
                // a header being written as we look: look again
            }
        }
        return ready;
    }, 60000);
    if (ended)
        QFAIL(qPrintable(QStringLiteral("the child ended before the kill: ") + describeStatus(status)));
    ::kill(pid, SIGKILL);
    status = waitChild(pid);
    QVERIFY2(ready, "w0.syr did not get two blocks within 60 s");
    QVERIFY2(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, qPrintable(describeStatus(status)));

    OpenedRun opened;
    try {
        opened = openRunDirectory(dir);
    } catch (const std::exception &e) {
        QFAIL(e.what());
    }
    QVERIFY(opened.interrupted);
    QCOMPARE(opened.summary.value("status", ""), std::string("interrupted"));
    QVERIFY(opened.trace->spanCount() > 0);
    qInfo("killed run: %llu spans, %llu torn bytes", (unsigned long long)opened.trace->spanCount(),
          (unsigned long long)opened.tornBytes);
    m_killedRun = dir;
}

// A kill or power loss cuts a row file anywhere inside the block being written. Wherever the
// cut, the directory opens (as interrupted), the cut block is dropped whole and the records
// read back are exactly those of the blocks before it.
void TestStoreFaults::tornTailAtRandomPositions()
{
    if (m_killedRun.empty())
        QSKIP("killedRunOpensAsInterrupted left no run to cut");
    const std::string name = largestRowFile(m_killedRun);
    QVERIFY(!name.empty());
    const ChunkReader original(m_killedRun + "/" + name);
    QVERIFY(!original.blocks().empty());
    const BlockInfo last = original.blocks().back();
    const std::uint64_t lastEnd = last.offset + kBlockHeaderBytes + last.packedBytes;
    const OpenedRun whole = openRunDirectory(m_killedRun);
    const std::map<RecordKey, int> wholeRecords = recordsOf(*whole.trace);
    const std::uint64_t wholeCount = whole.trace->recordCount();
    // The records of the cut row that survive: those of every block before the last.
    std::map<RecordKey, int> kept;
    std::vector<Record> buf;
    for (std::size_t b = 0; b + 1 < original.blocks().size(); ++b) {
        original.readBlock(b, buf);
        for (const Record &r : buf)
            ++kept[keyOf(r)];
    }
    const int worker = original.row().worker;
    const bool dataLane = original.row().kind == RowKind::DataLane;

    std::mt19937 rng(20240607);
    std::uniform_int_distribution<std::uint64_t> at(last.offset, lastEnd - 1);
    for (int i = 0; i < 20; ++i) {
        const std::uint64_t cut = at(rng);
        const QString where = QStringLiteral("%1 cut at byte %2 (last block %3..%4)")
                                  .arg(QString::fromStdString(name)).arg(cut).arg(last.offset).arg(lastEnd);
        QTemporaryDir copy;
        QVERIFY(copy.isValid());
        const std::string dir = (fs::path(copy.path().toStdString()) / "run").string();
        fs::copy(m_killedRun, dir, fs::copy_options::recursive);
        fs::resize_file(dir + "/" + name, cut);

        OpenedRun opened;
        try {
            opened = openRunDirectory(dir);
        } catch (const std::exception &e) {
            QFAIL(qPrintable(where + QStringLiteral(": ") + QString::fromStdString(e.what())));
        }
        QVERIFY2(opened.interrupted, qPrintable(where));
        QCOMPARE(opened.summary.value("status", ""), std::string("interrupted"));
        QVERIFY2(opened.tornBytes > 0 || opened.trace->recordCount() < wholeCount, qPrintable(where));
        const ChunkReader cutReader(dir + "/" + name);
        QCOMPARE(cutReader.blocks().size(), original.blocks().size() - 1);
        QCOMPARE(cutReader.records(), original.records() - last.count);
        QCOMPARE(cutReader.tornBytes(), cut - last.offset);
        QCOMPARE(opened.trace->recordCount(), wholeCount - last.count - (whole.trace->recordCount() - wholeCount));

        // Every record read back was in the uncut run; the cut row's are exactly its earlier blocks.
        std::map<RecordKey, int> remaining = wholeRecords;
        std::map<RecordKey, int> cutRow;
        try {
            opened.trace->forEachRecord([&](const Record &r) {
                const RecordKey k = keyOf(r);
                auto it = remaining.find(k);
                if (it == remaining.end() || it->second == 0)
                    throw std::runtime_error("a record that the uncut run does not hold");
                --it->second;
                const bool inLane = r.isSpan() && r.lane() == Lane::Data && opened.config.prefetch;
                if (r.worker == worker && inLane == dataLane)
                    ++cutRow[k];
            });
        } catch (const std::exception &e) {
            QFAIL(qPrintable(where + QStringLiteral(": ") + QString::fromStdString(e.what())));
        }
        QVERIFY2(cutRow == kept, qPrintable(where + QStringLiteral(": the cut row's records are not its earlier blocks'")));
    }
}

void TestStoreFaults::unwritableFolder_data()
{
    QTest::addColumn<QString>("kind");
    QTest::newRow("under a regular file") << "file";
    QTest::newRow("on /proc") << "proc";
    QTest::newRow("inside a read-only folder") << "ro-parent";
    QTest::newRow("a read-only folder itself") << "ro-self";
}

void TestStoreFaults::unwritableFolder()
{
    QFETCH(QString, kind);
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    const fs::path base = tmp.path().toStdString();
    std::string dir;
    if (kind == QLatin1String("file")) {
        QFile f(QString::fromStdString((base / "file.txt").string()));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("not a folder\n");
        f.close();
        dir = (base / "file.txt" / "run").string();
    } else if (kind == QLatin1String("proc")) {
        if (!fs::is_directory("/proc/self"))
            QSKIP("no /proc here");
        dir = "/proc/syncopate-test/run";
    } else {
        if (::geteuid() == 0)
            QSKIP("root writes through chmod 0500; unwritableForAnotherUser tries it as nobody");
        const fs::path ro = base / "ro";
        QVERIFY(::mkdir(ro.c_str(), 0500) == 0);
        dir = kind == QLatin1String("ro-parent") ? (ro / "run").string() : ro.string();
    }
    PreparedRun p = prepareRun(smallRun(2));
    Engine e(p.config, p.train, p.eval);
    e.setOutputDirectory(dir);
    const std::string problem = refusedStart(e, dir);
    QVERIFY2(problem.empty(), problem.c_str());
    if (kind != QLatin1String("ro-self"))
        QVERIFY(!fs::exists(dir));
    else
        QVERIFY(fs::is_empty(dir));
    if (kind.startsWith(QLatin1String("ro")))
        ::chmod((base / "ro").c_str(), 0700); // so that QTemporaryDir can remove it
}

// A disk that is full when the run starts: refused like an unwritable folder, and nothing of
// the half-made directory stays open (the tmpfs unmounts).
void TestStoreFaults::fullDiskAtStart()
{
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    QString why;
    if (!mountSmallTmpfs(tmp.path(), &why))
        QSKIP(qPrintable(why));
    const std::string mount = tmp.path().toStdString();
    // Leave about 100 KB: config.json, the row files and metrics.csv fit, params-init (307 KB)
    // does not.
    {
        struct statvfs vfs {};
        QVERIFY(::statvfs(mount.c_str(), &vfs) == 0);
        const std::uint64_t fill = std::uint64_t(vfs.f_bavail) * vfs.f_frsize - 100 * 1024;
        QFile f(QString::fromStdString(mount + "/filler"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        QCOMPARE(f.write(QByteArray(qsizetype(fill), 'x')), qint64(fill));
    }
    const std::size_t fdsBefore = openDescriptors();
    {
        PreparedRun p = prepareRun(bigParamsRun());
        Engine e(p.config, p.train, p.eval);
        const std::string dir = mount + "/run";
        e.setOutputDirectory(dir);
        const std::string problem = refusedStart(e, dir);
        QVERIFY2(problem.empty(), problem.c_str());
    }
    QCOMPARE(openDescriptors(), fdsBefore);
    QVERIFY2(unmountTmpfs(&why), qPrintable(why));
}

// The disk fills while the run goes: the run fails with an error that says the run folder
// could not be written, and the directory keeps what was recorded until then.
void TestStoreFaults::diskFullMidRun()
{
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    QString why;
    if (!mountSmallTmpfs(tmp.path(), &why))
        QSKIP(qPrintable(why));
    const std::string dir = tmp.path().toStdString() + "/run";
    PreparedRun p = prepareRun(bigParamsRun());
    {
        Engine e(p.config, p.train, p.eval);
        e.setOutputDirectory(dir);
        try {
            e.start();
        } catch (const std::exception &err) {
            QFAIL(qPrintable(QStringLiteral("the start did not fit in 1 MB: ") + QString::fromStdString(err.what())));
        }
        // metrics.csv and the row files fill the remaining ~700 KB within seconds.
        if (!e.waitFor(std::chrono::seconds(120))) {
            e.requestStop();
            e.wait();
            QFAIL(qPrintable(QStringLiteral("the run did not end within 120 s on a full disk; %1 steps")
                                 .arg(e.progress())));
        }
        QCOMPARE(e.state(), RunState::Failed);
        const std::string error = e.error();
        QVERIFY2(error.find("could not be written") != std::string::npos, error.c_str());
        QVERIFY2(error.find(dir) != std::string::npos, error.c_str());
        QVERIFY(e.progress() > 0);
        QCOMPARE(e.summary().value("status", ""), std::string("failed"));
        qInfo("failed after %lld steps: %s", (long long)e.progress(), error.c_str());
    }
    OpenedRun opened;
    try {
        opened = openRunDirectory(dir);
    } catch (const std::exception &err) {
        QFAIL(err.what());
    }
    QVERIFY(opened.trace->spanCount() > 0);
    const std::string status = opened.summary.value("status", "");
    QVERIFY2(status == "interrupted" || status == "failed", status.c_str());
    qInfo("the directory opens as %s, %llu spans, %llu torn bytes", status.c_str(),
          (unsigned long long)opened.trace->spanCount(), (unsigned long long)opened.tornBytes);
    opened = {}; // its row files closed, so that the tmpfs unmounts before tmp is removed
    QVERIFY2(unmountTmpfs(&why), qPrintable(why));
}

QTEST_GUILESS_MAIN(TestStoreFaults)
#include "tst_storefaults.moc"
