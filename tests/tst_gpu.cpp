// The CUDA backend against the CPU backend: every device op on random inputs, whole short runs
// of each mode, out-of-memory and bad-label errors, and device-timed spans. Skipped, with the
// reason, where there is no CUDA backend or no GPU.
#include "cpu/cpudevice.h"
#include "gpubackend.h"
#include "testutil.h"

#include <map>
#include <random>

using namespace syncopate;
using namespace syncopate::test;
using nlohmann::json;

class TestGpu : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void devicesAreDescribed();
    void gemm_data();
    void gemm();
    void elementwise_data();
    void elementwise();
    void losses_data();
    void losses();
    void optimizers_data();
    void optimizers();
    void reductions();
    void batchNorm();
    void batchNormModel();
    void copiesBetweenWorkers();
    void badLabelIsAnError();
    void outOfMemoryNamesTheBytes();
    void runsMatchTheCpu_data();
    void runsMatchTheCpu();
    void spansAreTimedOnTheDevice();

private:
    std::unique_ptr<Device> gpu(bool tf32 = false) { return m_backend->createDevice(0, {tf32}); }
    GpuBackend *m_backend = nullptr;
    CpuDevice m_cpu;
};

namespace {

std::vector<float> randomVector(std::size_t n, unsigned seed, float scale = 1.0f)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(n);
    for (auto &x : v)
        x = normal(rng);
    return v;
}

// Host vectors on a device and back.
struct Mirror {
    Mirror(Device &d, const std::vector<float> &host) : device(&d), buffer(d, host.size())
    {
        d.upload(buffer.data(), host.data(), host.size());
    }
    std::vector<float> read() const
    {
        std::vector<float> v(buffer.size());
        device->download(v.data(), buffer.data(), v.size());
        return v;
    }
    float *data() const { return buffer.data(); }
    Device *device;
    DeviceBuffer buffer;
};

// |got - want| <= atol + rtol * |want| everywhere; the message names the worst element.
void expectClose(const std::vector<float> &got, const std::vector<float> &want, double atol,
                 double rtol, const char *what)
{
    QCOMPARE(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double err = std::abs(double(got[i]) - double(want[i]));
        if (!(err <= atol + rtol * std::abs(double(want[i]))))
            QFAIL(qPrintable(QStringLiteral("%1: element %2 is %3, CPU gives %4")
                                 .arg(QString::fromLatin1(what)).arg(i).arg(got[i]).arg(want[i])));
    }
}

json smallRun(const std::string &device, const std::string &mode, int workers)
{
    return json{{"mode", mode},
                {"workers", workers},
                {"device", device},
                {"model", {{"layers", {16, 64, 64, 64, 5}}, {"activation", "gelu"}}},
                {"data", {{"source", "blobs"}, {"samples", 512}, {"shuffle", true}}},
                {"train", {{"steps", 12}, {"batch", 32}, {"optimizer", "momentum"}, {"lr", 0.05}}},
                {"eval", {{"samples", 0}}}};
}

// Loss of every (worker, step), from the run's records.
std::map<std::pair<int, int>, double> lossesOf(const Engine &e)
{
    std::map<std::pair<int, int>, double> out;
    for (const Record &r : e.events().all())
        if (!r.isSpan() && r.counter() == CounterId::Loss)
            out[{int(r.worker), int(r.step)}] = r.value;
    return out;
}

std::unique_ptr<Engine> runWith(const json &config, const std::vector<int> &script = {})
{
    PreparedRun p = prepareRun(config);
    auto e = std::make_unique<Engine>(p.config, p.train, p.eval);
    if (!script.empty())
        e->scriptServerOrder(script);
    e->start();
    if (!e->waitFor(std::chrono::seconds(120)))
        qFatal("run did not finish");
    return e;
}

} // namespace

void TestGpu::initTestCase()
{
    std::string why;
    m_backend = gpuBackend(&why);
    if (!m_backend)
        QSKIP(qPrintable(QString::fromStdString("no CUDA backend: " + why)));
    if (m_backend->devices().empty())
        QSKIP(qPrintable(QString::fromStdString("no CUDA device: " + m_backend->noDeviceReason())));
    qInfo("%s; %s", m_backend->devices().front().name.c_str(), m_backend->versions().c_str());
}

