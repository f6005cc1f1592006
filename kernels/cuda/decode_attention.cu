// Single-token attention over the KV cache, flash-decoding style: the cache is cut into chunks, one block per
// (chunk, kv head, sequence) scores its keys for every query head of the kv head's group (or per (chunk, kv head, part,
// sequence) for a part of the group: DecodeAttentionPlan::headParts), takes the softmax of the chunk in fp32 and sums
// the values; the chunks are then merged (running maxima and sums) by a second small kernel, or inside the launch
// (decode_attention_merge.cuh). Three kernels: the scalar one below (2- and 4-byte loads), and for 16-byte rows the
// two-pass one (decode_attention_wide.cuh) and the one-pass one (decode_attention_onepass.cuh). The position comes
// from device memory, so chunks past it exit at once and the launch shape never changes.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "cwb/kernels/decode_ops.h"
#include "cwb/kernels/env_setting.h"
#include "decode_common.cuh"
#include "decode_attention_merge.cuh"
#include "dependent_launch.cuh"

namespace cwb::kernels {

namespace {

using namespace decode;
using namespace attention_merge;

constexpr int kAttentionThreads = 128;
// Keys (rows of K or V) a warp or thread loads before it uses the first: the loads of one block's chunk go out
// together instead of one latency after another (a 32-key chunk at 4 warps is then one round of key loads).
constexpr int kKeysInFlight = 8;
// Value rows a thread of the scalar kernel under ROPE loads for its first element together with the first keys, so
// that a chunk of up to this many keys (32 for Llama-2-7B at 192 keys on 132 SMs) reads its values in the same round
// trip as its keys instead of in kKeysInFlight-row rounds after the softmax.
constexpr int kEarlyValues = 32;
constexpr int kMaxHeadDim = 256;
constexpr size_t kSharedBudget = 40 * 1024;   // below the 48 KB a launch gets without opting in
constexpr int64_t kWideMinKeys = 128;          // Auto's first chunk length for the 16-byte-row kernel
// Key elements (and as many value elements) a head-parts plan may read in all, repeated reads of a chunk counted
// (batch x kv heads x parts x capacity x head dim): 1.5 x 2^24, e.g. Llama-2-70B's 64 query heads of 128 at 3072 keys.
// Past it the chunks' repeated reads cost more than the parts save.
constexpr int64_t kHeadPartsMaxElements = int64_t(3) << 23;
constexpr int64_t kMostHeadsPerBlock = 4;   // query heads a block of a head-parts plan should take at most

// The query heads of one kv head, their chunk's scores and statistics (floats), then, 16-byte aligned, for the fused
// RoPE, the position's new key and value (headDim elements each of the 2-byte activation type: headDim floats), then
// in a cluster plan the area the other blocks' partials arrive in (clusterReceiveFloats).
__host__ __device__ inline int64_t newRowsOffset(int64_t groups, int64_t headDim, int64_t keysPerSplit) {
    return (groups * (headDim + keysPerSplit + 2) + 3) / 4 * 4;
}
__host__ __device__ inline int64_t receiveOffset(int64_t groups, int64_t headDim, int64_t keysPerSplit) {
    return newRowsOffset(groups, headDim, keysPerSplit) + headDim;
}
// clusterSplits: the cluster's size in a cluster plan, else 0.
size_t sharedBytes(int64_t groups, int64_t headDim, int64_t keysPerSplit, int64_t clusterSplits) {
    const int64_t receive = clusterSplits > 0 ? clusterReceiveFloats(groups, headDim, clusterSplits) : 0;
    return size_t(receiveOffset(groups, headDim, keysPerSplit) + receive) * sizeof(float);
}
constexpr size_t kSharedLimit = 48 * 1024;     // what a launch gets without opting in

// The fused RoPE's inputs (ropeDecodeAttention): the raw q, k, v rows (strided as ropeKvWrite's), the cos / signed-sin
// table and the caches to write the position's key and value into.
template <typename T>
struct RopeInputs {
    const T* q;
    const T* k;
    const T* v;
    int64_t qStride, kStride, vStride;
    const float* table;
    int64_t tablePositions;
    bool adjacentPairs;
    T* keyCache;
    T* valueCache;
};


// Starts bringing `elements` elements from p into L2, the block's threads taking 128-byte lines in turn.
template <typename T>
__device__ __forceinline__ void prefetchToL2(const T* p, int64_t elements) {
    const char* bytes = reinterpret_cast<const char*>(p);
    const int64_t lines = (elements * int64_t(sizeof(T)) + 127) / 128;
    for (int64_t l = threadIdx.x; l < lines; l += blockDim.x)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(bytes + l * 128));
}

// Softmax of a chunk's scores [groups][keysPerSplit] in place (exp(score - max)), one warp per query head; the maxima
// to stats[0, groups) and the sums to stats[groups, 2 groups).
__device__ __forceinline__ void chunkSoftmax(float* scores, float* stats, int groups, int count, int64_t keysPerSplit) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int g = warp; g < groups; g += warps) {
        float* row = scores + g * keysPerSplit;
        float top = -INFINITY;
        for (int t = lane; t < count; t += 32) top = fmaxf(top, row[t]);
        top = warpMax(top);
        float total = 0.0f;
        for (int t = lane; t < count; t += 32) {
            const float e = expf(row[t] - top);
            row[t] = e;
            total += e;
        }
        total = warpSum(total);
        if (lane == 0) {
            stats[g] = top;
            stats[groups + g] = total;
        }
    }
}

