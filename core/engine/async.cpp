// The async strategy: a parameter server holds the master parameters and a version. A worker
// pulls (parameters, version), computes, pushes; the server applies at once.
// staleness = server version at apply - version pulled. Options: the stale-synchronous bound
// (no worker starts a step more than s ahead of the slowest) and the staleness-aware rate.
// Held-out evaluation is a thread of its own, the evaluator, that scores snapshots of the
// server's parameters while training goes on (EvaluatorStatus in engine.h says the policy).
// Over MPI ranks the server is rank 0's: its workers call it as threads of one process do, the
// other ranks' workers through the Communicator's AsyncLink, whose thread on rank 0 asks the
// server on their behalf (ParameterServer: the same rules, without blocking).
#include "batchnormsync.h"
#include "engine.h"
#include "strategy.h"
#include "worker.h"

#include <pthread.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <stdexcept>

namespace syncopate {

class AsyncStrategy final : public Strategy, private ParameterServer {
public:
    explicit AsyncStrategy(Engine &e) : Strategy(e)
    {
        const std::size_t n = std::size_t(e.parameterCount());
        m_done.assign(std::size_t(e.m_config.workers), 0);
        m_bn = e.m_config.batchnorm != "none";
        const std::size_t stats = m_bn ? e.m_workers.front()->model->runningStatsCount() : 0;
        m_link = e.m_comm->asyncLink(n, stats, e.m_config.workers);
        if (!e.m_comm->root()) {
            // The server is rank 0's; a GPU worker's parameters and gradients pass through
            // host memory on their way.
            for (const auto &w : e.m_workers)
                if (!w->device->hostAccessible()) {
                    m_hostParams.resize(e.m_workers.size());
                    m_hostGrads.resize(e.m_workers.size());
                    m_hostParams[std::size_t(w->local)].resize(n);
                    m_hostGrads[std::size_t(w->local)].resize(n);
                }
            return;
        }
        // The master copy on worker 0's device (its own queue).
        m_device = e.makeDevice(0);
        m_master = DeviceBuffer(*m_device, n);
        m_device->upload(m_master.data(), e.m_initialParams.data(), n);
        for (const auto &w : e.m_workers)
            if (w->device->memorySpace() != m_device->memorySpace() && !m_pushStaging.data())
                m_pushStaging = DeviceBuffer(*m_device, n);
        m_optimizer = std::make_unique<Optimizer>(*m_device, Optimizer::parseKind(e.m_config.optimizer),
                                                  n, float(e.m_config.lr),
                                                  float(e.m_config.momentum));
        if (m_link) {
            m_pulled.assign(std::size_t(e.m_config.workers), 0);
            m_heldByBound.assign(std::size_t(e.m_config.workers), 0);
            if (!m_device->hostAccessible()) // remote gradients arrive in host memory
                m_remoteStaging = DeviceBuffer(*m_device, n);
        }
        if (e.m_config.batchnorm != "none")
            m_bnServer = Model::initialRunningStats(e.m_workers.front()->model->spec());
        if (e.m_evalModel) {
            for (Snapshot &s : m_slots) {
                s.params.resize(n);
                s.bn.resize(m_bnServer.size());
            }
            m_pending.reserve(kSlots); // pushes never allocate
        }
    }

    ~AsyncStrategy() override
    {
        if (m_server.joinable()) // ends with the stop that ended the run's thread early
            m_server.join();
        // The run's thread joins the evaluator in afterWorkers(); this is for a run whose
        // thread never got that far.
        if (m_evaluator.joinable()) {
            {
                std::lock_guard q(m_queueMutex);
                m_closing = true;
                m_hold = false;
                m_pending.clear();
            }
            m_evalCv.notify_all();
            m_evaluator.join();
        }
    }

    void runWorker(WorkerState &w) override
    {
        const bool remote = !m_engine.m_comm->root();
        for (std::int64_t step = 0; !m_engine.stopping(); ++step)
            if (!(remote ? remoteStep(w, step) : this->step(w, step)))
                break;
    }

