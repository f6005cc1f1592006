// Dense fp16 / bf16 GEMV for decode (dense_gemv.h): one warp per weight row, 16-byte streaming loads of the weight
// issued kUnroll at a time per lane before any is used, the few rows of x read through the L1 cache, a warp
// reduction, and the bias and residual added before the one rounding. The RMSNorm (denseGemvRmsNorm) rides along:
// each warp reads all of x anyway, so it also sums x² and multiplies x by the norm weight as it goes, and scales its
// sum at the end; no block stages anything before its weight loads. The SwiGLU form (denseGemvSwiGlu) streams the
// gate row and the up row side by side in the same warp and writes silu(g) u.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "cwb/kernels/dense_gemv.h"
#include "decode_common.cuh"
#include "dependent_launch.cuh"

namespace cwb::kernels {

namespace {

using namespace decode;

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 8;   // 16-byte weight loads in flight per lane
// The same for packed 2:4 rows (each 16-byte load also has its positions word, and twice the elements of x per chunk;
// 8 spilled under the 64-register cap of one row of x).
constexpr int kSparseUnroll = 4;

// Weights are read once per token: bypass L1 and read through the non-coherent path.
__device__ __forceinline__ uint4 streamLoad(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// One 16-bit word of 2:4 positions, read like the weights.
__device__ __forceinline__ uint32_t streamLoad(const uint16_t* p) {
    unsigned short v;
    asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
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

// The 8 fp16 / bf16 elements of each row's 16-byte chunk as four pairs of floats (T from x's type).
template <typename T, int kRows>
__device__ __forceinline__ void weightPairs(const uint4 (&w)[kRows], float2 (&wf)[kRows][4], const T* x) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const uint32_t wBits[4] = {w[r].x, w[r].y, w[r].z, w[r].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) wf[r][i] = pairToFloat(wBits[i], x);
    }
}

// acc[r][m] += Σ over the 8 elements of one 16-byte chunk `c` of weight row r (w[r]) and of row m of x, x read
// through the read-only cache once for all kRows weight rows. With kNorm each element of x is first multiplied by the
// norm weight (gamma, in the activation type: one coalesced 16-byte load per chunk, as for x) and its square added
// to squares[m]: the RMSNorm's scale is applied to the whole sum at the end.
template <typename T, int M, int kRows, bool kNorm>
__device__ __forceinline__ void accumulateChunk(float (&acc)[kRows][M], float (&squares)[M], const uint4 (&w)[kRows],
                                                const T* __restrict__ x, int64_t xStride,
                                                const T* __restrict__ gamma, int64_t c) {
    float2 wf[kRows][4];
    weightPairs(w, wf, x);
    uint32_t gBits[4] = {0, 0, 0, 0};
    if constexpr (kNorm) {
        const uint4 gv = __ldg(reinterpret_cast<const uint4*>(gamma) + c);
        gBits[0] = gv.x, gBits[1] = gv.y, gBits[2] = gv.z, gBits[3] = gv.w;
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + m * xStride) + c);
        const uint32_t xBits[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float2 xf = pairToFloat(xBits[i], x);
            if constexpr (kNorm) {
                squares[m] = fmaf(xf.x, xf.x, squares[m]);
                squares[m] = fmaf(xf.y, xf.y, squares[m]);
                const float2 gf = pairToFloat(gBits[i], x);
                xf.x *= gf.x;
                xf.y *= gf.y;
            }
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                acc[r][m] = fmaf(wf[r][i].x, xf.x, acc[r][m]);
                acc[r][m] = fmaf(wf[r][i].y, xf.y, acc[r][m]);
            }
        }
    }
}

// Sixteen consecutive elements 16c..16c+15 of p (x or the norm weight) as floats: two 16-byte loads through the
// read-only cache when kVector, else one element at a time.
template <typename T, bool kVector>
__device__ __forceinline__ void loadSixteen(const T* __restrict__ p, int64_t c, float (&out)[16]) {
    if constexpr (kVector) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + 2 * c + half);
            const uint32_t bits[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 f = pairToFloat(bits[i], p);
                out[8 * half + 2 * i] = f.x;
                out[8 * half + 2 * i + 1] = f.y;
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) out[i] = toFloat(p[16 * c + i]);
    }
}

