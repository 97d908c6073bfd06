// Batch normalisation (model.batchnorm): the layout of its parameters, forward and running
// statistics against numbers worked out by hand, gradients against finite differences of a
// double-precision reference, checkpointed recompute, evaluation by the running statistics, and
// synchronised batch norm across threads against one worker with the whole batch.
#include "cpu/cpudevice.h"
#include "model.h"
#include "random.h"
#include "safetensors.h"
#include "trace.h"

#include <QTemporaryDir>
#include <QTest>

#include <barrier>
#include <cmath>
#include <functional>
#include <memory>
#include <thread>

using namespace syncopate;

namespace {

double maxRelative(const std::vector<float> &a, const std::vector<float> &b, double floor = 1e-3)
{
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(floor, std::abs(double(b[i]))));
    return worst;
}

// torch.nn.BatchNorm1d in training mode, in double: y = gamma * (x - mean) / sqrt(var + eps)
// + beta with the biased variance.
std::vector<double> referenceForward(const std::vector<double> &x, const std::vector<double> &gamma,
                                     const std::vector<double> &beta, int rows, int cols)
{
    std::vector<double> y(x.size());
    for (int c = 0; c < cols; ++c) {
        double mean = 0, var = 0;
        for (int r = 0; r < rows; ++r)
            mean += x[std::size_t(r) * cols + c];
        mean /= rows;
        for (int r = 0; r < rows; ++r)
            var += std::pow(x[std::size_t(r) * cols + c] - mean, 2);
        var /= rows;
        for (int r = 0; r < rows; ++r) {
            const std::size_t i = std::size_t(r) * cols + c;
            y[i] = gamma[c] * (x[i] - mean) / std::sqrt(var + kBatchNormEps) + beta[c];
        }
    }
    return y;
}

// Sync batch norm between threads of the test: each worker puts its sums in its own slot, and
// after a barrier every worker adds up all the slots in worker order (the same bits on each).
class ThreadReducer {
public:
    explicit ThreadReducer(int workers) : m_workers(workers), m_slots(std::size_t(workers)), m_barrier(workers) {}

    class Handle final : public BatchNormReducer {
    public:
        Handle(ThreadReducer &group, int worker) : m_group(&group), m_worker(worker) {}
        int workers() const override { return m_group->m_workers; }
        bool allreduceSum(float *data, std::size_t n) override
        {
            ++calls;
            m_group->m_slots[std::size_t(m_worker)].assign(data, data + n);
            m_group->m_barrier.arrive_and_wait();
            for (std::size_t i = 0; i < n; ++i) {
                float s = 0.0f;
                for (const auto &slot : m_group->m_slots)
                    s += slot[i];
                data[i] = s;
            }
            m_group->m_barrier.arrive_and_wait(); // the slots may be refilled
            return true;
        }
        int calls = 0;

    private:
        ThreadReducer *m_group;
        int m_worker;
    };

private:
    int m_workers;
    std::vector<std::vector<float>> m_slots;
    std::barrier<> m_barrier;
};

void runThreads(int n, const std::function<void(int)> &body)
{
    std::vector<std::thread> threads;
    for (int w = 0; w < n; ++w)
        threads.emplace_back(body, w);
    for (auto &t : threads)
        t.join();
}

std::vector<float> randomVector(Rng &rng, std::size_t n, double scale = 1.0, double shift = 0.0)
{
    std::vector<float> v(n);
    for (auto &x : v)
        x = float(shift + rng.normal() * scale);
    return v;
}

// in -> 2 (batch norm, relu) -> 2, identity weights and zero biases except the scale and shift,
// so that the output is the batch norm's output through relu.
ModelSpec handSpec()
{
    ModelSpec spec{{2, 2, 2}, Activation::Relu, false, 0};
    spec.batchNorm = true;
    return spec;
}

std::vector<float> handParams(const ModelSpec &spec)
{
    std::vector<float> p(spec.paramCount(), 0.0f);
    for (int l = 0; l < 2; ++l) {
        p[spec.weightOffset(l) + 0] = 1.0f; // W = identity
        p[spec.weightOffset(l) + 3] = 1.0f;
    }
    p[spec.gammaOffset(0) + 0] = 2.0f;
    p[spec.gammaOffset(0) + 1] = 0.5f;
    p[spec.betaOffset(0) + 0] = 1.0f;
    p[spec.betaOffset(0) + 1] = -1.0f;
    return p;
}

} // namespace

class TestBatchNorm : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void layout();
    void kernelsAgainstHand();
    void forwardAndRunningStatsByHand();
    void evaluationUsesRunningStats();
    void kernelGradientsAgainstDouble();
    void modelFiniteDifferences_data();
    void modelFiniteDifferences();
    void checkpointedEqualsPlain_data();
    void checkpointedEqualsPlain();
    void syncEqualsOneBigBatch_data();
    void syncEqualsOneBigBatch();
    void reduceIsRecorded();
    void batchOfOneIsRejected();
    void safetensorsNamesTheNorms();
};

