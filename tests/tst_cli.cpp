// syncopate-cli as a user drives it: Ctrl-C stops a run and still writes it, bad input exits 2
// with the key named and writes nothing, presets and validate answer.
#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonArray>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <csignal>

class TestCli : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void interruptStopsAndKeepsTheRun();
    void badSetWritesNothing();
    void validateNamesTheKey();
    void presetsAreListed();
    void importWritesARunFolder();
    void importRejectsADamagedTrace();

private:
    static QProcess *start(const QStringList &args);
};

QProcess *TestCli::start(const QStringList &args)
{
    auto *p = new QProcess;
    p->start(QStringLiteral(SYNCOPATE_CLI), args);
    return p;
}

void TestCli::interruptStopsAndKeepsTheRun()
{
    QTemporaryDir dir;
    const QString out = dir.filePath(QStringLiteral("stopped"));
    std::unique_ptr<QProcess> p(start({QStringLiteral("run"), QStringLiteral("--set"), QStringLiteral("train.steps=100000000"),
                                       QStringLiteral("--out"), out}));
    QVERIFY(p->waitForStarted());
    // Interrupt only once the CLI says its handlers are in place, then give it some steps.
    QByteArray said;
    for (int tries = 0; tries < 60 && !said.contains("Ctrl-C stops") && p->state() == QProcess::Running; ++tries) {
        p->waitForReadyRead(1000);
        said += p->readAllStandardError();
    }
    QVERIFY2(said.contains("Ctrl-C stops"), said.constData());
    // Some steps in: metrics.csv has a row past its header (flushed about once a second).
    QTRY_VERIFY_WITH_TIMEOUT([&] {
        QFile csv(out + QStringLiteral("/metrics.csv"));
        return csv.open(QIODevice::ReadOnly) && csv.readAll().count('\n') >= 2;
    }(), 30000);
    ::kill(pid_t(p->processId()), SIGINT);
    QVERIFY(p->waitForFinished(30000));
    QCOMPARE(p->exitCode(), 130);
    QFile summary(out + QStringLiteral("/summary.json"));
    QVERIFY(summary.open(QIODevice::ReadOnly));
    const QJsonObject s = QJsonDocument::fromJson(summary.readAll()).object();
    QCOMPARE(s.value(QStringLiteral("status")).toString(), QStringLiteral("stopped"));
    // How many steps ran depends on the machine; that the run stopped early does not.
    const int steps = s.value(QStringLiteral("steps_completed")).toInt(-1);
    QVERIFY2(steps >= 0 && steps < 100000000, qPrintable(QString::number(steps)));
    for (const char *f : {"trace.json", "metrics.csv", "config.json", "params-final.safetensors"})
        QVERIFY2(QFile::exists(out + QLatin1Char('/') + QLatin1String(f)), f);
}

void TestCli::badSetWritesNothing()
{
    QTemporaryDir dir;
    const QString out = dir.filePath(QStringLiteral("never"));
    std::unique_ptr<QProcess> p(start({QStringLiteral("run"), QStringLiteral("--set"), QStringLiteral("train.optimiser=adam"),
                                       QStringLiteral("--out"), out}));
    QVERIFY(p->waitForFinished(30000));
    QCOMPARE(p->exitCode(), 2);
    const QString err = QString::fromUtf8(p->readAllStandardError());
    QVERIFY2(err.contains(QStringLiteral("unknown key \"train.optimiser\" (did you mean \"train.optimizer\"?)")), qPrintable(err));
    QVERIFY(!QDir(out).exists());
}

void TestCli::validateNamesTheKey()
{
    QTemporaryDir dir;
    const QString file = dir.filePath(QStringLiteral("bad.json"));
    QFile f(file);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{\"workers\": 0, \"train\": {\"lr\": -1}}");
    f.close();
    std::unique_ptr<QProcess> p(start({QStringLiteral("validate"), file}));
    QVERIFY(p->waitForFinished(30000));
    QCOMPARE(p->exitCode(), 2);
    const QString err = QString::fromUtf8(p->readAllStandardError());
    QVERIFY2(err.contains(QStringLiteral("workers = 0")) && err.contains(QStringLiteral("train.lr = -1")), qPrintable(err));
}

void TestCli::presetsAreListed()
{
    std::unique_ptr<QProcess> p(start({QStringLiteral("presets")}));
    QVERIFY(p->waitForFinished(30000));
    QCOMPARE(p->exitCode(), 0);
    const QString text = QString::fromUtf8(p->readAllStandardOutput());
    for (const char *name : {"default", "straggler-sync", "straggler-async", "bounded-staleness", "checkpointing", "fashion-mnist"})
        QVERIFY2(text.contains(QLatin1String(name)), name);
}