// Element i (0..3) of a group of four registers, by selects (a dynamic index would put the array in local memory).
__device__ __forceinline__ float pickOfFour(const float* a, uint32_t i) {
    const float low = (i & 1) ? a[1] : a[0], high = (i & 1) ? a[3] : a[2];
    return (i & 2) ? high : low;
}

// The 2:4 form of accumulateChunk: chunk c of a packed row is 16 bytes of kept values (8 of them, two per group of
// four columns) covering columns 16c..16c+15, and one 16-bit word of their positions (dense_gemv.h). The 16 elements
// of x are read whole (the norm's sum of squares needs them all), and each kept value picks its element.
template <typename T, int M, int kRows, bool kNorm, bool kVector>
__device__ __forceinline__ void accumulateSparseChunk(float (&acc)[kRows][M], float (&squares)[M],
                                                      const uint4 (&w)[kRows], const uint32_t (&meta)[kRows],
                                                      const T* __restrict__ x, int64_t xStride,
                                                      const T* __restrict__ gamma, int64_t c) {
    float2 wf[kRows][4];
    weightPairs(w, wf, x);
    float g[16];
    if constexpr (kNorm) loadSixteen<T, kVector>(gamma, c, g);
#pragma unroll
    for (int m = 0; m < M; ++m) {
        float xf[16];
        loadSixteen<T, kVector>(x + m * xStride, c, xf);
        if constexpr (kNorm) {
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                squares[m] = fmaf(xf[i], xf[i], squares[m]);
                xf[i] *= g[i];
            }
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const uint32_t positions = meta[r] >> (4 * j);
                acc[r][m] = fmaf(wf[r][j].x, pickOfFour(xf + 4 * j, positions & 3), acc[r][m]);
                acc[r][m] = fmaf(wf[r][j].y, pickOfFour(xf + 4 * j, (positions >> 2) & 3), acc[r][m]);
            }
    }
}

