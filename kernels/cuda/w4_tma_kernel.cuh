#pragma once
// Hopper (sm_90) variant of the W4A16 kernel for m <= 16 tokens (internal; CWB_W4_KERNEL=tma|ring picks it). Same
// tiled16x64 layout and the same folded-zero math as w4_small_m_kernel.cuh; what differs is where the weights wait:
// - a row tile's run of chunks is one contiguous byte range, so a stage (CS chunks of the block's R row tiles and
//   their (scale, zero) words) is 2·R bulk copies (cp.async.bulk) into shared memory completing on one mbarrier:
//   one instruction per tile and stage instead of per-lane addresses, and no registers held for bytes in flight;
// - each warp owns SL stage slots: it consumes the block's stages w, w + W, ... and, once done with a slot, its
//   lane 0 refills it with the warp's stage SL further on. No producer warp and no cross-warp waits: the only
//   barrier a warp waits on is the one its own copies complete;
// - bytes in flight per SM are bounded by shared memory (W·SL·R·CS·576 bytes per block), not by registers.
// The warps of a block split its chunk range and add up through shared memory, then the split-K epilogue of the
// ring kernel (finishSmallBlock) runs unchanged. Built for every architecture; the body exists on sm_90 and newer
// only (the launcher never starts it elsewhere). Measured on the H200 it beats the ring kernel on 4096x4096 only
// (docs/performance.md, "W4A16 at M <= 16 through TMA"), so it is not the default.
#include <cooperative_groups.h>

#include "w4_small_m_kernel.cuh"

