// syncopate: the desktop app.
#include "mainwindow.h"
#include "runcontroller.h"
#include "settings.h"

#include <QApplication>
#include <QIcon>
#include <QCommandLineParser>
#include <QTimer>

#include <cstdio>

using namespace syncopate;

int main(int argc, char **argv)
{
    prepareRuntimeDirectory();
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("syncopate"));
    QApplication::setOrganizationName(QStringLiteral("Syncopate"));
    // Wayland desktops match the window to its menu entry and icon by this name.
    QApplication::setDesktopFileName(QStringLiteral("org.syncopate.Syncopate"));
    QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/org.syncopate.Syncopate.svg")));
    QApplication::setApplicationDisplayName(QStringLiteral("Syncopate"));
    QApplication::setApplicationVersion(QStringLiteral(SYNCOPATE_VERSION));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("A desktop lab for distributed training."));
    parser.addHelpOption();
    parser.addVersionOption();
    const QCommandLineOption preset(QStringLiteral("preset"), QStringLiteral("Load the preset NAME."), QStringLiteral("NAME"));
    const QCommandLineOption config(QStringLiteral("config"), QStringLiteral("Load the config FILE."), QStringLiteral("FILE"));
    const QCommandLineOption start(QStringLiteral("start"), QStringLiteral("Start the run at once."));
    const QCommandLineOption open(QStringLiteral("open"),
                                  QStringLiteral("Open the run directory DIR; given again, the runs opened before the "
                                                 "last are checked to compare with it."),
                                  QStringLiteral("DIR"));
    const QCommandLineOption chart(QStringLiteral("chart"),
                                   QStringLiteral("Show the chart NAME: loss, stalls, staleness, memory or throughput."),
                                   QStringLiteral("NAME"));
    const QCommandLineOption screenshot(QStringLiteral("screenshot"),
                                        QStringLiteral("Save a screenshot of the window to FILE when the run "
                                                       "has ended (or once DIR is open), then quit."),
                                        QStringLiteral("FILE"));
    const QCommandLineOption delay(QStringLiteral("screenshot-after"),
                                   QStringLiteral("Take the screenshot MS milliseconds after start instead "
                                                  "(to show a run in progress)."),
                                   QStringLiteral("MS"));
    const QCommandLineOption presentation(QStringLiteral("presentation"), QStringLiteral("Start in presentation mode."));
    const QCommandLineOption lesson(QStringLiteral("lesson"), QStringLiteral("Open the lesson (Help > Lesson)."));
    parser.addOptions({preset, config, start, open, chart, screenshot, delay, presentation, lesson});
    parser.process(app);

    MainWindow window;
    if (parser.isSet(preset))
        window.selectPreset(parser.value(preset));
    if (parser.isSet(config))
        window.loadConfigFile(parser.value(config));
    if (parser.isSet(presentation))
        window.setPresentationMode(true);
    window.show();
    if (parser.isSet(lesson))
        window.showLesson();
    if (parser.isSet(chart) && !window.showChart(parser.value(chart)))
        std::fprintf(stderr, "syncopate: no chart named %s (loss, stalls, staleness, memory, throughput, batchnorm)\n",
                     qPrintable(parser.value(chart)));
    // Several runs: each opened, all but the last checked to compare with the last.
    // A run that cannot be opened is said on the banner, and (for scripts taking screenshots)
    // on stderr and in the exit status.
    bool openFailed = false;
    auto openAll = [&window, &openFailed, dirs = parser.values(open)] {
        for (const QString &dir : dirs)
            if (!window.openRun(dir)) {
                openFailed = true;
                std::fprintf(stderr, "syncopate: %s\n", qPrintable(window.bannerText()));
            }
        for (std::size_t i = 0; i + 1 < window.runs().size(); ++i)
            window.setCompared(window.runs()[i], true);
    };

    const QString shot = parser.value(screenshot);
    const int after = parser.value(delay).toInt();
    auto grab = [&window, shot] {
        QTimer::singleShot(600, &window, [&window, shot] {
            window.grab().save(shot);
            QApplication::quit();
        });
    };
    if (!shot.isEmpty() && after > 0) {
        QTimer::singleShot(after, &window, [&window, shot] {
            window.grab().save(shot);
            QApplication::quit();
        });
        if (parser.isSet(start))
            QTimer::singleShot(0, &window, [&window] { window.startRun(); });
        if (parser.isSet(open))
            openAll();
    } else if (parser.isSet(open)) {
        openAll();
        if (!shot.isEmpty())
            grab();
    } else if (parser.isSet(start)) {
        QTimer::singleShot(0, &window, [&window, shot, grab] {
            if (!window.startRun() && !shot.isEmpty())
                grab(); // the banner says why
        });
        if (!shot.isEmpty())
            QObject::connect(&window, &MainWindow::runFinished, &window, grab);
    } else if (!shot.isEmpty()) {
        grab();
    }
    const int status = app.exec();
    return status == 0 && openFailed ? 1 : status;
}
