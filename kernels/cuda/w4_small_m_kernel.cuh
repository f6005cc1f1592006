#pragma once
// The W4A16 kernel for m <= 16 tokens (internal; m > 16 uses wxa16_kernel.cuh, 8-bit weights at m <= 16
// w8_stream_kernel.cuh unless CWB_W8_KERNEL=old). Same tiled16x64
// layout (include/cwb/kernels/packed_weight.h). What makes it cheaper per weight than the general kernel:
// - a warp owns R row tiles (16·R output rows), so each activation fragment, each all-ones mma that sums the
//   activations and the loop's address arithmetic serve R tiles;
// - the zero point is folded after the mma: the A fragments are the magic-number values base + level (one LOP3
//   per register, no subtraction; fp16: base + 16·level, magicStep's SIXTEENS), and (base + zero) · sum(x) is
//   subtracted once per group; or, in the shapes marked
//   `subtract` (the stream kernel's default), taken off each A register with one exact HSUB2, no sum(x) needed;
// - with groups of 128 or more columns the scale is applied once per pair of chunks (one group), not per chunk;
// - the 4 warps of a block split the block's chunk range and add up through shared memory, so the global split-K
//   partials (and the last block's sum) are 4x smaller.
#include "wxa16_kernel.cuh"

namespace cwb::kernels::detail {

constexpr int kSmallWarps = 4;
constexpr int kSmallMaxTokens = 16;

// Shapes of the kernel: row tiles per warp (R) and register buffers (S) for up to 8 and up to 16 tokens. The
// environment variable CWB_W4_SMALL_CONFIG (0..kSmallConfigs - 1) or wxa16SetSmallConfig picks another for
// benchmarking. 4 and 5 hold one row tile per warp with a deeper ring: fewer registers per buffer, so more loads
// in flight per SM and more (smaller) blocks to fill the multiprocessors.
// `subtract`: the zero is subtracted from the weights before the mma (computeSubtractedStep) instead of folded after
// it through the activation sums.
struct SmallConfig {
    int r8, s8, r16, s16;
    bool subtract;
};
constexpr int kSmallConfigs = 7;
constexpr SmallConfig kSmallConfigTable[kSmallConfigs] = {{2, 3, 2, 2, false}, {2, 4, 2, 3, false}, {4, 2, 2, 4, false},
                                                          {4, 3, 2, 2, false}, {1, 4, 1, 4, false}, {1, 6, 1, 6, false},
                                                          {2, 3, 2, 2, true}};
int smallConfigIndex();  // wxa16_gemm.cu
inline int smallRowTiles(int m) {
    const SmallConfig& c = kSmallConfigTable[smallConfigIndex()];
    return m <= 8 ? c.r8 : c.r16;
}
// Chunks per step: a step is one group when every group spans a power of two (>= 2) of chunks.
inline int smallChunksPerStep(int groupShift) { return groupShift >= 1 ? 2 : 1; }

// Per row tile: the folded-zero constants of rows g and g+8 for one group.
struct FoldedGroup {
    float s0, s1;    // scales (row g+8: / 16 with the fp16 trick)
    float zf0, zf1;  // base + zero of the magic-number values
};

// SIXTEENS (magicStep's): rows g read 16·level as well.
template <typename T, bool SIXTEENS = false>
__device__ __forceinline__ FoldedGroup foldedGroup(uint32_t sz0, uint32_t sz1) {
    using T2 = typename ActTraits<T>::T2;
    const T2 p0 = asPair<T2>(sz0), p1 = asPair<T2>(sz1);  // (scale, zero)
    FoldedGroup f;
    constexpr float base = ActTraits<T>::kBase4;
    if constexpr (SIXTEENS && kSixteenTrick<T, 4>) {
        f.s0 = float(p0.x) * 0.0625f;
        f.zf0 = fmaf(float(p0.y), 16.0f, base);
    } else {
        f.s0 = float(p0.x);
        f.zf0 = base + float(p0.y);
    }
    if constexpr (kSixteenTrick<T, 4>) {
        f.s1 = float(p1.x) * 0.0625f;
        f.zf1 = fmaf(float(p1.y), 16.0f, base);
    } else {
        f.s1 = float(p1.x);
        f.zf1 = base + float(p1.y);
    }
    return f;
}

// A fragments of k-step s from the lane's word: base + level (rows g+8: base + 16·level with the fp16 trick).
// SIXTEENS (fp16; the zero folded after the mma, computeSmallStep): rows g read base + 16·level too, two more shifts
// per word. The mma's fp32 sums then carry base·sum(x) against 16·level·x instead of level·x, 16x less of the
// result lost to it: with x of mean 4 the fold measured nmse 4.5-4.9e-5 with base + level, against 4.5-6.7e-8 for
// the subtracted zero (H200, session 21).
template <typename T, bool SIXTEENS = false>
__device__ __forceinline__ void magicStep(uint32_t q, uint32_t* a) {
    if constexpr (SIXTEENS && kSixteenTrick<T, 4>) {
        const uint32_t q8 = q >> 8;
        a[0] = andOr<0x00F000F0u, 0x64006400u>(q << 4);
        a[1] = andOr<0x00F000F0u, 0x64006400u>(q);
        a[2] = andOr<0x00F000F0u, 0x64006400u>(q >> 4);
        a[3] = andOr<0x00F000F0u, 0x64006400u>(q8);
    } else if constexpr (kSixteenTrick<T, 4>) {
        const uint32_t q8 = q >> 8;
        a[0] = andOr<0x000F000Fu, 0x64006400u>(q);
        a[1] = andOr<0x00F000F0u, 0x64006400u>(q);
        a[2] = andOr<0x000F000Fu, 0x64006400u>(q8);
        a[3] = andOr<0x00F000F0u, 0x64006400u>(q8);
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = andOr<0x000F000Fu, ActTraits<T>::kMagic4>(q >> (4 * i));
    }
}

// Weights and (scale, zero) words of one step: CPS chunks (one group when CPS = 2) of R row tiles.
template <int R, int CPS>
struct SmallStep {
    uint4 w[R][CPS];
    uint32_t sz0[R], sz1[R];
};

// Loads the step that starts at chunk c = (current chunk) + ahead; wq[r]: tile r's words of the current chunk (this
// lane), so `ahead` (known at compile time in the unrolled loop) becomes an immediate offset. A second chunk past
// cEnd is not read.
// The step's activations are only prefetched into L1 (no registers held): computeSmallStep reads them S - 1 steps
// later, so their L2 latency is off the critical path.
// PREFETCH_X false: weights and scales only (what a kernel may load before waiting for the kernel that writes x).
// ALL_ROWS: xq is valid for every lane (loadXFragments), so the prefetch needs no check.
// FROM_GROUP (CPS = 2 only): sp[r] points at group `firstGroup` (the caller's first), not at group 0, and the step's
// group is found as an unsigned offset from it: one 32-bit offset and one wide add per step, not 64-bit arithmetic
// from the tile's start (which the persistent stream kernel formed again for every row tile).
template <int NT, int R, int CPS, typename T, bool PREFETCH_X = true, bool ALL_ROWS = false, bool FROM_GROUP = false>
__device__ __forceinline__ void loadSmallStep(SmallStep<R, CPS>& b, const Wxa16Params& p, const uint4* const* wq,
                                              const uint32_t* const* sp, const T* xq, int64_t xTokenStride, int g,
                                              int c, int cEnd, int ahead, int firstGroup = 0) {
    static_assert(!FROM_GROUP || CPS == 2, "offsets from the first group: steps of one group");
#pragma unroll
    for (int n = 0; n < NT; ++n)
        if (PREFETCH_X && (ALL_ROWS || n * 8 + g < p.m))
#pragma unroll
            for (int u = 0; u < CPS; ++u)
                if (u == 0 || c + u < cEnd)
                    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(xq + n * xTokenStride + (ahead + u) * 64));
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int u = 0; u < CPS; ++u)
            b.w[r][u] = (u == 0 || c + u < cEnd) ? loadStreaming(wq[r] + (ahead + u) * 32) : make_uint4(0, 0, 0, 0);
    // Two chunks per step only with groups of 2^groupShift >= 2 chunks: no table, no branch.
    const int group = CPS == 2 || p.groupShift >= 0 ? c >> p.groupShift : __ldg(p.chunkGroup + c);
    const unsigned fromFirst = unsigned(group - firstGroup) * 16u;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const uint32_t* s = FROM_GROUP ? sp[r] + fromFirst : sp[r] + group * 16;
        b.sz0[r] = __ldg(s);
        b.sz1[r] = __ldg(s + 8);
    }
}

