#pragma once
// Internal to decode_attention.cu: the three ways the chunks of a split decode-attention plan are merged (running
// maxima and sums, in fp32, in the same order): a second small kernel (mergeSplitsKernel), the last block of each
// (sequence, kv head) to finish through the workspace (mergeIfLast), or the blocks of one thread-block cluster through
// each other's shared memory (mergeInCluster); finishChunk is the end of both attention kernels that picks one.
#include <cmath>
#include <cstdint>

#include "cwb/kernels/decode_ops.h"
#include "decode_common.cuh"
#include "dependent_launch.cuh"

namespace cwb::kernels::attention_merge {

using detail::fromFloat;

__device__ __forceinline__ int64_t clampedPosition(const int64_t* position, int64_t capacity) {
    return min(max(*position, int64_t(0)), capacity - 1);
}

// The query heads a block takes: the kv head's group of heads / kvHeads query heads is divided among `parts` blocks
// (DecodeAttentionPlan::headParts), blockIdx.y = kvHead * parts + part; this block has `groups` of them from
// firstHead on. The counter of mergeIfLast is per (sequence, kv head, part): `slot`.
struct BlockHeads {
    int kvHead, groups, firstHead, heads, slot;
};
// PARTS false: one part (parts must be 1), blockIdx.y is the kv head.
template <bool PARTS>
__device__ __forceinline__ BlockHeads blockHeads(int heads, int kvHeads, int parts) {
    const int slot = int(blockIdx.z * gridDim.y + blockIdx.y);
    if constexpr (!PARTS) {
        const int groups = heads / kvHeads;
        return {int(blockIdx.y), groups, int(blockIdx.y) * groups, heads, slot};
    } else {
        const int part = int(blockIdx.y) % parts, kvHead = int(blockIdx.y) / parts, groups = heads / kvHeads / parts;
        return {kvHead, groups, kvHead * (heads / kvHeads) + part * groups, heads, slot};
    }
}

// The merge inside the attention launch (DecodeAttentionPlan::mergeInKernel): after its partials are written, the
// last block of a (sequence, kv head, part) to arrive adds up the chunks of its query heads exactly as mergeSplitsKernel does,
// then resets the counter to zero for the next launch. Every block runs it (it has barriers); p is the clamped position.
template <typename T>
__device__ void mergeIfLast(const float* partialMax, const float* partialSum, const float* partialOut, int* counters,
                            T* out, int64_t p, int b, const BlockHeads& h, int headDim,
                            int64_t keysPerSplit, int splits) {
    __shared__ bool last;
    __threadfence();   // this thread's partials, device-wide, before the block's arrival is counted
    __syncthreads();
    const int used = int(min(int64_t(splits), p / keysPerSplit + 1));   // the chunks whose blocks did not exit
    int* counter = counters + h.slot;
    if (threadIdx.x == 0) last = atomicAdd(counter, 1) == used - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int groups = h.groups;
    for (int e = threadIdx.x; e < groups * headDim; e += blockDim.x) {
        const int g = e / headDim, i = e % headDim;
        const int64_t row = int64_t(b) * h.heads + h.firstHead + g;
        const float* maxima = partialMax + row * splits;
        float top = -INFINITY;
        for (int s = 0; s < used; ++s) top = fmaxf(top, __ldcg(maxima + s));
        float total = 0.0f, acc = 0.0f;
        for (int s = 0; s < used; ++s) total += __ldcg(partialSum + row * splits + s) * expf(__ldcg(maxima + s) - top);
        for (int s = 0; s < used; ++s)
            acc += __ldcg(partialOut + (row * splits + s) * headDim + i) * expf(__ldcg(maxima + s) - top);
        out[row * headDim + i] = fromFloat<T>(acc / total);
    }
    if (threadIdx.x == 0) *counter = 0;
}

// Thread-block clusters (sm_90+; the launcher never asks for them below). The cluster barrier in its two halves: every
// thread arrives once at the kernel's start (clusterArrive: relaxed, it does not wait) and waits before its first store
// into another block's shared memory (clusterWaitStarted), since that block must have started; then arrives with
// release once its stores are issued and waits with acquire before it reads what the others stored (clusterSync).
__device__ __forceinline__ void clusterArrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
#endif
}
__device__ __forceinline__ void clusterWaitStarted() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void clusterSync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
#endif
}
// Stores v at the address `local` has in this block, in the shared memory of block `rank` of the cluster.
__device__ __forceinline__ void clusterSharedStore(float* local, int rank, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned address = unsigned(__cvta_generic_to_shared(local));
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
#endif
}

// The elements of [groups][headDim] that block `rank` of a cluster of `splits` merges: [rank * share, + share).
__host__ __device__ inline int64_t clusterShare(int64_t elements, int64_t splits) { return (elements + splits - 1) / splits; }
// Floats of the area each block of a cluster plan receives the others' partials in: [splits][share] weighted sums,
// then [splits][2 groups] maxima and totals.
__host__ __device__ inline int64_t clusterReceiveFloats(int64_t groups, int64_t headDim, int64_t splits) {
    return splits * (clusterShare(groups * headDim, splits) + 2 * groups);
}