// Adds up 8 values per lane (the partial dots of 8 rows) over aligned groups of `width` lanes, a power of two from 8
// to 32, by a transposing reduction: at each of three halvings a lane keeps half of its values and adds its partner's
// other half, so 8 rows take 4 + 2 + 1 shuffles (one more per further halving of width) in one chain, where a sum per
// row takes log2(width) shuffles each, 8 chains one after another. `at` is the lane's index in its group; it ends with
// the sum of row transposedRow(at, width), and the lanes where transposedWriter(at, width) hold each row once.
constexpr int kTransposedRows = 8;
__device__ __forceinline__ float transposedSum(float (&v)[kTransposedRows], int at, int width) {
#pragma unroll
    for (int kept = kTransposedRows / 2, o = width / 2; kept >= 1; kept /= 2, o /= 2) {
        const bool upper = (at & o) != 0;   // keeps the upper half of its values
#pragma unroll
        for (int i = 0; i < kept; ++i) {
            const float send = upper ? v[i] : v[i + kept];
            const float keep = upper ? v[i + kept] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
    }
    float sum = v[0];
    for (int o = width / 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    return sum;
}
__device__ __forceinline__ int transposedRow(int at, int width) {
    return ((at & (width / 2)) ? 4 : 0) + ((at & (width / 4)) ? 2 : 0) + ((at & (width / 8)) ? 1 : 0);
}
__device__ __forceinline__ bool transposedWriter(int at, int width) { return (at & (width / 8 - 1)) == 0; }

// The block's query heads, scaled, into qs [groups][headDim] (fp32). ROPE: q is rotated here from rope.q, and the blocks
// whose chunk holds the position rotate that position's key into newKey / newValue in shared memory, the first part
// also into the caches (no other chunk's block reads that slot; the other parts of the chunk load it from the cache
// and replace it with their own copy); returns the position's index in the chunk there, else -1. Without ROPE, q is already rotated and the caches already written.
template <typename T, bool ROPE>
__device__ int prepareQueries(const T* q, const RopeInputs<T>& rope, const int64_t* position, int64_t p, int64_t start,
                              int count, int b, const BlockHeads& h, int kvHeads, int headDim, int64_t capacity,
                              float scale, float* qs, T* newKey, T* newValue) {
    const int groups = h.groups, firstHead = h.firstHead, kvHead = h.kvHead, heads = h.heads;
    const bool firstPart = firstHead == kvHead * (heads / kvHeads);   // of the blocks of this kv head's query heads
    int local = -1;
    if constexpr (ROPE) {
        const int64_t raw = *position;
        const bool valid = raw >= 0 && raw < capacity && raw < rope.tablePositions;
        const float* cos = rope.table + min(p, rope.tablePositions - 1) * 2 * headDim;
        for (int e = threadIdx.x; e < groups * headDim; e += blockDim.x) {
            const T* head = rope.q + int64_t(b) * rope.qStride + int64_t(firstHead + e / headDim) * headDim;
            qs[e] = toFloat(rotatedElement(head, e % headDim, headDim, rope.adjacentPairs, cos)) * scale;
        }
        if (valid && p - start < count) {   // this chunk holds the position (blocks past it have returned)
            local = int(p - start);
            const T* keyIn = rope.k + int64_t(b) * rope.kStride + int64_t(kvHead) * headDim;
            const T* valueIn = rope.v + int64_t(b) * rope.vStride + int64_t(kvHead) * headDim;
            const int64_t slot = ((int64_t(b) * kvHeads + kvHead) * capacity + p) * headDim;
            for (int i = threadIdx.x; i < headDim; i += blockDim.x) {
                newKey[i] = rotatedElement(keyIn, i, headDim, rope.adjacentPairs, cos);
                newValue[i] = valueIn[i];
                if (firstPart) {   // one writer per slot; every part reads the new rows from its shared memory
                    rope.keyCache[slot + i] = newKey[i];
                    rope.valueCache[slot + i] = newValue[i];
                }
            }
        }
    } else {
        const T* qRows = q + (int64_t(b) * heads + firstHead) * headDim;
        for (int e = threadIdx.x; e < groups * headDim; e += blockDim.x) qs[e] = toFloat(qRows[e]) * scale;
    }
    return local;
}

// ROPE (ropeDecodeAttention): q is rotated here from rope.q, and the blocks whose chunk holds the position rotate
// that position's key and read it and the value from shared memory (prepareQueries). Without ROPE, q is already
// rotated and the caches already written. counters (split plans with mergeInKernel, else nullptr): the last block of
// each kv head and part merges (mergeIfLast). PARTS: the plan has head parts (blockHeads).
template <typename T, bool ROPE, bool PARTS>
__global__ void __launch_bounds__(kAttentionThreads)
    decodeAttentionKernel(const T* q, const T* keys, const T* values, const int64_t* __restrict__ position,
                          T* __restrict__ out, float* __restrict__ partialMax, float* __restrict__ partialSum,
                          float* __restrict__ partialOut, int* counters, int heads, int kvHeads, int headParts,
                          int headDim, int64_t capacity, int64_t keysPerSplit, int splits, float scale,
                          RopeInputs<T> rope, bool clusterMerge) {
    // Without ROPE the kernel before this one wrote the position's key: wait first. With it, that kernel only made
    // q, k and v; the position and every earlier slot of the caches are older, so the cache reads start before the
    // wait and overlap that kernel's end (programmatic dependent launch).
    if (clusterMerge) clusterArrive();   // the first half of the barrier mergeInCluster waits at
    if constexpr (!ROPE) waitForPredecessor();
    extern __shared__ float shared[];
    const BlockHeads h = blockHeads<PARTS>(heads, kvHeads, headParts);
    const int groups = h.groups, kvHead = h.kvHead, firstHead = h.firstHead;
    float* qs = shared;                                  // [groups][headDim], scaled
    float* scores = qs + groups * headDim;               // [groups][keysPerSplit]: scores, then exp(score - max)
    float* stats = scores + groups * keysPerSplit;       // [groups] maxima, then [groups] sums
    T* newKey = reinterpret_cast<T*>(shared + newRowsOffset(groups, headDim, keysPerSplit));   // ROPE, then the value
    T* newValue = newKey + headDim;
    float* receive = shared + receiveOffset(groups, headDim, keysPerSplit);   // cluster plans
    const int split = blockIdx.x, b = blockIdx.z;
    const int64_t p = clampedPosition(position, capacity);
    const int64_t start = int64_t(split) * keysPerSplit;
    if (start > p) {   // the merge does not read chunks past the position (an exit counts as the PDL trigger)
        if (clusterMerge)
            mergePastPosition<T, ROPE>(receive, out, p, b, h, headDim, keysPerSplit, splits);
        return;
    }
    const int count = int(min(keysPerSplit, p + 1 - start));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;

    const int64_t cacheHead = (int64_t(b) * kvHeads + kvHead) * capacity;
    const T* keyRows = keys + (cacheHead + start) * headDim;
    const T* valueRows = values + (cacheHead + start) * headDim;
    prefetchToL2(valueRows, int64_t(count) * headDim);   // read only after the softmax

    // The early value rows (kEarlyValues): under ROPE before the wait, as the keys; the position's own slot is not
    // written yet, so its value is taken from shared memory where it is used. Without ROPE (the wait already done)
    // they measured slower (8.06 -> 8.54 us at 192 keys).
    const int earlyElement = ROPE ? int(threadIdx.x) % headDim : -1;
    T earlyValues[kEarlyValues];
#pragma unroll
    for (int u = 0; u < kEarlyValues; ++u)
        earlyValues[u] = ROPE && int(threadIdx.x) < groups * headDim && u < count
                             ? valueRows[int64_t(u) * headDim + earlyElement]
                             : fromFloat<T>(0.0f);
    // Scores: a warp per key, kKeysInFlight keys at a time whose loads are all issued before any is used; each lane
    // holds up to 8 of a key's elements (pairs 2 * lane + 64 j, one 4-byte load each: the head dimension is even).
    // The first batch is loaded before the queries are set up.
    const int firstKey = warp * kKeysInFlight;
    uint32_t k[kKeysInFlight][4];
    auto loadKeys = [&](int t0) {
#pragma unroll
        for (int u = 0; u < kKeysInFlight; ++u)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int i = 2 * lane + 64 * j;
                k[u][j] = t0 + u < count && i < headDim
                              ? __ldg(reinterpret_cast<const unsigned int*>(keyRows + int64_t(t0 + u) * headDim + i))
                              : 0u;
            }
    };
    loadKeys(firstKey);
    if constexpr (ROPE) waitForPredecessor();

    const int local = prepareQueries<T, ROPE>(q, rope, position, p, start, count, b, h, kvHeads, headDim, capacity,
                                              scale, qs, newKey, newValue);
    __syncthreads();

    for (int t0 = firstKey; t0 < count; t0 += warps * kKeysInFlight) {
        if (t0 != firstKey) loadKeys(t0);
        if (ROPE && local >= t0 && local < t0 + kKeysInFlight)   // the new key, from shared memory
#pragma unroll
            for (int u = 0; u < kKeysInFlight; ++u)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int i = 2 * lane + 64 * j;
                    if (t0 + u == local && i < headDim) k[u][j] = *reinterpret_cast<const unsigned int*>(newKey + i);
                }
        // The lane's elements of each query head in registers; the 8 keys' dots added up across the warp at once
        // (transposedSum; keys past the chunk's end are zeros and not stored).
        for (int g = 0; g < groups; ++g) {
            const float* qg = qs + g * headDim;
            float qv[8];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int i = 2 * lane + 64 * j;
                qv[2 * j] = i < headDim ? qg[i] : 0.0f;
                qv[2 * j + 1] = i < headDim ? qg[i + 1] : 0.0f;
            }
            float dot[kKeysInFlight];
#pragma unroll
            for (int u = 0; u < kKeysInFlight; ++u) {
                dot[u] = 0.0f;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const T* pair = reinterpret_cast<const T*>(&k[u][j]);
                    dot[u] += qv[2 * j] * toFloat(pair[0]) + qv[2 * j + 1] * toFloat(pair[1]);
                }
            }
            const float sum = transposedSum(dot, lane, 32);
            const int t = t0 + transposedRow(lane, 32);
            if (transposedWriter(lane, 32) && t < count) scores[g * keysPerSplit + t] = sum;
        }
    }
    __syncthreads();

    chunkSoftmax(scores, stats, groups, count, keysPerSplit);
    __syncthreads();

    // Weighted values: a thread per (query head, element); consecutive threads read consecutive elements of a row,
    // kKeysInFlight rows' loads issued before they are summed.
    for (int e = threadIdx.x; e < groups * headDim; e += blockDim.x) {
        const int g = e / headDim, i = e % headDim;
        const float* weights = scores + g * keysPerSplit;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        int t = 0;
        if (ROPE && i == earlyElement) {   // rows 0 .. kEarlyValues - 1 are in registers already
#pragma unroll
            for (int u = 0; u < kEarlyValues; ++u)
                if (u < count)
                    acc[u % 4] += weights[u] * toFloat(u == local ? newValue[i] : earlyValues[u]);
            t = min(count, kEarlyValues);
        }
        for (; t + kKeysInFlight <= count; t += kKeysInFlight) {
            T v[kKeysInFlight];
#pragma unroll
            for (int u = 0; u < kKeysInFlight; ++u) v[u] = valueRows[int64_t(t + u) * headDim + i];
            if (ROPE && local >= t && local < t + kKeysInFlight) v[local - t] = newValue[i];
#pragma unroll
            for (int u = 0; u < kKeysInFlight; ++u) acc[u % 4] += weights[t + u] * toFloat(v[u]);
        }
        for (; t < count; ++t)
            acc[0] += weights[t] * toFloat(ROPE && t == local ? newValue[i] : valueRows[int64_t(t) * headDim + i]);
        const float sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        const int64_t row = int64_t(b) * heads + firstHead + g;
        if (splits == 1)
            out[row * headDim + i] = fromFloat<T>(sum / stats[groups + g]);
        else if (clusterMerge)
            qs[e] = sum;   // the queries were last read before the softmax's barriers
        else
            partialOut[(row * splits + split) * headDim + i] = sum;
    }
    finishChunk<T>(qs, stats, receive, partialMax, partialSum, partialOut, counters, out, p, b, h, split, headDim,
                   keysPerSplit, splits, clusterMerge);
}

