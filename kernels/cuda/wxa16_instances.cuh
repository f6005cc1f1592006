#pragma once
// Instantiates the launchers for one activation type; included by wxa16_gemm_f16.cu and wxa16_gemm_bf16.cu so the
// two types compile in parallel.
#include <atomic>

#include "cuda_check.h"
#include "cwb/kernels/wxa16_gemm.h"
#include "w4_small_m_kernel.cuh"
#include "w4_stream_kernel.cuh"
#include "w4_tma_kernel.cuh"
#include "w8_stream_kernel.cuh"
#include "wxa16_kernel.cuh"

namespace cwb::kernels::detail {

template <typename T, int BITS>
void launchBits(const Wxa16Params& p, dim3 grid, cudaStream_t stream) {
    if (p.m <= 8)
        wxa16Kernel<T, BITS, 1><<<grid, 256, 0, stream>>>(p);
    else if (p.m <= 16)
        wxa16Kernel<T, BITS, 2><<<grid, 256, 0, stream>>>(p);
    else if (p.m <= 32)
        wxa16Kernel<T, BITS, 4><<<grid, 256, 0, stream>>>(p);
    else
        wxa16Kernel<T, BITS, 8><<<grid, 256, 0, stream>>>(p);
}

template <typename T>
void launchWxa16(const Wxa16Params& p, int bits, dim3 grid, cudaStream_t stream) {
    if (bits == 4)
        launchBits<T, 4>(p, grid, stream);
    else
        launchBits<T, 8>(p, grid, stream);
}

// With p == nullptr: the blocks of that kernel one multiprocessor holds at once (for the split-K choice).
template <typename T, int NT, int R, int S, bool SUB = false>
int launchSmallShape(const Wxa16Params* p, int groupShift, cudaStream_t stream) {
    auto kernel = groupShift >= 1 ? w4SmallKernel<T, NT, R, S, 2, SUB> : w4SmallKernel<T, NT, R, S, 1, SUB>;
    if (!p) {  // asked once per kernel (the launcher runs on every call; the answer is the same for one GPU model)
        static const int perSm = [kernel] {
            int blocks = 0;
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kSmallWarps * 32, 0) != cudaSuccess) {
                cudaGetLastError();
                return 1;
            }
            return blocks > 0 ? blocks : 1;
        }();
        return perSm;
    }
    const dim3 grid(unsigned((p->tiles + R - 1) / R), unsigned(p->splitK));
    kernel<<<grid, kSmallWarps * 32, 0, stream>>>(*p);
    return 0;
}

template <typename T, int NT>
int launchSmallTokens(const Wxa16Params* p, int groupShift, cudaStream_t stream) {
    const SmallConfig& c = kSmallConfigTable[smallConfigIndex()];
    const int r = NT == 1 ? c.r8 : c.r16, st = NT == 1 ? c.s8 : c.s16;
    // The subtract shape is compiled for one (tiles, buffers) pair only: the table's entry must name that pair.
    static_assert(kSmallConfigTable[kSmallConfigs - 1].subtract && kSmallConfigTable[kSmallConfigs - 1].r8 == 2 &&
                      kSmallConfigTable[kSmallConfigs - 1].s8 == 3 && kSmallConfigTable[kSmallConfigs - 1].r16 == 2 &&
                      kSmallConfigTable[kSmallConfigs - 1].s16 == 2,
                  "the subtract shape launches 2 tiles x 3 buffers (m <= 8) and 2 x 2 (m <= 16)");
    if (c.subtract) return launchSmallShape<T, NT, 2, NT == 1 ? 3 : 2, true>(p, groupShift, stream);
    if (r == 4 && st == 2) return launchSmallShape<T, NT, 4, 2>(p, groupShift, stream);
    if (r == 4 && st == 3) return launchSmallShape<T, NT, 4, 3>(p, groupShift, stream);
    if (r == 2 && st == 2) return launchSmallShape<T, NT, 2, 2>(p, groupShift, stream);
    if (r == 2 && st == 3) return launchSmallShape<T, NT, 2, 3>(p, groupShift, stream);
    if (r == 1 && st == 4) return launchSmallShape<T, NT, 1, 4>(p, groupShift, stream);
    if (r == 1 && st == 6) return launchSmallShape<T, NT, 1, 6>(p, groupShift, stream);
    return launchSmallShape<T, NT, 2, 4>(p, groupShift, stream);
}

