#pragma once
// The W4A16 / W8A16 kernel (internal). Layout: include/cwb/kernels/packed_weight.h.
// A block has 8 warps; warp w owns row tile 8·blockIdx.x + w (16 output rows) and the chunks of split blockIdx.y.
// Activations are read through L1 (the 8 warps of a block read the same ones); weights stream past L1.
// With splitK > 1 each block writes fp32 partial sums and the last block of a row range to finish adds them up.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace cwb::kernels::detail {

constexpr int kWarpsPerBlock = 8;
constexpr int kMaxTokensPerLaunch = 64;

struct Wxa16Params {
    const uint4* words;
    const uint32_t* scaleZero;
    const int32_t* chunkGroup;
    const void* x;   // [m, ldx]
    void* y;         // [m, ldy]
    int64_t ldx, ldy;
    int m, rows, tiles, chunks, groups, splitK, chunksPerSplit;
    int groupShift;  // >= 0: group of chunk c is c >> groupShift; -1: read chunkGroup
    float* partial;  // [splitK, m, tiles·16]
    int* counters;   // [gridDim.x]
    int clusterReduce;  // TMA kernel: the splits of a row range form one cluster and add up in shared memory
    int cols;                 // real columns of x (the norm's mean and the zero padding of the folded norm)
    const void* residual;     // [m, ldy] or nullptr: y = x·W^T + residual (may be y itself)
    const float* normWeight;  // stream kernel with the norm folded: x := RMSNorm(x)·γ in its prologue
    float normEps;
    int swiglu;               // stream kernel, GLU: rows are [gate; up], y [m, ldy] is silu(gate)·up (w4StreamKernel)
};

// y[tok, row] = sum (+ residual[tok, row]), rounded once; the one store of every kernel's output.
template <typename T>
__device__ __forceinline__ void storeOutput(const Wxa16Params& p, int tok, int row, float sum) {
    const int64_t at = int64_t(tok) * p.ldy + row;
    if (p.residual) sum += float(static_cast<const T*>(p.residual)[at]);
    static_cast<T*>(p.y)[at] = T(sum);
}

template <typename T>
struct ActTraits;
template <>
struct ActTraits<__half> {
    using T2 = __half2;
    static constexpr uint32_t kMagic4 = 0x64006400u;  // fp16 1024: 1024 + q is exact for q < 1024
    static constexpr float kBase4 = 1024.0f;
};
template <>
struct ActTraits<__nv_bfloat16> {
    using T2 = __nv_bfloat162;
    static constexpr uint32_t kMagic4 = 0x43004300u;  // bf16 128: 128 + q is exact for q < 128
    static constexpr float kBase4 = 128.0f;
};

template <typename T2>
__device__ __forceinline__ T2 asPair(uint32_t v) { return *reinterpret_cast<T2*>(&v); }
template <typename T2>
__device__ __forceinline__ uint32_t asWord(T2 v) { return *reinterpret_cast<uint32_t*>(&v); }

template <typename T>
__device__ __forceinline__ void mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__half>(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// (q & MASK) | MAGIC in one LOP3: written as C++, nvcc emits an AND and an OR (two LOP3s; seen in the SASS of the
// small-M kernels, about a fifth of their instructions per chunk).
template <uint32_t MASK, uint32_t MAGIC>
__device__ __forceinline__ uint32_t andOr(uint32_t q) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(q), "n"(MASK), "n"(MAGIC));  // 0xEA: (a & b) | c
    return r;
}

__device__ __forceinline__ uint4 loadStreaming(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// B fragments of one chunk for NT token tiles: the lane's 16 activations of token n·8 + g (two 16-byte loads through
// L1, or from shared memory with SHARED; xq is token g's, tokenStride the step to token g + 8), zeros past the last
// of the m tokens. ALL_ROWS: xq is valid for every lane (the caller points lanes past the last token at its row,
// whose sums are never stored), so there is no check and no zeroing.
template <typename T, int NT, bool SHARED = false, bool ALL_ROWS = false>
__device__ __forceinline__ void loadXFragments(const T* xq, int64_t tokenStride, int g, int m, uint32_t (&bx)[NT][8]) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        if (ALL_ROWS || n * 8 + g < m) {
            const uint4* xp = reinterpret_cast<const uint4*>(xq + n * tokenStride);
            const uint4 v0 = SHARED ? xp[0] : __ldg(xp), v1 = SHARED ? xp[1] : __ldg(xp + 1);
            bx[n][0] = v0.x; bx[n][1] = v0.y; bx[n][2] = v0.z; bx[n][3] = v0.w;
            bx[n][4] = v1.x; bx[n][5] = v1.y; bx[n][6] = v1.z; bx[n][7] = v1.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) bx[n][j] = 0u;
        }
    }
}

