#include "engine.h"

#include "batchnormsync.h"

#include "strategy.h"
#include "worker.h"

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

Engine::Engine(RunConfig config, std::shared_ptr<const Dataset> train,
               std::shared_ptr<const Dataset> eval, std::shared_ptr<Communicator> comm)
    : m_config(std::move(config)), m_train(std::move(train)), m_eval(std::move(eval)),
      m_events(m_config.workers),
      m_comm(comm ? std::move(comm) : std::make_shared<InProcessCommunicator>())
{
    ModelSpec spec{m_config.layers, parseActivation(m_config.activation),
                   m_config.classification(), m_config.checkpoint ? m_config.checkpointEvery : 0};
    spec.batchNorm = m_config.batchnorm != "none";
    m_initialParams = Model::initialParams(spec, m_config.seed);
    const int first = m_comm->firstWorker(m_config.workers);
    const int local = m_comm->localWorkers(m_config.workers);
    // Refused before any replica is built.
    if (m_config.allreduce == "mpi" && m_comm->kind() != "mpi")
        throw ConfigError("sync.allreduce = \"mpi\": needs MPI ranks (mpirun -np N syncopate-cli "
                          "run ...); in one process the workers average in shared memory",
                          {"sync.allreduce"});
    if (m_config.batchnorm == "sync" && m_comm->ranks() > 1)
        throw ConfigError("model.batchnorm = \"sync\": batch statistics are all-reduced between the "
                          "worker threads of one process; over MPI ranks use \"local\"",
                          {"model.batchnorm"});
    for (int l = 0; l < local; ++l) {
        const int i = first + l;
        auto w = std::make_unique<WorkerState>(i, l, m_clock);
        w->device = makeDevice(i);
        w->model = std::make_unique<Model>(*w->device, spec, m_config.batch);
        w->model->setParams(m_initialParams);
        w->slowdown = m_config.slowdown[std::size_t(i)];
        w->jitterRng = std::make_unique<Rng>(m_config.seed, 1000 + std::uint64_t(i));
        const std::size_t targets =
            m_train->classification ? 0 : std::size_t(m_config.batch) * m_train->outputs;
        w->input = std::make_unique<InputPipeline>(
            *m_train,
            BatchSampler(m_train->samples, m_config.workers, m_config.batch, m_config.shuffle,
                         m_config.seed),
            i, m_config.batch, m_config.prefetch, m_config.costUs, m_clock, m_stop);
        if (!w->device->hostAccessible()) {
            static_assert(sizeof(std::int32_t) == sizeof(float), "labels share float-sized buffers");
            w->devX = DeviceBuffer(*w->device, std::size_t(m_config.batch) * m_train->features);
            w->devLabels = DeviceBuffer(*w->device, std::size_t(m_config.batch));
            w->devY = DeviceBuffer(*w->device, targets);
        }
        const std::size_t stats = w->model->runningStatsCount();
        w->bnBatch.resize(stats);
        w->bnOwn.resize(stats);
        m_workers.push_back(std::move(w));
    }
    if (m_config.batchnorm == "sync") {
        std::vector<Device *> devices;
        for (const auto &w : m_workers)
            devices.push_back(w->device.get());
        const int widest = *std::max_element(m_config.layers.begin(), m_config.layers.end());
        // Backward hands over two sums per channel, forward one.
        m_bnGroup = std::make_unique<BatchNormGroup>(devices, 2 * std::size_t(widest));
        for (const auto &w : m_workers)
            w->model->setBatchNormReducer(&m_bnGroup->member(w->local));
    }
    if (m_eval && m_eval->samples > 0) {
        m_evalDevice = makeDevice(first);
        ModelSpec plain = spec;
        plain.checkpointEvery = 0;
        m_evalModel = std::make_unique<Model>(*m_evalDevice, plain, m_config.batch);
        // Room for every evaluation of the run, so recording one does not allocate on the
        // thread that completes it (async runs count server updates, which steps bound too).
        m_evalHistory.reserve(std::size_t(
            (m_config.evalEvery > 0 ? m_config.steps / m_config.evalEvery : 0) + 2));
        if (!m_config.async()) // sync evaluates in shards, at least at the end
            for (const auto &w : m_workers)
                w->model->reserveEvaluation();
    }
    // After the evaluation model: the async strategy sizes its evaluator's snapshots by it.
    m_strategy = m_config.async() ? makeAsyncStrategy(*this) : makeSyncStrategy(*this);
}