void TestBatchNorm::layout()
{
    // Per layer: weight, bias, then (hidden layers only) gamma and beta.
    ModelSpec spec{{3, 4, 5, 2}, Activation::Relu, true, 0};
    QCOMPARE(spec.paramCount(), std::size_t(4 * 4 + 5 * 5 + 2 * 6));
    spec.batchNorm = true;
    QCOMPARE(spec.paramCount(), std::size_t(4 * 4 + 2 * 4 + 5 * 5 + 2 * 5 + 2 * 6));
    QCOMPARE(spec.weightOffset(0), std::size_t(0));
    QCOMPARE(spec.biasOffset(0), std::size_t(12));
    QCOMPARE(spec.gammaOffset(0), std::size_t(16));
    QCOMPARE(spec.betaOffset(0), std::size_t(20));
    QCOMPARE(spec.weightOffset(1), std::size_t(24));
    QCOMPARE(spec.gammaOffset(1), std::size_t(24 + 25));
    QCOMPARE(spec.weightOffset(2), std::size_t(24 + 25 + 10));
    QVERIFY(spec.hasBatchNorm(0) && spec.hasBatchNorm(1) && !spec.hasBatchNorm(2));
    QCOMPARE(spec.runningStatsCount(), std::size_t(2 * 4 + 2 * 5));
    QCOMPARE(spec.runningVarOffset(0), std::size_t(4));
    QCOMPARE(spec.runningMeanOffset(1), std::size_t(8));
    QCOMPARE(spec.runningVarOffset(1), std::size_t(13));

    CpuDevice dev;
    Model model(dev, spec, 4);
    QCOMPARE(model.paramCount(), spec.paramCount());
    QCOMPARE(model.runningStatsCount(), spec.runningStatsCount());
    const auto p = Model::initialParams(spec, 1);
    for (int l = 0; l < 2; ++l)
        for (int c = 0; c < spec.layers[l + 1]; ++c) {
            QCOMPARE(p[spec.gammaOffset(l) + c], 1.0f);
            QCOMPARE(p[spec.betaOffset(l) + c], 0.0f);
            QCOMPARE(p[spec.biasOffset(l) + c], 0.0f);
        }
    // The weights are those of the same model without batch norm.
    ModelSpec plain = spec;
    plain.batchNorm = false;
    const auto q = Model::initialParams(plain, 1);
    for (int l = 0; l < 3; ++l)
        QCOMPARE(p[spec.weightOffset(l) + 3], q[plain.weightOffset(l) + 3]);
    // Running mean 0, variance 1.
    const auto r = model.runningStatsToHost();
    QCOMPARE(r, Model::initialRunningStats(spec));
    QCOMPARE(r[0], 0.0f);
    QCOMPARE(r[spec.runningVarOffset(1) + 4], 1.0f);
}

void TestBatchNorm::kernelsAgainstHand()
{
    // Channel 0: 1 2 3 6, mean 3, squares about it 4 + 1 + 0 + 9 = 14, variance 3.5.
    // Channel 1: 0 0 4 4, mean 2, squares 16, variance 4.
    CpuDevice dev;
    const std::vector<float> x = {1, 0, 2, 0, 3, 4, 6, 4};
    std::vector<float> sum(2), sq(2), mean(2), invstd(2), rm = {0, 0}, rv = {1, 1};
    dev.biasGrad(x.data(), sum.data(), 4, 2);
    dev.batchNormCenteredSquares(x.data(), sum.data(), 0.25f, 4, 2, sq.data());
    QCOMPARE(sq, (std::vector<float>{14, 16}));
    dev.batchNormStatistics(sum.data(), sq.data(), 4.0, kBatchNormEps, kBatchNormMomentum, 2,
                            mean.data(), invstd.data(), rm.data(), rv.data());
    QCOMPARE(mean, (std::vector<float>{3, 2}));
    QCOMPARE(invstd[0], float(1.0 / std::sqrt(3.5 + 1e-5)));
    QCOMPARE(invstd[1], float(1.0 / std::sqrt(4.0 + 1e-5)));
    // 0.9 * 0 + 0.1 * mean; 0.9 * 1 + 0.1 * the unbiased variance (14 / 3, 16 / 3).
    QCOMPARE(rm[0], 0.3f);
    QCOMPARE(rm[1], 0.2f);
    QCOMPARE(rv[0], float(0.9 + 1.4 / 3.0));
    QCOMPARE(rv[1], float(0.9 + 1.6 / 3.0));

    const std::vector<float> gamma = {2.0f, 0.5f}, beta = {1.0f, -1.0f};
    std::vector<float> xhat(8), y(8);
    dev.batchNormForward(x.data(), mean.data(), invstd.data(), gamma.data(), beta.data(), 4, 2,
                         xhat.data(), y.data());
    const double s0 = std::sqrt(3.5 + 1e-5), s1 = std::sqrt(4.0 + 1e-5);
    const double expectHat[8] = {-2 / s0, -2 / s1, -1 / s0, -2 / s1, 0, 2 / s1, 3 / s0, 2 / s1};
    for (int i = 0; i < 8; ++i) {
        QVERIFY(std::abs(xhat[i] - expectHat[i]) < 1e-6);
        const double g = i % 2 ? 0.5 : 2.0, b = i % 2 ? -1.0 : 1.0;
        QVERIFY(std::abs(y[i] - (g * expectHat[i] + b)) < 1e-6);
    }
    // In place, without x-hat: the same y.
    std::vector<float> inPlace = x;
    dev.batchNormForward(inPlace.data(), mean.data(), invstd.data(), gamma.data(), beta.data(), 4,
                         2, nullptr, inPlace.data());
    QCOMPARE(inPlace, y);
}