template <typename T>
void launchW4Small(const Wxa16Params& p, cudaStream_t stream) {
    if (p.m <= 8)
        launchSmallTokens<T, 1>(&p, p.groupShift, stream);
    else
        launchSmallTokens<T, 2>(&p, p.groupShift, stream);
}

template <typename T>
int w4SmallBlocksPerSm(int m, int groupShift) {
    return m <= 8 ? launchSmallTokens<T, 1>(nullptr, groupShift, nullptr)
                  : launchSmallTokens<T, 2>(nullptr, groupShift, nullptr);
}

// The TMA kernel of one shape: raises its dynamic shared-memory limit once and returns the blocks one
// multiprocessor holds at once (for the split-K choice).
template <typename T, int NT, int R, int W, int CS, int SL, int CPS>
int tmaKernelBlocksPerSm() {
    static const int perSm = [] {
        const auto kernel = w4TmaKernel<T, NT, R, W, CS, SL, CPS>;
        constexpr int bytes = TmaSmem<NT, R, W, CS, SL>::kBytes;
        int blocks = 0;
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, W * 32, bytes) != cudaSuccess) {
            cudaGetLastError();
            return 1;
        }
        return blocks > 0 ? blocks : 1;
    }();
    return perSm;
}

// With p == nullptr: the blocks per multiprocessor of that kernel; else launches it.
template <typename T, int NT, int R, int W, int CS, int SL, int CPS>
int launchTmaShapeCps(const Wxa16Params* p, cudaStream_t stream) {
    const int perSm = tmaKernelBlocksPerSm<T, NT, R, W, CS, SL, CPS>();
    if (!p) return perSm;
    const dim3 grid(unsigned((p->tiles + R - 1) / R), unsigned(p->splitK));
    constexpr int bytes = TmaSmem<NT, R, W, CS, SL>::kBytes;
    if (!p->clusterReduce) {
        w4TmaKernel<T, NT, R, W, CS, SL, CPS><<<grid, W * 32, bytes, stream>>>(*p);
        return 0;
    }
    cudaLaunchConfig_t config{};  // the splits of a row range are one cluster (grid.y == cluster.y)
    config.gridDim = grid;
    config.blockDim = dim3(W * 32);
    config.dynamicSmemBytes = bytes;
    config.stream = stream;
    cudaLaunchAttribute cluster[1];
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = 1;
    cluster[0].val.clusterDim.y = unsigned(p->splitK);
    cluster[0].val.clusterDim.z = 1;
    config.attrs = cluster;
    config.numAttrs = 1;
    cudaLaunchKernelEx(&config, w4TmaKernel<T, NT, R, W, CS, SL, CPS>, *p);  // errors: CWB_CUDA_CHECK_LAUNCH
    return 0;
}

template <typename T, int NT>
int launchTmaTokens(const Wxa16Params* p, int groupShift, cudaStream_t stream) {
    const TmaConfig& c = tmaConfig();
    const bool pairs = groupShift >= 1;
#define CWB_TMA_SHAPE(R, W, CS, SL)                                                                          \
    if (c.r == R && c.w == W && c.cs == CS && c.sl == SL)                                                    \
        return pairs ? launchTmaShapeCps<T, NT, R, W, CS, SL, 2>(p, stream)                                  \
                     : launchTmaShapeCps<T, NT, R, W, CS, SL, 1>(p, stream);
    CWB_TMA_SHAPE(1, 8, 4, 3)
    CWB_TMA_SHAPE(4, 4, 2, 4)
    CWB_TMA_SHAPE(1, 4, 4, 4)
    CWB_TMA_SHAPE(2, 4, 8, 2)
#undef CWB_TMA_SHAPE
    return pairs ? launchTmaShapeCps<T, NT, 2, 4, 4, 4, 2>(p, stream) : launchTmaShapeCps<T, NT, 2, 4, 4, 4, 1>(p, stream);
}

template <typename T>
void launchW4Tma(const Wxa16Params& p, cudaStream_t stream) {
    if (p.m <= 8)
        launchTmaTokens<T, 1>(&p, p.groupShift, stream);
    else
        launchTmaTokens<T, 2>(&p, p.groupShift, stream);
}

