// The sync strategy: every worker computes its gradient on its own shard, waits at the barrier,
// the gradients are averaged in worker order (bit for bit the same whatever the timing, and
// the same on threads and on MPI ranks), and every replica applies the same update. With backup
// workers (sync.backup_workers = b) a step takes the first N - b gradients to arrive and the
// late workers catch up on the means they missed (BackupSyncGroup in communicator.h).
#include "batchnormsync.h"
#include "communicator.h"
#include "engine.h"
#include "strategy.h"
#include "worker.h"

#include <algorithm>

namespace syncopate {

class SyncStrategy final : public Strategy {
public:
    explicit SyncStrategy(Engine &e) : Strategy(e)
    {
        std::vector<Device *> devices;
        std::vector<float *> grads;
        for (const auto &w : e.m_workers) {
            devices.push_back(w->device.get());
            grads.push_back(w->model->grads());
        }
        if (e.m_config.backupWorkers > 0)
            m_backup = e.m_comm->backupSyncGroup(devices, grads, std::size_t(e.parameterCount()),
                                                 e.m_config.workers, e.m_config.backupWorkers,
                                                 e.m_clock, &e.m_syncScript);
        else
            m_group = e.m_comm->syncGroup(devices, grads, std::size_t(e.parameterCount()),
                                          e.m_config.workers, e.m_clock);
        // The optimizer's state covers what the worker updates: its slice of the one copy of
        // the parameters where the workers share it, else its whole replica.
        const auto kind = Optimizer::parseKind(e.m_config.optimizer);
        Model &owner = *e.m_workers.front()->model;
        for (const auto &w : e.m_workers) {
            std::size_t count = std::size_t(e.parameterCount());
            if (m_group)
                if (const std::optional<ParamSlice> slice = m_group->ownedSlice(w->local)) {
                    m_slices.push_back(*slice);
                    count = slice->end - slice->begin;
                    if (w->model.get() != &owner)
                        w->model->shareParams(owner);
                }
            w->optimizer = std::make_unique<Optimizer>(*w->device, kind, count, float(e.m_config.lr),
                                                       float(e.m_config.momentum));
        }
        m_evals.resize(1);
        m_evals.front().shards.resize(e.m_workers.size());
        // Batch norm: every replica's running statistics after each step, for the divergence
        // chart and so that every shard of an evaluation uses the same ones (worker 0's, as
        // DistributedDataParallel broadcasts rank 0's buffers). Backup workers skip steps, so
        // there each shard keeps its own worker's.
        if (e.m_config.batchnorm != "none" && e.m_config.backupWorkers == 0)
            m_board = std::make_unique<RunningStatsBoard>(int(e.m_workers.size()),
                                                          e.m_workers.front()->model->runningStatsCount());
    }

    void runWorker(WorkerState &w) override
    {
        if (m_backup) {
            runWithBackups(w);
            return;
        }
        for (std::int64_t step = 0; step < m_engine.m_config.steps && !m_engine.stopping(); ++step)
            this->step(w, step);
    }

    void cancel() override
    {
        if (m_backup)
            m_backup->cancel();
        else
            m_group->cancel();
    }

    std::vector<float> finalParams() const override
    {
        return m_engine.m_workers.front()->model->paramsToHost();
    }

    std::string reduceAlgorithm() const override
    {
        if (m_backup)
            return m_backup->algorithm();
        return m_slices.empty() ? m_group->algorithm() : m_group->algorithm() + ", sharded update";
    }

private:
    // Waits at the barrier from t0 and records it; t0 becomes the span's end.
    bool barrierWait(WorkerState &w, std::uint32_t step, std::int64_t &t0)
    {
        std::int64_t released = 0;
        const bool open = m_group->arrive(w.local, t0, &released);
        recordWait(w, Phase::Wait, step, t0, open, released);
        return open;
    }

    // A wait from t0 to now, t0 becoming its end. A Wait span's value: how long after the
    // worker could go on (released, when open) it ran again, time the OS did not run it.
    static void recordWait(WorkerState &w, Phase p, std::uint32_t step, std::int64_t &t0, bool open,
                           std::int64_t released)
    {
        const std::int64_t t1 = w.rec.now();
        w.rec.span(p, step, t0, t1, open && p == Phase::Wait ? double(t1 - std::clamp(released, t0, t1)) : 0.0);
        t0 = t1;
    }

