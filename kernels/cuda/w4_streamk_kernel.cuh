#pragma once
// Fourth W4A16 kernel for m <= 16 tokens (internal; CWB_W4_KERNEL=streamk). Same tiled16x64 layout and step math as
// w4_small_m_kernel.cuh; what differs is the work split ("stream-K"):
// - a persistent grid of exactly the warps the GPU holds at once (fewer when the weight has fewer steps); the
//   weight's steps (a step: two chunks of one row tile, one group at g128) are cut into one contiguous, equal range
//   per warp, in the order the words lie in memory. So every warp streams one run of bytes with no block barrier,
//   no second wave and no idle multiprocessor at the end, whatever the number of row tiles;
// - a ring of S register buffers per warp keeps the next S - 1 steps' loads in flight across row tile boundaries;
// - where a warp's range ends a row tile it did not start, the tile's warps add up deterministically: each writes
//   its fp32 sums to its own slot, and the last to arrive (a counter per tile) adds the slots in order and writes Y.
// Needs groups of a power of two >= 2 chunks that exactly cover a row tile's chunks (every step inside one group and
// one tile, and a step's group its flat index shifted); other weights run the ring kernel.
#include "w4_small_m_kernel.cuh"

namespace cwb::kernels::detail {

constexpr int kStreamKWarps = 4;  // warps per block (the grid, not the block, is what is sized to the GPU)

// Shapes: ring depth S (steps per warp in flight + 1) and how the zero point is removed: folded after the mma
// through the activation sums (one all-ones mma per k-step), or subtracted from the weights before it (four HSUB2
// per word, no activation sums). CWB_W4_STREAMK_CONFIG (0..kStreamKConfigs - 1) or wxa16SetStreamKConfig picks one.
struct StreamKConfig {
    int depth;
    bool subtractZero;
};
constexpr int kStreamKConfigs = 4;
constexpr StreamKConfig kStreamKConfigTable[kStreamKConfigs] = {{4, true}, {4, false}, {3, true}, {6, true}};
int streamKConfigIndex();  // wxa16_gemm.cu
inline const StreamKConfig& streamKConfig() { return kStreamKConfigTable[streamKConfigIndex()]; }

// One step with the zero subtracted before the mma: A = (base + level) - (base + zero), exact in T (rows g + 8:
// 16·(level - zero) with the fp16 trick), so the mma sums exact integers times x and no activation sums are needed.
template <typename T, int NT>
__device__ __forceinline__ void computeSubtractedStep(const SmallStep<1, 2>& b, const Wxa16Params& p, const T* xq,
                                                      int64_t xTokenStride, int g, float (&acc)[1][NT][4]) {
    using T2 = typename ActTraits<T>::T2;
    const FoldedGroup f = foldedGroup<T>(b.sz0[0], b.sz1[0]);
    const T2 z0 = T2(T(f.zf0), T(f.zf0)), z1 = T2(T(f.zf1), T(f.zf1));
    float t[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int j = 0; j < 4; ++j) t[n][j] = 0.0f;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
        uint32_t bx[NT][8];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            if (n * 8 + g < p.m) {
                const uint4* xp = reinterpret_cast<const uint4*>(xq + n * xTokenStride + u * 64);
                const uint4 v0 = __ldg(xp), v1 = __ldg(xp + 1);
                bx[n][0] = v0.x; bx[n][1] = v0.y; bx[n][2] = v0.z; bx[n][3] = v0.w;
                bx[n][4] = v1.x; bx[n][5] = v1.y; bx[n][6] = v1.z; bx[n][7] = v1.w;
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) bx[n][j] = 0u;
            }
        }
        const uint32_t* w = reinterpret_cast<const uint32_t*>(&b.w[0][u]);
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            uint32_t a[4];
            magicStep<T>(w[s], a);
            a[0] = asWord(__hsub2(asPair<T2>(a[0]), z0));  // a[0], a[2]: row g; a[1], a[3]: row g + 8
            a[1] = asWord(__hsub2(asPair<T2>(a[1]), z1));
            a[2] = asWord(__hsub2(asPair<T2>(a[2]), z0));
            a[3] = asWord(__hsub2(asPair<T2>(a[3]), z1));
