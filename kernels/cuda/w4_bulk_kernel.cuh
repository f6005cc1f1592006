#pragma once
// The persistent W4A16 stream kernel with its weights staged in shared memory by the copy engine (internal; sm_90;
// StreamConfig::bulkSlots > 0, plain x, up to 8 tokens, groups of 2+ chunks). Same tiled16x64 layout, the same
// subtracted-zero math and the same reduction as w4StreamKernel's persistent loop. What differs is where the bytes in
// flight wait: there in registers (64 per thread for 32 warps per SM, so at most 4 chunks per warp, 64 KB per SM),
// here in SL slots of shared memory, each a piece of up to 64 chunks of one row tile (32 KB) with its (scale, zero)
// words, filled by two bulk copies (cp.async.bulk) that complete on the slot's mbarrier. One block per multiprocessor
// keeps up to SL pieces (up to ~200 KB) in flight from its start, as a plain read does, and its warps only compute.
// A row tile's pieces must all fit in the slots at once (the launcher checks); a slot is refilled with the piece SL
// further on once the block has passed the barrier of the row tile that read it.
#include <type_traits>

#include "dependent_launch.cuh"
#include "w4_tma_kernel.cuh"

namespace cwb::kernels::detail {

constexpr int kBulkPieceChunks = 64;
constexpr int kBulkSlotBytes = kBulkPieceChunks * kChunkBytes + kBulkPieceChunks / 2 * kGroupBytes;   // 34816

// Shared memory of one block: the slots, two reduction buffers (one per parity of row tiles), one mbarrier per slot.
template <int W, int SL>
struct BulkSmem {
    static constexpr int kReduceOffset = SL * kBulkSlotBytes;
    static constexpr int kReduceFloats = W * 4 * 32;   // one token tile
    static constexpr int kBarrierOffset = kReduceOffset + 2 * kReduceFloats * 4;
    static constexpr int kBytes = kBarrierOffset + SL * 8;
};

// Grid: any number of blocks (the launcher: the resident ones); block b takes row tiles b, b + grid, ...; warp w
// computes chunks w·(64 / W) .. + 64 / W of each 64-chunk piece. p.splitK = 1; ceil(p.chunks / 64) <= SL.
template <typename T, int W, int SL>
__global__ void __launch_bounds__(W * 32, 1) w4BulkKernel(const Wxa16Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int CPS = 2;
    constexpr int kWarpChunks = kBulkPieceChunks / W;
    static_assert(kWarpChunks % CPS == 0, "whole groups per warp and piece");
    using Smem = BulkSmem<W, SL>;
    using T2 = typename ActTraits<T>::T2;
    extern __shared__ __align__(128) unsigned char smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const int pieces = (p.chunks + kBulkPieceChunks - 1) / kBulkPieceChunks;   // per row tile
    const int tiles = (p.tiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);   // this block's
    const int total = tiles * pieces;
    const uint32_t bars = sharedAddress(smem + Smem::kBarrierOffset);
    const char* words = reinterpret_cast<const char*>(p.words);
    const char* scales = reinterpret_cast<const char*>(p.scaleZero);

    // Thread 0: piece j (row tile blockIdx.x + (j / pieces)·grid, chunks from (j % pieces)·64) into slot j % SL.
    auto issue = [&](int j) {
        const int64_t tile = int64_t(blockIdx.x) + int64_t(j / pieces) * gridDim.x;
        const int c0 = (j % pieces) * kBulkPieceChunks, n = min(kBulkPieceChunks, p.chunks - c0);
        const int gA = c0 >> p.groupShift, ng = ((c0 + n - 1) >> p.groupShift) - gA + 1;
        const int s = j % SL;
        const uint32_t bar = bars + s * 8, dst = sharedAddress(smem + s * kBulkSlotBytes);
        // The slot was last read through ordinary loads; order them before the copy engine's writes.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        barrierExpectBytes(bar, uint32_t(n * kChunkBytes + ng * kGroupBytes));
        bulkCopy(dst, words + (tile * p.chunks + c0) * kChunkBytes, uint32_t(n * kChunkBytes), bar);
        bulkCopy(dst + kBulkPieceChunks * kChunkBytes, scales + (tile * p.groups + gA) * kGroupBytes,
                 uint32_t(ng * kGroupBytes), bar);
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < SL; ++s) barrierInit(bars + s * 8);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        for (int j = 0; j < SL && j < total; ++j) issue(j);   // weights only: before the wait
    }
    __syncthreads();
    waitForPredecessor();

