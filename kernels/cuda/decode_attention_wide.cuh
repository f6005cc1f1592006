#pragma once
// Internal to decode_attention.cu, included after its helpers (prepareQueries, transposedSum, blockHeads): the
// 16-byte-row kernels' shared pieces (unpack8, roundScore) and the two-pass kernel (DecodeAttentionKernel::Wide).

// The same attention for head dimensions that are a multiple of 8, with 16-byte loads: `width` lanes (the power of
// two at or above headDim / 8) hold one key or value row, 8 elements each, so a warp holds 32 / width rows per load
// and each lane keeps kWideRowsInFlight loads in flight. Scores: the lanes of a row add up their products by
// shuffles (transposedSum from 8 lanes per row up). Weighted values: each lane sums its 8 elements over its rows for up to four query heads at a time, the
// warp's rows are added by shuffles and the warps' sums by shared-memory atomics into qs (free once scored).
// The scalar kernel above read values 2 bytes at a time, one row after another: 72 us for 4096 keys of Llama-2-7B.
constexpr int kWideThreads = 256;
constexpr int kWideRowsInFlight = 8;

template <typename T>
__device__ __forceinline__ void unpack8(const uint4& v, float (&e)[8]) {
    const T* h = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = toFloat(h[i]);
}

// One query head's scores of a round's 8 rows of 16 bytes (rows of 8+ lanes): each lane's partial dots with its 8
// elements of q (qg, this lane's slice; zeros where the lane is past the row) held in registers, added up across the
// row's lanes by transposedSum; lane `slice` ends with the score of row transposedRow(slice, width).
static_assert(kWideRowsInFlight == kTransposedRows, "one transposed sum per round");
template <typename T>
__device__ __forceinline__ float roundScore(const float* qg, bool active, const uint4 (&rows)[kWideRowsInFlight], int slice,
                                            int width) {
    float qv[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) qv[i] = active ? qg[i] : 0.0f;
    float dot[kWideRowsInFlight];
#pragma unroll
    for (int u = 0; u < kWideRowsInFlight; ++u) {
        float e[8];
        unpack8<T>(rows[u], e);
        dot[u] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot[u] = fmaf(qv[i], e[i], dot[u]);
    }
    return transposedSum(dot, slice, width);
}

