#pragma once
// The pipelined form of the persistent W4A16 stream kernel (internal; StreamConfig::pipeDepth > 0, plain x, groups of
// two or more chunks, up to 8 tokens). Same tiled16x64 layout, the same subtracted-zero math and the same reduction
// as w4StreamKernel's persistent loop; what differs is when the loads are issued. There a warp loads the batch of its
// next row tile only after it has computed the current one, so each round of row tiles costs a memory round trip plus
// the compute (measured on the H200: at K = 4096 and one token the time rose by ~2.9 us per round of 264 blocks,
// whether the round was full or not). Here a warp's batches form one sequence across the block's row tiles with D
// register buffers: the load of batch j + D is issued as soon as batch j has been computed, before the row tile's
// reduction, so D - 1 batches stay in flight through the compute and D through the reduction and the store.
// Every warp runs the same number of batches per row tile (batches past its chunk range load nothing and add zero), so
// the warps meet at each tile's barrier; a batch is whole or skipped (p.chunks a multiple of B), so its loads of x and
// its mma chains are scheduled across its steps without branches.
#include "w4_stream_kernel.cuh"

namespace cwb::kernels::detail {

// Registers: D·B chunks per warp held for loads in flight. 32 warps per SM (64 registers) up to 4, 24 warps up to 8,
// else 16.
template <int NT, int W, int B, int D>
constexpr int pipeMinBlocks() {
    constexpr int warps = NT > 1 ? 16 : B * D <= 6 ? 32 : B * D <= 8 ? 24 : 16;
    return warps / W > 0 ? warps / W : 1;
}

// One step (one group of CPS = 2 chunks) of a row tile: weights and (scale, zero) words.
struct PipeStep {
    uint4 w[2];
    uint32_t sz0, sz1;
};

// Grid: any number of blocks (the launcher: the resident ones); block b takes row tiles b, b + grid, ...;
// p.chunks and p.chunksPerSplit (chunks per warp) multiples of B; p.splitK = 1.
template <typename T, int NT, int W, int B, int D>
__global__ void __launch_bounds__(W * 32, pipeMinBlocks<NT, W, B, D>()) w4PipeKernel(const Wxa16Params p) {
    constexpr int CPS = 2;
    constexpr int S = B / CPS;   // steps per batch
    static_assert(B % CPS == 0 && D >= 2, "whole groups per batch, at least two buffers");
    using T2 = typename ActTraits<T>::T2;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const int cBegin = warp * p.chunksPerSplit, cEnd = min(p.chunks, cBegin + p.chunksPerSplit);
    const int perTile = p.chunksPerSplit / B;   // batches per row tile, the same in every warp
    const int tiles = (p.tiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);   // this block's
    const int total = tiles * perTile;

    // Batch j = (k, b): row tile blockIdx.x + k·grid, chunks c0 = cBegin + b·B ... c0 + B - 1, all inside the warp's
    // range or all past it (p.chunks and chunksPerSplit are multiples of B), so only whole batches are skipped.
    // X_L1: bring the batch's activations into L1 as well (only after the wait for the kernel that writes them).
    const T* xRow[NT];   // the lane's token n·8 + g; past p.m the last token's row, whose sums are never stored
#pragma unroll
    for (int n = 0; n < NT; ++n) xRow[n] = static_cast<const T*>(p.x) + int64_t(min(n * 8 + g, p.m - 1)) * p.ldx + tig * 16;
    auto loadBatch = [&](PipeStep (&batch)[S], int k, int b, bool xIntoL1) {
        const int c0 = cBegin + b * B;
        if (c0 >= cEnd) return;
        const int tile = int(blockIdx.x) + k * int(gridDim.x);
        const uint4* words = p.words + (int64_t(tile) * p.chunks + c0) * 32 + lane;
        const uint32_t* scales = p.scaleZero + int64_t(tile) * p.groups * 16 + g;
#pragma unroll
        for (int i = 0; i < S; ++i) {
            batch[i].w[0] = loadStreaming(words + (i * CPS) * 32);
            batch[i].w[1] = loadStreaming(words + (i * CPS + 1) * 32);
            const uint32_t* s = scales + ((c0 + i * CPS) >> p.groupShift) * 16;
            batch[i].sz0 = __ldg(s);
            batch[i].sz1 = __ldg(s + 8);
        }
        if (xIntoL1)
#pragma unroll
            for (int n = 0; n < NT; ++n)
                if (n * 8 + g < p.m)
#pragma unroll
                    for (int u = 0; u < B; ++u)
                        asm volatile("prefetch.global.L1 [%0];\n" ::"l"(xRow[n] + int64_t(c0 + u) * 64));
    };
    float acc[1][NT][4];
    auto clearAcc = [&] {
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[0][n][j] = 0.0f;
    };
    auto computeBatch = [&](const PipeStep (&batch)[S], int b) {
        const int c0 = cBegin + b * B;
        if (c0 >= cEnd) return;
        const T* xq[NT];
#pragma unroll
        for (int n = 0; n < NT; ++n) xq[n] = xRow[n] + int64_t(c0) * 64;
#pragma unroll
        for (int i = 0; i < S; ++i) {
            const FoldedGroup f = foldedGroup<T>(batch[i].sz0, batch[i].sz1);
            const T2 z0 = T2(T(f.zf0), T(f.zf0)), z1 = T2(T(f.zf1), T(f.zf1));
            float t[NT][4];
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int j = 0; j < 4; ++j) t[n][j] = 0.0f;
#pragma unroll
            for (int u = 0; u < CPS; ++u) {
                uint32_t bx[NT][8];
#pragma unroll
                for (int n = 0; n < NT; ++n) {
                    const uint4* xp = reinterpret_cast<const uint4*>(xq[n] + (i * CPS + u) * 64);
                    const uint4 v0 = __ldg(xp), v1 = __ldg(xp + 1);
                    bx[n][0] = v0.x, bx[n][1] = v0.y, bx[n][2] = v0.z, bx[n][3] = v0.w;
                    bx[n][4] = v1.x, bx[n][5] = v1.y, bx[n][6] = v1.z, bx[n][7] = v1.w;
                }
                const uint32_t* w = reinterpret_cast<const uint32_t*>(&batch[i].w[u]);
#pragma unroll
                for (int s = 0; s < 4; ++s) {
                    uint32_t a[4];
                    magicStep<T>(w[s], a);
                    a[0] = asWord(__hsub2(asPair<T2>(a[0]), z0));   // a[0], a[2]: row g; a[1], a[3]: row g + 8
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
    };

    // The first D batches' weights before the wait (they never change; x is read only after it).
    PipeStep buffer[D][S];
#pragma unroll
    for (int d = 0; d < D; ++d)
        if (d < total) loadBatch(buffer[d], d / perTile, d % perTile, false);
    waitForPredecessor();
    for (int d = 0; d < D && d < perTile; ++d)   // their activations (of the first row tile: the same for every tile)
#pragma unroll
        for (int n = 0; n < NT; ++n)
            if (n * 8 + g < p.m && cBegin + d * B < cEnd)
#pragma unroll
                for (int u = 0; u < B; ++u)
                    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(xRow[n] + int64_t(cBegin + d * B + u) * 64));
    clearAcc();
    __shared__ float red[2][W * NT * 4 * 32];
    int k = 0, b = 0;                              // the batch computed next
    int loadK = D / perTile, loadB = D % perTile;  // the batch loaded next (j + D)
    int parity = 0;
    for (int j = 0; j < total;) {
#pragma unroll
        for (int d = 0; d < D; ++d) {
            if (j < total) {   // the same in every warp of the block
                computeBatch(buffer[d], b);
                if (j + D < total) {
                    loadBatch(buffer[d], loadK, loadB, true);
                    if (++loadB == perTile) loadB = 0, ++loadK;
                }
                if (++b == perTile) {
                    finishSmallBlock<T, NT, 1, W>(p, acc, red[parity], int(blockIdx.x) + k * int(gridDim.x), 0);
                    parity ^= 1;
                    clearAcc();
                    b = 0;
                    ++k;
                }
                ++j;
            }
        }
    }
}

} // namespace cwb::kernels::detail