void TestGpu::devicesAreDescribed()
{
    for (const GpuInfo &g : m_backend->devices()) {
        QVERIFY(!g.name.empty());
        QVERIFY(g.totalBytes > 0);
        QVERIFY(g.freeBytes <= g.totalBytes);
        QVERIFY2(g.major >= 7, "CUDA 13 runs on compute capability 7.5 and newer");
        QVERIFY(g.multiprocessors > 0);
    }
    auto d = gpu();
    QCOMPARE(d->memorySpace(), 0);
    QVERIFY(!d->hostAccessible());
    QVERIFY(d->timer() != nullptr);
}

void TestGpu::gemm_data()
{
    QTest::addColumn<bool>("transA");
    QTest::addColumn<bool>("transB");
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("n");
    QTest::addColumn<int>("k");
    QTest::addColumn<bool>("tf32");
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            const QByteArray t = QByteArray(ta ? "T" : "N") + (tb ? "T" : "N");
            QTest::addRow("%s 7x13x5", t.constData()) << ta << tb << 7 << 13 << 5 << false;
            QTest::addRow("%s 64x33x129", t.constData()) << ta << tb << 64 << 33 << 129 << false;
            QTest::addRow("%s 256x512x384 tf32", t.constData()) << ta << tb << 256 << 512 << 384 << true;
        }
}

void TestGpu::gemm()
{
    QFETCH(bool, transA);
    QFETCH(bool, transB);
    QFETCH(int, m);
    QFETCH(int, n);
    QFETCH(int, k);
    QFETCH(bool, tf32);
    auto g = gpu(tf32);
    const auto A = randomVector(std::size_t(m) * k, 1), B = randomVector(std::size_t(k) * n, 2);
    const auto C = randomVector(std::size_t(m) * n, 3);
    const int lda = transA ? m : k, ldb = transB ? k : n;
    Mirror ca(m_cpu, A), cb(m_cpu, B), cc(m_cpu, C), ga(*g, A), gb(*g, B), gc(*g, C);
    m_cpu.gemm(transA, transB, m, n, k, 1.3f, ca.data(), lda, cb.data(), ldb, 0.5f, cc.data(), n);
    g->gemm(transA, transB, m, n, k, 1.3f, ga.data(), lda, gb.data(), ldb, 0.5f, gc.data(), n);
    // TF32 rounds inputs to 10 mantissa bits: errors grow like sqrt(k) * 2^-11 * |terms|.
    const double tol = tf32 ? 2e-3 * std::sqrt(double(k)) : 1e-4;
    expectClose(gc.read(), cc.read(), tol, tol, "gemm");
}

void TestGpu::elementwise_data()
{
    QTest::addColumn<int>("activation");
    for (Activation a : {Activation::Relu, Activation::Tanh, Activation::Gelu, Activation::Identity})
        QTest::newRow(activationName(a)) << int(a);
}

void TestGpu::elementwise()
{
    QFETCH(int, activation);
    const auto act = Activation(activation);
    auto g = gpu();
    const int rows = 37, cols = 300;
    const std::size_t n = std::size_t(rows) * cols;
    const auto Z = randomVector(n, 4, 2.0f), dA = randomVector(n, 5), bias = randomVector(cols, 6);
    Mirror cz(m_cpu, Z), gz(*g, Z), cb(m_cpu, bias), gb(*g, bias);
    m_cpu.addBias(cz.data(), cb.data(), rows, cols);
    g->addBias(gz.data(), gb.data(), rows, cols);
    expectClose(gz.read(), cz.read(), 1e-6, 1e-6, "addBias");

    Mirror ca(m_cpu, std::vector<float>(n)), ga(*g, std::vector<float>(n));
    m_cpu.activationForward(act, cz.data(), ca.data(), n);
    g->activationForward(act, gz.data(), ga.data(), n);
    expectClose(ga.read(), ca.read(), 1e-6, 1e-5, "activation forward");

    Mirror cd(m_cpu, dA), gd(*g, dA), cdz(m_cpu, std::vector<float>(n)), gdz(*g, std::vector<float>(n));
    m_cpu.activationBackward(act, cz.data(), ca.data(), cd.data(), cdz.data(), n);
    g->activationBackward(act, gz.data(), ga.data(), gd.data(), gdz.data(), n);
    expectClose(gdz.read(), cdz.read(), 1e-6, 1e-5, "activation backward");

    Mirror cg(m_cpu, std::vector<float>(cols)), gg(*g, std::vector<float>(cols));
    m_cpu.biasGrad(cd.data(), cg.data(), rows, cols);
    g->biasGrad(gd.data(), gg.data(), rows, cols);
    expectClose(gg.read(), cg.read(), 1e-5, 1e-5, "biasGrad");

    m_cpu.axpy(-0.7f, cd.data(), cz.data(), n);
    g->axpy(-0.7f, gd.data(), gz.data(), n);
    m_cpu.scale(1.5f, cz.data(), n);
    g->scale(1.5f, gz.data(), n);
    expectClose(gz.read(), cz.read(), 1e-6, 1e-6, "axpy and scale");
    g->fill(gz.data(), 3.25f, n);
    QCOMPARE(gz.read(), std::vector<float>(n, 3.25f));
}