void TestBatchNorm::forwardAndRunningStatsByHand()
{
    const ModelSpec spec = handSpec();
    CpuDevice dev;
    Model model(dev, spec, 4);
    model.setParams(handParams(spec));
    const std::vector<float> x = {1, 0, 2, 0, 3, 4, 6, 4}; // as kernelsAgainstHand
    const std::vector<float> zero(8, 0.0f);
    // Channel 0: 2 * (-2, -1, 0, 3) / sqrt(3.5 + eps) + 1, through relu: 0, 0, 1, 4.2071...
    // Channel 1: 0.5 * (+-2) / sqrt(4 + eps) - 1 is -1.5 or -0.5: relu makes it 0.
    // The loss is the mean of the squares over 8 outputs.
    const double s0 = std::sqrt(3.5 + 1e-5);
    const double a3 = 2 * 3 / s0 + 1;
    const double a1 = 2 * -1 / s0 + 1;
    QVERIFY(a1 < 0);
    const double expected = (1.0 + a3 * a3) / 8.0;
    const double loss = model.forwardLoss(x.data(), nullptr, zero.data(), nullptr, 0);
    QVERIFY2(std::abs(loss - expected) < 1e-6 * expected,
             qPrintable(QStringLiteral("loss %1, by hand %2").arg(loss).arg(expected)));

    // Running statistics: mean 0.1 * (3, 2), variance 0.9 + 0.1 * (14 / 3, 16 / 3).
    auto r = model.runningStatsToHost();
    QCOMPARE(r.size(), std::size_t(4));
    QVERIFY(std::abs(r[0] - 0.3) < 1e-7 && std::abs(r[1] - 0.2) < 1e-7);
    QVERIFY(std::abs(r[2] - (0.9 + 1.4 / 3.0)) < 1e-6);
    QVERIFY(std::abs(r[3] - (0.9 + 1.6 / 3.0)) < 1e-6);
    model.backward(nullptr, 0); // backward leaves them alone
    QCOMPARE(model.runningStatsToHost(), r);
    // The batch's own statistics, as the running statistics hold them: mean (3, 2), unbiased
    // variance (14 / 3, 16 / 3).
    std::vector<float> b(4);
    model.batchStatsToHost(b.data());
    QVERIFY(std::abs(b[0] - 3.0) < 1e-6 && std::abs(b[1] - 2.0) < 1e-6);
    QVERIFY(std::abs(b[2] - 14.0 / 3) < 1e-5 && std::abs(b[3] - 16.0 / 3) < 1e-5);

    // A second batch: channel 0 is 0 0 0 4 (mean 1, unbiased variance 12 / 3 = 4), channel 1
    // is constant 1 (mean 1, variance 0). Mean 0.9 * (0.3, 0.2) + 0.1 = (0.37, 0.28); variance
    // 0.9 * (1.3667, 1.4333) + 0.1 * (4, 0) = (1.63, 1.29).
    const std::vector<float> x2 = {0, 1, 0, 1, 0, 1, 4, 1};
    const double loss2 = model.forwardLoss(x2.data(), nullptr, zero.data(), nullptr, 1);
    QVERIFY(std::isfinite(loss2)); // a constant channel normalises to beta, not to NaN
    r = model.runningStatsToHost();
    QVERIFY(std::abs(r[0] - 0.37) < 1e-6 && std::abs(r[1] - 0.28) < 1e-6);
    QVERIFY(std::abs(r[2] - 1.63) < 1e-6 && std::abs(r[3] - 1.29) < 1e-6);
}