std::unique_ptr<Device> Engine::makeDevice(int worker) const
{
    // A device that cannot be had is a problem of the "device" key; running out of memory
    // later is not.
    try {
        return createDevice(m_config.device, worker, DeviceOptions{m_config.tf32, threadsPerWorker()});
    } catch (const DeviceError &e) {
        throw ConfigError(e.what(), {"device"});
    }
}

WorkerState *Engine::localWorker(int worker) const
{
    const int l = worker - (m_workers.empty() ? 0 : m_workers.front()->index);
    return l >= 0 && l < int(m_workers.size()) ? m_workers[std::size_t(l)].get() : nullptr;
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
    // Rank 0 alone writes the run; every rank hears whether it could, before anything runs.
    std::exception_ptr writerError;
    std::string writerWhat;
    if (!m_outputDir.empty() && m_comm->root()) {
        try {
            m_writer = std::make_unique<RunWriter>(m_outputDir, m_config, m_initialParams);
        } catch (const std::exception &e) {
            writerError = std::current_exception();
            writerWhat = e.what();
        }
        if (!m_retentionSet)
            m_retention = Retention::None; // the directory has it all
    }
    if (m_comm->ranks() > 1)
        m_comm->agreeReady(writerWhat); // throws CommError naming the rank that failed
    if (writerError)
        std::rethrow_exception(writerError);
    m_events.setRetention(m_retention == Retention::All    ? EventStore::Keep::All
                          : m_retention == Retention::Feed ? EventStore::Keep::Unread
                                                           : EventStore::Keep::Nothing);
    for (auto &w : m_workers)
        w->rec.setTracing(m_tracing);
    m_clock.restart(); // time 0 is the start, not the construction of the replicas
    m_comm->startClock(m_clock);
    m_state = RunState::Running;
    m_running = int(m_workers.size());
    m_supervisor = std::thread([this] { supervise(); });
}

