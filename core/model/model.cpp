#include "model.h"

#include "random.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace syncopate {

namespace {

std::size_t layerParams(const ModelSpec &spec, int l)
{
    const std::size_t out = std::size_t(spec.layers[l + 1]);
    return out * (spec.layers[l] + 1) + (spec.hasBatchNorm(l) ? 2 * out : 0);
}

} // namespace

std::size_t ModelSpec::paramCount() const { return weightOffset(linearLayers()); }

std::size_t ModelSpec::weightOffset(int layer) const
{
    std::size_t n = 0;
    for (int l = 0; l < layer; ++l)
        n += layerParams(*this, l);
    return n;
}

std::size_t ModelSpec::biasOffset(int layer) const
{
    return weightOffset(layer) + std::size_t(layers[layer + 1]) * layers[layer];
}

std::size_t ModelSpec::gammaOffset(int layer) const
{
    return biasOffset(layer) + std::size_t(layers[layer + 1]);
}

std::size_t ModelSpec::betaOffset(int layer) const
{
    return gammaOffset(layer) + std::size_t(layers[layer + 1]);
}

std::size_t ModelSpec::runningStatsCount() const { return runningMeanOffset(linearLayers()); }

std::size_t ModelSpec::runningMeanOffset(int layer) const
{
    std::size_t n = 0;
    for (int l = 0; l < layer; ++l)
        if (hasBatchNorm(l))
            n += 2 * std::size_t(layers[l + 1]);
    return n;
}

std::size_t ModelSpec::runningVarOffset(int layer) const
{
    return runningMeanOffset(layer) + std::size_t(layers[layer + 1]);
}

Activation parseActivation(const std::string &name)
{
    if (name == "relu")
        return Activation::Relu;
    if (name == "tanh")
        return Activation::Tanh;
    if (name == "gelu")
        return Activation::Gelu;
    throw std::invalid_argument("unknown activation \"" + name + "\"");
}

Model::Model(Device &device, ModelSpec spec, int batch)
    : m_device(&device), m_spec(std::move(spec)), m_batch(batch),
      m_checkpoint(m_spec.checkpointEvery > 0),
      m_params(device, m_spec.paramCount()), m_paramData(m_params.data()),
      m_grads(device, m_spec.paramCount()),
      m_running(device, m_spec.runningStatsCount()), m_batchStats(device, m_spec.runningStatsCount())
{
    const int L = m_spec.linearLayers();
    if (L < 1)
        throw std::invalid_argument("a model needs at least one layer");
    const int maxWidth = *std::max_element(m_spec.layers.begin(), m_spec.layers.end());
    auto allocate = [&](std::size_t floats) {
        m_storage.emplace_back(device, floats);
        m_capacity += std::int64_t(floats * sizeof(float));
        return m_storage.back().data();
    };
    auto makeSlot = [&](int width, bool hidden) {
        Slot s;
        s.z = allocate(std::size_t(batch) * width);
        s.y = hidden && m_spec.batchNorm ? allocate(std::size_t(batch) * width) : s.z;
        s.a = hidden ? allocate(std::size_t(batch) * width) : s.z;
        return s;
    };
    if (!m_checkpoint) {
        for (int l = 0; l < L; ++l)
            m_slots.push_back(makeSlot(m_spec.layers[l + 1], l < L - 1));
    } else {
        // Scratch position j serves layer segmentBegin(s) + j of every segment: size it for the
        // widest of them.
        const int k = m_spec.checkpointEvery;
        for (int j = 0; j < std::min(k, L); ++j) {
            int width = 0;
            bool hidden = false;
            for (int s = 0; s < segmentCount(); ++s) {
                const int l = segmentBegin(s) + j;
                if (l < segmentEnd(s)) {
                    width = std::max(width, m_spec.layers[l + 1]);
                    hidden = hidden || l < L - 1;
                }
            }
            m_slots.push_back(makeSlot(width, hidden));
        }
        m_boundaries.assign(std::size_t(segmentCount()), nullptr);
        for (int s = 1; s < segmentCount(); ++s)
            m_boundaries[s] = allocate(std::size_t(batch) * m_spec.layers[segmentBegin(s)]);
    }
    m_gradA = DeviceBuffer(device, std::size_t(batch) * maxWidth);
    m_gradB = DeviceBuffer(device, std::size_t(batch) * maxWidth);
    // Batch norm sits between the product and the activation, so its layers' plans stop at z.
    for (int l = 0; l < L; ++l)
        m_plans.push_back(device.planLinear(
            {batch, m_spec.layers[l], m_spec.layers[l + 1],
             l < L - 1 && !m_spec.hasBatchNorm(l) ? m_spec.activation : Activation::Identity}));
    if (m_spec.batchNorm && L > 1) {
        m_channelSums = DeviceBuffer(device, 2 * std::size_t(maxWidth));
        setRunningStats(initialRunningStats(m_spec));
    }
}