void TestGpu::losses_data()
{
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("cols");
    QTest::newRow("10 classes") << 64 << 10;
    QTest::newRow("wider than a block") << 5 << 1000;
    QTest::newRow("one row") << 1 << 3;
}

void TestGpu::losses()
{
    QFETCH(int, rows);
    QFETCH(int, cols);
    auto g = gpu();
    const std::size_t n = std::size_t(rows) * cols;
    const auto logits = randomVector(n, 8, 3.0f);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r)
        labels[std::size_t(r)] = (r * 7 + 3) % cols;
    Mirror cl(m_cpu, logits), gl(*g, logits);
    DeviceBuffer glab(*g, labels.size());
    g->uploadBytes(glab.data(), labels.data(), labels.size() * sizeof(std::int32_t));
    const auto *glabels = reinterpret_cast<const std::int32_t *>(glab.data());
    Mirror cd(m_cpu, std::vector<float>(n)), gd(*g, std::vector<float>(n));
    const double cpuLoss = m_cpu.softmaxCrossEntropy(cl.data(), labels.data(), rows, cols, cd.data());
    const double gpuLoss = g->softmaxCrossEntropy(gl.data(), glabels, rows, cols, gd.data());
    QVERIFY2(std::abs(gpuLoss - cpuLoss) <= 1e-6 * (1 + std::abs(cpuLoss)),
             qPrintable(QStringLiteral("%1 vs %2").arg(gpuLoss).arg(cpuLoss)));
    expectClose(gd.read(), cd.read(), 1e-7, 1e-5, "dLogits");
    QCOMPARE(g->countCorrect(gl.data(), glabels, rows, cols),
             m_cpu.countCorrect(cl.data(), labels.data(), rows, cols));

    const auto target = randomVector(n, 9);
    Mirror ct(m_cpu, target), gt(*g, target);
    const double cpuMse = m_cpu.meanSquaredError(cl.data(), ct.data(), n, cd.data());
    const double gpuMse = g->meanSquaredError(gl.data(), gt.data(), n, gd.data());
    QVERIFY2(std::abs(gpuMse - cpuMse) <= 1e-6 * (1 + cpuMse),
             qPrintable(QStringLiteral("%1 vs %2").arg(gpuMse).arg(cpuMse)));
    expectClose(gd.read(), cd.read(), 1e-7, 1e-5, "dPred");
}

void TestGpu::optimizers_data()
{
    QTest::addColumn<QString>("kind");
    QTest::newRow("sgd") << QStringLiteral("sgd");
    QTest::newRow("momentum") << QStringLiteral("momentum");
    QTest::newRow("adam") << QStringLiteral("adam");
}

void TestGpu::optimizers()
{
    QFETCH(QString, kind);
    auto g = gpu();
    const std::size_t n = 100003;
    const auto p0 = randomVector(n, 10);
    Mirror cp(m_cpu, p0), gp(*g, p0), cs1(m_cpu, std::vector<float>(n)), gs1(*g, std::vector<float>(n)),
        cs2(m_cpu, std::vector<float>(n)), gs2(*g, std::vector<float>(n));
    for (int step = 1; step <= 3; ++step) {
        const auto grad = randomVector(n, 10 + unsigned(step));
        Mirror cg(m_cpu, grad), gg(*g, grad);
        if (kind == QLatin1String("sgd")) {
            m_cpu.sgdStep(cp.data(), cg.data(), 0.1f, n);
            g->sgdStep(gp.data(), gg.data(), 0.1f, n);
        } else if (kind == QLatin1String("momentum")) {
            m_cpu.momentumStep(cp.data(), cg.data(), cs1.data(), 0.1f, 0.9f, n);
            g->momentumStep(gp.data(), gg.data(), gs1.data(), 0.1f, 0.9f, n);
        } else {
            m_cpu.adamStep(cp.data(), cg.data(), cs1.data(), cs2.data(), 1e-3f, 0.9f, 0.999f, 1e-8f, step, n);
            g->adamStep(gp.data(), gg.data(), gs1.data(), gs2.data(), 1e-3f, 0.9f, 0.999f, 1e-8f, step, n);
        }
    }
    expectClose(gp.read(), cp.read(), 1e-6, 1e-5, "parameters");
    expectClose(gs1.read(), cs1.read(), 1e-6, 1e-5, "optimizer state");
}