// acc[r][m] = Σ_k W[rows[r], k] x[m, k] (x[m, k] gamma[k] with kNorm, and then squares[m] = Σ_k x[m, k]²): kRows
// weight rows streamed side by side by one warp (this thread is lane `lane`), kUnroll 16-byte loads in flight per
// lane in all; every lane holds its partial sums.
// kSparse: W in packed 2:4 rows (weight: the values, meta: the positions), always read in 16-byte pieces; kVector
// then says how x and gamma are read.
template <typename T, int M, int kRows, bool kVector, bool kNorm, bool kSparse>
__device__ __forceinline__ void rowsProduct(float (&acc)[kRows][M], float (&squares)[M], const T* __restrict__ weight,
                                            const uint16_t* __restrict__ meta, const T* __restrict__ x,
                                            int64_t xStride, const T* __restrict__ gamma,
                                            const int64_t (&rows)[kRows], int64_t inputs, int lane) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
        squares[m] = 0.0f;
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r][m] = 0.0f;
    }
    if constexpr (kSparse) {
        constexpr int kChunks = kSparseUnroll / kRows;
        const uint4* row[kRows];
        const uint16_t* rowMeta[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            row[r] = reinterpret_cast<const uint4*>(weight + rows[r] * (inputs / 2));
            rowMeta[r] = meta + rows[r] * (inputs / 16);
        }
        const int64_t chunks = inputs / 16;
        int64_t c = lane;
        for (; c + 32 * (kChunks - 1) < chunks; c += 32 * kChunks) {
            uint4 w[kChunks][kRows];
            uint32_t positions[kChunks][kRows];
#pragma unroll
            for (int u = 0; u < kChunks; ++u)
#pragma unroll
                for (int r = 0; r < kRows; ++r) {
                    w[u][r] = streamLoad(row[r] + c + 32 * u);
                    positions[u][r] = streamLoad(rowMeta[r] + c + 32 * u);
                }
#pragma unroll
            for (int u = 0; u < kChunks; ++u)
                accumulateSparseChunk<T, M, kRows, kNorm, kVector>(acc, squares, w[u], positions[u], x, xStride, gamma,
                                                                   c + 32 * u);
        }
        if (c < chunks) {
            uint4 w[kChunks][kRows];
            uint32_t positions[kChunks][kRows];
#pragma unroll
            for (int u = 0; u < kChunks; ++u)
#pragma unroll
                for (int r = 0; r < kRows; ++r)
                    if (c + 32 * u < chunks) {
                        w[u][r] = streamLoad(row[r] + c + 32 * u);
                        positions[u][r] = streamLoad(rowMeta[r] + c + 32 * u);
                    }
#pragma unroll
            for (int u = 0; u < kChunks; ++u)
                if (c + 32 * u < chunks)
                    accumulateSparseChunk<T, M, kRows, kNorm, kVector>(acc, squares, w[u], positions[u], x, xStride,
                                                                       gamma, c + 32 * u);
        }
    } else if constexpr (kVector) {
        constexpr int kChunks = kUnroll / kRows;   // chunks of each row per lane per batch
        const uint4* row[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) row[r] = reinterpret_cast<const uint4*>(weight + rows[r] * inputs);
        const int64_t chunks = inputs / 8;
        int64_t c = lane;
        for (; c + 32 * (kChunks - 1) < chunks; c += 32 * kChunks) {   // every lane's kChunks chunks exist
            uint4 w[kChunks][kRows];
#pragma unroll
            for (int u = 0; u < kChunks; ++u)
#pragma unroll
                for (int r = 0; r < kRows; ++r) w[u][r] = streamLoad(row[r] + c + 32 * u);
#pragma unroll
            for (int u = 0; u < kChunks; ++u)
                accumulateChunk<T, M, kRows, kNorm>(acc, squares, w[u], x, xStride, gamma, c + 32 * u);
        }
        if (c < chunks) {   // the tail, still loaded all at once
            uint4 w[kChunks][kRows];
#pragma unroll
            for (int u = 0; u < kChunks; ++u)
#pragma unroll
                for (int r = 0; r < kRows; ++r)
                    if (c + 32 * u < chunks) w[u][r] = streamLoad(row[r] + c + 32 * u);
#pragma unroll
            for (int u = 0; u < kChunks; ++u)
                if (c + 32 * u < chunks) accumulateChunk<T, M, kRows, kNorm>(acc, squares, w[u], x, xStride, gamma, c + 32 * u);
        }
    } else {
        for (int64_t k = lane; k < inputs; k += 32) {
            float w[kRows];
#pragma unroll
            for (int r = 0; r < kRows; ++r) w[r] = toFloat(weight[rows[r] * inputs + k]);
            const float g = kNorm ? toFloat(gamma[k]) : 1.0f;
#pragma unroll
            for (int m = 0; m < M; ++m) {
                const float v = toFloat(x[m * xStride + k]);
                if constexpr (kNorm) squares[m] = fmaf(v, v, squares[m]);
#pragma unroll
                for (int r = 0; r < kRows; ++r) acc[r][m] = fmaf(w[r], kNorm ? v * g : v, acc[r][m]);
            }
        }
    }
}

// The warp's sums of acc; with kNorm each scaled by its row's 1 / sqrt(mean(x²) + eps), formed as rmsNormKernel
// (decode_pointwise.cu) forms it. Every lane gets the results.
template <int M, bool kNorm>
__device__ __forceinline__ void reduceRow(float (&acc)[M], const float (&squares)[M], float eps, int64_t inputs) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
        acc[m] = warpSum(acc[m]);
        if constexpr (kNorm) acc[m] *= rsqrtf(warpSum(squares[m]) / float(inputs) + eps);
    }
}

// Blocks per multiprocessor the kernel must allow at one row of x: registers capped at 64 so that 4 blocks of 8 warps
// fit (a 76-register form streamed 20-40% slower on the H200; every fp16 form at one row now fits 64 with at most
// 16 bytes spilled, ptxas -v for sm_90). More rows of x would spill under the cap.
template <int M>
constexpr int minBlocksPerSm() { return M == 1 ? 4 : 1; }

