// syncopate-cli as a user drives it: Ctrl-C stops a run and still writes it, bad input exits 2
// with the key named and writes nothing, presets and validate answer.
#include <QDir>
#include <QFile>
#include <QJsonDocument>
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

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