// A two-rank job by hand: two steps, one all-reduce each; rank 1 starts them 2 ms and 3 ms
// after rank 0 (which waits in its kernel until then).
static void writeTwoRankJob(const QString &dir)
{
    for (int rank = 0; rank < 2; ++rank) {
        QString events;
        for (int step = 0; step < 2; ++step) {
            const int stepStart = 1000 + step * 10000;
            const int late = rank == 1 ? (step == 0 ? 2000 : 3000) : 0;
            const int ncclStart = stepStart + 4000 + late;
            const int ncclEnd = stepStart + 4000 + (step == 0 ? 2000 : 3000) + 500;
            events += QStringLiteral(
                          R"({"ph":"X","cat":"user_annotation","name":"ProfilerStep#%1","pid":1,"tid":1,"ts":%2,"dur":10000},)"
                          R"({"ph":"X","cat":"kernel","name":"sgemm_128x64","pid":0,"tid":7,"ts":%3,"dur":3000,"args":{"stream":7,"device":0}},)"
                          R"({"ph":"X","cat":"kernel","name":"ncclKernel_AllReduce_RING_LL_Sum_float","pid":0,"tid":13,"ts":%4,"dur":%5,"args":{"stream":13,"device":0}},)")
                          .arg(step + 1)
                          .arg(stepStart)
                          .arg(stepStart + 500)
                          .arg(ncclStart)
                          .arg(ncclEnd - ncclStart);
        }
        events.chop(1);
        QFile f(dir + QStringLiteral("/job_rank%1.json").arg(rank));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QStringLiteral(R"({"schemaVersion":1,"distributedInfo":{"backend":"nccl","rank":%1,"world_size":2},"traceEvents":[%2]})")
                    .arg(rank)
                    .arg(events)
                    .toUtf8());
    }
}

void TestCli::importWritesARunFolder()
{
    QTemporaryDir dir;
    writeTwoRankJob(dir.path());
    const QString out = dir.filePath(QStringLiteral("job"));
    std::unique_ptr<QProcess> p(start({QStringLiteral("import"), dir.filePath(QStringLiteral("job_rank0.json")),
                                       dir.filePath(QStringLiteral("job_rank1.json")), QStringLiteral("--out"), out,
                                       QStringLiteral("--images")}));
    QVERIFY(p->waitForFinished(120000));
    const QString said = QString::fromUtf8(p->readAllStandardOutput() + p->readAllStandardError());
    QVERIFY2(p->exitCode() == 0, qPrintable(said));
    QVERIFY2(said.contains(QStringLiteral("straggler rank 1")), qPrintable(said));
    QFile summaryFile(out + QStringLiteral("/summary.json"));
    QVERIFY(summaryFile.open(QIODevice::ReadOnly));
    const QJsonObject s = QJsonDocument::fromJson(summaryFile.readAll()).object();
    QCOMPARE(s.value(QStringLiteral("source")).toString(), QStringLiteral("kineto"));
    QCOMPARE(s.value(QStringLiteral("collectives_matched")).toInt(), 2);
    QCOMPARE(s.value(QStringLiteral("straggler")).toObject().value(QStringLiteral("rank")).toInt(), 1);
    // Rank 0 waited 2 + 3 ms in all; rank 1 not at all.
    const auto stalls = s.value(QStringLiteral("stall_ms_per_worker")).toArray();
    QCOMPARE(stalls.size(), 2);
    QVERIFY(qAbs(stalls[0].toDouble() - 5.0) < 1e-6);
    QVERIFY(qAbs(stalls[1].toDouble()) < 1e-6);
    QFile csv(out + QStringLiteral("/metrics.csv"));
    QVERIFY(csv.open(QIODevice::ReadOnly));
    const QStringList lines = QString::fromUtf8(csv.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 5); // header, two ranks by two steps
    QVERIFY(lines[0].startsWith(QStringLiteral("worker,step,t_ms,step_ms,wait_ms")));
    for (const char *f : {"timeline.png", "stalls.png", "trace.json", "index.syi", "w1-s1.syr"}) // stream 13, NCCL
        QVERIFY2(QFile::exists(out + QLatin1Char('/') + QLatin1String(f)), f);
    // The folder reads back as any run does.
    std::unique_ptr<QProcess> info(start({QStringLiteral("info"), out}));
    QVERIFY(info->waitForFinished(30000));
    QCOMPARE(info->exitCode(), 0);
}

void TestCli::importRejectsADamagedTrace()
{
    QTemporaryDir dir;
    const QString bad = dir.filePath(QStringLiteral("rank0.json"));
    QFile f(bad);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(R"({"traceEvents":[{"ph":"X","name":"x","ts":1,"dur":)");
    f.close();
    const QString out = dir.filePath(QStringLiteral("never"));
    std::unique_ptr<QProcess> p(start({QStringLiteral("import"), bad, QStringLiteral("--out"), out}));
    QVERIFY(p->waitForFinished(30000));
    QCOMPARE(p->exitCode(), 2);
    const QString said = QString::fromUtf8(p->readAllStandardError());
    QVERIFY2(said.contains(bad), qPrintable(said));
    QVERIFY(!QFile::exists(out));
}

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
