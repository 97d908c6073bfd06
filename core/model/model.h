// An MLP replica on one device: one flat parameter buffer (so a reduction is one call), laid out
// per layer as PyTorch's nn.Linear (weight [out, in] row-major, then bias [out]), with the same
// layout for gradients. With checkpointing, forward keeps activations only at segment boundaries
// and backward recomputes each segment; the activation bytes held are counted as they come and go.
// With batch norm, each hidden layer is Linear -> BatchNorm1d -> activation: the layer's scale
// (gamma) and shift (beta) follow its bias in the parameters, and the running statistics, which
// are not parameters (PyTorch's buffers), live in a buffer of their own.
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
    bool batchNorm = false;  // a BatchNorm1d after each hidden linear layer, before its activation

    int linearLayers() const { return int(layers.size()) - 1; }
    int outputWidth() const { return layers.back(); }
    bool hasBatchNorm(int layer) const { return batchNorm && layer < linearLayers() - 1; }
    std::size_t paramCount() const;
    std::size_t weightOffset(int layer) const;
    std::size_t biasOffset(int layer) const;
    // A batch-normalised layer's scale and shift, [out] each, after its bias.
    std::size_t gammaOffset(int layer) const;
    std::size_t betaOffset(int layer) const;
    // Running statistics: per batch-normalised layer, mean [out] then variance [out].
    std::size_t runningStatsCount() const;
    std::size_t runningMeanOffset(int layer) const;
    std::size_t runningVarOffset(int layer) const;
};

// torch.nn.BatchNorm1d's defaults.
constexpr float kBatchNormEps = 1e-5f;
constexpr float kBatchNormMomentum = 0.1f;

// How a replica reaches the other workers for synchronised batch norm (SyncBatchNorm): the
// model hands it per-channel sums to add up across every worker's replica, so the model never
// depends on the engine. A model without one normalises by its own batch (local batch norm).
class BatchNormReducer {
public:
    virtual ~BatchNormReducer() = default;
    // Workers whose batches are normalised together, each with as many rows as this replica.
    virtual int workers() const = 0;
    // Replaces data (n floats on the calling replica's device) by its sum over every worker's,
    // in the same order on every worker (every replica calls in the same order with the same
    // n). False when the run was cancelled: the replica then goes on with its own statistics
    // and the step is not used.
    virtual bool allreduceSum(float *data, std::size_t n) = 0;
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
    std::size_t paramCount() const { return m_grads.size(); }
    float *params() const { return m_paramData; }
    float *grads() const { return m_grads.data(); }

    // He (relu, gelu) or Xavier (tanh, output layer) initial weights, zero biases.
    // Batch norm's scale 1 and shift 0 (torch's defaults).
    static std::vector<float> initialParams(const ModelSpec &spec, std::uint64_t seed);
    void setParams(const std::vector<float> &host);
    // From now on this model reads and writes owner's parameters, and frees its own: the sync
    // workers of one process keep one copy (SyncGroup::ownedSlice). Same spec, and owner's
    // device in the same memory space; owner must outlive this model's use of them.
    void shareParams(const Model &owner);
    std::vector<float> paramsToHost() const;
    std::vector<float> gradsToHost() const;

    // Batch norm's running statistics (ModelSpec::runningMeanOffset), in device memory; forward
    // updates them, evaluate() normalises by them. Initially mean 0 and variance 1.
    std::size_t runningStatsCount() const { return m_running.size(); }
    float *runningStats() const { return m_running.data(); }
    static std::vector<float> initialRunningStats(const ModelSpec &spec);
    std::vector<float> runningStatsToHost() const;
    void runningStatsToHost(float *host) const; // runningStatsCount() floats, no allocation
    void setRunningStats(const std::vector<float> &host);
    // The last training forward's batch statistics in the running statistics' layout: per
    // layer the mean and the unbiased variance, what the running statistics moved toward.
    void batchStatsToHost(float *host) const;
    // Sync batch norm through reducer (which must outlive its use); null: local statistics.
    void setBatchNormReducer(BatchNormReducer *reducer) { m_reducer = reducer; }

    // x, labels / targets: device pointers with batch() rows. Returns the mean loss and keeps
    // what backward() needs. recorder may be null. With batch norm: training-mode statistics,
    // and the running statistics take one momentum step.
    double forwardLoss(const float *x, const std::int32_t *labels, const float *targets,
                       Recorder *recorder, std::uint32_t step);
    // Gradients of the last forwardLoss into grads().
    void backward(Recorder *recorder, std::uint32_t step);

    // Loss (and accuracy) over rows samples of host data, computed in chunks of batch() rows
    // (batch norm by its running statistics)
    // without touching the training activations (copied to the device chunk by chunk where the
    // device cannot read host memory).
    // runningStats (host memory, runningStatsCount() floats) replaces this replica's own.
    EvalResult evaluate(const float *x, const std::int32_t *labels, const float *targets,
                        std::int64_t rows, const float *runningStats = nullptr);
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
        float *z = nullptr; // the linear output; batch norm normalises it in place (x-hat)
        float *y = nullptr; // pre-activation: batch norm's output (== z without batch norm)
        float *a = nullptr; // post-activation (== z for the output layer)
    };

    int segmentCount() const;
    int segmentBegin(int s) const;
    int segmentEnd(int s) const;
    std::int64_t slotBytes(int layer) const;
    std::int64_t outputBytes(int layer) const;
    const float *weight(int l) const { return m_paramData + m_spec.weightOffset(l); }
    const float *bias(int l) const { return m_paramData + m_spec.biasOffset(l); }
    const float *gamma(int l) const { return m_paramData + m_spec.gammaOffset(l); }
    const float *beta(int l) const { return m_paramData + m_spec.betaOffset(l); }
    // recompute: a checkpointed segment again, normalised by the statistics of the first pass.
    void forwardLayer(int l, const float *in, const Slot &s, float *a, bool recompute);
    void backwardLayer(int l, const float *in, const Slot &s, float *dOut, float *dIn);
    void batchStatistics(int l, const float *z);
    void backwardBatchNorm(int l, const float *xhat, float *d);
    bool allreduce(float *data, std::size_t n);
    double normalisedRows() const;
    Slot slotFor(int l) const;
    const float *inputOf(int l) const;
    void hold(std::int64_t bytes);
    void release(std::int64_t bytes);
    void backwardRange(int first, int last, float *&dCur, float *&dNext);

    Device *m_device;
    ModelSpec m_spec;
    int m_batch;
    bool m_checkpoint;
    DeviceBuffer m_params;    // empty once shareParams() was called
    float *m_paramData;       // m_params' or the owner's
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
    // Batch norm: this step's per-layer mean and 1/std (the running statistics' offsets), kept
    // for backward and recompute; per-channel sums; evaluation's mean and 1/std.
    DeviceBuffer m_running, m_batchStats, m_channelSums, m_evalStats, m_evalRunning;
    BatchNormReducer *m_reducer = nullptr;
    bool m_shared = false; // this step's statistics were all-reduced
    Recorder *m_recorder = nullptr;
    std::uint32_t m_step = 0;
    const float *m_input = nullptr;
    const std::int32_t *m_labels = nullptr;
    const float *m_targets = nullptr;
    std::int64_t m_held = 0, m_peak = 0, m_capacity = 0;
};

} // namespace syncopate
