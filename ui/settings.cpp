#include "settings.h"

#include <QDir>
#include <QStandardPaths>

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

} // namespace syncopate
