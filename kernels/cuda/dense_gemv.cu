// Dense fp16 / bf16 GEMV for decode (dense_gemv.h): one warp per weight row, 16-byte streaming loads of the weight
// issued kUnroll at a time per lane before any is used, the few rows of x read through the L1 cache, a warp
// reduction, and the bias and residual added before the one rounding. With the RMSNorm folded in (denseGemvRmsNorm),
// each block first writes the normalised rows of x to shared memory and its warps then take several weight rows each.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "cwb/kernels/decode_ops.h"
#include "cwb/kernels/dense_gemv.h"
#include "decode_common.cuh"
#include "dependent_launch.cuh"

namespace cwb::kernels {

namespace {

using namespace decode;

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 8;   // 16-byte weight loads in flight per lane

// Weights are read once per token: bypass L1 and read through the non-coherent path.
__device__ __forceinline__ uint4 streamLoad(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ float2 pairToFloat(uint32_t bits, const __half*) {
    __half2 h;
    memcpy(&h, &bits, sizeof(h));
    return __half22float2(h);
}

__device__ __forceinline__ float2 pairToFloat(uint32_t bits, const __nv_bfloat16*) {
    __nv_bfloat162 h;
    memcpy(&h, &bits, sizeof(h));
    return __bfloat1622float2(h);
}

// acc[m] += Σ over the 8 elements of one 16-byte chunk `c` of the weight row and of row m of x (in shared memory
// when kSharedX, else read through the read-only cache).
template <typename T, int M, bool kSharedX>
__device__ __forceinline__ void accumulateChunk(float (&acc)[M], const uint4& w, const T* __restrict__ x,
                                                int64_t xStride, int64_t c) {
    const uint32_t wBits[4] = {w.x, w.y, w.z, w.w};
    float2 wf[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) wf[i] = pairToFloat(wBits[i], x);
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const uint4* xp = reinterpret_cast<const uint4*>(x + m * xStride) + c;
        const uint4 xv = kSharedX ? *xp : __ldg(xp);
        const uint32_t xBits[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 xf = pairToFloat(xBits[i], x);
            acc[m] = fmaf(wf[i].x, xf.x, acc[m]);
            acc[m] = fmaf(wf[i].y, xf.y, acc[m]);
        }
    }
}

// Rows of x normalised as rmsNormKernel (decode_pointwise.cu) does it, into shared memory rows of `outStride`.
template <typename T, int M>
__device__ __forceinline__ void normaliseRows(const T* x, int64_t xStride, const float* __restrict__ normWeight, float eps,
                                              int64_t dim, T* out, int64_t outStride) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const T* in = x + m * xStride;
        float squares = 0.0f;
        for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
            const float v = toFloat(in[i]);
            squares += v * v;
        }
        const float inverse = rsqrtf(blockSum(squares) / float(dim) + eps);
        for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
            out[m * outStride + i] = fromFloat<T>(toFloat(in[i]) * inverse * normWeight[i]);
    }
    __syncthreads();
}

__host__ __device__ constexpr int64_t normedRowStride(int64_t inputs) { return (inputs + 7) / 8 * 8; }   // keeps shared rows 16-byte aligned

// acc[m] = Σ_k W[n, k] x[m, k]: one weight row, streamed by one warp (this thread is lane `lane`); every lane holds
// its partial sums.
template <typename T, int M, bool kVector, bool kSharedX>
__device__ __forceinline__ void rowProduct(float (&acc)[M], const T* __restrict__ weight, const T* __restrict__ x,
                                           int64_t xStride, int64_t n, int64_t inputs, int lane) {
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.0f;
    if constexpr (kVector) {
        const uint4* row = reinterpret_cast<const uint4*>(weight + n * inputs);
        const int64_t chunks = inputs / 8;
        int64_t c = lane;
        for (; c + 32 * (kUnroll - 1) < chunks; c += 32 * kUnroll) {   // every lane's kUnroll chunks exist
            uint4 w[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) w[u] = streamLoad(row + c + 32 * u);
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) accumulateChunk<T, M, kSharedX>(acc, w[u], x, xStride, c + 32 * u);
        }
        if (c < chunks) {   // the tail, still loaded all at once
            uint4 w[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u)
                if (c + 32 * u < chunks) w[u] = streamLoad(row + c + 32 * u);
#pragma unroll
            for (int u = 0; u < kUnroll; ++u)
                if (c + 32 * u < chunks) accumulateChunk<T, M, kSharedX>(acc, w[u], x, xStride, c + 32 * u);
        }
    } else {
        const T* row = weight + n * inputs;
        for (int64_t k = lane; k < inputs; k += 32) {
            const float w = toFloat(row[k]);
#pragma unroll
            for (int m = 0; m < M; ++m) acc[m] = fmaf(w, toFloat(x[m * xStride + k]), acc[m]);
        }
    }
}

