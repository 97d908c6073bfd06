#include "engine.h"

#include "metrics.h"
#include "runstore.h"

#include "model.h"
#include "optimizer.h"
#include "random.h"

#include "cpu/cpudevice.h"

#include <tbb/task_group.h>

#include <pthread.h>

#include <algorithm>
#include <cmath>

namespace syncopate {

const char *runStateName(RunState s)
{
    switch (s) {
    case RunState::Idle: return "idle";
    case RunState::Running: return "running";
    case RunState::Finished: return "finished";
    case RunState::Stopped: return "stopped";
    case RunState::Failed: return "failed";
    }
    return "?";
}

RunState runStateFromName(const std::string &name)
{
    for (RunState s : {RunState::Idle, RunState::Running, RunState::Stopped, RunState::Failed})
        if (name == runStateName(s))
            return s;
    return RunState::Finished;
}

bool CancellableBarrier::arriveAndWait(std::int64_t arrivedNs, std::int64_t *releasedNs)
{
    std::unique_lock lock(m_mutex);
    if (m_cancelled)
        return false;
    const std::uint64_t generation = m_generation;
    if (++m_waiting == m_parties) {
        m_waiting = 0;
        ++m_generation;
        m_releasedNs = arrivedNs;
        if (releasedNs)
            *releasedNs = arrivedNs;
        m_cv.notify_all();
        return true;
    }
    m_cv.wait(lock, [&] { return m_generation != generation || m_cancelled; });
    // Read under the lock: the next opening needs this worker, so it cannot have changed.
    if (releasedNs)
        *releasedNs = m_releasedNs;
    return m_generation != generation;
}

void CancellableBarrier::cancel()
{
    {
        std::lock_guard lock(m_mutex);
        m_cancelled = true;
    }
    m_cv.notify_all();
}

// Host-side batch buffers; two of them when the next batch is prefetched.
struct BatchBuffers {
    std::vector<float> x;
    std::vector<std::int32_t> labels;
    std::vector<float> y;
    std::int64_t gatheredFrom = 0, gatheredTo = 0; // when the prefetch task assembled it
    // Hand-off between the worker and the prefetch task: oneTBB orders them, but inside its
    // uninstrumented library, so the ordering is restated here for ThreadSanitizer.
    std::atomic<int> handoff{0};
};

struct WorkerState {
    WorkerState(int i, const RunClock &clock)
        : index(i), ring(std::size_t(1) << 16), rec(i, clock, ring)
    {
    }

