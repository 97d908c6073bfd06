// Losses, accuracy and whole-array reductions. Per-row work runs one block per row (block
// reductions from CUB); sums over rows or elements go through cub::DeviceReduce, into a Results
// record in device memory that the caller reads back with one copy.
#include "launchers.h"

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>

namespace syncopate::cuda {
namespace {

constexpr int kRowBlock = 256;

struct MaxOp {
    __device__ float operator()(float a, float b) const { return a > b ? a : b; }
};

// The larger value wins; on a tie the earlier column (std::max_element's choice).
struct ArgMax {
    float value;
    int index;
};
struct ArgMaxOp {
    __device__ ArgMax operator()(const ArgMax &a, const ArgMax &b) const
    {
        if (a.value > b.value || (a.value == b.value && a.index < b.index))
            return a;
        return b;
    }
};

struct Square {
    __device__ double operator()(float x) const { return double(x) * double(x); }
};

struct NonFinite {
    __device__ long long operator()(float x) const { return isfinite(x) ? 0 : 1; }
};

__global__ void softmaxCrossEntropyKernel(const float *logits, const std::int32_t *labels,
                                          int cols, float invRows, float *dLogits,
                                          double *rowLoss, Results *out)
{
    using FloatReduce = cub::BlockReduce<float, kRowBlock>;
    using DoubleReduce = cub::BlockReduce<double, kRowBlock>;
    __shared__ typename FloatReduce::TempStorage maxStorage;
    __shared__ typename DoubleReduce::TempStorage sumStorage;
    __shared__ float rowMax;
    __shared__ double rowLogSum;

    const int r = blockIdx.x;
    const float *x = logits + std::size_t(r) * cols;
    float mx = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += kRowBlock)
        mx = fmaxf(mx, x[c]);
    mx = FloatReduce(maxStorage).Reduce(mx, MaxOp{});
    if (threadIdx.x == 0)
        rowMax = mx;
    __syncthreads();
    mx = rowMax;
    double sum = 0.0;
    for (int c = threadIdx.x; c < cols; c += kRowBlock)
        sum += exp(double(x[c] - mx));
    sum = DoubleReduce(sumStorage).Sum(sum);
    if (threadIdx.x == 0)
        rowLogSum = log(sum) + double(mx);
    __syncthreads();
    const double logSum = rowLogSum;
    const int label = labels[r];
    const bool valid = label >= 0 && label < cols;
    if (threadIdx.x == 0) {
        rowLoss[r] = valid ? logSum - double(x[label]) : 0.0;
        if (!valid && atomicCAS(&out->badRow, -1, r) == -1)
            out->badLabel = label;
    }
    if (dLogits) {
        float *d = dLogits + std::size_t(r) * cols;
        for (int c = threadIdx.x; c < cols; c += kRowBlock) {
            float g = float(exp(double(x[c]) - logSum)) * invRows;
            if (c == label)
                g -= invRows;
            d[c] = g;
        }
    }
}

__global__ void correctKernel(const float *logits, const std::int32_t *labels, int cols,
                              long long *rowCorrect)
{
    using Reduce = cub::BlockReduce<ArgMax, kRowBlock>;
    __shared__ typename Reduce::TempStorage storage;
    const int r = blockIdx.x;
    const float *x = logits + std::size_t(r) * cols;
    ArgMax best{-INFINITY, cols};
    for (int c = threadIdx.x; c < cols; c += kRowBlock)
        best = ArgMaxOp{}(best, ArgMax{x[c], c});
    best = Reduce(storage).Reduce(best, ArgMaxOp{});
    if (threadIdx.x == 0)
        rowCorrect[r] = best.index == labels[r] ? 1 : 0;
}

__global__ void differenceKernel(const float *pred, const float *target, std::size_t n, float g,
                                 float *diff, float *dPred)
{
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += std::size_t(blockDim.x) * gridDim.x) {
        const float d = pred[i] - target[i];
        diff[i] = d;
        if (dPred)
            dPred[i] = g * d;
    }
}

