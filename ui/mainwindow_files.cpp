// MainWindow, continued: what goes to and comes from files and folders: importing traces, the
// runs folder and its runs, exports, Save Config As, the recent lists and the runs browser.
#include "mainwindow.h"

#include "cpu/cpudevice.h"

#include "charts.h"
#include "comparison.h"
#include "experimentform.h"
#include "exporter.h"
#include "kineto.h"
#include "lesson.h"
#include "phasestyle.h"
#include "runcontroller.h"
#include "runsbrowser.h"
#include "session.h"
#include "timelineview.h"

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QCloseEvent>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGridLayout>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QFontDatabase>
#include <QPlainTextEdit>
#include <QTextCursor>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QSettings>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QTableWidget>
#include <QThread>
#include <QDateTime>
#include <QToolBar>
#include <QToolButton>
#include <QVBoxLayout>
#include <QWhatsThis>

#include <algorithm>

namespace syncopate {

void MainWindow::importTraces(const QStringList &paths, std::function<void(const QString &)> done)
{
    if (m_importThread) {
        statusBar()->showMessage(tr("An import is still running; try again when it has finished"), 5000);
        if (done)
            done(QString());
        return;
    }
    const QString out = QDir(m_settings.runsFolder)
                            .filePath(QStringLiteral("import-") +
                                      QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss")));
    std::vector<std::string> files;
    for (const QString &p : paths)
        files.push_back(QDir::toNativeSeparators(p).toStdString());
    auto error = std::make_shared<QString>();
    KinetoOptions options;
    options.alignClocks = m_settings.alignClocks;
    m_importThread = QThread::create([files, out, error, options] {
        try {
            writeImportedRun(importKineto(files, options), out.toStdString());
        } catch (const std::exception &e) {
            *error = QString::fromStdString(e.what());
        }
    });
    statusBar()->showMessage(tr("Importing %n trace file(s)\u2026", nullptr, int(paths.size())));
    connect(m_importThread, &QThread::finished, this, [this, out, error, done] {
        m_importThread->deleteLater();
        m_importThread = nullptr;
        statusBar()->clearMessage();
        if (!error->isEmpty()) {
            showBanner(tr("Cannot import the traces: %1").arg(error->toHtmlEscaped()));
            if (done)
                done(QString());
            return;
        }
        const bool opened = openRun(out);
        if (opened)
            statusBar()->showMessage(tr("Imported into %1").arg(out), 8000);
        if (done)
            done(opened ? out : QString());
    });
    m_importThread->start();
}

QString MainWindow::importVerdict(const RunData &run)
{
    const auto &s = run.summary;
    QStringList lines;
    const auto st = s.find("straggler");
    if (st != s.end() && st->is_object() && st->contains("rank"))
        lines << tr("<b>Straggler: rank %1</b>, the last to start in %2 of %3 matched collectives, "
                    "%4 ms after the next-latest rank on average.")
                     .arg(st->value("rank", -1))
                     .arg(st->value("last_count", 0))
                     .arg(s.value("collectives_matched", 0))
                     .arg(st->value("mean_late_ms", 0.0), 0, 'f', 3);
    else if (run.workers() < 2)
        lines << tr("One rank loaded: stalls are measured against the other ranks, so import them all to see who waits for whom.");
    else
        lines << tr("No straggler: no collective was matched across the loaded ranks.");
    const auto clocks = s.find("clock_alignment");
    if (clocks != s.end() && clocks->is_object() && clocks->value("enabled", false))
        lines << tr("Clocks aligned: %1").arg(QString::fromStdString(clocks->value("note", std::string())).toHtmlEscaped());
    for (const char *key : {"notes", "warnings"})
        if (s.contains(key) && s[key].is_array())
            for (const auto &n : s[key])
                if (n.is_string())
                    lines << QString::fromStdString(n.get<std::string>()).toHtmlEscaped();
    return lines.join(QStringLiteral("<br>"));
}

QString MainWindow::runFolderHint() const
{
    // The preset (or the mode) and up to three keys the form changed from it, so that a folder
    // of runs says what each one was: "straggler-sync-workers=8,train.lr=0.1".
    const nlohmann::json form = m_form->toJson();
    const QString preset = m_form->presetName();
    const QString mode = QString::fromStdString(form.value("mode", std::string("run")));
    if (preset.isEmpty())
        return mode;
    // What the preset sets, else each key's own default, as the form would hold them (not as
    // the config resolves them: data.samples 0 means 8192 generated).
    nlohmann::json base = nlohmann::json::object();
    try {
        for (const ConfigKey &k : configKeys())
            base[k.name] = nlohmann::json::parse(k.defaultJson);
        const nlohmann::json set = flattenConfig(loadPreset(preset.toStdString()).config);
        for (const auto &[key, value] : set.items()) // a named json: items() refers to it
            base[key] = value;
    } catch (const std::exception &) {
        return preset;
    }
    QStringList varied;
    for (const auto &[key, value] : form.items())
        if (base.contains(key) && !base[key].is_null() && base[key] != value &&
            !(base[key].is_array() && base[key].empty() && value.is_array() && value.empty()) && varied.size() < 3)
            varied << QString::fromStdString(key + "=" +
                                             (value.is_string() ? value.get<std::string>() : value.dump()));
    return varied.isEmpty() ? preset : preset + QLatin1Char('-') + varied.join(QLatin1Char(','));
}

bool MainWindow::chooseRunsFolder()
{
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Folder for run directories"), m_settings.runsFolder);
    if (dir.isEmpty())
        return false;
    m_settings.runsFolder = dir;
    statusBar()->showMessage(tr("Runs are written into %1").arg(dir), 5000);
    return true;
}

bool MainWindow::saveRunElsewhere(const QString &target)
{
    const RunDataPtr run = m_controller->run();
    if (!run || run->directory().isEmpty())
        return false;
    const QString dest = !target.isEmpty() ? target
                                           : QFileDialog::getExistingDirectory(this, tr("Folder to copy the run into"),
                                                                               QDir::homePath());
    if (dest.isEmpty())
        return false;
    const QDir source(run->directory());
    const QString into = QDir(dest).filePath(source.dirName());
    if (!QDir().mkpath(into)) {
        showBanner(tr("Could not create %1").arg(into.toHtmlEscaped()));
        return false;
    }
    for (const QString &f : source.entryList(QDir::Files)) {
        QFile::remove(QDir(into).filePath(f));
        if (!QFile::copy(source.filePath(f), QDir(into).filePath(f))) {
            showBanner(tr("Could not copy %1 into %2").arg(f.toHtmlEscaped(), into.toHtmlEscaped()));
            return false;
        }
    }
    showBanner(tr("The run was copied to %1").arg(into.toHtmlEscaped()), false);
    return true;
}

QStringList MainWindow::runListTexts() const
{
    QStringList texts;
    for (int i = 0; i < m_runList->count(); ++i)
        texts << m_runList->item(i)->text();
    return texts;
}

QString MainWindow::runItemText(const RunData &run) const
{
    if (run.imported())
        return tr("%1: PyTorch trace, %n rank(s)", nullptr, run.workers()).arg(run.label());
    return tr("%1: %2, %3 workers (%4)")
        .arg(run.label(), QString::fromStdString(run.config().mode))
        .arg(run.workers())
        .arg(run.interrupted ? tr("interrupted") : QString::fromLatin1(runStateName(run.state)));
}

QString MainWindow::uniqueRunName(const QString &base) const
{
    // Runs are named by what they ran (the preset, or the mode), numbered from the second on.
    auto taken = [&](const QString &name) {
        return std::any_of(m_runs.begin(), m_runs.end(), [&](const RunDataPtr &r) { return r->label() == name; });
    };
    if (!taken(base))
        return base;
    for (int i = 2;; ++i)
        if (const QString name = QStringLiteral("%1 %2").arg(base).arg(i); !taken(name))
            return name;
}

bool MainWindow::renameRun(const RunDataPtr &run, const QString &name)
{
    const QString trimmed = name.trimmed();
    const auto it = std::find(m_runs.begin(), m_runs.end(), run);
    if (trimmed.isEmpty() || it == m_runs.end())
        return false;
    // The folder on disk takes the name too, so that the run opens under it later; a run still
    // writing keeps its folder until it ends.
    QListWidgetItem *item = m_runList->item(int(it - m_runs.begin()));
    if (!run->directory().isEmpty() && run->state != RunState::Running) {
        const QString folder = runFolderName(trimmed);
        const QDir old(run->directory());
        const QString target = QFileInfo(old.absolutePath()).dir().filePath(folder);
        if (folder != old.dirName()) {
            if (QFileInfo::exists(target)) {
                showBanner(tr("Cannot rename the run's folder to %1: a file or folder of that name exists")
                               .arg(target.toHtmlEscaped()));
                return false;
            }
            if (!QDir().rename(old.absolutePath(), target)) {
                showBanner(tr("Cannot rename the run's folder %1 to %2 (is it writable?)")
                               .arg(old.absolutePath().toHtmlEscaped(), folder.toHtmlEscaped()));
                return false;
            }
            onRunFolderRenamed(old.absolutePath(), target);
            if (m_browser && m_browser->isVisible())
                m_browser->refresh();
            statusBar()->showMessage(tr("Renamed; the run's folder is now %1").arg(target), 8000);
        }
    }
    run->setLabel(trimmed);
    const QSignalBlocker block(m_runList);
    item->setText(runItemText(*run));
    if (run == m_shown)
        m_timeline->setTitle(run->title());
    m_charts->refresh();
    return true;
}

bool MainWindow::openRun(const QString &dir)
{
    QString error;
    RunDataPtr run = RunController::openRun(dir, &error);
    if (!run) {
        showBanner(tr("Cannot open the run: %1").arg(error.toHtmlEscaped()));
        return false;
    }
    hideBanner();
    AppSettings::addRecent(m_settings.recentRuns, QFileInfo(dir).absoluteFilePath());
    // Another process is writing it (syncopate-cli run, another window): followed live, with
    // its knobs, until that process ends it. Not while a run of ours goes on, and not when
    // what it has so far is damaged: then the snapshot below, with the banner.
    if (run->writtenElsewhere && run->problems.isEmpty() && !run->imported() && m_controller->follow(dir, run->label())) {
        statusBar()->showMessage(tr("Following %1 live; Stop stops following, not the run")
                                     .arg(QDir(dir).dirName()), 10000);
        return true;
    }
    addRunToList(run);
    showRun(run);
    m_timeline->fitAll();
    m_charts->refresh();
    if (!m_controller->isRunning()) {
        // The bar shows the run on show: how far the opened one got (it read 0% for a finished one).
        const auto steps = std::max<std::int64_t>(1, run->config().steps);
        const auto done = run->state == RunState::Finished ? steps
                                                           : std::clamp<std::int64_t>(run->summary.value("steps_completed", 0LL), 0, steps);
        m_progress->setRange(0, 1000);
        m_progress->setValue(int(1000 * done / steps));
    }
    if (run->imported()) {
        // A profiler trace is not a configuration to run again: the form keeps what it had.
        showBanner(importVerdict(*run), false);
        showChart(QStringLiteral("stalls"));
        return true;
    }
    // The form holds the run's configuration, not whatever was there: F5 runs it again.
    if (!m_controller->isRunning()) {
        m_form->setFromJson(run->config().toJson());
        m_form->showLoadedFrom(tr("the run %1").arg(run->label())); // not the preset shown before
        statusBar()->showMessage(tr("The form holds the configuration of %1: Run (F5) runs it again").arg(run->label()), 8000);
    }
    if (run->summaryProblems > 0)
        showBanner(tr("%1: %n field(s) of summary.json had the wrong type and were left out", nullptr,
                      run->summaryProblems).arg(QDir(dir).dirName().toHtmlEscaped()), false);
    if (!run->problems.isEmpty())
        showBanner(tr("%1 opened with %n problem(s); what could be read is shown. %2", nullptr, int(run->problems.size()))
                       .arg(QDir(dir).dirName().toHtmlEscaped(), run->problems.join(QStringLiteral("; ")).toHtmlEscaped()),
                   false);
    if (run->writtenElsewhere)
        showBanner(tr("%1 is being written by another process now: shown as far as it has got (it is followed live "
                      "when no run of this window is going). Open it again to see more.")
                       .arg(QDir(dir).dirName().toHtmlEscaped()), false);
    return true;
}

QCustomPlot *MainWindow::viewByName(const QString &name) const
{
    if (name == QLatin1String("timeline"))
        return m_timeline;
    for (const auto &[n, plot] : m_charts->plots())
        if (n == name)
            return plot;
    return nullptr;
}

bool MainWindow::exportView(const QString &name, const QString &path, QSize size, double scale)
{
    QCustomPlot *plot = viewByName(name);
    QString error;
    if (!plot || !exportPlot(plot, path, size, scale, &error)) {
        showBanner(error.isEmpty() ? tr("Nothing to export for %1").arg(name) : error);
        return false;
    }
    statusBar()->showMessage(tr("Exported %1").arg(path), 8000);
    return true;
}

void MainWindow::exportDialog(const QString &name)
{
    QDialog dialog(this);
    dialog.setWindowTitle(tr("Export %1").arg(name));
    auto *form = new QFormLayout(&dialog);
    auto *width = new QSpinBox;
    width->setRange(200, 10000);
    width->setValue(1600);
    auto *height = new QSpinBox;
    height->setRange(150, 10000);
    height->setValue(name == QLatin1String("timeline") ? 700 : 900);
    auto *scale = new QDoubleSpinBox;
    scale->setRange(0.5, 4.0);
    scale->setValue(1.0);
    scale->setSingleStep(0.5);
    scale->setToolTip(tr("Pixel density of PNG files: 2 gives a sharp image on slides."));
    form->addRow(tr("Width (px)"), width);
    form->addRow(tr("Height (px)"), height);
    form->addRow(tr("PNG scale"), scale);
    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    form->addRow(buttons);
    if (dialog.exec() != QDialog::Accepted)
        return;
    const QString path = QFileDialog::getSaveFileName(this, tr("Export %1").arg(name),
                                                      QDir(m_settings.exportFolder).filePath(name + QStringLiteral(".png")),
                                                      tr("PNG image (*.png);;SVG image (*.svg);;PDF document (*.pdf)"));
    if (path.isEmpty())
        return;
    m_settings.exportFolder = QFileInfo(path).absolutePath();
    exportView(name, path, QSize(width->value(), height->value()), scale->value());
}

void MainWindow::exportRunFile(const QString &file)
{
    if (!m_shown || m_shown->directory().isEmpty()) {
        showBanner(tr("The run shown has no run folder (it was not recorded to disk), so there is nothing to export."));
        return;
    }
    const QString source = QDir(m_shown->directory()).filePath(file);
    const QString path = QFileDialog::getSaveFileName(this, tr("Export %1").arg(file),
                                                      QDir(m_settings.exportFolder).filePath(file));
    if (path.isEmpty())
        return;
    if (file == QLatin1String("trace.json") && (m_shown->state == RunState::Running || !QFile::exists(source))) {
        // A live or interrupted run: written now from its row files, up to their last flush.
        try {
            const auto problems = exportTraceJson(path.toStdString(), m_shown->directory().toStdString());
            m_settings.exportFolder = QFileInfo(path).absolutePath();
            if (!problems.empty())
                showBanner(tr("Exported what could be read; %n row file(s) had problems: %1", nullptr, int(problems.size()))
                               .arg(QString::fromStdString(problems.front()).toHtmlEscaped()), false);
        } catch (const std::exception &e) {
            showBanner(QString::fromStdString(e.what()));
        }
        return;
    }
    QFile::remove(path);
    if (!QFile::copy(source, path))
        showBanner(tr("Could not copy %1 to %2").arg(source, path));
    else
        m_settings.exportFolder = QFileInfo(path).absolutePath();
}

void MainWindow::copyImage()
{
    QApplication::clipboard()->setPixmap(m_timeline->toPixmap(m_timeline->width(), m_timeline->height()));
    statusBar()->showMessage(tr("Timeline image copied"), 4000);
}

bool MainWindow::saveConfigAs(const QString &target)
{
    const nlohmann::json flat = m_form->toJson();
    try {
        parseConfig(flat); // a file the CLI would refuse is not written; the fields at fault are marked
    } catch (const ConfigError &e) {
        QStringList fields;
        for (const auto &f : e.fields())
            fields << QString::fromStdString(f);
        showBanner(tr("The config was not saved: %1").arg(QString::fromStdString(e.what()).toHtmlEscaped()));
        m_form->markErrors(fields);
        return false;
    }
    QString path = target;
    if (path.isEmpty()) {
        const QString dir = m_settings.recentConfigs.isEmpty() ? QDir::homePath()
                                                               : QFileInfo(m_settings.recentConfigs.front()).absolutePath();
        const QString base = m_form->presetName().isEmpty() ? QString::fromStdString(flat.value("mode", std::string("experiment")))
                                                            : m_form->presetName();
        path = QFileDialog::getSaveFileName(this, tr("Save config as"), QDir(dir).filePath(base + QStringLiteral(".json")),
                                            tr("JSON (*.json)"));
        if (path.isEmpty())
            return false;
    }
    // Nested by section, as the presets are; a key whose section is also a key of its own
    // ("device" and "device.tf32") stays dotted. Dotted keys throughout where that would not read
    // back as the same keys: the CLI reads both.
    nlohmann::json out = nlohmann::json::object();
    for (const auto &[key, value] : flat.items()) {
        const std::size_t dot = key.find('.');
        const std::string section = key.substr(0, dot);
        if (dot == std::string::npos || flat.contains(section))
            out[key] = value;
        else
            out[section][key.substr(dot + 1)] = value;
    }
    if (flattenConfig(out) != flat)
        out = flat;
    try {
        writeFileAtomically(path.toStdString(), out.dump(2) + "\n");
    } catch (const std::exception &e) {
        showBanner(tr("The config was not saved: %1").arg(QString::fromStdString(e.what()).toHtmlEscaped()));
        return false;
    }
    AppSettings::addRecent(m_settings.recentConfigs, QFileInfo(path).absoluteFilePath());
    statusBar()->showMessage(tr("Saved %1; syncopate-cli run --config %1 runs it").arg(QDir::toNativeSeparators(path)), 8000);
    return true;
}

void MainWindow::updateRecentMenus()
{
    fillRecentMenu(m_recentConfigs, false);
    fillRecentMenu(m_recentRuns, true);
}

void MainWindow::fillRecentMenu(QMenu *menu, bool runs)
{
    QStringList &list = runs ? m_settings.recentRuns : m_settings.recentConfigs;
    const QString title = runs ? tr("Recent Runs") : tr("Recent Configs");
    auto there = [runs](const QString &path) { return runs ? isRunFolder(path) : QFileInfo(path).isFile(); };
    QStringList gone;
    for (const QString &path : std::as_const(list))
        if (!there(path))
            gone << QDir::toNativeSeparators(path);
    list.erase(std::remove_if(list.begin(), list.end(), [&](const QString &p) { return !there(p); }), list.end());
    if (!gone.isEmpty())
        statusBar()->showMessage(tr("Removed from %1, no longer there: %2").arg(title, gone.join(QStringLiteral(", "))), 8000);
    menu->clear();
    for (int i = 0; i < list.size(); ++i) {
        const QString path = list[i];
        QString name = QFileInfo(path).fileName();
        name.replace(QLatin1Char('&'), QStringLiteral("&&"));
        QAction *a = menu->addAction(i < 9 ? QStringLiteral("&%1 %2").arg(i + 1).arg(name) : name, this, [this, path, runs, there, title] {
            if (!there(path)) {
                (runs ? m_settings.recentRuns : m_settings.recentConfigs).removeAll(path);
                statusBar()->showMessage(tr("Removed from %1, no longer there: %2").arg(title, QDir::toNativeSeparators(path)), 8000);
            } else if (runs) {
                openRun(path);
            } else {
                loadConfigFile(path);
            }
        });
        a->setData(path);
        a->setToolTip(QDir::toNativeSeparators(path));
        a->setStatusTip(QDir::toNativeSeparators(path));
    }
    if (list.isEmpty())
        menu->addAction(runs ? tr("No recent runs") : tr("No recent configs"))->setEnabled(false);
    menu->addSeparator();
    menu->addAction(tr("&Clear List"), this, [this, runs] {
        (runs ? m_settings.recentRuns : m_settings.recentConfigs).clear();
    })->setEnabled(!list.isEmpty());
}

RunsBrowser *MainWindow::showRunsBrowser()
{
    if (!m_browser) {
        m_browser = new RunsBrowser(this);
        // The live run's folder is shown as running and is never renamed or deleted under it.
        m_browser->setInUse([this](const QString &dir) {
            const RunDataPtr run = m_controller->run();
            return m_controller->isRunning() && run && !run->directory().isEmpty() &&
                   QFileInfo(run->directory()).canonicalFilePath() == QFileInfo(dir).canonicalFilePath();
        });
        connect(m_browser, &RunsBrowser::openRequested, this, [this](const QString &dir) { openRun(dir); });
        connect(m_browser, &RunsBrowser::runRenamed, this, &MainWindow::onRunFolderRenamed);
        connect(m_browser, &RunsBrowser::runDeleted, this, [this](const QString &dir) {
            m_settings.recentRuns.removeAll(dir);
            statusBar()->showMessage(tr("Deleted the run folder %1").arg(QDir::toNativeSeparators(dir)), 8000);
        });
    }
    m_browser->setRunsFolder(m_settings.runsFolder);
    m_browser->show();
    m_browser->raise();
    m_browser->activateWindow();
    return m_browser;
}

void MainWindow::onRunFolderRenamed(const QString &from, const QString &to)
{
    // Runs of this session and Recent Runs follow the folder, so that exports and reopening work.
    const QString old = QDir::cleanPath(QFileInfo(from).absoluteFilePath());
    for (std::size_t i = 0; i < m_runs.size(); ++i)
        if (!m_runs[i]->directory().isEmpty() && QDir::cleanPath(QFileInfo(m_runs[i]->directory()).absoluteFilePath()) == old) {
            m_runs[i]->setDirectory(to);
            m_runList->item(int(i))->setToolTip(to);
        }
    for (QString &path : m_settings.recentRuns)
        if (QDir::cleanPath(path) == old)
            path = QFileInfo(to).absoluteFilePath();
}

} // namespace syncopate