void Engine::requestStop()
{
    m_stop = true;
    if (m_strategy)
        m_strategy->cancel();
    if (m_bnGroup)
        m_bnGroup->cancel();
    m_comm->cancel();
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

std::vector<float> Engine::finalParams() const { return m_strategy->finalParams(); }

std::string Engine::reduceAlgorithm() const { return m_strategy->reduceAlgorithm(); }

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

EvaluatorStatus Engine::evaluatorStatus() const { return m_strategy->evaluatorStatus(); }

void Engine::holdEvaluator(bool hold) { m_strategy->holdEvaluator(hold); }

void Engine::setSlowdown(int worker, double factor)
{
    if (WorkerState *w = localWorker(worker))
        w->slowdown = std::max(1.0, factor);
    else if (m_comm && worker >= 0 && worker < m_config.workers) // a worker of another rank
        m_comm->sendKnob(m_comm->rankOfWorker(m_config.workers, worker), {worker, -1, factor});
}

double Engine::slowdown(int worker) const
{
    const WorkerState *w = localWorker(worker);
    return w ? w->slowdown.load() : 1.0;
}

void Engine::setPaused(int worker, bool paused)
{
    WorkerState *w = localWorker(worker);
    if (!w) {
        if (m_comm && worker >= 0 && worker < m_config.workers)
            m_comm->sendKnob(m_comm->rankOfWorker(m_config.workers, worker), {worker, paused ? 1 : 0, 1.0});
        return;
    }
    {
        std::lock_guard lock(m_pauseMutex);
        w->paused = paused;
    }
    m_pauseCv.notify_all();
}

bool Engine::paused(int worker) const
{
    const WorkerState *w = localWorker(worker);
    return w && w->paused.load();
}

void Engine::injectFault(int worker, std::int64_t step, Phase phase)
{
    m_fault = {worker, step, phase};
}

void Engine::scriptServerOrder(std::vector<int> order) { m_script = std::move(order); }

void Engine::scriptSyncArrivals(std::vector<int> order) { m_syncScript = std::move(order); }

std::vector<float> Engine::replicaParams(int worker) const
{
    const WorkerState *w = localWorker(worker);
    return w ? w->model->paramsToHost() : std::vector<float>{};
}

void Engine::fail(int worker, std::int64_t step, Phase phase, const std::string &what)
{
    std::string who = "worker " + std::to_string(worker);
    if (m_comm->ranks() > 1)
        who += " (" + m_comm->rankName(m_comm->rankOfWorker(m_config.workers, worker)) + ")";
    fail(who, step, phase, what);
}

void Engine::fail(const std::string &who, std::int64_t step, Phase phase, const std::string &what)
{
    {
        std::lock_guard lock(m_doneMutex);
        if (m_error.empty())
            m_error = who + " failed at step " + std::to_string(step) + " (" + phaseName(phase) + "): " + what;
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

void Engine::drain(bool final)
{
    m_drained.clear();
    for (auto &w : m_workers)
        w->ring.drain(m_drained);
    m_strategy->drainRecords(m_drained);
    if (!m_comm->root()) {
        // Another rank: the records go to rank 0, on its clock, in batches of about 100 ms
        // (the workers' rings hold seconds of them).
        for (Record r : m_drained) {
            const std::int64_t d = r.end - r.start;
            r.start = std::max<std::int64_t>(0, m_comm->toRootClock(r.start));
            r.end = r.start + d;
            m_outbox.push_back(r);
        }
        if (!m_drained.empty())
            m_events.append(m_drained);
        const std::int64_t now = m_clock.now();
        if (final || now - m_lastSendNs >= 100'000'000) {
            m_comm->sendRecords(m_outbox);
            m_lastSendNs = now;
        }
        return;
    }
    m_comm->receiveRecords(m_drained);
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

void Engine::keepInTouch()
{
    // Knobs turned on rank 0 (or another rank) for this rank's workers.
    m_knobs.clear();
    m_comm->takeKnobs(m_knobs);
    for (const Communicator::Knob &k : m_knobs) {
        if (!localWorker(k.worker))
            continue;
        if (k.pause >= 0)
            setPaused(k.worker, k.pause != 0);
        else
            setSlowdown(k.worker, k.slowdown);
    }
    if (!m_comm->poll()) {
        const std::string why = m_comm->error();
        if (!why.empty()) {
            std::lock_guard lock(m_doneMutex);
            if (m_error.empty())
                m_error = why;
        }
        m_stopAnnounced = true; // the others know: it came from them
        requestStop();
    }
    if (stopping() && !m_stopAnnounced) {
        m_stopAnnounced = true;
        m_comm->announceStop(error());
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
    if (const EvaluatorStatus ev = evaluatorStatus(); ev.active)
        o.evalsSkipped = ev.skipped;
    o.reduceAlgorithm = reduceAlgorithm();
    o.devices = deviceNames();
    if (m_comm->ranks() > 1) {
        // Where each rank ran, and how well its clock was put on rank 0's.
        const auto start = m_comm->clockOffsets(false), end = m_comm->clockOffsets(true);
        const auto fits = m_comm->clockFits();
        const auto hosts = m_comm->hosts();
        for (int r = 0; r < m_comm->ranks(); ++r) {
            const auto i = std::size_t(r);
            RankInfo info;
            info.host = hosts[i];
            info.firstWorker = m_comm->firstWorker(m_config.workers, r);
            info.workers = m_comm->firstWorker(m_config.workers, r + 1) - info.firstWorker;
            info.offsetNs = start[i].offsetNs;
            info.uncertaintyNs = start[i].uncertaintyNs;
            info.endOffsetNs = end[i].offsetNs;
            info.endUncertaintyNs = end[i].uncertaintyNs;
            if (i < fits.size()) {
                info.driftPpm = fits[i].driftPpm;
                info.residualNs = fits[i].residualNs;
                info.clockMeasurements = fits[i].measurements;
            }
            o.ranks.push_back(info);
        }
    }
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
    InputPipeline::markNamedThread();
    m_strategy->beforeWorkers();
    for (auto &w : m_workers) {
        WorkerState *ws = w.get();
        ws->thread = std::thread([this, ws] {
            runWorker(*ws);
            m_running.fetch_sub(1);
            m_doneCv.notify_all();
        });
    }
    // Drain often enough that rings never fill, rarely enough to cost nothing. Over ranks, every
    // 3 ms: the poll answers other ranks' clock measurements, whose round trips it lengthens. In
    // one process every 20 ms (a ring holds 65536 records, over a second of the busiest worker):
    // each wake-up takes a core from a worker when they fill the machine, and in sync the others
    // then wait at the barrier for it (at 3 ms, 54% of 2 sync workers' stalls on 2 cores were
    // waits for a worker the OS was not running). A watcher polls at 30 Hz, so 20 ms is not seen.
    const auto interval = std::chrono::milliseconds(m_comm->ranks() > 1 ? 3 : 20);
    while (m_running.load() > 0) {
        drain();
        keepInTouch();
        std::unique_lock lock(m_doneMutex);
        m_doneCv.wait_for(lock, interval, [&] { return m_running.load() == 0; });
    }
    for (auto &w : m_workers)
        w->thread.join();
    keepInTouch();
    drain(true);
    m_strategy->afterWorkers();
    drain(true);
    // Every rank's records in, and the clocks measured again, before the directory is closed.
    if (!m_comm->finishRun(m_clock)) {
        std::lock_guard lock(m_doneMutex);
        if (m_error.empty())
            m_error = m_comm->error();
    }
    drain(true);
    const bool failed = !error().empty();
    const bool complete = m_progress.load() >= m_config.steps;
    m_endNs = m_clock.now();
    RunState end;
    {
        std::lock_guard lock(m_doneMutex);
        end = failed ? RunState::Failed : complete ? RunState::Finished : RunState::Stopped;
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
    InputPipeline::markNamedThread();
    try {
        // Per-thread library state (OpenMP's thread count) before the first step, so that
        // setting it up is not timed as a step and allocates nothing inside one.
        w.device->bindThread();
        if (DeviceTimer *timer = w.device->timer()) {
            timer->calibrate([this] { return m_clock.now(); });
            w.rec.attachTimer(timer);
        }
        m_strategy->runWorker(w);
    } catch (const std::exception &e) {
        fail(w.index, w.step, w.phase, e.what());
    }
    flushDeviceSpans(w);
    try {
        w.input->close();
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
    std::int64_t t0 = w.rec.now();
    if (w.rec.tracing())
        w.rec.markCpu(t0);
    const InputPipeline::Batch batch = w.input->acquire(step);
    if (!batch.buffers)
        return; // stopping
    const BatchBuffers &b = *batch.buffers;
    if (batch.waited()) {
        // The batch was not ready: the step waited for the input pipeline, not for anyone.
        w.rec.span(Phase::InputWait, std::uint32_t(step), t0, batch.waitTo);
        t0 = batch.waitTo;
        if (w.rec.tracing())
            w.rec.markCpu(t0);
    }
    if (w.input->depth() > 0) // only the worker's thread writes its ring: it records the producer's times
        w.rec.span(Phase::Data, std::uint32_t(step), b.gatheredFrom, b.gatheredTo, 0, Lane::Data);
    if (w.devX.data()) { // the batch onto the GPU, queued ahead of the forward pass
        w.device->upload(w.devX.data(), b.x.data(), b.x.size());
        w.device->uploadBytes(w.devLabels.data(), b.labels.data(),
                              b.labels.size() * sizeof(std::int32_t));
        w.device->upload(w.devY.data(), b.y.data(), b.y.size());
    }
    {
        const std::int64_t t1 = w.rec.now();
        w.rec.span(Phase::Data, std::uint32_t(step), t0, t1,
                   w.rec.tracing() ? double(w.rec.descheduledUntil(t0, t1)) : 0.0);
    }
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

void Engine::evaluate(Recorder &rec, std::int64_t step, const float *params, std::int64_t version,
                      const float *running)
{
    // The history's lock only for the record: the collector reads the history for the summary
    // and should not wait for an evaluation.
    const std::int64_t t0 = rec.now();
    m_evalModel->device().upload(m_evalModel->params(), params, m_evalModel->paramCount());
    const EvalResult r = m_evalModel->evaluate(m_eval->x.data(), m_eval->labels.data(),
                                               m_eval->y.data(), m_eval->samples, running);
    rec.span(Phase::Eval, std::uint32_t(step), t0, rec.now(), double(version));
    std::lock_guard lock(m_evalMutex);
    recordEval(rec, step, r);
}

void Engine::recordEval(Recorder &rec, std::int64_t step, const EvalResult &r)
{
    const auto s32 = std::uint32_t(step);
    rec.counter(CounterId::EvalLoss, s32, r.loss);
    if (m_config.classification())
        rec.counter(CounterId::EvalAccuracy, s32, r.accuracy);
    // Kept in step order whoever records (sync: the last worker of a step to finish its shard).
    const auto at = std::upper_bound(m_evalHistory.begin(), m_evalHistory.end(), step,
                                     [](std::int64_t s, const EvalPoint &p) { return s < p.step; });
    m_evalHistory.insert(at, {step, r.loss, r.accuracy});
}

} // namespace syncopate
