// Gradient checkpointing: the same gradients as the plain model, less activation memory held,
// exactly as much as the segment arithmetic says, and recompute recorded as its own phase.
#include "cpu/cpudevice.h"
#include "model.h"
#include "random.h"
#include "testutil.h"

using namespace syncopate;
using namespace syncopate::test;

class TestCheckpoint : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void sameGradients_data();
    void sameGradients();
    void peakMemoryFollowsTheory();
    void engineRunsMatchPlainRuns();
};

static std::vector<int> deep(int hidden, int width)
{
    std::vector<int> layers = {24};
    for (int i = 0; i < hidden; ++i)
        layers.push_back(width);
    layers.push_back(6);
    return layers;
}

void TestCheckpoint::sameGradients_data()
{
    QTest::addColumn<int>("every");
    for (int k : {1, 2, 3, 4, 5, 17, 40})
        QTest::newRow(qPrintable(QStringLiteral("every %1").arg(k))) << k;
}

void TestCheckpoint::sameGradients()
{
    QFETCH(int, every);
    CpuDevice dev;
    ModelSpec plainSpec{deep(16, 20), Activation::Gelu, true, 0};
    ModelSpec ckptSpec = plainSpec;
    ckptSpec.checkpointEvery = every;
    const int batch = 5;
    Model plain(dev, plainSpec, batch), ckpt(dev, ckptSpec, batch);
    const auto params = Model::initialParams(plainSpec, 3);
    plain.setParams(params);
    ckpt.setParams(params);
    Rng rng(4);
    std::vector<float> x(std::size_t(batch) * 24);
    for (auto &v : x)
        v = float(rng.normal());
    std::vector<std::int32_t> labels = {0, 5, 2, 3, 1};
    const double l1 = plain.forwardLoss(x.data(), labels.data(), nullptr, nullptr, 0);
    const double l2 = ckpt.forwardLoss(x.data(), labels.data(), nullptr, nullptr, 0);
    QCOMPARE(l1, l2);
    plain.backward(nullptr, 0);
    ckpt.backward(nullptr, 0);
    QVERIFY(maxRelativeDifference(ckpt.gradsToHost(), plain.gradsToHost()) < 1e-6);
    QCOMPARE(ckpt.heldActivationBytes(), std::int64_t(0)); // everything given back
    QCOMPARE(plain.heldActivationBytes(), std::int64_t(0));
}

void TestCheckpoint::peakMemoryFollowsTheory()
{
    // 16 hidden layers of width w plus the output layer: L = 17 linear layers, k = ceil(sqrt(17))
    // = 5, segments [0,5) [5,10) [10,15) [15,17). Plain keeps z and a of 16 hidden layers and the
    // logits. Checkpointed keeps the 3 boundaries plus at most one segment's z and a; the peak
    // is at the end of forward: boundaries + last segment (one hidden layer and the logits).
    const int w = 64, batch = 8, out = 6;
    CpuDevice dev;
    ModelSpec spec{deep(16, w), Activation::Relu, true, 0};
    Model plain(dev, spec, batch);
    spec.checkpointEvery = 5;
    Model ckpt(dev, spec, batch);
    std::vector<float> x(std::size_t(batch) * 24, 0.5f);
    std::vector<std::int32_t> labels(batch, 1);
    for (Model *m : {&plain, &ckpt}) {
        m->setParams(Model::initialParams(m->spec(), 1));
        m->forwardLoss(x.data(), labels.data(), nullptr, nullptr, 0);
        m->backward(nullptr, 0);
    }
    const std::int64_t f = sizeof(float);
    const std::int64_t plainPeak = (16 * 2 * w + out) * batch * f;
    QCOMPARE(plain.peakActivationBytes(), plainPeak);
    // During the recompute of segment [10,15): boundaries 5 and 10 + 5 hidden layers = 12 w;
    // at the end of forward: boundaries 5, 10, 15 + layer 15 (2w) + logits = 5 w + out.
    const std::int64_t ckptPeak = std::max<std::int64_t>((2 + 10) * w, 5 * w + out) * batch * f;
    QCOMPARE(ckpt.peakActivationBytes(), ckptPeak);
    QVERIFY(ckpt.peakActivationBytes() < plain.peakActivationBytes() / 2);
    QVERIFY(ckpt.activationCapacityBytes() < plain.activationCapacityBytes() / 2);
}

void TestCheckpoint::engineRunsMatchPlainRuns()
{
    nlohmann::json c = {{"workers", 2},
                        {"model", {{"layers", {12, 24, 24, 24, 24, 24, 4}}}},
                        {"data", {{"source", "blobs"}, {"samples", 200}}},
                        {"train", {{"steps", 15}, {"batch", 8}, {"optimizer", "adam"}}},
                        {"eval", {{"samples", 0}}}};
    auto plain = runToEnd(c);
    c["mode"] = "checkpointed";
    auto ckpt = runToEnd(c);
    QCOMPARE(ckpt->config().checkpointEvery, 3);
    QCOMPARE(ckpt->finalParams(), plain->finalParams());
    int recomputes = 0;
    for (const auto &r : ckpt->events().all())
        recomputes += r.isSpan() && r.phase() == Phase::Recompute;
    QCOMPARE(recomputes, 2 * 15 * 1); // 6 layers in segments of 3: the first is recomputed
}

QTEST_APPLESS_MAIN(TestCheckpoint)
#include "tst_checkpoint.moc"
