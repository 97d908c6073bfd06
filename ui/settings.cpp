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
    f("files/recentConfigs", s.recentConfigs, d.recentConfigs);
    f("files/recentRuns", s.recentRuns, d.recentRuns);
}

// Keys that had another name before a settings version: read from the old name when the file is
// older and lacks the new one; save() removes the old name.
struct Renamed {
    int before; // settings version that introduced key
    const char *oldKey;
    const char *key;
};
constexpr Renamed kRenamed[] = {
    {2, "import/lastFolder", "import/folder"}, // kept outside the table before version 2
};

// A stored value as the field's type, or false. QVariant's own conversions would turn "maybe"
// into true, "Loss" into 0 and a list into an empty string. INI files give back strings for
// bools and numbers, and a one-element list as a plain string.
bool readAs(const QVariant &v, QString &out)
{
    if (v.typeId() != QMetaType::QString)
        return false;
    out = v.toString();
    return true;
}

bool readAs(const QVariant &v, QByteArray &out)
{
    if (v.typeId() != QMetaType::QByteArray)
        return false;
    out = v.toByteArray();
    return true;
}

bool readAs(const QVariant &v, bool &out)
{
    if (v.typeId() == QMetaType::Bool) {
        out = v.toBool();
        return true;
    }
    const QString text = v.typeId() == QMetaType::QString ? v.toString().trimmed().toLower() : QString();
    if (text != QLatin1String("true") && text != QLatin1String("false"))
        return false;
    out = text == QLatin1String("true");
    return true;
}

bool readAs(const QVariant &v, int &out)
{
    bool ok = false;
    int value = 0;
    if (v.typeId() == QMetaType::Int || v.typeId() == QMetaType::LongLong || v.typeId() == QMetaType::UInt)
        value = v.toInt(&ok);
    else if (v.typeId() == QMetaType::QString)
        value = v.toString().trimmed().toInt(&ok);
    if (ok)
        out = value;
    return ok;
}

bool readAs(const QVariant &v, QStringList &out)
{
    if (!v.isValid()) { // how an INI file holds an empty list
        out.clear();
        return true;
    }
    if (v.typeId() == QMetaType::QString) {
        out = QStringList{v.toString()};
        return true;
    }
    if (v.typeId() != QMetaType::QStringList && v.typeId() != QMetaType::QVariantList)
        return false;
    QStringList list;
    for (const QVariant &e : v.toList()) {
        if (e.typeId() != QMetaType::QString)
            return false;
        list << e.toString();
    }
    out = list;
    return true;
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

QStringList AppSettings::load(QSettings &s)
{
    const AppSettings d = defaults();
    *this = d;
    // No version: written before the key existed. One that does not read as a number counts
    // as the oldest (readAs leaves it), so that every migration applies.
    int version = 1;
    if (s.contains(QStringLiteral("settings/version")))
        readAs(s.value(QStringLiteral("settings/version")), version);
    QStringList ignored;
    forEachKey(*this, d, [&](const char *key, auto &value, const auto &) {
        QString name = QLatin1String(key);
        for (const Renamed &r : kRenamed)
            if (version < r.before && name == QLatin1String(r.key) && !s.contains(name) &&
                s.contains(QLatin1String(r.oldKey)))
                name = QLatin1String(r.oldKey);
        if (s.contains(name) && !readAs(s.value(name), value))
            ignored << name; // the default stays
    });
    // A layout saved by another version of the window would put docks in odd places.
    if (s.value(QStringLiteral("window/layoutVersion"), 0).toInt() != kLayoutVersion)
        windowState.clear();
    return ignored;
}

void AppSettings::save(QSettings &s) const
{
    AppSettings copy = *this;
    const AppSettings d = defaults();
    forEachKey(copy, d, [&](const char *key, auto &value, const auto &) {
        s.setValue(QLatin1String(key), QVariant::fromValue(value));
    });
    s.setValue(QStringLiteral("window/layoutVersion"), kLayoutVersion);
    s.setValue(QStringLiteral("settings/version"), kSettingsVersion);
    for (const Renamed &r : kRenamed)
        s.remove(QLatin1String(r.oldKey));
}

void AppSettings::addRecent(QStringList &list, const QString &path)
{
    list.removeAll(path);
    list.prepend(path);
    while (list.size() > kMaxRecent)
        list.removeLast();
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
