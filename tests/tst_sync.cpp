// The sync strategy: N workers with batch B equal one worker with batch N*B, runs are
// reproducible bit for bit, every phase is recorded, and a straggler's cost shows as waits.
#include "testutil.h"

using namespace syncopate;
using namespace syncopate::test;
using nlohmann::json;

class TestSync : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void workersEqualOneBigBatch_data();
    void workersEqualOneBigBatch();
    void reproducibleBitForBit();
    void everyPhaseIsRecorded();
    void stragglerStallsTheOthers();
    void lossFalls();
};

static json small(int workers, int batch, const char *optimizer, bool shuffle)
{
    return json{{"workers", workers},
                {"model", {{"layers", {12, 32, 32, 4}}}},
                {"data", {{"source", "blobs"}, {"samples", 300}, {"shuffle", shuffle}}},
                {"train", {{"steps", 25}, {"batch", batch}, {"optimizer", optimizer}, {"lr", 0.02}}},
                {"eval", {{"samples", 0}}}};
}

void TestSync::workersEqualOneBigBatch_data()
{
    QTest::addColumn<QString>("optimizer");
    QTest::addColumn<bool>("shuffle");
    for (const char *o : {"sgd", "momentum", "adam"})
        for (bool s : {false, true})
            QTest::newRow(qPrintable(QString::fromLatin1(o) + (s ? QStringLiteral(" shuffled") : QString())))
                << QString::fromLatin1(o) << s;
}

void TestSync::workersEqualOneBigBatch()
{
    QFETCH(QString, optimizer);
    QFETCH(bool, shuffle);
    const std::string o = optimizer.toStdString();
    auto four = runToEnd(small(4, 16, o.c_str(), shuffle));
    auto one = runToEnd(small(1, 64, o.c_str(), shuffle));
    QCOMPARE(four->state(), RunState::Finished);
    QCOMPARE(one->state(), RunState::Finished);
    const auto a = four->finalParams(), b = one->finalParams();
    QVERIFY(a != four->initialParams()); // it trained
    const double diff = maxAbsoluteDifference(a, b);
    QVERIFY2(diff < 1e-5, qPrintable(QStringLiteral("max |difference| %1").arg(diff)));
}

void TestSync::reproducibleBitForBit()
{
    const json c = small(3, 8, "momentum", true);
    auto a = runToEnd(c), b = runToEnd(c);
    QCOMPARE(a->finalParams(), b->finalParams());
}

void TestSync::everyPhaseIsRecorded()
{
    auto e = runToEnd(small(3, 8, "sgd", false));
    const auto records = e->events().all();
    // phase -> count per (worker, step)
    std::map<std::tuple<int, int, int>, int> seen;
    for (const auto &r : records)
        if (r.isSpan())
            ++seen[{r.worker, int(r.step), int(r.phase())}];
    for (int w = 0; w < 3; ++w)
        for (int s = 0; s < 25; ++s) {
            for (Phase p : {Phase::Data, Phase::Forward, Phase::Backward, Phase::Reduce, Phase::Apply})
                QVERIFY2((seen[std::make_tuple(w, s, int(p))] >= 1), phaseName(p));
            // before and after the reduction
            QCOMPARE((seen[std::make_tuple(w, s, int(Phase::Wait))]), 2);
        }
}

void TestSync::stragglerStallsTheOthers()
{
    // Two workers, one three times slower: the fast one waits about as long per step as the
    // straggler's injected delay. Loose bounds: the machine may be busy.
    if (underSanitizer())
        QSKIP("a ratio of times is not meaningful under a sanitizer");
    json c = small(2, 64, "sgd", false);
    c["model"]["layers"] = {64, 384, 384, 10};
    c["train"]["steps"] = 40;
    c["workers_slowdown"] = {1, 3};
    c["data"]["prefetch"] = false;
    auto e = runToEnd(c);
    double fastWait = 0, slowDelay = 0;
    for (const auto &r : e->events().all()) {
        if (!r.isSpan() || r.step < 5) // skip warm-up
            continue;
        if (r.worker == 0 && r.phase() == Phase::Wait)
            fastWait += double(r.duration());
        if (r.worker == 1 && r.phase() == Phase::Delay)
            slowDelay += double(r.duration());
    }
    QVERIFY(slowDelay > 0);
    const double ratio = fastWait / slowDelay;
    QVERIFY2(ratio > 0.5 && ratio < 1.6, qPrintable(QStringLiteral("wait/delay = %1").arg(ratio)));
}

void TestSync::lossFalls()
{
    json c = small(2, 32, "momentum", true);
    c["train"]["steps"] = 120;
    c["eval"] = {{"samples", 500}, {"every", 40}};
    auto e = runToEnd(c);
    std::vector<double> losses;
    for (const auto &r : e->events().all())
        if (!r.isSpan() && r.counter() == CounterId::Loss)
            losses.push_back(r.value);
    QVERIFY(losses.size() == 240);
    const double first = (losses[0] + losses[1]) / 2;
    const double last = (losses[238] + losses[239]) / 2;
    QVERIFY2(last < 0.5 * first, qPrintable(QStringLiteral("%1 -> %2").arg(first).arg(last)));
    const auto evals = e->evalHistory();
    QCOMPARE(int(evals.size()), 3); // at 40, 80 and the end
    QVERIFY(evals.back().accuracy > 0.6);
}

QTEST_APPLESS_MAIN(TestSync)
#include "tst_sync.moc"