void TestBatchNorm::evaluationUsesRunningStats()
{
    const ModelSpec spec = handSpec();
    CpuDevice dev;
    Model model(dev, spec, 4);
    model.setParams(handParams(spec));
    // Running mean (1, -1), variance (3, 0.25).
    model.setRunningStats({1.0f, -1.0f, 3.0f, 0.25f});
    const std::vector<float> x = {1, 0, 2, 0, 3, 4, 6, 4, 5, -2};
    const std::vector<float> targets(10, 0.5f);
    // y0 = 2 (x0 - 1) / sqrt(3 + eps) + 1, y1 = 0.5 (x1 + 1) / sqrt(0.25 + eps) - 1, relu, and
    // the mean of (a - 0.5)^2.
    double expected = 0;
    for (int r = 0; r < 5; ++r) {
        const double y0 = 2 * (x[2 * r] - 1) / std::sqrt(3 + 1e-5) + 1;
        const double y1 = 0.5 * (x[2 * r + 1] + 1) / std::sqrt(0.25 + 1e-5) - 1;
        expected += std::pow(std::max(0.0, y0) - 0.5, 2) + std::pow(std::max(0.0, y1) - 0.5, 2);
    }
    expected /= 10;
    // Five rows with a batch of 4: the second chunk is one row padded with zeros, which batch
    // statistics would feel and running statistics do not.
    const EvalResult all = model.evaluate(x.data(), nullptr, targets.data(), 5);
    QVERIFY2(std::abs(all.loss - expected) < 1e-6 * expected,
             qPrintable(QStringLiteral("loss %1, by hand %2").arg(all.loss).arg(expected)));
    double rowByRow = 0;
    for (int r = 0; r < 5; ++r)
        rowByRow += model.evaluate(x.data() + 2 * r, nullptr, targets.data() + 2 * r, 1).lossSum;
    QVERIFY(std::abs(rowByRow - all.lossSum) < 1e-6 * all.lossSum);
    // Evaluation leaves the running statistics as they were.
    QCOMPARE(model.runningStatsToHost(), (std::vector<float>{1.0f, -1.0f, 3.0f, 0.25f}));
    // Another replica's statistics, handed in, give the same as setting them.
    Model other(dev, spec, 4);
    other.setParams(handParams(spec));
    const std::vector<float> stats = {1.0f, -1.0f, 3.0f, 0.25f};
    const EvalResult handed = other.evaluate(x.data(), nullptr, targets.data(), 5, stats.data());
    QCOMPARE(handed.lossSum, all.lossSum);
    QCOMPARE(other.runningStatsToHost(), Model::initialRunningStats(spec));
    // Training mode normalises by the batch instead: another loss for the same rows.
    const double train = model.forwardLoss(x.data(), nullptr, targets.data(), nullptr, 0);
    const EvalResult first4 = model.evaluate(x.data(), nullptr, targets.data(), 4);
    QVERIFY(std::abs(train - first4.loss) > 1e-3);
}

void TestBatchNorm::kernelGradientsAgainstDouble()
{
    // Loss = sum of r * y through batch norm alone (so dy = r): the float kernels' gradients
    // for x, gamma and beta against central differences of the double reference.
    const int rows = 6, cols = 5;
    Rng rng(11);
    const auto xf = randomVector(rng, std::size_t(rows) * cols, 1.5, 0.7);
    const auto gf = randomVector(rng, cols, 0.3, 1.0);
    const auto bf = randomVector(rng, cols, 0.5);
    const auto rf = randomVector(rng, std::size_t(rows) * cols);
    auto toDouble = [](const std::vector<float> &v) { return std::vector<double>(v.begin(), v.end()); };
    const auto r = toDouble(rf);
    auto loss = [&](const std::vector<double> &x, const std::vector<double> &g,
                    const std::vector<double> &b) {
        const auto y = referenceForward(x, g, b, rows, cols);
        double s = 0;
        for (std::size_t i = 0; i < y.size(); ++i)
            s += r[i] * y[i];
        return s;
    };

    CpuDevice dev;
    std::vector<float> sum(cols), sq(cols), mean(cols), invstd(cols), xhat(xf.size()), y(xf.size());
    dev.biasGrad(xf.data(), sum.data(), rows, cols);
    dev.batchNormCenteredSquares(xf.data(), sum.data(), 1.0f / rows, rows, cols, sq.data());
    dev.batchNormStatistics(sum.data(), sq.data(), rows, kBatchNormEps, kBatchNormMomentum, cols,
                            mean.data(), invstd.data(), nullptr, nullptr);
    dev.batchNormForward(xf.data(), mean.data(), invstd.data(), gf.data(), bf.data(), rows, cols,
                         xhat.data(), y.data());
    const auto yRef = referenceForward(toDouble(xf), toDouble(gf), toDouble(bf), rows, cols);
    for (std::size_t i = 0; i < y.size(); ++i)
        QVERIFY(std::abs(y[i] - yRef[i]) < 1e-5 * (1 + std::abs(yRef[i])));

    std::vector<float> sums(2 * cols), dx = rf;
    dev.batchNormBackwardSums(rf.data(), xhat.data(), rows, cols, sums.data());
    dev.batchNormBackward(dx.data(), xhat.data(), invstd.data(), gf.data(), sums.data(),
                          1.0f / rows, rows, cols, dx.data()); // in place

    const double h = 1e-6;
    auto check = [&](const char *what, std::size_t i, double analytic, double fd) {
        if (std::abs(analytic - fd) > 1e-4 + 1e-4 * std::abs(fd))
            QFAIL(qPrintable(QStringLiteral("%1[%2]: analytic %3, finite difference %4")
                                 .arg(QLatin1String(what)).arg(i).arg(analytic).arg(fd)));
    };
    const auto x0 = toDouble(xf), g0 = toDouble(gf), b0 = toDouble(bf);
    for (std::size_t i = 0; i < x0.size(); ++i) {
        auto up = x0, down = x0;
        up[i] += h;
        down[i] -= h;
        check("x", i, dx[i], (loss(up, g0, b0) - loss(down, g0, b0)) / (2 * h));
    }
    for (int c = 0; c < cols; ++c) {
        auto up = g0, down = g0;
        up[c] += h;
        down[c] -= h;
        check("gamma", c, sums[c], (loss(x0, up, b0) - loss(x0, down, b0)) / (2 * h));
        up = b0;
        down = b0;
        up[c] += h;
        down[c] -= h;
        check("beta", c, sums[cols + c], (loss(x0, g0, up) - loss(x0, g0, down)) / (2 * h));
    }
    // The input gradient of batch norm sums to zero over the rows of each channel.
    for (int c = 0; c < cols; ++c) {
        double s = 0;
        for (int rr = 0; rr < rows; ++rr)
            s += dx[std::size_t(rr) * cols + c];
        QVERIFY(std::abs(s) < 1e-5);
    }
}