void TestGpu::reductions()
{
    auto g = gpu();
    const std::size_t n = (std::size_t(1) << 20) + 17;
    auto v = randomVector(n, 20);
    Mirror cv(m_cpu, v), gv(*g, v);
    const double want = m_cpu.sumSquares(cv.data(), n);
    const double got = g->sumSquares(gv.data(), n);
    QVERIFY2(std::abs(got - want) <= 1e-9 * want, qPrintable(QStringLiteral("%1 vs %2").arg(got).arg(want)));
    QVERIFY(g->allFinite(gv.data(), n));
    v[n - 1] = std::numeric_limits<float>::quiet_NaN();
    g->upload(gv.data(), v.data(), n);
    QVERIFY(!g->allFinite(gv.data(), n));
    v[n - 1] = std::numeric_limits<float>::infinity();
    g->upload(gv.data(), v.data(), n);
    QVERIFY(!g->allFinite(gv.data(), n));
}

void TestGpu::batchNorm()
{
    // Every batch-norm step against the CPU backend, with more rows than a block's row groups
    // and more columns than one block.
    auto g = gpu();
    const int rows = 45, cols = 70;
    const std::size_t n = std::size_t(rows) * cols;
    const auto x = randomVector(n, 21, 2.0f), dy = randomVector(n, 22);
    const auto gamma = randomVector(cols, 23), beta = randomVector(cols, 24);
    Mirror cx(m_cpu, x), gx(*g, x), cgm(m_cpu, gamma), ggm(*g, gamma), cbt(m_cpu, beta), gbt(*g, beta);
    auto both = [&](std::size_t size, float value = 0.0f) {
        return std::make_pair(std::make_unique<Mirror>(m_cpu, std::vector<float>(size, value)),
                              std::make_unique<Mirror>(*g, std::vector<float>(size, value)));
    };
    auto [csum, gsum] = both(cols);
    auto [csq, gsq] = both(cols);
    auto [cmean, gmean] = both(cols);
    auto [cinv, ginv] = both(cols);
    auto [crm, grm] = both(cols, 0.5f);
    auto [crv, grv] = both(cols, 2.0f);
    m_cpu.biasGrad(cx.data(), csum->data(), rows, cols);
    g->biasGrad(gx.data(), gsum->data(), rows, cols);
    m_cpu.batchNormCenteredSquares(cx.data(), csum->data(), 1.0f / rows, rows, cols, csq->data());
    g->batchNormCenteredSquares(gx.data(), gsum->data(), 1.0f / rows, rows, cols, gsq->data());
    expectClose(gsq->read(), csq->read(), 1e-4, 1e-5, "batchNormCenteredSquares");
    m_cpu.batchNormStatistics(csum->data(), csq->data(), rows, 1e-5f, 0.1f, cols, cmean->data(),
                              cinv->data(), crm->data(), crv->data());
    g->batchNormStatistics(gsum->data(), gsq->data(), rows, 1e-5f, 0.1f, cols, gmean->data(),
                           ginv->data(), grm->data(), grv->data());
    expectClose(gmean->read(), cmean->read(), 1e-6, 1e-5, "batch mean");
    expectClose(ginv->read(), cinv->read(), 1e-6, 1e-5, "batch 1/std");
    expectClose(grm->read(), crm->read(), 1e-6, 1e-5, "running mean");
    expectClose(grv->read(), crv->read(), 1e-6, 1e-5, "running variance");

    auto [cxh, gxh] = both(n);
    auto [cy, gy] = both(n);
    m_cpu.batchNormForward(cx.data(), cmean->data(), cinv->data(), cgm.data(), cbt.data(), rows,
                           cols, cxh->data(), cy->data());
    g->batchNormForward(gx.data(), gmean->data(), ginv->data(), ggm.data(), gbt.data(), rows, cols,
                        gxh->data(), gy->data());
    expectClose(gxh->read(), cxh->read(), 1e-5, 1e-5, "x-hat");
    expectClose(gy->read(), cy->read(), 1e-5, 1e-5, "batch norm forward");

    Mirror cdy(m_cpu, dy), gdy(*g, dy);
    auto [csums, gsums] = both(2 * std::size_t(cols));
    m_cpu.batchNormBackwardSums(cdy.data(), cxh->data(), rows, cols, csums->data());
    g->batchNormBackwardSums(gdy.data(), gxh->data(), rows, cols, gsums->data());
    expectClose(gsums->read(), csums->read(), 1e-4, 1e-5, "batch norm backward sums");
    m_cpu.batchNormBackward(cdy.data(), cxh->data(), cinv->data(), cgm.data(), csums->data(),
                            1.0f / rows, rows, cols, cdy.data());
    g->batchNormBackward(gdy.data(), gxh->data(), ginv->data(), ggm.data(), gsums->data(),
                         1.0f / rows, rows, cols, gdy.data());
    expectClose(gdy.read(), cdy.read(), 1e-4, 1e-4, "batch norm backward");
}

