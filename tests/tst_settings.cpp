// Settings round trip through the one key table, defaults, and the layout version guard.
#include "settings.h"

#include <QTemporaryDir>
#include <QTest>

using namespace syncopate;

class TestSettings : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void roundTrip();
    void defaultsWhenEmpty();
    void oldLayoutIsDropped();
};

void TestSettings::roundTrip()
{
    QTemporaryDir dir;
    const QString file = dir.filePath(QStringLiteral("s.ini"));
    AppSettings a = AppSettings::defaults();
    a.lastExperiment = QStringLiteral("{\"workers\":3}");
    a.lastPreset = QStringLiteral("checkpointing");
    a.runsFolder = QStringLiteral("/tmp/runs-x");
    a.exportFolder = QStringLiteral("/tmp/export-y");
    a.windowGeometry = QByteArray("\x01\x02geometry", 10);
    a.windowState = QByteArray("state\x00\xff", 7);
    a.presentation = true;
    a.followLive = false;
    a.chartTab = 3;
    a.lossAgainstTime = true;
    a.lossSmoothing = 25;
    a.lossLog = false;
    {
        QSettings s(file, QSettings::IniFormat);
        a.save(s);
    }
    AppSettings b;
    {
        QSettings s(file, QSettings::IniFormat);
        b.load(s);
    }
    QCOMPARE(b.lastExperiment, a.lastExperiment);
    QCOMPARE(b.lastPreset, a.lastPreset);
    QCOMPARE(b.runsFolder, a.runsFolder);
    QCOMPARE(b.exportFolder, a.exportFolder);
    QCOMPARE(b.windowGeometry, a.windowGeometry);
    QCOMPARE(b.windowState, a.windowState);
    QCOMPARE(b.presentation, true);
    QCOMPARE(b.followLive, false);
    QCOMPARE(b.chartTab, 3);
    QCOMPARE(b.lossAgainstTime, true);
    QCOMPARE(b.lossSmoothing, 25);
    QCOMPARE(b.lossLog, false);
}

void TestSettings::defaultsWhenEmpty()
{
    QTemporaryDir dir;
    QSettings s(dir.filePath(QStringLiteral("empty.ini")), QSettings::IniFormat);
    AppSettings b;
    b.presentation = true;
    b.load(s);
    const AppSettings d = AppSettings::defaults();
    QCOMPARE(b.runsFolder, d.runsFolder);
    QVERIFY(b.runsFolder.endsWith(QStringLiteral("runs")));
    QCOMPARE(b.lastPreset, QStringLiteral("default"));
    QCOMPARE(b.presentation, false);
    QCOMPARE(b.followLive, true);
    QCOMPARE(b.chartTab, 0);
    QCOMPARE(b.lossLog, true);
    QCOMPARE(b.lossSmoothing, 1);
}

void TestSettings::oldLayoutIsDropped()
{
    QTemporaryDir dir;
    const QString file = dir.filePath(QStringLiteral("old.ini"));
    {
        QSettings s(file, QSettings::IniFormat);
        AppSettings a = AppSettings::defaults();
        a.windowState = QByteArray("dock layout");
        a.save(s);
        s.setValue(QStringLiteral("window/layoutVersion"), AppSettings::kLayoutVersion - 1);
    }
    QSettings s(file, QSettings::IniFormat);
    AppSettings b;
    b.load(s);
    QVERIFY(b.windowState.isEmpty());
}

QTEST_GUILESS_MAIN(TestSettings)
#include "tst_settings.moc"
