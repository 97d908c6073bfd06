// Backpropagation against central finite differences, for every activation, both losses, and
// with checkpointing on and off.
#include "cpu/cpudevice.h"
#include "model.h"
#include "random.h"

#include <QTest>

#include <cmath>

using namespace syncopate;

class TestGradients : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void finiteDifferences_data();
    void finiteDifferences();
};

void TestGradients::finiteDifferences_data()
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
            for (int k : {0, 2}) {
                const QByteArray name = QByteArray(a.name) + (cls ? " cross-entropy" : " mse") +
                                        (k ? " checkpointed" : "");
                QTest::newRow(name.constData()) << int(a.a) << cls << k;
            }
}

void TestGradients::finiteDifferences()
{
    QFETCH(int, activation);
    QFETCH(bool, classification);
    QFETCH(int, checkpointEvery);
    CpuDevice dev;
    ModelSpec spec{{5, 7, 6, 6, 4}, Activation(activation), classification, checkpointEvery};
    const int batch = 3;
    Model model(dev, spec, batch);
    auto params = Model::initialParams(spec, 42);
    Rng rng(5);
    for (auto &p : params) // non-zero biases too, so every term is exercised
        p += float(rng.normal() * 0.1);
    std::vector<float> x(std::size_t(batch) * 5), y(std::size_t(batch) * 4);
    std::vector<std::int32_t> labels = {0, 3, 1};
    for (auto &v : x)
        v = float(rng.normal());
    for (auto &v : y)
        v = float(rng.normal());

    model.setParams(params);
    model.forwardLoss(x.data(), labels.data(), y.data(), nullptr, 0);
    model.backward(nullptr, 0);
    const auto grads = model.gradsToHost();

    // Small enough that a ReLU rarely crosses its kink, large enough for float rounding.
    const float eps = 1e-3f;
    int checked = 0;
    for (std::size_t i = 0; i < params.size(); ++i) {
        auto p = params;
        p[i] += eps;
        model.setParams(p);
        const double up = model.forwardLoss(x.data(), labels.data(), y.data(), nullptr, 0);
        p[i] -= 2 * eps;
        model.setParams(p);
        const double down = model.forwardLoss(x.data(), labels.data(), y.data(), nullptr, 0);
        const double fd = (up - down) / (2.0 * eps);
        const double tolerance = 2e-3 + 2e-2 * std::abs(fd);
        if (std::abs(fd - grads[i]) > tolerance)
            QFAIL(qPrintable(QStringLiteral("parameter %1: analytic %2, finite difference %3")
                                 .arg(i)
                                 .arg(grads[i])
                                 .arg(fd)));
        ++checked;
    }
    QCOMPARE(checked, int(spec.paramCount()));
}

QTEST_APPLESS_MAIN(TestGradients)
#include "tst_gradients.moc"