template <typename T>
int w4TmaBlocksPerSm(int m, int groupShift) {
    return m <= 8 ? launchTmaTokens<T, 1>(nullptr, groupShift, nullptr)
                  : launchTmaTokens<T, 2>(nullptr, groupShift, nullptr);
}

// Blocks of a persistent launch (StreamConfig::persist) over `tiles` row tiles with `resident` blocks at once.
inline int64_t persistentGrid(int64_t tiles, int64_t resident, int persist) {
    if (persist == 2 || tiles <= resident) return tiles < resident ? tiles : resident;
    const int64_t perBlock = (tiles + resident - 1) / resident;
    return (tiles + perBlock - 1) / perBlock;
}

void countStreamLaunch(int rowTiles, bool overlap, int warps);   // wxa16_gemm.cu (wxa16StreamLaunchCount)

// One stream kernel, launched with programmatic dependent launch (dependent_launch.h) where enabled: it loads its
// first weights before it waits for the kernel before it. PRO: the prologue (kNormX, the folded RMSNorm), with its
// dynamic shared memory, up to kNormFoldSharedBytes: that most is allowed to the kernel here, since with the reduction
// buffers the static and dynamic shared memory together may pass the 48 KB a kernel gets without asking (16 warps and
// two token tiles: 17 KB static, 33 KB with PERSIST's two buffers, 1 KB more for GLU's gate sums). PERSIST: the grid from persistentGrid, given the blocks a
// multiprocessor holds at once with that most (GLU: over the pairs of gate and up tiles; R > 1: over the groups of R
// row tiles). Both asked once per device and kernel.
template <typename T, int NT, int W, int B, int CPS, bool OVERLAP, bool SPLIT, bool SUB, int PRO, bool PERSIST,
          bool GLU = false, int R = 1>
void launchStreamShape(const Wxa16Params& p, int persist, int multiprocessors, cudaStream_t stream) {
    constexpr bool NORM = PRO != kPlainX;   // a prologue into dynamic shared memory
    const auto kernel = w4StreamKernel<T, NT, W, B, CPS, OVERLAP, SPLIT, SUB, PRO, PERSIST, GLU, R>;
    const size_t shared = NORM ? size_t(p.m) * size_t(normSharedStride(p.chunks)) * sizeof(T) : 0;
    dim3 grid(unsigned(p.tiles));
    if constexpr (NORM || PERSIST) {
        static std::atomic<int> perDevice[64];   // 0: not prepared yet; then the blocks a multiprocessor holds
        int device = 0;
        CWB_CUDA_CHECK(cudaGetDevice(&device));
        int perSm = device >= 0 && device < 64 ? perDevice[device].load(std::memory_order_relaxed) : 0;
        if (perSm == 0) {
            const size_t most = NORM ? kNormFoldSharedBytes : 0;
            if (NORM)
                CWB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(most)));
            perSm = 1;
            if (PERSIST) CWB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, W * 32, most));
            perSm = perSm > 0 ? perSm : 1;
            if (device >= 0 && device < 64) perDevice[device].store(perSm, std::memory_order_relaxed);
        }
        if constexpr (PERSIST) {
            int64_t resident = int64_t(perSm) * multiprocessors;
            const int cap = streamResidentCap();   // read once: a test may change it between launches
            if (cap > 0 && cap < resident) resident = cap;
            const int64_t items = GLU ? p.tiles / 2 : (int64_t(p.tiles) + R - 1) / R;
            grid.x = unsigned(persistentGrid(items, resident, persist));
        }
    }
    CWB_CUDA_CHECK(launchDependent(kernel, grid, dim3(W * 32), shared, stream, p));
    countStreamLaunch(R, PERSIST && OVERLAP, W);
}

// PERSIST only for blocks of 8 or 16 warps; 4-warp blocks (8 chunks or fewer) take one tile each, except under GLU,
// whose blocks always take a gate tile and an up tile, and with R > 1 row tiles per block (the persistent loop only).
// Four row tiles per block run at most 8 warps (their reduction buffer: 32 KB at 16 tokens).
template <typename T, int NT, int B, int CPS, bool OVERLAP, bool SPLIT, bool SUB, int PRO = kPlainX, bool PERSIST = false,
          bool GLU = false, int R = 1>
