// An MLP replica on one device: one flat parameter buffer (so a reduction is one call), laid out
// per layer as PyTorch's nn.Linear (weight [out, in] row-major, then bias [out]), with the same
// layout for gradients. With checkpointing, forward keeps activations only at segment boundaries
// and backward recomputes each segment; the activation bytes held are counted as they come and go.
#pragma once

#include "device.h"
#include "trace.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace syncopate {

struct ModelSpec {
    std::vector<int> layers; // widths, input first
    Activation activation = Activation::Relu;
    bool classification = true;
    int checkpointEvery = 0; // 0 = no checkpointing

    int linearLayers() const { return int(layers.size()) - 1; }
    int outputWidth() const { return layers.back(); }
    std::size_t paramCount() const;
    std::size_t weightOffset(int layer) const;
    std::size_t biasOffset(int layer) const;
};

Activation parseActivation(const std::string &name);

struct EvalResult {
    double loss = 0;
    double accuracy = 0; // classification only
    std::int64_t samples = 0;
    double lossSum = 0;      // loss * samples, for combining shards
    std::int64_t correct = 0; // classification only
};

class Model {
public:
    Model(Device &device, ModelSpec spec, int batch);

    const ModelSpec &spec() const { return m_spec; }
    Device &device() const { return *m_device; }
    int batch() const { return m_batch; }
    std::size_t paramCount() const { return m_params.size(); }
    float *params() const { return m_params.data(); }
    float *grads() const { return m_grads.data(); }

    // He (relu, gelu) or Xavier (tanh, output layer) initial weights, zero biases.
    static std::vector<float> initialParams(const ModelSpec &spec, std::uint64_t seed);
    void setParams(const std::vector<float> &host);
    std::vector<float> paramsToHost() const;
    std::vector<float> gradsToHost() const;

    // x, labels / targets: device pointers with batch() rows. Returns the mean loss and keeps
    // what backward() needs. recorder may be null.
    double forwardLoss(const float *x, const std::int32_t *labels, const float *targets,
                       Recorder *recorder, std::uint32_t step);
    // Gradients of the last forwardLoss into grads().
    void backward(Recorder *recorder, std::uint32_t step);

    // Loss (and accuracy) over rows samples of host data, computed in chunks of batch() rows
    // without touching the training activations (copied to the device chunk by chunk where the
    // device cannot read host memory).
    EvalResult evaluate(const float *x, const std::int32_t *labels, const float *targets,
                        std::int64_t rows);
    // Allocates evaluate()'s scratch now, so a replica that evaluates during training does not
    // allocate on its worker's thread. evaluate() calls it itself otherwise.
    void reserveEvaluation();

    // Activation bytes held right now, the peak since resetPeak(), and what is allocated.
    std::int64_t heldActivationBytes() const { return m_held; }
    std::int64_t peakActivationBytes() const { return m_peak; }
    std::int64_t activationCapacityBytes() const { return m_capacity; }
    void resetPeak() { m_peak = m_held; }

private:
    struct Slot {
        float *z = nullptr; // pre-activation
        float *a = nullptr; // post-activation (== z for the output layer)
        std::int64_t bytes = 0;
    };

    int segmentCount() const;
    int segmentBegin(int s) const;
    int segmentEnd(int s) const;
    std::int64_t slotBytes(int layer) const;
    const float *weight(int l) const { return m_params.data() + m_spec.weightOffset(l); }
    const float *bias(int l) const { return m_params.data() + m_spec.biasOffset(l); }
    void forwardLayer(int l, const float *in, float *z, float *a);
    void backwardLayer(int l, const float *in, const float *z, const float *a, float *dOut,
                       float *dIn);
    Slot slotFor(int l) const;
    const float *inputOf(int l) const;
    void hold(std::int64_t bytes);
    void release(std::int64_t bytes);
    void backwardRange(int first, int last, float *&dCur, float *&dNext);

    Device *m_device;
    ModelSpec m_spec;
    int m_batch;
    bool m_checkpoint;
    DeviceBuffer m_params;
    DeviceBuffer m_grads;
    // One per layer, for batch() rows: the device prepares its kernels once, here.
    std::vector<std::unique_ptr<LinearPlan>> m_plans;
    // Plain: one slot per layer. Checkpointed: boundary inputs per segment plus one segment's
    // worth of scratch slots, reused by every segment.
    std::vector<DeviceBuffer> m_storage;
    std::vector<Slot> m_slots;           // plain: per layer; checkpointed: per position in segment
    std::vector<float *> m_boundaries;   // checkpointed: input of segment s (s >= 1)
    DeviceBuffer m_gradA, m_gradB;       // activation gradients, ping-pong
    DeviceBuffer m_evalA, m_evalB;       // evaluation scratch, see reserveEvaluation()
    DeviceBuffer m_evalX, m_evalT;       // a chunk of host data on the device (labels or targets)
                                         // or, on the host, a last chunk padded to batch() rows
    const float *m_input = nullptr;
    const std::int32_t *m_labels = nullptr;
    const float *m_targets = nullptr;
    std::int64_t m_held = 0, m_peak = 0, m_capacity = 0;
};

} // namespace syncopate
