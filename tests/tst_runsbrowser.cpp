// File > Browse Runs on hand-made run folders: each run's status read as openRunDirectory would
// (a summary still "running", cut short, missing or of the wrong type is "interrupted"), the
// size on disk, sorting; renames refused for taken or invalid names; deletes refused for
// anything that is not a run folder of the runs folder, and confirmed before they happen.
#include "runsbrowser.h"

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QDir>
#include <QFile>
#include <QHeaderView>
#include <QMessageBox>
#include <QPushButton>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>

using namespace syncopate;

class TestRunsBrowser : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void init();
    void listsRunsWithStatusAndSize();
    void sortsByEachColumn();
    void renamesAndRefusesBadNames();
    void deletesOnlyRunFolders();
    void deleteAsksFirst();
    void liveRunIsLeftAlone();
    void columnsAreNotClipped();

private:
    QString makeRun(const QString &name, const QByteArray &config, const QByteArray &summary, int rowBytes = 0);
    static void write(const QString &path, const QByteArray &text);
    static qint64 folderBytes(const QString &dir);
    QString statusOf(const RunsBrowser &b, const QString &name) const;
    // Clicks `button` of the next message box as soon as it is shown (without blocking the test).
    static void answerNextMessageBox(QMessageBox::StandardButton button);

    std::unique_ptr<QTemporaryDir> m_tmp;
    QString m_runs;
};

void TestRunsBrowser::write(const QString &path, const QByteArray &text)
{
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly) || f.write(text) != text.size())
        qFatal("cannot write %s", qPrintable(path));
}

qint64 TestRunsBrowser::folderBytes(const QString &dir)
{
    qint64 bytes = 0;
    for (const QFileInfo &fi : QDir(dir).entryInfoList(QDir::Files | QDir::Hidden))
        bytes += fi.size();
    return bytes;
}

QString TestRunsBrowser::makeRun(const QString &name, const QByteArray &config, const QByteArray &summary, int rowBytes)
{
    const QString dir = QDir(m_runs).filePath(name);
    QDir().mkpath(dir);
    if (!config.isEmpty())
        write(QDir(dir).filePath(QStringLiteral("config.json")), config);
    if (!summary.isEmpty())
        write(QDir(dir).filePath(QStringLiteral("summary.json")), summary);
    if (rowBytes > 0)
        write(QDir(dir).filePath(QStringLiteral("w0.syr")), QByteArray(rowBytes, 'x'));
    return dir;
}

QString TestRunsBrowser::statusOf(const RunsBrowser &b, const QString &name) const
{
    for (const RunFolderInfo &r : b.model()->runs())
        if (r.name == name)
            return r.status;
    return QStringLiteral("(not listed)");
}

void TestRunsBrowser::answerNextMessageBox(QMessageBox::StandardButton button)
{
    auto *timer = new QTimer;
    timer->setInterval(10);
    QObject::connect(timer, &QTimer::timeout, timer, [timer, button] {
        if (auto *box = qobject_cast<QMessageBox *>(QApplication::activeModalWidget())) {
            timer->deleteLater();
            box->button(button)->click();
        }
    });
    timer->start();
}

void TestRunsBrowser::init()
{
    m_tmp = std::make_unique<QTemporaryDir>();
    QVERIFY(m_tmp->isValid());
    m_runs = m_tmp->filePath(QStringLiteral("runs"));
    QVERIFY(QDir().mkpath(m_runs));
    const QByteArray sync = R"({"mode": "sync", "workers": 4, "train": {"steps": 300}})";
    const QByteArray async = R"({"mode": "async", "workers": 2, "train": {"steps": 50}})";
    makeRun(QStringLiteral("a-finished"), sync,
            R"({"status": "finished", "mode": "sync", "steps": 300, "steps_completed": 300})", 5000);
    makeRun(QStringLiteral("b-stopped"), async,
            R"({"status": "stopped", "mode": "async", "steps": 50, "steps_completed": 17})", 1200);
    makeRun(QStringLiteral("c-failed"), sync, R"({"status": "failed", "error": "disk full", "steps_completed": 3})");
    makeRun(QStringLiteral("d-still-running"), sync, R"({"status": "running", "steps_completed": 40})", 300);
    makeRun(QStringLiteral("e-no-summary"), async, {}, 64);
    makeRun(QStringLiteral("f-cut-short"), sync, R"({"status": "fini)");
    makeRun(QStringLiteral("g-wrong-types"), sync, R"({"status": 3, "steps_completed": "many"})");
    makeRun(QStringLiteral("h-import"), sync, R"({"status": "finished", "source": "kineto", "mode": "sync"})");
    // Not runs: a folder of something else, a file, a link to a run.
    QVERIFY(QDir().mkpath(QDir(m_runs).filePath(QStringLiteral("notes"))));
    write(QDir(m_runs).filePath(QStringLiteral("notes/todo.txt")), "keep me");
    write(QDir(m_runs).filePath(QStringLiteral("loose.json")), "{}");
    QVERIFY(QFile::link(QDir(m_runs).filePath(QStringLiteral("a-finished")), QDir(m_runs).filePath(QStringLiteral("link-to-a"))));
}