void TestGpu::batchNormModel()
{
    // A batch-normalised, checkpointed model: loss, gradients, running statistics and an
    // evaluation by them, on the GPU and on the CPU.
    ModelSpec spec{{12, 32, 32, 32, 4}, Activation::Gelu, true, 2};
    spec.batchNorm = true;
    const int batch = 16;
    auto g = gpu();
    Model cm(m_cpu, spec, batch), gm(*g, spec, batch);
    const auto params = Model::initialParams(spec, 5);
    cm.setParams(params);
    gm.setParams(params);
    const auto x = randomVector(std::size_t(batch) * 12, 31);
    std::vector<std::int32_t> labels(batch);
    for (int r = 0; r < batch; ++r)
        labels[std::size_t(r)] = r % 4;
    Mirror gx(*g, x);
    DeviceBuffer gl(*g, std::size_t(batch));
    g->uploadBytes(gl.data(), labels.data(), labels.size() * sizeof(std::int32_t));
    const auto *glabels = reinterpret_cast<const std::int32_t *>(gl.data());
    for (int step = 0; step < 2; ++step) {
        const double cl = cm.forwardLoss(x.data(), labels.data(), nullptr, nullptr, 0);
        const double gloss = gm.forwardLoss(gx.data(), glabels, nullptr, nullptr, 0);
        QVERIFY(std::abs(cl - gloss) <= 1e-4 * std::abs(cl));
        cm.backward(nullptr, 0);
        gm.backward(nullptr, 0);
    }
    expectClose(gm.gradsToHost(), cm.gradsToHost(), 1e-4, 1e-3, "gradients");
    expectClose(gm.runningStatsToHost(), cm.runningStatsToHost(), 1e-5, 1e-4, "running statistics");
    const EvalResult ce = cm.evaluate(x.data(), labels.data(), nullptr, batch);
    const EvalResult ge = gm.evaluate(x.data(), labels.data(), nullptr, batch);
    QVERIFY(std::abs(ce.loss - ge.loss) <= 1e-4 * std::abs(ce.loss));
}

void TestGpu::copiesBetweenWorkers()
{
    // Two workers' devices on GPU 0 (as on a one-GPU workstation), and GPU 0 to the last GPU.
    auto a = gpu();
    auto b = gpu();
    const int last = m_backend->devices().back().index;
    auto c = m_backend->createDevice(last, {});
    const auto v = randomVector(4097, 30);
    Mirror src(*a, v), dst(*b, std::vector<float>(v.size())), far(*c, std::vector<float>(v.size()));
    b->copyFrom(*a, dst.data(), src.data(), v.size() * sizeof(float));
    c->copyFrom(*a, far.data(), src.data(), v.size() * sizeof(float));
    QCOMPARE(dst.read(), v);
    QCOMPARE(far.read(), v);
    std::vector<float> host(v.size());
    m_cpu.copyFrom(*a, host.data(), src.data(), v.size() * sizeof(float));
    QCOMPARE(host, v);
}

void TestGpu::badLabelIsAnError()
{
    auto g = gpu();
    const auto logits = randomVector(4 * 3, 40);
    Mirror gl(*g, logits);
    const std::vector<std::int32_t> labels = {0, 2, 3, 1};
    DeviceBuffer glab(*g, labels.size());
    g->uploadBytes(glab.data(), labels.data(), labels.size() * sizeof(std::int32_t));
    try {
        g->softmaxCrossEntropy(gl.data(), reinterpret_cast<const std::int32_t *>(glab.data()), 4, 3,
                               nullptr);
        QFAIL("a label outside the classes was accepted");
    } catch (const DeviceError &e) {
        QVERIFY2(std::string(e.what()).find("label 3 at row 2") != std::string::npos, e.what());
    }
}