std::vector<float> Model::initialParams(const ModelSpec &spec, std::uint64_t seed)
{
    std::vector<float> p(spec.paramCount(), 0.0f);
    Rng rng(seed, 7);
    const int L = spec.linearLayers();
    for (int l = 0; l < L; ++l) {
        const int in = spec.layers[l], out = spec.layers[l + 1];
        float *w = p.data() + spec.weightOffset(l);
        const bool he = l < L - 1 && spec.activation != Activation::Tanh;
        if (he) {
            const double std = std::sqrt(2.0 / in);
            for (std::size_t i = 0; i < std::size_t(in) * out; ++i)
                w[i] = float(rng.normal() * std);
        } else {
            const double bound = std::sqrt(6.0 / (in + out));
            for (std::size_t i = 0; i < std::size_t(in) * out; ++i)
                w[i] = float(rng.uniform(-bound, bound));
        }
        if (spec.hasBatchNorm(l))
            std::fill_n(p.begin() + std::ptrdiff_t(spec.gammaOffset(l)), out, 1.0f);
    }
    return p;
}

std::vector<float> Model::initialRunningStats(const ModelSpec &spec)
{
    std::vector<float> r(spec.runningStatsCount(), 0.0f);
    for (int l = 0; l < spec.linearLayers(); ++l)
        if (spec.hasBatchNorm(l))
            std::fill_n(r.begin() + std::ptrdiff_t(spec.runningVarOffset(l)), spec.layers[l + 1],
                        1.0f);
    return r;
}

std::vector<float> Model::runningStatsToHost() const
{
    std::vector<float> host(runningStatsCount());
    m_device->download(host.data(), m_running.data(), host.size());
    return host;
}

void Model::runningStatsToHost(float *host) const
{
    m_device->download(host, m_running.data(), runningStatsCount());
}

void Model::batchStatsToHost(float *host) const
{
    // Kept as mean and 1/std for backward: the variance comes back from 1/std, to float
    // precision, which is all the running statistics hold.
    m_device->download(host, m_batchStats.data(), m_batchStats.size());
    const double rows = normalisedRows();
    for (int l = 0; l < m_spec.linearLayers(); ++l) {
        if (!m_spec.hasBatchNorm(l))
            continue;
        float *v = host + m_spec.runningVarOffset(l);
        for (int c = 0; c < m_spec.layers[l + 1]; ++c) {
            const double invstd = v[c];
            const double biased = std::max(0.0, 1.0 / (invstd * invstd) - double(kBatchNormEps));
            v[c] = float(biased * rows / (rows - 1.0));
        }
    }
}

void Model::setRunningStats(const std::vector<float> &host)
{
    if (host.size() != runningStatsCount())
        throw std::invalid_argument("setRunningStats: expected " +
                                    std::to_string(runningStatsCount()) + " values, got " +
                                    std::to_string(host.size()));
    m_device->upload(m_running.data(), host.data(), host.size());
}

