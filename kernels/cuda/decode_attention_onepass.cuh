#pragma once
// Internal to decode_attention.cu, included after its helpers (prepareQueries, roundScore, blockHeads):
// the one-pass attention kernel (DecodeAttentionKernel::OnePass). The 16-byte-row kernel reads a chunk's keys, takes
// the softmax of its scores in shared memory, then reads the values in a second pass; here each warp reads a round's
// key and value rows together and keeps a running maximum, sum and weighted sum per query head (online softmax), so
// the values are never waited for after the keys and no score buffer or softmax barrier is needed. The warps' running
// sums are merged through shared memory at the end. Head dimensions a multiple of 8 (rows of at least 8 lanes, some
// idle below 64), at most kOnePassGroups query heads per block (one: two made the kernel spill at 128 registers, the
// most that leaves two blocks per multiprocessor).

constexpr int kOnePassThreads = 256;
constexpr int kOnePassGroups = 1;

// Floats of the one-pass kernel's shared memory: the queries [groups][headDim], each warp's running sums
// [warps][groups][headDim] and its maxima and totals [warps][2 groups], the chunk's maxima and totals [2 groups], then
// 16-byte aligned the position's new key and value (headDim floats), then in a cluster plan the receive area.
__host__ __device__ inline int64_t onePassNewRowsOffset(int64_t groups, int64_t headDim, int64_t warps) {
    return (groups * headDim + warps * groups * (headDim + 2) + 2 * groups + 3) / 4 * 4;
}
inline size_t onePassSharedBytes(int64_t groups, int64_t headDim, int64_t clusterSplits) {
    const int64_t receive = clusterSplits > 0 ? clusterReceiveFloats(groups, headDim, clusterSplits) : 0;
    return size_t(onePassNewRowsOffset(groups, headDim, kOnePassThreads / 32) + headDim + receive) * sizeof(float);
}

// exp(from - to), 0 for a running maximum that has seen no key yet (-inf).
__device__ __forceinline__ float rescale(float from, float to) { return from == -INFINITY ? 0.0f : expf(from - to); }

