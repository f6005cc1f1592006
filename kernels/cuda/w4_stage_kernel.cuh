#pragma once
// The staged variant of the stream W4A16 kernel (w4_stream_kernel.cuh; a stream configuration with `staged` set).
// Same work split (one block per row tile, its warps cutting the input dimension, no split-K), but the weights wait
// in shared memory instead of registers: each lane copies the 16-byte words it will itself read (cp.async, sm_80+)
// for up to S steps at once, one commit group per step, and computes step i as soon as group i has landed. Lanes
// read only what they copied, so no barrier is needed and a block holds no registers for bytes in flight: shared
// memory, not registers, bounds the loads in flight per multiprocessor (the whole 4-bit weight of a 7B layer fits
// in the shared memory of the GPU at once).
#include "w4_small_m_kernel.cuh"

namespace cwb::kernels::detail {

__device__ __forceinline__ void copyAsync16(void* sharedDst, const void* globalSrc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const uint32_t dst = uint32_t(__cvta_generic_to_shared(sharedDst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(globalSrc) : "memory");
#endif
}
__device__ __forceinline__ void commitCopies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most `pending` (0..7) of this thread's newest commit groups are still in flight.
__device__ __forceinline__ void waitCopies(int pending) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    switch (pending) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;\n" ::: "memory"); break;
    }
#endif
}

// Shared memory of one block: `steps` (<= S) steps of CPS chunks, 16 bytes per thread each.
inline size_t stageSharedBytes(int warps, int steps, int cps) { return size_t(warps) * 32 * size_t(steps) * size_t(cps) * 16; }

// Grid: one block per row tile; p.chunksPerSplit = chunks per warp (a multiple of CPS); p.splitK = 1. Up to S steps
// are in flight per warp; a warp with more goes round in several rounds.
template <typename T, int NT, int W, int S, int CPS>
__global__ void __launch_bounds__(W * 32) w4StageKernel(const Wxa16Params p) {
    extern __shared__ uint4 staged[];  // [step][chunk of the step][thread]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const int tile = blockIdx.x;
    const int cBegin = warp * p.chunksPerSplit, cEnd = min(p.chunks, cBegin + p.chunksPerSplit);
    const uint4* wsrc = p.words + int64_t(tile) * p.chunks * 32 + lane;
    const uint32_t* ssrc = p.scaleZero + int64_t(tile) * p.groups * 16 + g;
    const int64_t xTokenStride = int64_t(8) * p.ldx;
    const T* xLane = static_cast<const T*>(p.x) + int64_t(g) * p.ldx + tig * 16;

    float acc[1][NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[0][n][j] = 0.0f;

    for (int c0 = cBegin; c0 < cEnd; c0 += S * CPS) {
        uint32_t sz0[S], sz1[S];
        // Issue: every step's copies, its scale words (registers) and an L1 prefetch of its activations.
#pragma unroll
        for (int i = 0; i < S; ++i) {
            const int c = c0 + i * CPS;
            if (c < cEnd) {
#pragma unroll
                for (int u = 0; u < CPS; ++u)
                    if (u == 0 || c + u < cEnd) copyAsync16(staged + (i * CPS + u) * (W * 32) + threadIdx.x, wsrc + int64_t(c + u) * 32);
                const int group = p.groupShift >= 0 ? c >> p.groupShift : __ldg(p.chunkGroup + c);
                sz0[i] = __ldg(ssrc + group * 16);
                sz1[i] = __ldg(ssrc + group * 16 + 8);
#pragma unroll
                for (int n = 0; n < NT; ++n)
                    if (n * 8 + g < p.m)
#pragma unroll
                        for (int u = 0; u < CPS; ++u)
                            if (u == 0 || c + u < cEnd)
                                asm volatile("prefetch.global.L1 [%0];\n" ::"l"(xLane + n * xTokenStride + int64_t(c + u) * 64));
            }
            commitCopies();  // one group per step, empty or not, so that group i is always the (S - i)-th newest
        }
        // Compute step i once its copies have landed.
#pragma unroll
        for (int i = 0; i < S; ++i) {
            const int c = c0 + i * CPS;
            if (c >= cEnd) break;
            waitCopies(S - 1 - i);
            SmallStep<1, CPS> b;
#pragma unroll
            for (int u = 0; u < CPS; ++u)
                b.w[0][u] = (u == 0 || c + u < cEnd) ? staged[(i * CPS + u) * (W * 32) + threadIdx.x] : make_uint4(0, 0, 0, 0);
            b.sz0[0] = sz0[i];
            b.sz1[0] = sz1[i];
            computeSmallStep<T, NT, 1, CPS>(b, p, xLane + int64_t(c) * 64, xTokenStride, c, cEnd, g, acc);
        }
        waitCopies(0);  // nothing of this round in flight before its slots are refilled
    }

    __shared__ float red[W * NT * 4 * 32];
    finishSmallBlock<T, NT, 1, W>(p, acc, red, tile, 0);
}

} // namespace cwb::kernels::detail