void Model::setParams(const std::vector<float> &host)
{
    if (host.size() != paramCount())
        throw std::invalid_argument("setParams: expected " + std::to_string(paramCount()) +
                                    " values, got " + std::to_string(host.size()));
    m_device->upload(m_paramData, host.data(), host.size());
}

void Model::shareParams(const Model &owner)
{
    if (owner.paramCount() != paramCount() || owner.m_device->memorySpace() != m_device->memorySpace())
        throw std::invalid_argument("shareParams: another shape or another memory space");
    m_params.reset();
    m_paramData = owner.m_paramData;
}

std::vector<float> Model::paramsToHost() const
{
    std::vector<float> host(paramCount());
    m_device->download(host.data(), m_paramData, host.size());
    return host;
}

std::vector<float> Model::gradsToHost() const
{
    std::vector<float> host(paramCount());
    m_device->download(host.data(), m_grads.data(), host.size());
    return host;
}

int Model::segmentCount() const
{
    const int k = m_spec.checkpointEvery;
    return (m_spec.linearLayers() + k - 1) / k;
}

int Model::segmentBegin(int s) const { return s * m_spec.checkpointEvery; }

int Model::segmentEnd(int s) const
{
    return std::min(m_spec.linearLayers(), (s + 1) * m_spec.checkpointEvery);
}

std::int64_t Model::outputBytes(int l) const
{
    return std::int64_t(m_batch) * m_spec.layers[l + 1] * std::int64_t(sizeof(float));
}

std::int64_t Model::slotBytes(int l) const
{
    const bool hidden = l < m_spec.linearLayers() - 1;
    return outputBytes(l) * (hidden ? (m_spec.hasBatchNorm(l) ? 3 : 2) : 1);
}

Model::Slot Model::slotFor(int l) const
{
    if (!m_checkpoint)
        return m_slots[std::size_t(l)];
    return m_slots[std::size_t(l % m_spec.checkpointEvery)];
}

const float *Model::inputOf(int l) const
{
    if (l == 0)
        return m_input;
    if (m_checkpoint && l % m_spec.checkpointEvery == 0)
        return m_boundaries[std::size_t(l / m_spec.checkpointEvery)];
    return slotFor(l - 1).a;
}

void Model::hold(std::int64_t bytes)
{
    m_held += bytes;
    m_peak = std::max(m_peak, m_held);
}

void Model::release(std::int64_t bytes) { m_held -= bytes; }

void Model::forwardLayer(int l, const float *in, const Slot &s, float *a, bool recompute)
{
    LinearPlan &plan = *m_plans[std::size_t(l)];
    if (!m_spec.hasBatchNorm(l)) {
        plan.forward(in, weight(l), bias(l), s.z, a);
        return;
    }
    const int width = m_spec.layers[l + 1];
    plan.forward(in, weight(l), bias(l), s.z, s.z);
    if (!recompute)
        batchStatistics(l, s.z);
    const float *mean = m_batchStats.data() + m_spec.runningMeanOffset(l);
    const float *invstd = m_batchStats.data() + m_spec.runningVarOffset(l);
    m_device->batchNormForward(s.z, mean, invstd, gamma(l), beta(l), m_batch, width, s.z, s.y);
    m_device->activationForward(m_spec.activation, s.y, a, std::size_t(m_batch) * width);
}

bool Model::allreduce(float *data, std::size_t n)
{
    ScopedSpan span(m_recorder, Phase::Reduce, m_step);
    span.setValue(double(n * sizeof(float)));
    return m_reducer->allreduceSum(data, n);
}

double Model::normalisedRows() const
{
    return double(m_batch) * (m_shared ? m_reducer->workers() : 1);
}