// Per group: the zero bases subtracted from the magic-number weights (so the mma sees the exact integers
// level - zero, or 16·(level - zero)), and the float scales applied to the mma result of each chunk.
template <typename T>
struct GroupParams {
    typename ActTraits<T>::T2 z0, z1;  // rows g and g+8
    float s0, s1;
    float zf0, zf1;  // the same zero bases as floats, for the folded correction
};

// Folding the zero: the mma takes the magic-number weights (base + level) as they are, one more mma per k-step
// with an all-ones A gives the sum of the activations, and (base + zero) · sum is subtracted in fp32. This drops
// the per-pair subtraction from the dequantization; used for up to 8 tokens (measured slower at 16).
template <typename T, int BITS, int NT>
constexpr bool kFoldZero = NT == 1 && !(BITS == 8 && std::is_same<T, __nv_bfloat16>::value);

// fp16 with 4 bits reads the odd nibbles in place (16·level, mask 0x00F0): one shift per word instead of three.
template <typename T, int BITS>
constexpr bool kSixteenTrick = BITS == 4 && std::is_same<T, __half>::value;

template <typename T, int BITS>
__device__ __forceinline__ GroupParams<T> makeGroup(uint32_t sz0, uint32_t sz1) {
    using T2 = typename ActTraits<T>::T2;
    const T2 p0 = asPair<T2>(sz0), p1 = asPair<T2>(sz1);  // (scale, zero)
    GroupParams<T> gp;
    const T base = T(ActTraits<T>::kBase4);
    gp.s0 = float(p0.x);
    gp.s1 = float(p1.x);
    const T z0 = __hadd(p0.y, base);
    T z1 = __hadd(p1.y, base);
    if constexpr (kSixteenTrick<T, BITS>) {
        z1 = __hfma(p1.y, T(16.0f), base);  // 1024 + 16·zero, exact
        gp.s1 *= 0.0625f;
    }
    if constexpr (BITS == 8 && !std::is_same<T, __half>::value) {  // bf16 int8 goes through float: plain zeros
        gp.z0 = T2(p0.y, p0.y);
        gp.z1 = T2(p1.y, p1.y);
    } else {
        gp.z0 = T2(z0, z0);
        gp.z1 = T2(z1, z1);
    }
    gp.zf0 = float(z0);
    gp.zf1 = float(z1);
    return gp;
}

// A fragments (4 registers) of k-step s: exact integers (level - zero), 16x for rows g+8 with the fp16 trick.
template <typename T, int BITS, bool FOLD = false>
__device__ __forceinline__ void dequantStep(const uint32_t* w, int s, const GroupParams<T>& gp, uint32_t* a) {
    using T2 = typename ActTraits<T>::T2;
    // With FOLD the zero base is subtracted after the mma: sub() passes the magic-number value through.
    auto sub = [](T2 h, T2 z) { if constexpr (FOLD) return h; else return __hsub2(h, z); };
    if constexpr (kSixteenTrick<T, BITS>) {
        const uint32_t q = w[s], q8 = q >> 8;
        a[0] = asWord(sub(asPair<T2>(andOr<0x000F000Fu, 0x64006400u>(q)), gp.z0));
        a[1] = asWord(sub(asPair<T2>(andOr<0x00F000F0u, 0x64006400u>(q)), gp.z1));
        a[2] = asWord(sub(asPair<T2>(andOr<0x000F000Fu, 0x64006400u>(q8)), gp.z0));
        a[3] = asWord(sub(asPair<T2>(andOr<0x00F000F0u, 0x64006400u>(q8)), gp.z1));
    } else if constexpr (BITS == 4) {
        const uint32_t q = w[s];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint32_t h = andOr<0x000F000Fu, ActTraits<T>::kMagic4>(q >> (4 * i));
            a[i] = asWord(sub(asPair<T2>(h), (i % 2) ? gp.z1 : gp.z0));
        }
    } else if constexpr (std::is_same<T, __half>::value) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint32_t h = __byte_perm(w[2 * s + i / 2], 0x64646464u, (i % 2) ? 0x4342u : 0x4140u);
            a[i] = asWord(sub(asPair<T2>(h), (i % 2) ? gp.z1 : gp.z0));
        }
    } else {  // int8 with bf16: bytes to float (2^23 + q trick), minus the zero; |level - zero| <= 255 is exact in bf16
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint32_t word = w[2 * s + i / 2];
            const int lo = (i % 2) ? 2 : 0;
            const float z = 8388608.0f + float((i % 2) ? gp.z1.x : gp.z0.x);
            const float f0 = __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7440u + lo)) - z;
            const float f1 = __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7440u + lo + 1)) - z;
            a[i] = asWord(__floats2bfloat162_rn(f0, f1));
        }
    }
}