void launchStreamWarps(const Wxa16Params& p, int warps, int persist, int multiprocessors, cudaStream_t stream) {
    constexpr bool small = GLU || R > 1;   // 4-warp blocks persistent
    if (warps <= 4)
        launchStreamShape<T, NT, 4, B, CPS, OVERLAP, SPLIT, SUB, PRO, small, GLU, R>(p, small ? persist : 0, multiprocessors,
                                                                                    stream);
    else if (warps <= 8)
        launchStreamShape<T, NT, 8, B, CPS, OVERLAP, SPLIT, SUB, PRO, PERSIST, GLU, R>(p, persist, multiprocessors, stream);
    else if constexpr (R < 4)   // kStreamConfigTable caps 4-tile shapes at 8 warps (static_assert there)
        launchStreamShape<T, NT, 16, B, CPS, OVERLAP, SPLIT, SUB, PRO, PERSIST, GLU, R>(p, persist, multiprocessors, stream);
    else   // reachable only if the configuration changed between streamSplit and this launch
        throw KernelError("wxa16Gemm: " + std::to_string(warps) + " warps for a stream shape of 4 row tiles (at most 8)");
}

template <typename T, int NT, int B, bool OVERLAP, bool SPLIT, bool SUB = false, int PRO = kPlainX, bool PERSIST = false,
          bool GLU = false, int R = 1>
void launchStreamPairs(const Wxa16Params& p, int warps, int persist, int multiprocessors, cudaStream_t stream) {
    if (p.groupShift >= 1)
        launchStreamWarps<T, NT, B, 2, OVERLAP, SPLIT, SUB, PRO, PERSIST, GLU, R>(p, warps, persist, multiprocessors, stream);
    else
        launchStreamWarps<T, NT, B, 1, OVERLAP, SPLIT, SUB, PRO, PERSIST, GLU, R>(p, warps, persist, multiprocessors, stream);
}

// The persistent subtract shapes, with and without the folded norm, with and without the GLU epilogue, for batches
// of B chunks.
template <typename T, int NT, int B>
void launchPersistentBatch(const Wxa16Params& p, int warps, int persist, int sms, cudaStream_t stream) {
    if (p.normWeight && p.swiglu)
        launchStreamPairs<T, NT, B, false, false, true, kNormX, true, true>(p, warps, persist, sms, stream);
    else if (p.normWeight)
        launchStreamPairs<T, NT, B, false, false, true, kNormX, true>(p, warps, persist, sms, stream);
    else if (p.swiglu)
        launchStreamPairs<T, NT, B, false, false, true, kPlainX, true, true>(p, warps, persist, sms, stream);
    else
        launchStreamPairs<T, NT, B, false, false, true, kPlainX, true>(p, warps, persist, sms, stream);
}

// The persistent subtract shapes with R > 1 row tiles per block: plain x only (the launcher folds neither the norm nor
// the GLU epilogue into them, wxa16FoldsNorm / wxa16FoldsSwiGlu). Compiled: (R, B) = (2, 2), (2, 4), (4, 2).
template <typename T, int NT>
void launchPersistentRows(const Wxa16Params& p, int rowTiles, int batch, int warps, int persist, int sms,
                          cudaStream_t stream) {
    if (rowTiles >= 4)
        launchStreamPairs<T, NT, 2, false, false, true, kPlainX, true, false, 4>(p, warps, persist, sms, stream);
    else if (batch >= 4)
        launchStreamPairs<T, NT, 4, false, false, true, kPlainX, true, false, 2>(p, warps, persist, sms, stream);
    else
        launchStreamPairs<T, NT, 2, false, false, true, kPlainX, true, false, 2>(p, warps, persist, sms, stream);
}

// The persistent subtract shapes with two batches of registers (StreamConfig::overlap): 2-chunk batches, 1 or 2 row
// tiles per block, plain x only (the launcher folds neither the norm nor the GLU epilogue into them).
template <typename T, int NT>
void launchPersistentOverlap(const Wxa16Params& p, int rowTiles, int warps, int persist, int sms, cudaStream_t stream) {
    if (rowTiles >= 2)
        launchStreamPairs<T, NT, 2, true, false, true, kPlainX, true, false, 2>(p, warps, persist, sms, stream);
    else
        launchStreamPairs<T, NT, 2, true, false, true, kPlainX, true, false, 1>(p, warps, persist, sms, stream);
}

