// Gradient exchanges on the CPU: the in-place slice average and the host-staged one give the
// same mean bit for bit, and that mean is the plain average computed independently in double.
#include "cpu/cpudevice.h"
#include "exchange.h"

#include <QTest>

#include <barrier>
#include <cstring>
#include <random>
#include <thread>

using namespace syncopate;

class TestExchange : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void meanOfReplicas_data();
    void meanOfReplicas();
    void autoPicksSharedMemoryOnTheCpu();
    void cpuRanksOwnDisjointSlices();
    void fusedMeanEqualsThePasses();
    void oneRankIsItsOwnMean();
};

namespace {

// Runs the three phases for every rank on its own thread, with barriers between them, as the
// engine does; returns each rank's view of the mean.
std::vector<std::vector<float>> exchange(GradientExchange &ex, int ranks, std::size_t count)
{
    auto out = std::vector<std::vector<float>>(std::size_t(ranks), std::vector<float>(count));
    std::barrier sync(ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
        threads.emplace_back([&, r] {
            ex.prepare(r);
            sync.arrive_and_wait();
            ex.reduce(r);
            sync.arrive_and_wait();
            const float *mean = ex.finish(r);
            std::copy(mean, mean + count, out[std::size_t(r)].begin());
        });
    for (auto &t : threads)
        t.join();
    return out;
}

} // namespace

void TestExchange::meanOfReplicas_data()
{
    QTest::addColumn<int>("ranks");
    QTest::addColumn<int>("count");
    QTest::newRow("1 rank") << 1 << 100;
    QTest::newRow("3 ranks, uneven slices") << 3 << 1001;
    QTest::newRow("4 ranks") << 4 << 4096;
    QTest::newRow("more ranks than elements") << 5 << 3;
}

void TestExchange::meanOfReplicas()
{
    QFETCH(int, ranks);
    QFETCH(int, count);
    const auto n = std::size_t(count);
    std::vector<std::unique_ptr<Device>> owned;
    std::vector<Device *> devices;
    std::vector<DeviceBuffer> grads;
    std::vector<float *> gradPtrs;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<double> expected(n, 0.0);
    for (int r = 0; r < ranks; ++r) {
        owned.push_back(std::make_unique<CpuDevice>());
        devices.push_back(owned.back().get());
        grads.emplace_back(*owned.back(), n);
        std::vector<float> host(n);
        for (std::size_t i = 0; i < n; ++i) {
            host[i] = normal(rng) * float(r + 1);
            expected[i] += double(host[i]) / ranks;
        }
        owned.back()->upload(grads.back().data(), host.data(), n);
        gradPtrs.push_back(grads.back().data());
    }
    auto shared = createGradientExchange(devices, gradPtrs, n, ExchangeKind::SharedMemory);
    auto staged = createGradientExchange(devices, gradPtrs, n, ExchangeKind::HostStaging);
    QCOMPARE(shared->algorithm(), std::string("shared memory"));
    QCOMPARE(staged->algorithm(), std::string("host staging"));
    const auto a = exchange(*shared, ranks, n);
    const auto b = exchange(*staged, ranks, n);
    for (int r = 0; r < ranks; ++r) {
        QCOMPARE(a[std::size_t(r)], a[0]); // every rank sees the same mean
        QCOMPARE(b[std::size_t(r)], a[0]); // and both exchanges agree bit for bit
    }
    for (std::size_t i = 0; i < n; ++i)
        QVERIFY2(std::abs(double(a[0][i]) - expected[i]) <= 1e-6 * (1.0 + std::abs(expected[i])),
                 qPrintable(QStringLiteral("element %1: %2 vs %3").arg(i).arg(a[0][i]).arg(expected[i])));
    // A second round reuses the buffers: new gradients give their own mean.
    for (auto &g : grads)
        owned.front()->fill(g.data(), 2.0f, n);
    for (const auto &v : exchange(*staged, ranks, n))
        QCOMPARE(v, std::vector<float>(n, 2.0f));
    for (const auto &v : exchange(*shared, ranks, n))
        QCOMPARE(v, std::vector<float>(n, 2.0f));
}

void TestExchange::autoPicksSharedMemoryOnTheCpu()
{
    CpuDevice a, b;
    DeviceBuffer ga(a, 8), gb(b, 8);
    auto ex = createGradientExchange({&a, &b}, {ga.data(), gb.data()}, 8);
    QCOMPARE(ex->algorithm(), std::string("shared memory"));
}

// On the CPU the ranks update slices of one copy of the parameters: the slices are the ones
// reduce() averages, and together they cover every parameter once. One rank keeps its own.
void TestExchange::cpuRanksOwnDisjointSlices()
{
    for (const std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(300001)})
        for (const int ranks : {1, 2, 3, 5}) {
            std::vector<std::unique_ptr<CpuDevice>> owned;
            std::vector<Device *> devices;
            std::vector<DeviceBuffer> grads;
            std::vector<float *> ptrs;
            for (int r = 0; r < ranks; ++r) {
                owned.push_back(std::make_unique<CpuDevice>());
                devices.push_back(owned.back().get());
                grads.emplace_back(*owned.back(), n);
                ptrs.push_back(grads.back().data());
            }
            auto ex = createGradientExchange(devices, ptrs, n);
            if (ranks == 1) {
                QVERIFY(!ex->ownedSlice(0));
                continue;
            }
            std::size_t next = 0;
            for (int r = 0; r < ranks; ++r) {
                const auto slice = ex->ownedSlice(r);
                QVERIFY(slice);
                QCOMPARE(slice->begin, next);
                QVERIFY(slice->end >= slice->begin);
                next = slice->end;
            }
            QCOMPARE(next, n);
            // Staged through host memory, every rank applies the whole mean.
            auto staged = createGradientExchange(devices, ptrs, n, ExchangeKind::HostStaging);
            QVERIFY(!staged->ownedSlice(0));
        }
}

// The CPU's one-pass mean (blocks of dst summed and scaled while in L1, on several threads)
// gives the bits of the passes it replaces: copy the first, axpy(1) each other, scale by 1/k.
void TestExchange::fusedMeanEqualsThePasses()
{
    CpuDevice dev(2); // two threads: ranges split the work as they do with threads_per_worker 2
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const std::size_t k : {1u, 2u, 3u, 5u, 16u})
        for (const std::size_t n : {1u, 1023u, 1025u, 4099u, 300001u}) {
            std::vector<std::vector<float>> src(k, std::vector<float>(n));
            std::vector<const float *> ptrs;
            for (auto &v : src) {
                for (auto &x : v)
                    x = normal(rng) * 1e3f;
                ptrs.push_back(v.data());
            }
            std::vector<float> fused(n, -1.0f), passes(n, -2.0f);
            dev.mean(ptrs.data(), k, fused.data(), n);
            dev.Device::mean(ptrs.data(), k, passes.data(), n);
            QVERIFY2(std::memcmp(fused.data(), passes.data(), n * sizeof(float)) == 0,
                     qPrintable(QStringLiteral("k = %1, n = %2").arg(k).arg(n)));
        }
}

// One worker's gradients are the mean: finish() gives its own buffer and nothing is moved.
void TestExchange::oneRankIsItsOwnMean()
{
    CpuDevice a;
    DeviceBuffer g(a, 16);
    a.fill(g.data(), 3.0f, 16);
    auto ex = createGradientExchange({&a}, {g.data()}, 16);
    QCOMPARE(ex->reduce(0), std::size_t(0));
    QCOMPARE(ex->finish(0), static_cast<const float *>(g.data()));
}

QTEST_GUILESS_MAIN(TestExchange)
#include "tst_exchange.moc"
