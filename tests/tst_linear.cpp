// A linear layer's plan (forward with fused bias and activation, the two backward products and
// the bias gradient) against plain double-precision loops: the CPU device's oneDNN plan, and the
// generic plan every other device inherits, over shapes that include odd sizes and one row.
#include "cpu/cpudevice.h"
#include "cpu/cpulinear.h"

#include <QTest>

#include <cmath>
#include <random>
#include <vector>

using namespace syncopate;

class TestLinear : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void matchesReference_data();
    void matchesReference();
    void planRunsOnMoreThreads();
    void reportsTheInstructionSet();
};

namespace {

std::vector<float> randomVector(std::size_t n, unsigned seed, float scale = 1.0f)
{
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (auto &x : v)
        x = d(g);
    return v;
}

double act(Activation a, double z)
{
    switch (a) {
    case Activation::Relu: return z > 0 ? z : 0;
    case Activation::Tanh: return std::tanh(z);
    case Activation::Gelu: return 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
    case Activation::Identity: return z;
    }
    return 0;
}

double actGrad(Activation a, double z)
{
    switch (a) {
    case Activation::Relu: return z > 0 ? 1 : 0;
    case Activation::Tanh: {
        const double t = std::tanh(z);
        return 1 - t * t;
    }
    case Activation::Gelu:
        return 0.5 * (1 + std::erf(z / std::sqrt(2.0))) +
               z * std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
    case Activation::Identity: return 1;
    }
    return 0;
}

// |got - want| <= tol, where tol scales with the sum of the magnitudes of the terms that make
// up want (float rounding of a sum of k products grows with them, not with the sum itself).
void compare(const char *what, const std::vector<float> &got, const std::vector<double> &want,
             const std::vector<double> &magnitude, double rtol)
{
    QCOMPARE(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double tol = 1e-6 + rtol * magnitude[i];
        if (!(std::abs(double(got[i]) - want[i]) <= tol))
            QFAIL(qPrintable(QStringLiteral("%1[%2]: %3, expected %4 (tolerance %5)")
                                 .arg(QLatin1String(what))
                                 .arg(i)
                                 .arg(double(got[i]), 0, 'g', 9)
                                 .arg(want[i], 0, 'g', 9)
                                 .arg(tol)));
    }
}

} // namespace

void TestLinear::matchesReference_data()
{
    QTest::addColumn<QString>("plan");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("in");
    QTest::addColumn<int>("out");
    QTest::addColumn<int>("activation");
    QTest::addColumn<bool>("bias");
    const struct {
        int rows, in, out;
    } shapes[] = {{1, 7, 5}, {1, 784, 256}, {3, 17, 13}, {33, 65, 129}, {64, 784, 256},
                  {128, 1024, 10}, {8, 16, 32}};
    const Activation acts[] = {Activation::Relu, Activation::Tanh, Activation::Gelu,
                               Activation::Identity};
    for (const char *plan : {"onednn", "generic"})
        for (const auto &s : shapes)
            for (Activation a : acts)
                for (bool bias : {true, false})
                    QTest::addRow("%s %dx%dx%d %s%s", plan, s.rows, s.in, s.out, activationName(a),
                                  bias ? " bias" : "")
                        << QString::fromLatin1(plan) << s.rows << s.in << s.out << int(a) << bias;
}