void Model::batchStatistics(int l, const float *z)
{
    // Two passes (mean, then squares about it), each all-reduced in sync mode: one more
    // reduction than sum and sum of squares would need, but no cancellation, so N workers agree
    // with one worker of N times the batch to rounding.
    const int width = m_spec.layers[l + 1];
    float *sum = m_channelSums.data();
    float *sq = sum + m_channelSums.size() / 2;
    m_device->biasGrad(z, sum, m_batch, width);
    if (m_shared && allreduce(sum, std::size_t(width))) {
        m_device->batchNormCenteredSquares(z, sum, float(1.0 / normalisedRows()), m_batch, width,
                                           sq);
        m_shared = allreduce(sq, std::size_t(width));
    } else if (m_shared) {
        m_shared = false;
    }
    if (!m_shared) {
        // Local batch norm, or a cancelled run (the step is not used; its numbers stay finite).
        if (m_reducer)
            m_device->biasGrad(z, sum, m_batch, width);
        m_device->batchNormCenteredSquares(z, sum, float(1.0 / m_batch), m_batch, width, sq);
    }
    const double rows = normalisedRows();
    m_device->batchNormStatistics(sum, sq, rows, kBatchNormEps, kBatchNormMomentum, width,
                                  m_batchStats.data() + m_spec.runningMeanOffset(l),
                                  m_batchStats.data() + m_spec.runningVarOffset(l),
                                  m_running.data() + m_spec.runningMeanOffset(l),
                                  m_running.data() + m_spec.runningVarOffset(l));
}

void Model::backwardBatchNorm(int l, const float *xhat, float *d)
{
    const int width = m_spec.layers[l + 1];
    // gamma's and beta's gradients are this replica's own sums, averaged with the others' like
    // every gradient; the input's gradient needs the sums over every row normalised together.
    float *local = m_grads.data() + m_spec.gammaOffset(l);
    m_device->batchNormBackwardSums(d, xhat, m_batch, width, local);
    const float *sums = local;
    double rows = double(m_batch);
    if (m_shared) {
        float *shared = m_channelSums.data();
        m_device->copy(shared, local, 2 * std::size_t(width));
        if (allreduce(shared, 2 * std::size_t(width))) {
            sums = shared;
            rows = normalisedRows();
        }
    }
    m_device->batchNormBackward(d, xhat, m_batchStats.data() + m_spec.runningVarOffset(l),
                                gamma(l), sums, float(1.0 / rows), m_batch, width, d);
}

void Model::backwardLayer(int l, const float *in, const Slot &s, float *dOut, float *dIn)
{
    float *dW = m_grads.data() + m_spec.weightOffset(l);
    float *dB = m_grads.data() + m_spec.biasOffset(l);
    if (m_spec.hasBatchNorm(l)) {
        m_device->activationBackward(m_spec.activation, s.y, s.a, dOut, dOut,
                                     std::size_t(m_batch) * m_spec.layers[l + 1]);
        backwardBatchNorm(l, s.z, dOut);
    }
    m_plans[std::size_t(l)]->backward(in, weight(l), s.z, s.a, dOut, dW, dB, dIn);
}

