// A worker's step allocates nothing: whatever a worker thread allocates (malloc, operator new,
// oneTBB's task allocations that go through malloc) happens while it sets up, so a run of many
// steps allocates on its worker threads what a run of few steps does. Not exactly: oneTBB sets
// up per-thread state when a new thread first meets it, and how often varies by one or two
// from run to run; one allocation per step (or per evaluation) would add hundreds (or tens).
//
// This executable replaces malloc and its kin with counting wrappers around glibc's own
// allocator, counting only on threads the engine named "syncopate-w<N>". Sanitizers replace
// malloc themselves, so under them the test is skipped.
//
// oneDNN's execute() allocates small blocks of its own on every call (the table of a call's
// arguments) and frees them before it returns; that is not ours to remove. Allocations made
// while a worker is inside a oneDNN call are counted apart: each must be small (<= 1 KiB), all
// of them freed before the call returns, and as many per step in a long run as in a short one.
#include "testutil.h"

#include "cpu/onednn.h"

#include <atomic>
#include <cstring>

#include <malloc.h>
#include <sys/prctl.h>

using namespace syncopate;
using namespace syncopate::test;

#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define SYNCOPATE_COUNT_ALLOCATIONS 1

extern "C" {
void *__libc_malloc(std::size_t);
void *__libc_calloc(std::size_t, std::size_t);
void *__libc_realloc(void *, std::size_t);
void *__libc_memalign(std::size_t, std::size_t);
void __libc_free(void *);
}

namespace {

std::atomic<long> g_workerAllocations{0};
// Inside oneDNN calls on worker threads: how many, the largest, and bytes not yet freed.
std::atomic<long> g_libraryAllocations{0};
std::atomic<long> g_libraryLargest{0};
std::atomic<long> g_libraryLiveBytes{0};
std::vector<int> *g_escape = nullptr;

// Whether the calling thread is a worker, read from its name (prctl: no allocation, no /proc).
// A worker names itself first thing; once seen as a worker it stays one.
bool onWorkerThread()
{
    static thread_local bool worker = false;
    if (worker)
        return true;
    char name[16] = {};
    if (prctl(PR_GET_NAME, name) == 0 && std::strncmp(name, "syncopate-w", 11) == 0)
        worker = true;
    return worker;
}

void count(std::size_t bytes)
{
    if (!onWorkerThread())
        return;
    if (onednn::insideCalls() == 0) {
        g_workerAllocations.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    g_libraryAllocations.fetch_add(1, std::memory_order_relaxed);
    long largest = g_libraryLargest.load(std::memory_order_relaxed);
    while (long(bytes) > largest &&
           !g_libraryLargest.compare_exchange_weak(largest, long(bytes), std::memory_order_relaxed)) {
    }
}

// Usable sizes, so that what is allocated and what is freed inside oneDNN add up exactly.
void *counted(void *p)
{
    if (p && onWorkerThread() && onednn::insideCalls() > 0)
        g_libraryLiveBytes.fetch_add(long(malloc_usable_size(p)), std::memory_order_relaxed);
    return p;
}

} // namespace

extern "C" {
void uncount(void *p)
{
    if (p && onWorkerThread() && onednn::insideCalls() > 0)
        g_libraryLiveBytes.fetch_sub(long(malloc_usable_size(p)), std::memory_order_relaxed);
}
void *malloc(std::size_t n)
{
    count(n);
    return counted(__libc_malloc(n));
}
void *calloc(std::size_t n, std::size_t size)
{
    count(n * size);
    return counted(__libc_calloc(n, size));
}
void *realloc(void *p, std::size_t n)
{
    count(n);
    uncount(p);
    return counted(__libc_realloc(p, n));
}
void *memalign(std::size_t alignment, std::size_t n)
{
    count(n);
    return counted(__libc_memalign(alignment, n));
}
void *aligned_alloc(std::size_t alignment, std::size_t n)
{
    count(n);
    return counted(__libc_memalign(alignment, n));
}
int posix_memalign(void **out, std::size_t alignment, std::size_t n)
{
    count(n);
    void *p = counted(__libc_memalign(alignment, n));
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}
void free(void *p)
{
    uncount(p);
    __libc_free(p);
}
}
#endif

class TestHotPath : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void stepsAllocateNothing_data();
    void stepsAllocateNothing();
};