void TestBatchNorm::modelFiniteDifferences_data()
{
    QTest::addColumn<int>("activation");
    QTest::addColumn<bool>("classification");
    QTest::addColumn<int>("checkpointEvery");
    const struct {
        const char *name;
        Activation a;
    } acts[] = {{"relu", Activation::Relu}, {"tanh", Activation::Tanh}, {"gelu", Activation::Gelu}};
    for (const auto &a : acts)
        for (bool cls : {true, false})
            for (int k : {0, 1, 2}) {
                const QByteArray name = QByteArray(a.name) + (cls ? " cross-entropy" : " mse") +
                                        (k ? QByteArray(" checkpointed ") + QByteArray::number(k) : QByteArray());
                QTest::newRow(name.constData()) << int(a.a) << cls << k;
            }
}

void TestBatchNorm::modelFiniteDifferences()
{
    // Every parameter (weights, biases, gamma, beta) of a model with three batch-normalised
    // layers, as tst_gradients does without batch norm.
    QFETCH(int, activation);
    QFETCH(bool, classification);
    QFETCH(int, checkpointEvery);
    CpuDevice dev;
    ModelSpec spec{{5, 7, 6, 6, 4}, Activation(activation), classification, checkpointEvery};
    spec.batchNorm = true;
    const int batch = 6;
    Model model(dev, spec, batch);
    auto params = Model::initialParams(spec, 42);
    Rng rng(5);
    for (auto &p : params) // gamma away from 1, non-zero biases and shifts
        p += float(rng.normal() * 0.2);
    const auto x = randomVector(rng, std::size_t(batch) * 5);
    const auto y = randomVector(rng, std::size_t(batch) * 4);
    const std::vector<std::int32_t> labels = {0, 3, 1, 2, 3, 0};

    model.setParams(params);
    model.forwardLoss(x.data(), labels.data(), y.data(), nullptr, 0);
    model.backward(nullptr, 0);
    const auto grads = model.gradsToHost();

    const float eps = 1e-3f;
    for (std::size_t i = 0; i < params.size(); ++i) {
        auto p = params;
        p[i] += eps;
        model.setParams(p);
        const double up = model.forwardLoss(x.data(), labels.data(), y.data(), nullptr, 0);
        p[i] -= 2 * eps;
        model.setParams(p);
        const double down = model.forwardLoss(x.data(), labels.data(), y.data(), nullptr, 0);
        const double fd = (up - down) / (2.0 * eps);
        if (std::abs(fd - grads[i]) > 2e-3 + 2e-2 * std::abs(fd))
            QFAIL(qPrintable(QStringLiteral("parameter %1: analytic %2, finite difference %3")
                                 .arg(i).arg(grads[i]).arg(fd)));
    }
    // The first batch norm's gamma and beta had gradients worth checking.
    double norm = 0;
    for (int c = 0; c < 7; ++c)
        norm += std::abs(grads[spec.gammaOffset(0) + c]) + std::abs(grads[spec.betaOffset(0) + c]);
    QVERIFY(norm > 1e-3);
}

