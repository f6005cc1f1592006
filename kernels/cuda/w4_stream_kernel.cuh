#pragma once
// Third W4A16 kernel for m <= 16 tokens (internal; CWB_W4_KERNEL=stream). Same tiled16x64 layout and the same
// folded-zero math as w4_small_m_kernel.cuh; what differs is the work split, modelled on the dense GEMV that streams
// fp16 weights at 85-100% of copy bandwidth:
// - one block per row tile; its W warps cut the tile's chunk range into W contiguous pieces, so the whole input
//   dimension is summed inside the block: no split-K partials, no counters, no last block, no second wave of
//   round trips at the end;
// - a warp issues the loads of a whole batch of B chunks (and their scale words) before it computes any, then
//   computes the batch; most warps have one or two batches, so nearly every load of the kernel is in flight
//   within the first microsecond.
#include "decode_common.cuh"
#include "dependent_launch.cuh"
#include "w4_small_m_kernel.cuh"

namespace cwb::kernels::detail {

// Shapes: chunks per batch (B, a multiple of 2), the most warps a block may have (Wmax: 4, 8 or 16), whether a warp
// loads its next batch before computing the current one (two batches of registers), and whether each chunk of a
// step sums into its own registers (shorter dependent mma chains). CWB_W4_STREAM_CONFIG (0..kStreamConfigs - 1) or
// wxa16SetStreamConfig picks one (default kDefaultStreamConfig). (A variant that staged up to 16 chunks per warp in shared memory through cp.async
// measured 1.1-1.6x slower than these on the H200 and was removed: docs/performance.md, "W4A16: the stream kernel".)
// `subtract`: the zero subtracted from the weights before the mma (computeSubtractedStep; one accumulator per tile).
// `persist`: a block takes row tiles tile, tile + grid, ... and loads the next tile's first batch before it adds up the
// current one across its warps, so the loads stay in flight through the reduction and the store (0: one tile per
// block; 1: k = ceil(tiles / resident blocks) tiles per block, ceil(tiles / k) blocks, so every block has k or k - 1;
// 2: as many blocks as are resident at once).
// `manyTilesBatch` (persistent subtract shapes; 0: none): the batch used instead when a launch has more row tiles than
// two per multiprocessor, so that most blocks take several tiles (the next tile's batch is then loaded during the
// reduction of this one, and a bigger batch keeps more of it in flight).
// `rowTiles8`, `rowTiles16` (persistent subtract shapes, plain x; 1, 2 or 4): row tiles a block takes at once for up to 8
// and for 9..16 tokens. Each activation fragment a warp loads then serves that many tiles: at 16 tokens x is 4x the
// int4 weight's bytes per row tile, so one tile per block reads 4 bytes of x through L1/L2 per byte of weight. With
// more than one tile the norm and the GLU epilogue are not folded (separate launches).
// `overlapLongRows` (persistent subtract shapes of one batch, 16 warps, one row tile up to 8 tokens; 0: none): launches
// of up to longRowsTokens tokens and plain x with at least this many chunks per warp on average (chunks >=
// overlapLongRows * warps) take the two-batch persistent kernel of one row tile per block (shape 16's at m = 1), which
// measured 2-8% faster than 15 there at K >= 8192 and 4-7% slower at K = 4096 (H200, sessions 15 and 17).
// `longRowsTokens` (1..8): the most tokens of a launch that overlapLongRows applies to (shape 16 at m = 2 measured 3-8%
// faster than 15 on the four shapes with K >= 8192, 2-3% slower at K = 4096; session 18).
// `overlapFromTokens` (same shapes as overlapLongRows; 0: none): launches of overlapFromTokens..8 tokens and plain x take
// that two-batch kernel whatever their rows (shape 16 at m = 4 and 8 measured 3-10% faster than 15 on 5 of the 6
// shapes, 2% slower to 0% on 4096x11008; session 18).
// `warps16ManyItems` (4 or 8 below maxWarps; 0: none): at 9..16 tokens, where a launch has more groups of rowTiles16 row
// tiles than the GPU has multiprocessors, blocks of at most this many warps (two blocks per multiprocessor: shape 18 at
// m = 16 measured 1-11% faster than 15 on the four shapes with 256+ groups, 12-24% slower on those of 128; session 18).
struct StreamConfig {
    int batch, maxWarps;
    bool overlap, split, subtract;
    int persist;
    int manyTilesBatch = 0;
    int rowTiles8 = 1, rowTiles16 = 1;
    int overlapLongRows = 0;
    int overlapFromTokens = 0;
    int warps16ManyItems = 0;
    int longRowsTokens = 1;
};
// 12-18 (several row tiles per block, or two batches of registers; docs/performance.md, "W4A16 at 16 tokens: two row
// tiles per block"): 12 R = 2; 13 R = 2 in 4-chunk batches; 14 R = 4, at most 8 warps; 15 = 11 up to 8 tokens, R = 2
// at 9..16; 16 two batches, R = 2 at 9..16; 17 two batches, R = 2; 18 = 15 with at most 8 warps (two blocks per SM).
// 19 = 15 with two batches of registers at one token where warps have 8 or more chunks (plain x); 20 = 19 with that
// rule up to 2 tokens, two batches at 3..8 tokens (plain x) and 8-warp blocks at 9..16 tokens past one pair of row
// tiles per SM. (Shapes that folded the zero with sums of x formed once per block measured 1-69% slower than 15 and
// were removed: docs/performance.md, "W4A16 x sums measured".)
// (Session 20 measured and removed three routings of these kernels, each faster than 20 on some shapes and slower on
// others or in 7B decode: 15's one batch up to 8 tokens, 20 without its long-row rule, and 20's 3..8-token rule only
// up to two row tiles per SM: docs/performance.md, "W4A16: shorter per-tile code".)
// (Session 22 measured and removed three ways of moving the next row tile's bytes earlier: the tile after next staged
// in shared memory by cp.async, two batches of registers at 1..2 tokens on every row length, and an L2 prefetch of the
// next tile; 5-26% slower: docs/performance.md, "W4A16: three ways of getting the next row tile's bytes moving".)
// (Session 23 measured and removed two more: an L2 prefetch of the tile after the next, issued with each tile's loads,
// 0-26% slower, and tiles added up by the last warp to arrive instead of a barrier, 1-8% slower: docs/performance.md,
// "W4A16: an earlier L2 prefetch and a reduction without a barrier".)
constexpr int kStreamConfigs = 21;
constexpr StreamConfig kStreamConfigTable[kStreamConfigs] = {
    {2, 16, false, false, false, 0}, {2, 16, false, true, false, 0}, {4, 16, false, false, false, 0},
    {4, 8, false, false, false, 0},  {2, 16, true, false, false, 0}, {4, 16, false, true, false, 0},
    {2, 16, false, false, true, 0},  {2, 16, false, false, true, 1}, {2, 16, false, false, true, 2},
    {2, 8, false, false, true, 1},   {4, 16, false, false, true, 2},
    {2, 16, false, false, true, 2, 4},
    {2, 16, false, false, true, 2, 0, 2, 2}, {4, 16, false, false, true, 2, 0, 2, 2},
    {2, 8, false, false, true, 2, 0, 4, 4}, {2, 16, false, false, true, 2, 4, 1, 2},
    {2, 16, true, false, true, 2, 0, 1, 2},  {2, 16, true, false, true, 2, 0, 2, 2},
    {2, 8, false, false, true, 2, 4, 1, 2},
    {2, 16, false, false, true, 2, 4, 1, 2, 8},
    {2, 16, false, false, true, 2, 4, 1, 2, 8, 3, 8, 2}};
// The default shape: 6 (two-chunk batches, zero subtracted) was 1-10% faster than 0 on every shape at m = 1, 4, 16;
// 8 is 6 made persistent: within 1% of 6 on the bench's shapes alone at m = 1 (faster at m = 16), but 7B INT4 decode
// took 1.98 against 2.28 ms per token, since the folded norm is formed once per block, not once per row tile
// (docs/performance.md, "W4A16: a persistent stream kernel"). 11 is 8 with 4-chunk batches where blocks take several
// row tiles: 7B INT4 decode 1.95 against 2.00-2.12 ms, 4096x11008 m = 1 8% faster, the other shapes as 8
// (docs/performance.md, "W4A16: bigger batches where blocks take several row tiles"; 8-chunk batches were slower on
// every shape and were removed). 15 is 11 up to 8 tokens and two row tiles per block in 2-chunk batches at 9..16 (the
// kernel of 12 there): at m = 16 12 ran 2.05x, 1.71x, 2.26x, 1.99x, 2.18x, 2.20x cuBLAS on the bench's six shapes,
// 11 1.80x, 1.67x, 1.63x, 1.48x, 1.59x, 1.40x and the ring kernel 1.05x-2.03x (docs/performance.md, "W4A16 at 16
// tokens: two row tiles per block").
// 20 is 15 with two batches of registers where they measured faster (long rows at 1..2 tokens, plain x at 3..8) and
// 8-warp blocks at 9..16 tokens past one pair of row tiles per SM: on the bench's six shapes at m = 1, 2, 4, 8, 16 it ran
// within 1.2% of the fastest of 15, 16 and 18 but for 4096x11008 at m = 4 (1.8% behind 15), and up to 11% ahead of 15
// (docs/performance.md, "W4A16: one stream shape per token count").
constexpr int kDefaultStreamConfig = 20;
// Four row tiles per block need at most 8 warps (the launcher compiles no 16-warp block of them), several row tiles
// only the persistent subtract shapes, and the persistent overlap is compiled for 2-chunk batches of 1 or 2 tiles.
constexpr bool streamTableConsistent() {
    for (const StreamConfig& c : kStreamConfigTable) {
        const int most = c.rowTiles8 > c.rowTiles16 ? c.rowTiles8 : c.rowTiles16;
        if (most >= 4 && c.maxWarps > 8) return false;
        if (most > 1 && !(c.subtract && c.persist)) return false;
        if (c.persist && c.overlap && !(c.subtract && c.batch == 2 && c.manyTilesBatch == 0 && most <= 2)) return false;
        const bool overlapsSome = c.overlapLongRows > 0 || c.overlapFromTokens > 0;
        if (c.overlapLongRows < 0 || c.overlapFromTokens < 0 || c.overlapFromTokens > kSmallMaxTokens / 2 ||
            c.longRowsTokens < 1 || c.longRowsTokens > kSmallMaxTokens / 2 ||
            (overlapsSome && !(c.subtract && c.persist && !c.overlap && !c.split && c.batch == 2 && c.maxWarps == 16 &&
                               c.rowTiles8 == 1)))
            return false;
        if (c.warps16ManyItems != 0 &&
            !((c.warps16ManyItems == 4 || c.warps16ManyItems == 8) && c.warps16ManyItems < c.maxWarps))
            return false;
        for (int r : {c.rowTiles8, c.rowTiles16})
            if (r != 1 && r != 2 && r != 4) return false;
    }
    return true;
}
static_assert(streamTableConsistent(), "stream configurations: row tiles 1, 2 or 4; 4 with at most 8 warps; >1 persistent; "
                                       "persistent overlap: subtracted, 2-chunk batches, at most 2 row tiles; two "
                                       "batches on long rows or few tokens: persistent subtracted 2-chunk shapes of 16 "
                                       "warps, 1 tile; fewer warps at 9..16: 4 or 8");
int streamConfigIndex();  // wxa16_gemm.cu
int streamResidentCap();  // wxa16_gemm.cu: wxa16SetStreamResidentCap, 0 for none
inline const StreamConfig& streamConfig() { return kStreamConfigTable[streamConfigIndex()]; }
// Row tiles per block of a launch of m tokens (StreamConfig::rowTiles8, rowTiles16).
inline int streamRowTiles(const StreamConfig& c, int m) { return m <= 8 ? c.rowTiles8 : c.rowTiles16; }
// The chunks per batch of a launch of m tokens over `tiles` row tiles (StreamConfig::manyTilesBatch, which launches
// of one row tile per block take; with two, 2-chunk batches measured faster at 16 tokens on 4 of the 6 shapes).
inline int streamBatch(const StreamConfig& c, int64_t tiles, int m, int multiprocessors) {
    return c.manyTilesBatch > 0 && streamRowTiles(c, m) == 1 && tiles > 2 * int64_t(multiprocessors) ? c.manyTilesBatch
                                                                                                       : c.batch;
}

// Warps per block and chunks per warp for a launch of m tokens over `tiles` row tiles of `chunks` chunks; the warp
// count is the smallest of 4, 8, 16 that gives every warp at most one batch, capped by the configuration
// (StreamConfig::maxWarps, and warps16ManyItems at 9..16 tokens past one group of row tiles per multiprocessor).
struct StreamSplit {
    int warps, chunksPerWarp;
};
inline int streamMaxWarps(const StreamConfig& c, int m, int64_t tiles, int multiprocessors) {
    if (c.warps16ManyItems > 0 && m > 8) {
        const int r = streamRowTiles(c, m);
        if ((tiles + r - 1) / r > int64_t(multiprocessors)) return c.warps16ManyItems;
    }
    return c.maxWarps;
}
inline StreamSplit streamSplit(int chunks, int cps, int m, int64_t tiles, int multiprocessors) {
    const StreamConfig& c = streamConfig();
    const int wanted = (chunks + c.batch - 1) / c.batch;
    int warps = wanted <= 4 ? 4 : wanted <= 8 ? 8 : 16;
    const int most = streamMaxWarps(c, m, tiles, multiprocessors);
    warps = warps < most ? warps : most;
    int per = (chunks + warps - 1) / warps;
    per = (per + cps - 1) / cps * cps;  // a step (one group when cps = 2) never straddles two warps
    return {warps, per};
}

// Registers capped so that many warps fit on a multiprocessor (the loads in flight per SM grow with them): 32 warps
// for one token tile and 4-chunk batches, 24 with 8-chunk batches (fewer spill at 64 registers), 16 for two tiles.
// With R > 1 row tiles per block a warp holds B·R chunks and R tiles' sums: 24 warps (one token tile, B·R = 4), else 16
// (one token tile) or 8 (two token tiles and B·R = 8), the counts at which ptxas spilled nothing (sm_90, CUDA 13.0).
template <int NT, int W, int B, int R = 1>
constexpr int streamMinBlocks() {
    constexpr int warps = R == 1   ? (NT == 1 ? (B <= 4 ? 32 : 24) : 16)
                          : NT == 1 ? (B * R <= 4 ? 24 : 16)
                                    : (B * R <= 4 ? 16 : 8);
    return warps / W > 0 ? warps / W : 1;
}

// The folded RMSNorm (NORM) of the stream kernel: x[t] := round(x[t]·r_t·γ), r_t = 1/sqrt(Σx[t]²/cols + eps), as
// rmsNorm() (decode_ops.h) computes it, into `hs` (shared memory, [m][ldh]; zeros past p.cols, which only a
// weight without a column table could have: the packer gives padded columns one). Each warp sums the
// squares over its own columns, the block adds the warps' sums, then each warp writes and later reads only its own
// columns: one __syncthreads, then a __syncwarp. x and γ are 16-byte aligned, cols a multiple of 8 (the launcher).
template <typename T, int W>
__device__ __forceinline__ void normIntoShared(const Wxa16Params& p, int cBegin, int cEnd, T* hs, int ldh) {
    __shared__ float squares[W][kSmallMaxTokens];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const T* x = static_cast<const T*>(p.x);
    const int colBegin = cBegin * 64 + lane * 8, colEnd = cEnd * 64;
    for (int t = 0; t < p.m; ++t) {
        float sum = 0.0f;
        for (int col = colBegin; col < colEnd && col < p.cols; col += 256) {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(x + int64_t(t) * p.ldx + col));
            const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
            for (int i = 0; i < 8; ++i) sum = fmaf(float(e[i]), float(e[i]), sum);
        }
        sum = decode::warpSum(sum);
        if (lane == 0) squares[warp][t] = sum;
    }
    __syncthreads();
    for (int t = 0; t < p.m; ++t) {
        float total = 0.0f;
#pragma unroll
        for (int w = 0; w < W; ++w) total += squares[w][t];
        const float inverse = rsqrtf(total / float(p.cols) + p.normEps);
        for (int col = colBegin; col < colEnd; col += 256) {
            uint4 out = make_uint4(0u, 0u, 0u, 0u);
            if (col < p.cols) {
                const uint4 v = __ldg(reinterpret_cast<const uint4*>(x + int64_t(t) * p.ldx + col));
                const float4 g0 = __ldg(reinterpret_cast<const float4*>(p.normWeight + col));
                const float4 g1 = __ldg(reinterpret_cast<const float4*>(p.normWeight + col + 4));
                const float gamma[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
                const T* e = reinterpret_cast<const T*>(&v);
                T* o = reinterpret_cast<T*>(&out);
#pragma unroll
                for (int i = 0; i < 8; ++i) o[i] = T(float(e[i]) * inverse * gamma[i]);
            }
            *reinterpret_cast<uint4*>(hs + t * ldh + col) = out;
        }
    }
    __syncwarp();
}

// What the stream kernel multiplies: x as given, or RMSNorm(x)·γ formed in shared memory by its prologue (an enum
// rather than a bool so that another prologue can join without a new template parameter).
enum StreamPrologue : int { kPlainX = 0, kNormX = 1 };

// The end of a tile of a GLU launch (p.swiglu: the weight's rows are [gate; up], `pairs` row tiles each): the warps'
// sums add up through `red` as in finishSmallBlock; a gate tile's 16 rows, rounded to T, go to `gate` (shared), and
// an up tile's rows, rounded to T, become y[tok, q·16 + r] = silu(gate)·up, rounded, as siluMul() (decode_ops.h)
// computes it from the rounded [gate | up] output. The up tile's barrier orders its reads after the gate tile's writes.
template <typename T, int NT, int W>
__device__ __forceinline__ void finishGluTile(const Wxa16Params& p, const float (&acc)[1][NT][4], float* red, int tile,
                                              int pairs, float (*gate)[16]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    constexpr int kPerWarp = NT * 4;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int j = 0; j < 4; ++j) red[(warp * kPerWarp + n * 4 + j) * 32 + lane] = acc[0][n][j];
    __syncthreads();
    const bool up = tile >= pairs;
    const int q = up ? tile - pairs : tile;
    for (int i = threadIdx.x; i < kPerWarp * 32; i += blockDim.x) {
        const int e = i / 32, l = i % 32;
        const int n = e / 4, j = e % 4;
        const int tok = n * 8 + 2 * (l % 4) + (j % 2), r = l / 4 + (j / 2) * 8;
        if (tok >= p.m) continue;
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < W; ++w) sum += red[(w * kPerWarp + e) * 32 + l];
        const float rounded = float(T(sum));
        if (!up) {
            gate[tok][r] = rounded;
        } else {
            const float g = gate[tok][r];
            static_cast<T*>(p.y)[int64_t(tok) * p.ldy + q * 16 + r] = T(g / (1.0f + __expf(-g)) * rounded);
        }
    }
}