void TestHotPath::initTestCase()
{
#ifndef SYNCOPATE_COUNT_ALLOCATIONS
    QSKIP("sanitizers replace malloc; allocations are counted in the plain build");
#else
    // The counter sees a worker's allocations: a thread named like a worker that allocates
    // is counted, so a count of zero below means nothing was allocated, not nothing seen.
    long seen = 0;
    std::thread t([&seen] {
        pthread_setname_np(pthread_self(), "syncopate-w99");
        const long before = g_workerAllocations.load();
        void *volatile p = std::malloc(64);
        std::free(p);
        g_escape = new std::vector<int>(1000); // escapes, so it cannot be elided
        seen = g_workerAllocations.load() - before;
    });
    t.join();
    delete g_escape;
    QVERIFY2(seen >= 3, qPrintable(QStringLiteral("counted %1 of 3 allocations").arg(seen)));
#endif
}

void TestHotPath::stepsAllocateNothing_data()
{
    QTest::addColumn<QByteArray>("config");
    QTest::newRow("sync") << QByteArray(R"({"mode": "sync"})");
    QTest::newRow("sync, prefetch off") << QByteArray(R"({"mode": "sync", "data.prefetch": 0})");
    QTest::newRow("sync, prefetch 3, costly input")
        << QByteArray(R"({"mode": "sync", "data.prefetch": 3, "data.cost_us": 5})");
    QTest::newRow("async, prefetch 2") << QByteArray(R"({"mode": "async", "data.prefetch": 2})");
    QTest::newRow("checkpointed") << QByteArray(R"({"mode": "checkpointed", "model.layers": [16, 32, 32, 32, 32, 4]})");
    QTest::newRow("async") << QByteArray(R"({"mode": "async"})");
    QTest::newRow("async, staleness bound") << QByteArray(R"({"mode": "async", "async.max_staleness": 1})");
    QTest::newRow("sync, straggler and jitter")
        << QByteArray(R"({"mode": "sync", "workers_slowdown": [1, 1.5, 1], "jitter": 0.5})");
    QTest::newRow("sync, evaluation every 10 steps") << QByteArray(R"({"mode": "sync", "eval.every": 10})");
    QTest::newRow("momentum") << QByteArray(R"({"mode": "sync", "train.optimizer": "momentum"})");
    QTest::newRow("adam") << QByteArray(R"({"mode": "async", "train.optimizer": "adam"})");
}

void TestHotPath::stepsAllocateNothing()
{
#ifdef SYNCOPATE_COUNT_ALLOCATIONS
    QFETCH(QByteArray, config);
    nlohmann::json c = {{"workers", 3},
                        {"model.layers", {16, 32, 32, 4}},
                        {"data.source", "blobs"},
                        {"data.samples", 512},
                        {"train.batch", 8},
                        {"eval.samples", 64}};
    c.update(nlohmann::json::parse(config.constData()));
    struct Counts {
        long ours = 0, library = 0;
    };
    auto workerAllocations = [&](int steps) {
        c["train.steps"] = steps;
        const long before = g_workerAllocations.load();
        const long libraryBefore = g_libraryAllocations.load();
        auto engine = runToEnd(c);
        [[maybe_unused]] const auto finished = engine->state();
        return Counts{g_workerAllocations.load() - before, g_libraryAllocations.load() - libraryBefore};
    };
    // A first run pays for what a process sets up once (oneTBB's arena, OpenMP's per-thread
    // state). Then few steps and many (many epochs of 512 samples, 90 evaluations): the
    // difference is what the extra steps allocated on the workers' threads.
    workerAllocations(30);
    const Counts few = workerAllocations(30);
    const Counts many = workerAllocations(900);
    QVERIFY2(std::abs(many.ours - few.ours) <= 2,
             qPrintable(QStringLiteral("workers allocated %1 times in a 30-step run, %2 in a 900-step run")
                            .arg(few.ours)
                            .arg(many.ours)));
    // oneDNN's own: small, all freed, and the same number per step however long the run.
    const long largest = g_libraryLargest.load();
    QVERIFY2(largest <= 1024, qPrintable(QStringLiteral("oneDNN allocated a block of %1 bytes").arg(largest)));
    QCOMPARE(g_libraryLiveBytes.load(), 0L);
    const double perStepFew = double(few.library) / 30, perStepMany = double(many.library) / 900;
    qInfo("inside oneDNN calls: %.2f allocations per step (30 steps: %ld, 900 steps: %ld), "
          "largest %ld bytes, all freed",
          perStepMany, few.library, many.library, largest);
    QVERIFY2(perStepMany <= perStepFew * 1.05 + 0.1,
             qPrintable(QStringLiteral("oneDNN allocations per step grew from %1 to %2")
                            .arg(perStepFew)
                            .arg(perStepMany)));
#endif
}

QTEST_APPLESS_MAIN(TestHotPath)
#include "tst_hotpath.moc"