    void cancel() override
    {
        {
            std::lock_guard lock(m_mutex);
        }
        m_cv.notify_all();
        {
            std::lock_guard q(m_queueMutex);
        }
        m_evalCv.notify_all();
    }

    std::vector<float> finalParams() const override
    {
        if (!m_device)
            return {}; // not rank 0: the server's parameters are there
        std::vector<float> host(std::size_t(m_engine.parameterCount()));
        std::lock_guard lock(m_mutex);
        m_device->download(host.data(), m_master.data(), host.size());
        return host;
    }

    void beforeWorkers() override
    {
        Engine &e = m_engine;
        if (m_link && e.m_comm->root() && e.m_config.workers > int(e.m_workers.size())) {
            // Rank 0 serves the other ranks' workers on a thread that counts as running, so
            // the run's thread keeps polling the ranks (a lost one ends it) while it serves.
            e.m_running.fetch_add(1);
            m_server = std::thread([this, &e] {
                try {
                    m_link->serve(*this);
                } catch (const std::exception &ex) {
                    e.fail("the parameter server", e.m_progress.load(), Phase::Push, ex.what());
                }
                e.m_running.fetch_sub(1);
                e.m_doneCv.notify_all();
            });
        }
        if (!hasEvaluator())
            return;
        m_evalRec.setTracing(m_engine.m_tracing);
        m_evaluator = std::thread([this] { runEvaluator(); });
    }

    // The server's final parameters go to the evaluator like any snapshot (so they are scored
    // after what waits, and always); then the evaluator finishes its queue and is joined. A
    // run that stopped or failed scores nothing more.
    void afterWorkers() override
    {
        if (m_server.joinable())
            m_server.join();
        if (!m_evaluator.joinable())
            return;
        Engine &e = m_engine;
        const bool complete = e.m_progress.load() >= e.m_config.steps;
        if (e.error().empty() && complete) {
            std::lock_guard lock(m_mutex);
            {
                std::lock_guard q(m_queueMutex);
                m_complete = true; // a stop from now on leaves the last evaluations to finish
            }
            offerSnapshot(m_version);
        }
        {
            std::lock_guard q(m_queueMutex);
            m_closing = true;
        }
        m_evalCv.notify_all();
        m_evaluator.join();
    }

    void drainRecords(std::vector<Record> &out) override { m_evalRing.drain(out); }

    EvaluatorStatus evaluatorStatus() const override
    {
        EvaluatorStatus st;
        st.active = hasEvaluator();
        std::lock_guard q(m_queueMutex);
        st.scoring = m_scoring >= 0 ? m_slots[std::size_t(m_scoring)].version : -1;
        for (const int slot : m_pending)
            st.pending.push_back(m_slots[std::size_t(slot)].version);
        st.skipped = m_skipped;
        return st;
    }

    void holdEvaluator(bool hold) override
    {
        {
            std::lock_guard q(m_queueMutex);
            m_hold = hold;
        }
        m_evalCv.notify_all();
    }

private:
    // Test hook: the scripted order of server operations (Engine::scriptServerOrder).
    bool awaitServerTurn(WorkerState &w, bool push, std::unique_lock<std::mutex> &lock)
    {
        const std::vector<int> &script = m_engine.m_script;
        if (script.empty())
            return true;
        const int code = push ? -(w.index + 1) : (w.index + 1);
        m_cv.wait(lock, [&] {
            return m_engine.stopping() || m_scriptPos >= script.size() || script[m_scriptPos] == code;
        });
        if (m_engine.stopping())
            return false;
        if (m_scriptPos < script.size())
            ++m_scriptPos;
        // Whoever is next in the script may be waiting, even if this operation goes no further.
        changed();
        return true;
    }

    // Under the server's lock: the state changed, waiting workers (and, over ranks, the held
    // requests of other ranks' workers) may go on.
    void changed()
    {
        m_cv.notify_all();
        if (m_link)
            m_generation.fetch_add(1, std::memory_order_release);
    }