// SPLIT: each chunk of the step accumulates into its own registers, so the dependent mma chains are 4 long instead
// of 4·CPS (the sums are added before the fold); costs (R + 1)·NT·4·(CPS - 1) registers.
template <typename T, int NT, int R, int CPS, bool SPLIT = false>
__device__ __forceinline__ void computeSmallStep(const SmallStep<R, CPS>& b, const Wxa16Params& p, const T* xq,
                                                 int64_t xTokenStride, int c, int cEnd, int g,
                                                 float (&acc)[R][NT][4]) {
    constexpr int kChains = SPLIT ? CPS : 1;
    float tc[kChains][R][NT][4], xc[kChains][NT][4];
#pragma unroll
    for (int k = 0; k < kChains; ++k)
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
            for (int j = 0; j < 4; ++j) xc[k][n][j] = 0.0f;
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int j = 0; j < 4; ++j) tc[k][r][n][j] = 0.0f;
        }
    const uint32_t ones = asWord(typename ActTraits<T>::T2(T(1.0f), T(1.0f)));
    const uint32_t onesA[4] = {ones, ones, ones, ones};
#pragma unroll
    for (int u = 0; u < CPS; ++u) {
        if (u > 0 && c + u >= cEnd) break;
        auto& t = tc[SPLIT ? u : 0];
        auto& xs = xc[SPLIT ? u : 0];
        uint32_t bx[NT][8];
        loadXFragments<T, NT>(xq + u * 64, xTokenStride, g, p.m, bx);
#pragma unroll
        for (int s = 0; s < 4; ++s) {
#pragma unroll
            for (int n = 0; n < NT; ++n) mma16816<T>(xs[n], onesA, bx[n][2 * s], bx[n][2 * s + 1]);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const uint32_t* w = reinterpret_cast<const uint32_t*>(&b.w[r][u]);
                uint32_t a[4];
                magicStep<T, true>(w[s], a);
#pragma unroll
                for (int n = 0; n < NT; ++n) mma16816<T>(t[r][n], a, bx[n][2 * s], bx[n][2 * s + 1]);
            }
        }
    }
    // acc += scale · (t - (base + zero) · sum(x)); xs[n][0..1] are the sums of tokens 2·tig + {0,1}.
    auto& t = tc[0];
    auto& xs = xc[0];