    void step(WorkerState &w, std::int64_t step)
    {
        Engine &e = m_engine;
        const auto s32 = std::uint32_t(step);
        e.computeStep(w, step);
        if (e.stopping())
            return;
        if (m_board) // read by the others from the barrier on, until they arrive at the next
            m_board->publish(w.local, step, *w.model);
        // From here the phases follow each other without a gap: each starts where the last ended.
        e.enter(w, Phase::Reduce, step);
        std::int64_t t0 = w.rec.now();
        if (const std::size_t staged = m_group->prepare(w.local))
            t0 = w.rec.spanToNow(Phase::Reduce, s32, t0, double(staged));
        e.enter(w, Phase::Wait, step);
        if (!barrierWait(w, s32, t0))
            return;

        // Shared memory: each worker averages one slice, summing the replicas in worker order.
        // NCCL: one all-reduce per worker. MPI: the rank's first worker exchanges for all.
        e.enter(w, Phase::Reduce, step);
        const std::size_t moved = m_group->reduce(w.local);
        t0 = w.rec.spanToNow(Phase::Reduce, s32, t0, double(moved));

        if (!m_slices.empty()) {
            // Its slice of the one copy; the others read it after the barrier.
            e.enter(w, Phase::Apply, step);
            {
                const ParamSlice &slice = m_slices[std::size_t(w.local)];
                ScopedSpan apply(&w.rec, Phase::Apply, s32, t0);
                w.optimizer->step(w.model->params() + slice.begin,
                                  m_group->finish(w.local) + slice.begin);
                w.device->synchronize();
            }
            t0 = w.rec.now();
            e.enter(w, Phase::Wait, step);
            if (!barrierWait(w, s32, t0))
                return;
        } else {
            e.enter(w, Phase::Wait, step);
            if (!barrierWait(w, s32, t0))
                return;
            e.enter(w, Phase::Apply, step);
            ScopedSpan apply(&w.rec, Phase::Apply, s32, t0);
            w.optimizer->step(w.model->params(), m_group->finish(w.local));
        }

        if (m_board)
            w.rec.counter(CounterId::BnDivergence, s32, m_board->divergence(w.local, step));
        const std::int64_t done = step + 1;
        if (w.local == 0)
            e.m_progress = done;
        evaluateIfDue(w, done);
    }

    void evaluateIfDue(WorkerState &w, std::int64_t done)
    {
        // The final evaluation too is shared: every worker its slice of the held-out set, as
        // in the periodic ones (one worker evaluating all of it showed as one long span).
        const RunConfig &c = m_engine.m_config;
        if (m_engine.m_evalModel && ((c.evalEvery > 0 && done % c.evalEvery == 0) || done == c.steps))
            evaluateShard(w, done);
    }

    // Backup workers: round r is step r. A worker computes a round, arrives; the round's first
    // N - b reduce and apply its mean, a later one records the drop, applies every round it
    // missed and computes next the round the others are filling.
    void runWithBackups(WorkerState &w)
    {
        Engine &e = m_engine;
        std::int64_t round = 0;
        while (round < e.m_config.steps && !e.stopping()) {
            const auto s32 = std::uint32_t(round);
            e.computeStep(w, round);
            if (e.stopping())
                return;
            e.enter(w, Phase::Wait, round);
            std::int64_t t0 = w.rec.now();
            std::int64_t released = 0;
            const BackupSyncGroup::Arrival a = m_backup->arrive(w.local, round, t0, &released);
            if (!a.open || a.contributes) {
                // As at the barrier: released is when the round filled.
                recordWait(w, Phase::Wait, s32, t0, a.open, released);
                if (!a.open)
                    return;
                e.enter(w, Phase::Reduce, round);
                const std::size_t moved = m_backup->reduce(w.local, round);
                t0 = w.rec.spanToNow(Phase::Reduce, s32, t0, double(moved));
                e.enter(w, Phase::Wait, round);
                if (!waitForMean(w, round, t0, Phase::Wait))
                    return;
                applyRound(w, round, t0);
            } else {
                // Dropped: from the arrival until the round's mean is there to apply.
                e.enter(w, Phase::Dropped, round);
                if (!waitForMean(w, round, t0, Phase::Dropped))
                    return;
                for (std::int64_t r = round; r < a.next; ++r) {
                    if (r > round) {
                        e.enter(w, Phase::Wait, r);
                        if (!waitForMean(w, r, t0, Phase::Wait, true))
                            return;
                    }
                    t0 = applyRound(w, r, t0);
                }
            }
            round = a.next;
        }
    }

    // Waits for the round's mean from t0 and records it (unless onlyIfWaited and the mean was
    // there already); t0 becomes the span's end. False when cancelled.
    bool waitForMean(WorkerState &w, std::int64_t round, std::int64_t &t0, Phase p,
                     bool onlyIfWaited = false)
    {
        std::int64_t ready = 0;
        const bool open = m_backup->waitMean(round, &ready);
        if (!onlyIfWaited || !open || ready > t0)
            recordWait(w, p, std::uint32_t(round), t0, open, ready);
        else
            t0 = w.rec.now();
        return open;
    }

