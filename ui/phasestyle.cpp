#include "phasestyle.h"

#include <QHash>
#include <qcustomplot.h>

#include <array>

namespace syncopate {

const PhaseStyle &phaseStyle(Phase p)
{
    static const std::array<PhaseStyle, std::size_t(Phase::Count)> styles = [] {
        std::array<PhaseStyle, std::size_t(Phase::Count)> s;
        auto set = [&](Phase p, QColor c, const char *label, const char *tip,
                       Qt::BrushStyle brush = Qt::SolidPattern) {
            PhaseStyle &st = s[std::size_t(p)];
            st.color = c;
            st.brush = QBrush(c, brush);
            st.outline = QPen(c.darker(160), 0);
            st.label = QString::fromLatin1(label);
            st.tooltip = QString::fromLatin1(tip);
        };
        set(Phase::Data, QColor(0xE6, 0x9F, 0x00), "data",
            "Assembling the batch. On the data lane: prefetch in the background.");
        set(Phase::Forward, QColor(0x56, 0xB4, 0xE9), "forward", "Forward pass and loss.");
        set(Phase::Backward, QColor(0x00, 0x72, 0xB2), "backward", "Backward pass: gradients.");
        set(Phase::Recompute, QColor(0xCC, 0x79, 0xA7), "recompute",
            "Checkpointing: recomputing a segment's activations before its backward pass.");
        set(Phase::Wait, QColor(0x80, 0x80, 0x80), "wait",
            "Stalled: time that computes nothing. Sync: at the barrier, waiting for the slowest "
            "worker. Async: for the staleness bound or the parameter server's lock.",
            Qt::BDiagPattern);
        set(Phase::Reduce, QColor(0x00, 0x9E, 0x73), "reduce",
            "Averaging this worker's slice of all workers' gradients.");
        set(Phase::Push, QColor(0x00, 0x9E, 0x73), "push",
            "Async: sending the gradient to the server, which applies it at once.");
        set(Phase::Pull, QColor(0xF0, 0xE4, 0x42), "pull",
            "Async: copying the server's parameters and their version.");
        // Apply shares pull's yellow: apply is sync only, pull async only, and vermillion is
        // kept for the outline of injected delays.
        set(Phase::Apply, QColor(0xF0, 0xE4, 0x42), "apply",
            "Optimizer update. Sync workers of one process on the CPU share one copy of the "
            "parameters and each updates its own slice, the one it averaged, before the barrier; "
            "elsewhere each replica applies the whole mean after it.");
        set(Phase::Delay, QColor(0xFF, 0xFF, 0xFF), "delay",
            "Injected straggler delay (workers_slowdown, jitter): shown, never hidden in compute.");
        set(Phase::Eval, QColor(0x33, 0x33, 0x33), "eval", "Evaluating held-out data.");
        set(Phase::Pause, QColor(0xDD, 0xDD, 0xDD), "pause", "Paused by the user.",
            Qt::DiagCrossPattern);
        set(Phase::Copy, QColor(0xA6, 0x76, 0x1D), "copy",
            "Imported trace: a memory copy or set on the GPU (host to device, device to host, "
            "device to device).");
        set(Phase::Compute, QColor(0x9A, 0xB8, 0xD6), "compute",
            "Imported trace: a GPU kernel or CPU operator outside any forward, backward or "
            "optimizer annotation.");
        set(Phase::Dropped, QColor(0xA5, 0x1C, 0x30), "dropped",
            "Backup workers: this gradient arrived after the first N - b of the step and was not "
            "used; the worker then applied the step's mean and went on from the fresh parameters.",
            Qt::DiagCrossPattern);
        set(Phase::InputWait, QColor(0xE6, 0x9F, 0x00), "input wait",
            "The step's batch was not ready: the worker waited for the input pipeline (prefetch "
            "too shallow, or preparing a batch costs more than computing it: an input-bound run). "
            "Not a barrier stall; input_wait_ms in metrics.csv.",
            Qt::Dense5Pattern);
        // Delay is outlined so that an empty box reads as time added from outside.
        s[std::size_t(Phase::Delay)].outline = QPen(QColor(0xD5, 0x5E, 0x00), 1.5);
        s[std::size_t(Phase::Wait)].outline = QPen(QColor(0x60, 0x60, 0x60), 0);
        return s;
    }();
    return styles[std::size_t(p < Phase::Count ? p : Phase::Wait)];
}

const PhaseStyle &offCpuStyle()
{
    static const PhaseStyle style = [] {
        PhaseStyle st;
        st.color = QColor(0x1A, 0x1A, 0x1A);
        st.brush = QBrush(st.color, Qt::CrossPattern);
        st.outline = QPen(st.color, 0);
        st.label = QStringLiteral("off CPU");
        st.tooltip = QStringLiteral(
            "The worker could run but the OS did not run it (more workers than free cores, or other "
            "programs): measured with the thread's CPU clock inside compute spans, drawn at their end; "
            "at a barrier, the time after it opened until the worker ran again.");
        return st;
    }();
    return style;
}

Qt::PenStyle seriesStyle(int index)
{
    static const Qt::PenStyle styles[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::DashDotLine};
    return styles[(index / 8) % 4];
}

int seriesShape(int index)
{
    static const int shapes[] = {QCPScatterStyle::ssDisc, QCPScatterStyle::ssSquare,
                                 QCPScatterStyle::ssTriangle, QCPScatterStyle::ssDiamond};
    return shapes[(index / 8) % 4];
}

QColor seriesColor(int index)
{
    static const QColor colors[] = {QColor(0x00, 0x72, 0xB2), QColor(0xD5, 0x5E, 0x00),
                                    QColor(0x00, 0x9E, 0x73), QColor(0xCC, 0x79, 0xA7),
                                    QColor(0xE6, 0x9F, 0x00), QColor(0x56, 0xB4, 0xE9),
                                    QColor(0x00, 0x00, 0x00), QColor(0x99, 0x99, 0x33)};
    return colors[(index % 8 + 8) % 8];
}

QColor runColor(int index)
{
    static const QColor colors[] = {QColor(0x6A, 0x3D, 0x9A), QColor(0x8C, 0x51, 0x0A),
                                    QColor(0xB2, 0x18, 0x2B), QColor(0x1B, 0x1B, 0x7A),
                                    QColor(0x4D, 0x92, 0x21)};
    return colors[(index % 5 + 5) % 5];
}

Qt::PenStyle runStyle(int index)
{
    static const Qt::PenStyle styles[] = {Qt::SolidLine, Qt::DashLine, Qt::DashDotLine};
    return styles[(index / 5) % 3];
}

QString metricHelp(const QString &metric)
{
    static const QHash<QString, QString> help = {
        {QStringLiteral("loss"),
         QStringLiteral("Training loss of each worker's batch at each step (mean over the batch). "
                        "Held-out loss, when evaluated, is drawn as dots. In async mode each "
                        "worker's loss is of its own batch on its own, stale copy of the "
                        "parameters, placed at the server version its update became; the grey "
                        "band spans the lowest to the highest of them. The dots score one "
                        "consistent snapshot of the server's parameters: that is the model's "
                        "loss, the band how much the workers' own figures disagree with it.")},
        {QStringLiteral("stalls"),
         QStringLiteral("Stall: time a worker spent waiting instead of computing, per step. In "
                        "sync mode every worker waits at the barrier for the slowest at every "
                        "step; in async mode a worker waits only for the parameter server's lock "
                        "and, under a staleness bound, for the slowest worker. The dashed line is "
                        "the share of all worker time lost. Hatched: the part spent waiting for "
                        "a worker the OS was not running (more workers than free cores), with its "
                        "share as the dotted line: time lost to the machine, not to the mode.")},
        {QStringLiteral("off cpu"),
         QStringLiteral("Off CPU: time a worker could run but the OS did not run it. Compute "
                        "spans read the thread's CPU clock beside the wall clock; a barrier wait "
                        "knows when the barrier opened and when the worker ran again. Hatched on "
                        "the timeline; descheduled_ms in metrics.csv.")},
        {QStringLiteral("staleness"),
         QStringLiteral("Staleness of an async update: how many updates the server applied "
                        "between the worker pulling the parameters and pushing its gradient. "
                        "0 is what sync training always has. A staleness bound s limits how far a "
                        "worker runs ahead of the slowest, so an update can be up to (2s + 1)(N - 1) "
                        "versions old (the dashed line): while a worker computes one step, each other "
                        "worker may go from s steps behind it to s + 1 ahead.")},
        {QStringLiteral("memory"),
         QStringLiteral("Peak activation bytes a worker's model held during each step: the "
                        "buffers really held, so checkpointing's saving is measured.")},
        {QStringLiteral("batchnorm"),
         QStringLiteral("Batch norm: how far each worker's running statistics (the mean and "
                        "variance evaluation normalises by) are from the mean of all workers' "
                        "(async: from the server's copy), as the L2 norm of the difference over "
                        "the L2 norm of the mean. Local batch norm lets each worker's drift with "
                        "its own shard; sync batch norm keeps every replica's identical (0).")},
        {QStringLiteral("throughput"),
         QStringLiteral("Training samples processed per second by all workers together, over "
                        "half-second windows.")},
        {QStringLiteral("timeline"),
         QStringLiteral("One row per worker: every phase it went through, in time. Wheel: zoom "
                        "around the cursor. Drag: pan. Shift+drag: summarise a range. "
                        "Double-click: fit.")},
    };
    return help.value(metric);
}

} // namespace syncopate