// p.normWeight set: the norm is folded, which only the subtract shape compiles (the launcher checks foldsNorm first);
// p.swiglu set: the GLU epilogue, which only the persistent subtract shapes compile (the launcher checks foldsSwiGlu
// first).
template <typename T, int NT>
void launchStreamTokens(const Wxa16Params& p, int warps, int multiprocessors, cudaStream_t stream) {
    const StreamConfig& c = streamConfig();
    const int sms = multiprocessors;
    const int batch = streamBatch(c, p.tiles, p.m, sms);
    const int rowTiles = streamRowTiles(c, p.m);
    if (c.subtract && c.persist && c.overlap && !p.normWeight && !p.swiglu)
        launchPersistentOverlap<T, NT>(p, rowTiles, warps, c.persist, sms, stream);
    else if (!p.normWeight && !p.swiglu &&
             ((c.overlapLongRows > 0 && p.m <= c.longRowsTokens && p.chunks >= int64_t(c.overlapLongRows) * warps) ||
              (c.overlapFromTokens > 0 && p.m >= c.overlapFromTokens && p.m <= 8)))
        launchPersistentOverlap<T, NT>(p, 1, warps, c.persist, sms, stream);
    else if (c.subtract && c.persist && rowTiles > 1 && !p.normWeight && !p.swiglu)
        launchPersistentRows<T, NT>(p, rowTiles, batch, warps, c.persist, sms, stream);
    else if (c.subtract && c.persist && batch == 4)
        launchPersistentBatch<T, NT, 4>(p, warps, c.persist, sms, stream);
    else if (c.subtract && c.persist)
        launchPersistentBatch<T, NT, 2>(p, warps, c.persist, sms, stream);
    else if (c.subtract && p.normWeight)
        launchStreamPairs<T, NT, 2, false, false, true, kNormX>(p, warps, 0, sms, stream);
    else if (c.subtract)
        launchStreamPairs<T, NT, 2, false, false, true>(p, warps, 0, sms, stream);
    else if (c.batch == 2 && c.overlap)
        launchStreamPairs<T, NT, 2, true, false>(p, warps, 0, sms, stream);
    else if (c.batch == 2 && c.split)
        launchStreamPairs<T, NT, 2, false, true>(p, warps, 0, sms, stream);
    else if (c.batch == 2)
        launchStreamPairs<T, NT, 2, false, false>(p, warps, 0, sms, stream);
    else if (c.split)
        launchStreamPairs<T, NT, 4, false, true>(p, warps, 0, sms, stream);
    else
        launchStreamPairs<T, NT, 4, false, false>(p, warps, 0, sms, stream);
}

template <typename T>
void launchW4Stream(const Wxa16Params& p, int warps, int multiprocessors, cudaStream_t stream) {
    if (p.m <= 8)
        launchStreamTokens<T, 1>(p, warps, multiprocessors, stream);
    else
        launchStreamTokens<T, 2>(p, warps, multiprocessors, stream);
}

// Blocks of one W8A16 stream shape that a multiprocessor holds at once (asked once per kernel).
template <typename T, int NT, int W, int B, int CPS, bool OVERLAP, bool SUB>
int w8StreamBlocksPerSm() {
    static const int perSm = [] {
        int blocks = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, w8StreamKernel<T, NT, W, B, CPS, OVERLAP, SUB>, W * 32, 0) !=
            cudaSuccess) {
            cudaGetLastError();
            return 1;
        }
        return blocks > 0 ? blocks : 1;
    }();
    return perSm;
}

// One block per row tile; its W warps take equal pieces of the chunks, each a multiple of CPS.
template <typename T, int NT, int W, int B, int CPS, bool OVERLAP, bool SUB>
void launchW8StreamShape(Wxa16Params p, cudaStream_t stream) {
    const int per = (p.chunks + W - 1) / W;
    p.chunksPerSplit = (per + CPS - 1) / CPS * CPS;
    p.splitK = 1;
    w8StreamKernel<T, NT, W, B, CPS, OVERLAP, SUB><<<unsigned(p.tiles), W * 32, 0, stream>>>(p);
}