// y[m, n] = the warp's sum + bias + residual, rounded once; lane 0 stores.
template <typename T, int M>
__device__ __forceinline__ void finishRow(float (&acc)[M], const float* __restrict__ bias, const T* residual, T* y,
                                          int64_t n, int64_t yStride, int64_t residualStride, int lane) {
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = warpSum(acc[m]);
    if (lane != 0) return;
    const float b = bias ? bias[n] : 0.0f;
#pragma unroll
    for (int m = 0; m < M; ++m) {
        float v = acc[m] + b;
        if (residual) v += toFloat(residual[m * residualStride + n]);
        y[m * yStride + n] = fromFloat<T>(v);
    }
}

// One weight row per warp, the grid covering them.
template <typename T, int M, bool kVector>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    denseGemvKernel(const T* __restrict__ x, const T* __restrict__ weight, const float* __restrict__ bias,
                    const T* residual, T* y, int64_t outputs, int64_t inputs, int64_t xStride, int64_t yStride,
                    int64_t residualStride) {
    waitForPredecessor();
    const int lane = threadIdx.x % 32;
    const int64_t n = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    if (n >= outputs) return;
    float acc[M];
    rowProduct<T, M, kVector, false>(acc, weight, x, xStride, n, inputs, lane);
    finishRow<T, M>(acc, bias, residual, y, n, yStride, residualStride, lane);
}

// Blocks of the RMSNorm kernel at one row of x that must fit on a multiprocessor: the registers are capped at 64 so
// that 4 blocks of 8 warps fit, as many as the plain kernel's 58 registers allow. (In a first version both kernels
// took 76 registers, so 3 blocks, and streamed 20-40% slower on the H200.) More rows of x would spill under the cap.
template <int M>
constexpr int rmsNormMinBlocksPerSm() { return M == 1 ? 4 : 1; }

// x normalised into shared memory first (every block), then each warp takes the weight rows n, n + warps in the
// grid, ... (rowsPerWarp of them at most).
template <typename T, int M, bool kVector>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, rmsNormMinBlocksPerSm<M>())
    denseGemvRmsNormKernel(const T* __restrict__ x, const float* __restrict__ normWeight, float eps,
                           const T* __restrict__ weight, const float* __restrict__ bias, const T* residual, T* y,
                           int64_t outputs, int64_t inputs, int64_t xStride, int64_t yStride, int64_t residualStride) {
    waitForPredecessor();
    extern __shared__ uint4 normedStorage[];   // uint4: 16-byte aligned
    T* normed = reinterpret_cast<T*>(normedStorage);
    const int64_t normedStride = normedRowStride(inputs);
    normaliseRows<T, M>(x, xStride, normWeight, eps, inputs, normed, normedStride);
    const int lane = threadIdx.x % 32;
    for (int64_t n = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; n < outputs;
         n += int64_t(gridDim.x) * kWarpsPerBlock) {
        float acc[M];
        rowProduct<T, M, kVector, true>(acc, weight, normed, normedStride, n, inputs, lane);
        finishRow<T, M>(acc, bias, residual, y, n, yStride, residualStride, lane);
    }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A launch of the kernel: the norm (nullptr: none) and how many weight rows each warp takes.
struct Launch {
    const GemvRmsNorm* norm = nullptr;
    int64_t rowsPerWarp = 1;
    bool vector = false;
};

template <typename T, int M>
void launch(const void* x, const void* weight, const float* bias, const void* residual, void* y, const DenseGemvShape& s,
            const Launch& l, cudaStream_t stream) {
    const int64_t rowsPerBlock = kWarpsPerBlock * l.rowsPerWarp;
    const dim3 grid(unsigned((s.outputs + rowsPerBlock - 1) / rowsPerBlock)), block(kWarpsPerBlock * 32);
    const T* xs = static_cast<const T*>(x);
    const T* w = static_cast<const T*>(weight);
    const T* r = static_cast<const T*>(residual);
    T* ys = static_cast<T*>(y);
    if (l.norm) {
        auto kernel = l.vector ? denseGemvRmsNormKernel<T, M, true> : denseGemvRmsNormKernel<T, M, false>;
        const size_t shared = size_t(M * normedRowStride(s.inputs)) * sizeof(T);
        CWB_CUDA_CHECK(launchDependent(kernel, grid, block, shared, stream, xs, l.norm->weight, l.norm->eps, w, bias, r,
                                       ys, s.outputs, s.inputs, s.xStride, s.yStride, s.residualStride));
    } else {
        auto kernel = l.vector ? denseGemvKernel<T, M, true> : denseGemvKernel<T, M, false>;
        CWB_CUDA_CHECK(launchDependent(kernel, grid, block, 0, stream, xs, w, bias, r, ys, s.outputs, s.inputs, s.xStride,
                                       s.yStride, s.residualStride));
    }
}

template <typename T, int M = 1>
void launchRows(const void* x, const void* weight, const float* bias, const void* residual, void* y,
                const DenseGemvShape& s, const Launch& l, cudaStream_t stream) {
    if constexpr (M < kDenseGemvMaxRows) {
        if (s.rows > M) return launchRows<T, M + 1>(x, weight, bias, residual, y, s, l, stream);
    }
    launch<T, M>(x, weight, bias, residual, y, s, l, stream);
}

void checkShape(const char* what, const void* x, const void* weight, const void* residual, const void* y,
                const DenseGemvShape& s) {
    const std::string name(what);
    if (s.rows < 1 || s.rows > kDenseGemvMaxRows)
        throw KernelError(name + ": " + std::to_string(s.rows) + " rows of x, expected 1.." +
                          std::to_string(kDenseGemvMaxRows));
    if (s.outputs < 1 || s.inputs < 1) throw KernelError(name + ": empty weight");
    if (!x || !weight || !y) throw KernelError(name + ": null input, weight or output");
    if (s.rows > 1 && (s.xStride < s.inputs || s.yStride < s.outputs || (residual && s.residualStride < s.outputs)))
        throw KernelError(name + ": a row stride is shorter than its row");
}

std::atomic<int64_t> rmsNormLaunches{0};

} // namespace