#pragma unroll
            for (int n = 0; n < NT; ++n) mma16816<T>(t[n], a, bx[n][2 * s], bx[n][2 * s + 1]);
        }
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        acc[0][n][0] = fmaf(t[n][0], f.s0, acc[0][n][0]);
        acc[0][n][1] = fmaf(t[n][1], f.s0, acc[0][n][1]);
        acc[0][n][2] = fmaf(t[n][2], f.s1, acc[0][n][2]);
        acc[0][n][3] = fmaf(t[n][3], f.s1, acc[0][n][3]);
    }
}

// End of the warp's part of row tile `tile` (steps [first, last) of the tile were this warp's): Y directly when the
// warp did the whole tile, else its sums into its slot, and the tile's last warp to arrive adds every slot (in slot
// order, so the result does not depend on timing) and writes Y. Warp w's range is steps [w·per, (w + 1)·per), so
// the warps of a tile and their slots follow from the tile alone. Not inlined: it runs once or twice per warp.
struct StreamKFinish {
    void* y;
    float* partial;
    int* counters;
    int m, rows, ldy, paddedRows, perTile, per;
};

template <typename T, int NT>
struct StreamKAcc {
    float v[NT][4];
};

template <typename T, int NT>
__device__ __noinline__ void finishStreamKTile(const StreamKFinish f, const StreamKAcc<T, NT> acc, int tile, int warp) {
    const int lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const int first = tile * f.perTile / f.per, last = (tile * f.perTile + f.perTile - 1) / f.per;
    T* y = static_cast<T*>(f.y);
    if (first == last) {
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int tok = n * 8 + 2 * tig + (j % 2), row = tile * 16 + g + (j / 2) * 8;
                if (tok < f.m && row < f.rows) y[tok * f.ldy + row] = T(acc.v[n][j]);
            }
        return;
    }
    const int64_t slotStride = int64_t(f.m) * f.paddedRows;
    float* slot = f.partial + (warp - first) * slotStride;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int tok = n * 8 + 2 * tig + (j % 2), row = tile * 16 + g + (j / 2) * 8;
            if (tok < f.m) __stcg(slot + int64_t(tok) * f.paddedRows + row, acc.v[n][j]);
        }
    __threadfence();
    __syncwarp();
    int arrived = 0;
    if (lane == 0) arrived = atomicAdd(f.counters + tile, 1);
    arrived = __shfl_sync(0xffffffffu, arrived, 0);
    if (arrived != last - first) return;
    __threadfence();
    for (int i = lane; i < f.m * 16; i += 32) {
        const int tok = i / 16, row = tile * 16 + i % 16;
        if (row >= f.rows) continue;
        const float* src = f.partial + int64_t(tok) * f.paddedRows + row;
        float sum = 0.0f;
        for (int s = 0; s <= last - first; ++s) sum += __ldcg(src + s * slotStride);
        y[tok * f.ldy + row] = T(sum);
    }
    if (lane == 0) f.counters[tile] = 0;  // left zeroed for the next launch
}