void TestLinear::matchesReference()
{
    QFETCH(QString, plan);
    QFETCH(int, rows);
    QFETCH(int, in);
    QFETCH(int, out);
    QFETCH(int, activation);
    QFETCH(bool, bias);
    const auto a = Activation(activation);
    CpuDevice dev;
    const LinearShape shape{rows, in, out, a};
    std::unique_ptr<LinearPlan> p = plan == QLatin1String("onednn")
                                        ? dev.planLinear(shape)
                                        : std::make_unique<GenericLinearPlan>(dev, shape);
    const auto x = randomVector(std::size_t(rows) * in, 1);
    const auto W = randomVector(std::size_t(out) * in, 2, float(1 / std::sqrt(double(in))));
    const auto b = bias ? randomVector(std::size_t(out), 3) : std::vector<float>(std::size_t(out), 0.0f);
    const auto dA0 = randomVector(std::size_t(rows) * out, 4);
    const std::size_t nOut = std::size_t(rows) * out;

    std::vector<float> z(nOut, -7.0f), A(nOut, -7.0f);
    p->forward(x.data(), W.data(), b.data(), z.data(), A.data());
    std::vector<double> zRef(nOut), aRef(nOut), zMag(nOut), aMag(nOut);
    for (int r = 0; r < rows; ++r)
        for (int o = 0; o < out; ++o) {
            double s = b[std::size_t(o)], m = std::abs(b[std::size_t(o)]);
            for (int i = 0; i < in; ++i) {
                const double t = double(x[std::size_t(r) * in + i]) * W[std::size_t(o) * in + i];
                s += t;
                m += std::abs(t);
            }
            const std::size_t k = std::size_t(r) * out + o;
            zRef[k] = s;
            aRef[k] = act(a, s);
            zMag[k] = m;
            aMag[k] = m * std::max(1.0, std::abs(actGrad(a, s)));
        }
    if (a != Activation::Identity) // Identity writes z only
        compare("a", A, aRef, aMag, 2e-6);
    if (a == Activation::Gelu || a == Activation::Identity) // whose z is read later
        compare("z", z, zRef, zMag, 2e-6);

    std::vector<float> dA = dA0;
    std::vector<float> dW(std::size_t(out) * in, -7.0f), db(std::size_t(out), -7.0f),
        dIn(std::size_t(rows) * in, -7.0f);
    p->backward(x.data(), W.data(), z.data(), A.data(), dA.data(), dW.data(), db.data(), dIn.data());
    // relu's mask is where the forward's own output is positive (a z within rounding of 0 may
    // fall on either side in float).
    std::vector<double> dZ(nOut);
    for (std::size_t k = 0; k < nOut; ++k)
        dZ[k] = double(dA0[k]) * (a == Activation::Relu ? (A[k] > 0 ? 1.0 : 0.0) : actGrad(a, zRef[k]));
    std::vector<double> dWRef(dW.size()), dWMag(dW.size()), dbRef(db.size()), dbMag(db.size()),
        dInRef(dIn.size()), dInMag(dIn.size());
    for (int o = 0; o < out; ++o) {
        for (int r = 0; r < rows; ++r) {
            const double g = dZ[std::size_t(r) * out + o];
            dbRef[std::size_t(o)] += g;
            dbMag[std::size_t(o)] += std::abs(g);
            for (int i = 0; i < in; ++i) {
                const std::size_t k = std::size_t(o) * in + i;
                dWRef[k] += g * x[std::size_t(r) * in + i];
                dWMag[k] += std::abs(g * x[std::size_t(r) * in + i]);
            }
        }
    }
    for (int r = 0; r < rows; ++r)
        for (int i = 0; i < in; ++i) {
            const std::size_t k = std::size_t(r) * in + i;
            for (int o = 0; o < out; ++o) {
                const double t = dZ[std::size_t(r) * out + o] * W[std::size_t(o) * in + i];
                dInRef[k] += t;
                dInMag[k] += std::abs(t);
            }
        }
    compare("dW", dW, dWRef, dWMag, 2e-6);
    compare("db", db, dbRef, dbMag, 2e-6);
    compare("dIn", dIn, dInRef, dInMag, 2e-6);
}

void TestLinear::planRunsOnMoreThreads()
{
    // A plan made for two threads gives what the one-thread plan gives, within rounding (the
    // threads split rows and columns, not sums, for these shapes).
    const LinearShape shape{64, 300, 200, Activation::Tanh};
    const auto x = randomVector(std::size_t(64) * 300, 5);
    const auto W = randomVector(std::size_t(200) * 300, 6, 0.05f);
    const auto b = randomVector(200, 7);
    std::vector<float> out[2];
    for (int t : {1, 2}) {
        CpuDevice dev(t);
        dev.bindThread();
        QCOMPARE(dev.threads(), t);
        auto p = dev.planLinear(shape);
        std::vector<float> z(std::size_t(64) * 200), a(z.size());
        p->forward(x.data(), W.data(), b.data(), z.data(), a.data());
        out[t - 1] = a;
    }
    for (std::size_t i = 0; i < out[0].size(); ++i)
        QVERIFY(std::abs(out[0][i] - out[1][i]) <= 1e-5f);
}

void TestLinear::reportsTheInstructionSet()
{
    const std::string isa = cpuIsa();
    QVERIFY(!isa.empty());
    QVERIFY(isa != "unknown");
    QVERIFY(cpuLibrary().find("oneDNN") == 0);
    CpuDevice dev;
    auto p = dev.planLinear({64, 784, 256, Activation::Relu});
    const auto names = static_cast<CpuLinearPlan &>(*p).implementations();
    qInfo("cpu_isa %s; kernels of a 64x784x256 layer (forward, dW, dIn): %s", isa.c_str(), names.c_str());
}

QTEST_APPLESS_MAIN(TestLinear)
#include "tst_linear.moc"