#include "decode_attention_wide.cuh"
#include "decode_attention_onepass.cuh"

void require(bool ok, const std::string& what) {
    if (!ok) throw KernelError("decodeAttention: " + what);
}

} // namespace

int deviceMultiprocessors() {
    static std::atomic<int> cached[64];   // zero (static storage): not asked yet
    int device = 0;
    CWB_CUDA_CHECK(cudaGetDevice(&device));
    if (device >= 0 && device < 64 && cached[device].load() > 0) return cached[device].load();
    int count = 0;
    CWB_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    if (device >= 0 && device < 64) cached[device].store(count);
    return count;
}

namespace {
// Keys per chunk of a plan whose kv heads' query heads are divided among `parts` blocks; the cache is one chunk where
// this is at least its capacity. At most two blocks per multiprocessor in all: the 16-byte-row kernel's 256 threads
// of 128 registers fit two per multiprocessor, so one more chunk per head than that (rounding up: 9 x 32 = 288 blocks
// on 132 SMs at 4096 keys) ran as a second wave of 24 blocks. Chunks are whole 32-key steps of at most 1024 keys and
// at most what the shared-memory budget holds for the block's query heads.
int64_t chunkKeys(const DecodeAttentionShape& s, int multiprocessors, int64_t parts) {
    const int64_t groups = std::max<int64_t>(1, s.heads / std::max<int64_t>(1, s.kvHeads)) / parts;
    const int64_t budgetKeys = int64_t(kSharedBudget / sizeof(float)) / groups - s.headDim - 2;
    const int64_t maxKeys = std::max<int64_t>(32, std::min<int64_t>(1024, budgetKeys) / 32 * 32);
    const int64_t blocks = std::max<int64_t>(1, s.batch * s.kvHeads * parts);
    const int64_t wanted = std::max<int64_t>(1, 2 * int64_t(multiprocessors) / blocks);
    const int64_t keys = (s.capacity + wanted - 1) / wanted;
    return std::min(maxKeys, std::max<int64_t>(32, (keys + 31) / 32 * 32));
}
int64_t chunkCount(const DecodeAttentionShape& s, int64_t keys) {
    return keys >= s.capacity ? 1 : (s.capacity + keys - 1) / keys;
}
} // namespace