// Warps per block: never more than give every warp one batch; with maxWarps = 0 (auto) the most of 16, 8, 4 whose
// blocks (one per row tile) all fit on the GPU at once (in the H200 runs a second wave of blocks cost more than the
// longer pieces of fewer warps per tile); when none fit, 4 for up to 8 tokens and 8 for up to 16 (8192x28672, the
// one such shape measured: 4 warps fastest at m <= 4, 8 warps 9% faster than 4 at m = 16).
template <typename T, int NT, int B, int CPS, bool OVERLAP, bool SUB>
void launchW8StreamWarps(const Wxa16Params& p, int maxWarps, int multiprocessors, cudaStream_t stream) {
    const int wanted = (p.chunks + B - 1) / B;
    const int byBatch = wanted <= 4 ? 4 : wanted <= 8 ? 8 : 16;
    int warps = maxWarps;
    if (maxWarps == 0) {
        const int64_t tiles = p.tiles;
        warps = tiles <= int64_t(w8StreamBlocksPerSm<T, NT, 16, B, CPS, OVERLAP, SUB>()) * multiprocessors  ? 16
                : tiles <= int64_t(w8StreamBlocksPerSm<T, NT, 8, B, CPS, OVERLAP, SUB>()) * multiprocessors ? 8
                : tiles <= int64_t(w8StreamBlocksPerSm<T, NT, 4, B, CPS, OVERLAP, SUB>()) * multiprocessors ? 4
                : NT == 1                                                                               ? 4
                                                                                                        : 8;
    }
    warps = warps < byBatch ? warps : byBatch;
    if (warps <= 4)
        launchW8StreamShape<T, NT, 4, B, CPS, OVERLAP, SUB>(p, stream);
    else if (warps <= 8)
        launchW8StreamShape<T, NT, 8, B, CPS, OVERLAP, SUB>(p, stream);
    else
        launchW8StreamShape<T, NT, 16, B, CPS, OVERLAP, SUB>(p, stream);
}

// Groups of two or more chunks are computed two chunks per step (one scale fold per group) when a batch holds two.
template <typename T, int NT, int B, bool OVERLAP, bool SUB = false>
void launchW8StreamPairs(const Wxa16Params& p, int maxWarps, int multiprocessors, cudaStream_t stream) {
    if (p.groupShift >= 1 && B >= 2)
        launchW8StreamWarps<T, NT, B, (B >= 2 ? 2 : 1), OVERLAP, SUB>(p, maxWarps, multiprocessors, stream);
    else
        launchW8StreamWarps<T, NT, B, 1, OVERLAP, SUB>(p, maxWarps, multiprocessors, stream);
}

// Only the (batch, overlap) pairs of the configuration table are compiled; anything else runs 2 chunks per batch.
template <typename T, int NT>
void launchW8StreamTokens(const Wxa16Params& p, int multiprocessors, cudaStream_t stream) {
    const W8StreamShape& c = w8StreamShape(p.m);
    if (c.subtract) return launchW8StreamPairs<T, NT, 2, false, true>(p, c.maxWarps, multiprocessors, stream);
    if (c.batch == 1 && c.overlap) return launchW8StreamPairs<T, NT, 1, true>(p, c.maxWarps, multiprocessors, stream);
    if (c.batch == 2 && c.overlap) return launchW8StreamPairs<T, NT, 2, true>(p, c.maxWarps, multiprocessors, stream);
    if (c.batch == 4 && !c.overlap) return launchW8StreamPairs<T, NT, 4, false>(p, c.maxWarps, multiprocessors, stream);
    launchW8StreamPairs<T, NT, 2, false>(p, c.maxWarps, multiprocessors, stream);
}

template <typename T>
void launchW8Stream(const Wxa16Params& p, int multiprocessors, cudaStream_t stream) {
    if (p.m <= 8)
        launchW8StreamTokens<T, 1>(p, multiprocessors, stream);
    else
        launchW8StreamTokens<T, 2>(p, multiprocessors, stream);
}

template <typename T>
void launchGather(const void* x, int64_t ldx, const int32_t* columnOf, int64_t paddedCols, int m, void* xg,
                  cudaStream_t stream) {
    const int64_t n = int64_t(m) * paddedCols;
    gatherColumnsKernel<T><<<unsigned((n + 255) / 256), 256, 0, stream>>>(static_cast<const T*>(x), ldx, columnOf,
                                                                           paddedCols, m, static_cast<T*>(xg));
}

} // namespace cwb::kernels::detail