#pragma unroll
    for (int k = 1; k < kChains; ++k)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                xs[n][j] += xc[k][n][j];
#pragma unroll
                for (int r = 0; r < R; ++r) t[r][n][j] += tc[k][r][n][j];
            }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const FoldedGroup f = foldedGroup<T, true>(b.sz0[r], b.sz1[r]);
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            acc[r][n][0] = fmaf(fmaf(-f.zf0, xs[n][0], t[r][n][0]), f.s0, acc[r][n][0]);
            acc[r][n][1] = fmaf(fmaf(-f.zf0, xs[n][1], t[r][n][1]), f.s0, acc[r][n][1]);
            acc[r][n][2] = fmaf(fmaf(-f.zf1, xs[n][0], t[r][n][2]), f.s1, acc[r][n][2]);
            acc[r][n][3] = fmaf(fmaf(-f.zf1, xs[n][1], t[r][n][3]), f.s1, acc[r][n][3]);
        }
    }
}

// Per row tile and group of a subtracted step: what the mma's A registers are corrected by, and the scales.
// Formed in T2 arithmetic from the (scale, zero) words: the zero's half broadcast into an HADD2 (one instruction
// each) and the scales widened (one each), not through fp32 and back (the one-token persistent kernel: 808 SASS
// instructions against 832; 0-3% faster at one token, H200, session 24).
// fp16 (the sixteen trick): rows g + 8 hold base + 16·level, and take one HFMA2, (base + 16·level)/16 - (base/16 +
// zero) = level - zero, exact, in place of the HSUB2; so their scale needs no 1/16 either.
template <typename T>
struct SubtractedGroup {
    typename ActTraits<T>::T2 z0;   // base + zero, both halves (rows g)
    typename ActTraits<T>::T2 z1;   // rows g + 8: base + zero, or -(base/16 + zero) with the sixteen trick
    float s0, s1;
};
template <typename T2>
__device__ __forceinline__ T2 highBoth(T2 v);
template <>
__device__ __forceinline__ __half2 highBoth<__half2>(__half2 v) { return __high2half2(v); }
template <>
__device__ __forceinline__ __nv_bfloat162 highBoth<__nv_bfloat162>(__nv_bfloat162 v) { return __high2bfloat162(v); }

