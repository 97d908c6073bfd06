#include "comparison.h"

#include <QObject>

#include <cmath>

namespace syncopate {
namespace {

double number(const nlohmann::json &s, const char *key, bool *ok)
{
    const auto it = s.find(key);
    *ok = it != s.end() && it->is_number() && std::isfinite(it->get<double>());
    return *ok ? it->get<double>() : 0.0;
}

QString fixed(const nlohmann::json &s, const char *key, int decimals, double scale = 1.0)
{
    bool ok = false;
    const double v = number(s, key, &ok);
    return ok ? QString::number(v * scale, 'f', decimals) : QString();
}

QString csvField(const QString &f)
{
    if (!f.contains(QLatin1Char(',')) && !f.contains(QLatin1Char('"')) && !f.contains(QLatin1Char('\n')))
        return f;
    QString q = f;
    q.replace(QLatin1Char('"'), QStringLiteral("\"\""));
    return QLatin1Char('"') + q + QLatin1Char('"');
}

QString mdField(const QString &f)
{
    QString q = f;
    q.replace(QLatin1Char('|'), QStringLiteral("\\|"));
    q.replace(QLatin1Char('\n'), QLatin1Char(' '));
    return q;
}

} // namespace

ComparisonTable compareRuns(const std::vector<RunDataPtr> &runs)
{
    ComparisonTable t;
    // Each column with what it means (its header's tooltip).
    const std::pair<QString, QString> columns[] = {
        {QObject::tr("run"), QObject::tr("The run's name")},
        {QObject::tr("mode"), QObject::tr("sync, async (with its staleness bound) or checkpointed")},
        {QObject::tr("workers"), QObject::tr("Workers that trained")},
        {QObject::tr("wall (s)"), QObject::tr("Wall time of the run")},
        {QObject::tr("samples/s"), QObject::tr("Training samples per second, all workers together")},
        {QObject::tr("stall %"), QObject::tr("Share of worker time spent waiting (barrier, bound, server lock)")},
        {QObject::tr("off CPU %"), QObject::tr("Share of worker time a worker could run but the OS did not run it")},
        {QObject::tr("staleness mean"), QObject::tr("Mean updates applied between a worker's pull and its push (async)")},
        {QObject::tr("staleness max"), QObject::tr("The stalest update (async)")},
        {QObject::tr("final loss"), QObject::tr("Mean training loss over the workers at the last step")},
        {QObject::tr("held-out loss"), QObject::tr("Loss on the held-out set at the end")},
        {QObject::tr("held-out accuracy %"), QObject::tr("Accuracy on the held-out set at the end")},
        {QObject::tr("peak activations (MiB)"), QObject::tr("Peak activation memory of one worker")},
        {QObject::tr("recompute (ms)"), QObject::tr("Time spent recomputing activations (checkpointing)")},
    };
    for (const auto &[name, tip] : columns) {
        t.header << name;
        t.tips << tip;
    }
    for (const RunDataPtr &run : runs) {
        if (!run)
            continue;
        const RunConfig &c = run->config();
        const nlohmann::json &s = run->summary;
        QString mode = QString::fromStdString(c.mode);
        if (c.async() && c.maxStaleness >= 0)
            mode += QObject::tr(" (bound %1)").arg(c.maxStaleness);
        if (c.checkpoint && mode != QLatin1String("checkpointed"))
            mode += QObject::tr(", checkpointed");
        const bool async = c.async();
        t.rows.push_back({run->label(), mode, QString::number(c.workers), fixed(s, "wall_s", 2),
                          fixed(s, "samples_per_s", 0), fixed(s, "stall_fraction", 1, 100.0),
                          fixed(s, "descheduled_fraction", 1, 100.0),
                          async ? fixed(s, "staleness_mean", 2) : QStringLiteral("0"),
                          async ? fixed(s, "staleness_max", 0) : QStringLiteral("0"),
                          fixed(s, "final_loss", 5), fixed(s, "final_eval_loss", 5),
                          fixed(s, "final_eval_accuracy", 1, 100.0),
                          fixed(s, "peak_activation_bytes", 2, 1.0 / 1048576.0),
                          c.checkpoint ? fixed(s, "recompute_ms", 0) : QString()});
    }
    return t;
}

QString ComparisonTable::toCsv() const
{
    QStringList lines;
    QStringList head;
    for (const QString &h : header)
        head << csvField(h);
    lines << head.join(QLatin1Char(','));
    for (const QStringList &row : rows) {
        QStringList fields;
        for (const QString &f : row)
            fields << csvField(f);
        lines << fields.join(QLatin1Char(','));
    }
    return lines.join(QLatin1Char('\n')) + QLatin1Char('\n');
}

QString ComparisonTable::toMarkdown() const
{
    auto line = [](const QStringList &cells) -> QString { // a QString: not a builder of temporaries
        QStringList escaped;
        for (const QString &c : cells)
            escaped << mdField(c);
        return QStringLiteral("| ") + escaped.join(QStringLiteral(" | ")) + QStringLiteral(" |");
    };
    QStringList lines{line(header)};
    QStringList rule;
    for (int i = 0; i < header.size(); ++i)
        rule << (i < 2 ? QStringLiteral("---") : QStringLiteral("---:")); // numbers to the right
    lines << QString(QStringLiteral("| ") + rule.join(QStringLiteral(" | ")) + QStringLiteral(" |"));
    for (const QStringList &row : rows)
        lines << line(row);
    return lines.join(QLatin1Char('\n')) + QLatin1Char('\n');
}

} // namespace syncopate