// Session 31, every division timed on the H200 (bench_decode_ops' GQA table, 132 SMs, 29 cases of 32/8, 64/8 and 28/4
// heads at batch 1 to 8 and 192 to 16384 keys; figures of call 5). This rule was fastest in 28 of them and 2% slower
// in one (64/8 at batch 8 and 1024 keys, 2 parts against 4); the rules before it (one query head per block up to 2^24
// elements, else a quarter as many units as multiprocessors) were slower in 12, by 5 to 47% (64/8 at batch 4 and 1024
// keys: 37.2 us in one part against 25.3 in four).
// - Reads: the largest divisor whose reads stay within kHeadPartsMaxElements (64/8 at 4096 keys: 24.5 us in 4 parts
//   against 27.2 in 8; at 8192 keys 37.7 in 2 against 40.1 in 4).
// - Blocks of 8 query heads lost to 2 parts wherever those fit one wave, although 2 parts read the cache twice (the
//   two-pass kernel's value pass takes 4 heads at a time): 64/8 at 16384 keys 61.4 us in 2 parts against 70.1 in one,
//   at batch 8 and 2048 keys 60.4 against 66.0. So where the reads rule leaves more than 4 heads a block, the parts
//   that bring it to 4 are taken. Their reads are bounded by twice the limit, a guard for shapes not measured: at 132
//   multiprocessors and heads of 128 the one-wave check below binds first (it caps reads at 1.375 times the limit).
// - One wave: no parts whose chunks (at most 1024 keys) make more than two blocks per multiprocessor. 64/8 at 2112
//   keys and batch 6 took 2 parts without this check, 3 chunks of 1024 (288 blocks): 74.7 us against 64.2 in one part
//   (5 chunks of 448); at batch 8, 8 blocks of 70B decoded INT4 at 2.380 ms per token in 2 parts (384 blocks) against
//   2.198 in one.
int64_t planHeadParts(const DecodeAttentionShape& s, int multiprocessors) {
    if (!decodeAttentionHeadParts()) return 1;
    const int64_t groups = std::max<int64_t>(1, s.heads / std::max<int64_t>(1, s.kvHeads));
    const int64_t units = std::max<int64_t>(1, s.batch * s.kvHeads);
    const int64_t elementsPerUnit = std::max<int64_t>(1, s.capacity) * std::max<int64_t>(1, s.headDim);
    auto fits = [&](int64_t d, int64_t readLimit) {
        return groups % d == 0 && units * d <= multiprocessors && units * d * elementsPerUnit <= readLimit &&
               units * d * chunkCount(s, chunkKeys(s, multiprocessors, d)) <= 2 * int64_t(multiprocessors);
    };
    int64_t parts = 1;
    for (int64_t d = 2; d <= groups; ++d)
        if (fits(d, kHeadPartsMaxElements)) parts = d;
    for (int64_t d = parts + 1; groups / parts > kMostHeadsPerBlock && d <= groups; ++d)
        if (groups / d <= kMostHeadsPerBlock && fits(d, 2 * kHeadPartsMaxElements)) return d;
    return parts;
}