template <typename T, bool ROPE, bool PARTS>
__global__ void __launch_bounds__(kWideThreads)
    decodeAttentionWideKernel(const T* q, const T* keys, const T* values, const int64_t* __restrict__ position,
                              T* __restrict__ out, float* __restrict__ partialMax, float* __restrict__ partialSum,
                              float* __restrict__ partialOut, int* counters, int heads, int kvHeads,
                              int headParts, int headDim, int64_t capacity, int64_t keysPerSplit, int splits,
                              float scale, RopeInputs<T> rope, bool clusterMerge) {
    if (clusterMerge) clusterArrive();            // as in decodeAttentionKernel
    if constexpr (!ROPE) waitForPredecessor();
    extern __shared__ __align__(16) float wideShared[];
    const BlockHeads h = blockHeads<PARTS>(heads, kvHeads, headParts);
    const int groups = h.groups, kvHead = h.kvHead, firstHead = h.firstHead;
    float* qs = wideShared;                           // [groups][headDim] queries; then the weighted values' sums
    float* scores = qs + groups * headDim;            // [groups][keysPerSplit]
    float* stats = scores + groups * keysPerSplit;    // [groups] maxima, then [groups] sums
    T* newKey = reinterpret_cast<T*>(wideShared + newRowsOffset(groups, headDim, keysPerSplit));
    T* newValue = newKey + headDim;
    float* receive = wideShared + receiveOffset(groups, headDim, keysPerSplit);
    const int split = blockIdx.x, b = blockIdx.z;
    const int64_t p = clampedPosition(position, capacity);
    const int64_t start = int64_t(split) * keysPerSplit;
    if (start > p) {   // as in decodeAttentionKernel
        if (clusterMerge)
            mergePastPosition<T, ROPE>(receive, out, p, b, h, headDim, keysPerSplit, splits);
        return;
    }
    const int count = int(min(keysPerSplit, p + 1 - start));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const int slices = headDim / 8;
    int width = 1;
    while (width < slices) width *= 2;
    const int perWarp = 32 / width, sub = lane / width, slice = lane % width;
    const bool active = slice < slices;
    const int rowsPerRound = warps * perWarp * kWideRowsInFlight;

    const int64_t cacheHead = (int64_t(b) * kvHeads + kvHead) * capacity;
    const T* keyRows = keys + (cacheHead + start) * headDim;
    const T* valueRows = values + (cacheHead + start) * headDim;
    prefetchToL2(valueRows, int64_t(count) * headDim);

    // Row u of a round at t0 for this lane; warp-uniform test for whether the warp has any row there.
    auto rowOf = [&](int t0, int u) { return t0 + (u * warps + warp) * perWarp + sub; };
    auto warpHasRow = [&](int t0, int u) { return t0 + (u * warps + warp) * perWarp < count; };
    uint4 rows[kWideRowsInFlight];
    auto loadRows = [&](const T* base, int t0) {
#pragma unroll
        for (int u = 0; u < kWideRowsInFlight; ++u) {
            const int t = rowOf(t0, u);
            rows[u] = active && t < count
                          ? __ldg(reinterpret_cast<const uint4*>(base + int64_t(t) * headDim + slice * 8))
                          : make_uint4(0u, 0u, 0u, 0u);
        }
    };
    int local = -1;   // ROPE: the position's row in this chunk, read from shared memory (newRow) instead of the cache
    auto useNewRow = [&](const T* newRow, int t0) {
        if (ROPE && local >= t0 && local < t0 + rowsPerRound)
#pragma unroll
            for (int u = 0; u < kWideRowsInFlight; ++u)
                if (active && rowOf(t0, u) == local) rows[u] = *reinterpret_cast<const uint4*>(newRow + slice * 8);
    };
    loadRows(keyRows, 0);   // before the wait under ROPE: the cache slots read here are older
    if constexpr (ROPE) waitForPredecessor();
    local = prepareQueries<T, ROPE>(q, rope, position, p, start, count, b, h, kvHeads, headDim, capacity, scale, qs,
                                    newKey, newValue);
    __syncthreads();

    // Rows of 8+ lanes (head dimension above 32): roundScore.
    const bool transposed = width >= 8;
    auto scoreRoundTransposed = [&](int t0) {
        for (int g = 0; g < groups; ++g) {
            const float sum = roundScore<T>(qs + g * headDim + slice * 8, active, rows, slice, width);
            const int t = rowOf(t0, transposedRow(slice, width));
            if (transposedWriter(slice, width) && t < count) scores[g * keysPerSplit + t] = sum;
        }
    };

    for (int t0 = 0; t0 < count; t0 += rowsPerRound) {
        if (t0 != 0) loadRows(keyRows, t0);
        useNewRow(newKey, t0);
        if (transposed) {
            scoreRoundTransposed(t0);
            continue;
        }
#pragma unroll
        for (int u = 0; u < kWideRowsInFlight; ++u) {
            if (!warpHasRow(t0, u)) break;
            float e[8];
            unpack8<T>(rows[u], e);
            const int t = rowOf(t0, u);
            for (int g = 0; g < groups; ++g) {
                float dot = 0.0f;
                if (active) {
                    const float* qg = qs + g * headDim + slice * 8;
#pragma unroll
                    for (int i = 0; i < 8; ++i) dot = fmaf(qg[i], e[i], dot);
                }
                for (int o = width / 2; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
                if (slice == 0 && t < count) scores[g * keysPerSplit + t] = dot;
            }
        }
    }
    __syncthreads();

    for (int e = threadIdx.x; e < groups * headDim; e += blockDim.x) qs[e] = 0.0f;   // the queries are done with
    chunkSoftmax(scores, stats, groups, count, keysPerSplit);
    __syncthreads();

    for (int g0 = 0; g0 < groups; g0 += 4) {
        float acc[4][8];
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[j][i] = 0.0f;
        for (int t0 = 0; t0 < count; t0 += rowsPerRound) {
            loadRows(valueRows, t0);
            useNewRow(newValue, t0);
#pragma unroll
            for (int u = 0; u < kWideRowsInFlight; ++u) {
                const int t = rowOf(t0, u);
                if (t >= count) continue;
                float e[8];
                unpack8<T>(rows[u], e);
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    if (g0 + j >= groups) break;
                    const float w = scores[(g0 + j) * keysPerSplit + t];
#pragma unroll
                    for (int i = 0; i < 8; ++i) acc[j][i] = fmaf(w, e[i], acc[j][i]);
                }
            }
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (g0 + j >= groups) break;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                float v = acc[j][i];
                for (int o = width; o < 32; o *= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
                if (sub == 0 && active) atomicAdd(qs + (g0 + j) * headDim + slice * 8 + i, v);
            }
        }
    }
    __syncthreads();

    for (int e = threadIdx.x; !clusterMerge && e < groups * headDim; e += blockDim.x) {   // clusters: qs read there
        const int g = e / headDim, i = e % headDim;
        const int64_t row = int64_t(b) * heads + firstHead + g;
        if (splits == 1)
            out[row * headDim + i] = fromFloat<T>(qs[e] / stats[groups + g]);
        else
            partialOut[(row * splits + split) * headDim + i] = qs[e];
    }
    finishChunk<T>(qs, stats, receive, partialMax, partialSum, partialOut, counters, out, p, b, h, split, headDim,
                   keysPerSplit, splits, clusterMerge);
}