    int index;
    std::unique_ptr<Device> device;
    // The batch on the device, where the device cannot read the host buffers below.
    DeviceBuffer devX, devLabels, devY;
    std::unique_ptr<Model> model;
    std::unique_ptr<Optimizer> optimizer; // sync: each replica applies the same update
    RecordRing ring;
    Recorder rec;
    BatchBuffers buffers[2];
    int current = 0;
    tbb::task_group prefetch;
    bool prefetchPending = false;
    std::atomic<double> slowdown{1.0};
    std::atomic<bool> paused{false};
    std::unique_ptr<Rng> jitterRng;
    std::int64_t pulledVersion = 0;
    std::vector<float> snapshot; // parameters handed to evaluation
    Phase phase = Phase::Data;
    std::int64_t step = 0;
    std::thread thread;
};

Engine::Engine(RunConfig config, std::shared_ptr<const Dataset> train,
               std::shared_ptr<const Dataset> eval)
    : m_config(std::move(config)), m_train(std::move(train)), m_eval(std::move(eval)),
      m_events(m_config.workers)
{
    ModelSpec spec{m_config.layers, parseActivation(m_config.activation),
                   m_config.classification(), m_config.checkpoint ? m_config.checkpointEvery : 0};
    m_initialParams = Model::initialParams(spec, m_config.seed);
    const auto kind = Optimizer::parseKind(m_config.optimizer);
    const std::size_t n = spec.paramCount();
    const DeviceOptions options{m_config.tf32, threadsPerWorker()};
    // A device that cannot be had is a problem of the "device" key; running out of memory
    // later is not.
    auto deviceFor = [&](int worker) {
        try {
            return createDevice(m_config.device, worker, options);
        } catch (const DeviceError &e) {
            throw ConfigError(e.what(), {"device"});
        }
    };
    for (int i = 0; i < m_config.workers; ++i) {
        auto w = std::make_unique<WorkerState>(i, m_clock);
        w->device = deviceFor(i);
        w->model = std::make_unique<Model>(*w->device, spec, m_config.batch);
        w->model->setParams(m_initialParams);
        if (!m_config.async())
            w->optimizer = std::make_unique<Optimizer>(*w->device, kind, n, float(m_config.lr),
                                                       float(m_config.momentum));
        w->slowdown = m_config.slowdown[std::size_t(i)];
        w->jitterRng = std::make_unique<Rng>(m_config.seed, 1000 + std::uint64_t(i));
        const std::size_t targets =
            m_train->classification ? 0 : std::size_t(m_config.batch) * m_train->outputs;
        for (auto &b : w->buffers) {
            b.x.resize(std::size_t(m_config.batch) * m_train->features);
            b.labels.resize(std::size_t(m_config.batch));
            b.y.resize(targets);
        }
        if (!w->device->hostAccessible()) {
            static_assert(sizeof(std::int32_t) == sizeof(float), "labels share float-sized buffers");
            w->devX = DeviceBuffer(*w->device, std::size_t(m_config.batch) * m_train->features);
            w->devLabels = DeviceBuffer(*w->device, std::size_t(m_config.batch));
            w->devY = DeviceBuffer(*w->device, targets);
        }
        w->snapshot.resize(n);
        m_workers.push_back(std::move(w));
    }
    if (m_config.async()) {
        m_sharedDevice = deviceFor(0);
        m_master = DeviceBuffer(*m_sharedDevice, n);
        m_sharedDevice->upload(m_master.data(), m_initialParams.data(), n);
        for (const auto &w : m_workers)
            if (w->device->memorySpace() != m_sharedDevice->memorySpace() && !m_pushStaging.data())
                m_pushStaging = DeviceBuffer(*m_sharedDevice, n);
        m_serverOptimizer = std::make_unique<Optimizer>(*m_sharedDevice, kind, n,
                                                        float(m_config.lr),
                                                        float(m_config.momentum));
        m_done.assign(std::size_t(m_config.workers), 0);
    } else {
        std::vector<Device *> devices;
        std::vector<float *> grads;
        for (const auto &w : m_workers) {
            devices.push_back(w->device.get());
            grads.push_back(w->model->grads());
        }
        m_exchange = createGradientExchange(devices, grads, n);
        m_barrier = std::make_unique<CancellableBarrier>(m_config.workers);
    }
    if (m_eval && m_eval->samples > 0) {
        m_evalDevice = deviceFor(0);
        ModelSpec plain = spec;
        plain.checkpointEvery = 0;
        m_evalModel = std::make_unique<Model>(*m_evalDevice, plain, m_config.batch);
        // Room for every evaluation of the run, so recording one does not allocate on the
        // worker that completes it (async runs count server updates, which steps bound too).
        m_evalHistory.reserve(std::size_t(
            (m_config.evalEvery > 0 ? m_config.steps / m_config.evalEvery : 0) + 2));
        if (!m_config.async()) { // sync evaluates in shards, at least at the end
            m_evalShards.resize(std::size_t(m_config.workers));
            for (const auto &w : m_workers)
                w->model->reserveEvaluation();
        }
    }
}

Engine::~Engine()
{
    requestStop();
    if (m_supervisor.joinable())
        m_supervisor.join();
}

void Engine::start()
{
    if (m_state.load() != RunState::Idle)
        return;
    if (!m_outputDir.empty()) {
        m_writer = std::make_unique<RunWriter>(m_outputDir, m_config, m_initialParams);
        if (!m_retentionSet)
            m_retention = Retention::None; // the directory has it all
    }
    m_events.setRetention(m_retention == Retention::All    ? EventStore::Keep::All
                          : m_retention == Retention::Feed ? EventStore::Keep::Unread
                                                           : EventStore::Keep::Nothing);
    for (auto &w : m_workers)
        w->rec.setTracing(m_tracing);
    m_clock.restart(); // time 0 is the start, not the construction of the replicas
    m_state = RunState::Running;
    m_running = int(m_workers.size());
    m_supervisor = std::thread([this] { supervise(); });
}

void Engine::requestStop()
{
    m_stop = true;
    if (m_barrier)
        m_barrier->cancel();
    {
        std::lock_guard lock(m_serverMutex);
    }
    m_serverCv.notify_all();
    {
        std::lock_guard lock(m_pauseMutex);
    }
    m_pauseCv.notify_all();
}

bool Engine::finished() const
{
    const RunState s = m_state.load();
    return s == RunState::Finished || s == RunState::Stopped || s == RunState::Failed;
}

void Engine::wait()
{
    std::unique_lock lock(m_doneMutex);
    m_doneCv.wait(lock, [&] { return finished() || m_state.load() == RunState::Idle; });
}

bool Engine::waitFor(std::chrono::milliseconds timeout)
{
    std::unique_lock lock(m_doneMutex);
    return m_doneCv.wait_for(lock, timeout,
                             [&] { return finished() || m_state.load() == RunState::Idle; });
}

std::string Engine::error() const
{
    std::lock_guard lock(m_doneMutex);
    return m_error;
}

std::int64_t Engine::elapsedNs() const
{
    const std::int64_t end = m_endNs.load();
    return end >= 0 ? end : m_clock.now();
}

std::int64_t Engine::parameterCount() const { return std::int64_t(m_initialParams.size()); }

std::vector<float> Engine::finalParams() const
{
    if (m_config.async()) {
        std::vector<float> host(m_initialParams.size());
        std::lock_guard lock(m_serverMutex);
        m_sharedDevice->download(host.data(), m_master.data(), host.size());
        return host;
    }
    return m_workers.front()->model->paramsToHost();
}

std::string Engine::reduceAlgorithm() const
{
    return m_exchange ? m_exchange->algorithm() : std::string();
}

int Engine::threadsPerWorker() const
{
    return m_config.threadsPerWorker > 0 ? m_config.threadsPerWorker
                                         : defaultThreadsPerWorker(m_config.workers);
}

std::vector<std::string> Engine::deviceNames() const
{
    std::vector<std::string> names;
    for (const auto &w : m_workers)
        names.push_back(w->device->name());
    return names;
}

std::vector<EvalPoint> Engine::evalHistory() const
{
    std::lock_guard lock(m_evalMutex);
    return m_evalHistory;
}

void Engine::setSlowdown(int worker, double factor)
{
    if (worker >= 0 && worker < int(m_workers.size()))
        m_workers[std::size_t(worker)]->slowdown = std::max(1.0, factor);
}

double Engine::slowdown(int worker) const
{
    return worker >= 0 && worker < int(m_workers.size())
               ? m_workers[std::size_t(worker)]->slowdown.load()
               : 1.0;
}

void Engine::setPaused(int worker, bool paused)
{
    if (worker < 0 || worker >= int(m_workers.size()))
        return;
    {
        std::lock_guard lock(m_pauseMutex);
        m_workers[std::size_t(worker)]->paused = paused;
    }
    m_pauseCv.notify_all();
}

bool Engine::paused(int worker) const
{
    return worker >= 0 && worker < int(m_workers.size()) &&
           m_workers[std::size_t(worker)]->paused.load();
}

void Engine::injectFault(int worker, std::int64_t step, Phase phase)
{
    m_fault = {worker, step, phase};
}

void Engine::scriptServerOrder(std::vector<int> order) { m_script = std::move(order); }

void Engine::fail(int worker, std::int64_t step, Phase phase, const std::string &what)
{
    {
        std::lock_guard lock(m_doneMutex);
        if (m_error.empty())
            m_error = "worker " + std::to_string(worker) + " failed at step " +
                      std::to_string(step) + " (" + phaseName(phase) + "): " + what;
    }
    requestStop();
}

void Engine::storeFailed(const std::string &what)
{
    m_writer.reset();
    {
        std::lock_guard lock(m_doneMutex);
        if (m_error.empty())
            m_error = "the run folder could not be written, so the run stopped: " + what +
                      ". What was recorded until then is kept in " + m_outputDir;
    }
    requestStop();
}

void Engine::drain()
{
    m_drained.clear();
    for (auto &w : m_workers)
        w->ring.drain(m_drained);
    if (!m_drained.empty())
        m_events.append(m_drained);
    if (m_writer) {
        try {
            m_writer->append(m_drained.data(), m_drained.size());
            m_writer->tick(m_clock.now(), [this] { return outcome(); });
        } catch (const std::exception &e) {
            storeFailed(e.what());
        }
    }
}

RunOutcome Engine::outcome() const
{
    RunOutcome o;
    o.status = runStateName(state());
    o.error = error();
    o.wallNs = elapsedNs();
    o.stepsCompleted = progress();
    o.eval = evalHistory();
    o.reduceAlgorithm = reduceAlgorithm();
    o.devices = deviceNames();
    if (!parseDeviceSpec(m_config.device).cuda) {
        o.cpuIsa = cpuIsa();
        o.threadsPerWorker = threadsPerWorker();
    }
    return o;
}

nlohmann::json Engine::summary() const
{
    {
        std::lock_guard lock(m_doneMutex);
        if (!m_summary.is_null())
            return m_summary;
    }
    return computeMetrics(m_config, m_events.all(), outcome()).summary;
}

void Engine::supervise()
{
    pthread_setname_np(pthread_self(), "syncopate-run");
    for (auto &w : m_workers) {
        WorkerState *ws = w.get();
        ws->thread = std::thread([this, ws] {
            runWorker(*ws);
            m_running.fetch_sub(1);
            m_doneCv.notify_all();
        });
    }
    // Drain often enough that rings never fill, rarely enough to cost nothing.
    while (m_running.load() > 0) {
        drain();
        std::unique_lock lock(m_doneMutex);
        m_doneCv.wait_for(lock, std::chrono::milliseconds(3), [&] { return m_running.load() == 0; });
    }
    for (auto &w : m_workers)
        w->thread.join();
    drain();
    const bool failed = !error().empty();
    const bool complete = m_progress.load() >= m_config.steps;
    // Sync runs evaluated their end in shards (syncStep); async evaluates the server's
    // parameters once the workers are done.
    if (!failed && complete && m_evalModel && m_config.async()) {
        WorkerState &w0 = *m_workers.front();
        const auto params = finalParams();
        std::copy(params.begin(), params.end(), w0.snapshot.begin());
        try {
            evaluate(w0, m_progress.load(), w0.snapshot.data(), m_progress.load());
        } catch (const std::exception &e) {
            fail(0, m_progress.load(), Phase::Eval, e.what());
        }
        drain();
    }
    m_endNs = m_clock.now();
    RunState end;
    {
        std::lock_guard lock(m_doneMutex);
        end = !m_error.empty() ? RunState::Failed : complete ? RunState::Finished : RunState::Stopped;
    }
    // The directory is complete before anyone is told the run ended.
    if (m_writer) {
        RunOutcome o = outcome();
        o.status = runStateName(end);
        try {
            m_writer->finish(o, finalParams());
            std::lock_guard lock(m_doneMutex);
            m_summary = m_writer->summary();
        } catch (const std::exception &e) {
            storeFailed(e.what());
            end = RunState::Failed;
        }
        m_writer.reset();
    }
    {
        std::lock_guard lock(m_doneMutex);
        m_state = end;
    }
    m_doneCv.notify_all();
}

void Engine::enter(WorkerState &w, Phase p, std::int64_t step)
{
    w.phase = p;
    w.step = step;
    if (m_fault.worker == w.index && m_fault.step == step && m_fault.phase == p)
        throw std::runtime_error("injected fault");
}

void Engine::flushDeviceSpans(WorkerState &w)
{
    if (!w.rec.timer())
        return;
    // After a failure the device may refuse to synchronise; what it had finished still counts.
    try {
        w.device->synchronize();
    } catch (const std::exception &) {
    }
    try {
        w.rec.collectDeviceSpans();
    } catch (const std::exception &) {
    }
}

void Engine::runWorker(WorkerState &w)
{
    // Named so that a profiler, a debugger or top -H shows which thread is which worker.
    const std::string name = "syncopate-w" + std::to_string(w.index);
    pthread_setname_np(pthread_self(), name.c_str());
    try {
        // Per-thread library state (OpenMP's thread count) before the first step, so that
        // setting it up is not timed as a step and allocates nothing inside one.
        w.device->bindThread();
        if (DeviceTimer *timer = w.device->timer()) {
            timer->calibrate([this] { return m_clock.now(); });
            w.rec.attachTimer(timer);
        }
        if (m_config.async()) {
            for (std::int64_t step = 0; !stopping(); ++step)
                if (!asyncStep(w, step))
                    break;
        } else {
            for (std::int64_t step = 0; step < m_config.steps && !stopping(); ++step)
                syncStep(w, step);
        }
    } catch (const std::exception &e) {
        fail(w.index, w.step, w.phase, e.what());
    }
    flushDeviceSpans(w);
    try {
        w.prefetch.wait();
    } catch (const std::exception &e) {
        fail(w.index, w.step, Phase::Data, e.what());
    }
}

bool Engine::sleepCancellable(std::int64_t ns)
{
    std::unique_lock lock(m_pauseMutex);
    return !m_pauseCv.wait_for(lock, std::chrono::nanoseconds(ns), [&] { return stopping(); });
}

void Engine::waitWhilePaused(WorkerState &w, std::int64_t step)
{
    if (!w.paused.load())
        return;
    enter(w, Phase::Pause, step);
    const std::int64_t t0 = w.rec.now();
    {
        std::unique_lock lock(m_pauseMutex);
        m_pauseCv.wait(lock, [&] { return !w.paused.load() || stopping(); });
    }
    w.rec.span(Phase::Pause, std::uint32_t(step), t0, w.rec.now());
}

void Engine::delayStep(WorkerState &w, std::int64_t step, std::int64_t computeNs)
{
    const double factor = w.slowdown.load();
    double extra = (factor - 1.0) * double(computeNs);
    if (m_config.jitter > 0)
        extra += m_config.jitter * double(computeNs) * w.jitterRng->uniform();
    if (extra < 1000.0)
        return;
    enter(w, Phase::Delay, step);
    const std::int64_t t0 = w.rec.now();
    sleepCancellable(std::int64_t(extra));
    w.rec.span(Phase::Delay, std::uint32_t(step), t0, w.rec.now());
}

void Engine::computeStep(WorkerState &w, std::int64_t step)
{
    waitWhilePaused(w, step);
    if (stopping())
        return;
    enter(w, Phase::Data, step);
    const BatchSampler sampler(m_train->samples, m_config.workers, m_config.batch,
                               m_config.shuffle, m_config.seed);
    {
        const std::int64_t t0 = w.rec.now();
        if (w.rec.tracing())
            w.rec.markCpu(t0);
        if (m_config.prefetch) {
            if (w.prefetchPending) {
                w.prefetch.wait();
                // Waiting for the prefetch is off the CPU too, but it is the data phase's
                // own time: descheduling is measured from here.
                if (w.rec.tracing())
                    w.rec.markCpu(w.rec.now());
                w.current ^= 1;
                w.buffers[w.current].handoff.load(std::memory_order_acquire);
                // Only the worker's own thread writes its ring, so the prefetch task leaves its
                // times in the buffer and the worker records them.
                const BatchBuffers &ready = w.buffers[w.current];
                w.rec.span(Phase::Data, std::uint32_t(step), ready.gatheredFrom, ready.gatheredTo,
                           0, Lane::Data);
            } else {
                BatchBuffers &b = w.buffers[w.current];
                gatherBatch(*m_train, sampler, step, w.index, m_config.batch, b.x.data(),
                            b.labels.data(), b.y.data());
            }
            // The next batch is assembled on oneTBB's threads while this one computes.
            BatchBuffers *next = &w.buffers[w.current ^ 1];
            WorkerState *ws = &w;
            const Dataset *data = m_train.get();
            const int rows = m_config.batch;
            next->handoff.store(1, std::memory_order_release);
            w.prefetch.run([ws, next, data, sampler, step, rows] {
                next->handoff.load(std::memory_order_acquire);
                next->gatheredFrom = ws->rec.now();
                gatherBatch(*data, sampler, step + 1, ws->index, rows, next->x.data(),
                            next->labels.data(), next->y.data());
                next->gatheredTo = ws->rec.now();
                next->handoff.store(2, std::memory_order_release);
            });
            w.prefetchPending = true;
        } else {
            BatchBuffers &b = w.buffers[w.current];
            gatherBatch(*m_train, sampler, step, w.index, m_config.batch, b.x.data(),
                        b.labels.data(), b.y.data());
        }
        if (w.devX.data()) { // the batch onto the GPU, queued ahead of the forward pass
            const BatchBuffers &b = w.buffers[w.current];
            w.device->upload(w.devX.data(), b.x.data(), b.x.size());
            w.device->uploadBytes(w.devLabels.data(), b.labels.data(),
                                  b.labels.size() * sizeof(std::int32_t));
            w.device->upload(w.devY.data(), b.y.data(), b.y.size());
        }
        const std::int64_t t1 = w.rec.now();
        w.rec.span(Phase::Data, std::uint32_t(step), t0, t1,
                   w.rec.tracing() ? double(w.rec.descheduledUntil(t0, t1)) : 0.0);
    }
    const BatchBuffers &b = w.buffers[w.current];
    const bool onDevice = w.devX.data() != nullptr;
    const float *x = onDevice ? w.devX.data() : b.x.data();
    const std::int32_t *labels = onDevice ? reinterpret_cast<const std::int32_t *>(w.devLabels.data())
                                          : b.labels.data();
    const float *y = onDevice ? w.devY.data() : b.y.data();
    enter(w, Phase::Forward, step);
    const std::int64_t computeStart = w.rec.now();
    const double loss = w.model->forwardLoss(x, labels, y, &w.rec, std::uint32_t(step));
    if (!std::isfinite(loss))
        throw std::runtime_error(std::string("the loss is ") +
                                 (std::isnan(loss) ? "NaN" : "infinite") +
                                 " (try a smaller train.lr)");
    w.rec.counter(CounterId::Loss, std::uint32_t(step), loss);
    enter(w, Phase::Backward, step);
    w.model->backward(&w.rec, std::uint32_t(step));
    w.rec.counter(CounterId::ActivationBytes, std::uint32_t(step),
                  double(w.model->peakActivationBytes()));
    // The gradients must exist before anyone reads them, and a barrier's wait should measure
    // waiting for others, not for this worker's own queue (a no-op on the CPU).
    w.device->synchronize();
    w.rec.collectDeviceSpans();
    delayStep(w, step, w.rec.now() - computeStart);
}

bool Engine::barrierWait(WorkerState &w, std::uint32_t step, std::int64_t &t0)
{
    // The wait span's value: how long after the barrier opened this worker resumed, time it
    // could have run but the OS did not run it.
    std::int64_t released = 0;
    const bool open = m_barrier->arriveAndWait(t0, &released);
    const std::int64_t t1 = w.rec.now();
    w.rec.span(Phase::Wait, step, t0, t1, open ? double(t1 - std::clamp(released, t0, t1)) : 0.0);
    t0 = t1;
    return open;
}

void Engine::syncStep(WorkerState &w, std::int64_t step)
{
    const auto s32 = std::uint32_t(step);
    computeStep(w, step);
    if (stopping())
        return;
    // From here the phases follow each other without a gap: each starts where the last ended.
    enter(w, Phase::Reduce, step);
    std::int64_t t0 = w.rec.now();
    if (const std::size_t staged = m_exchange->prepare(w.index))
        t0 = w.rec.spanToNow(Phase::Reduce, s32, t0, double(staged));
    enter(w, Phase::Wait, step);
    const bool arrived = barrierWait(w, s32, t0);
    if (!arrived)
        return;

    // Shared memory: each worker averages one slice, summing the replicas in worker order, so
    // the result is the same bit for bit whatever the timing. NCCL: one all-reduce per worker.
    enter(w, Phase::Reduce, step);
    const std::size_t moved = m_exchange->reduce(w.index);
    t0 = w.rec.spanToNow(Phase::Reduce, s32, t0, double(moved));

    enter(w, Phase::Wait, step);
    const bool reduced = barrierWait(w, s32, t0);
    if (!reduced)
        return;

    enter(w, Phase::Apply, step);
    {
        ScopedSpan apply(&w.rec, Phase::Apply, s32, t0);
        w.optimizer->step(w.model->params(), m_exchange->finish(w.index));
    }

    const std::int64_t done = step + 1;
    if (w.index == 0)
        m_progress = done;
    // The final evaluation too is shared: every worker its slice of the held-out set, as in
    // the periodic ones (one worker evaluating all of it showed as one long span).
    if (m_evalModel && ((m_config.evalEvery > 0 && done % m_config.evalEvery == 0) || done == m_config.steps))
        evaluateShard(w, done);
}

void Engine::evaluateShard(WorkerState &w, std::int64_t step)
{
    enter(w, Phase::Eval, step);
    const std::int64_t samples = m_eval->samples;
    const std::int64_t lo = samples * w.index / m_config.workers;
    const std::int64_t hi = samples * (w.index + 1) / m_config.workers;
    const int inW = m_eval->features;
    const int outW = m_eval->outputs;
    const std::int64_t t0 = w.rec.now();
    const EvalResult part = w.model->evaluate(
        m_eval->x.data() + lo * inW, m_eval->labels.empty() ? nullptr : m_eval->labels.data() + lo,
        m_eval->y.empty() ? nullptr : m_eval->y.data() + lo * outW, hi - lo);
    w.rec.span(Phase::Eval, std::uint32_t(step), t0, w.rec.now(), double(step));
    std::lock_guard lock(m_evalMutex);
    m_evalShards[std::size_t(w.index)] = part;
    if (++m_evalShardsDone < m_config.workers)
        return;
    // The last shard in: combine in worker order, so the figure does not depend on timing. No
    // worker starts the next round before this one ends: the barriers of the steps between
    // wait for the worker doing this.
    m_evalShardsDone = 0;
    EvalResult all;
    for (const EvalResult &s : m_evalShards) {
        all.samples += s.samples;
        all.lossSum += s.lossSum;
        all.correct += s.correct;
    }
    all.loss = all.samples ? all.lossSum / double(all.samples) : 0.0;
    all.accuracy = all.samples ? double(all.correct) / double(all.samples) : 0.0;
    recordEval(w, step, all);
}

bool Engine::awaitServerTurn(WorkerState &w, bool push, std::unique_lock<std::mutex> &lock)
{
    if (m_script.empty())
        return true;
    const int code = push ? -(w.index + 1) : (w.index + 1);
    m_serverCv.wait(lock, [&] {
        return stopping() || m_scriptPos >= m_script.size() || m_script[m_scriptPos] == code;
    });
    if (stopping())
        return false;
    if (m_scriptPos < m_script.size())
        ++m_scriptPos;
    // Whoever is next in the script may be waiting, even if this operation goes no further.
    m_serverCv.notify_all();
    return true;
}

bool Engine::asyncStep(WorkerState &w, std::int64_t step)
{
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

    if (m_config.maxStaleness >= 0) {
        enter(w, Phase::Wait, step);
        std::unique_lock lock(m_serverMutex);
        auto ahead = [&] {
            const std::int64_t slowest = *std::min_element(m_done.begin(), m_done.end());
            return step - slowest > m_config.maxStaleness;
        };
        if (ahead()) {
            const std::int64_t t0 = w.rec.now();
            m_serverCv.wait(lock, [&] {
                return stopping() || m_version >= m_config.steps || !ahead();
            });
            w.rec.span(Phase::Wait, s32, t0, w.rec.now());
        }
        if (stopping() || m_version >= m_config.steps)
            return false;
    }

    enter(w, Phase::Pull, step);
    {
        std::unique_lock lock(m_serverMutex, std::defer_lock);
        lockServer(lock);
        if (!awaitServerTurn(w, false, lock) || m_version >= m_config.steps)
            return false;
        const std::int64_t t0 = w.rec.now();
        // Finished before the lock is let go: the next push changes the master copy.
        w.device->copyFrom(*m_sharedDevice, w.model->params(), m_master.data(), n * sizeof(float));
        w.device->synchronize();
        w.pulledVersion = m_version;
        w.rec.span(Phase::Pull, s32, t0, w.rec.now(), double(m_version));
        m_serverCv.notify_all();
    }

    computeStep(w, step);
    if (stopping())
        return false;

    enter(w, Phase::Push, step);
    bool evalDue = false;
    std::int64_t version = 0;
    {
        std::unique_lock lock(m_serverMutex, std::defer_lock);
        lockServer(lock);
        if (!awaitServerTurn(w, true, lock) || m_version >= m_config.steps)
            return false;
        const std::int64_t t0 = w.rec.now();
        const std::int64_t staleness = m_version - w.pulledVersion;
        const float scale = m_config.stalenessLr ? 1.0f / float(std::max<std::int64_t>(1, staleness))
                                                 : 1.0f;
        const float *grads = w.model->grads();
        if (w.device->memorySpace() != m_sharedDevice->memorySpace()) {
            m_sharedDevice->copyFrom(*w.device, m_pushStaging.data(), grads, n * sizeof(float));
            grads = m_pushStaging.data();
        }
        m_serverOptimizer->step(m_master.data(), grads, scale);
        m_sharedDevice->synchronize();
        version = ++m_version;
        ++m_done[std::size_t(w.index)];
        m_progress = version;
        w.rec.span(Phase::Push, s32, t0, w.rec.now(), double(staleness));
        w.rec.counter(CounterId::Staleness, s32, double(staleness));
        w.rec.counter(CounterId::Version, s32, double(version));
        evalDue = m_evalModel && m_config.evalEvery > 0 && version % m_config.evalEvery == 0 &&
                  version < m_config.steps;
        if (evalDue) // a consistent snapshot: the server's parameters at this version
            m_sharedDevice->download(w.snapshot.data(), m_master.data(), n);
        m_serverCv.notify_all();
    }
    if (evalDue)
        evaluate(w, version, w.snapshot.data(), version);
    return !stopping();
}

void Engine::evaluate(WorkerState &w, std::int64_t step, const float *params, std::int64_t version)
{
    std::lock_guard lock(m_evalMutex);
    const std::int64_t t0 = w.rec.now();
    m_evalModel->device().upload(m_evalModel->params(), params, m_evalModel->paramCount());
    const EvalResult r = m_evalModel->evaluate(m_eval->x.data(), m_eval->labels.data(),
                                               m_eval->y.data(), m_eval->samples);
    w.rec.span(Phase::Eval, std::uint32_t(step), t0, w.rec.now(), double(version));
    recordEval(w, step, r);
}

void Engine::recordEval(WorkerState &w, std::int64_t step, const EvalResult &r)
{
    const auto s32 = std::uint32_t(step);
    w.rec.counter(CounterId::EvalLoss, s32, r.loss);
    if (m_config.classification())
        w.rec.counter(CounterId::EvalAccuracy, s32, r.accuracy);
    // Async workers evaluate their snapshots concurrently, so a later version can finish
    // first; the history stays in step order.
    const auto at = std::upper_bound(m_evalHistory.begin(), m_evalHistory.end(), step,
                                     [](std::int64_t s, const EvalPoint &p) { return s < p.step; });
    m_evalHistory.insert(at, {step, r.loss, r.accuracy});
}

} // namespace syncopate