DecodeAttentionPlan planDecodeAttention(const DecodeAttentionShape& s, int multiprocessors, int64_t headParts) {
    const int64_t allGroups = std::max<int64_t>(1, s.heads / std::max<int64_t>(1, s.kvHeads));
    const int64_t parts = headParts > 0 ? headParts : planHeadParts(s, multiprocessors);
    if (allGroups % parts != 0)
        throw KernelError("planDecodeAttention: " + std::to_string(parts) + " parts do not divide a group of " +
                          std::to_string(allGroups) + " query heads");
    const int64_t groups = allGroups / parts;
    const int64_t keys = chunkKeys(s, multiprocessors, parts);
    if (keys >= s.capacity) return {1, std::max<int64_t>(1, s.capacity), false, false, parts};
    DecodeAttentionPlan plan{chunkCount(s, keys), keys, decodeAttentionMergeInKernel(), false, parts};
    // Clusters only for chunks the scalar kernel takes: on the H200 they measured faster there (7B, 6 chunks of 32
    // keys: 8.04 against 8.66 us) and slower for 8 chunks of 128 in the 16-byte-row kernel (22.9 against 13.9 us).
    plan.mergeInCluster = plan.splits <= kMaxClusterSplits && keys < kWideMinKeys && decodeAttentionClusterMerge() &&
                          sharedBytes(groups, s.headDim, keys, plan.splits) <= kSharedLimit && deviceRunsClusters();
    return plan;
}

namespace {
std::atomic<bool>& mergeInKernelSlot() {   // off unless CWB_ATTENTION_MERGE_IN_KERNEL=1
    static std::atomic<bool> slot{env::envSwitch("CWB_ATTENTION_MERGE_IN_KERNEL", false)};
    return slot;
}
std::atomic<bool>& clusterMergeSlot() {   // on unless CWB_ATTENTION_CLUSTER_MERGE=0
    static std::atomic<bool> slot{env::envSwitch("CWB_ATTENTION_CLUSTER_MERGE", true)};
    return slot;
}
std::atomic<bool>& headPartsSlot() {   // on unless CWB_ATTENTION_HEAD_PARTS=0
    static std::atomic<bool> slot{env::envSwitch("CWB_ATTENTION_HEAD_PARTS", true)};
    return slot;
}
} // namespace

void setDecodeAttentionHeadParts(bool on) { headPartsSlot().store(on, std::memory_order_relaxed); }
bool decodeAttentionHeadParts() { return headPartsSlot().load(std::memory_order_relaxed); }
void setDecodeAttentionMergeInKernel(bool on) { mergeInKernelSlot().store(on, std::memory_order_relaxed); }
bool decodeAttentionMergeInKernel() { return mergeInKernelSlot().load(std::memory_order_relaxed); }
void setDecodeAttentionClusterMerge(bool on) { clusterMergeSlot().store(on, std::memory_order_relaxed); }
bool decodeAttentionClusterMerge() { return clusterMergeSlot().load(std::memory_order_relaxed); }