    bool step(WorkerState &w, std::int64_t step)
    {
        Engine &e = m_engine;
        const RunConfig &c = e.m_config;
        const auto s32 = std::uint32_t(step);
        const std::size_t n = w.model->paramCount();
        auto lockServer = [&](std::unique_lock<std::mutex> &lock) {
            // Waiting for the server's lock is contention: record it as a wait of its own.
            if (!lock.try_lock()) {
                const std::int64_t t0 = w.rec.now();
                lock.lock();
                w.rec.span(Phase::Wait, s32, t0, w.rec.now());
            }
        };

        if (c.maxStaleness >= 0) {
            e.enter(w, Phase::Wait, step);
            std::unique_lock lock(m_mutex);
            auto ahead = [&] {
                const std::int64_t slowest = *std::min_element(m_done.begin(), m_done.end());
                return step - slowest > c.maxStaleness;
            };
            if (ahead()) {
                const std::int64_t t0 = w.rec.now();
                m_cv.wait(lock, [&] { return e.stopping() || m_version >= c.steps || !ahead(); });
                w.rec.span(Phase::Wait, s32, t0, w.rec.now());
            }
            if (e.stopping() || m_version >= c.steps)
                return false;
        }

        e.enter(w, Phase::Pull, step);
        {
            std::unique_lock lock(m_mutex, std::defer_lock);
            lockServer(lock);
            if (!awaitServerTurn(w, false, lock) || m_version >= c.steps)
                return false;
            const std::int64_t t0 = w.rec.now();
            // Finished before the lock is let go: the next push changes the master copy.
            w.device->copyFrom(*m_device, w.model->params(), m_master.data(), n * sizeof(float));
            w.device->synchronize();
            w.pulledVersion = m_version;
            if (m_link)
                m_pulled[std::size_t(w.index)] = m_version;
            w.rec.span(Phase::Pull, s32, t0, w.rec.now(), double(m_version));
            changed();
        }

        e.computeStep(w, step);
        if (e.stopping())
            return false;
        if (batchNorm()) { // off the server's lock: what the push hands over besides the gradient
            w.model->batchStatsToHost(w.bnBatch.data());
            w.model->runningStatsToHost(w.bnOwn.data());
        }

        e.enter(w, Phase::Push, step);
        {
            std::unique_lock lock(m_mutex, std::defer_lock);
            lockServer(lock);
            if (!awaitServerTurn(w, true, lock) || m_version >= c.steps)
                return false;
            const std::int64_t t0 = w.rec.now();
            const std::int64_t staleness = m_version - w.pulledVersion;
            const float scale =
                c.stalenessLr ? 1.0f / float(std::max<std::int64_t>(1, staleness)) : 1.0f;
            const float *grads = w.model->grads();
            if (w.device->memorySpace() != m_device->memorySpace()) {
                m_device->copyFrom(*w.device, m_pushStaging.data(), grads, n * sizeof(float));
                grads = m_pushStaging.data();
            }
            const std::int64_t version = applyLocked(w.index, grads, scale);
            w.rec.span(Phase::Push, s32, t0, w.rec.now(), double(staleness));
            w.rec.counter(CounterId::Staleness, s32, double(staleness));
            w.rec.counter(CounterId::Version, s32, double(version));
            if (batchNorm())
                w.rec.counter(CounterId::BnDivergence, s32,
                              mergeBatchNormLocked(w.bnBatch.data(), w.bnOwn.data()));
            offerDueLocked(version);
            changed();
        }
        return !e.stopping();
    }

    // Under the server's lock: one update of the master parameters; returns the new version.
    std::int64_t applyLocked(int worker, const float *grads, float scale)
    {
        m_optimizer->step(m_master.data(), grads, scale);
        m_device->synchronize();
        const std::int64_t version = ++m_version;
        ++m_done[std::size_t(worker)];
        m_engine.m_progress = version;
        return version;
    }

