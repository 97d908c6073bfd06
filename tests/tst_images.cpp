// `syncopate-cli run --images` writes the views as PNG files, headless.
#include <QImage>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

class TestImages : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void cliWritesEveryImage();
};

void TestImages::cliWritesEveryImage()
{
    QTemporaryDir dir;
    const QString out = dir.filePath(QStringLiteral("run"));
    QProcess cli;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove(QStringLiteral("DISPLAY")); // must work without one
    env.remove(QStringLiteral("QT_QPA_PLATFORM"));
    cli.setProcessEnvironment(env);
    cli.start(QStringLiteral(SYNCOPATE_CLI),
              {QStringLiteral("run"), QStringLiteral("--preset"), QStringLiteral("straggler-async"),
               QStringLiteral("--set"), QStringLiteral("train.steps=60"), QStringLiteral("--out"), out,
               QStringLiteral("--images")});
    QVERIFY(cli.waitForFinished(120000));
    QVERIFY2(cli.exitCode() == 0, cli.readAllStandardError().constData());
    for (const char *name : {"timeline", "loss", "stalls", "staleness", "memory", "throughput"}) {
        const QImage image(out + QLatin1Char('/') + QLatin1String(name) + QStringLiteral(".png"));
        QVERIFY2(!image.isNull(), name);
        QCOMPARE(image.size(), QSize(1600, 800));
        QSet<QRgb> colours;
        for (int y = 0; y < image.height(); y += 4)
            for (int x = 0; x < image.width(); x += 4)
                colours.insert(image.pixel(x, y));
        QVERIFY2(colours.size() > 8, name);
    }
}

QTEST_GUILESS_MAIN(TestImages)
#include "tst_images.moc"