bool deviceRunsClusters() { return detail::hopperOrLater(); }

size_t decodeAttentionWorkspaceBytes(const DecodeAttentionShape& s, const DecodeAttentionPlan& plan) {
    if (plan.splits <= 1 || plan.mergeInCluster) return 0;
    const size_t partials = size_t(s.batch * s.heads * plan.splits * (s.headDim + 2)) * sizeof(float);
    return partials + (plan.mergeInKernel ? size_t(s.batch * s.kvHeads * plan.headParts) * sizeof(int) : 0);
}

namespace {

// The 16-byte-row kernels take head dimensions that are a multiple of 8 on 16-byte aligned caches; under Auto, chunks of
// kWideMinKeys or more take the one-pass kernel where a block has at most kOnePassGroups query heads, else the
// two-pass one (Wide); the scalar kernel takes any even head dimension. On the H200 (session 29) the one-pass kernel
// measured 9.6 against 11.2 us at 1024 keys of Llama-2-7B (8 chunks of 128), 24.4 against 25.8 at 4096, 9.5 / 18.3
// against 10.8 / 19.4 for 32/8 heads in four parts at 1024 / 4096 keys; at 32-key chunks it was slower than the scalar
// kernel (7.2 against 6.0 us at 192 keys).
std::atomic<DecodeAttentionKernel>& attentionKernelSlot() {   // CWB_ATTENTION_KERNEL=auto|scalar|wide|onepass
    static std::atomic<DecodeAttentionKernel> slot{static_cast<DecodeAttentionKernel>(
        env::envChoice("CWB_ATTENTION_KERNEL", {"auto", "scalar", "wide", "onepass"}, 0))};   // the enum's order
    return slot;
}
enum class LaunchedKernel { Scalar, Wide, OnePass };
LaunchedKernel launchedKernel(const DecodeAttentionShape& s, const DecodeAttentionPlan& plan, bool alignedCaches) {
    const DecodeAttentionKernel chosen = attentionKernelSlot().load(std::memory_order_relaxed);
    if (s.headDim % 8 != 0 || !alignedCaches) return LaunchedKernel::Scalar;
    const bool onePassFits = s.heads / s.kvHeads / plan.headParts <= kOnePassGroups;
    if (onePassFits && (chosen == DecodeAttentionKernel::OnePass ||
                        (chosen == DecodeAttentionKernel::Auto && plan.keysPerSplit >= kWideMinKeys)))
        return LaunchedKernel::OnePass;
    if (chosen == DecodeAttentionKernel::Wide || chosen == DecodeAttentionKernel::OnePass ||
        (chosen == DecodeAttentionKernel::Auto && plan.keysPerSplit >= kWideMinKeys))
        return LaunchedKernel::Wide;
    return LaunchedKernel::Scalar;
}
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
} // namespace

std::string describeDecodeAttentionPlan(const DecodeAttentionShape& s, const DecodeAttentionPlan& plan) {
    static const char* const kernelNames[] = {"scalar", "two-pass 16-byte-row", "one-pass"};
    if (s.kvHeads < 1 || s.heads % s.kvHeads != 0 || plan.headParts < 1 || (s.heads / s.kvHeads) % plan.headParts != 0)
        throw KernelError("describeDecodeAttentionPlan: " + std::to_string(plan.headParts) + " parts of " +
                          std::to_string(s.heads) + "/" + std::to_string(s.kvHeads) + " heads is no plan");
    std::string text = std::to_string(s.heads) + "/" + std::to_string(s.kvHeads) + " heads of " +
                       std::to_string(s.headDim) + " at capacity " + std::to_string(s.capacity) + ", batch " +
                       std::to_string(s.batch) + ": ";
    text += plan.splits <= 1 ? std::string("one chunk")
                             : std::to_string(plan.splits) + " chunks of " + std::to_string(plan.keysPerSplit) + " keys";
    if (plan.headParts > 1) text += ", query heads in " + std::to_string(plan.headParts) + " parts";
    text += std::string(", ") + kernelNames[static_cast<int>(launchedKernel(s, plan, true))] + " kernel";
    if (plan.splits > 1)
        text += plan.mergeInCluster  ? ", chunks merged in a cluster"
                : plan.mergeInKernel ? ", chunks merged by the last block of each head"
                                     : ", chunks merged by a second launch";
    return text;
}

