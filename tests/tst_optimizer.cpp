// The first steps of each optimizer against values worked out by hand from torch.optim's
// update equations.
#include "cpu/cpudevice.h"
#include "optimizer.h"

#include <QTest>

#include <cmath>

using namespace syncopate;

class TestOptimizer : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void sgd();
    void momentum();
    void adam();
    void staleScale();
};

void TestOptimizer::sgd()
{
    CpuDevice dev;
    Optimizer opt(dev, Optimizer::Kind::Sgd, 2, 0.1f);
    float p[] = {1.0f, -2.0f};
    const float g[] = {0.5f, -1.0f};
    opt.step(p, g);
    QCOMPARE(p[0], 0.95f);
    QCOMPARE(p[1], -1.9f);
}

void TestOptimizer::momentum()
{
    // torch: buf1 = g1, p1 = p0 - lr*g1; buf2 = m*buf1 + g2, p2 = p1 - lr*buf2
    CpuDevice dev;
    Optimizer opt(dev, Optimizer::Kind::Momentum, 1, 0.1f, 0.9f);
    float p[] = {1.0f};
    const float g1[] = {1.0f}, g2[] = {2.0f};
    opt.step(p, g1);
    QVERIFY(std::abs(p[0] - 0.9f) < 1e-7);
    opt.step(p, g2);
    QVERIFY(std::abs(p[0] - (0.9f - 0.1f * (0.9f * 1.0f + 2.0f))) < 1e-6);
}

void TestOptimizer::adam()
{
    // Step 1: m = 0.1 g, v = 0.001 g^2, mhat = g, vhat = g^2, p -= lr * g / (|g| + eps)
    CpuDevice dev;
    Optimizer opt(dev, Optimizer::Kind::Adam, 1, 0.01f);
    float p[] = {1.0f};
    const float g1[] = {0.5f}, g2[] = {-0.25f};
    opt.step(p, g1);
    QVERIFY(std::abs(p[0] - (1.0f - 0.01f * 0.5f / (0.5f + 1e-8f))) < 1e-7);
    // Step 2 by hand in double.
    const double m = 0.9 * 0.05 + 0.1 * -0.25;
    const double v = 0.999 * 0.00025 + 0.001 * 0.0625;
    const double mhat = m / (1 - 0.81), vhat = v / (1 - 0.999 * 0.999);
    const double expected = double(p[0]) - 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
    opt.step(p, g2);
    QVERIFY(std::abs(p[0] - expected) < 1e-6);
    QCOMPARE(opt.steps(), 2);
}

void TestOptimizer::staleScale()
{
    CpuDevice dev;
    Optimizer opt(dev, Optimizer::Kind::Sgd, 1, 0.1f);
    float p[] = {0.0f};
    const float g[] = {1.0f};
    opt.step(p, g, 0.25f);
    QCOMPARE(p[0], -0.025f);
}

QTEST_APPLESS_MAIN(TestOptimizer)
#include "tst_optimizer.moc"
