#include "experimentform.h"

#include <QScopedValueRollback>

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QStyle>
#include <QVBoxLayout>

namespace syncopate {
namespace {

QString helpOf(const char *key)
{
    const ConfigKey *k = findConfigKey(key);
    return k ? QStringLiteral("<b>%1</b><br>%2").arg(QLatin1String(key), QString::fromUtf8(k->help))
             : QString();
}

QComboBox *enumCombo(const char *key)
{
    auto *c = new QComboBox;
    if (const ConfigKey *k = findConfigKey(key))
        for (const char *v : k->allowed)
            c->addItem(QString::fromLatin1(v));
    return c;
}

QSpinBox *intSpin(int lo, int hi)
{
    auto *s = new QSpinBox;
    s->setRange(lo, hi);
    return s;
}

// "1, 2, 3" -> [1, 2, 3]; anything else stays a string for the validator to reject by name.
nlohmann::json parseList(const QString &text, bool integers)
{
    const QString t = text.trimmed();
    if (t.isEmpty())
        return nullptr;
    nlohmann::json arr = nlohmann::json::array();
    for (QString part : t.split(QLatin1Char(','))) {
        part = part.trimmed().remove(QLatin1Char('[')).remove(QLatin1Char(']'));
        bool ok = false;
        if (integers) {
            const int v = part.toInt(&ok);
            if (ok)
                arr.push_back(v);
        } else {
            const double v = part.toDouble(&ok);
            if (ok)
                arr.push_back(v);
        }
        if (!ok)
            return t.toStdString();
    }
    return arr;
}

// A text field is a QLineEdit, or a row holding one (path + Browse...).
QLineEdit *lineEditOf(QWidget *w)
{
    auto *e = qobject_cast<QLineEdit *>(w);
    return e ? e : w->findChild<QLineEdit *>();
}

QString listText(const nlohmann::json &v)
{
    if (!v.is_array())
        return {};
    QStringList parts;
    for (const auto &e : v)
        parts << QString::fromStdString(e.dump());
    return parts.join(QStringLiteral(", "));
}

} // namespace

ExperimentForm::ExperimentForm(QWidget *parent) : QWidget(parent)
{
    auto *outer = new QVBoxLayout(this);
    outer->setContentsMargins(4, 4, 4, 4);
    m_preset = new QComboBox;
    m_preset->setPlaceholderText(tr("(a config file)"));
    m_preset->setToolTip(tr("Ready-made experiments, each showing one effect. Choosing one fills "
                            "the form; Run starts it."));
    m_presetText = new QLabel;
    m_presetText->setWordWrap(true);
    m_presetText->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_presetText->setFrameShape(QFrame::StyledPanel);
    m_presetText->setMargin(6);
    outer->addWidget(new QLabel(tr("<b>Preset</b>")));
    outer->addWidget(m_preset);
    outer->addWidget(m_presetText);

    auto *scroll = new QScrollArea;
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    auto *inner = new QWidget;
    auto *innerLayout = new QVBoxLayout(inner);
    innerLayout->setContentsMargins(0, 0, 0, 0);
    scroll->setWidget(inner);
    outer->addWidget(scroll, 1);

    auto group = [&](const QString &title) {
        auto *box = new QGroupBox(title);
        auto *form = new QFormLayout(box);
        form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
        innerLayout->addWidget(box);
        return form;
    };

    QFormLayout *run = group(tr("Workers"));
    addField(run, "mode", enumCombo("mode"), tr("Mode"));
    auto *workers = intSpin(1, 256);
    addField(run, "workers", workers, tr("Workers"));
    connect(workers, &QSpinBox::valueChanged, this, &ExperimentForm::workersChanged);
    connect(workers, &QSpinBox::valueChanged, this, &ExperimentForm::fitSlowdownToWorkers);
    // Editable: "cuda:0,2" picks GPUs. The list stays short so that opening the form does not
    // load the CUDA backend; syncopate-cli devices lists what is there.
    auto *device = new QComboBox;
    device->setEditable(true);
    device->addItems({QStringLiteral("cpu"), QStringLiteral("cuda")});
    addField(run, "device", device, tr("Device"));
    auto *tf32 = new QCheckBox(tr("TF32 tensor cores"));
    addField(run, "device.tf32", tf32, tr("GPU GEMMs"));
    auto *threads = intSpin(0, 1024);
    threads->setSpecialValueText(tr("auto (free cores / workers)"));
    addField(run, "device.threads_per_worker", threads, tr("CPU threads per worker"));
    auto gpuOnly = [tf32, threads](const QString &d) {
        tf32->setEnabled(d.startsWith(QLatin1String("cuda")));
        threads->setEnabled(!d.startsWith(QLatin1String("cuda")));
    };
    connect(device, &QComboBox::currentTextChanged, this, gpuOnly);
    gpuOnly(device->currentText());
    auto *slowdown = new QLineEdit;
    slowdown->setPlaceholderText(tr("all 1, e.g. 1, 1, 1, 3"));
    addField(run, "workers_slowdown", slowdown, tr("Slowdown per worker"));
    auto *jitter = new QDoubleSpinBox;
    jitter->setRange(0, 100);
    jitter->setSingleStep(0.1);
    addField(run, "jitter", jitter, tr("Jitter"));
    auto *bound = intSpin(-1, 1000000);
    bound->setSpecialValueText(tr("unbounded"));
    addField(run, "async.max_staleness", bound, tr("Staleness bound"));
    addField(run, "async.staleness_lr", new QCheckBox(tr("lr / staleness")), tr("Staleness-aware lr"));
    addField(run, "sync.backup_workers", intSpin(0, 4095), tr("Backup workers"));

    // Used when the run goes over MPI ranks (mpirun -np N syncopate-cli run); saved with the
    // config like every other key.
    QFormLayout *ranks = group(tr("MPI ranks"));
    addField(ranks, "sync.allreduce", enumCombo("sync.allreduce"), tr("All-reduce"));
    addField(ranks, "mpi.workers_per_rank", intSpin(1, 256), tr("Workers per rank"));
    auto *timeout = new QDoubleSpinBox;
    timeout->setRange(0.5, 3600);
    timeout->setSuffix(tr(" s"));
    addField(ranks, "mpi.timeout_s", timeout, tr("Lost-rank timeout"));

    QFormLayout *model = group(tr("Model"));
    auto *layers = new QLineEdit;
    layers->setPlaceholderText(tr("by data source, e.g. 32, 256, 256, 10"));
    addField(model, "model.layers", layers, tr("Layer widths"));
    addField(model, "model.activation", enumCombo("model.activation"), tr("Activation"));
    addField(model, "model.checkpoint", new QCheckBox(tr("recompute in backward")), tr("Checkpointing"));
    auto *every = intSpin(0, 65536);
    every->setSpecialValueText(tr("sqrt(layers)"));
    addField(model, "model.checkpoint_every", every, tr("Segment length"));
    addField(model, "model.batchnorm", enumCombo("model.batchnorm"), tr("Batch norm"));

    QFormLayout *data = group(tr("Data"));
    addField(data, "data.source", enumCombo("data.source"), tr("Source"));
    addField(data, "data.images", browseRow("data.images", tr("IDX files (*.idx *ubyte *.gz);;All files (*)")), tr("Images"));
    addField(data, "data.labels", browseRow("data.labels", tr("IDX files (*.idx *ubyte *.gz);;All files (*)")), tr("Labels"));
    auto *samples = intSpin(0, 1000000000);
    samples->setSpecialValueText(tr("default"));
    addField(data, "data.samples", samples, tr("Samples"));
    addField(data, "data.shuffle", new QCheckBox(tr("new order each epoch")), tr("Shuffle"));
    auto *prefetch = intSpin(0, 64);
    prefetch->setSpecialValueText(tr("off"));
    prefetch->setSuffix(tr(" batches ahead"));
    addField(data, "data.prefetch", prefetch, tr("Prefetch"));
    auto *cost = new QDoubleSpinBox;
    cost->setRange(0, 1e6);
    cost->setDecimals(1);
    cost->setSuffix(tr(" µs per sample"));
    cost->setSpecialValueText(tr("none"));
    addField(data, "data.cost_us", cost, tr("Preparation cost"));

    QFormLayout *train = group(tr("Training"));
    addField(train, "train.steps", intSpin(1, 100000000), tr("Steps"));
    addField(train, "train.batch", intSpin(1, 1000000), tr("Batch per worker"));
    addField(train, "train.optimizer", enumCombo("train.optimizer"), tr("Optimizer"));
    auto *lr = new QLineEdit;
    lr->setPlaceholderText(tr("by optimizer"));
    addField(train, "train.lr", lr, tr("Learning rate"));
    auto *momentum = new QDoubleSpinBox;
    momentum->setRange(0, 0.999);
    momentum->setDecimals(3);
    momentum->setSingleStep(0.05);
    addField(train, "train.momentum", momentum, tr("Momentum"));
    addField(train, "train.seed", intSpin(0, 2000000000), tr("Seed"));
    auto *evalEvery = intSpin(0, 100000000);
    evalEvery->setSpecialValueText(tr("at the end"));
    addField(train, "eval.every", evalEvery, tr("Evaluate every"));
    auto *evalSamples = intSpin(0, 10000000);
    evalSamples->setSpecialValueText(tr("never"));
    addField(train, "eval.samples", evalSamples, tr("Held-out samples"));
    addField(train, "eval.images", browseRow("eval.images", tr("IDX files (*.idx *ubyte *.gz);;All files (*)")), tr("Held-out images"));
    addField(train, "eval.labels", browseRow("eval.labels", tr("IDX files (*.idx *ubyte *.gz);;All files (*)")), tr("Held-out labels"));
    innerLayout->addStretch();

    // File rows matter only for IDX data: greyed out otherwise, their paths kept.
    auto *source = static_cast<QComboBox *>(m_fields.value(QStringLiteral("data.source")));
    auto enableFiles = [this](const QString &src) {
        const bool files = src == QLatin1String("idx");
        for (const char *key : {"data.images", "data.labels", "eval.images", "eval.labels"})
            m_fields.value(QString::fromLatin1(key))->setEnabled(files);
    };
    connect(source, &QComboBox::currentTextChanged, this, enableFiles);
    enableFiles(source->currentText());

    // checkpointed mode is sync with checkpointing: show it, and keep it from being unticked.
    auto *mode = static_cast<QComboBox *>(m_fields.value(QStringLiteral("mode")));
    auto *checkpoint = static_cast<QCheckBox *>(m_fields.value(QStringLiteral("model.checkpoint")));
    connect(mode, &QComboBox::currentTextChanged, this, [checkpoint](const QString &m) {
        const bool implied = m == QLatin1String("checkpointed");
        if (implied)
            checkpoint->setChecked(true);
        checkpoint->setEnabled(!implied);
    });

    m_presets = listPresets();
    for (const auto &p : m_presets)
        m_preset->addItem(QString::fromStdString(p.title), QString::fromStdString(p.name));
    connect(m_preset, &QComboBox::activated, this, &ExperimentForm::applyPreset);
    setFromJson(nlohmann::json::object());
}

void ExperimentForm::addField(QFormLayout *form, const char *key, QWidget *widget, const QString &label)
{
    const QString k = QString::fromLatin1(key);
    widget->setObjectName(k);
    widget->setToolTip(helpOf(key));
    auto *l = new QLabel(label);
    l->setToolTip(helpOf(key));
    form->addRow(l, widget);
    m_fields.insert(k, widget);
}

QWidget *ExperimentForm::browseRow(const char *key, const QString &filter)
{
    auto *row = new QWidget;
    auto *h = new QHBoxLayout(row);
    h->setContentsMargins(0, 0, 0, 0);
    auto *edit = new QLineEdit;
    edit->setObjectName(QString::fromLatin1(key) + QStringLiteral(".edit"));
    auto *button = new QPushButton(tr("Browse..."));
    h->addWidget(edit, 1);
    h->addWidget(button);
    connect(button, &QPushButton::clicked, this, [this, edit, filter] {
        const QString f = QFileDialog::getOpenFileName(this, tr("Choose an IDX file"), edit->text(), filter);
        if (!f.isEmpty())
            edit->setText(f);
    });
    return row;
}

int ExperimentForm::workers() const { return static_cast<QSpinBox *>(m_fields.value(QStringLiteral("workers")))->value(); }

nlohmann::json ExperimentForm::toJson() const
{
    nlohmann::json j = nlohmann::json::object();
    for (auto it = m_fields.cbegin(); it != m_fields.cend(); ++it) {
        const std::string key = it.key().toStdString();
        QWidget *w = it.value();
        if (auto *c = qobject_cast<QComboBox *>(w)) {
            j[key] = c->currentText().toStdString();
        } else if (auto *s = qobject_cast<QSpinBox *>(w)) {
            j[key] = s->value();
        } else if (auto *d = qobject_cast<QDoubleSpinBox *>(w)) {
            j[key] = d->value();
        } else if (auto *b = qobject_cast<QCheckBox *>(w)) {
            j[key] = b->isChecked();
        } else {
            const QLineEdit *e = lineEditOf(w);
            const QString text = e ? e->text().trimmed() : QString();
            if (key == "model.layers") {
                const auto v = parseList(text, true);
                if (!v.is_null())
                    j[key] = v;
            } else if (key == "workers_slowdown") {
                const auto v = parseList(text, false);
                j[key] = v.is_null() ? nlohmann::json::array() : v;
            } else if (key == "train.lr") {
                bool ok = false;
                const double v = text.toDouble(&ok);
                if (ok)
                    j[key] = v;
                else if (!text.isEmpty())
                    j[key] = text.toStdString();
            } else {
                j[key] = text.toStdString();
            }
        }
    }
    return j;
}

void ExperimentForm::setFromJson(const nlohmann::json &config)
{
    // The config's own slowdown list comes with its worker count: nothing to fit.
    const QScopedValueRollback<bool> loading(m_loading, true);
    nlohmann::json flat;
    try {
        flat = flattenConfig(config.is_object() ? config : nlohmann::json::object());
    } catch (const ConfigError &) {
        flat = nlohmann::json::object();
    }
    for (const auto &k : configKeys()) {
        QWidget *w = m_fields.value(QString::fromLatin1(k.name));
        if (!w)
            continue;
        const nlohmann::json v = flat.contains(k.name) ? flat[k.name] : nlohmann::json::parse(k.defaultJson);
        if (auto *c = qobject_cast<QComboBox *>(w)) {
            if (v.is_string())
                c->setCurrentText(QString::fromStdString(v.get<std::string>()));
        } else if (auto *s = qobject_cast<QSpinBox *>(w)) {
            if (v.is_number())
                s->setValue(v.get<int>());
        } else if (auto *d = qobject_cast<QDoubleSpinBox *>(w)) {
            if (v.is_number())
                d->setValue(v.get<double>());
        } else if (auto *b = qobject_cast<QCheckBox *>(w)) {
            if (v.is_boolean())
                b->setChecked(v.get<bool>());
        } else {
            QLineEdit *e = lineEditOf(w);
            if (!e)
                continue;
            if (v.is_array())
                e->setText(listText(v));
            else if (v.is_number())
                e->setText(QString::number(v.get<double>(), 'g', 10));
            else if (v.is_string())
                e->setText(QString::fromStdString(v.get<std::string>()));
            else
                e->clear();
        }
    }
    clearErrors();
}

void ExperimentForm::applyPreset(int index)
{
    if (index < 0 || index >= int(m_presets.size()))
        return;
    const Preset &p = m_presets[std::size_t(index)];
    setFromJson(p.config);
    m_presetText->setText(QString::fromStdString(p.description));
    Q_EMIT presetChosen(QString::fromStdString(p.name), QString::fromStdString(p.description));
}

void ExperimentForm::selectPreset(const QString &name)
{
    const int i = m_preset->findData(name);
    if (i >= 0) {
        m_preset->setCurrentIndex(i);
        applyPreset(i);
    }
}

void ExperimentForm::showLoadedFrom(const QString &path)
{
    m_preset->setCurrentIndex(-1);
    m_presetText->setText(tr("Loaded from %1. Choosing a preset replaces these values.").arg(path));
}

QString ExperimentForm::presetName() const { return m_preset->currentData().toString(); }
QString ExperimentForm::presetText() const { return m_presetText->text(); }

void ExperimentForm::fitSlowdownToWorkers(int workers)
{
    // A list of slowdowns for another worker count would be refused at the start: padded with
    // 1 (a worker at full speed) or trimmed, and said.
    QLineEdit *e = lineEditOf(m_fields.value(QStringLiteral("workers_slowdown")));
    if (m_loading || !e || e->text().trimmed().isEmpty())
        return;
    QStringList parts = e->text().split(QLatin1Char(','), Qt::SkipEmptyParts);
    for (QString &p : parts)
        p = p.trimmed();
    const auto had = parts.size();
    if (had == workers || workers < 1)
        return;
    while (parts.size() < workers)
        parts << QStringLiteral("1");
    QStringList dropped;
    while (parts.size() > workers)
        dropped.prepend(parts.takeLast());
    e->setText(parts.join(QStringLiteral(", ")));
    Q_EMIT noteChanged(dropped.isEmpty()
                           ? tr("Slowdown per worker padded with 1 for the %n new worker(s)", nullptr, int(workers - had))
                           : tr("Slowdown per worker trimmed to %n worker(s) (dropped %1)", nullptr, workers)
                                 .arg(dropped.join(QStringLiteral(", "))));
}

void ExperimentForm::markErrors(const QStringList &fields)
{
    clearErrors();
    for (const QString &f : fields)
        if (QWidget *w = m_fields.value(f)) {
            w->setStyleSheet(QStringLiteral("border: 2px solid #D55E00;"));
            w->setProperty("configError", true);
        }
}

void ExperimentForm::clearErrors()
{
    for (QWidget *w : std::as_const(m_fields))
        if (w->property("configError").toBool()) {
            w->setStyleSheet(QString());
            w->setProperty("configError", false);
        }
}

} // namespace syncopate