    // The server's running statistics take the same momentum step with each pushed batch's
    // statistics, in push order: what one replica would hold had it seen the batches the
    // master parameters were updated with. Returns how far the pusher's own are from them.
    double mergeBatchNormLocked(const float *batch, const float *own)
    {
        for (std::size_t i = 0; i < m_bnServer.size(); ++i)
            m_bnServer[i] = (1.0f - kBatchNormMomentum) * m_bnServer[i] + kBatchNormMomentum * batch[i];
        return relativeDistance(own, m_bnServer.data(), m_bnServer.size());
    }

    // A consistent snapshot: the server's parameters at this version, handed to the evaluator
    // without waiting for it (the final version is offered at the end).
    void offerDueLocked(std::int64_t version)
    {
        const RunConfig &c = m_engine.m_config;
        if (hasEvaluator() && c.evalEvery > 0 && version % c.evalEvery == 0 && version < c.steps)
            offerSnapshot(version);
    }

    // ---- over ranks: rank 0's server, as its serving thread asks it ----

    // Under the server's lock: whether the script (if any) lets this operation go now; if so
    // it is taken.
    bool takeScriptTurnLocked(int code)
    {
        const std::vector<int> &script = m_engine.m_script;
        if (script.empty() || m_scriptPos >= script.size())
            return true;
        if (script[m_scriptPos] != code)
            return false;
        ++m_scriptPos;
        return true;
    }

    // The rules of step() without its waits: what a local worker would wait for holds the
    // request (Later) and the serving thread asks again when the server changes.
    Answer tryPull(int worker, std::int64_t step, float *params, Pulled &out) override
    {
        const RunConfig &c = m_engine.m_config;
        std::lock_guard lock(m_mutex);
        out.version = m_version;
        if (m_version >= c.steps)
            return Answer::Done;
        const auto i = std::size_t(worker);
        if (c.maxStaleness >= 0 &&
            step - *std::min_element(m_done.begin(), m_done.end()) > c.maxStaleness) {
            m_heldByBound[i] = 1;
            return Answer::Later;
        }
        if (!takeScriptTurnLocked(worker + 1))
            return Answer::Later;
        m_device->download(params, m_master.data(), std::size_t(m_engine.parameterCount()));
        m_pulled[i] = m_version;
        out.heldByBound = m_heldByBound[i] != 0;
        m_heldByBound[i] = 0;
        changed();
        return Answer::Served;
    }

    Answer tryPush(int worker, std::int64_t step, const float *grads, const float *bnBatch,
                   const float *bnOwn, Pushed &out) override
    {
        (void)step;
        const RunConfig &c = m_engine.m_config;
        std::lock_guard lock(m_mutex);
        out.version = m_version;
        if (m_version >= c.steps)
            return Answer::Done;
        if (!takeScriptTurnLocked(-(worker + 1)))
            return Answer::Later;
        const std::int64_t staleness = m_version - m_pulled[std::size_t(worker)];
        const float scale = c.stalenessLr ? 1.0f / float(std::max<std::int64_t>(1, staleness)) : 1.0f;
        if (m_remoteStaging.data()) {
            m_device->upload(m_remoteStaging.data(), grads, std::size_t(m_engine.parameterCount()));
            grads = m_remoteStaging.data();
        }
        out.version = applyLocked(worker, grads, scale);
        out.staleness = staleness;
        if (batchNorm() && bnBatch && bnOwn)
            out.bnDivergence = mergeBatchNormLocked(bnBatch, bnOwn);
        offerDueLocked(out.version);
        changed();
        return Answer::Served;
    }

    std::uint64_t generation() const override { return m_generation.load(std::memory_order_acquire); }
    bool stopping() const override { return m_engine.stopping(); }

    // ---- over ranks: a worker of another rank than 0 ----