// Row stride (elements) of the folded norm's activations in shared memory: 16 bytes past a multiple of 128, so the
// lanes' 16-byte fragment loads of tokens g and g + 1 fall in different banks.
__host__ __device__ inline int normSharedStride(int chunks) { return chunks * 64 + 8; }

// Grid: one block per row tile (PERSIST: any number of blocks; block b takes tiles b, b + grid, ...); p.chunksPerSplit =
// chunks per warp; p.splitK = 1. OVERLAP: the loads of batch i + 1 are issued before batch i is computed. The first
// batch's weights are loaded before the kernel waits for the one before it (programmatic dependent launch: the
// weights never change; x, the residual and y are touched only after). PRO (SUB shapes only): kNormX, x is
// RMSNorm(x)·γ, formed in the prologue into dynamic shared memory (p.m · normSharedStride(p.chunks) elements), once
// per block. GLU (PERSIST only): the weight is [gate; up] (p.tiles = 2 · pairs) and y [m, pairs · 16] is
// silu(gate)·up; block b takes gate tile q then up tile q + pairs for q = b, b + grid, ... < pairs (finishGluTile).
// PERSIST: after its last batch of a tile a warp loads its first batch of the next tile, then the warps add up the
// tile through one of two shared buffers (one barrier per tile), so those loads are in flight through the reduction
// and the store. PERSIST with OVERLAP (plain subtracted shapes): two batches of registers inside each tile as well.
// R > 1 (PERSIST, SUB, plain x, no GLU): a block's item is R consecutive row tiles (the last item's tiles past p.tiles
// re-read the last tile and store nothing); each activation fragment serves all R. Its reduction buffer is R times
// larger, so there is one, with a barrier before each item's sums are written into it.
template <typename T, int NT, int W, int B, int CPS, bool OVERLAP, bool SPLIT, bool SUB, int PRO = kPlainX,
          bool PERSIST = false, bool GLU = false, int R = 1>