    // Applies the round's mean to w's replica; returns when the apply span ended.
    std::int64_t applyRound(WorkerState &w, std::int64_t round, std::int64_t t0)
    {
        Engine &e = m_engine;
        e.enter(w, Phase::Apply, round);
        {
            ScopedSpan apply(&w.rec, Phase::Apply, std::uint32_t(round), t0);
            w.optimizer->step(w.model->params(), m_backup->mean(round));
        }
        // The slot may be refilled once every worker has applied it: the device must be done
        // reading it first.
        w.device->synchronize();
        const std::int64_t end = w.rec.now();
        m_backup->applied(w.local, round);
        const std::int64_t done = round + 1;
        // Steps completed: the furthest any replica has got (a late worker 0 lags).
        std::int64_t seen = e.m_progress.load();
        while (seen < done && !e.m_progress.compare_exchange_weak(seen, done)) {
        }
        evaluateIfDue(w, done);
        return end;
    }

    // Every worker evaluates its shard of the held-out set on its own replica (all hold the
    // same parameters after an update), as distributed evaluation does; the last of this
    // process to finish gathers the shards to rank 0, which records the result combined in
    // worker order. Nobody waits for anybody in one process.
    void evaluateShard(WorkerState &w, std::int64_t step)
    {
        Engine &e = m_engine;
        e.enter(w, Phase::Eval, step);
        const std::int64_t samples = e.m_eval->samples;
        const std::int64_t lo = samples * w.index / e.m_config.workers;
        const std::int64_t hi = samples * (w.index + 1) / e.m_config.workers;
        const int inW = e.m_eval->features;
        const int outW = e.m_eval->outputs;
        const std::int64_t t0 = w.rec.now();
        const EvalResult part = w.model->evaluate(
            e.m_eval->x.data() + lo * inW,
            e.m_eval->labels.empty() ? nullptr : e.m_eval->labels.data() + lo,
            e.m_eval->y.empty() ? nullptr : e.m_eval->y.data() + lo * outW, hi - lo,
            m_board ? m_board->stats(0, step - 1) : nullptr);
        w.rec.span(Phase::Eval, std::uint32_t(step), t0, w.rec.now(), double(step));
        std::lock_guard lock(m_evalMutex);
        PendingEval *pending = nullptr, *unused = nullptr;
        for (PendingEval &p : m_evals) {
            if (p.step == step)
                pending = &p;
            else if (p.step < 0 && !unused)
                unused = &p;
        }
        if (!pending) {
            if (!unused) {
                unused = &m_evals.emplace_back();
                unused->shards.resize(e.m_workers.size());
            }
            pending = unused;
            pending->step = step;
            pending->done = 0;
        }
        pending->shards[std::size_t(w.local)] = part;
        if (++pending->done < int(pending->shards.size()))
            return;
        pending->step = -1;
        if (!e.m_comm->gatherEval(pending->shards, m_allShards) || !e.m_comm->root())
            return;
        EvalResult all;
        for (const EvalResult &s : m_allShards) {
            all.samples += s.samples;
            all.lossSum += s.lossSum;
            all.correct += s.correct;
        }
        all.loss = all.samples ? all.lossSum / double(all.samples) : 0.0;
        all.accuracy = all.samples ? double(all.correct) / double(all.samples) : 0.0;
        std::lock_guard history(e.m_evalMutex);
        e.recordEval(w.rec, step, all);
    }

    // One evaluation's shards, this process's in local order. Plain sync has one open at a time
    // (the barriers between see to it); with backup workers a late worker may still owe its
    // shard of one while the others are at the next.
    struct PendingEval {
        std::int64_t step = -1; // -1: unused
        std::vector<EvalResult> shards;
        int done = 0;
    };

    std::unique_ptr<SyncGroup> m_group;          // plain sync
    // By local worker, where the workers update slices of one copy (SyncGroup::ownedSlice),
    // found once; empty where each keeps a replica.
    std::vector<ParamSlice> m_slices;
    std::unique_ptr<BackupSyncGroup> m_backup;   // sync.backup_workers > 0
    std::unique_ptr<RunningStatsBoard> m_board;  // batch norm without backup workers
    std::mutex m_evalMutex;
    std::vector<PendingEval> m_evals;    // guarded by m_evalMutex
    std::vector<EvalResult> m_allShards; // rank 0: every worker's, in worker order
};

std::unique_ptr<Strategy> makeSyncStrategy(Engine &engine)
{
    return std::make_unique<SyncStrategy>(engine);
}

} // namespace syncopate
