// Persistent settings through one table of (key, default): the same table loads and saves, so
// a value cannot be restored into the wrong field.
#pragma once

#include <QByteArray>
#include <QSettings>
#include <QString>
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

    static constexpr int kLayoutVersion = 2; // bump when docks or toolbars change
    static AppSettings defaults();
    void load(QSettings &s);
    void save(QSettings &s) const;
};

// Before the QApplication: a private XDG_RUNTIME_DIR where the session has none (a console,
// a container, Xvfb), as Qt would pick, so that Qt does not warn about it at every start.
void prepareRuntimeDirectory();

} // namespace syncopate
