// The async strategy: a parameter server holds the master parameters and a version. A worker
// pulls (parameters, version), computes, pushes; the server applies at once.
// staleness = server version at apply - version pulled. Options: the stale-synchronous bound
// (no worker starts a step more than s ahead of the slowest) and the staleness-aware rate.
#include "batchnormsync.h"
#include "engine.h"
#include "strategy.h"
#include "worker.h"

#include <algorithm>
#include <condition_variable>

namespace syncopate {

class AsyncStrategy final : public Strategy {
public:
    explicit AsyncStrategy(Engine &e) : Strategy(e)
    {
        const std::size_t n = std::size_t(e.parameterCount());
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
        m_done.assign(std::size_t(e.m_config.workers), 0);
        if (e.m_config.batchnorm != "none")
            m_bnServer = Model::initialRunningStats(e.m_workers.front()->model->spec());
    }

    void runWorker(WorkerState &w) override
    {
        for (std::int64_t step = 0; !m_engine.stopping(); ++step)
            if (!this->step(w, step))
                break;
    }

    void cancel() override
    {
        {
            std::lock_guard lock(m_mutex);
        }
        m_cv.notify_all();
    }

    std::vector<float> finalParams() const override
    {
        std::vector<float> host(std::size_t(m_engine.parameterCount()));
        std::lock_guard lock(m_mutex);
        m_device->download(host.data(), m_master.data(), host.size());
        return host;
    }

    // Evaluates the server's parameters once the workers are done.
    void afterWorkers() override
    {
        Engine &e = m_engine;
        const bool complete = e.m_progress.load() >= e.m_config.steps;
        if (!e.error().empty() || !complete || !e.m_evalModel)
            return;
        WorkerState &w0 = *e.m_workers.front();
        const auto params = finalParams();
        std::copy(params.begin(), params.end(), w0.snapshot.begin());
        try {
            e.evaluate(w0, e.m_progress.load(), w0.snapshot.data(), e.m_progress.load(),
                       batchNorm() ? m_bnServer.data() : nullptr);
        } catch (const std::exception &ex) {
            e.fail(0, e.m_progress.load(), Phase::Eval, ex.what());
        }
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
        m_cv.notify_all();
        return true;
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
            w.rec.span(Phase::Pull, s32, t0, w.rec.now(), double(m_version));
            m_cv.notify_all();
        }

        e.computeStep(w, step);
        if (e.stopping())
            return false;
        if (batchNorm()) { // off the server's lock: what the push hands over besides the gradient
            w.model->batchStatsToHost(w.bnBatch.data());
            w.model->runningStatsToHost(w.bnOwn.data());
        }

        e.enter(w, Phase::Push, step);
        bool evalDue = false;
        std::int64_t version = 0;
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
            m_optimizer->step(m_master.data(), grads, scale);
            m_device->synchronize();
            version = ++m_version;
            ++m_done[std::size_t(w.index)];
            e.m_progress = version;
            w.rec.span(Phase::Push, s32, t0, w.rec.now(), double(staleness));
            w.rec.counter(CounterId::Staleness, s32, double(staleness));
            w.rec.counter(CounterId::Version, s32, double(version));
            if (batchNorm()) {
                // The server's running statistics take the same momentum step with each pushed
                // batch's statistics, in push order: what one replica would hold had it seen
                // the batches the master parameters were updated with.
                for (std::size_t i = 0; i < m_bnServer.size(); ++i)
                    m_bnServer[i] = (1.0f - kBatchNormMomentum) * m_bnServer[i] +
                                    kBatchNormMomentum * w.bnBatch[i];
                w.rec.counter(CounterId::BnDivergence, s32,
                              relativeDistance(w.bnOwn.data(), m_bnServer.data(), m_bnServer.size()));
            }
            evalDue = e.m_evalModel && c.evalEvery > 0 && version % c.evalEvery == 0 &&
                      version < c.steps;
            if (evalDue) { // a consistent snapshot: the server's parameters at this version
                m_device->download(w.snapshot.data(), m_master.data(), n);
                std::copy(m_bnServer.begin(), m_bnServer.end(), w.bnSnapshot.begin());
            }
            m_cv.notify_all();
        }
        if (evalDue)
            e.evaluate(w, version, w.snapshot.data(), version, batchNorm() ? w.bnSnapshot.data() : nullptr);
        return !e.stopping();
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
    // Batch norm: the server's running statistics (guarded by m_mutex), what evaluation uses;
    // empty without batch norm.
    std::vector<float> m_bnServer;
    bool batchNorm() const { return !m_bnServer.empty(); }
};

std::unique_ptr<Strategy> makeAsyncStrategy(Engine &engine)
{
    return std::make_unique<AsyncStrategy>(engine);
}

} // namespace syncopate
