// Run > Run with MPI as a user drives it: mpirun starts two syncopate-cli ranks as a child
// process, the window follows the run folder rank 0 writes (rows named by rank and host), the
// log shows mpirun's command line, and Stop ends a long run with the run kept as stopped.
#include "experimentform.h"
#include "mainwindow.h"
#include "runcontroller.h"

#include <QElapsedTimer>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

using namespace syncopate;

class TestMpiGui : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void runsAsRanksAndFollowsTheFolder();
    void stopEndsTheRanks();

private:
    MpiLaunch launch() const;
    QTemporaryDir m_dir;
    std::unique_ptr<MainWindow> m_window;
};

void TestMpiGui::initTestCase()
{
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(m_dir.isValid());
    m_window = std::make_unique<MainWindow>();
    m_window->settings().runsFolder = m_dir.filePath(QStringLiteral("runs"));
    m_window->resize(1400, 900);
    m_window->show();
    m_window->selectPreset(QStringLiteral("default"));
}

MpiLaunch TestMpiGui::launch() const
{
    MpiLaunch l;
    l.ranks = 2;
    l.cli = QStringLiteral(SYNCOPATE_CLI);
    l.mpirun = QStringLiteral(SYNCOPATE_MPIEXEC);
    // One host, no network needed: shared memory and loopback TCP only.
    l.extraArgs = {QStringLiteral("--mca"), QStringLiteral("btl"), QStringLiteral("self,vader,tcp"),
                   QStringLiteral("--mca"), QStringLiteral("btl_tcp_if_include"), QStringLiteral("lo")};
    return l;
}

void TestMpiGui::runsAsRanksAndFollowsTheFolder()
{
    MainWindow &w = *m_window;
    static_cast<QSpinBox *>(w.form()->field(QStringLiteral("train.steps")))->setValue(40);
    QSignalSpy finished(&w, &MainWindow::runFinished);
    QVERIFY(w.startMpiRun(launch()));
    QVERIFY2(finished.wait(120000), qPrintable(w.mpiLog()));
    const RunDataPtr run = w.runs().back();
    QVERIFY2(run->state == RunState::Finished, qPrintable(run->error + QLatin1Char('\n') + w.mpiLog()));
    QCOMPARE(run->workers(), 2); // two ranks of one worker each
    QVERIFY(run->spanCount() > 0);
    QVERIFY(w.mpiLog().contains(QStringLiteral("-np 2")));
    // Rows say which rank and host each worker ran on.
    QVERIFY2(run->rowLabel(run->rows().back()).startsWith(QStringLiteral("rank 1 @ ")),
             qPrintable(run->rowLabel(run->rows().back())));
    QCOMPARE(run->summary.value("steps_completed", 0), 40);
}

void TestMpiGui::stopEndsTheRanks()
{
    MainWindow &w = *m_window;
    static_cast<QSpinBox *>(w.form()->field(QStringLiteral("train.steps")))->setValue(1000000);
    QSignalSpy finished(&w, &MainWindow::runFinished);
    QVERIFY(w.startMpiRun(launch()));
    // Stop once steps are coming in from the ranks.
    QTRY_VERIFY_WITH_TIMEOUT(!w.runs().empty() && w.runs().back()->state == RunState::Running &&
                                 w.runs().back()->spanCount() > 100,
                             120000);
    // A live knob for worker 1, which runs in rank 1: the app writes control.json, rank 0 reads
    // it and passes it on over MPI, and worker 1's injected delay spans come back.
    const RunDataPtr live = w.runs().back();
    const auto delayOf = [&](int worker) {
        return live->phaseTimeIn(0, double(live->endNs()))[std::size_t(worker)][std::size_t(Phase::Delay)];
    };
    QCOMPARE(delayOf(1), 0.0);
    w.controller()->setSlowdown(1, 4.0);
    QCOMPARE(w.controller()->slowdown(1), 4.0);
    QTRY_VERIFY_WITH_TIMEOUT(delayOf(1) > 0, 60000);
    QCOMPARE(delayOf(0), 0.0);
    QElapsedTimer clock;
    clock.start();
    w.stopRun();
    QVERIFY2(finished.wait(30000), qPrintable(w.mpiLog()));
    qInfo("Stop to the run's end: %lld ms (rank 0 closes the run; mpirun is killed after 1.5 s)",
          static_cast<long long>(clock.elapsed()));
    const RunDataPtr run = w.runs().back();
    QVERIFY2(run->state == RunState::Stopped, qPrintable(run->error + QLatin1Char('\n') + w.mpiLog()));
    QVERIFY(run->spanCount() > 100);
}

QTEST_MAIN(TestMpiGui)
#include "tst_mpigui.moc"