void TestBatchNorm::checkpointedEqualsPlain_data()
{
    QTest::addColumn<int>("every");
    for (int k : {1, 2, 3})
        QTest::newRow(qPrintable(QStringLiteral("every %1").arg(k))) << k;
}

void TestBatchNorm::checkpointedEqualsPlain()
{
    // Recompute normalises by the first pass's statistics and does not move the running
    // statistics again: gradients and running statistics equal the plain model's, step after
    // step, and the activation bytes come back to zero.
    QFETCH(int, every);
    const int w = 8, batch = 5;
    ModelSpec plainSpec{{6, w, w, w, w, 3}, Activation::Gelu, true, 0};
    plainSpec.batchNorm = true;
    ModelSpec ckptSpec = plainSpec;
    ckptSpec.checkpointEvery = every;
    CpuDevice dev;
    Model plain(dev, plainSpec, batch), ckpt(dev, ckptSpec, batch);
    const auto params = Model::initialParams(plainSpec, 3);
    plain.setParams(params);
    ckpt.setParams(params);
    Rng rng(4);
    const std::vector<std::int32_t> labels = {0, 2, 1, 1, 2};
    for (std::uint32_t step = 0; step < 3; ++step) {
        const auto x = randomVector(rng, std::size_t(batch) * 6, 1.0, 0.5);
        const double l1 = plain.forwardLoss(x.data(), labels.data(), nullptr, nullptr, step);
        const double l2 = ckpt.forwardLoss(x.data(), labels.data(), nullptr, nullptr, step);
        QCOMPARE(l1, l2);
        plain.backward(nullptr, step);
        ckpt.backward(nullptr, step);
        QCOMPARE(ckpt.gradsToHost(), plain.gradsToHost());
        QCOMPARE(ckpt.runningStatsToHost(), plain.runningStatsToHost());
        QCOMPARE(ckpt.heldActivationBytes(), std::int64_t(0));
        QCOMPARE(plain.heldActivationBytes(), std::int64_t(0));
    }
    // The number of updates, directly: with zero weights and a bias of 2, the first layer's
    // output is 2 in every row (batch mean 2, variance 0), so after k updates the running mean
    // is 2 (1 - 0.9^k) and the variance 0.9^k; a recompute that updated again would make k 6.
    Model constant(dev, ckptSpec, batch);
    auto p = params;
    const std::vector<float> ones(std::size_t(batch) * 6, 1.0f);
    std::fill_n(p.begin(), w * 6, 0.0f);
    std::fill_n(p.begin() + std::ptrdiff_t(ckptSpec.biasOffset(0)), w, 2.0f);
    constant.setParams(p);
    for (std::uint32_t step = 0; step < 3; ++step) {
        constant.forwardLoss(ones.data(), labels.data(), nullptr, nullptr, step);
        constant.backward(nullptr, step);
    }
    const auto r = constant.runningStatsToHost();
    const double m3 = 2.0 * (1.0 - std::pow(0.9, 3));
    QVERIFY2(std::abs(r[0] - m3) < 1e-6,
             qPrintable(QStringLiteral("running mean %1, %2 after 3 updates").arg(r[0]).arg(m3)));
    QVERIFY(std::abs(r[std::size_t(w)] - std::pow(0.9, 3)) < 1e-6);

    // Plain keeps x-hat, y and a of each of the 4 hidden layers and the logits.
    const std::int64_t f = sizeof(float);
    QCOMPARE(plain.peakActivationBytes(), (4 * 3 * w + 3) * batch * f);
    QVERIFY(ckpt.peakActivationBytes() < plain.peakActivationBytes());
}

void TestBatchNorm::syncEqualsOneBigBatch_data()
{
    QTest::addColumn<int>("checkpointEvery");
    QTest::newRow("plain") << 0;
    QTest::newRow("checkpointed") << 2;
}