// The merge inside a cluster (DecodeAttentionPlan::mergeInCluster): the splits of one (sequence, kv head) are one
// cluster, block x of it chunk x, and each block merges an equal share of the elements. A block whose chunk holds keys
// (`sends`) stores its weighted sums `sums` [groups][headDim] and its `stats` (maxima, then totals) straight into the
// `receive` area (clusterReceiveFloats) of the block that merges them; after one cluster barrier each block adds up
// its share from its own shared memory, in mergeSplitsKernel's order, and may exit at once: nothing reads another
// block's memory after the barrier. (Session 26's version read the others' memory after a first barrier and kept it
// alive with a second.) Each thread must send only sums it wrote itself or that a block barrier made visible, and the
// stats after a block barrier. Blocks whose chunk lies past the position take part with nothing to send.
template <typename T>
__device__ void mergeInCluster(const float* sums, const float* stats, float* receive, T* out, int64_t p, int b,
                               const BlockHeads& h, int headDim, int64_t keysPerSplit, int splits, bool sends) {
    const int groups = h.groups, elements = groups * headDim;
    const int used = int(min(int64_t(splits), p / keysPerSplit + 1));
    const int share = int(clusterShare(elements, splits));
    const int rank = int(blockIdx.x);
    float* receivedStats = receive + splits * share;
    clusterWaitStarted();
    if (sends) {
        for (int e = threadIdx.x; e < elements; e += blockDim.x) {
            const int owner = e / share;
            clusterSharedStore(receive + rank * share + (e - owner * share), owner, sums[e]);
        }
        for (int j = threadIdx.x; j < splits * 2 * groups; j += blockDim.x)
            clusterSharedStore(receivedStats + rank * 2 * groups + j % (2 * groups), j / (2 * groups),
                               stats[j % (2 * groups)]);
    }
    clusterSync();
    const int first = rank * share, end = min(elements, first + share);
    T* rows = out + (int64_t(b) * h.heads + h.firstHead) * headDim;
    for (int e = first + int(threadIdx.x); e < end; e += blockDim.x) {
        const int g = e / headDim;
        float top = -INFINITY;
        for (int s = 0; s < used; ++s) top = fmaxf(top, receivedStats[s * 2 * groups + g]);
        float total = 0.0f, acc = 0.0f;
        for (int s = 0; s < used; ++s) {
            const float w = expf(receivedStats[s * 2 * groups + g] - top);
            total += receivedStats[s * 2 * groups + groups + g] * w;
            acc += receive[s * share + (e - first)] * w;
        }
        rows[e] = fromFloat<T>(acc / total);
    }
}

// A block whose chunk lies past the position in a cluster plan: the cluster's barrier counts every block that has not
// exited, and it merges its share (under ROPE after the wait, which the blocks with keys make later in the kernel).
template <typename T, bool ROPE>
__device__ void mergePastPosition(float* receive, T* out, int64_t p, int b, const BlockHeads& h, int headDim,
                                  int64_t keysPerSplit, int splits) {
    if constexpr (ROPE) waitForPredecessor();
    mergeInCluster<T>(nullptr, nullptr, receive, out, p, b, h, headDim, keysPerSplit, splits, false);
}

// The end of both attention kernels once the chunk's outputs are written: in a cluster plan the merge there (the
// chunk's sums in `sums`, shared memory); else a split plan's chunk maxima and sums (stats: [groups] maxima, then
// [groups] sums), then, with counters, the merge by the last block (mergeIfLast).
template <typename T>
__device__ __forceinline__ void finishChunk(const float* sums, const float* stats, float* receive, float* partialMax,
                                            float* partialSum, const float* partialOut, int* counters, T* out,
                                            int64_t p, int b, const BlockHeads& h, int split, int headDim,
                                            int64_t keysPerSplit, int splits, bool clusterMerge) {
    if (clusterMerge) {
        mergeInCluster<T>(sums, stats, receive, out, p, b, h, headDim, keysPerSplit, splits, true);
        return;
    }
    const int groups = h.groups;
    if (splits > 1 && int(threadIdx.x) < groups) {
        const int64_t row = int64_t(b) * h.heads + h.firstHead + threadIdx.x;
        partialMax[row * splits + split] = stats[threadIdx.x];
        partialSum[row * splits + split] = stats[groups + threadIdx.x];
    }
    if (counters)
        mergeIfLast<T>(partialMax, partialSum, partialOut, counters, out, p, b, h, headDim,
                       keysPerSplit, splits);
}

// One block per (query head, sequence): the chunks up to the position, rescaled to their common maximum.
template <typename T>
__global__ void mergeSplitsKernel(const float* __restrict__ partialMax, const float* __restrict__ partialSum,
                                  const float* __restrict__ partialOut, const int64_t* __restrict__ position,
                                  T* __restrict__ out, int heads, int headDim, int64_t capacity, int64_t keysPerSplit,
                                  int splits) {
    waitForPredecessor();
    const int64_t row = int64_t(blockIdx.y) * heads + blockIdx.x;
    const int used = int(min(int64_t(splits), clampedPosition(position, capacity) / keysPerSplit + 1));
    const float* maxima = partialMax + row * splits;
    float top = -INFINITY;
    for (int s = 0; s < used; ++s) top = fmaxf(top, maxima[s]);
    float total = 0.0f;
    for (int s = 0; s < used; ++s) total += partialSum[row * splits + s] * expf(maxima[s] - top);
    for (int i = threadIdx.x; i < headDim; i += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < used; ++s) acc += partialOut[(row * splits + s) * headDim + i] * expf(maxima[s] - top);
        out[row * headDim + i] = fromFloat<T>(acc / total);
    }
}

} // namespace cwb::kernels::attention_merge