__global__ void __launch_bounds__(W * 32, streamMinBlocks<NT, W, B * (OVERLAP ? 2 : 1), R>()) w4StreamKernel(const Wxa16Params p) {
    constexpr bool NORM = PRO != kPlainX;   // x read from shared memory
    // One token tile of plain x: lanes past the last token read its row (their sums are never stored), so the loads of
    // x need no check and no zeros.
    // (Not in the two-batch kernel: there the shorter code measured slower, H200, session 19.)
    constexpr bool ALL_ROWS = SUB && !NORM && NT == 1 && !OVERLAP;
    static_assert(SUB || !NORM, "the folded prologue reads x from shared memory: subtracted steps only");
    static_assert(PERSIST || !GLU, "a GLU block takes a gate tile and an up tile: the persistent loop");
    static_assert(!(PERSIST && OVERLAP) || (SUB && !NORM && !GLU), "the persistent overlap: plain subtracted shapes only");
    static_assert(R == 1 || (PERSIST && SUB && !NORM && !GLU), "several row tiles per block: persistent plain shapes");
    constexpr int S = B / CPS;  // steps per batch
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    int item = blockIdx.x;   // a row tile (R = 1) or R consecutive row tiles
    const int items = (p.tiles + R - 1) / R;
    const int cBegin = warp * p.chunksPerSplit, cEnd = min(p.chunks, cBegin + p.chunksPerSplit);

    // The lane's words of chunk cBegin and (scale, zero) words of row tile t: of the warp's first group where steps
    // are one group and there is one batch of registers (loadSmallStep's FROM_GROUP), else of group 0. (FROM_GROUP
    // made the one-batch kernel 1.5-4% faster at one token on K = 4096 and the two-batch kernel 0.3-1% slower on the
    // long rows it takes: H200, session 24.)
    constexpr bool FROM_GROUP = CPS == 2 && !OVERLAP;
    const int firstGroup = FROM_GROUP ? cBegin >> p.groupShift : 0;
    auto tileWords = [&](int t) { return p.words + int64_t(t) * p.chunks * 32 + lane + int64_t(cBegin) * 32; };
    auto tileScales = [&](int t) { return p.scaleZero + int64_t(t) * p.groups * 16 + g + int64_t(firstGroup) * 16; };
    const uint4* wq[R];
    const uint32_t* sp[R];
    auto pointAt = [&](int it) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int t = R == 1 ? it : min(it * R + r, p.tiles - 1);
            wq[r] = tileWords(t);
            sp[r] = tileScales(t);
        }
    };
    pointAt(item);

    float acc[R][NT][4];
    auto clearAcc = [&] {
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[r][n][j] = 0.0f;
    };
    clearAcc();
    auto advance = [&](int chunks) {
#pragma unroll
        for (int r = 0; r < R; ++r) wq[r] += chunks * 32;
    };

    // Loads / computes the batch that starts `ahead` chunks past c (ahead is a compile-time offset from wq and xq).
    // A batch wholly inside the warp's chunks (nearly all of them) takes a path without per-step and per-chunk checks:
    // each step is told its range ends at its own last chunk, which the compiler folds away, so the batch's loads and
    // steps are one block of code (no branches and reconvergence per step; 12% fewer instructions at one token).
    // Only for one token tile, one batch of registers and steps of one group of two chunks: with one chunk per step
    // there is no check per chunk to drop and the second copy of the code made ptxas spill in some instances; the
    // two-batch kernel (1..8 tokens) and the 9..16-token kernels measured 1-7% slower with it (H200, session 19).
    constexpr bool WHOLE = CPS == 2 && NT == 1 && !OVERLAP;
    // step(i, chunk, end) for the batch's steps from chunk c on, `end` the chunk its range ends before.
    auto forSteps = [&](int c, auto&& step) {
        if (WHOLE && c + B <= cEnd) {
#pragma unroll
            for (int i = 0; i < S; ++i) step(i, c + i * CPS, c + i * CPS + CPS);
            return;
        }
#pragma unroll
        for (int i = 0; i < S; ++i)
            if (c + i * CPS < cEnd) step(i, c + i * CPS, cEnd);
    };
    const T* xq = nullptr;
    int64_t xTokenStride = 0;
    auto load = [&](SmallStep<R, CPS>(&batch)[S], int c, int ahead) {
        forSteps(c + ahead, [&](int i, int chunk, int end) {
            loadSmallStep<NT, R, CPS, T, !NORM, ALL_ROWS, FROM_GROUP>(batch[i], p, wq, sp, xq, xTokenStride, g, chunk,
                                                                      end, ahead + i * CPS, firstGroup);
        });
    };
    auto loadWeightsOnly = [&](SmallStep<R, CPS>(&batch)[S], int c) {
        forSteps(c, [&](int i, int chunk, int end) {
            loadSmallStep<NT, R, CPS, T, false, false, FROM_GROUP>(batch[i], p, wq, sp, xq, xTokenStride, g, chunk, end,
                                                                   i * CPS, firstGroup);
        });
    };
    auto compute = [&](const SmallStep<R, CPS>(&batch)[S], int c, int ahead) {
        forSteps(c + ahead, [&](int i, int chunk, int end) {
            computeStep<T, NT, R, CPS, SUB, SPLIT, NORM, ALL_ROWS>(batch[i], p, xq + (ahead + i * CPS) * 64,
                                                                   xTokenStride, chunk, end, g, acc);
        });
    };
    SmallStep<R, CPS> first[S];
    if (cBegin < cEnd) loadWeightsOnly(first, cBegin);
    if constexpr (PRO == kNormX)   // γ is a weight too: bring the warp's part into L1 before the wait, off the norm's path
        for (int col = cBegin * 64 + lane * 8; col < cEnd * 64 && col < p.cols; col += 256)
            asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p.normWeight + col));
    waitForPredecessor();
    const T* xBegin;
    if constexpr (NORM) {
        extern __shared__ __align__(16) unsigned char normShared[];
        T* hs = reinterpret_cast<T*>(normShared);
        const int ldh = normSharedStride(p.chunks);
        normIntoShared<T, W>(p, cBegin, cEnd, hs, ldh);
        xBegin = hs + g * ldh + tig * 16 + cBegin * 64;
        xTokenStride = int64_t(8) * ldh;
    } else {
        xBegin = static_cast<const T*>(p.x) + int64_t(ALL_ROWS ? min(g, p.m - 1) : g) * p.ldx + tig * 16 +
                 int64_t(cBegin) * 64;
        xTokenStride = int64_t(8) * p.ldx;
    }
    xq = xBegin;
    // The warp's part of the current item: `first` holds its first batch on entry and is free on return.
    auto streamItem = [&] {
        if constexpr (OVERLAP) {   // batch i + 1 in flight while batch i is computed
            SmallStep<R, CPS> second[S];
            for (int c = cBegin; c < cEnd; c += 2 * B) {
                if (c + B < cEnd) load(second, c, B);
                compute(first, c, 0);
                if (c + B >= cEnd) break;
                if (c + 2 * B < cEnd) load(first, c, 2 * B);
                compute(second, c, B);
                advance(2 * B);
                xq += 2 * B * 64;
            }
        } else {
            for (int c = cBegin; c < cEnd; c += B) {
                if (c != cBegin) load(first, c, 0);
                compute(first, c, 0);
                advance(B);
                xq += B * 64;
            }
        }
    };
    if constexpr (!PERSIST) streamItem();

    if constexpr (PERSIST) {
        constexpr int kBuffers = R == 1 ? 2 : 1;
        __shared__ float red[kBuffers][W * R * NT * 4 * 32];
        __shared__ float gluGate[GLU ? kSmallMaxTokens : 1][16];
        const int pairs = p.tiles / 2;
        // R = 1: the next item's pointers are this item's plus whole tiles (not formed again from the lane and the
        // warp's first chunk: fewer instructions per tile where warps have few chunks).
        const uint4* wqItem = wq[0];
        const int64_t wordsPerTile = int64_t(p.chunks) * 32, scalesPerTile = int64_t(p.groups) * 16;
        for (int parity = 0;; parity ^= 1) {
            streamItem();
            int next = item + int(gridDim.x);
            bool more = next < items;
            if constexpr (GLU) {   // gate tile q, up tile q + pairs, gate tile q + grid, ...
                next = item < pairs ? item + pairs : item - pairs + int(gridDim.x);
                more = item < pairs || next < pairs;
            }
            if (more && cBegin < cEnd) {
                if constexpr (R == 1) {   // one tile: the item's first words and scales moved by whole tiles
                    const int64_t tiles = next - item;
                    wqItem += tiles * wordsPerTile;
                    wq[0] = wqItem;
                    sp[0] += tiles * scalesPerTile;   // (the scale pointer does not move inside an item)
                } else {
                    pointAt(next);
                }
                loadWeightsOnly(first, cBegin);
            }
            if constexpr (GLU) {
                finishGluTile<T, NT, W>(p, acc, red[parity], item, pairs, gluGate);
            } else if constexpr (R == 1) {
                finishSmallBlock<T, NT, 1, W, false>(p, acc, red[parity], item, 0);
            } else {
                __syncthreads();   // the one buffer: the last item's sums have been read
                finishSmallBlock<T, NT, R, W, false>(p, acc, red[0], item * R, 0);
            }
            if (!more) break;
            clearAcc();
            item = next;
            xq = xBegin;
        }
    } else {
        __shared__ float red[W * NT * 4 * 32];
        finishSmallBlock<T, NT, 1, W, false>(p, acc, red, item, 0);
    }
}

} // namespace cwb::kernels::detail