// Weights and raw (scale, zero) words of `U` consecutive chunks of one row tile.
template <int U, int V>
struct Batch {
    uint4 w[U][V];
    uint32_t sz0[U], sz1[U];
};

// Per-warp base pointers, so the loop only adds small offsets.
struct WarpPointers {
    const uint4* words;      // this tile's first chunk, this lane
    const uint32_t* scales;  // this tile's first group, row g
};

template <int U, int V>
__device__ __forceinline__ void loadBatch(Batch<U, V>& b, const Wxa16Params& p, const WarpPointers& wp, int c0) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
        for (int v = 0; v < V; ++v) b.w[u][v] = loadStreaming(wp.words + ((c0 + u) * V + v) * 32);
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int group = p.groupShift >= 0 ? (c0 + u) >> p.groupShift : __ldg(p.chunkGroup + c0 + u);
        b.sz0[u] = __ldg(wp.scales + group * 16);
        b.sz1[u] = __ldg(wp.scales + group * 16 + 8);
    }
}

template <typename T, int BITS, int NT, int U, int V>
__device__ __forceinline__ void computeBatch(const Batch<U, V>& b, const Wxa16Params& p, const T* xLane, int c0, int g,
                                             float (&acc)[NT][4]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int chunk = c0 + u;
        uint32_t bx[NT][8];
        loadXFragments<T, NT>(xLane + chunk * 64, int64_t(8) * p.ldx, g, p.m, bx);
        const GroupParams<T> gp = makeGroup<T, BITS>(b.sz0[u], b.sz1[u]);
        const uint32_t* w = reinterpret_cast<const uint32_t*>(&b.w[u][0]);
        constexpr bool fold = kFoldZero<T, BITS, NT>;
        float t[NT][4], xsum[NT][4];
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) t[n][j] = xsum[n][j] = 0.0f;
        const uint32_t ones = asWord(typename ActTraits<T>::T2(T(1.0f), T(1.0f)));
        const uint32_t onesA[4] = {ones, ones, ones, ones};
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            uint32_t a[4];
            dequantStep<T, BITS, fold>(w, s, gp, a);
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                mma16816<T>(t[n], a, bx[n][2 * s], bx[n][2 * s + 1]);
                if constexpr (fold) mma16816<T>(xsum[n], onesA, bx[n][2 * s], bx[n][2 * s + 1]);
            }
        }
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            if constexpr (fold) {  // t - (base + zero) · sum(x), per row
                t[n][0] = fmaf(-gp.zf0, xsum[n][0], t[n][0]);
                t[n][1] = fmaf(-gp.zf0, xsum[n][1], t[n][1]);
                t[n][2] = fmaf(-gp.zf1, xsum[n][2], t[n][2]);
                t[n][3] = fmaf(-gp.zf1, xsum[n][3], t[n][3]);
            }
            acc[n][0] = fmaf(t[n][0], gp.s0, acc[n][0]);
            acc[n][1] = fmaf(t[n][1], gp.s0, acc[n][1]);
            acc[n][2] = fmaf(t[n][2], gp.s1, acc[n][2]);
            acc[n][3] = fmaf(t[n][3], gp.s1, acc[n][3]);
        }
    }
}

