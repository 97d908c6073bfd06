// File > Browse Runs: the run folders under the runs folder as a sortable table (name, date,
// mode, status, steps, size on disk), to open, rename or delete. A row is read from the
// folder's config.json and summary.json only, never its row files, so a folder of hundreds of
// runs lists at once.
#pragma once

#include <QAbstractTableModel>
#include <QDateTime>
#include <QDialog>

#include <functional>
#include <vector>

class QLabel;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;

namespace syncopate {

struct RunFolderInfo {
    QString path;   // absolute
    QString name;   // the folder's name
    QDateTime date; // when the run started: config.json is written first
    QString mode;   // sync, async, or "PyTorch trace" for an import
    QString status; // finished, stopped, failed, interrupted (or running, for the live run)
    qint64 steps = -1; // steps completed; -1 when no summary says
    qint64 totalSteps = -1;
    qint64 bytes = 0;
    QString problem; // why a field could not be read ("config.json: ...")
};

// A folder the browser may rename or delete: a real directory (not a link) holding config.json
// or summary.json. Anything else is left alone.
bool isRunFolder(const QString &dir);
// One run folder, as the browser shows it.
RunFolderInfo readRunFolder(const QString &dir);

class RunsModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Name, Date, Mode, Status, Steps, Size, ColumnCount };
    static constexpr int SortRole = Qt::UserRole + 1;
    static constexpr int PathRole = Qt::UserRole + 2;

    using QAbstractTableModel::QAbstractTableModel;
    void setRuns(std::vector<RunFolderInfo> runs);
    const std::vector<RunFolderInfo> &runs() const { return m_runs; }

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

private:
    std::vector<RunFolderInfo> m_runs;
};

class RunsBrowser : public QDialog {
    Q_OBJECT
public:
    explicit RunsBrowser(QWidget *parent = nullptr);

    void setRunsFolder(const QString &dir);
    QString runsFolder() const { return m_folder; }
    // A folder still being written (the live run): listed as running, never renamed or deleted.
    void setInUse(std::function<bool(const QString &)> inUse) { m_inUse = std::move(inUse); }
    // Reads the runs folder again, keeping the selection where the run is still there.
    void refresh();

    RunsModel *model() const { return m_model; }
    QTableView *view() const { return m_view; }
    // The message line under the table (why a rename or delete was refused, what was done).
    QString message() const;
    // Selects the row of a run folder (by path); false when it is not listed.
    bool select(const QString &dir);
    QString selectedPath() const;

    // The actions without their dialogs, for the buttons and for tests. Each says on the message
    // line what it did or why it refused, and returns whether it did it.
    bool renameRun(const QString &dir, const QString &newName);
    bool deleteRun(const QString &dir);

Q_SIGNALS:
    void openRequested(const QString &dir);
    void runRenamed(const QString &from, const QString &to);
    void runDeleted(const QString &dir);

private:
    void onOpen();
    void onRename();
    void onDelete();
    void updateButtons();
    void say(const QString &text, bool error);
    // Why dir may not be renamed or deleted, or empty when it may.
    QString refusal(const QString &dir) const;

    QString m_folder;
    std::function<bool(const QString &)> m_inUse;
    RunsModel *m_model;
    QSortFilterProxyModel *m_proxy;
    QTableView *m_view;
    QLabel *m_folderLabel, *m_message;
    QPushButton *m_open, *m_rename, *m_delete;
};

} // namespace syncopate