__global__ void clearKernel(Results *out)
{
    out->sum = 0.0;
    out->count = 0;
    out->badRow = -1;
    out->badLabel = 0;
}

template <typename In, typename Out>
void deviceSum(const In *in, Out *out, std::size_t n, Scratch &scratch, cudaStream_t s,
               const char *what)
{
    std::size_t bytes = 0;
    check(cub::DeviceReduce::Sum(nullptr, bytes, in, out, n, s), what);
    void *temp = scratch.get(1, bytes, s);
    check(cub::DeviceReduce::Sum(temp, bytes, in, out, n, s), what);
}

template <typename Op, typename Out>
void deviceTransformSum(const float *in, Out *out, std::size_t n, Op op, Scratch &scratch,
                        cudaStream_t s, const char *what)
{
    std::size_t bytes = 0;
    check(cub::DeviceReduce::TransformReduce(nullptr, bytes, in, out, n, ::cuda::std::plus<Out>{},
                                             op, Out(0), s),
          what);
    void *temp = scratch.get(1, bytes, s);
    check(cub::DeviceReduce::TransformReduce(temp, bytes, in, out, n, ::cuda::std::plus<Out>{},
                                             op, Out(0), s),
          what);
}

} // namespace

void clearResults(Results *out, cudaStream_t s)
{
    clearKernel<<<1, 1, 0, s>>>(out);
    checkLaunch("clear kernel");
}

void softmaxCrossEntropy(const float *logits, const std::int32_t *labels, int rows, int cols,
                         float *dLogits, Results *out, Scratch &scratch, cudaStream_t s)
{
    clearResults(out, s);
    if (rows <= 0)
        return;
    auto *rowLoss = static_cast<double *>(scratch.get(0, std::size_t(rows) * sizeof(double), s));
    softmaxCrossEntropyKernel<<<rows, kRowBlock, 0, s>>>(logits, labels, cols, 1.0f / float(rows),
                                                         dLogits, rowLoss, out);
    checkLaunch("softmax cross-entropy kernel");
    deviceSum(rowLoss, &out->sum, std::size_t(rows), scratch, s, "cub::DeviceReduce::Sum (loss)");
}

void countCorrect(const float *logits, const std::int32_t *labels, int rows, int cols,
                  Results *out, Scratch &scratch, cudaStream_t s)
{
    clearResults(out, s);
    if (rows <= 0)
        return;
    auto *rowCorrect =
        static_cast<long long *>(scratch.get(0, std::size_t(rows) * sizeof(long long), s));
    correctKernel<<<rows, kRowBlock, 0, s>>>(logits, labels, cols, rowCorrect);
    checkLaunch("accuracy kernel");
    deviceSum(rowCorrect, &out->count, std::size_t(rows), scratch, s,
              "cub::DeviceReduce::Sum (accuracy)");
}

void squaredError(const float *pred, const float *target, std::size_t n, float *dPred,
                  Results *out, Scratch &scratch, cudaStream_t s)
{
    clearResults(out, s);
    if (!n)
        return;
    auto *diff = static_cast<float *>(scratch.get(0, n * sizeof(float), s));
    differenceKernel<<<gridFor(n), 256, 0, s>>>(pred, target, n, 2.0f / float(n), diff, dPred);
    checkLaunch("squared error kernel");
    deviceTransformSum(diff, &out->sum, n, Square{}, scratch, s,
                       "cub::DeviceReduce::TransformReduce (squared error)");
}

void sumSquares(const float *x, std::size_t n, Results *out, Scratch &scratch, cudaStream_t s)
{
    clearResults(out, s);
    if (!n)
        return;
    deviceTransformSum(x, &out->sum, n, Square{}, scratch, s,
                       "cub::DeviceReduce::TransformReduce (sum of squares)");
}

void countNonFinite(const float *x, std::size_t n, Results *out, Scratch &scratch, cudaStream_t s)
{
    clearResults(out, s);
    if (!n)
        return;
    deviceTransformSum(x, &out->count, n, NonFinite{}, scratch, s,
                       "cub::DeviceReduce::TransformReduce (finite check)");
}

} // namespace syncopate::cuda