template <typename T, int BITS, int NT>
__global__ void __launch_bounds__(256) wxa16Kernel(const Wxa16Params p) {
    constexpr int kVecs = BITS == 4 ? 1 : 2;                 // 16-byte weight vectors per lane per chunk
    constexpr int kUnroll = (BITS == 4 ? 4 : 2) / (NT >= 4 ? 2 : 1);  // chunks per register batch
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const int tile = blockIdx.x * kWarpsPerBlock + warp;
    const int split = blockIdx.y;
    const int cBegin = split * p.chunksPerSplit, cEnd = min(p.chunks, cBegin + p.chunksPerSplit);
    const T* x = static_cast<const T*>(p.x);

    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[n][j] = 0.0f;

    if (tile < p.tiles) {
        const WarpPointers wp{p.words + int64_t(tile) * p.chunks * kVecs * 32 + lane,
                              p.scaleZero + int64_t(tile) * p.groups * 16 + g};
        const T* xLane = x + int64_t(g) * p.ldx + tig * 16;
        // Two register batches in turn: the loads of the next batch are in flight while this one is computed.
        int c = cBegin;
        if (c + kUnroll <= cEnd) {
            Batch<kUnroll, kVecs> b0, b1;
            loadBatch(b0, p, wp, c);
            while (true) {
                const bool more = c + 2 * kUnroll <= cEnd;
                if (more) loadBatch(b1, p, wp, c + kUnroll);
                computeBatch<T, BITS, NT>(b0, p, xLane, c, g, acc);
                c += kUnroll;
                if (!more) break;
                const bool more2 = c + 2 * kUnroll <= cEnd;
                if (more2) loadBatch(b0, p, wp, c + kUnroll);
                computeBatch<T, BITS, NT>(b1, p, xLane, c, g, acc);
                c += kUnroll;
                if (!more2) break;
            }
        }
        for (; c < cEnd; ++c) {
            Batch<1, kVecs> b;
            loadBatch(b, p, wp, c);
            computeBatch<T, BITS, NT>(b, p, xLane, c, g, acc);
        }
    }

    // acc[n]: (row g, tokens 8n + 2·tig + {0,1}) and (row g+8, same tokens).
    const int rowBase = tile * 16 + g;
    if (p.splitK == 1) {
        if (tile >= p.tiles) return;
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int tok = n * 8 + 2 * tig + (j % 2), row = rowBase + (j / 2) * 8;
                if (tok < p.m && row < p.rows) storeOutput<T>(p, tok, row, acc[n][j]);
            }
        return;
    }
    const int paddedRows = p.tiles * 16;
    if (tile < p.tiles) {
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int tok = n * 8 + 2 * tig + (j % 2), row = rowBase + (j / 2) * 8;
                if (tok < p.m) p.partial[(int64_t(split) * p.m + tok) * paddedRows + row] = acc[n][j];
            }
    }
    __threadfence();
    __syncthreads();
    __shared__ bool isLast;
    if (threadIdx.x == 0) isLast = atomicAdd(p.counters + blockIdx.x, 1) == p.splitK - 1;
    __syncthreads();
    if (!isLast) return;
    __threadfence();
    const int blockRows = kWarpsPerBlock * 16;
    for (int i = threadIdx.x; i < p.m * blockRows; i += blockDim.x) {
        const int tok = i / blockRows, row = blockIdx.x * blockRows + i % blockRows;
        if (row >= p.rows) continue;
        float sum = 0.0f;
        for (int s = 0; s < p.splitK; ++s) sum += __ldcg(p.partial + (int64_t(s) * p.m + tok) * paddedRows + row);
        storeOutput<T>(p, tok, row, sum);
    }
    if (threadIdx.x == 0) p.counters[blockIdx.x] = 0;
}

// Act-order: xg[tok, p] = x[tok, columnOf[p]] (0 for padding columns).
template <typename T>
__global__ void gatherColumnsKernel(const T* __restrict__ x, int64_t ldx, const int32_t* __restrict__ columnOf,
                                    int64_t paddedCols, int m, T* __restrict__ xg) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= int64_t(m) * paddedCols) return;
    const int64_t tok = i / paddedCols, pcol = i % paddedCols;
    const int32_t col = columnOf[pcol];
    xg[i] = col >= 0 ? x[tok * ldx + col] : T(0.0f);
}

template <typename T>
void launchWxa16(const Wxa16Params& p, int bits, dim3 grid, cudaStream_t stream);
template <typename T>
void launchW4Small(const Wxa16Params& p, cudaStream_t stream);  // 4 bits, p.m <= 16: w4_small_m_kernel.cuh
template <typename T>
int w4SmallBlocksPerSm(int m, int groupShift);
template <typename T>
void launchW4Tma(const Wxa16Params& p, cudaStream_t stream);  // sm_90+: w4_tma_kernel.cuh
template <typename T>
int w4TmaBlocksPerSm(int m, int groupShift);
template <typename T>
void launchW4Stream(const Wxa16Params& p, int warps, int multiprocessors, cudaStream_t stream);  // wxa16_instances.cuh
template <typename T>
void launchW8Stream(const Wxa16Params& p, int multiprocessors, cudaStream_t stream);  // 8 bits, p.m <= 16: w8_stream_kernel.cuh
template <typename T>
void launchGather(const void* x, int64_t ldx, const int32_t* columnOf, int64_t paddedCols, int m, void* xg,
                  cudaStream_t stream);

} // namespace cwb::kernels::detail