void TestBatchNorm::syncEqualsOneBigBatch()
{
    // N workers with batch B and synchronised batch norm take the same SGD steps as one worker
    // with batch N * B (the gradient averaged over workers, as the sync strategy does). Local
    // batch norm does not: each worker normalises by its own quarter of the batch.
    QFETCH(int, checkpointEvery);
    const int workers = 3, batch = 4, steps = 3;
    const float lr = 0.1f;
    ModelSpec spec{{5, 9, 7, 3}, Activation::Relu, true, checkpointEvery};
    spec.batchNorm = true;
    const auto init = Model::initialParams(spec, 9);
    Rng rng(21);
    std::vector<std::vector<float>> xs;
    std::vector<std::vector<std::int32_t>> labels;
    for (int s = 0; s < steps; ++s) {
        // Shards whose means differ, so local statistics are far from the global ones.
        std::vector<float> x;
        std::vector<std::int32_t> y;
        for (int w = 0; w < workers; ++w) {
            const auto shard = randomVector(rng, std::size_t(batch) * 5, 1.0 + w, 0.8 * w);
            x.insert(x.end(), shard.begin(), shard.end());
            for (int r = 0; r < batch; ++r)
                y.push_back(std::int32_t((r + w + s) % 3));
        }
        xs.push_back(x);
        labels.push_back(y);
    }

    struct Result {
        std::vector<float> params, running;
        std::vector<double> losses;
    };
    auto sgd = [&](std::vector<float> &p, const std::vector<float> &g) {
        for (std::size_t i = 0; i < p.size(); ++i)
            p[i] -= lr * g[i];
    };

    // One worker, the whole batch.
    Result single;
    {
        CpuDevice dev;
        Model m(dev, spec, workers * batch);
        single.params = init;
        for (int s = 0; s < steps; ++s) {
            m.setParams(single.params);
            single.losses.push_back(m.forwardLoss(xs[s].data(), labels[s].data(), nullptr, nullptr, std::uint32_t(s)));
            m.backward(nullptr, std::uint32_t(s));
            sgd(single.params, m.gradsToHost());
        }
        single.running = m.runningStatsToHost();
    }

    auto distributed = [&](bool sync) {
        std::vector<Result> out(static_cast<std::size_t>(workers));
        std::vector<std::vector<float>> grads(static_cast<std::size_t>(workers));
        std::vector<int> calls(static_cast<std::size_t>(workers));
        ThreadReducer group(workers);
        std::barrier<> stepDone(workers);
        // Built here, one after another, as the engine builds its replicas: oneDNN's primitive
        // cache is not for concurrent construction (ThreadSanitizer sees its writes race).
        std::vector<std::unique_ptr<CpuDevice>> devices;
        std::vector<std::unique_ptr<Model>> models;
        for (int w = 0; w < workers; ++w) {
            devices.push_back(std::make_unique<CpuDevice>());
            models.push_back(std::make_unique<Model>(*devices.back(), spec, batch));
        }
        runThreads(workers, [&](int w) {
            Model &m = *models[std::size_t(w)];
            ThreadReducer::Handle handle(group, w);
            if (sync)
                m.setBatchNormReducer(&handle);
            Result &r = out[std::size_t(w)];
            r.params = init;
            for (int s = 0; s < steps; ++s) {
                m.setParams(r.params);
                const std::size_t row0 = std::size_t(w) * batch;
                r.losses.push_back(m.forwardLoss(xs[s].data() + row0 * 5, labels[s].data() + row0,
                                                 nullptr, nullptr, std::uint32_t(s)));
                m.backward(nullptr, std::uint32_t(s));
                grads[std::size_t(w)] = m.gradsToHost();
                stepDone.arrive_and_wait();
                std::vector<float> mean(grads[0].size(), 0.0f);
                for (const auto &g : grads)
                    for (std::size_t i = 0; i < g.size(); ++i)
                        mean[i] += g[i] / float(workers);
                sgd(r.params, mean);
                stepDone.arrive_and_wait(); // grads may be overwritten
            }
            r.running = m.runningStatsToHost();
            calls[std::size_t(w)] = handle.calls;
        });
        return std::make_pair(out, calls);
    };

    const auto [syncRuns, syncCalls] = distributed(true);
    for (int w = 0; w < workers; ++w) {
        const Result &r = syncRuns[std::size_t(w)];
        QVERIFY2(maxRelative(r.params, single.params) < 1e-5,
                 qPrintable(QStringLiteral("worker %1: parameters differ by %2").arg(w).arg(maxRelative(r.params, single.params))));
        QVERIFY2(maxRelative(r.running, single.running) < 1e-5,
                 qPrintable(QStringLiteral("worker %1: running statistics differ by %2").arg(w).arg(maxRelative(r.running, single.running))));
        QCOMPARE(r.params, syncRuns[0].params); // every replica the same
        // Per step: two reductions (mean, squares) per batch-normalised layer in forward, one
        // (both backward sums) in backward; none in recompute.
        QCOMPARE(syncCalls[std::size_t(w)], steps * 2 * 3);
    }
    for (int s = 0; s < steps; ++s) {
        double mean = 0;
        for (const Result &r : syncRuns)
            mean += r.losses[std::size_t(s)] / workers;
        QVERIFY(std::abs(mean - single.losses[std::size_t(s)]) < 1e-5 * single.losses[std::size_t(s)]);
    }

    const auto [localRuns, localCalls] = distributed(false);
    QCOMPARE(localCalls[0], 0);
    const double paramsOff = maxRelative(localRuns[0].params, single.params);
    QVERIFY2(paramsOff > 1e-2, qPrintable(QStringLiteral("local batch norm is only %1 from the big batch").arg(paramsOff)));
    // Each worker's running statistics are its own shard's.
    QVERIFY(maxRelative(localRuns[0].running, localRuns[2].running) > 1e-2);
}