template <typename T>
__device__ __forceinline__ SubtractedGroup<T> subtractedGroup(uint32_t sz0, uint32_t sz1) {
    using T2 = typename ActTraits<T>::T2;
    constexpr float base = ActTraits<T>::kBase4;
    const T2 p0 = asPair<T2>(sz0), p1 = asPair<T2>(sz1);  // (scale, zero)
    SubtractedGroup<T> f;
    f.z0 = __hadd2(highBoth(p0), T2(T(base), T(base)));
    if constexpr (kSixteenTrick<T, 4>)
        f.z1 = __hsub2(T2(T(-base / 16), T(-base / 16)), highBoth(p1));
    else
        f.z1 = __hadd2(highBoth(p1), T2(T(base), T(base)));
    f.s0 = __low2float(p0);
    f.s1 = __low2float(p1);
    return f;
}

// The same step with the zero subtracted before the mma: A = (base + level) - (base + zero), exact in T (rows g + 8
// under the sixteen trick: one HFMA2, subtractedGroup), so the mma sums exact integers times x: four HSUB2 / HFMA2
// per word instead of one all-ones mma per k-step and the fold.
template <typename T, int NT, int R, int CPS, bool XS = false, bool ALL_ROWS = false>
__device__ __forceinline__ void computeSubtractedStep(const SmallStep<R, CPS>& b, const Wxa16Params& p, const T* xq,
                                                      int64_t xTokenStride, int c, int cEnd, int g,
                                                      float (&acc)[R][NT][4]) {
    using T2 = typename ActTraits<T>::T2;
    SubtractedGroup<T> f[R];
    float t[R][NT][4];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        f[r] = subtractedGroup<T>(b.sz0[r], b.sz1[r]);
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) t[r][n][j] = 0.0f;
    }
    const T2 sixteenth = T2(T(0.0625f), T(0.0625f));