// What the kernel needs besides its pointers.
struct GemvArgs {
    const void* gamma = nullptr;    // the RMSNorm weight [K] in the activation type (kNorm)
    float eps = 0.0f;
    const float* bias = nullptr;    // fp32 [N] ([2N] with kSwiGlu), may be null
    const uint16_t* meta = nullptr; // kSparse: the 2:4 positions [N, K/16] ([2N, K/16] with kSwiGlu)
    int64_t outputs = 0, inputs = 0, xStride = 0, yStride = 0, residualStride = 0;
};

// One output row per warp, the grid covering them: y[m, n] = x W[n]ᵀ (x normalised with kNorm) + bias + residual,
// rounded once. With kSwiGlu, g and u are rows n and n + N of W (the fused [gate; up] weight), streamed side by side
// by the same warp (each chunk of x read once for both), and y[m, n] = silu(g) u. The weight loads start at once:
// nothing is staged before them.
template <typename T, int M, bool kVector, bool kNorm, bool kSwiGlu, bool kSparse>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, minBlocksPerSm<M>())
    denseGemvKernel(const T* __restrict__ x, const T* __restrict__ weight, const T* residual, T* y, GemvArgs a) {
    const int lane = threadIdx.x % 32;
    const int64_t n = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    waitForPredecessor();
    if (n >= a.outputs) return;
    constexpr int kRows = kSwiGlu ? 2 : 1;   // SwiGLU: the gate row and the up row, side by side
    int64_t rows[kRows];
    rows[0] = n;
    if constexpr (kSwiGlu) rows[kRows - 1] = n + a.outputs;
    float acc[kRows][M], squares[M];
    rowsProduct<T, M, kRows, kVector, kNorm, kSparse>(acc, squares, weight, a.meta, x, a.xStride,
                                                      static_cast<const T*>(a.gamma), rows, a.inputs, lane);
    if constexpr (kSwiGlu) {
        reduceRow<M, kNorm>(acc[0], squares, a.eps, a.inputs);
        reduceRow<M, kNorm>(acc[kRows - 1], squares, a.eps, a.inputs);
        if (lane != 0) return;
        const float gateBias = a.bias ? a.bias[n] : 0.0f, upBias = a.bias ? a.bias[n + a.outputs] : 0.0f;
#pragma unroll
        for (int m = 0; m < M; ++m) {
            const float g = acc[0][m] + gateBias;   // siluMulKernel's expression, on g and u not rounded
            y[m * a.yStride + n] = fromFloat<T>(g / (1.0f + __expf(-g)) * (acc[kRows - 1][m] + upBias));
        }
    } else {
        reduceRow<M, kNorm>(acc[0], squares, a.eps, a.inputs);
        if (lane != 0) return;
        const float b = a.bias ? a.bias[n] : 0.0f;
#pragma unroll
        for (int m = 0; m < M; ++m) {
            float v = acc[0][m] + b;
            if (residual) v += toFloat(residual[m * a.residualStride + n]);
            y[m * a.yStride + n] = fromFloat<T>(v);
        }
    }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Which form of the kernel a launch takes.
struct Launch {
    bool vector = false;   // 16-byte loads of W, x (and gamma); with sparse, of x and gamma (W always)
    bool norm = false;
    bool swiGlu = false;
    bool sparse = false;   // W in packed 2:4 rows
};

template <typename T, int M, bool kNorm, bool kSwiGlu, bool kSparse>
void launchForm(const T* x, const T* w, const T* r, T* y, const GemvArgs& a, bool vector, cudaStream_t stream) {
    const dim3 grid(unsigned((a.outputs + kWarpsPerBlock - 1) / kWarpsPerBlock)), block(kWarpsPerBlock * 32);
    auto kernel = vector ? denseGemvKernel<T, M, true, kNorm, kSwiGlu, kSparse>
                         : denseGemvKernel<T, M, false, kNorm, kSwiGlu, kSparse>;
    CWB_CUDA_CHECK(launchDependent(kernel, grid, block, 0, stream, x, w, r, y, a));
}

template <typename T, int M, bool kSparse>
void launchSparsity(const T* x, const T* w, const T* r, T* y, const GemvArgs& a, const Launch& l, cudaStream_t stream) {
    if (l.swiGlu) {
        if (l.norm) return launchForm<T, M, true, true, kSparse>(x, w, r, y, a, l.vector, stream);
        return launchForm<T, M, false, true, kSparse>(x, w, r, y, a, l.vector, stream);
    }
    if (l.norm) return launchForm<T, M, true, false, kSparse>(x, w, r, y, a, l.vector, stream);
    launchForm<T, M, false, false, kSparse>(x, w, r, y, a, l.vector, stream);
}

template <typename T, int M>
void launch(const void* x, const void* weight, const void* residual, void* y, const GemvArgs& a, const Launch& l,
            cudaStream_t stream) {
    const T* xs = static_cast<const T*>(x);
    const T* w = static_cast<const T*>(weight);
    const T* r = static_cast<const T*>(residual);
    T* ys = static_cast<T*>(y);
    if (l.sparse) return launchSparsity<T, M, true>(xs, w, r, ys, a, l, stream);
    launchSparsity<T, M, false>(xs, w, r, ys, a, l, stream);
}

template <typename T, int M = 1>
void launchRows(const void* x, const void* weight, const void* residual, void* y, int64_t rows, const GemvArgs& a,
                const Launch& l, cudaStream_t stream) {
    if constexpr (M < kDenseGemvMaxRows) {
        if (rows > M) return launchRows<T, M + 1>(x, weight, residual, y, rows, a, l, stream);
    }
    launch<T, M>(x, weight, residual, y, a, l, stream);
}

void checkShape(const std::string& name, const void* x, const void* weight, const void* residual, const void* y,
                const DenseGemvShape& s) {
    if (s.rows < 1 || s.rows > kDenseGemvMaxRows)
        throw KernelError(name + ": " + std::to_string(s.rows) + " rows of x, expected 1.." +
                          std::to_string(kDenseGemvMaxRows));
    if (s.outputs < 1 || s.inputs < 1) throw KernelError(name + ": empty weight");
    if (!x || !weight || !y) throw KernelError(name + ": null input, weight or output");
    if (s.rows > 1 && (s.xStride < s.inputs || s.yStride < s.outputs || (residual && s.residualStride < s.outputs)))
        throw KernelError(name + ": a row stride is shorter than its row");
}

// The kernel's arguments and form for a checked shape. x must be 16-byte aligned (and its rows, and gamma) for the
// vector form: it is read in 16-byte pieces.
void prepare(const void* x, const GemvRmsNorm* norm, const void* weight, const float* bias, const DenseGemvShape& s,
             GemvArgs& a, Launch& l) {
    a.bias = bias;
    a.outputs = s.outputs;
    a.inputs = s.inputs;
    a.xStride = s.xStride;
    a.yStride = s.yStride;
    a.residualStride = s.residualStride;
    l.vector = s.inputs % 8 == 0 && aligned16(x) && aligned16(weight) && (s.rows == 1 || s.xStride % 8 == 0);
    if (norm) {
        a.gamma = norm->weight;
        a.eps = norm->eps;
        l.norm = true;
        l.vector = l.vector && aligned16(norm->weight);
    }
}

void run(const void* x, const void* weight, const void* residual, void* y, const DenseGemvShape& s, const GemvArgs& a,
         const Launch& l, ActType type, Stream stream) {
    const cudaStream_t st = detail::toStream(stream);
    dispatch(type, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        launchRows<T>(x, weight, residual, y, s.rows, a, l, st);
    });
}