void TestBatchNorm::reduceIsRecorded()
{
    // Sync batch norm's reductions are spans of their own, with the bytes reduced.
    const int workers = 2, batch = 3;
    ModelSpec spec{{4, 6, 5, 2}, Activation::Tanh, true, 0};
    spec.batchNorm = true;
    ThreadReducer group(workers);
    RunClock clock;
    std::vector<RecordRing> rings(static_cast<std::size_t>(workers));
    std::vector<std::unique_ptr<CpuDevice>> devices; // built here: see syncEqualsOneBigBatch
    std::vector<std::unique_ptr<Model>> models;
    for (int w = 0; w < workers; ++w) {
        devices.push_back(std::make_unique<CpuDevice>());
        models.push_back(std::make_unique<Model>(*devices.back(), spec, batch));
        models.back()->setParams(Model::initialParams(spec, 2));
    }
    runThreads(workers, [&](int w) {
        Model &m = *models[std::size_t(w)];
        ThreadReducer::Handle handle(group, w);
        m.setBatchNormReducer(&handle);
        Recorder rec(w, clock, rings[std::size_t(w)]);
        const std::vector<float> x(std::size_t(batch) * 4, float(w + 1));
        const std::vector<std::int32_t> y = {0, 1, 0};
        m.forwardLoss(x.data(), y.data(), nullptr, &rec, 7);
        m.backward(&rec, 7);
    });
    std::vector<Record> records;
    rings[1].drain(records);
    std::vector<double> bytes;
    for (const Record &r : records)
        if (r.isSpan() && r.phase() == Phase::Reduce) {
            QCOMPARE(r.step, std::uint32_t(7));
            bytes.push_back(r.value);
        }
    // Forward: 6 + 6 and 5 + 5 channels; backward: 2 x 5 and 2 x 6 (the last layer first).
    QCOMPARE(bytes, (std::vector<double>{24, 24, 20, 20, 40, 48}));
}

void TestBatchNorm::batchOfOneIsRejected()
{
    ModelSpec spec{{3, 4, 2}, Activation::Relu, true, 0};
    spec.batchNorm = true;
    CpuDevice dev;
    Model m(dev, spec, 1);
    m.setParams(Model::initialParams(spec, 1));
    const std::vector<float> x = {1, 2, 3};
    const std::vector<std::int32_t> y = {1};
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, m.forwardLoss(x.data(), y.data(), nullptr, nullptr, 0));
    // Evaluation normalises by the running statistics: one row is fine.
    QVERIFY(std::isfinite(m.evaluate(x.data(), y.data(), nullptr, 1).loss));
}

void TestBatchNorm::safetensorsNamesTheNorms()
{
    // PyTorch's names: the linear layers as before, each hidden layer's BatchNorm1d beside them.
    ModelSpec spec{{3, 4, 2}, Activation::Relu, true, 0};
    spec.batchNorm = true;
    std::vector<float> params(spec.paramCount());
    for (std::size_t i = 0; i < params.size(); ++i)
        params[i] = float(i);
    std::vector<float> running(spec.runningStatsCount());
    for (std::size_t i = 0; i < running.size(); ++i)
        running[i] = 100.0f + float(i);
    QTemporaryDir dir;
    const std::string path = dir.filePath(QStringLiteral("p.safetensors")).toStdString();
    writeSafetensors(path, spec.layers, params, true, &running);
    const auto t = readSafetensors(path);
    QCOMPARE(t.size(), std::size_t(8));
    QCOMPARE(t.at("layers.0.weight").shape, (std::vector<std::int64_t>{4, 3}));
    QCOMPARE(t.at("layers.0.bias").data.front(), float(spec.biasOffset(0)));
    QCOMPARE(t.at("norms.0.weight").data.front(), float(spec.gammaOffset(0)));
    QCOMPARE(t.at("norms.0.bias").data.back(), float(spec.betaOffset(0) + 3));
    QCOMPARE(t.at("layers.1.weight").data.front(), float(spec.weightOffset(1)));
    QCOMPARE(t.at("norms.0.running_mean").data, (std::vector<float>{100, 101, 102, 103}));
    QCOMPARE(t.at("norms.0.running_var").data, (std::vector<float>{104, 105, 106, 107}));
    QVERIFY(!t.count("norms.1.weight")); // no batch norm on the output layer
    // Without the running statistics, and without batch norm, as before.
    writeSafetensors(path, spec.layers, params, true);
    QCOMPARE(readSafetensors(path).size(), std::size_t(6));
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, writeSafetensors(path, spec.layers, params));
}

QTEST_APPLESS_MAIN(TestBatchNorm)
#include "tst_batchnorm.moc"
