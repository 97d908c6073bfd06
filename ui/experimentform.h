// The experiment form: one widget per config key (tooltips from the key table), a preset picker
// with its explanation, and marks on the fields a config error names.
#pragma once

#include "session.h"

#include <QHash>
#include <QWidget>

class QComboBox;
class QLabel;
class QFormLayout;

namespace syncopate {

class ExperimentForm : public QWidget {
    Q_OBJECT
public:
    explicit ExperimentForm(QWidget *parent = nullptr);

    // Flat dotted keys; fields left empty are left out (so their defaults apply).
    nlohmann::json toJson() const;
    // Nested or flat; keys not given take their defaults.
    void setFromJson(const nlohmann::json &config);
    void selectPreset(const QString &name);
    // The form now holds a config file's values: no preset is shown as chosen, and the text
    // under the preset box names the file.
    void showLoadedFrom(const QString &path);
    QString presetName() const;
    QString presetText() const;
    void markErrors(const QStringList &fields);
    void clearErrors();
    QWidget *field(const QString &key) const { return m_fields.value(key); }
    int workers() const;

Q_SIGNALS:
    void presetChosen(const QString &name, const QString &description);
    void workersChanged(int workers);
    // Something the form changed by itself and the user should know (for the status bar).
    void noteChanged(const QString &text);

private:
    void addField(QFormLayout *form, const char *key, QWidget *widget, const QString &label);
    QWidget *browseRow(const char *key, const QString &filter);
    void applyPreset(int index);
    void fitSlowdownToWorkers(int workers);

    QComboBox *m_preset;
    bool m_loading = false; // setFromJson is filling the fields
    QLabel *m_presetText;
    std::vector<Preset> m_presets;
    QHash<QString, QWidget *> m_fields;
};

} // namespace syncopate