// prepare() for W in packed 2:4 rows: the values are always read in 16-byte pieces, so they must allow it; x and
// gamma are read in 16-byte pieces when they allow it.
void prepareSparse(const std::string& name, const void* x, const GemvRmsNorm* norm, const Sparse24RowsWeight& w,
                   const float* bias, const DenseGemvShape& s, GemvArgs& a, Launch& l) {
    if (!w.meta) throw KernelError(name + ": null 2:4 positions");
    if (s.inputs % kSparse24RowsColumnMultiple != 0)
        throw KernelError(name + ": " + std::to_string(s.inputs) + " columns, not a multiple of " +
                          std::to_string(kSparse24RowsColumnMultiple) + " (packed 2:4 rows)");
    if (!aligned16(w.values) || reinterpret_cast<uintptr_t>(w.meta) % 2 != 0)
        throw KernelError(name + ": the packed 2:4 values are not 16-byte aligned (or the positions 2-byte aligned)");
    prepare(x, norm, w.values, bias, s, a, l);
    a.meta = w.meta;
    l.sparse = true;
    l.vector = aligned16(x) && (s.rows == 1 || s.xStride % 8 == 0) && (!norm || aligned16(norm->weight));
}

std::atomic<int64_t> rmsNormLaunches{0}, swiGluLaunches{0}, sparseLaunches{0};

} // namespace