// Grid: ceil(p.streamKWarps / kStreamKWarps) blocks; warp w takes steps [w·per, (w + 1)·per) with per =
// p.streamKPer (the last warps may have fewer or none). p.partial holds p.streamKSlots slots of [m, tiles·16] fp32
// sums (the most warps that share one row tile). Needs p.chunks == p.groups << p.groupShift (flat group index).
template <typename T, int NT, int S, bool SUB>
__global__ void __launch_bounds__(kStreamKWarps * 32, NT == 1 && S <= 4 ? 5 : 4) w4StreamKKernel(const Wxa16Params p) {
    const int lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const int warp = blockIdx.x * kStreamKWarps + threadIdx.x / 32;
    const int perTile = p.chunks / 2, total = p.tiles * perTile, per = p.streamKPer;
    const int begin = warp * per, end = min(total, begin + per);
    if (begin >= end) return;  // no block barrier below: a warp past the cut just leaves

    const int64_t xTokenStride = int64_t(8) * p.ldx;
    const T* xLane = static_cast<const T*>(p.x) + int64_t(g) * p.ldx + tig * 16;
    const uint4* wq = p.words + int64_t(begin) * 64 + lane;  // step x's words: chunks 2x, 2x + 1 of the flat order
    const uint32_t* sLane = p.scaleZero + g;                 // step x's group: x >> (groupShift - 1), flat
    const int stepShift = p.groupShift - 1;
    int tile = begin / perTile, chunk = (begin - tile * perTile) * 2;  // the step computed next
    int loadChunk = chunk;                                             // the step loaded next

    StreamKAcc<T, NT> acc;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc.v[n][j] = 0.0f;
    const StreamKFinish fin{p.y, p.partial, p.counters, p.m, p.rows, int(p.ldy), p.tiles * 16, perTile, per};

    // Loads step `x` (ahead steps past the one computed next, ahead known at compile time) into b.
    auto load = [&](SmallStep<1, 2>& b, int x, int ahead) {
        if (g < p.m) {
            const T* xp = xLane + loadChunk * 64;
            asm volatile("prefetch.global.L1 [%0];\n" ::"l"(xp));
            asm volatile("prefetch.global.L1 [%0];\n" ::"l"(xp + 64));
        }
        if (NT == 2 && 8 + g < p.m) {
            const T* xp = xLane + xTokenStride + loadChunk * 64;
            asm volatile("prefetch.global.L1 [%0];\n" ::"l"(xp));
            asm volatile("prefetch.global.L1 [%0];\n" ::"l"(xp + 64));
        }
        b.w[0][0] = loadStreaming(wq + ahead * 64);
        b.w[0][1] = loadStreaming(wq + ahead * 64 + 32);
        const uint32_t* sp = sLane + (x >> stepShift) * 16;
        b.sz0[0] = __ldg(sp);
        b.sz1[0] = __ldg(sp + 8);
        loadChunk += 2;
        if (loadChunk == p.chunks) loadChunk = 0;
    };

    SmallStep<1, 2> ring[S];
#pragma unroll
    for (int i = 0; i < S - 1; ++i)
        if (begin + i < end) load(ring[i], begin + i, i);
    for (int x = begin; x < end;) {
#pragma unroll
        for (int i = 0; i < S; ++i) {
            if (x < end) {
                if (x + S - 1 < end) load(ring[(i + S - 1) % S], x + S - 1, S - 1);
                const T* xq = xLane + chunk * 64;
                if constexpr (SUB)
                    computeSubtractedStep<T, NT>(ring[i], p, xq, xTokenStride, g, reinterpret_cast<float(&)[1][NT][4]>(acc.v));
                else
                    computeSmallStep<T, NT, 1, 2>(ring[i], p, xq, xTokenStride, chunk, p.chunks, g,
                                                  reinterpret_cast<float(&)[1][NT][4]>(acc.v));
                ++x;
                wq += 64;
                chunk += 2;
                if (chunk == p.chunks || x == end) {
                    finishStreamKTile<T, NT>(fin, acc, tile, warp);
#pragma unroll
                    for (int n = 0; n < NT; ++n)
#pragma unroll
                        for (int j = 0; j < 4; ++j) acc.v[n][j] = 0.0f;
                    if (chunk == p.chunks) {
                        chunk = 0;
                        ++tile;
                    }
                }
            }
        }
    }
}

} // namespace cwb::kernels::detail