namespace cwb::kernels::detail {

// Shapes of the kernel: row tiles per block (R), warps (W), chunks per stage (CS, even), stage slots per warp (SL).
// CWB_W4_TMA_CONFIG (0..kTmaConfigs - 1) or wxa16SetTmaConfig picks one for benchmarking.
struct TmaConfig {
    int r, w, cs, sl;
};
constexpr int kTmaConfigs = 5;
constexpr TmaConfig kTmaConfigTable[kTmaConfigs] = {{2, 4, 4, 4}, {1, 8, 4, 3}, {4, 4, 2, 4}, {1, 4, 4, 4}, {2, 4, 8, 2}};
int tmaConfigIndex();  // wxa16_gemm.cu
inline const TmaConfig& tmaConfig() { return kTmaConfigTable[tmaConfigIndex()]; }

constexpr int kChunkBytes = 512;   // 16 rows x 64 columns of 4-bit weights
constexpr int kGroupBytes = 64;    // (scale, zero) words of 16 rows for one group

// Shared memory of one block: the stage slots, then one mbarrier per slot, then the reduction of the warps' sums.
template <int NT, int R, int W, int CS, int SL>
struct TmaSmem {
    static constexpr int kSlotBytes = R * CS * (kChunkBytes + kGroupBytes);
    static constexpr int kSlots = W * SL;
    static constexpr int kBarrierOffset = kSlots * kSlotBytes;
    static constexpr int kReduceOffset = kBarrierOffset + kSlots * 8;
    static constexpr int kBytes = kReduceOffset + W * R * NT * 4 * 32 * 4;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t sharedAddress(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void barrierInit(uint32_t bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void barrierExpectBytes(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void barrierWait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n .reg .pred ready;\n mbarrier.try_wait.parity.shared::cta.b64 ready, [%1], %2;\n"
            " selp.u32 %0, 1, 0, ready;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}
__device__ __forceinline__ void bulkCopy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The end of a block whose splits form one thread-block cluster (p.clusterReduce): each block adds up its warps'
// sums in its own shared memory, and after a cluster barrier the blocks read each other's sums (distributed shared
// memory), each finishing a share of the outputs. No fp32 partials in global memory, no counters, no last block.
template <typename T, int NT, int R, int W>
__device__ __forceinline__ void finishClusterBlock(const Wxa16Params& p, const float (&acc)[R][NT][4], float* red,
                                                   int tile0) {
    namespace cg = cooperative_groups;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    constexpr int kPerWarp = R * NT * 4;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) red[(warp * kPerWarp + (r * NT + n) * 4 + j) * 32 + lane] = acc[r][n][j];
    __syncthreads();
    for (int i = threadIdx.x; i < kPerWarp * 32; i += blockDim.x) {  // the block's sum, in place of warp 0's
        float sum = red[i];
#pragma unroll
        for (int w = 1; w < W; ++w) sum += red[w * kPerWarp * 32 + i];
        red[i] = sum;
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int ranks = int(cluster.num_blocks()), me = int(cluster.block_rank());
    for (int i = me * blockDim.x + threadIdx.x; i < kPerWarp * 32; i += ranks * blockDim.x) {
        const int e = i / 32, l = i % 32;
        const int r = e / (NT * 4), n = (e / 4) % NT, j = e % 4;
        const int tok = n * 8 + 2 * (l % 4) + (j % 2);
        const int tile = tile0 + r, row = tile * 16 + l / 4 + (j / 2) * 8;
        if (tok >= p.m || tile >= p.tiles || row >= p.rows) continue;
        float sum = 0.0f;
        for (int k = 0; k < ranks; ++k) sum += cluster.map_shared_rank(red, k)[i];
        storeOutput<T>(p, tok, row, sum);
    }
    cluster.sync();  // a block's shared memory must outlive the other blocks' reads of it
}
#endif

__device__ __forceinline__ int groupOfChunk(const Wxa16Params& p, int c) {
    return p.groupShift >= 0 ? c >> p.groupShift : __ldg(p.chunkGroup + c);
}

// Grid: x = groups of R row tiles, y = splits of the chunks (each a multiple of CS). Stage j of a block covers chunks
// cBegin + j·CS .. + CS (fewer at the split's end) and is computed by warp j % W from its slot (j / W) % SL.
template <typename T, int NT, int R, int W, int CS, int SL, int CPS>
__global__ void __launch_bounds__(W * 32) w4TmaKernel(const Wxa16Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    using Smem = TmaSmem<NT, R, W, CS, SL>;
    extern __shared__ __align__(128) unsigned char smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const int tile0 = blockIdx.x * R;
    const int split = blockIdx.y;
    const int cBegin = split * p.chunksPerSplit, cEnd = min(p.chunks, cBegin + p.chunksPerSplit);
    const int stages = (cEnd - cBegin + CS - 1) / CS;

    unsigned char* slots = smem + warp * SL * Smem::kSlotBytes;
    const uint32_t slots0 = sharedAddress(slots);
    const uint32_t bars0 = sharedAddress(smem + Smem::kBarrierOffset) + warp * SL * 8;
    const char* words = reinterpret_cast<const char*>(p.words);
    const char* scales = reinterpret_cast<const char*>(p.scaleZero);
    const T* xLane = static_cast<const T*>(p.x) + int64_t(g) * p.ldx + tig * 16;
    const int64_t xTokenStride = int64_t(8) * p.ldx;

    // Lane 0 starts the copies of stage j into slot s; every lane prefetches its activations of it into L1.
    auto issue = [&](int j, int s) {
        const int c0 = cBegin + j * CS, n = min(CS, cEnd - c0);
        if (lane == 0) {
            const int gA = groupOfChunk(p, c0), ng = groupOfChunk(p, c0 + n - 1) - gA + 1;
            const uint32_t bar = bars0 + s * 8, dst = slots0 + s * Smem::kSlotBytes;
            // The slot was last read by this warp through ordinary loads; order them before the copy engine's writes.
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            barrierExpectBytes(bar, uint32_t(R * (n * kChunkBytes + ng * kGroupBytes)));
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const int64_t tile = min(tile0 + r, p.tiles - 1);
                bulkCopy(dst + r * CS * kChunkBytes, words + (tile * p.chunks + c0) * kChunkBytes,
                         uint32_t(n * kChunkBytes), bar);
                bulkCopy(dst + R * CS * kChunkBytes + r * CS * kGroupBytes,
                         scales + (tile * p.groups + gA) * kGroupBytes, uint32_t(ng * kGroupBytes), bar);
            }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
            if (nt * 8 + g < p.m)
#pragma unroll
                for (int u = 0; u < CS; ++u)
                    if (u < n) asm volatile("prefetch.global.L1 [%0];\n" ::"l"(xLane + nt * xTokenStride + (c0 + u) * 64));
    };

    if (lane == 0) {
#pragma unroll
        for (int s = 0; s < SL; ++s) barrierInit(bars0 + s * 8);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncwarp();
#pragma unroll
    for (int s = 0; s < SL; ++s)
        if (warp + s * W < stages) issue(warp + s * W, s);

    float acc[R][NT][4];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[r][n][j] = 0.0f;

    for (int q = 0, j = warp; j < stages; ++q, j += W) {
        const int s = q % SL;
        barrierWait(bars0 + s * 8, uint32_t((q / SL) & 1));
        const int c0 = cBegin + j * CS, n = min(CS, cEnd - c0);
        const int gA = groupOfChunk(p, c0);
        const unsigned char* slot = slots + s * Smem::kSlotBytes;
#pragma unroll
        for (int u0 = 0; u0 < CS; u0 += CPS) {
            if (u0 < n) {
                SmallStep<R, CPS> b;
                const int gl = groupOfChunk(p, c0 + u0) - gA;
#pragma unroll
                for (int r = 0; r < R; ++r) {
#pragma unroll
                    for (int u = 0; u < CPS; ++u)
                        b.w[r][u] = (u == 0 || u0 + u < n)
                                        ? reinterpret_cast<const uint4*>(slot + (r * CS + u0 + u) * kChunkBytes)[lane]
                                        : make_uint4(0, 0, 0, 0);
                    const uint32_t* sz = reinterpret_cast<const uint32_t*>(slot + R * CS * kChunkBytes +
                                                                           (r * CS + gl) * kGroupBytes) + g;
                    b.sz0[r] = sz[0];
                    b.sz1[r] = sz[8];
                }
                computeSmallStep<T, NT, R, CPS>(b, p, xLane + (c0 + u0) * 64, xTokenStride, c0 + u0, cEnd, g, acc);
            }
        }
        __syncwarp();
        if (j + SL * W < stages) issue(j + SL * W, s);
    }

    float* red = reinterpret_cast<float*>(smem + Smem::kReduceOffset);
    if (p.clusterReduce)
        finishClusterBlock<T, NT, R, W>(p, acc, red, tile0);
    else
        finishSmallBlock<T, NT, R, W>(p, acc, red, tile0, split);
#else
    __trap();  // never launched below sm_90
#endif
}

} // namespace cwb::kernels::detail