namespace {

// The shared memory of the kernel a plan launches.
size_t launchShared(const DecodeAttentionShape& s, const DecodeAttentionPlan& plan, LaunchedKernel which) {
    const int64_t groups = s.heads / s.kvHeads / plan.headParts;
    const int64_t clusterSplits = plan.splits > 1 && plan.mergeInCluster ? plan.splits : 0;
    return which == LaunchedKernel::OnePass ? onePassSharedBytes(groups, s.headDim, clusterSplits)
                                            : sharedBytes(groups, s.headDim, plan.keysPerSplit, clusterSplits);
}

// The attention kernel, its threads and its shared memory for a plan.
template <typename T>
struct AttentionLaunch {
    void (*kernel)(const T*, const T*, const T*, const int64_t*, T*, float*, float*, float*, int*, int, int, int, int,
                   int64_t, int64_t, int, float, RopeInputs<T>, bool);
    unsigned threads;
    size_t shared;
};
template <typename T>
AttentionLaunch<T> attentionLaunch(const DecodeAttentionShape& s, const DecodeAttentionPlan& plan, LaunchedKernel which,
                                   bool rope) {
    // PARTS only where the plan has head parts: the one-part kernels keep blockIdx.y as the kv head, with no division
    // before the cache loads (the general form measured 0.5 us slower at 192 keys of Llama-2-7B).
    const bool parts = plan.headParts > 1;
    const size_t shared = launchShared(s, plan, which);
    if (which == LaunchedKernel::OnePass) {
        const auto kernel =
            rope ? (parts ? decodeAttentionOnePassKernel<T, true, true> : decodeAttentionOnePassKernel<T, true, false>)
                 : (parts ? decodeAttentionOnePassKernel<T, false, true> : decodeAttentionOnePassKernel<T, false, false>);
        return {kernel, unsigned(kOnePassThreads), shared};
    }
    const bool wide = which == LaunchedKernel::Wide;
    // Short chunks: four warps, as the scalar kernel (eight would mostly wait at the barriers).
    const unsigned threads = !wide ? kAttentionThreads : plan.keysPerSplit >= kWideMinKeys ? kWideThreads : 128;
    const auto kernel =
        wide ? (rope ? (parts ? decodeAttentionWideKernel<T, true, true> : decodeAttentionWideKernel<T, true, false>)
                     : (parts ? decodeAttentionWideKernel<T, false, true> : decodeAttentionWideKernel<T, false, false>))
             : (rope ? (parts ? decodeAttentionKernel<T, true, true> : decodeAttentionKernel<T, true, false>)
                     : (parts ? decodeAttentionKernel<T, false, true> : decodeAttentionKernel<T, false, false>));
    return {kernel, threads, shared};
}

// Both entry points: the attention kernel (with the RoPE of ropeDecodeAttention when `rope`), then the merge.
void launchAttention(const void* q, const void* keyCache, const void* valueCache, const int64_t* position, void* out,
                     const DecodeAttentionShape& s, float scale, const DecodeAttentionPlan& plan, float* workspace,
                     size_t workspaceBytes, ActType type, Stream stream, const RopeInputs<uint16_t>* rope) {
    require(s.batch > 0 && s.heads > 0 && s.kvHeads > 0 && s.capacity > 0, "empty shape");
    require(s.heads % s.kvHeads == 0, std::to_string(s.heads) + " query heads do not divide into " +
                                          std::to_string(s.kvHeads) + " kv heads");
    require(s.headDim > 0 && s.headDim % 2 == 0 && s.headDim <= kMaxHeadDim,
            "head dimension " + std::to_string(s.headDim) + " is not even or above " + std::to_string(kMaxHeadDim));
    require(q && keyCache && valueCache && position && out, "null pointer");
    require(plan.splits >= 1 && plan.keysPerSplit >= 1 && plan.splits * plan.keysPerSplit >= s.capacity,
            "the plan does not cover the cache");
    require(plan.headParts >= 1 && (s.heads / s.kvHeads) % plan.headParts == 0,
            std::to_string(plan.headParts) + " parts do not divide a group of " + std::to_string(s.heads / s.kvHeads) +
                " query heads");
    const int64_t groups = s.heads / s.kvHeads / plan.headParts;
    const bool cluster = plan.splits > 1 && plan.mergeInCluster;
    const LaunchedKernel which = launchedKernel(s, plan, aligned16(keyCache) && aligned16(valueCache));
    const size_t shared = launchShared(s, plan, which);
    require(shared <= kSharedLimit, "a group of " + std::to_string(groups) + " heads of " + std::to_string(s.headDim) +
                                        " in chunks of " + std::to_string(plan.keysPerSplit) + " keys" +
                                        (cluster ? " merged in a cluster" : "") + " needs " + std::to_string(shared) +
                                        " bytes of shared memory");
    require(!cluster || plan.splits <= kMaxClusterSplits,
            std::to_string(plan.splits) + " splits do not fit one cluster of at most " + std::to_string(kMaxClusterSplits));
    require(!cluster || deviceRunsClusters(), "a cluster merge needs compute capability 9.0 or more");
    const bool split = plan.splits > 1 && !cluster;   // partials in the workspace
    require(!split || (workspace && workspaceBytes >= decodeAttentionWorkspaceBytes(s, plan)), "workspace too small");
    const int64_t rows = s.batch * s.heads * plan.splits;
    float* partialMax = split ? workspace : nullptr;
    float* partialSum = split ? workspace + rows : nullptr;
    float* partialOut = split ? workspace + 2 * rows : nullptr;
    // The merge's counters follow the partial outputs (decodeAttentionWorkspaceBytes).
    const bool mergeHere = split && plan.mergeInKernel;
    int* counters = mergeHere ? reinterpret_cast<int*>(workspace + rows * (s.headDim + 2)) : nullptr;   // per slot
    const cudaStream_t st = detail::toStream(stream);
    dispatch(type, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        const dim3 grid(unsigned(plan.splits), unsigned(s.kvHeads * plan.headParts), unsigned(s.batch));
        RopeInputs<T> r{};
        if (rope)
            r = {reinterpret_cast<const T*>(rope->q), reinterpret_cast<const T*>(rope->k),
                 reinterpret_cast<const T*>(rope->v), rope->qStride, rope->kStride, rope->vStride, rope->table,
                 rope->tablePositions, rope->adjacentPairs, reinterpret_cast<T*>(rope->keyCache),
                 reinterpret_cast<T*>(rope->valueCache)};
        const AttentionLaunch<T> launch = attentionLaunch<T>(s, plan, which, rope != nullptr);
        CWB_CUDA_CHECK(launchDependentInClusters(
            cluster ? unsigned(plan.splits) : 0u, launch.kernel, grid, dim3(launch.threads), launch.shared, st, static_cast<const T*>(q),
            static_cast<const T*>(keyCache), static_cast<const T*>(valueCache), position, static_cast<T*>(out),
            partialMax, partialSum, partialOut, counters, int(s.heads), int(s.kvHeads), int(plan.headParts), int(s.headDim), s.capacity,
            plan.keysPerSplit, int(plan.splits), scale, r, cluster));
        CWB_CUDA_CHECK_LAUNCH("decodeAttention");
        if (split && !mergeHere) {
            const dim3 mergeGrid(unsigned(s.heads), unsigned(s.batch));
            const unsigned threads = unsigned(std::min<int64_t>(128, (s.headDim + 31) / 32 * 32));
            CWB_CUDA_CHECK(launchDependent(mergeSplitsKernel<T>, mergeGrid, dim3(threads), 0, st, partialMax, partialSum,
                                           partialOut, position, static_cast<T*>(out), int(s.heads), int(s.headDim),
                                           s.capacity, plan.keysPerSplit, int(plan.splits)));
            CWB_CUDA_CHECK_LAUNCH("decodeAttention (merge)");
        }
    });
}

} // namespace

