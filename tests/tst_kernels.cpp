// The CPU backend against plain double-precision loops.
#include "cpu/cpudevice.h"

#include <QTest>

#include <cmath>
#include <random>
#include <vector>

using namespace syncopate;

class TestKernels : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void gemm_data();
    void gemm();
    void softmaxCrossEntropy();
    void meanSquaredError();
    void biasAndReductions();
    void largeArraysUseTheParallelPath();
};

static std::vector<float> randomVector(std::size_t n, unsigned seed)
{
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> d(-1, 1);
    std::vector<float> v(n);
    for (auto &x : v)
        x = d(g);
    return v;
}

void TestKernels::gemm_data()
{
    QTest::addColumn<bool>("ta");
    QTest::addColumn<bool>("tb");
    QTest::newRow("NN") << false << false;
    QTest::newRow("NT") << false << true;
    QTest::newRow("TN") << true << false;
    QTest::newRow("TT") << true << true;
}

void TestKernels::gemm()
{
    QFETCH(bool, ta);
    QFETCH(bool, tb);
    CpuDevice dev;
    const int m = 7, n = 5, k = 9;
    auto A = randomVector(std::size_t(m) * k, 1), B = randomVector(std::size_t(k) * n, 2);
    std::vector<float> C(std::size_t(m) * n, 0.5f);
    const int lda = ta ? m : k, ldb = tb ? k : n;
    dev.gemm(ta, tb, m, n, k, 2.0f, A.data(), lda, B.data(), ldb, 1.0f, C.data(), n);
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            double s = 0;
            for (int p = 0; p < k; ++p) {
                const double a = ta ? A[std::size_t(p) * m + i] : A[std::size_t(i) * k + p];
                const double b = tb ? B[std::size_t(j) * k + p] : B[std::size_t(p) * n + j];
                s += a * b;
            }
            QVERIFY(std::abs(C[std::size_t(i) * n + j] - (2 * s + 0.5)) < 1e-5);
        }
}

void TestKernels::softmaxCrossEntropy()
{
    CpuDevice dev;
    const float logits[] = {1.0f, 2.0f, 3.0f, -1.0f, 0.0f, 1000.0f};
    const std::int32_t labels[] = {2, 0};
    float d[6];
    const double loss = dev.softmaxCrossEntropy(logits, labels, 2, 3, d);
    const double row0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0;
    const double row1 = 1001.0; // stable for large logits: logsumexp ~ 1000, minus -1
    QVERIFY(std::abs(loss - (row0 + row1) / 2) < 1e-4);
    double sum0 = 0;
    for (int c = 0; c < 3; ++c)
        sum0 += d[c];
    QVERIFY(std::abs(sum0) < 1e-6); // softmax - onehot sums to zero
    QCOMPARE(dev.countCorrect(logits, labels, 2, 3), 1);
    const std::int32_t bad[] = {3, 0};
    QVERIFY_THROWS_EXCEPTION(DeviceError, dev.softmaxCrossEntropy(logits, bad, 2, 3, d));
}

void TestKernels::meanSquaredError()
{
    CpuDevice dev;
    const float p[] = {1, 2, 3, 4}, t[] = {0, 2, 5, 4};
    float d[4];
    QCOMPARE(dev.meanSquaredError(p, t, 4, d), 5.0 / 4);
    QCOMPARE(d[0], 0.5f);
    QCOMPARE(d[2], -1.0f);
}

void TestKernels::biasAndReductions()
{
    CpuDevice dev;
    std::vector<float> y = {1, 2, 3, 4, 5, 6};
    const float b[] = {10, 20, 30};
    dev.addBias(y.data(), b, 2, 3);
    QCOMPARE(y[4], 25.0f);
    float db[3];
    dev.biasGrad(y.data(), db, 2, 3);
    QCOMPARE(db[0], 11.0f + 14.0f);
    QCOMPARE(dev.sumSquares(b, 3), 1400.0);
    QVERIFY(dev.allFinite(b, 3));
    y[1] = std::nanf("");
    QVERIFY(!dev.allFinite(y.data(), y.size()));
}

void TestKernels::largeArraysUseTheParallelPath()
{
    CpuDevice dev(2); // one thread: the worker's own, no split
    const std::size_t n = (1 << 18) + 3;
    auto x = randomVector(n, 3), y = randomVector(n, 4), ref = y;
    dev.axpy(0.5f, x.data(), y.data(), n);
    for (std::size_t i = 0; i < n; i += 997)
        QCOMPARE(y[i], ref[i] + 0.5f * x[i]);
    std::vector<float> a(n);
    dev.activationForward(Activation::Relu, x.data(), a.data(), n);
    for (std::size_t i = 0; i < n; i += 991)
        QCOMPARE(a[i], std::max(0.0f, x[i]));
}

QTEST_APPLESS_MAIN(TestKernels)
#include "tst_kernels.moc"