template <typename T, bool ROPE, bool PARTS>
__global__ void __launch_bounds__(kOnePassThreads, 2)   // two blocks per SM, as the planner assumes
    decodeAttentionOnePassKernel(const T* q, const T* keys, const T* values, const int64_t* __restrict__ position,
                                 T* __restrict__ out, float* __restrict__ partialMax, float* __restrict__ partialSum,
                                 float* __restrict__ partialOut, int* counters, int heads, int kvHeads, int headParts,
                                 int headDim, int64_t capacity, int64_t keysPerSplit, int splits, float scale,
                                 RopeInputs<T> rope, bool clusterMerge) {
    if (clusterMerge) clusterArrive();   // as in decodeAttentionKernel
    if constexpr (!ROPE) waitForPredecessor();
    extern __shared__ __align__(16) float onePassShared[];
    const BlockHeads h = blockHeads<PARTS>(heads, kvHeads, headParts);
    const int groups = h.groups, kvHead = h.kvHead, firstHead = h.firstHead;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    float* qs = onePassShared;                               // [groups][headDim]; then the chunk's weighted sums
    float* warpSums = qs + groups * headDim;                 // [warps][groups][headDim]
    float* warpStats = warpSums + warps * groups * headDim;  // [warps][groups] maxima, then [warps][groups] totals
    float* stats = warpStats + 2 * warps * groups;           // [groups] maxima, then [groups] totals
    T* newKey = reinterpret_cast<T*>(onePassShared + onePassNewRowsOffset(groups, headDim, warps));
    T* newValue = newKey + headDim;
    float* receive = onePassShared + onePassNewRowsOffset(groups, headDim, warps) + headDim;
    const int split = blockIdx.x, b = blockIdx.z;
    const int64_t p = clampedPosition(position, capacity);
    const int64_t start = int64_t(split) * keysPerSplit;
    if (start > p) {
        if (clusterMerge) mergePastPosition<T, ROPE>(receive, out, p, b, h, headDim, keysPerSplit, splits);
        return;
    }
    const int count = int(min(keysPerSplit, p + 1 - start));
    const int slices = headDim / 8;
    int width = 8;
    while (width < slices) width *= 2;
    const int perWarp = 32 / width, sub = lane / width, slice = lane % width;
    const bool active = slice < slices;
    const int rowsPerRound = warps * perWarp * kWideRowsInFlight;

    const int64_t cacheHead = (int64_t(b) * kvHeads + kvHead) * capacity;
    const T* keyRows = keys + (cacheHead + start) * headDim;
    const T* valueRows = values + (cacheHead + start) * headDim;
    auto rowOf = [&](int t0, int u) { return t0 + (u * warps + warp) * perWarp + sub; };
    uint4 k[kWideRowsInFlight], v[kWideRowsInFlight];
    auto loadRound = [&](int t0) {
#pragma unroll
        for (int u = 0; u < kWideRowsInFlight; ++u) {
            const int t = rowOf(t0, u);
            const bool in = active && t < count;
            k[u] = in ? __ldg(reinterpret_cast<const uint4*>(keyRows + int64_t(t) * headDim + slice * 8))
                      : make_uint4(0u, 0u, 0u, 0u);
            v[u] = in ? __ldg(reinterpret_cast<const uint4*>(valueRows + int64_t(t) * headDim + slice * 8))
                      : make_uint4(0u, 0u, 0u, 0u);
        }
    };
    loadRound(0);   // before the wait under ROPE: the slots read here are older (the position's is replaced below)
    if constexpr (ROPE) waitForPredecessor();
    const int local = prepareQueries<T, ROPE>(q, rope, position, p, start, count, b, h, kvHeads, headDim, capacity,
                                              scale, qs, newKey, newValue);
    __syncthreads();

    float top[kOnePassGroups], total[kOnePassGroups], acc[kOnePassGroups][8];
#pragma unroll
    for (int g = 0; g < kOnePassGroups; ++g) {
        top[g] = -INFINITY;
        total[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
    }
    // The lane of this row's group of lanes that holds row u's sum after transposedSum (transposedRow inverted).
    auto holder = [&](int u) { return sub * width + ((u & 4) ? width / 2 : 0) + ((u & 2) ? width / 4 : 0) + ((u & 1) ? width / 8 : 0); };
    for (int t0 = 0; t0 < count; t0 += rowsPerRound) {
        if (t0 != 0) loadRound(t0);
        if (ROPE && local >= t0 && local < t0 + rowsPerRound)
#pragma unroll
            for (int u = 0; u < kWideRowsInFlight; ++u)
                if (active && rowOf(t0, u) == local) {
                    k[u] = *reinterpret_cast<const uint4*>(newKey + slice * 8);
                    v[u] = *reinterpret_cast<const uint4*>(newValue + slice * 8);
                }
#pragma unroll
        for (int g = 0; g < kOnePassGroups; ++g) {
            if (g >= groups) break;
            const float held = roundScore<T>(qs + g * headDim + slice * 8, active, k, slice, width);
            float score[kWideRowsInFlight], roundTop = -INFINITY;
#pragma unroll
            for (int u = 0; u < kWideRowsInFlight; ++u) {
                score[u] = __shfl_sync(0xffffffffu, held, holder(u));
                if (rowOf(t0, u) >= count) score[u] = -INFINITY;
                roundTop = fmaxf(roundTop, score[u]);
            }
            const float newTop = fmaxf(top[g], roundTop);
            if (newTop == -INFINITY) continue;   // no key of this round for these lanes (and none before)
            const float keep = rescale(top[g], newTop);
            total[g] *= keep;
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[g][i] *= keep;
#pragma unroll
            for (int u = 0; u < kWideRowsInFlight; ++u) {
                const float w = rescale(score[u], newTop);
                total[g] += w;
                float e[8];
                unpack8<T>(v[u], e);
#pragma unroll
                for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(w, e[i], acc[g][i]);
            }
            top[g] = newTop;
        }
    }
    // The warp's row groups (sub) merged by shuffles, then each warp's sums to shared memory.
#pragma unroll
    for (int g = 0; g < kOnePassGroups; ++g) {
        if (g >= groups) break;
        for (int o = width; o < 32; o *= 2) {
            const float otherTop = __shfl_xor_sync(0xffffffffu, top[g], o);
            const float otherTotal = __shfl_xor_sync(0xffffffffu, total[g], o);
            const float newTop = fmaxf(top[g], otherTop);
            const float mine = rescale(top[g], newTop), theirs = rescale(otherTop, newTop);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[g][i] = acc[g][i] * mine + __shfl_xor_sync(0xffffffffu, acc[g][i], o) * theirs;
            total[g] = total[g] * mine + otherTotal * theirs;
            top[g] = newTop;
        }
        if (sub == 0 && active)
#pragma unroll
            for (int i = 0; i < 8; ++i) warpSums[(warp * groups + g) * headDim + slice * 8 + i] = acc[g][i];
        if (lane == 0) {
            warpStats[warp * groups + g] = top[g];
            warpStats[(warps + warp) * groups + g] = total[g];
        }
    }
    __syncthreads();
    // The chunk: maxima and totals per query head, then each element's sum over the warps (thread e, as the merges
    // expect: a thread sends only sums it wrote).
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
        float chunkTop = -INFINITY, chunkTotal = 0.0f;
        for (int w = 0; w < warps; ++w) chunkTop = fmaxf(chunkTop, warpStats[w * groups + g]);
        for (int w = 0; w < warps; ++w)
            chunkTotal += warpStats[(warps + w) * groups + g] * rescale(warpStats[w * groups + g], chunkTop);
        stats[g] = chunkTop;
        stats[groups + g] = chunkTotal;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < groups * headDim; e += blockDim.x) {
        const int g = e / headDim, i = e % headDim;
        float sum = 0.0f;
        for (int w = 0; w < warps; ++w)
            sum += warpSums[(w * groups + g) * headDim + i] * rescale(warpStats[w * groups + g], stats[g]);
        const int64_t row = int64_t(b) * heads + firstHead + g;
        if (splits == 1)
            out[row * headDim + i] = fromFloat<T>(sum / stats[groups + g]);
        else if (clusterMerge)
            qs[e] = sum;   // the queries were last read before the barriers above
        else
            partialOut[(row * splits + split) * headDim + i] = sum;
    }
    finishChunk<T>(qs, stats, receive, partialMax, partialSum, partialOut, counters, out, p, b, h, split, headDim,
                   keysPerSplit, splits, clusterMerge);
}