    // The steps of step(), each operation a message to rank 0's server; the records are the
    // same (a pull held by the bound is a wait, then the pull).
    bool remoteStep(WorkerState &w, std::int64_t step)
    {
        Engine &e = m_engine;
        const auto s32 = std::uint32_t(step);
        const std::size_t n = w.model->paramCount();
        const auto l = std::size_t(w.local);
        const bool staged = !w.device->hostAccessible();
        if (e.m_config.maxStaleness >= 0)
            e.enter(w, Phase::Wait, step);
        e.enter(w, Phase::Pull, step);
        {
            Pulled pulled;
            const std::int64_t t0 = w.rec.now();
            float *into = staged ? m_hostParams[l].data() : w.model->params();
            const AsyncLink::Result r = m_link->pull(w.local, step, into, pulled);
            noteProgress(pulled.version);
            if (r != AsyncLink::Result::Ok)
                return false;
            if (staged) {
                w.device->upload(w.model->params(), into, n);
                w.device->synchronize();
            }
            const std::int64_t t1 = w.rec.now();
            std::int64_t from = t0;
            if (pulled.heldByBound) {
                from = std::min(t1, t0 + pulled.heldNs);
                w.rec.span(Phase::Wait, s32, t0, from);
            }
            w.pulledVersion = pulled.version;
            w.rec.span(Phase::Pull, s32, from, t1, double(pulled.version));
        }

        e.computeStep(w, step);
        if (e.stopping())
            return false;
        if (m_bn) {
            w.model->batchStatsToHost(w.bnBatch.data());
            w.model->runningStatsToHost(w.bnOwn.data());
        }

        e.enter(w, Phase::Push, step);
        const float *grads = w.model->grads();
        if (staged) {
            w.device->download(m_hostGrads[l].data(), grads, n);
            grads = m_hostGrads[l].data();
        }
        Pushed pushed;
        const std::int64_t t0 = w.rec.now();
        const AsyncLink::Result r = m_link->push(w.local, step, grads, m_bn ? w.bnBatch.data() : nullptr,
                                                 m_bn ? w.bnOwn.data() : nullptr, pushed);
        noteProgress(pushed.version);
        if (r != AsyncLink::Result::Ok)
            return false;
        w.rec.span(Phase::Push, s32, t0, w.rec.now(), double(pushed.staleness));
        w.rec.counter(CounterId::Staleness, s32, double(pushed.staleness));
        w.rec.counter(CounterId::Version, s32, double(pushed.version));
        if (m_bn)
            w.rec.counter(CounterId::BnDivergence, s32, pushed.bnDivergence);
        return !e.stopping();
    }

    // Another rank than 0: the server's version as its answers tell it (complete once one says
    // the run is done).
    void noteProgress(std::int64_t version)
    {
        std::atomic<std::int64_t> &p = m_engine.m_progress;
        for (std::int64_t seen = p.load(); version > seen && !p.compare_exchange_weak(seen, version);) {
        }
    }

    bool hasEvaluator() const { return !m_slots.front().params.empty(); }

    // Under the server's lock, which serialises the offers (so a slot taken out of the queue
    // to be filled is nobody else's): the server's parameters and batch-norm statistics at
    // `version` into a free slot, or into the newest waiting one's (that version is skipped).
    // Copies and allocates nothing else, and never waits for the evaluator.
    void offerSnapshot(std::int64_t version)
    {
        int slot = -1;
        {
            std::lock_guard q(m_queueMutex);
            for (int i = 0; i < kSlots && slot < 0; ++i)
                if (i != m_scoring && std::find(m_pending.begin(), m_pending.end(), i) == m_pending.end())
                    slot = i;
            if (slot < 0) {
                slot = m_pending.back();
                m_pending.pop_back();
                ++m_skipped;
            }
        }
        Snapshot &s = m_slots[std::size_t(slot)];
        m_device->download(s.params.data(), m_master.data(), s.params.size());
        std::copy(m_bnServer.begin(), m_bnServer.end(), s.bn.begin());
        s.version = version;
        {
            std::lock_guard q(m_queueMutex);
            m_pending.push_back(slot);
        }
        m_evalCv.notify_all();
    }