#pragma unroll
    for (int u = 0; u < CPS; ++u) {
        if (u > 0 && c + u >= cEnd) break;
        uint32_t bx[NT][8];
        loadXFragments<T, NT, XS, ALL_ROWS>(xq + u * 64, xTokenStride, g, p.m, bx);
#pragma unroll
        for (int s = 0; s < 4; ++s)
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const uint32_t* w = reinterpret_cast<const uint32_t*>(&b.w[r][u]);
                uint32_t a[4];
                magicStep<T>(w[s], a);
                a[0] = asWord(__hsub2(asPair<T2>(a[0]), f[r].z0));  // a[0], a[2]: row g; a[1], a[3]: row g + 8
                a[2] = asWord(__hsub2(asPair<T2>(a[2]), f[r].z0));
                if constexpr (kSixteenTrick<T, 4>) {
                    a[1] = asWord(__hfma2(asPair<T2>(a[1]), sixteenth, f[r].z1));
                    a[3] = asWord(__hfma2(asPair<T2>(a[3]), sixteenth, f[r].z1));
                } else {
                    a[1] = asWord(__hsub2(asPair<T2>(a[1]), f[r].z1));
                    a[3] = asWord(__hsub2(asPair<T2>(a[3]), f[r].z1));
                }
#pragma unroll
                for (int n = 0; n < NT; ++n) mma16816<T>(t[r][n], a, bx[n][2 * s], bx[n][2 * s + 1]);
            }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            acc[r][n][0] = fmaf(t[r][n][0], f[r].s0, acc[r][n][0]);
            acc[r][n][1] = fmaf(t[r][n][1], f[r].s0, acc[r][n][1]);
            acc[r][n][2] = fmaf(t[r][n][2], f[r].s1, acc[r][n][2]);
            acc[r][n][3] = fmaf(t[r][n][3], f[r].s1, acc[r][n][3]);
        }
}

// The step under the kernel's zero handling; XS: xq points into shared memory (subtracted steps only); ALL_ROWS: xq
// valid for every lane (loadXFragments; subtracted steps only).
template <typename T, int NT, int R, int CPS, bool SUB, bool SPLIT = false, bool XS = false, bool ALL_ROWS = false>
__device__ __forceinline__ void computeStep(const SmallStep<R, CPS>& b, const Wxa16Params& p, const T* xq,
                                            int64_t xTokenStride, int c, int cEnd, int g, float (&acc)[R][NT][4]) {
    static_assert(SUB || !XS, "activations from shared memory: subtracted steps only");
    static_assert(SUB || !ALL_ROWS, "every lane's activations valid: subtracted steps only");
    if constexpr (SUB)
        computeSubtractedStep<T, NT, R, CPS, XS, ALL_ROWS>(b, p, xq, xTokenStride, c, cEnd, g, acc);
    else
        computeSmallStep<T, NT, R, CPS, SPLIT>(b, p, xq, xTokenStride, c, cEnd, g, acc);
}

// End of a block of W warps that share R row tiles: the warps' sums add up through `red` (W·R·NT·4·32 floats of
// shared memory; element (r, n, j) of lane l of warp w at red[((w·R + r)·NT + n)·4 + j][l]), then Y is written
// (one split) or the fp32 partial sums, and the last block of a row range to finish adds those up.
// SPLITS false: the caller launches one split (p.splitK = 1; the stream kernels), so the split-K tail is not compiled.
// The thread's index is split unsigned: its divisions by powers of two are then shifts, not signed-rounding sequences.
template <typename T, int NT, int R, int W, bool SPLITS = true>
__device__ __forceinline__ void finishSmallBlock(const Wxa16Params& p, const float (&acc)[R][NT][4], float* red,
                                                 int tile0, int split) {
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    constexpr unsigned kPerWarp = R * NT * 4;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) red[(warp * kPerWarp + (r * NT + n) * 4 + j) * 32 + lane] = acc[r][n][j];
    __syncthreads();

    const int paddedRows = p.tiles * 16;
    for (unsigned i = threadIdx.x; i < kPerWarp * 32; i += blockDim.x) {
        const int e = int(i / 32), l = int(i % 32);
        const int r = int(unsigned(e) / (NT * 4)), n = int(unsigned(e) / 4 % NT), j = int(unsigned(e) % 4);
        const int tok = n * 8 + 2 * (l % 4) + (j % 2);
        const int tile = tile0 + r, row = tile * 16 + l / 4 + (j / 2) * 8;
        if (tok >= p.m || tile >= p.tiles) continue;
        float sum = red[i];   // warp 0's (i = e·32 + l)
#pragma unroll
        for (int w = 1; w < W; ++w) sum += red[w * int(kPerWarp) * 32 + int(i)];
        if (!SPLITS || p.splitK == 1) {
            if (row < p.rows) storeOutput<T>(p, tok, row, sum);
        } else {
            p.partial[(int64_t(split) * p.m + tok) * paddedRows + row] = sum;
        }
    }
    if (!SPLITS || p.splitK == 1) return;

    __threadfence();
    __syncthreads();
    __shared__ bool isLast;
    if (threadIdx.x == 0) isLast = atomicAdd(p.counters + blockIdx.x, 1) == p.splitK - 1;
    __syncthreads();
    if (!isLast) return;
    __threadfence();
    constexpr int blockRows = R * 16;
    for (int i = threadIdx.x; i < p.m * blockRows; i += blockDim.x) {
        const int tok = i / blockRows, row = tile0 * 16 + i % blockRows;
        if (row >= p.rows) continue;
        const float* src = p.partial + int64_t(tok) * paddedRows + row;
        const int64_t stride = int64_t(p.m) * paddedRows;
        float sum = 0.0f;
#pragma unroll 8
        for (int s = 0; s < p.splitK; ++s) sum += __ldcg(src + s * stride);
        storeOutput<T>(p, tok, row, sum);
    }
    if (threadIdx.x == 0) p.counters[blockIdx.x] = 0;
}