double Model::forwardLoss(const float *x, const std::int32_t *labels, const float *targets,
                          Recorder *recorder, std::uint32_t step)
{
    ScopedSpan span(recorder, Phase::Forward, step);
    m_recorder = recorder;
    m_step = step;
    m_input = x;
    m_labels = labels;
    m_targets = targets;
    const int L = m_spec.linearLayers();
    m_shared = m_reducer != nullptr;
    if (m_spec.batchNorm && L > 1 && normalisedRows() < 2)
        throw std::invalid_argument("batch norm needs more than one row per channel to train "
                                    "(model.batchnorm with a batch of 1)");
    m_held = 0;
    m_peak = 0;
    for (int l = 0; l < L; ++l) {
        const Slot s = slotFor(l);
        if (m_checkpoint && l == segmentEnd(l / m_spec.checkpointEvery) - 1 && l < L - 1) {
            // The last layer of a non-final segment writes its output straight into the next
            // boundary; the segment's scratch is then free.
            float *boundary = m_boundaries[std::size_t(l / m_spec.checkpointEvery + 1)];
            hold(slotBytes(l)); // the rest in scratch, a in the boundary
            forwardLayer(l, inputOf(l), s, boundary, false);
            const int s0 = segmentBegin(l / m_spec.checkpointEvery);
            for (int j = s0; j < l; ++j)
                release(slotBytes(j));
            release(slotBytes(l) - outputBytes(l));
            continue;
        }
        hold(slotBytes(l));
        forwardLayer(l, inputOf(l), s, s.a, false);
    }
    const Slot out = slotFor(L - 1);
    const int outW = m_spec.outputWidth();
    if (m_spec.classification)
        return m_device->softmaxCrossEntropy(out.z, labels, m_batch, outW, m_gradA.data());
    return m_device->meanSquaredError(out.z, targets, std::size_t(m_batch) * outW, m_gradA.data());
}

void Model::backwardRange(int first, int last, float *&dCur, float *&dNext)
{
    for (int l = last; l >= first; --l) {
        backwardLayer(l, inputOf(l), slotFor(l), dCur, l > 0 ? dNext : nullptr);
        std::swap(dCur, dNext);
        release(slotBytes(l));
    }
}

void Model::backward(Recorder *recorder, std::uint32_t step)
{
    m_recorder = recorder;
    m_step = step;
    float *dCur = m_gradA.data();
    float *dNext = m_gradB.data();
    const int L = m_spec.linearLayers();
    if (!m_checkpoint) {
        ScopedSpan span(recorder, Phase::Backward, step);
        backwardRange(0, L - 1, dCur, dNext);
        return;
    }
    for (int s = segmentCount() - 1; s >= 0; --s) {
        const int first = segmentBegin(s), last = segmentEnd(s) - 1;
        if (s < segmentCount() - 1) {
            ScopedSpan span(recorder, Phase::Recompute, step);
            for (int l = first; l <= last; ++l) {
                const Slot slot = slotFor(l);
                hold(slotBytes(l));
                forwardLayer(l, inputOf(l), slot, slot.a, true);
            }
        }
        {
            ScopedSpan span(recorder, Phase::Backward, step);
            backwardRange(first, last, dCur, dNext);
        }
        if (s > 0) // the boundary this segment started from is no longer needed
            release(std::int64_t(m_batch) * m_spec.layers[first] * std::int64_t(sizeof(float)));
    }
}

void Model::reserveEvaluation()
{
    if (m_evalA.data())
        return;
    const int maxWidth = *std::max_element(m_spec.layers.begin(), m_spec.layers.end());
    m_evalA = DeviceBuffer(*m_device, std::size_t(m_batch) * maxWidth);
    m_evalB = DeviceBuffer(*m_device, std::size_t(m_batch) * maxWidth);
    // The plans are for batch() rows: a shorter last chunk is padded (with zeros) to a full one.
    m_evalX = DeviceBuffer(*m_device, std::size_t(m_batch) * m_spec.layers[0]);
    m_evalStats = DeviceBuffer(*m_device, m_spec.runningStatsCount());
    m_evalRunning = DeviceBuffer(*m_device, m_spec.runningStatsCount());
    if (!m_device->hostAccessible()) { // the data stays on the host; chunks are copied in
        m_evalT = DeviceBuffer(*m_device, m_spec.classification
                                              ? std::size_t(m_batch)
                                              : std::size_t(m_batch) * m_spec.outputWidth());
    }
}

