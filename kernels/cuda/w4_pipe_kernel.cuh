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
// the warps meet at each tile's barrier; a batch never branches on its chunks (loads are predicated, x past the range is
// zero), so its loads of x and the mma chains can be scheduled across its steps.
#include "w4_stream_kernel.cuh"

namespace cwb::kernels::detail {

// Registers: D·B chunks per warp held for loads in flight. 32 warps per SM (64 registers) up to 4, 24 warps up to 8,
// else 16.
template <int NT, int W, int B, int D>
constexpr int pipeMinBlocks() {
    constexpr int warps = NT > 1 ? 16 : B * D <= 6 ? 32 : B * D <= 8 ? 24 : 16;
    return warps / W > 0 ? warps / W : 1;
}

// One step (one group of CPS = 2 chunks) of row tile `tile` at absolute chunk c: weights and (scale, zero) words, or
// zeros past cEnd.
struct PipeStep {
    uint4 w[2];
    uint32_t sz0, sz1;
};

// Grid: any number of blocks (the launcher: the resident ones); block b takes row tiles b, b + grid, ...;
// p.chunksPerSplit = chunks per warp, a multiple of B; p.splitK = 1.
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

    // Batch j = (k, b): row tile blockIdx.x + k·grid, chunks cBegin + b·B ... + B - 1.
    auto loadBatch = [&](PipeStep (&batch)[S], int k, int b) {
        const int tile = int(blockIdx.x) + k * int(gridDim.x);
        const uint4* words = p.words + int64_t(tile) * p.chunks * 32 + lane;
        const uint32_t* scales = p.scaleZero + int64_t(tile) * p.groups * 16 + g;
#pragma unroll
        for (int i = 0; i < S; ++i) {
            const int c = cBegin + b * B + i * CPS;
            const bool in0 = c < cEnd, in1 = c + 1 < cEnd;
            batch[i].w[0] = in0 ? loadStreaming(words + int64_t(c) * 32) : make_uint4(0u, 0u, 0u, 0u);
            batch[i].w[1] = in1 ? loadStreaming(words + int64_t(c + 1) * 32) : make_uint4(0u, 0u, 0u, 0u);
            const uint32_t* s = scales + (c >> p.groupShift) * 16;
            batch[i].sz0 = in0 ? __ldg(s) : 0u;
            batch[i].sz1 = in0 ? __ldg(s + 8) : 0u;
        }
    };
    float acc[1][NT][4];
    auto clearAcc = [&] {
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[0][n][j] = 0.0f;
    };
    const T* xRow[NT];   // the lane's token n·8 + g (the last token past p.m: read, then zeroed)
#pragma unroll
    for (int n = 0; n < NT; ++n) xRow[n] = static_cast<const T*>(p.x) + int64_t(min(n * 8 + g, p.m - 1)) * p.ldx + tig * 16;
    auto computeBatch = [&](const PipeStep (&batch)[S], int b) {
#pragma unroll
        for (int i = 0; i < S; ++i) {
            const int c = cBegin + b * B + i * CPS;
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
                    // Read from a valid address whatever the chunk and token (so no branch), then zeroed.
                    const bool in = c + u < cEnd && n * 8 + g < p.m;
                    const uint4* xp = reinterpret_cast<const uint4*>(xRow[n] + int64_t(min(c + u, p.chunks - 1)) * 64);
                    uint4 v0 = __ldg(xp), v1 = __ldg(xp + 1);
                    if (!in) v0 = v1 = make_uint4(0u, 0u, 0u, 0u);
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
        if (d < total) loadBatch(buffer[d], d / perTile, d % perTile);
    waitForPredecessor();
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
                    loadBatch(buffer[d], loadK, loadB);
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