// Grid: x = groups of R row tiles, y = splits of the chunks (each a multiple of CPS chunks). Warp w of a block
// takes the block's steps w, w + 4, ...; p.tiles need not be a multiple of R (the last warp's extra tiles re-read
// the last tile and are not stored).
template <typename T, int NT, int R, int S, int CPS, bool SUB>
__global__ void __launch_bounds__(kSmallWarps * 32) w4SmallKernel(const Wxa16Params p) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const int tile0 = blockIdx.x * R;
    const int split = blockIdx.y;
    const int cBegin = split * p.chunksPerSplit, cEnd = min(p.chunks, cBegin + p.chunksPerSplit);

    const uint4* wp[R];
    const uint32_t* sp[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int tile = min(tile0 + r, p.tiles - 1);
        wp[r] = p.words + int64_t(tile) * p.chunks * 32 + lane;
        sp[r] = p.scaleZero + int64_t(tile) * p.groups * 16 + g;
    }
    const T* xLane = static_cast<const T*>(p.x) + int64_t(g) * p.ldx + tig * 16;

    float acc[R][NT][4];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[r][n][j] = 0.0f;

    // A ring of S register buffers: the loads of the next S - 1 steps are in flight while one step is computed.
    // Pointers to the current step advance by one stride, so every load takes an immediate offset.
    constexpr int stride = kSmallWarps * CPS;
    int c = cBegin + warp * CPS;
    const uint4* wq[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wq[r] = wp[r] + c * 32;
    const T* xq = xLane + c * 64;
    const int64_t xTokenStride = int64_t(8) * p.ldx;
    SmallStep<R, CPS> ring[S];
#pragma unroll
    for (int i = 0; i < S - 1; ++i)
        if (c + i * stride < cEnd)
            loadSmallStep<NT>(ring[i], p, wq, sp, xq, xTokenStride, g, c + i * stride, cEnd, i * stride);
    bool done = c >= cEnd;
    while (!done) {
#pragma unroll
        for (int i = 0; i < S; ++i) {
            if (!done) {
                constexpr int ahead = (S - 1) * stride;
                if (c + ahead < cEnd)
                    loadSmallStep<NT>(ring[(i + S - 1) % S], p, wq, sp, xq, xTokenStride, g, c + ahead, cEnd, ahead);
                computeStep<T, NT, R, CPS, SUB>(ring[i], p, xq, xTokenStride, c, cEnd, g, acc);
#pragma unroll
                for (int r = 0; r < R; ++r) wq[r] += stride * 32;
                xq += stride * 64;
                c += stride;
                done = c >= cEnd;
            }
        }
    }

    __shared__ float red[kSmallWarps * R * NT * 4 * 32];
    finishSmallBlock<T, NT, R, kSmallWarps>(p, acc, red, tile0, split);
}

} // namespace cwb::kernels::detail
