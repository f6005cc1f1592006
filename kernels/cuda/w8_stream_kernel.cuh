#pragma once
// The W8A16 kernel for m <= 16 tokens (internal; CWB_W8_KERNEL=stream). Same tiled16x64 layout as the general
// kernel (include/cwb/kernels/packed_weight.h, 8 bits: two 16-byte vectors per lane and chunk, so a warp reads
// 1024 contiguous bytes per chunk) and the work split of the W4A16 stream kernel (w4_stream_kernel.cuh):
// - one block per row tile of 16 outputs; its W warps cut the tile's chunks into W contiguous pieces, so the block
//   sums the whole input dimension and writes Y itself (no split-K partials, counters or last block);
// - a warp issues the loads of a batch of B chunks (and their scale words) before computing any of them.
// Dequantization keeps the zero out of the A fragments and folds it after the mma (or, in the shapes marked
// `subtract`, takes it off each A register with one exact HSUB2):
// - fp16: one byte_perm per register gives the pair (1024 + q0, 1024 + q1), exact;
// - bf16: 1024 + q is not exact in bf16, so the fragment is q - 128 (exact): with v = 0x43 q-byte per 16-bit lane,
//   (v & 0x437F) is 128 + (q & 127) and (v & 0x0080) ^ 0x4380 is 128 when q >= 128 else 256; their difference is
//   q - 128 in both cases (one subtraction per pair, exact).
// Each group's sum is then scale · (t - (base + zero) · sum(x)), sum(x) from one more mma with an all-ones A.
#include "w4_small_m_kernel.cuh"

