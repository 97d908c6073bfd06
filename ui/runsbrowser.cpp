#include "runsbrowser.h"

#include "config.h"
#include "runcontroller.h"

#include <QDialogButtonBox>
#include <QDir>
#include <QDirIterator>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QKeySequence>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QMessageBox>
#include <QPushButton>
#include <QScreen>
#include <QScrollBar>
#include <QShortcut>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>

namespace syncopate {
namespace {

std::string stringField(const nlohmann::json &j, const char *key)
{
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

qint64 integerField(const nlohmann::json &j, const char *key)
{
    const auto it = j.find(key);
    return it != j.end() && it->is_number_integer() ? it->get<qint64>() : -1;
}

QString statusHelp(const QString &status)
{
    if (status == QLatin1String("finished"))
        return QObject::tr("Ran every step.");
    if (status == QLatin1String("stopped"))
        return QObject::tr("Stopped before its last step (Run > Stop, or a signal); what ran is saved.");
    if (status == QLatin1String("failed"))
        return QObject::tr("Ended on an error (summary.json says which); what ran is saved.");
    if (status == QLatin1String("running"))
        return QObject::tr("Being written by the run in progress.");
    return QObject::tr("Never closed its summary (killed, crashed, or written by another process "
                       "still): it opens with everything up to its last flush.");
}

} // namespace

bool isRunFolder(const QString &dir)
{
    const QFileInfo fi(dir);
    if (!fi.isDir() || fi.isSymLink())
        return false;
    const QDir d(fi.absoluteFilePath());
    return QFileInfo(d.filePath(QStringLiteral("config.json"))).isFile() ||
           QFileInfo(d.filePath(QStringLiteral("summary.json"))).isFile();
}

RunFolderInfo readRunFolder(const QString &dir)
{
    RunFolderInfo info;
    const QFileInfo fi(dir);
    info.path = fi.absoluteFilePath();
    info.name = fi.fileName();
    const QDir d(info.path);
    const QFileInfo configFile(d.filePath(QStringLiteral("config.json")));
    info.date = (configFile.exists() ? configFile : fi).lastModified();
    // Links are not followed: a size counts what deleting the folder frees.
    QDirIterator it(info.path, QDir::Files | QDir::Hidden | QDir::System | QDir::NoSymLinks,
                    QDirIterator::Subdirectories);
    while (it.hasNext())
        info.bytes += it.nextFileInfo().size();

    // Through core's reader (size and nesting limits), and by openRunDirectory's rule: a
    // summary still "running", without a status, cut short or missing is an interrupted run.
    nlohmann::json summary = nlohmann::json::object();
    const QString summaryPath = d.filePath(QStringLiteral("summary.json"));
    if (QFileInfo::exists(summaryPath)) {
        try {
            summary = readJsonFile(summaryPath.toStdString());
        } catch (const std::exception &) {
            summary = nlohmann::json::object();
        }
    }
    if (!summary.is_object())
        summary = nlohmann::json::object();
    const std::string status = stringField(summary, "status");
    info.status = status.empty() || status == "running" ? QStringLiteral("interrupted") : QString::fromStdString(status);
    info.steps = integerField(summary, "steps_completed");
    info.totalSteps = integerField(summary, "steps");
    std::string mode = stringField(summary, "mode");
    if (configFile.exists()) {
        try {
            const nlohmann::json config = readJsonFile(configFile.filePath().toStdString());
            if (mode.empty() && config.is_object())
                mode = stringField(config, "mode");
            if (info.totalSteps < 0 && config.is_object() && config.contains("train") && config["train"].is_object())
                info.totalSteps = integerField(config["train"], "steps");
        } catch (const std::exception &e) {
            info.problem = QString::fromStdString(e.what());
        }
    }
    info.mode = stringField(summary, "source") == "kineto" ? QObject::tr("PyTorch trace") : QString::fromStdString(mode);
    return info;
}

void RunsModel::setRuns(std::vector<RunFolderInfo> runs)
{
    beginResetModel();
    m_runs = std::move(runs);
    endResetModel();
}

int RunsModel::rowCount(const QModelIndex &parent) const { return parent.isValid() ? 0 : int(m_runs.size()); }

int RunsModel::columnCount(const QModelIndex &parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant RunsModel::data(const QModelIndex &index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const RunFolderInfo &r = m_runs[std::size_t(index.row())];
    const int column = index.column();
    if (role == PathRole)
        return r.path;
    if (role == Qt::TextAlignmentRole)
        return column == Steps || column == Size ? QVariant(int(Qt::AlignRight | Qt::AlignVCenter)) : QVariant();
    if (role == Qt::ToolTipRole) {
        if (column == Status)
            return statusHelp(r.status);
        if (column == Size)
            return QObject::tr("%1 bytes").arg(QLocale().toString(r.bytes));
        return r.problem.isEmpty() ? r.path : QString(r.path + QLatin1Char('\n') + r.problem);
    }
    if (role == SortRole) {
        switch (column) {
        case Date: return r.date;
        case Steps: return r.steps;
        case Size: return r.bytes;
        default: break;
        }
    } else if (role != Qt::DisplayRole) {
        return {};
    }
    switch (column) {
    case Name: return r.name;
    case Date: return r.date.toString(QStringLiteral("yyyy-MM-dd HH:mm"));
    case Mode: return r.mode;
    case Status: return r.status;
    case Steps:
        if (r.steps < 0)
            return QStringLiteral("\u2013");
        return r.totalSteps > 0 ? QStringLiteral("%1 / %2").arg(r.steps).arg(r.totalSteps) : QString::number(r.steps);
    case Size: return QLocale().formattedDataSize(r.bytes);
    default: return {};
    }
}

QVariant RunsModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || section < 0 || section >= ColumnCount)
        return {};
    if (role == Qt::DisplayRole) {
        static const char *const names[] = {QT_TR_NOOP("Name"), QT_TR_NOOP("Started"), QT_TR_NOOP("Mode"),
                                            QT_TR_NOOP("Status"), QT_TR_NOOP("Steps"), QT_TR_NOOP("Size")};
        return tr(names[section]);
    }
    if (role == Qt::ToolTipRole && section == Status)
        return tr("From the run's summary.json: finished, stopped, failed, or interrupted when the "
                  "run never closed it");
    return {};
}

RunsBrowser::RunsBrowser(QWidget *parent) : QDialog(parent), m_model(new RunsModel(this)), m_proxy(new QSortFilterProxyModel(this))
{
    setWindowTitle(tr("Runs"));
    setObjectName(QStringLiteral("runsBrowser"));
    auto *layout = new QVBoxLayout(this);
    m_folderLabel = new QLabel;
    m_folderLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_folderLabel->setWordWrap(true);
    layout->addWidget(m_folderLabel);

    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(RunsModel::SortRole);
    m_proxy->setSortCaseSensitivity(Qt::CaseInsensitive);
    m_view = new QTableView;
    m_view->setObjectName(QStringLiteral("runsTable"));
    m_view->setModel(m_proxy);
    m_view->setSortingEnabled(true);
    m_view->sortByColumn(RunsModel::Date, Qt::DescendingOrder); // newest first
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_view->setAlternatingRowColors(true);
    m_view->setWordWrap(false);
    m_view->verticalHeader()->hide();
    // The name takes the room left; the other columns are as wide as what they hold.
    QHeaderView *header = m_view->horizontalHeader();
    header->setSectionResizeMode(QHeaderView::ResizeToContents);
    header->setSectionResizeMode(RunsModel::Name, QHeaderView::Stretch);
    header->setHighlightSections(false);
    layout->addWidget(m_view, 1);
    connect(m_view, &QTableView::activated, this, [this] { onOpen(); });
    connect(m_view->selectionModel(), &QItemSelectionModel::selectionChanged, this, &RunsBrowser::updateButtons);

    m_message = new QLabel;
    m_message->setObjectName(QStringLiteral("runsMessage"));
    m_message->setWordWrap(true);
    m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_message);

    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Close);
    m_open = buttons->addButton(tr("&Open"), QDialogButtonBox::AcceptRole);
    m_open->setObjectName(QStringLiteral("openRun"));
    m_open->setToolTip(tr("Open the run in the window (Enter, or double-click)"));
    m_rename = buttons->addButton(tr("&Rename..."), QDialogButtonBox::ActionRole);
    m_rename->setObjectName(QStringLiteral("renameRun"));
    m_rename->setToolTip(tr("Rename the run's folder (F2)"));
    m_delete = buttons->addButton(tr("&Delete..."), QDialogButtonBox::ActionRole);
    m_delete->setObjectName(QStringLiteral("deleteRun"));
    m_delete->setToolTip(tr("Delete the run's folder and everything in it (Del); asks first"));
    QPushButton *reload = buttons->addButton(tr("Re&fresh"), QDialogButtonBox::ResetRole);
    reload->setToolTip(tr("Read the runs folder again (F5)"));
    connect(m_open, &QPushButton::clicked, this, &RunsBrowser::onOpen);
    connect(m_rename, &QPushButton::clicked, this, &RunsBrowser::onRename);
    connect(m_delete, &QPushButton::clicked, this, &RunsBrowser::onDelete);
    connect(reload, &QPushButton::clicked, this, &RunsBrowser::refresh);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    layout->addWidget(buttons);
    m_open->setDefault(true);
    new QShortcut(QKeySequence(Qt::Key_F2), this, this, &RunsBrowser::onRename);
    new QShortcut(QKeySequence::Delete, this, this, &RunsBrowser::onDelete);
    new QShortcut(QKeySequence::Refresh, this, this, &RunsBrowser::refresh);
    resize(960, 520);
    updateButtons();
}