    // The lane's token g; past p.m the last token's row, whose sums are never stored.
    const T* xRow = static_cast<const T*>(p.x) + int64_t(min(g, p.m - 1)) * p.ldx + tig * 16;
    float acc[1][1][4] = {{{0.0f, 0.0f, 0.0f, 0.0f}}};
    float* red = reinterpret_cast<float*>(smem + Smem::kReduceOffset);
    // The warp's chunks of one piece from its slot. FULL (a whole 64-chunk piece): no checks, so the activations of all
    // of them are loaded first (from L1 after the first row tile) and the steps are scheduled together.
    auto computePiece = [&](const unsigned char* slot, int c0, auto fullPiece) {
        constexpr bool FULL = decltype(fullPiece)::value;
        const int gA = c0 >> p.groupShift, first = warp * kWarpChunks;
        uint4 xv[kWarpChunks][2];
#pragma unroll
        for (int u = 0; u < kWarpChunks; ++u) {
            const int c = c0 + first + u;
            if (FULL || c < p.chunks) {
                const uint4* xp = reinterpret_cast<const uint4*>(xRow + int64_t(c) * 64);
                xv[u][0] = __ldg(xp);
                xv[u][1] = __ldg(xp + 1);
            }
        }
#pragma unroll
        for (int i = 0; i < kWarpChunks / CPS; ++i) {
            const int local = first + i * CPS, c = c0 + local;
            if (!FULL && c >= p.chunks) break;   // the same in the whole warp
            const uint32_t* sz = reinterpret_cast<const uint32_t*>(slot + kBulkPieceChunks * kChunkBytes +
                                                                   ((c >> p.groupShift) - gA) * kGroupBytes) + g;
            const FoldedGroup f = foldedGroup<T>(sz[0], sz[8]);
            const T2 z0 = T2(T(f.zf0), T(f.zf0)), z1 = T2(T(f.zf1), T(f.zf1));
            float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int u = 0; u < CPS; ++u) {
                if (!FULL && u > 0 && c + u >= p.chunks) break;
                const uint4 wv = reinterpret_cast<const uint4*>(slot + (local + u) * kChunkBytes)[lane];
                const uint4 v0 = xv[i * CPS + u][0], v1 = xv[i * CPS + u][1];
                const uint32_t bx[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
                const uint32_t w[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    uint32_t a[4];
                    magicStep<T>(w[k], a);
                    a[0] = asWord(__hsub2(asPair<T2>(a[0]), z0));   // a[0], a[2]: row g; a[1], a[3]: row g + 8
                    a[1] = asWord(__hsub2(asPair<T2>(a[1]), z1));
                    a[2] = asWord(__hsub2(asPair<T2>(a[2]), z0));
                    a[3] = asWord(__hsub2(asPair<T2>(a[3]), z1));
                    mma16816<T>(t, a, bx[2 * k], bx[2 * k + 1]);
                }
            }
            acc[0][0][0] = fmaf(t[0], f.s0, acc[0][0][0]);
            acc[0][0][1] = fmaf(t[1], f.s0, acc[0][0][1]);
            acc[0][0][2] = fmaf(t[2], f.s1, acc[0][0][2]);
            acc[0][0][3] = fmaf(t[3], f.s1, acc[0][0][3]);
        }
    };
    int parity = 0;
    for (int j = 0; j < total; ++j) {
        const int s = j % SL, q = j % pieces;
        barrierWait(bars + s * 8, uint32_t((j / SL) & 1));
        const unsigned char* slot = smem + s * kBulkSlotBytes;
        const int c0 = q * kBulkPieceChunks;
        if (c0 + kBulkPieceChunks <= p.chunks)
            computePiece(slot, c0, std::true_type{});
        else
            computePiece(slot, c0, std::false_type{});
        if (q != pieces - 1) continue;
        // The row tile's last piece: its warps' sums through red[parity]; past the barrier every warp is done with
        // the tile's slots, so thread 0 refills them with the pieces SL further on.
        float* buffer = red + parity * Smem::kReduceFloats;
#pragma unroll
        for (int e = 0; e < 4; ++e) buffer[(warp * 4 + e) * 32 + lane] = acc[0][0][e];
        __syncthreads();
        if (threadIdx.x == 0)
            for (int next = j - pieces + 1 + SL; next <= j + SL && next < total; ++next) issue(next);
        const int tile = int(blockIdx.x) + (j / pieces) * int(gridDim.x);
        for (int i = threadIdx.x; i < 4 * 32; i += blockDim.x) {
            const int e = i / 32, l = i % 32;
            const int tok = 2 * (l % 4) + (e % 2), row = tile * 16 + l / 4 + (e / 2) * 8;
            if (tok >= p.m || row >= p.rows) continue;
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < W; ++w) sum += buffer[(w * 4 + e) * 32 + l];
            storeOutput<T>(p, tok, row, sum);
        }
        parity ^= 1;
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[0][0][e] = 0.0f;
    }
#else
    __trap();   // never launched below sm_90
#endif
}

} // namespace cwb::kernels::detail