namespace cwb::kernels::detail {

template <typename T>
struct W8Fragments;
template <>
struct W8Fragments<__half> {
    static constexpr float kBase = 1024.0f;
    // A fragments of k-step s from the lane's words w0 = w[2s] (rows g, g+8; columns +0, +1) and w1 = w[2s+1] (+2, +3).
    __device__ static __forceinline__ void step(uint32_t w0, uint32_t w1, uint32_t* a) {
        a[0] = __byte_perm(w0, 0x64646464u, 0x4140u);
        a[1] = __byte_perm(w0, 0x64646464u, 0x4342u);
        a[2] = __byte_perm(w1, 0x64646464u, 0x4140u);
        a[3] = __byte_perm(w1, 0x64646464u, 0x4342u);
    }
};
template <>
struct W8Fragments<__nv_bfloat16> {
    static constexpr float kBase = -128.0f;
    __device__ static __forceinline__ uint32_t pair(uint32_t word, uint32_t selector) {
        const uint32_t v = __byte_perm(word, 0x43434343u, selector);
        const uint32_t low = v & 0x437F437Fu, offset = (v & 0x00800080u) ^ 0x43804380u;
        return asWord(__hsub2(asPair<__nv_bfloat162>(low), asPair<__nv_bfloat162>(offset)));
    }
    __device__ static __forceinline__ void step(uint32_t w0, uint32_t w1, uint32_t* a) {
        a[0] = pair(w0, 0x4140u);
        a[1] = pair(w0, 0x4342u);
        a[2] = pair(w1, 0x4140u);
        a[3] = pair(w1, 0x4342u);
    }
};

// A shape: chunks per batch (B), the most warps per block (4, 8 or 16; 0: the most whose blocks all fit on the GPU
// at once), whether a warp loads its next batch before computing the current one (two batches of registers). A
// configuration has one shape for up to 8 tokens and one for up to 16; CWB_W8_STREAM_CONFIG or
// wxa16SetW8StreamConfig picks one (0, the default, measured fastest overall on the H200: docs/performance.md,
// "W8A16: the stream kernel"; the others are the fixed shapes it was chosen from).
// `subtract`: the zero is subtracted from the A fragments (one HSUB2 per register, exact) instead of folded after the
// mma through the activation sums (one all-ones mma per k-step).
struct W8StreamShape {
    int batch, maxWarps;
    bool overlap, subtract;
};
struct W8StreamConfig {
    W8StreamShape upTo8, upTo16;
};
constexpr int kW8StreamConfigs = 9;
constexpr W8StreamConfig kW8StreamConfigTable[kW8StreamConfigs] = {
    {{2, 0, false, false}, {2, 0, false, false}},  {{2, 16, false, false}, {4, 8, false, false}},
    {{2, 8, false, false}, {2, 8, false, false}},  {{2, 4, false, false}, {2, 4, false, false}},
    {{1, 16, true, false}, {1, 16, true, false}},  {{4, 16, false, false}, {4, 16, false, false}},
    {{4, 8, false, false}, {2, 8, true, false}},   {{2, 16, true, false}, {2, 16, true, false}},
    {{2, 0, false, true}, {2, 0, false, true}}};
int w8StreamConfigIndex();  // wxa16_gemm.cu
inline const W8StreamShape& w8StreamShape(int m) {
    const W8StreamConfig& c = kW8StreamConfigTable[w8StreamConfigIndex()];
    return m <= 8 ? c.upTo8 : c.upTo16;
}

// Registers: a chunk in flight holds 8 per thread. The shapes with at most 2 chunks in flight per warp are capped so
// that more warps fit on a multiprocessor (the H200 runs: more warps beat more bytes in flight per warp): 64
// registers (32 warps) for one token tile, 80 (24 warps) for two; the others spill under such caps (ptxas -v, sm_90)
// and run with what they need (about 85 registers with 4 chunks in flight, 120 with 8).
template <int NT, int W, int INFLIGHT>
constexpr int w8StreamMinBlocks() {
    constexpr int warps = INFLIGHT > 2 ? 0 : NT == 1 ? 32 : 24;
    return warps / W > 0 ? warps / W : 1;
}

// One step: CPS chunks of one group (CPS = 2 with groups of 128 or more columns) and the group's (scale, zero) words.
template <int CPS>
struct W8Step {
    uint4 w[CPS][2];
    uint32_t sz0, sz1;
};

// Grid: one block per row tile; p.chunksPerSplit = chunks per warp (launchW8StreamShape); p.splitK = 1.
template <typename T, int NT, int W, int B, int CPS, bool OVERLAP, bool SUB>
__global__ void __launch_bounds__(W * 32, w8StreamMinBlocks<NT, W, B*(OVERLAP ? 2 : 1)>()) w8StreamKernel(const Wxa16Params p) {
    constexpr int S = B / CPS;  // steps per batch
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const int tile = blockIdx.x;
    const int cBegin = warp * p.chunksPerSplit, cEnd = min(p.chunks, cBegin + p.chunksPerSplit);

    const uint4* wq = p.words + (int64_t(tile) * p.chunks + cBegin) * 64 + lane;
    const uint32_t* sp = p.scaleZero + int64_t(tile) * p.groups * 16 + g;
    const int64_t xTokenStride = int64_t(8) * p.ldx;
    const T* xq = static_cast<const T*>(p.x) + int64_t(g) * p.ldx + tig * 16 + int64_t(cBegin) * 64;

    float acc[1][NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[0][n][j] = 0.0f;

    // Issues the loads of the step at chunk c + ahead (ahead: a compile-time offset from wq and xq); the
    // activations only go into L1 here and are read when the step is computed.
    auto loadStep = [&](W8Step<CPS>& s, int c, int ahead) {
#pragma unroll
        for (int n = 0; n < NT; ++n)
            if (n * 8 + g < p.m)
#pragma unroll
                for (int u = 0; u < CPS; ++u)
                    if (u == 0 || c + u < cEnd)
                        asm volatile("prefetch.global.L1 [%0];\n" ::"l"(xq + n * xTokenStride + (ahead + u) * 64));
#pragma unroll
        for (int u = 0; u < CPS; ++u)
#pragma unroll
            for (int v = 0; v < 2; ++v)
                s.w[u][v] = (u == 0 || c + u < cEnd) ? loadStreaming(wq + (ahead + u) * 64 + v * 32) : make_uint4(0, 0, 0, 0);
        const int group = CPS == 2 || p.groupShift >= 0 ? c >> p.groupShift : __ldg(p.chunkGroup + c);  // CPS 2: shift >= 1
        s.sz0 = __ldg(sp + group * 16);
        s.sz1 = __ldg(sp + group * 16 + 8);
    };
    auto computeStep = [&](const W8Step<CPS>& s, int c, int ahead) {
        using T2 = typename ActTraits<T>::T2;
        float t[NT][4], xs[NT][4];
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) t[n][j] = xs[n][j] = 0.0f;
        const uint32_t ones = asWord(T2(T(1.0f), T(1.0f)));
        const uint32_t onesA[4] = {ones, ones, ones, ones};
        const T2 p0 = asPair<T2>(s.sz0), p1 = asPair<T2>(s.sz1);  // (scale, zero) of rows g and g+8
        const float s0 = float(p0.x), s1 = float(p1.x);
        const float zf0 = W8Fragments<T>::kBase + float(p0.y), zf1 = W8Fragments<T>::kBase + float(p1.y);
        const T2 z0 = T2(T(zf0), T(zf0)), z1 = T2(T(zf1), T(zf1));  // exact: 1024 + zero (fp16), zero - 128 (bf16)
#pragma unroll
        for (int u = 0; u < CPS; ++u) {
            if (u > 0 && c + u >= cEnd) break;
            uint32_t bx[NT][8];
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                if (n * 8 + g < p.m) {
                    // volatile: kept here, after the batch's weight loads, instead of hoisted into more registers
                    const T* xp = xq + n * xTokenStride + (ahead + u) * 64;
                    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                                 : "=r"(bx[n][0]), "=r"(bx[n][1]), "=r"(bx[n][2]), "=r"(bx[n][3]) : "l"(xp));
                    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                                 : "=r"(bx[n][4]), "=r"(bx[n][5]), "=r"(bx[n][6]), "=r"(bx[n][7]) : "l"(xp + 8));
                } else {
#pragma unroll
                    for (int j = 0; j < 8; ++j) bx[n][j] = 0u;
                }
            }
            const uint32_t* w = reinterpret_cast<const uint32_t*>(&s.w[u][0]);
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                uint32_t a[4];
                W8Fragments<T>::step(w[2 * k], w[2 * k + 1], a);
                if constexpr (SUB) {  // a[0], a[2]: row g; a[1], a[3]: row g + 8
                    a[0] = asWord(__hsub2(asPair<T2>(a[0]), z0));
                    a[1] = asWord(__hsub2(asPair<T2>(a[1]), z1));
                    a[2] = asWord(__hsub2(asPair<T2>(a[2]), z0));
                    a[3] = asWord(__hsub2(asPair<T2>(a[3]), z1));
                }
#pragma unroll
                for (int n = 0; n < NT; ++n) {
                    mma16816<T>(t[n], a, bx[n][2 * k], bx[n][2 * k + 1]);
                    if constexpr (!SUB) mma16816<T>(xs[n], onesA, bx[n][2 * k], bx[n][2 * k + 1]);
                }
            }
        }
        // acc += scale · (t - (base + zero) · sum(x)); xs[n][0..1] are the sums of tokens 2·tig + {0,1}. With SUB the
        // zero is already out of t.
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            if constexpr (SUB) {
                acc[0][n][0] = fmaf(t[n][0], s0, acc[0][n][0]);
                acc[0][n][1] = fmaf(t[n][1], s0, acc[0][n][1]);
                acc[0][n][2] = fmaf(t[n][2], s1, acc[0][n][2]);
                acc[0][n][3] = fmaf(t[n][3], s1, acc[0][n][3]);
                continue;
            }
            acc[0][n][0] = fmaf(fmaf(-zf0, xs[n][0], t[n][0]), s0, acc[0][n][0]);
            acc[0][n][1] = fmaf(fmaf(-zf0, xs[n][1], t[n][1]), s0, acc[0][n][1]);
            acc[0][n][2] = fmaf(fmaf(-zf1, xs[n][0], t[n][2]), s1, acc[0][n][2]);
            acc[0][n][3] = fmaf(fmaf(-zf1, xs[n][1], t[n][3]), s1, acc[0][n][3]);
        }
    };
    auto loadBatch = [&](W8Step<CPS>(&batch)[S], int c, int ahead) {
#pragma unroll
        for (int i = 0; i < S; ++i)
            if (c + ahead + i * CPS < cEnd) loadStep(batch[i], c + ahead + i * CPS, ahead + i * CPS);
    };
    auto computeBatch = [&](const W8Step<CPS>(&batch)[S], int c, int ahead) {
#pragma unroll
        for (int i = 0; i < S; ++i)
            if (c + ahead + i * CPS < cEnd) computeStep(batch[i], c + ahead + i * CPS, ahead + i * CPS);
    };
    if constexpr (OVERLAP) {
        W8Step<CPS> first[S], second[S];
        int c = cBegin;
        if (c < cEnd) loadBatch(first, c, 0);
        for (; c < cEnd; c += 2 * B) {
            if (c + B < cEnd) loadBatch(second, c, B);
            computeBatch(first, c, 0);
            if (c + B >= cEnd) break;
            if (c + 2 * B < cEnd) loadBatch(first, c, 2 * B);
            computeBatch(second, c, B);
            wq += 2 * B * 64;
            xq += 2 * B * 64;
        }
    } else {
        for (int c = cBegin; c < cEnd; c += B) {
            W8Step<CPS> batch[S];
            loadBatch(batch, c, 0);
            computeBatch(batch, c, 0);
            wq += B * 64;
            xq += B * 64;
        }
    }

    __shared__ float red[W * NT * 4 * 32];
    finishSmallBlock<T, NT, 1, W, false>(p, acc, red, tile, 0);   // one split (launchW8StreamShape)
}

} // namespace cwb::kernels::detail
