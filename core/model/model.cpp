#include "model.h"

#include "random.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace syncopate {

std::size_t ModelSpec::paramCount() const
{
    std::size_t n = 0;
    for (int l = 0; l < linearLayers(); ++l)
        n += std::size_t(layers[l + 1]) * (layers[l] + 1);
    return n;
}

std::size_t ModelSpec::weightOffset(int layer) const
{
    std::size_t n = 0;
    for (int l = 0; l < layer; ++l)
        n += std::size_t(layers[l + 1]) * (layers[l] + 1);
    return n;
}

std::size_t ModelSpec::biasOffset(int layer) const
{
    return weightOffset(layer) + std::size_t(layers[layer + 1]) * layers[layer];
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
      m_params(device, m_spec.paramCount()), m_grads(device, m_spec.paramCount())
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
    for (int l = 0; l < L; ++l)
        m_plans.push_back(device.planLinear(
            {batch, m_spec.layers[l], m_spec.layers[l + 1],
             l < L - 1 ? m_spec.activation : Activation::Identity}));
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
    }
    return p;
}

void Model::setParams(const std::vector<float> &host)
{
    if (host.size() != paramCount())
        throw std::invalid_argument("setParams: expected " + std::to_string(paramCount()) +
                                    " values, got " + std::to_string(host.size()));
    m_device->upload(m_params.data(), host.data(), host.size());
}

std::vector<float> Model::paramsToHost() const
{
    std::vector<float> host(paramCount());
    m_device->download(host.data(), m_params.data(), host.size());
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

std::int64_t Model::slotBytes(int l) const
{
    const bool hidden = l < m_spec.linearLayers() - 1;
    return std::int64_t(m_batch) * m_spec.layers[l + 1] * std::int64_t(sizeof(float)) *
           (hidden ? 2 : 1);
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

void Model::forwardLayer(int l, const float *in, float *z, float *a)
{
    m_plans[std::size_t(l)]->forward(in, weight(l), bias(l), z, a);
}

void Model::backwardLayer(int l, const float *in, const float *z, const float *a, float *dOut,
                          float *dIn)
{
    float *dW = m_grads.data() + m_spec.weightOffset(l);
    float *dB = m_grads.data() + m_spec.biasOffset(l);
    m_plans[std::size_t(l)]->backward(in, weight(l), z, a, dOut, dW, dB, dIn);
}

double Model::forwardLoss(const float *x, const std::int32_t *labels, const float *targets,
                          Recorder *recorder, std::uint32_t step)
{
    ScopedSpan span(recorder, Phase::Forward, step);
    m_input = x;
    m_labels = labels;
    m_targets = targets;
    const int L = m_spec.linearLayers();
    m_held = 0;
    m_peak = 0;
    for (int l = 0; l < L; ++l) {
        const Slot s = slotFor(l);
        if (m_checkpoint && l == segmentEnd(l / m_spec.checkpointEvery) - 1 && l < L - 1) {
            // The last layer of a non-final segment writes its output straight into the next
            // boundary; the segment's scratch is then free.
            float *boundary = m_boundaries[std::size_t(l / m_spec.checkpointEvery + 1)];
            hold(slotBytes(l)); // z in scratch, a in the boundary
            forwardLayer(l, inputOf(l), s.z, boundary);
            const int s0 = segmentBegin(l / m_spec.checkpointEvery);
            for (int j = s0; j < l; ++j)
                release(slotBytes(j));
            release(slotBytes(l) / 2);
            continue;
        }
        hold(slotBytes(l));
        forwardLayer(l, inputOf(l), s.z, s.a);
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
        const Slot s = slotFor(l);
        backwardLayer(l, inputOf(l), s.z, s.a, dCur, l > 0 ? dNext : nullptr);
        std::swap(dCur, dNext);
        release(slotBytes(l));
    }
}

void Model::backward(Recorder *recorder, std::uint32_t step)
{
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
                forwardLayer(l, inputOf(l), slot.z, slot.a);
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
    if (!m_device->hostAccessible()) { // the data stays on the host; chunks are copied in
        m_evalT = DeviceBuffer(*m_device, m_spec.classification
                                              ? std::size_t(m_batch)
                                              : std::size_t(m_batch) * m_spec.outputWidth());
    }
}

EvalResult Model::evaluate(const float *x, const std::int32_t *labels, const float *targets,
                           std::int64_t rows)
{
    EvalResult r;
    double lossSum = 0;
    std::int64_t correct = 0;
    const int L = m_spec.linearLayers();
    const int outW = m_spec.outputWidth();
    const bool staged = !m_device->hostAccessible();
    reserveEvaluation();
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
            forwardLayer(l, in, z, z); // activation in place
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