void RunsBrowser::setRunsFolder(const QString &dir)
{
    m_folder = QFileInfo(dir).absoluteFilePath();
    refresh();
}

void RunsBrowser::refresh()
{
    const QString selected = selectedPath();
    std::vector<RunFolderInfo> runs;
    const QDir dir(m_folder);
    for (const QFileInfo &fi : dir.entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot | QDir::NoSymLinks)) {
        if (!isRunFolder(fi.absoluteFilePath()))
            continue; // anything else kept in the folder is not ours to list, rename or delete
        RunFolderInfo info = readRunFolder(fi.absoluteFilePath());
        if (m_inUse && m_inUse(info.path))
            info.status = QStringLiteral("running");
        runs.push_back(std::move(info));
    }
    m_folderLabel->setText(runs.empty() ? tr("No runs in %1 yet (File > Choose Runs Folder... picks another folder).")
                                              .arg(QDir::toNativeSeparators(m_folder))
                                        : tr("%n run(s) in %1", nullptr, int(runs.size()))
                                              .arg(QDir::toNativeSeparators(m_folder)));
    m_model->setRuns(std::move(runs));
    // Wide enough for the longest name too (folder names reach 80 characters), within the screen.
    const auto *view = static_cast<const QAbstractItemView *>(m_view); // (public there)
    const QMargins margins = layout()->contentsMargins();
    int needed = margins.left() + margins.right() + 2 * m_view->frameWidth() + m_view->verticalScrollBar()->sizeHint().width();
    for (int c = 0; c < RunsModel::ColumnCount; ++c)
        needed += std::max(view->sizeHintForColumn(c), m_view->horizontalHeader()->sectionSizeHint(c));
    const QScreen *screen = this->screen();
    const int most = screen ? int(screen->availableGeometry().width() * 0.9) : needed;
    if (needed > width())
        resize(std::max(width(), std::min(needed, most)), height());
    if (!selected.isEmpty())
        select(selected);
    updateButtons();
}