DecodeAttentionOccupancy decodeAttentionOccupancy(const DecodeAttentionShape& s, const DecodeAttentionPlan& plan,
                                                  ActType type, bool rope) {
    require(s.batch > 0 && s.heads > 0 && s.kvHeads > 0 && s.heads % s.kvHeads == 0 && plan.splits >= 1, "bad shape or plan");
    DecodeAttentionOccupancy o;
    o.blocks = plan.splits * s.kvHeads * plan.headParts * s.batch;
    dispatch(type, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        const AttentionLaunch<T> launch = attentionLaunch<T>(s, plan, launchedKernel(s, plan, true), rope);
        CWB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o.blocksPerMultiprocessor, launch.kernel,
                                                                     int(launch.threads), launch.shared));
        if (plan.splits > 1 && plan.mergeInCluster && deviceRunsClusters()) {
            cudaLaunchAttribute attribute = {};
            attribute.id = cudaLaunchAttributeClusterDimension;
            attribute.val.clusterDim.x = unsigned(plan.splits);
            attribute.val.clusterDim.y = attribute.val.clusterDim.z = 1;
            cudaLaunchConfig_t config = {};
            config.gridDim = dim3(unsigned(plan.splits), unsigned(s.kvHeads * plan.headParts), unsigned(s.batch));
            config.blockDim = dim3(launch.threads);
            config.dynamicSmemBytes = launch.shared;
            config.attrs = &attribute;
            config.numAttrs = 1;
            CWB_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&o.activeClusters, launch.kernel, &config));
        }
    });
    return o;
}

void setDecodeAttentionKernel(DecodeAttentionKernel kernel) {
    attentionKernelSlot().store(kernel, std::memory_order_relaxed);
}
DecodeAttentionKernel currentDecodeAttentionKernel() { return attentionKernelSlot().load(std::memory_order_relaxed); }

void decodeAttention(const void* q, const void* keyCache, const void* valueCache, const int64_t* position, void* out,
                     const DecodeAttentionShape& s, float scale, const DecodeAttentionPlan& plan, float* workspace,
                     size_t workspaceBytes, ActType type, Stream stream) {
    require(q, "null pointer");
    launchAttention(q, keyCache, valueCache, position, out, s, scale, plan, workspace, workspaceBytes, type, stream, nullptr);
}

void ropeDecodeAttention(const void* q, int64_t qStride, const void* k, int64_t kStride, const void* v, int64_t vStride,
                         const float* ropeTable, int64_t tablePositions, RopeLayout layout, const int64_t* position,
                         void* keyCache, void* valueCache, void* out, const DecodeAttentionShape& s, float scale,
                         const DecodeAttentionPlan& plan, float* workspace, size_t workspaceBytes, ActType type,
                         Stream stream) {
    require(q && k && v && ropeTable && tablePositions > 0, "null pointer or empty RoPE table");
    const RopeInputs<uint16_t> rope{static_cast<const uint16_t*>(q), static_cast<const uint16_t*>(k),
                                    static_cast<const uint16_t*>(v), qStride, kStride, vStride, ropeTable,
                                    tablePositions, layout == RopeLayout::AdjacentPairs,
                                    static_cast<uint16_t*>(keyCache), static_cast<uint16_t*>(valueCache)};
    // q is not read as rotated queries here; any non-null pointer passes launchAttention's checks.
    launchAttention(q, keyCache, valueCache, position, out, s, scale, plan, workspace, workspaceBytes, type, stream, &rope);
}

} // namespace cwb::kernels
