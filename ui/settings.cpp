#include "settings.h"

#include <QDir>
#include <QStandardPaths>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace syncopate {
namespace {

// The table: every setting, its key and its default, in one place.
template <typename F>
void forEachKey(AppSettings &s, const AppSettings &d, F &&f)
{
    f("experiment/last", s.lastExperiment, d.lastExperiment);
    f("experiment/preset", s.lastPreset, d.lastPreset);
    f("files/runsFolder", s.runsFolder, d.runsFolder);
    f("files/exportFolder", s.exportFolder, d.exportFolder);
    f("window/geometry", s.windowGeometry, d.windowGeometry);
    f("window/state", s.windowState, d.windowState);
    f("view/presentation", s.presentation, d.presentation);
    f("view/followLive", s.followLive, d.followLive);
    f("charts/tab", s.chartTab, d.chartTab);
    f("charts/lossAgainstTime", s.lossAgainstTime, d.lossAgainstTime);
    f("charts/lossSmoothing", s.lossSmoothing, d.lossSmoothing);
    f("charts/lossLog", s.lossLog, d.lossLog);
    f("import/folder", s.importFolder, d.importFolder);
    f("import/alignClocks", s.alignClocks, d.alignClocks);
    f("mpi/ranks", s.mpiRanks, d.mpiRanks);
    f("mpi/hostfile", s.mpiHostfile, d.mpiHostfile);
}

} // namespace

AppSettings AppSettings::defaults()
{
    AppSettings d;
    const QString data = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
    d.runsFolder = QDir(data.isEmpty() ? QDir::homePath() : data).filePath(QStringLiteral("runs"));
    d.exportFolder = QStandardPaths::writableLocation(QStandardPaths::PicturesLocation);
    if (d.exportFolder.isEmpty())
        d.exportFolder = QDir::homePath();
    d.lastPreset = QStringLiteral("default");
    return d;
}

void AppSettings::load(QSettings &s)
{
    const AppSettings d = defaults();
    *this = d;
    forEachKey(*this, d, [&](const char *key, auto &value, const auto &def) {
        using T = std::decay_t<decltype(value)>;
        value = s.value(QLatin1String(key), QVariant::fromValue(def)).template value<T>();
    });
    // A layout saved by another version of the window would put docks in odd places.
    if (s.value(QStringLiteral("window/layoutVersion"), 0).toInt() != kLayoutVersion)
        windowState.clear();
}

void AppSettings::save(QSettings &s) const
{
    AppSettings copy = *this;
    const AppSettings d = defaults();
    forEachKey(copy, d, [&](const char *key, auto &value, const auto &) {
        s.setValue(QLatin1String(key), QVariant::fromValue(value));
    });
    s.setValue(QStringLiteral("window/layoutVersion"), kLayoutVersion);
}

void prepareRuntimeDirectory()
{
    if (const char *dir = std::getenv("XDG_RUNTIME_DIR"); dir && *dir)
        return;
    const std::string path = "/tmp/runtime-" + std::to_string(::getuid());
    ::mkdir(path.c_str(), 0700);
    struct stat st {};
    // Only a folder of ours that nobody else can read; else Qt's own fallback (and warning).
    if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::getuid() &&
        (st.st_mode & 077) == 0)
        ::setenv("XDG_RUNTIME_DIR", path.c_str(), 0);
}

} // namespace syncopate