QString RunsBrowser::message() const { return m_message->text(); }

bool RunsBrowser::select(const QString &dir)
{
    const QString path = QFileInfo(dir).absoluteFilePath();
    for (int row = 0; row < m_proxy->rowCount(); ++row) {
        const QModelIndex index = m_proxy->index(row, 0);
        if (index.data(RunsModel::PathRole).toString() == path) {
            m_view->selectionModel()->setCurrentIndex(index, QItemSelectionModel::ClearAndSelect |
                                                                 QItemSelectionModel::Rows);
            m_view->scrollTo(index);
            return true;
        }
    }
    return false;
}

QString RunsBrowser::selectedPath() const
{
    const QModelIndexList rows = m_view->selectionModel()->selectedRows();
    return rows.isEmpty() ? QString() : rows.front().data(RunsModel::PathRole).toString();
}

void RunsBrowser::updateButtons()
{
    const bool any = !selectedPath().isEmpty();
    m_open->setEnabled(any);
    m_rename->setEnabled(any);
    m_delete->setEnabled(any);
}

void RunsBrowser::say(const QString &text, bool error)
{
    m_message->setText(text);
    m_message->setStyleSheet(error ? QStringLiteral("color: #B2182B;") : QString());
}

QString RunsBrowser::refusal(const QString &dir) const
{
    const QFileInfo fi(dir);
    if (!isRunFolder(dir))
        return tr("%1 is not a run folder (it holds neither config.json nor summary.json): "
                  "the browser renames and deletes run folders only.")
            .arg(QDir::toNativeSeparators(fi.absoluteFilePath()));
    // Only the listed folder's own runs: a path from elsewhere is never touched.
    if (QFileInfo(fi.absolutePath()).canonicalFilePath() != QFileInfo(m_folder).canonicalFilePath())
        return tr("%1 is not in the runs folder %2.")
            .arg(QDir::toNativeSeparators(fi.absoluteFilePath()), QDir::toNativeSeparators(m_folder));
    if (m_inUse && m_inUse(fi.absoluteFilePath()))
        return tr("%1 is being written by the run in progress; stop it first.").arg(fi.fileName());
    return {};
}