EvalResult Model::evaluate(const float *x, const std::int32_t *labels, const float *targets,
                           std::int64_t rows, const float *runningStats)
{
    EvalResult r;
    double lossSum = 0;
    std::int64_t correct = 0;
    const int L = m_spec.linearLayers();
    const int outW = m_spec.outputWidth();
    const bool staged = !m_device->hostAccessible();
    reserveEvaluation();
    const float *running = m_running.data();
    if (runningStats && m_spec.runningStatsCount()) {
        m_device->upload(m_evalRunning.data(), runningStats, m_spec.runningStatsCount());
        running = m_evalRunning.data();
    }
    // Batch norm by the running statistics: their mean and 1/sqrt(var + eps), through the
    // statistics step with a count of 1 (sums are then the values) and no running update.
    for (int l = 0; l < L; ++l)
        if (m_spec.hasBatchNorm(l))
            m_device->batchNormStatistics(running + m_spec.runningMeanOffset(l),
                                          running + m_spec.runningVarOffset(l), 1.0,
                                          kBatchNormEps, 0.0f, m_spec.layers[l + 1],
                                          m_evalStats.data() + m_spec.runningMeanOffset(l),
                                          m_evalStats.data() + m_spec.runningVarOffset(l),
                                          nullptr, nullptr);
    static_assert(sizeof(std::int32_t) == sizeof(float), "labels share float-sized buffers");
    for (std::int64_t begin = 0; begin < rows; begin += m_batch) {
        const int n = int(std::min<std::int64_t>(m_batch, rows - begin));
        const float *in = x + begin * m_spec.layers[0];
        const std::int32_t *chunkLabels = m_spec.classification ? labels + begin : nullptr;
        const float *chunkTargets = m_spec.classification ? nullptr : targets + begin * outW;
        if (staged || n < m_batch) {
            const std::size_t width = std::size_t(m_spec.layers[0]);
            if (n < m_batch)
                m_device->fill(m_evalX.data() + std::size_t(n) * width, 0.0f,
                               std::size_t(m_batch - n) * width);
            if (staged)
                m_device->upload(m_evalX.data(), in, std::size_t(n) * width);
            else
                m_device->copy(m_evalX.data(), in, std::size_t(n) * width);
            in = m_evalX.data();
        }
        if (staged) {
            if (m_spec.classification) {
                m_device->uploadBytes(m_evalT.data(), chunkLabels, std::size_t(n) * sizeof(std::int32_t));
                chunkLabels = reinterpret_cast<const std::int32_t *>(m_evalT.data());
            } else {
                m_device->upload(m_evalT.data(), chunkTargets, std::size_t(n) * outW);
                chunkTargets = m_evalT.data();
            }
        }
        float *bufs[2] = {m_evalA.data(), m_evalB.data()};
        int cur = 0;
        for (int l = 0; l < L; ++l) {
            float *z = bufs[cur];
            // Batch norm and the activation in place.
            if (m_spec.hasBatchNorm(l)) {
                const int width = m_spec.layers[l + 1];
                m_plans[std::size_t(l)]->forward(in, weight(l), bias(l), z, z);
                m_device->batchNormForward(z, m_evalStats.data() + m_spec.runningMeanOffset(l),
                                           m_evalStats.data() + m_spec.runningVarOffset(l),
                                           gamma(l), beta(l), m_batch, width, nullptr, z);
                m_device->activationForward(m_spec.activation, z, z,
                                            std::size_t(m_batch) * width);
            } else {
                m_plans[std::size_t(l)]->forward(in, weight(l), bias(l), z, z);
            }
            in = z;
            cur ^= 1;
        }
        if (m_spec.classification) {
            lossSum += m_device->softmaxCrossEntropy(in, chunkLabels, n, outW, nullptr) * n;
            correct += m_device->countCorrect(in, chunkLabels, n, outW);
        } else {
            lossSum += m_device->meanSquaredError(in, chunkTargets, std::size_t(n) * outW, nullptr) * n;
        }
    }
    r.samples = rows;
    r.lossSum = lossSum;
    r.correct = correct;
    r.loss = rows ? lossSum / double(rows) : 0.0;
    r.accuracy = rows && m_spec.classification ? double(correct) / double(rows) : 0.0;
    return r;
}

} // namespace syncopate