    // The evaluator's thread: the oldest waiting snapshot, scored into its own recorder, until
    // the queue is closed and empty, or the run stops (or fails) before it completed.
    void runEvaluator()
    {
        pthread_setname_np(pthread_self(), "syncopate-eval");
        Engine &e = m_engine;
        std::int64_t version = 0;
        try {
            e.m_evalModel->device().bindThread();
            for (;;) {
                int slot;
                {
                    std::unique_lock q(m_queueMutex);
                    const auto abandoned = [&] { return e.stopping() && !m_complete; };
                    m_evalCv.wait(q, [&] { return abandoned() || !m_pending.empty() || m_closing; });
                    if (abandoned() || m_pending.empty())
                        break;
                    slot = m_pending.front();
                    m_pending.erase(m_pending.begin());
                    m_scoring = slot;
                    m_evalCv.wait(q, [&] { return !m_hold || abandoned(); });
                    if (abandoned())
                        break;
                }
                const Snapshot &s = m_slots[std::size_t(slot)];
                version = s.version;
                // Test hook: injectFault(workers, version, Phase::Eval) fails the evaluator.
                if (e.m_fault.worker == e.m_config.workers && e.m_fault.step == version &&
                    e.m_fault.phase == Phase::Eval)
                    throw std::runtime_error("injected fault");
                e.evaluate(m_evalRec, version, s.params.data(), version, batchNorm() ? s.bn.data() : nullptr);
                std::lock_guard q(m_queueMutex);
                m_scoring = -1;
            }
        } catch (const std::exception &ex) {
            e.fail("the evaluator", version, Phase::Eval, ex.what());
        }
        std::lock_guard q(m_queueMutex);
        m_scoring = -1;
    }

    mutable std::mutex m_mutex;
    std::condition_variable m_cv;
    std::unique_ptr<Device> m_device;
    DeviceBuffer m_master;
    DeviceBuffer m_pushStaging; // a pushed gradient from another GPU, copied in first
    std::unique_ptr<Optimizer> m_optimizer;
    std::int64_t m_version = 0;
    std::vector<std::int64_t> m_done; // updates pushed per worker
    std::size_t m_scriptPos = 0;
    bool m_bn = false; // the model has batch norm
    // Over ranks (null in one process): the other ranks' workers and rank 0's server thread.
    std::unique_ptr<AsyncLink> m_link;
    std::thread m_server;
    std::atomic<std::uint64_t> m_generation{0};
    std::vector<std::int64_t> m_pulled;  // rank 0: per worker, the version last pulled
    std::vector<char> m_heldByBound;     // rank 0: per worker, its pull is held by the bound
    DeviceBuffer m_remoteStaging;        // rank 0, server on a GPU: a pushed gradient
    std::vector<std::vector<float>> m_hostParams, m_hostGrads; // other ranks, GPU workers
    // Batch norm: the server's running statistics (guarded by m_mutex), what evaluation uses;
    // empty without batch norm.
    std::vector<float> m_bnServer;
    bool batchNorm() const { return !m_bnServer.empty(); }

    // The evaluator. Three slots: one being scored and two waiting, so that a short burst of
    // pushes while it scores loses nothing, in 3 copies of the parameters in all.
    struct Snapshot {
        std::vector<float> params, bn; // empty: no evaluator (no held-out data)
        std::int64_t version = 0;
    };
    static constexpr int kSlots = 3;
    std::array<Snapshot, kSlots> m_slots;
    // Lock order: m_mutex, then m_queueMutex; the evaluator never takes the server's lock.
    mutable std::mutex m_queueMutex;
    std::condition_variable m_evalCv;
    std::vector<int> m_pending; // slots waiting, oldest version first (guarded by m_queueMutex)
    int m_scoring = -1;         // the slot being scored
    std::int64_t m_skipped = 0;
    bool m_closing = false;  // no more offers: finish the queue and end
    bool m_complete = false; // the run completed: a late stop does not abandon the queue
    bool m_hold = false;     // test hook
    // The evaluator's own ring: a few records per evaluation, so 4096 outlast any queue.
    RecordRing m_evalRing{std::size_t(1) << 12};
    Recorder m_evalRec{m_engine.m_config.workers, m_engine.m_clock, m_evalRing};
    std::thread m_evaluator;
};

std::unique_ptr<Strategy> makeAsyncStrategy(Engine &engine)
{
    return std::make_unique<AsyncStrategy>(engine);
}

} // namespace syncopate