void TestRunsBrowser::listsRunsWithStatusAndSize()
{
    RunsBrowser b;
    QAbstractItemModelTester sourceTester(b.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester viewTester(b.view()->model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    b.setRunsFolder(m_runs);
    QCOMPARE(b.model()->rowCount(), 8);
    QCOMPARE(statusOf(b, QStringLiteral("a-finished")), QStringLiteral("finished"));
    QCOMPARE(statusOf(b, QStringLiteral("b-stopped")), QStringLiteral("stopped"));
    QCOMPARE(statusOf(b, QStringLiteral("c-failed")), QStringLiteral("failed"));
    QCOMPARE(statusOf(b, QStringLiteral("d-still-running")), QStringLiteral("interrupted"));
    QCOMPARE(statusOf(b, QStringLiteral("e-no-summary")), QStringLiteral("interrupted"));
    QCOMPARE(statusOf(b, QStringLiteral("f-cut-short")), QStringLiteral("interrupted"));
    QCOMPARE(statusOf(b, QStringLiteral("g-wrong-types")), QStringLiteral("interrupted"));
    QCOMPARE(statusOf(b, QStringLiteral("notes")), QStringLiteral("(not listed)"));
    QCOMPARE(statusOf(b, QStringLiteral("link-to-a")), QStringLiteral("(not listed)"));
    for (const RunFolderInfo &r : b.model()->runs()) {
        QCOMPARE(r.bytes, folderBytes(r.path));
        QVERIFY(r.date.isValid());
        if (r.name == QLatin1String("a-finished")) {
            QCOMPARE(r.mode, QStringLiteral("sync"));
            QCOMPARE(r.steps, 300);
            QVERIFY(r.bytes > 5000);
        } else if (r.name == QLatin1String("b-stopped")) {
            QCOMPARE(r.steps, 17);
            QCOMPARE(r.totalSteps, 50);
        } else if (r.name == QLatin1String("e-no-summary")) {
            QCOMPARE(r.mode, QStringLiteral("async")); // from config.json
            QCOMPARE(r.steps, -1);
            QCOMPARE(r.totalSteps, 50);
        } else if (r.name == QLatin1String("g-wrong-types")) {
            QCOMPARE(r.steps, -1);
        } else if (r.name == QLatin1String("h-import")) {
            QCOMPARE(r.mode, QStringLiteral("PyTorch trace"));
        }
    }
    // As shown: steps of the total, the size in readable units.
    const QAbstractItemModel *m = b.model();
    for (int row = 0; row < m->rowCount(); ++row) {
        if (m->index(row, RunsModel::Name).data().toString() != QLatin1String("b-stopped"))
            continue;
        QCOMPARE(m->index(row, RunsModel::Steps).data().toString(), QStringLiteral("17 / 50"));
        QCOMPARE(m->index(row, RunsModel::Size).data().toString(),
                 QLocale().formattedDataSize(folderBytes(QDir(m_runs).filePath(QStringLiteral("b-stopped")))));
        QCOMPARE(m->index(row, RunsModel::Mode).data().toString(), QStringLiteral("async"));
    }
}

void TestRunsBrowser::sortsByEachColumn()
{
    RunsBrowser b;
    b.setRunsFolder(m_runs);
    const QAbstractItemModel *view = b.view()->model();
    b.view()->sortByColumn(RunsModel::Size, Qt::AscendingOrder);
    qint64 last = -1;
    for (int row = 0; row < view->rowCount(); ++row) {
        const qint64 bytes = view->index(row, RunsModel::Size).data(RunsModel::SortRole).toLongLong();
        QVERIFY(bytes >= last);
        last = bytes;
    }
    QCOMPARE(view->index(view->rowCount() - 1, RunsModel::Name).data().toString(), QStringLiteral("a-finished"));
    b.view()->sortByColumn(RunsModel::Name, Qt::DescendingOrder);
    QCOMPARE(view->index(0, RunsModel::Name).data().toString(), QStringLiteral("h-import"));
    b.view()->sortByColumn(RunsModel::Steps, Qt::DescendingOrder);
    QCOMPARE(view->index(0, RunsModel::Name).data().toString(), QStringLiteral("a-finished"));
}

void TestRunsBrowser::renamesAndRefusesBadNames()
{
    RunsBrowser b;
    b.setRunsFolder(m_runs);
    QSignalSpy renamed(&b, &RunsBrowser::runRenamed);
    const QString from = QDir(m_runs).filePath(QStringLiteral("b-stopped"));
    QVERIFY(!b.renameRun(from, QStringLiteral("a-finished")));
    QVERIFY2(b.message().contains(QStringLiteral("already taken")), qPrintable(b.message()));
    QVERIFY(!b.renameRun(from, QStringLiteral("loose.json"))); // a file of that name
    QVERIFY2(b.message().contains(QStringLiteral("already taken")), qPrintable(b.message()));
    for (const QString &bad : {QStringLiteral("my run"), QStringLiteral("../escape"), QStringLiteral(".hidden"),
                               QStringLiteral("a/b")}) {
        QVERIFY2(!b.renameRun(from, bad), qPrintable(bad));
        QVERIFY2(b.message().contains(QStringLiteral("cannot be a run folder's name")), qPrintable(b.message()));
    }
    QVERIFY(!b.renameRun(from, QStringLiteral("   ")));
    QCOMPARE(renamed.count(), 0);
    QVERIFY(QFileInfo::exists(from));

    QVERIFY(b.renameRun(from, QStringLiteral("  straggler-async,workers=8  ")));
    const QString to = QDir(m_runs).filePath(QStringLiteral("straggler-async,workers=8"));
    QCOMPARE(renamed.count(), 1);
    QCOMPARE(renamed[0][0].toString(), from);
    QCOMPARE(renamed[0][1].toString(), to);
    QVERIFY(!QFileInfo::exists(from));
    QVERIFY(QFileInfo::exists(QDir(to).filePath(QStringLiteral("summary.json"))));
    QCOMPARE(statusOf(b, QStringLiteral("straggler-async,workers=8")), QStringLiteral("stopped"));
    QCOMPARE(b.selectedPath(), to);
}

void TestRunsBrowser::deletesOnlyRunFolders()
{
    RunsBrowser b;
    b.setRunsFolder(m_runs);
    QSignalSpy deleted(&b, &RunsBrowser::runDeleted);
    // Not run folders: left alone, with a message saying why.
    const QString notes = QDir(m_runs).filePath(QStringLiteral("notes"));
    QVERIFY(!b.deleteRun(notes));
    QVERIFY2(b.message().contains(QStringLiteral("not a run folder")), qPrintable(b.message()));
    QVERIFY(QFileInfo::exists(QDir(notes).filePath(QStringLiteral("todo.txt"))));
    QVERIFY(!b.deleteRun(QDir(m_runs).filePath(QStringLiteral("loose.json"))));
    QVERIFY(QFileInfo::exists(QDir(m_runs).filePath(QStringLiteral("loose.json"))));
    QVERIFY(!b.deleteRun(QDir(m_runs).filePath(QStringLiteral("link-to-a"))));
    QVERIFY(QFileInfo::exists(QDir(m_runs).filePath(QStringLiteral("a-finished/w0.syr"))));
    QVERIFY(!b.deleteRun(m_runs)); // the runs folder itself
    // A run folder, but not one of this runs folder's.
    const QString elsewhere = m_tmp->filePath(QStringLiteral("elsewhere/run"));
    QVERIFY(QDir().mkpath(elsewhere));
    write(QDir(elsewhere).filePath(QStringLiteral("config.json")), "{}");
    QVERIFY(!b.deleteRun(elsewhere));
    QVERIFY2(b.message().contains(QStringLiteral("not in the runs folder")), qPrintable(b.message()));
    QVERIFY(QFileInfo::exists(elsewhere));
    QCOMPARE(deleted.count(), 0);

    const QString run = QDir(m_runs).filePath(QStringLiteral("c-failed"));
    QVERIFY(b.deleteRun(run));
    QVERIFY(!QFileInfo::exists(run));
    QCOMPARE(deleted.count(), 1);
    QCOMPARE(deleted[0][0].toString(), run);
    QCOMPARE(b.model()->rowCount(), 7);
    QCOMPARE(statusOf(b, QStringLiteral("c-failed")), QStringLiteral("(not listed)"));
}

void TestRunsBrowser::deleteAsksFirst()
{
    RunsBrowser b;
    b.setRunsFolder(m_runs);
    b.show();
    const QString run = QDir(m_runs).filePath(QStringLiteral("a-finished"));
    QVERIFY(b.select(run));
    auto *button = b.findChild<QPushButton *>(QStringLiteral("deleteRun"));
    QVERIFY(button && button->isEnabled());
    answerNextMessageBox(QMessageBox::Cancel);
    button->click();
    QVERIFY(QFileInfo::exists(run));
    answerNextMessageBox(QMessageBox::Yes);
    button->click();
    QVERIFY(!QFileInfo::exists(run));
    // The link to it is a link still, and nothing it pointed at outside was touched.
    QVERIFY(QFileInfo(QDir(m_runs).filePath(QStringLiteral("link-to-a"))).isSymLink());
}

void TestRunsBrowser::liveRunIsLeftAlone()
{
    RunsBrowser b;
    const QString live = QDir(m_runs).filePath(QStringLiteral("d-still-running"));
    b.setInUse([live](const QString &dir) { return dir == live; });
    b.setRunsFolder(m_runs);
    QCOMPARE(statusOf(b, QStringLiteral("d-still-running")), QStringLiteral("running"));
    QVERIFY(!b.deleteRun(live));
    QVERIFY(!b.renameRun(live, QStringLiteral("other")));
    QVERIFY2(b.message().contains(QStringLiteral("being written")), qPrintable(b.message()));
    QVERIFY(QFileInfo::exists(live));
}

void TestRunsBrowser::columnsAreNotClipped()
{
    makeRun(QStringLiteral("straggler-sync-workers=8,train.lr=0.1,workers_slowdown=_1,3,1,1,1,1,1,1_"),
            R"({"mode": "sync"})", R"({"status": "finished", "steps": 300, "steps_completed": 300})", 20000);
    RunsBrowser b;
    b.setRunsFolder(m_runs);
    b.show();
    QVERIFY(QTest::qWaitForWindowExposed(&b));
    QTableView *view = b.view();
    for (int c = 0; c < RunsModel::ColumnCount; ++c) {
        QVERIFY2(view->columnWidth(c) >= static_cast<QAbstractItemView *>(view)->sizeHintForColumn(c), qPrintable(QString::number(c)));
        QVERIFY2(view->columnWidth(c) >= view->horizontalHeader()->sectionSizeHint(c), qPrintable(QString::number(c)));
    }
    // Every column fits the dialog's default width: no scrolling sideways to see the size.
    QVERIFY(view->horizontalHeader()->length() <= view->viewport()->width());
    // SYNCOPATE_BROWSER_PNG=file.png keeps a picture of the dialog to look at.
    if (const QString png = qEnvironmentVariable("SYNCOPATE_BROWSER_PNG"); !png.isEmpty()) {
        b.select(QDir(m_runs).filePath(QStringLiteral("b-stopped")));
        b.renameRun(QDir(m_runs).filePath(QStringLiteral("b-stopped")), QStringLiteral("a-finished"));
        QVERIFY(b.grab().save(png));
    }
}

QTEST_MAIN(TestRunsBrowser)
#include "tst_runsbrowser.moc"
