// Persistent settings through one table of (key, default): the same table loads and saves, so
// a value cannot be restored into the wrong field. The file carries a version: keys an older
// version wrote are migrated on load, and a value of the wrong type is ignored (its default
// kept), so a hand-edited or foreign file never lands in a field as something else.
#pragma once

#include <QByteArray>
#include <QSettings>
#include <QString>
#include <QStringList>
#include <QVariant>

namespace syncopate {

struct AppSettings {
    QString lastExperiment;   // JSON of the form's last config
    QString lastPreset;
    QString runsFolder;       // where run directories are written
    QString exportFolder;
    QByteArray windowGeometry;
    QByteArray windowState;
    bool presentation = false;
    bool followLive = true;
    int chartTab = 0;          // Loss, Stalls, Staleness, Activation memory, Throughput
    bool lossAgainstTime = false;
    int lossSmoothing = 1;
    bool lossLog = true;
    QString importFolder;      // File > Import Traces: where the last traces came from
    bool alignClocks = false;  // File > Align Rank Clocks on Import
    int mpiRanks = 2;          // Run > Run with MPI
    QString mpiHostfile;
    QStringList recentConfigs; // File > Recent Configs, newest first
    QStringList recentRuns;    // File > Recent Runs: run folders, newest first

    static constexpr int kLayoutVersion = 2; // bump when docks or toolbars change
    // Bump when a key is renamed or changes meaning, with a row in kRenamed (settings.cpp). 1: the
    // files written before the version key (import/lastFolder, no recent lists).
    static constexpr int kSettingsVersion = 2;
    static constexpr int kMaxRecent = 8;
    static AppSettings defaults();
    // Returns the keys of s it ignored for their type (the defaults kept), for tests and logs.
    QStringList load(QSettings &s);
    void save(QSettings &s) const;
    // path to the front of list (moved there when it was already in it), at most kMaxRecent.
    static void addRecent(QStringList &list, const QString &path);
};

// Before the QApplication: a private XDG_RUNTIME_DIR where the session has none (a console,
// a container, Xvfb), as Qt would pick, so that Qt does not warn about it at every start.
void prepareRuntimeDirectory();

} // namespace syncopate