void denseGemv(const void* x, const void* weight, const float* bias, const void* residual, void* y,
               const DenseGemvShape& s, ActType type, Stream stream) {
    checkShape("denseGemv", x, weight, residual, y, s);
    Launch l;
    l.vector = s.inputs % 8 == 0 && aligned16(x) && aligned16(weight) && (s.rows == 1 || s.xStride % 8 == 0);
    const cudaStream_t st = detail::toStream(stream);
    dispatch(type, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        launchRows<T>(x, weight, bias, residual, y, s, l, st);
    });
    CWB_CUDA_CHECK_LAUNCH("denseGemv");
}

int64_t denseGemvRmsNormRowsPerWarp(int64_t outputs, int multiprocessors) {
    const int64_t warps = (outputs + kWarpsPerBlock - 1) / kWarpsPerBlock;   // blocks at one row per warp
    const int64_t wanted = kDenseGemvRmsNormBlocksPerSm * std::max(1, multiprocessors);
    return std::clamp<int64_t>(warps / wanted, 1, kDenseGemvRmsNormMaxRowsPerWarp);
}

void denseGemvRmsNorm(const void* x, const GemvRmsNorm& norm, const void* weight, const float* bias,
                      const void* residual, void* y, const DenseGemvShape& s, ActType type, Stream stream) {
    checkShape("denseGemvRmsNorm", x, weight, residual, y, s);
    if (!norm.weight) throw KernelError("denseGemvRmsNorm: null norm weight");
    if (!denseGemvRmsNormFits(s.rows, s.inputs))
        throw KernelError("denseGemvRmsNorm: " + std::to_string(s.rows) + " normalised rows of " +
                          std::to_string(s.inputs) + " elements exceed " +
                          std::to_string(kDenseGemvRmsNormSharedBytes) + " bytes of shared memory");
    if (norm.rowsPerWarp < 0) throw KernelError("denseGemvRmsNorm: negative rows per warp");
    Launch l;
    l.norm = &norm;
    l.rowsPerWarp = norm.rowsPerWarp > 0 ? norm.rowsPerWarp : denseGemvRmsNormRowsPerWarp(s.outputs, deviceMultiprocessors());
    l.vector = s.inputs % 8 == 0 && aligned16(weight);   // x is read from shared memory, already aligned
    const cudaStream_t st = detail::toStream(stream);
    dispatch(type, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        launchRows<T>(x, weight, bias, residual, y, s, l, st);
    });
    CWB_CUDA_CHECK_LAUNCH("denseGemvRmsNorm");
    ++rmsNormLaunches;
}

int64_t denseGemvRmsNormLaunches() { return rmsNormLaunches.load(); }

} // namespace cwb::kernels