void sparse24Gemv(const void* x, const Sparse24RowsWeight& weight, const float* bias, const void* residual, void* y,
                  const DenseGemvShape& s, ActType type, Stream stream) {
    checkShape("sparse24Gemv", x, weight.values, residual, y, s);
    GemvArgs a;
    Launch l;
    prepareSparse("sparse24Gemv", x, nullptr, weight, bias, s, a, l);
    run(x, weight.values, residual, y, s, a, l, type, stream);
    CWB_CUDA_CHECK_LAUNCH("sparse24Gemv");
    ++sparseLaunches;
}

void sparse24GemvRmsNorm(const void* x, const GemvRmsNorm& norm, const Sparse24RowsWeight& weight, const float* bias,
                         const void* residual, void* y, const DenseGemvShape& s, ActType type, Stream stream) {
    checkShape("sparse24GemvRmsNorm", x, weight.values, residual, y, s);
    if (!norm.weight) throw KernelError("sparse24GemvRmsNorm: null norm weight");
    if (y == x) throw KernelError("sparse24GemvRmsNorm: the output overwrites x, which every warp reads");
    GemvArgs a;
    Launch l;
    prepareSparse("sparse24GemvRmsNorm", x, &norm, weight, bias, s, a, l);
    run(x, weight.values, residual, y, s, a, l, type, stream);
    CWB_CUDA_CHECK_LAUNCH("sparse24GemvRmsNorm");
    ++sparseLaunches;
}

void sparse24GemvSwiGlu(const void* x, const GemvRmsNorm* norm, const Sparse24RowsWeight& weight, const float* bias,
                        void* y, const DenseGemvShape& s, ActType type, Stream stream) {
    checkShape("sparse24GemvSwiGlu", x, weight.values, nullptr, y, s);
    if (norm && !norm->weight) throw KernelError("sparse24GemvSwiGlu: null norm weight");
    if (y == x) throw KernelError("sparse24GemvSwiGlu: the output overwrites x, which every warp reads");
    GemvArgs a;
    Launch l;
    prepareSparse("sparse24GemvSwiGlu", x, norm, weight, bias, s, a, l);
    l.swiGlu = true;
    run(x, weight.values, nullptr, y, s, a, l, type, stream);
    CWB_CUDA_CHECK_LAUNCH("sparse24GemvSwiGlu");
    ++sparseLaunches;
}

int64_t sparse24GemvLaunches() { return sparseLaunches.load(); }

namespace {

// One thread per chunk of 16 columns: its 8 kept values (16 bytes) and position word in, 16 elements out. Positions
// are read as written by packSparse24Rows; a hostile word naming one column twice keeps the later value there.
__global__ void sparse24UnpackKernel(const uint4* __restrict__ values, const uint16_t* __restrict__ meta,
                                     uint4* __restrict__ dense, int64_t chunks) {
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (c >= chunks) return;
    const uint4 v = __ldg(values + c);
    const uint32_t positions = __ldg(meta + c);
    const uint16_t kept[8] = {uint16_t(v.x), uint16_t(v.x >> 16), uint16_t(v.y), uint16_t(v.y >> 16),
                              uint16_t(v.z), uint16_t(v.z >> 16), uint16_t(v.w), uint16_t(v.w >> 16)};
    uint32_t pairs[8];   // output elements 2i, 2i + 1; selects, not a dynamically indexed array (local memory)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t p = positions >> (4 * j), low = p & 3, high = (p >> 2) & 3;
        uint32_t e[4];
#pragma unroll
        for (uint32_t i = 0; i < 4; ++i) e[i] = high == i ? kept[2 * j + 1] : low == i ? kept[2 * j] : 0u;
        pairs[2 * j] = e[0] | (e[1] << 16);
        pairs[2 * j + 1] = e[2] | (e[3] << 16);
    }
    const uint4 first = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
    const uint4 second = make_uint4(pairs[4], pairs[5], pairs[6], pairs[7]);
    dense[2 * c] = first;
    dense[2 * c + 1] = second;
}

} // namespace

