// The sync strategy: every worker computes its gradient on its own shard, waits at the barrier,
// the gradients are averaged in worker order (bit for bit the same whatever the timing, and
// the same on threads and on MPI ranks), and every replica applies the same update.
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
        m_group = e.m_comm->syncGroup(devices, grads, std::size_t(e.parameterCount()),
                                      e.m_config.workers, e.m_clock);
        m_evalShards.resize(e.m_workers.size());
    }

    void runWorker(WorkerState &w) override
    {
        for (std::int64_t step = 0; step < m_engine.m_config.steps && !m_engine.stopping(); ++step)
            this->step(w, step);
    }

    void cancel() override { m_group->cancel(); }

    std::vector<float> finalParams() const override
    {
        return m_engine.m_workers.front()->model->paramsToHost();
    }

    std::string reduceAlgorithm() const override { return m_group->algorithm(); }

private:
    // Waits at the barrier from t0 and records it; t0 becomes the span's end.
    bool barrierWait(WorkerState &w, std::uint32_t step, std::int64_t &t0)
    {
        // The wait span's value: how long after the barrier opened this worker resumed, time
        // it could have run but the OS did not run it.
        std::int64_t released = 0;
        const bool open = m_group->arrive(w.local, t0, &released);
        const std::int64_t t1 = w.rec.now();
        w.rec.span(Phase::Wait, step, t0, t1,
                   open ? double(t1 - std::clamp(released, t0, t1)) : 0.0);
        t0 = t1;
        return open;
    }

    void step(WorkerState &w, std::int64_t step)
    {
        Engine &e = m_engine;
        const auto s32 = std::uint32_t(step);
        e.computeStep(w, step);
        if (e.stopping())
            return;
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

        e.enter(w, Phase::Wait, step);
        if (!barrierWait(w, s32, t0))
            return;

        e.enter(w, Phase::Apply, step);
        {
            ScopedSpan apply(&w.rec, Phase::Apply, s32, t0);
            w.optimizer->step(w.model->params(), m_group->finish(w.local));
        }

        const std::int64_t done = step + 1;
        if (w.local == 0)
            e.m_progress = done;
        // The final evaluation too is shared: every worker its slice of the held-out set, as
        // in the periodic ones (one worker evaluating all of it showed as one long span).
        if (e.m_evalModel &&
            ((e.m_config.evalEvery > 0 && done % e.m_config.evalEvery == 0) || done == e.m_config.steps))
            evaluateShard(w, done);
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
            e.m_eval->y.empty() ? nullptr : e.m_eval->y.data() + lo * outW, hi - lo);
        w.rec.span(Phase::Eval, std::uint32_t(step), t0, w.rec.now(), double(step));
        std::lock_guard lock(m_evalMutex);
        m_evalShards[std::size_t(w.local)] = part;
        if (++m_evalShardsDone < int(m_evalShards.size()))
            return;
        // No worker starts the next round before this one ends: the barriers of the steps
        // between wait for the worker doing this.
        m_evalShardsDone = 0;
        if (!e.m_comm->gatherEval(m_evalShards, m_allShards) || !e.m_comm->root())
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
        e.recordEval(w, step, all);
    }

    std::unique_ptr<SyncGroup> m_group;
    std::mutex m_evalMutex;
    std::vector<EvalResult> m_evalShards; // this process's, in local order
    std::vector<EvalResult> m_allShards;  // rank 0: every worker's, in worker order
    int m_evalShardsDone = 0;             // guarded by m_evalMutex
};

std::unique_ptr<Strategy> makeSyncStrategy(Engine &engine)
{
    return std::make_unique<SyncStrategy>(engine);
}

} // namespace syncopate
