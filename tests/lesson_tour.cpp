// The lesson as a class sees it: runs every step of Help > Lesson with the installed presets in
// a main window and saves a screenshot of each at 1280x720 and 1920x1080, then of the last step
// with every lesson run stacked, and of the comparison table. Not a test (it runs the real
// presets, a minute or so): the pictures are for looking at.
//
//   QT_QPA_PLATFORM=offscreen lesson_tour OUTDIR [--presentation]

#include "lesson.h"
#include "mainwindow.h"
#include "runcontroller.h"

#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QTimer>

#include <cstdio>

using namespace syncopate;

namespace {

// Until the window's run has ended (or ten minutes have passed).
bool waitForRun(MainWindow &w)
{
    QElapsedTimer clock;
    clock.start();
    // The controller ends before the run's row says so: wait for both.
    auto running = [&w] { return w.controller()->isRunning() || (!w.runs().empty() && w.runs().back()->state == RunState::Running); };
    while (running() && clock.elapsed() < 600000)
        QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
    QCoreApplication::processEvents();
    return !running();
}

void shoot(MainWindow &w, const QString &dir, const QString &name)
{
    for (const QSize size : {QSize(1280, 720), QSize(1920, 1080)}) {
        w.resize(size);
        w.showLesson();
        for (int i = 0; i < 5; ++i)
            QCoreApplication::processEvents();
        const QString path = QDir(dir).filePath(QStringLiteral("%1-%2.png").arg(name).arg(size.height()));
        w.grab().save(path);
        std::printf("%s\n", qPrintable(path));
    }
}

} // namespace

int main(int argc, char **argv)
{
    QApplication app(argc, argv);
    const QStringList args = app.arguments();
    if (args.size() < 2) {
        std::fprintf(stderr, "usage: lesson_tour OUTDIR [--presentation]\n");
        return 2;
    }
    const QString out = args[1];
    QDir().mkpath(out);
    MainWindow w;
    w.settings().runsFolder = QDir(out).filePath(QStringLiteral("runs"));
    w.resize(1280, 720);
    w.show();
    if (args.contains(QStringLiteral("--presentation")))
        w.setPresentationMode(true);
    w.showLesson();
    LessonPanel &lesson = *w.lesson();
    const auto &steps = lessonSteps();
    for (int s = 0; s < int(steps.size()); ++s) {
        lesson.setCurrentStep(s);
        if (steps[std::size_t(s)].preset.isEmpty())
            break; // the comparison, below
        shoot(w, out, QStringLiteral("step%1-before").arg(s + 1));
        for (const bool variant : {false, true}) {
            if (variant && steps[std::size_t(s)].variantButton.isEmpty())
                continue;
            if (!lesson.runStep(variant) || !waitForRun(w)) {
                std::fprintf(stderr, "lesson_tour: step %d did not run\n", s + 1);
                return 1;
            }
        }
        shoot(w, out, QStringLiteral("step%1").arg(s + 1));
    }
    // The last step: every lesson run stacked on the timeline under the shown one, and the table.
    for (const RunDataPtr &r : w.runs())
        if (r != w.runs().front())
            w.setCompared(r, true);
    w.showRun(w.runs().front());
    shoot(w, out, QStringLiteral("step%1").arg(steps.size()));
    QTimer::singleShot(800, &w, [out] {
        if (QWidget *table = QApplication::activeModalWidget()) {
            const QString path = QDir(out).filePath(QStringLiteral("comparison-table.png"));
            table->grab().save(path);
            std::printf("%s\n", qPrintable(path));
            table->close();
        }
    });
    lesson.runStep(false); // the comparison step's button: the table, modal until closed
    return 0;
}