void sparse24UnpackRows(const Sparse24RowsWeight& weight, void* dense, int64_t rows, int64_t cols, ActType type,
                        Stream stream) {
    (void)type;   // the bits are moved, not converted: the same code for fp16 and bf16
    if (!weight.values || !weight.meta || !dense) throw KernelError("sparse24UnpackRows: null values, positions or output");
    if (rows < 1 || cols < 1 || cols % kSparse24RowsColumnMultiple != 0)
        throw KernelError("sparse24UnpackRows: " + std::to_string(rows) + " x " + std::to_string(cols) +
                          ", columns not a positive multiple of " + std::to_string(kSparse24RowsColumnMultiple));
    if (!aligned16(weight.values) || !aligned16(dense) || reinterpret_cast<uintptr_t>(weight.meta) % 2 != 0)
        throw KernelError("sparse24UnpackRows: the values and the output must be 16-byte aligned");
    const int64_t chunks = rows * cols / 16;
    constexpr int kThreads = 256;
    sparse24UnpackKernel<<<unsigned((chunks + kThreads - 1) / kThreads), kThreads, 0, detail::toStream(stream)>>>(
        static_cast<const uint4*>(weight.values), weight.meta, static_cast<uint4*>(dense), chunks);
    CWB_CUDA_CHECK_LAUNCH("sparse24UnpackRows");
}

void denseGemv(const void* x, const void* weight, const float* bias, const void* residual, void* y,
               const DenseGemvShape& s, ActType type, Stream stream) {
    checkShape("denseGemv", x, weight, residual, y, s);
    GemvArgs a;
    Launch l;
    prepare(x, nullptr, weight, bias, s, a, l);
    run(x, weight, residual, y, s, a, l, type, stream);
    CWB_CUDA_CHECK_LAUNCH("denseGemv");
}

void denseGemvRmsNorm(const void* x, const GemvRmsNorm& norm, const void* weight, const float* bias,
                      const void* residual, void* y, const DenseGemvShape& s, ActType type, Stream stream) {
    checkShape("denseGemvRmsNorm", x, weight, residual, y, s);
    if (!norm.weight) throw KernelError("denseGemvRmsNorm: null norm weight");
    if (y == x) throw KernelError("denseGemvRmsNorm: the output overwrites x, which every warp reads");
    GemvArgs a;
    Launch l;
    prepare(x, &norm, weight, bias, s, a, l);
    run(x, weight, residual, y, s, a, l, type, stream);
    CWB_CUDA_CHECK_LAUNCH("denseGemvRmsNorm");
    ++rmsNormLaunches;
}

void denseGemvSwiGlu(const void* x, const GemvRmsNorm* norm, const void* weight, const float* bias, void* y,
                     const DenseGemvShape& s, ActType type, Stream stream) {
    checkShape("denseGemvSwiGlu", x, weight, nullptr, y, s);
    if (norm && !norm->weight) throw KernelError("denseGemvSwiGlu: null norm weight");
    if (y == x) throw KernelError("denseGemvSwiGlu: the output overwrites x, which every warp reads");
    GemvArgs a;
    Launch l;
    prepare(x, norm, weight, bias, s, a, l);
    l.swiGlu = true;
    run(x, weight, nullptr, y, s, a, l, type, stream);
    CWB_CUDA_CHECK_LAUNCH("denseGemvSwiGlu");
    ++swiGluLaunches;
}

int64_t denseGemvRmsNormLaunches() { return rmsNormLaunches.load(); }

int64_t denseGemvSwiGluLaunches() { return swiGluLaunches.load(); }

} // namespace cwb::kernels