bool RunsBrowser::renameRun(const QString &dir, const QString &newName)
{
    if (const QString why = refusal(dir); !why.isEmpty()) {
        say(why, true);
        return false;
    }
    const QFileInfo from(dir);
    const QString name = newName.trimmed();
    if (name == from.fileName())
        return false;
    if (name.isEmpty()) {
        say(tr("A run folder needs a name."), true);
        return false;
    }
    // The same rule as the folders runs are written into, so that a renamed run is one the
    // command line and other machines can name too.
    if (const QString valid = runFolderName(name); valid != name) {
        say(tr("\"%1\" cannot be a run folder's name: use letters, digits and - = . _ , only, at most "
               "80 characters, not starting with a dot (\"%2\" would do).")
                .arg(name, valid),
            true);
        return false;
    }
    const QString to = from.dir().filePath(name);
    if (QFileInfo::exists(to) || QFileInfo(to).isSymLink()) {
        say(tr("\"%1\" is already taken in the runs folder; choose another name.").arg(name), true);
        return false;
    }
    if (!QDir().rename(from.absoluteFilePath(), to)) {
        say(tr("Could not rename %1 to %2 (is the runs folder writable?).").arg(from.fileName(), name), true);
        return false;
    }
    Q_EMIT runRenamed(from.absoluteFilePath(), to);
    refresh();
    select(to);
    say(tr("Renamed %1 to %2.").arg(from.fileName(), name), false);
    return true;
}

bool RunsBrowser::deleteRun(const QString &dir)
{
    if (const QString why = refusal(dir); !why.isEmpty()) {
        say(why, true);
        return false;
    }
    const QString path = QFileInfo(dir).absoluteFilePath();
    const bool removed = QDir(path).removeRecursively(); // links inside are removed, not followed
    refresh();
    if (!removed) {
        say(tr("Could not delete all of %1 (is it writable?); what is left is still listed.").arg(QFileInfo(path).fileName()), true);
        return false;
    }
    Q_EMIT runDeleted(path);
    say(tr("Deleted %1.").arg(QFileInfo(path).fileName()), false);
    return true;
}

void RunsBrowser::onOpen()
{
    const QString path = selectedPath();
    if (path.isEmpty())
        return;
    Q_EMIT openRequested(path);
    accept();
}

void RunsBrowser::onRename()
{
    const QString path = selectedPath();
    if (path.isEmpty())
        return;
    bool ok = false;
    const QString name = QInputDialog::getText(this, tr("Rename run"),
                                               tr("New folder name (letters, digits and - = . _ ,):"),
                                               QLineEdit::Normal, QFileInfo(path).fileName(), &ok);
    if (ok)
        renameRun(path, name);
}

void RunsBrowser::onDelete()
{
    const QString path = selectedPath();
    if (path.isEmpty())
        return;
    if (const QString why = refusal(path); !why.isEmpty()) {
        say(why, true);
        return;
    }
    const auto it = std::find_if(m_model->runs().begin(), m_model->runs().end(),
                                 [&](const RunFolderInfo &r) { return r.path == path; });
    const QString size = it != m_model->runs().end() ? QLocale().formattedDataSize(it->bytes) : QString();
    QMessageBox box(QMessageBox::Warning, tr("Delete run"),
                    tr("Delete the run folder %1 (%2) and everything in it? This cannot be undone.")
                        .arg(QFileInfo(path).fileName(), size),
                    QMessageBox::Yes | QMessageBox::Cancel, this);
    box.setDefaultButton(QMessageBox::Cancel);
    box.button(QMessageBox::Yes)->setText(tr("Delete"));
    if (box.exec() == QMessageBox::Yes)
        deleteRun(path);
}

} // namespace syncopate