void TestGpu::outOfMemoryNamesTheBytes()
{
    auto g = gpu();
    const std::size_t huge = std::size_t(1) << 50; // a pebibyte
    try {
        g->allocateBytes(huge);
        QFAIL("a pebibyte was allocated");
    } catch (const DeviceError &e) {
        const std::string what = e.what();
        QVERIFY2(what.find("out of GPU memory") != std::string::npos, e.what());
        QVERIFY2(what.find(std::to_string(huge) + " bytes") != std::string::npos, e.what());
        QVERIFY2(what.find("free of") != std::string::npos, e.what());
    }
    // The device still works afterwards.
    Mirror m(*g, {1.0f, 2.0f});
    QCOMPARE(m.read(), (std::vector<float>{1.0f, 2.0f}));
}

void TestGpu::runsMatchTheCpu_data()
{
    QTest::addColumn<QString>("mode");
    QTest::addColumn<int>("workers");
    QTest::addColumn<bool>("tf32");
    QTest::newRow("sync, 4 workers") << QStringLiteral("sync") << 4 << false;
    QTest::newRow("checkpointed, 4 workers") << QStringLiteral("checkpointed") << 4 << false;
    QTest::newRow("async, 2 workers, scripted") << QStringLiteral("async") << 2 << false;
    QTest::newRow("sync, 4 workers, tf32") << QStringLiteral("sync") << 4 << true;
}

void TestGpu::runsMatchTheCpu()
{
    QFETCH(QString, mode);
    QFETCH(int, workers);
    QFETCH(bool, tf32);
    const std::string m = mode.toStdString();
    std::vector<int> script;
    if (m == "async") // the same server order on both, so the same staleness (0, 1) and updates
        for (int round = 0; round < 6; ++round)
            script.insert(script.end(), {1, 2, -1, -2});
    json gpuConfig = smallRun("cuda:0", m, workers);
    gpuConfig["device.tf32"] = tf32;
    auto cpuRun = runWith(smallRun("cpu", m, workers), script);
    auto gpuRun = runWith(gpuConfig, script);
    QCOMPARE(gpuRun->state(), RunState::Finished);
    QCOMPARE(cpuRun->state(), RunState::Finished);
    if (m != "async")
        QCOMPARE(gpuRun->reduceAlgorithm(), std::string("shared memory"));
    const auto cpuLoss = lossesOf(*cpuRun), gpuLoss = lossesOf(*gpuRun);
    QCOMPARE(gpuLoss.size(), cpuLoss.size());
    const double rtol = tf32 ? 1e-3 : 1e-4;
    for (const auto &[key, want] : cpuLoss) {
        const double got = gpuLoss.at(key);
        QVERIFY2(std::abs(got - want) <= rtol * std::abs(want),
                 qPrintable(QStringLiteral("worker %1 step %2: loss %3 on the GPU, %4 on the CPU")
                                .arg(key.first).arg(key.second).arg(got).arg(want)));
    }
}

void TestGpu::spansAreTimedOnTheDevice()
{
    auto e = runWith(smallRun("cuda", "sync", 3));
    QCOMPARE(e->state(), RunState::Finished);
    std::map<std::tuple<int, int, int>, int> seen;
    const std::int64_t end = e->elapsedNs();
    for (const Record &r : e->events().all()) {
        if (!r.isSpan())
            continue;
        QVERIFY(r.start <= r.end);
        QVERIFY2(r.start >= -1'000'000 && r.end <= end + 1'000'000,
                 qPrintable(QStringLiteral("%1 span at %2..%3 ns, run ended at %4")
                                .arg(QString::fromLatin1(phaseName(r.phase()))).arg(r.start).arg(r.end).arg(end)));
        ++seen[{int(r.worker), int(r.step), int(r.phase())}];
    }
    for (int w = 0; w < 3; ++w)
        for (int s = 0; s < 12; ++s)
            for (Phase p : {Phase::Forward, Phase::Backward, Phase::Apply})
                QVERIFY2((seen[std::make_tuple(w, s, int(p))] == 1),
                         qPrintable(QStringLiteral("worker %1 step %2 %3").arg(w).arg(s).arg(QString::fromLatin1(phaseName(p)))));
}

QTEST_GUILESS_MAIN(TestGpu)
#include "tst_gpu.moc"
