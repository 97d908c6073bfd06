// Help > Lesson: the steps and the texts that state a run's figures (the panel is lesson.cpp).
#include "lesson.h"

#include <QLocale>
#include <QObject>

#include <algorithm>
#include <cmath>
#include <optional>

namespace syncopate {
namespace {

using json = nlohmann::json;

// The figures of each step are built by its own function below.
using namespace lessonstep;

// Only finite numbers count: a summary opened from disk may hold anything.
std::optional<double> num(const json &s, const char *key)
{
    if (!s.is_object())
        return std::nullopt;
    const auto it = s.find(key);
    if (it == s.end() || !it->is_number() || !std::isfinite(it->get<double>()))
        return std::nullopt;
    return it->get<double>();
}

// One finite number per worker, or nothing.
std::vector<double> perWorker(const json &s, const char *key, int workers)
{
    if (!s.is_object() || workers <= 0)
        return {};
    const auto it = s.find(key);
    if (it == s.end() || !it->is_array() || int(it->size()) != workers)
        return {};
    std::vector<double> out;
    for (const json &v : *it) {
        if (!v.is_number() || !std::isfinite(v.get<double>()))
            return {};
        out.push_back(v.get<double>());
    }
    return out;
}

double mean(const std::vector<double> &v, int except = -1)
{
    double sum = 0;
    int n = 0;
    for (int i = 0; i < int(v.size()); ++i)
        if (i != except) {
            sum += v[std::size_t(i)];
            ++n;
        }
    return n > 0 ? sum / n : 0.0;
}

QString fixed(double v, int decimals) { return QLocale().toString(v, 'f', decimals); }

QString pct(double fraction)
{
    const double p = 100.0 * fraction;
    return fixed(p, p > 0 && p < 9.95 ? 1 : 0) + QLatin1Char('%');
}

QString seconds(double s) { return fixed(s, s >= 100 ? 0 : 1) + QStringLiteral(" s"); }
QString ms(double v) { return v >= 10000 ? seconds(v / 1000.0) : fixed(v, v < 9.95 ? 1 : 0) + QStringLiteral(" ms"); }
QString mib(double b)
{
    return b < 100 * 1024 ? fixed(b / 1024.0, 0) + QStringLiteral(" KiB") : fixed(b / 1048576.0, 2) + QStringLiteral(" MiB");
}

QString rate(double v) { return QLocale().toString(qRound64(v)); }

QString times(double f) { return QLocale().toString(f, 'g', 3) + QLatin1Char('x'); }

QString others(int n)
{
    return n == 1 ? QObject::tr("the other worker") : QObject::tr("the other %1 workers").arg(n);
}

// The worker a config slows down most, or -1 when none is slowed.
int slowestWorker(const RunConfig &c)
{
    const auto it = std::max_element(c.slowdown.begin(), c.slowdown.end());
    return it != c.slowdown.end() && *it > 1.0 ? int(it - c.slowdown.begin()) : -1;
}

bool sameModel(const RunConfig &a, const RunConfig &b)
{
    return a.layers == b.layers && a.batch == b.batch && a.workers == b.workers;
}

QString joined(const QStringList &paragraphs)
{
    QString html;
    for (const QString &p : paragraphs)
        if (!p.isEmpty())
            html += QStringLiteral("<p>") + p + QStringLiteral("</p>");
    return html;
}

// Said first when the run did not go to its end: the figures then cover part of it.
QString statusNote(const json &s)
{
    const std::string status = s.is_object() && s.contains("status") && s["status"].is_string()
                                   ? s["status"].get<std::string>()
                                   : std::string();
    if (status.empty() || status == "finished")
        return {};
    const auto done = num(s, "steps_completed"), total = num(s, "steps");
    const QString steps = done && total ? QObject::tr(" after %1 of %2 steps").arg(qint64(*done)).arg(qint64(*total))
                                        : QString();
    if (status == "failed") {
        const QString error = s.contains("error") && s["error"].is_string()
                                  ? QStringLiteral(": ") + QString::fromStdString(s["error"].get<std::string>()).toHtmlEscaped()
                                  : QString();
        return QObject::tr("<b>The run failed%1</b>%2. The figures below cover what it did until then.").arg(steps, error);
    }
    const QString how = status == "stopped"       ? QObject::tr("was stopped")
                        : status == "interrupted" ? QObject::tr("was interrupted")
                                                  : QObject::tr("ended %1").arg(QString::fromStdString(status).toHtmlEscaped());
    return QObject::tr("<b>The run %1%2</b>: the figures below cover those steps only.").arg(how, steps);
}

QString runLine(const json &s)
{
    const auto steps = num(s, "steps_completed"), wall = num(s, "wall_s"), samples = num(s, "samples_per_s");
    QString t;
    if (steps && wall)
        t = QObject::tr("%1 steps in %2").arg(qint64(*steps)).arg(seconds(*wall));
    if (samples)
        t += (t.isEmpty() ? QString() : QStringLiteral(", ")) + QObject::tr("%1 samples/s").arg(rate(*samples));
    return t.isEmpty() ? t : t + QLatin1Char('.');
}

QString offCpuClause(const json &s)
{
    const auto d = num(s, "descheduled_fraction");
    return d ? QObject::tr(" (the OS kept the workers off the CPU for %1 of their time: more workers than "
                           "free cores, or other programs)")
                   .arg(pct(*d))
             : QString();
}

// Sync runs: how much of the barrier's waiting was for a worker the OS was not running. The
// lesson's cause (the straggler, the mode) is named only for what descheduling leaves over.
QString syncStallCause(const json &s, const QString &lessonCause)
{
    const auto sd = num(s, "stall_descheduled_fraction"), stall = num(s, "stall_fraction");
    if (!sd || !stall || *stall < 0.02)
        return {};
    if (*sd >= 0.5)
        return QObject::tr("<b>But most of this waiting, %1, was for a worker the OS was not running</b>%2. "
                           "On this machine descheduling explains more of the stalls than %3 does.")
            .arg(pct(*sd), offCpuClause(s), lessonCause);
    if (*sd >= 0.2)
        return QObject::tr("Of this waiting, %1 was for a worker the OS was not running%2, not for %3.")
            .arg(pct(*sd), offCpuClause(s), lessonCause);
    return {};
}

QString offCpuNote(const json &s)
{
    const auto d = num(s, "descheduled_fraction");
    if (!d || *d < 0.1)
        return {};
    return QObject::tr("<b>The OS kept the workers off the CPU for %1 of their time</b> (more workers than free "
                       "cores, or other programs): every time here is longer, and noisier, than on an idle machine.")
        .arg(pct(*d));
}

// Each worker's wait at the barrier per step (sync: every worker does every step).
std::vector<double> waitPerStep(const json &s, const RunConfig &c)
{
    std::vector<double> w = perWorker(s, "stall_ms_per_worker", c.workers);
    const auto steps = num(s, "steps_completed");
    if (!steps || *steps < 1)
        return {};
    for (double &v : w)
        v /= *steps;
    return w;
}

QString missingNote(const QStringList &paragraphs)
{
    return std::all_of(paragraphs.begin(), paragraphs.end(), [](const QString &p) { return p.isEmpty(); })
               ? QObject::tr("This run's summary holds none of the figures this step reads.")
               : QString();
}

} // namespace

LessonRun lessonRun(const RunData &run)
{
    LessonRun r{run.summary, run.config(), {}};
    if (run.config().async()) {
        for (int w = 0; w < run.trace().workers(); ++w) {
            const auto &h = run.stalenessHistogram(w);
            double n = 0, sum = 0;
            for (std::size_t v = 0; v < h.size(); ++v) {
                n += double(h[v]);
                sum += double(v) * double(h[v]);
            }
            r.stalenessPerWorker.push_back(n > 0 ? sum / n : 0.0);
        }
        if (int(r.stalenessPerWorker.size()) != run.config().workers)
            r.stalenessPerWorker.clear();
    }
    return r;
}

QString layersText(const std::vector<int> &layers)
{
    QStringList parts;
    for (std::size_t i = 0; i < layers.size();) {
        std::size_t j = i;
        while (j < layers.size() && layers[j] == layers[i])
            ++j;
        parts << (j - i > 2 ? QStringLiteral("%1x%2").arg(layers[i]).arg(j - i)
                            : QStringList(qsizetype(j - i), QString::number(layers[i])).join(QLatin1Char('-')));
        i = j;
    }
    return parts.join(QLatin1Char('-'));
}

QString baselineFigures(const LessonRun &run)
{
    const json &s = run.summary;
    QStringList p{statusNote(s), runLine(s)};
    const QString cause = syncStallCause(s, QObject::tr("the sync mode itself"));
    if (const auto stall = num(s, "stall_fraction")) {
        QString t = QObject::tr("The workers waited at the barrier for <b>%1 of their time</b>").arg(pct(*stall));
        if (const auto w = waitPerStep(s, run.config); !w.empty())
            t += QObject::tr(", %1 per step each").arg(ms(mean(w)));
        t += QLatin1Char('.');
        if (*stall < 0.1)
            t += QObject::tr(" Little, as expected: the workers run at the same speed.");
        else if (cause.isEmpty())
            t += QObject::tr(" That is more than workers of the same speed should lose: look on the timeline for "
                             "the worker the others wait for.");
        else
            t += QObject::tr(" That is more than workers of the same speed should lose.");
        p << t;
    }
    p << (cause.isEmpty() ? offCpuNote(s) : cause);
    const QString missing = missingNote(p);
    if (missing.isEmpty())
        p << QObject::tr("The next steps compare with these figures.");
    return joined(p << missing);
}

QString stragglerSyncFigures(const LessonRun &run, const LessonRun *baseline)
{
    const json &s = run.summary;
    const RunConfig &c = run.config;
    const bool fair = baseline && sameModel(c, baseline->config);
    QStringList p{statusNote(s)};
    QString line = runLine(s);
    if (const auto r = num(s, "samples_per_s"), b = fair ? num(baseline->summary, "samples_per_s") : std::nullopt;
        r && b && *b > 0) {
        line += QObject::tr(" That is %1 of the baseline's %2 samples/s (step 1)").arg(pct(*r / *b), rate(*b));
        line += *r / *b >= 0.9 ? QObject::tr(": hardly slower, so the straggler did not slow this run much.")
                               : QStringLiteral(".");
    }
    p << line;
    if (const auto stall = num(s, "stall_fraction")) {
        QString t = QObject::tr("The workers waited at the barrier for <b>%1 of their time</b>").arg(pct(*stall));
        if (const auto b = fair ? num(baseline->summary, "stall_fraction") : std::nullopt)
            t += QObject::tr(", against %1 in step 1").arg(pct(*b));
        p << t + QLatin1Char('.');
    }
    const int slow = slowestWorker(c);
    const std::vector<double> wait = waitPerStep(s, c);
    if (slow < 0) {
        p << QObject::tr("No worker was slowed in this run's configuration, so there is no straggler to see.");
    } else if (!wait.empty()) {
        const double fast = mean(wait, slow), own = wait[std::size_t(slow)];
        QString t = QObject::tr("<b>Worker %1 (slowed %2)</b>").arg(slow).arg(times(c.slowdown[std::size_t(slow)]));
        std::vector<double> delay = perWorker(s, "delay_ms_per_worker", c.workers);
        const auto steps = num(s, "steps_completed");
        if (!delay.empty() && steps && *steps >= 1)
            t += QObject::tr(" added a delay of %1 to each of its steps;").arg(ms(delay[std::size_t(slow)] / *steps));
        t += QObject::tr(" %1 waited <b>%2 per step</b> each at the barrier, worker %3 itself %4.")
                 .arg(others(c.workers - 1), ms(fast))
                 .arg(slow)
                 .arg(ms(own));
        t += fast > 2 * own ? QObject::tr(" The straggler set everyone's pace.")
                            : QObject::tr(" The others did not wait clearly longer than worker %1, so on this "
                                          "machine the straggler did not set the pace.")
                                  .arg(slow);
        p << t;
    }
    p << (num(s, "stall_descheduled_fraction").value_or(0) >= 0.2
              ? syncStallCause(s, slow >= 0 ? QObject::tr("worker %1's slowness").arg(slow) : QObject::tr("the barrier"))
              : offCpuNote(s));
    return joined(p << missingNote(p));
}

QString stragglerAsyncFigures(const LessonRun &run, const LessonRun *syncStraggler, const LessonRun *baseline)
{
    const json &s = run.summary;
    const RunConfig &c = run.config;
    const bool fair = syncStraggler && sameModel(c, syncStraggler->config) && c.slowdown == syncStraggler->config.slowdown;
    QStringList p{statusNote(s)};
    QString line = runLine(s);
    if (const auto r = num(s, "samples_per_s"), b = fair ? num(syncStraggler->summary, "samples_per_s") : std::nullopt;
        r && b && *b > 0) {
        line += *r / *b >= 1.1 ? QObject::tr(" <b>%1 the throughput of step 2</b> (%2 samples/s in sync with the same straggler)")
                                     .arg(times(*r / *b), rate(*b))
                               : QObject::tr(" No faster than step 2's %1 samples/s in sync with the same straggler: "
                                             "the lesson's gain does not show on this machine")
                                     .arg(rate(*b));
        if (const auto base = baseline && sameModel(c, baseline->config) ? num(baseline->summary, "samples_per_s")
                                                                         : std::nullopt;
            base && *base > 0)
            line += QObject::tr(", %1 of the baseline's").arg(pct(*r / *base));
        line += QLatin1Char('.');
    }
    p << line;
    if (const auto stall = num(s, "stall_fraction")) {
        QString t = QObject::tr("The workers waited for %1 of their time (for the server)").arg(pct(*stall));
        if (const auto b = fair ? num(syncStraggler->summary, "stall_fraction") : std::nullopt)
            t += QObject::tr(", against %1 at the barrier in step 2").arg(pct(*b));
        p << t + QLatin1Char('.');
    }
    const auto meanS = num(s, "staleness_mean"), maxS = num(s, "staleness_max");
    if (meanS && maxS)
        p << QObject::tr("The price is staleness: <b>mean %1, max %2</b>, the updates the server applied between "
                         "a worker's pull and its push.")
                 .arg(fixed(*meanS, 1))
                 .arg(qint64(*maxS));
    const int slow = slowestWorker(c);
    if (slow >= 0 && int(run.stalenessPerWorker.size()) == c.workers && c.workers > 1) {
        const double own = run.stalenessPerWorker[std::size_t(slow)], rest = mean(run.stalenessPerWorker, slow);
        p << (own > 1.2 * rest ? QObject::tr("Worker %1 (slowed %2) pushed the stalest gradients: mean %3 against %4 "
                                             "for the others.")
                               : QObject::tr("Worker %1 (slowed %2) did not push clearly staler gradients here: mean "
                                             "%3 against %4 for the others."))
                 .arg(slow)
                 .arg(times(c.slowdown[std::size_t(slow)]), fixed(own, 1), fixed(rest, 1));
    }
    p << offCpuNote(s);
    return joined(p << missingNote(p));
}

QString boundedStalenessFigures(const LessonRun &run, const LessonRun *unbounded, const LessonRun *straggler)
{
    const json &s = run.summary;
    const RunConfig &c = run.config;
    QStringList p{statusNote(s), runLine(s)};
    const auto meanS = num(s, "staleness_mean"), maxS = num(s, "staleness_max");
    if (meanS && maxS) {
        QString t = QObject::tr("<b>Mean staleness %1, max %2</b>").arg(fixed(*meanS, 1)).arg(qint64(*maxS));
        if (c.maxStaleness >= 0) {
            const qint64 bound = qint64(2 * c.maxStaleness + 1) * (c.workers - 1);
            const QString formula = QObject::tr("(2s+1)(N-1) = (2\u00d7%1+1)(%2-1) = %3").arg(c.maxStaleness).arg(c.workers).arg(bound);
            t += *maxS <= double(bound)
                     ? QObject::tr(", within the bound %1.").arg(formula)
                     : QObject::tr(": <b>over the bound %1</b>. The bound did not hold; that is a bug worth reporting.").arg(formula);
        } else {
            t += QObject::tr(". This run had no staleness bound (async.max_staleness is unbounded).");
        }
        p << t;
    }
    if (const auto stall = num(s, "stall_fraction")) {
        QString t = QObject::tr("The workers waited for %1 of their time, held back when they got too far ahead").arg(pct(*stall));
        if (const std::vector<double> d = perWorker(s, "delay_ms_per_worker", c.workers); c.jitter > 0 && !d.empty())
            t += QObject::tr("; the jitter added %1 of delay per worker").arg(ms(mean(d)));
        p << t + QLatin1Char('.');
    }
    const bool fair = unbounded && sameModel(c, unbounded->config) && unbounded->config.jitter == c.jitter &&
                      unbounded->config.maxStaleness < 0 && c.maxStaleness >= 0;
    if (fair) {
        const json &u = unbounded->summary;
        const auto uMean = num(u, "staleness_mean"), uMax = num(u, "staleness_max"), uStall = num(u, "stall_fraction");
        if (uMean && uMax && maxS) {
            QString t = QObject::tr("Without the bound, with the same jitter: mean %1, max %2").arg(fixed(*uMean, 1)).arg(qint64(*uMax));
            if (uStall)
                t += QObject::tr(", waiting %1 of the time").arg(pct(*uStall));
            t += QStringLiteral(". ");
            t += *uMax > *maxS ? QObject::tr("<b>The bound cut the stalest update from %1 to %2 versions</b>").arg(qint64(*uMax)).arg(qint64(*maxS))
                               : QObject::tr("The bound made no difference to the stalest update here");
            const auto stall = num(s, "stall_fraction");
            t += uStall && stall && *stall > *uStall
                     ? QObject::tr(", and its price is waiting: %1 of the time against %2.").arg(pct(*stall), pct(*uStall))
                     : QStringLiteral(".");
            p << t;
        }
    } else if (straggler && num(straggler->summary, "staleness_max")) {
        p << QObject::tr("Step 3 reached max %1 without a bound, but under another load (one worker slowed instead "
                         "of random jitter for all), so it is not the same experiment: press “Run without the "
                         "bound” for a fair comparison.")
                 .arg(qint64(*num(straggler->summary, "staleness_max")));
    } else if (c.maxStaleness >= 0) {
        p << QObject::tr("Press “Run without the bound” to measure the same jitter without it.");
    }
    p << offCpuNote(s);
    return joined(p << missingNote(p));
}

QString checkpointingFigures(const LessonRun &run, const LessonRun *plain, const LessonRun *baseline)
{
    const json &s = run.summary;
    const RunConfig &c = run.config;
    QStringList p{statusNote(s), runLine(s)};
    const auto peak = num(s, "peak_activation_bytes");
    if (!c.checkpoint)
        p << QObject::tr("This run did not checkpoint: checkpointing is off in its configuration.");
    else if (peak)
        p << QObject::tr("<b>Peak activation memory %1 per worker</b>, with activations kept only every %2 layers "
                         "of %3.")
                 .arg(mib(*peak))
                 .arg(c.checkpointEvery)
                 .arg(int(c.layers.size()) - 1);
    const auto recompute = num(s, "recompute_ms"), wall = num(s, "wall_s");
    if (c.checkpoint && recompute && wall && *wall > 0)
        p << QObject::tr("The price: <b>recompute took %1, %2 of the workers' time</b> (%3 workers x %4).")
                 .arg(ms(*recompute), pct(*recompute / (1000.0 * *wall * c.workers)))
                 .arg(c.workers)
                 .arg(seconds(*wall));
    if (plain && sameModel(c, plain->config) && !plain->config.checkpoint) {
        const json &q = plain->summary;
        if (const auto plainPeak = num(q, "peak_activation_bytes"); plainPeak && peak && *plainPeak > 0) {
            p << (*peak < *plainPeak
                      ? QObject::tr("Without checkpointing the same model held <b>%1 per worker</b>: checkpointing "
                                    "kept %2 of it and saved %3.")
                            .arg(mib(*plainPeak), pct(*peak / *plainPeak), mib(*plainPeak - *peak))
                      : QObject::tr("Without checkpointing the same model held %1 per worker: checkpointing saved no "
                                    "memory here.")
                            .arg(mib(*plainPeak)));
        }
        if (const auto plainWall = num(q, "wall_s"); plainWall && wall && *plainWall > 0) {
            QString t = QObject::tr("The run without checkpointing took %1 against %2 with it").arg(seconds(*plainWall), seconds(*wall));
            if (*plainWall < *wall) {
                t += QObject::tr(" (%1 longer with checkpointing).").arg(pct(*wall / *plainWall - 1.0));
            } else {
                // Descheduling can outweigh the recompute: say so rather than claim the price.
                t += QObject::tr(": the recompute's cost does not show in the wall time on this machine");
                const auto dPlain = num(q, "descheduled_fraction"), dThis = num(s, "descheduled_fraction");
                if (dPlain && dThis)
                    t += QObject::tr(", where the OS kept the workers off the CPU for %1 of their time without "
                                     "checkpointing and %2 with it")
                             .arg(pct(*dPlain), pct(*dThis));
                t += QLatin1Char('.');
            }
            p << t;
        }
    } else if (plain && plain->config.checkpoint) {
        p << QObject::tr("The second run checkpointed too: no comparison.");
    } else if (plain) {
        p << QObject::tr("The run without checkpointing trained another model or batch (%1, batch %2): no comparison.")
                 .arg(layersText(plain->config.layers))
                 .arg(plain->config.batch);
    } else {
        p << QObject::tr("Press “Run without checkpointing” to measure the same model with every activation kept.");
    }
    if (baseline) {
        const auto basePeak = num(baseline->summary, "peak_activation_bytes");
        if (basePeak && sameModel(c, baseline->config))
            p << QObject::tr("Step 1 trained the same model without checkpointing and held %1 per worker.").arg(mib(*basePeak));
        else if (basePeak)
            p << QObject::tr("Step 1's %1 per worker is no comparison: it trained another model (%2, batch %3 per "
                             "worker, %4 workers) than this one (%5, batch %6, %7 workers).")
                     .arg(mib(*basePeak), layersText(baseline->config.layers))
                     .arg(baseline->config.batch)
                     .arg(baseline->config.workers)
                     .arg(layersText(c.layers))
                     .arg(c.batch)
                     .arg(c.workers);
    }
    p << offCpuNote(s);
    return joined(p << missingNote(p));
}

QString comparisonFigures(const std::vector<std::pair<QString, const LessonRun *>> &runs)
{
    QStringList lines;
    double worstOffCpu = 0;
    for (const auto &[label, run] : runs) {
        if (!run)
            continue;
        const json &s = run->summary;
        QStringList f;
        if (const auto r = num(s, "samples_per_s"))
            f << QObject::tr("%1 samples/s").arg(rate(*r));
        if (const auto v = num(s, "stall_fraction"))
            f << QObject::tr("waiting %1").arg(pct(*v));
        if (const auto v = num(s, "descheduled_fraction")) {
            f << QObject::tr("off CPU %1").arg(pct(*v));
            worstOffCpu = std::max(worstOffCpu, *v);
        }
        if (run->config.async())
            if (const auto m = num(s, "staleness_mean"), x = num(s, "staleness_max"); m && x)
                f << QObject::tr("staleness mean %1, max %2").arg(fixed(*m, 1)).arg(qint64(*x));
        if (const auto v = num(s, "peak_activation_bytes"))
            f << QObject::tr("peak activations %1").arg(mib(*v));
        if (run->config.checkpoint)
            if (const auto v = num(s, "recompute_ms"))
                f << QObject::tr("recompute %1").arg(ms(*v));
        lines << QStringLiteral("<b>%1</b>: %2").arg(label.toHtmlEscaped(), f.join(QStringLiteral(", ")));
    }
    if (lines.isEmpty())
        return {};
    QStringList p{lines.join(QStringLiteral("<br>"))};
    auto rateOf = [&](std::size_t i) -> std::optional<double> {
        return i < runs.size() && runs[i].second ? num(runs[i].second->summary, "samples_per_s") : std::nullopt;
    };
    auto configOf = [&](std::size_t i) -> const RunConfig & { return runs[i].second->config; };
    if (const auto base = rateOf(Baseline), straggler = rateOf(StragglerSync);
        base && straggler && *base > 0 && sameModel(configOf(Baseline), configOf(StragglerSync)))
        p << QObject::tr("One straggler cut sync throughput to %1 of the baseline's.").arg(pct(*straggler / *base));
    if (const auto sync = rateOf(StragglerSync), async = rateOf(StragglerAsync);
        sync && async && *sync > 0 && sameModel(configOf(StragglerSync), configOf(StragglerAsync)))
        p << (*async / *sync >= 1.1 ? QObject::tr("With the same straggler, async ran %1 as fast as sync.").arg(times(*async / *sync))
                                    : QObject::tr("With the same straggler, async was no faster than sync on this machine."));
    if (worstOffCpu >= 0.1)
        p << QObject::tr("Workers were off the CPU for up to %1 of their time in these runs: on this machine the "
                         "throughputs and waits say as much about the free cores as about the modes.")
                 .arg(pct(worstOffCpu));
    return joined(p);
}

QString backupWorkersFigures(const LessonRun &run, const LessonRun *syncStraggler)
{
    const json &s = run.summary;
    const RunConfig &c = run.config;
    QStringList p{statusNote(s), runLine(s)};
    if (c.backupWorkers <= 0 || c.async()) {
        p << QObject::tr("This run had no backup worker (sync.backup_workers is 0 in its configuration): "
                         "every step waited for all %1 workers.").arg(c.workers);
        return joined(p << missingNote(p));
    }
    const bool fair = syncStraggler && syncStraggler->config.backupWorkers == 0 &&
                      sameModel(c, syncStraggler->config) && syncStraggler->config.workers == c.workers;
    if (const auto stall = num(s, "stall_fraction")) {
        QString t = QObject::tr("The workers waited for <b>%1 of their time</b>").arg(pct(*stall));
        if (const auto b = fair ? num(syncStraggler->summary, "stall_fraction") : std::nullopt)
            t += QObject::tr(", against %1 with the same straggler and no backup worker (step 2)").arg(pct(*b));
        p << t + QLatin1Char('.');
    }
    const std::vector<double> dropped = perWorker(s, "dropped_per_worker", c.workers);
    const auto steps = num(s, "steps_completed");
    if (!dropped.empty() && steps && *steps >= 1) {
        const auto most = std::size_t(std::max_element(dropped.begin(), dropped.end()) - dropped.begin());
        double total = 0;
        for (double d : dropped)
            total += d;
        p << QObject::tr("<b>Worker %1's gradient was dropped in %2 of %3 steps</b>; %4 dropped in all, "
                         "%5 per step as b = %6 allows.")
                 .arg(most)
                 .arg(QLocale().toString(qRound64(dropped[most])))
                 .arg(QLocale().toString(qRound64(*steps)))
                 .arg(QLocale().toString(qRound64(total)))
                 .arg(fixed(total / *steps, 2))
                 .arg(c.backupWorkers);
    }
    if (const auto r = num(s, "samples_per_s"), b = fair ? num(syncStraggler->summary, "samples_per_s") : std::nullopt;
        r && b && *b > 0)
        p << QObject::tr("It learned from %1 samples/s against step 2's %2, counting only the gradients "
                         "used: each step averages %3 batches of %4, not %5.")
                 .arg(rate(*r), rate(*b))
                 .arg(c.workers - c.backupWorkers)
                 .arg(c.batch)
                 .arg(c.workers);
    else if (syncStraggler && !fair)
        p << QObject::tr("Step 2's run trained another model or worker count: no comparison.");
    return joined(p << offCpuNote(s) << missingNote(p));
}

QString inputBoundFigures(const LessonRun &run, const LessonRun *noPrefetch)
{
    const json &s = run.summary;
    const RunConfig &c = run.config;
    QStringList p{statusNote(s), runLine(s)};
    if (c.costUs <= 0)
        p << QObject::tr("This run prepared its samples at no extra cost (data.cost_us is 0): it was not made "
                         "input-bound.");
    else
        p << QObject::tr("Each batch of %1 cost %2 of preparation (%3 µs a sample) on top of the copying.")
                 .arg(c.batch)
                 .arg(ms(c.costUs * c.batch / 1000.0))
                 .arg(fixed(c.costUs, c.costUs < 10 ? 1 : 0));
    const auto wait = num(s, "input_wait_fraction");
    if (c.prefetch > 0 && wait)
        p << (*wait >= 0.05
                  ? QObject::tr("With %1 batches prefetched, <b>the steps still waited for their data %2 of the time</b>: "
                                "the pipeline makes batches more slowly than the worker uses them, so the run is "
                                "input-bound.")
                        .arg(c.prefetch)
                        .arg(pct(*wait))
                  : QObject::tr("With %1 batches prefetched the steps waited for their data only %2 of the time: the "
                                "pipeline kept up, so this run was not input-bound.")
                        .arg(c.prefetch)
                        .arg(pct(*wait)));
    else if (c.prefetch == 0)
        p << QObject::tr("This run did not prefetch (data.prefetch is 0): each step prepared its own batch inside "
                         "its data span.");
    const bool fair = noPrefetch && noPrefetch->config.prefetch == 0 && c.prefetch > 0 &&
                      sameModel(c, noPrefetch->config) && noPrefetch->config.workers == c.workers &&
                      noPrefetch->config.costUs == c.costUs;
    if (const auto r = num(s, "samples_per_s"), b = fair ? num(noPrefetch->summary, "samples_per_s") : std::nullopt;
        r && b && *b > 0) {
        p << (*r > *b
                  ? QObject::tr("<b>Prefetching gave %1 samples/s against %2 without it</b> (%3x): preparation "
                                "overlapped compute, so a step cost the larger of the two rather than their sum.")
                        .arg(rate(*r), rate(*b), fixed(*r / *b, 2))
                  : QObject::tr("Prefetching gave %1 samples/s against %2 without it: no gain on this machine, where "
                                "the pipeline had no free core to run beside the worker.")
                        .arg(rate(*r), rate(*b)));
    } else if (noPrefetch && !fair) {
        p << QObject::tr("The second run differs in more than data.prefetch: no comparison.");
    }
    return joined(p << offCpuNote(s) << missingNote(p));
}

QString batchNormFigures(const LessonRun &run, const LessonRun *syncBn)
{
    const json &s = run.summary;
    const RunConfig &c = run.config;
    QStringList p{statusNote(s), runLine(s)};
    if (c.batchnorm == "none") {
        p << QObject::tr("This run had no batch norm (model.batchnorm is none in its configuration).");
        return joined(p << missingNote(p));
    }
    const auto acc = num(s, "final_eval_accuracy"), loss = num(s, "final_eval_loss");
    if (loss)
        p << QObject::tr("With <b>%1</b> batch norm (%2 workers of %3 samples) the held-out loss ended at <b>%4</b>%5.")
                 .arg(QString::fromStdString(c.batchnorm))
                 .arg(c.workers)
                 .arg(c.batch)
                 .arg(fixed(*loss, 4))
                 .arg(acc && c.classification() ? QObject::tr(", accuracy %1").arg(pct(*acc)) : QString());
    if (c.batchnorm == "local")
        p << QObject::tr("Each worker normalised by the statistics of its own %1 samples, not of the step's %2: "
                         "the Batch norm chart shows how far each worker's running statistics stray from the "
                         "mean of all of them.")
                 .arg(c.batch)
                 .arg(c.batch * c.workers);
    else
        p << QObject::tr("Every worker normalised by the statistics of all %1 samples of the step, so every "
                         "replica holds the same running statistics (the Batch norm chart lies on 0).")
                 .arg(c.batch * c.workers);
    const bool fair = syncBn && syncBn->config.batchnorm == "sync" && c.batchnorm == "local" &&
                      sameModel(c, syncBn->config) && syncBn->config.workers == c.workers &&
                      syncBn->config.batch == c.batch;
    if (fair) {
        const json &q = syncBn->summary;
        if (const auto qLoss = num(q, "final_eval_loss"); qLoss && loss)
            p << QObject::tr("With <b>sync</b> batch norm the same run ended at a held-out loss of <b>%1</b>%2, "
                             "against %3 with local statistics.")
                     .arg(fixed(*qLoss, 4))
                     .arg([&] {
                         const auto qAcc = num(q, "final_eval_accuracy");
                         return qAcc && c.classification() ? QObject::tr(" (accuracy %1)").arg(pct(*qAcc)) : QString();
                     }())
                     .arg(fixed(*loss, 4));
        if (const auto r = num(s, "samples_per_s"), b = num(q, "samples_per_s"); r && b && *r > 0)
            p << QObject::tr("The price of sync: all workers meet inside every forward and backward pass; it ran at "
                             "%1 samples/s against %2 with local statistics (%3).")
                     .arg(rate(*b), rate(*r), pct(*b / *r));
    } else if (syncBn) {
        p << QObject::tr("The second run differs in more than model.batchnorm: no comparison.");
    }
    return joined(p << offCpuNote(s) << missingNote(p));
}

const std::vector<LessonStep> &lessonSteps()
{
    static const std::vector<LessonStep> steps = [] {
        std::vector<LessonStep> s;
        s.push_back({QStringLiteral("default"), QObject::tr("Sync baseline"), QObject::tr("Sync baseline"),
                     QObject::tr("Four workers of the same speed train the same MLP, each on its own share of the "
                                 "batch; after every step they meet at a barrier and average their gradients. On the "
                                 "timeline, look at the hatched <b>wait</b> spans at the end of each step: between "
                                 "equal workers they should be thin. Note the <b>samples/s</b> and the Stalls chart: "
                                 "the next steps compare with them."),
                     {}, {}, json::object()});
        s.push_back({QStringLiteral("straggler-sync"), QObject::tr("Straggler in sync"), QObject::tr("One straggler in sync"),
                     QObject::tr("The same run, but worker 3 is three times slower: a <b>delay</b> span follows each "
                                 "of its steps. Look at the other workers' <b>wait</b> spans growing to the length of "
                                 "that delay, and at samples/s falling to the straggler's pace."),
                     {}, {}, json::object()});
        s.push_back({QStringLiteral("straggler-async"), QObject::tr("Straggler in async"), QObject::tr("The same straggler in async"),
                     QObject::tr("The same four workers and the same slow worker 3, now asynchronous: each pulls the "
                                 "parameters from a server, computes, pushes its gradient and goes on. Look for the "
                                 "waits to vanish and samples/s to recover, and on the <b>Staleness</b> chart at how "
                                 "old the gradients are when they arrive: worker 3's should be the oldest."),
                     {}, {}, json::object()});
        s.push_back({QStringLiteral("bounded-staleness"), QObject::tr("Staleness bound"), QObject::tr("A staleness bound"),
                     QObject::tr("Async again, every worker's steps jittered at random, under a bound s: no worker "
                                 "starts a step more than s steps ahead of the slowest. On the <b>Staleness</b> chart "
                                 "no update should cross the line at (2s+1)(N-1): a worker that starts a step finds "
                                 "every other at most s steps behind, and while it computes they may run up to s+1 "
                                 "steps ahead of it, 2s+1 updates each. The waits come back, but only when "
                                 "a worker gets too far ahead."),
                     QObject::tr("Run without the bound"), QStringLiteral("bounded-staleness unbounded"), json{{"async.max_staleness", -1}}});
        s.push_back({QStringLiteral("checkpointing"), QObject::tr("Checkpointing"), QObject::tr("Checkpointing: memory against recompute"),
                     QObject::tr("A deeper MLP trained in sync with gradient checkpointing: forward keeps activations "
                                 "only at every few layers, backward recomputes each segment. Look at the peak on the "
                                 "<b>Memory</b> chart, and on the timeline at the <b>recompute</b> spans inside every "
                                 "backward pass: the price. This model is not step 1's, so compare it with itself: "
                                 "run it again without checkpointing."),
                     QObject::tr("Run without checkpointing"), QStringLiteral("checkpointing off"), json{{"mode", "sync"}, {"model.checkpoint", false}}});
        s.push_back({QStringLiteral("backup-workers"), QObject::tr("Backup workers"), QObject::tr("Backup workers: sync without waiting for the last"),
                     QObject::tr("Step 2's straggler again, in sync, with one backup worker: each step applies the "
                                 "mean of the first three gradients to arrive and drops the last. On the timeline, "
                                 "look for worker 3's <b>dropped</b> spans (its late gradient, not used) and for the "
                                 "others' <b>wait</b> spans shrinking; on the Stalls chart, the share of time lost "
                                 "against step 2's. The price: each step learns from three batches, not four."),
                     {}, {}, json::object()});
        s.push_back({QStringLiteral("input-bound"), QObject::tr("Input-bound"), QObject::tr("Input-bound: waiting for data"),
                     QObject::tr("One worker whose batches cost more to prepare than to compute, prepared two ahead "
                                 "in the background (data.prefetch = 2). On the timeline, look at the thin prefetch "
                                 "lane under the worker, busy without a break, and at the dotted <b>input wait</b> at "
                                 "the start of each step: the batch was not ready yet. No barrier is involved; the data "
                                 "is the bottleneck. Then run it without prefetching and compare samples/s."),
                     QObject::tr("Run without prefetch"), QStringLiteral("input-bound no prefetch"), json{{"data.prefetch", 0}}});
        s.push_back({QStringLiteral("batchnorm-local-vs-sync"), QObject::tr("Batch norm"), QObject::tr("Batch norm: each worker's statistics or the step's"),
                     QObject::tr("Four workers of 8 samples with a batch norm layer after each hidden layer, each "
                                 "normalising by its own 8 samples (local). On the <b>Batch norm</b> chart, look at "
                                 "how far each worker's running statistics drift from the others'. Then run it with "
                                 "sync batch norm: the workers all-reduce their statistics inside every forward and "
                                 "backward pass (short <b>reduce</b> spans within them), which makes them one batch "
                                 "of 32, and compare the held-out loss and samples/s."),
                     QObject::tr("Run with sync batch norm"), QStringLiteral("batchnorm-local-vs-sync sync"),
                     json{{"model.batchnorm", "sync"}}});
        s.push_back({QString(), QObject::tr("Compare the runs"), QObject::tr("Compare the runs"),
                     QObject::tr("All the runs side by side (Run &gt; Compare Runs): samples/s, the share of time "
                                 "spent waiting and off the CPU, staleness, memory and recompute, ready to copy as CSV "
                                 "or Markdown."),
                     {}, {}, json::object()});
        return s;
    }();
    return steps;
}

QString lessonParagraphs(const QStringList &paragraphs) { return joined(paragraphs); }
QString lessonRunLine(const nlohmann::json &summary) { return runLine(summary); }

} // namespace syncopate
