#pragma once
// Fused kernels of one decode step (one token per sequence, Llama family): RMSNorm (optionally with the residual
// add), RoPE on q and k plus the KV-cache write, single-token attention over the cache (GQA, split over the
// sequence), and SiLU(gate) * up. Activations fp16 or bf16, math in fp32. The position is read from device memory
// (int64 [1]), so a CUDA graph captured once stays valid at every position. Every launcher takes the stream to
// run on; nothing here needs the CUDA headers. Each op has a CPU reference (decode_ops_ref.cpp) on float data that
// rounds where the kernel rounds.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels {

// How RoPE pairs the elements of a head: (2i, 2i + 1) (GGUF / Meta) or (i, i + headDim / 2) (Hugging Face, NeoX).
enum class RopeLayout { AdjacentPairs, HalfSplit };

// y[r] = x[r] / sqrt(mean(x[r]²) + eps) * weight, rows of `dim` elements, contiguous. With `residual` (may be
// nullptr), x is first replaced by x + residual rounded to the activation type, and that sum is written to `sum`
// (which may alias x). weight is fp32 [dim].
void rmsNorm(const void* x, const void* residual, void* sum, const float* weight, void* y, int64_t rows, int64_t dim,
             float eps, ActType type, Stream stream);

// Shapes of one decode step's attention. Caches are [batch, kvHeads, capacity, headDim], contiguous.
struct DecodeAttentionShape {
    int64_t batch = 1, heads = 0, kvHeads = 0, headDim = 0, capacity = 0;
};

// RoPE at the device position *position on q [batch, heads, headDim] and k [batch, kvHeads, headDim], then the
// rotated keys and the values v [batch, kvHeads, headDim] are written to the caches at that position; the rotated
// queries go to qOut [batch, heads, headDim] (contiguous). q, k and v rows may be strided: element (b, i) of q is
// q[b * qStride + i] (any q/k/v bias is already in them). ropeTable is fp32 [positions, 2, headDim]: per position
// cos and signed sin, so that rotated[i] = x[i] * cos[i] + x[partner(i)] * sin[i] (the runtime's ropeTable()).
// A position outside [0, capacity) or past the table writes nothing.
void ropeKvWrite(const void* q, int64_t qStride, const void* k, int64_t kStride, const void* v, int64_t vStride,
                 const float* ropeTable, int64_t tablePositions, RopeLayout layout, const int64_t* position,
                 void* qOut, void* keyCache, void* valueCache, const DecodeAttentionShape& shape, ActType type,
                 Stream stream);

// How decodeAttention splits the cache: `splits` chunks of `keysPerSplit` keys, so that up to twice as many blocks
// as the device has multiprocessors work even at batch 1 (not more: the 16-byte-row kernel fits two per
// multiprocessor, and the blocks past that ran as a second wave). Chunks past the position exit at once. The chunks are
// merged by a second small kernel, or with mergeInKernel by the last block of each kv head to finish, in the same
// launch (no second launch; the workspace then also holds one counter per sequence, kv head and head part, which must be zero
// before the first launch, e.g. by cudaMemset, and which every launch leaves zero). planDecodeAttention sets
// mergeInKernel on split plans where decodeAttentionMergeInKernel() is true: off by default until measured.
// mergeInCluster (compute capability 9.0+, 2..kMaxClusterSplits splits; it wins over mergeInKernel): the splits of
// each sequence and kv head run as one thread-block cluster and add up their chunks through each other's shared
// memory, in the same launch, with no workspace. planDecodeAttention sets it where decodeAttentionClusterMerge() is
// true (the default), the device and split count allow, and the chunks are shorter than the 16-byte-row kernel's
// (where it measured slower).
// headParts (GQA): the heads / kvHeads query heads of each kv head are divided among this many blocks per chunk, each
// reading the chunk's keys and values (the first part writes the position's key and value); with few kv heads at
// short context the 32-key floor of a chunk leaves too few blocks to fill the device otherwise. planDecodeAttention
// takes the number given (a divisor of heads / kvHeads), or with 0 its own choice (planHeadParts).
constexpr int64_t kMaxClusterSplits = 8;   // the portable cluster size
struct DecodeAttentionPlan {
    int64_t splits = 1, keysPerSplit = 0;
    bool mergeInKernel = false;
    bool mergeInCluster = false;
    int64_t headParts = 1;
};
DecodeAttentionPlan planDecodeAttention(const DecodeAttentionShape& shape, int multiprocessors, int64_t headParts = 0);
// The planner's own headParts, fitted to every division timed on the H200: the largest divisor d of heads / kvHeads
// for which batch x kvHeads x d blocks fit one per multiprocessor, the plan's chunks stay within two blocks per
// multiprocessor (one wave), and batch x kvHeads x d x capacity x headDim (the key elements the plan reads in all, as
// many value elements, repeated reads of a chunk counted) is at most 1.5 x 2^24; then, where that leaves more than 4 query heads a block,
// the smallest divisor that leaves at most 4, if it fits the multiprocessors, one wave and twice that read limit. On
// 132 multiprocessors with heads of 128: Llama-2-70B's 64/8 at batch 1 in 8 parts up to 3072 keys, 4 up to 6144, 2
// up to 16384, then 1; at batch 8 in 2 up to 2048 keys. Llama-3-8B's 32/8 at batch 1 in 4 up to 6144 keys, 2 up to
// 12288, then 1; at batch 8 in 2 up to 1536 keys. Llama-2-7B's 32/32: 1. Always 1 while
// decodeAttentionHeadParts() is false
// (CWB_ATTENTION_HEAD_PARTS=0 in the environment, or the setter; for before/after runs).
int64_t planHeadParts(const DecodeAttentionShape& shape, int multiprocessors);
void setDecodeAttentionHeadParts(bool on);
bool decodeAttentionHeadParts();
// Process-wide choice planDecodeAttention follows; CWB_ATTENTION_MERGE_IN_KERNEL=1 in the environment sets the start
// value (for before/after runs of `cwb bench`). Switch between launches, never while another thread plans.
void setDecodeAttentionMergeInKernel(bool on);
bool decodeAttentionMergeInKernel();
// The same for mergeInCluster: on unless CWB_ATTENTION_CLUSTER_MERGE=0 is in the environment.
void setDecodeAttentionClusterMerge(bool on);
bool decodeAttentionClusterMerge();
// True when the current device runs thread-block clusters (compute capability 9.0 or more).
bool deviceRunsClusters();
// Multiprocessors of the current device (cached per device).
int deviceMultiprocessors();
// For the attention kernel that decodeAttention (rope false) or ropeDecodeAttention (rope true) launches for a plan
// on the current device, caches 16-byte aligned: its blocks in all, how many fit on one multiprocessor at once, and
// for a cluster plan how many of its clusters the device runs at once (cudaOccupancyMaxActiveClusters; else 0). For
// benchmarks, to tell a plan that runs in one wave from one that does not.
struct DecodeAttentionOccupancy {
    int64_t blocks = 0;
    int blocksPerMultiprocessor = 0;
    int activeClusters = 0;
};
DecodeAttentionOccupancy decodeAttentionOccupancy(const DecodeAttentionShape& shape, const DecodeAttentionPlan& plan,
                                                  ActType type, bool rope);

// A plan and the kernel it launches, in words, for reports (caches taken as 16-byte aligned, as the runtime's are):
// e.g. "32/8 heads of 128 at capacity 193, batch 1: 4 chunks of 64 keys, query heads in 4 parts, scalar kernel,
// chunks merged in a cluster". Host only; reads the process-wide kernel choice (CWB_ATTENTION_KERNEL).
std::string describeDecodeAttentionPlan(const DecodeAttentionShape& shape, const DecodeAttentionPlan& plan);

// Scratch decodeAttention needs for a plan (fp32 partial maxima, sums and outputs per split, then with mergeInKernel
// the int counters); 0 when unsplit or merged in clusters.
size_t decodeAttentionWorkspaceBytes(const DecodeAttentionShape& shape, const DecodeAttentionPlan& plan);

// out[b, h] = softmax(q[b, h] · K[b, h / groups, 0..p]ᵀ * scale) · V[b, h / groups, 0..p] with p = *position, for
// q [batch, heads, headDim] and out [batch, heads, headDim] contiguous; groups = heads / kvHeads query heads share
// each kv head (GQA) without repeating the cache. Scores, softmax and sums in fp32. headDim a multiple of 2, at
// most 256. The workspace is fp32, decodeAttentionWorkspaceBytes(shape, plan) long, and not used by two launches
// at once.
void decodeAttention(const void* q, const void* keyCache, const void* valueCache, const int64_t* position, void* out,
                     const DecodeAttentionShape& shape, float scale, const DecodeAttentionPlan& plan, float* workspace,
                     size_t workspaceBytes, ActType type, Stream stream);

// Which attention kernel decodeAttention and ropeDecodeAttention launch. Wide reads 16-byte rows, where the head
// dimension is a multiple of 8 and the caches are 16-byte aligned (else the scalar kernel runs), scores a chunk's keys,
// then reads its values in a second pass; OnePass reads 16-byte rows too, each round's keys and values together with a
// running softmax, for blocks of one query head (MHA, or GQA in head parts; else Wide); Scalar reads 2 and 4 bytes at
// a time. Auto (the default) takes OnePass (else Wide) for chunks of at least 128 keys, where on the H200 it measured
// 1.05-1.16x faster than Wide and Wide 1.3-1.5x faster than Scalar, and Scalar for shorter ones, where both measured
// slower (at 32 keys per chunk: Wide 9.9 against 8.5 us, OnePass 7.2 against 6.0). Process-wide; all but Auto are for
// benchmarks and tests (CWB_ATTENTION_KERNEL=scalar|wide|onepass in the environment sets the start value).
enum class DecodeAttentionKernel { Auto, Scalar, Wide, OnePass };
void setDecodeAttentionKernel(DecodeAttentionKernel kernel);
DecodeAttentionKernel currentDecodeAttentionKernel();

// ropeKvWrite and decodeAttention in one launch (the runtime's decode step): each block rotates its query heads
// itself, and the block whose chunk holds the position rotates that position's key, writes it and the value to the
// caches and reads both from shared memory. Arguments as in the two calls (no qOut); the same results. A position
// outside [0, capacity) or past the table writes nothing to the caches, and the output is then not meaningful.
void ropeDecodeAttention(const void* q, int64_t qStride, const void* k, int64_t kStride, const void* v, int64_t vStride,
                         const float* ropeTable, int64_t tablePositions, RopeLayout layout, const int64_t* position,
                         void* keyCache, void* valueCache, void* out, const DecodeAttentionShape& shape, float scale,
                         const DecodeAttentionPlan& plan, float* workspace, size_t workspaceBytes, ActType type,
                         Stream stream);

// out[r, i] = silu(gate[r, i]) * up[r, i] for `rows` rows of `width`; element (r, i) of gate is gate[r * gateStride
// + i] (so one fused [gate; up] GEMM output serves as both, with up = gate + width). out is contiguous.
void siluMul(const void* gate, int64_t gateStride, const void* up, int64_t upStride, void* out, int64_t rows,
             int64_t width, ActType type, Stream stream);

// CPU references on float data; the values given are taken as already rounded to `type`, and outputs are rounded
// to `type` where the kernels round (before a value is stored in the activation type).
void rmsNormRef(const float* x, const float* residual, float* sum, const float* weight, float* y, int64_t rows,
                int64_t dim, float eps, ActType type);
void ropeKvWriteRef(const float* q, int64_t qStride, const float* k, int64_t kStride, const float* v, int64_t vStride,
                    const float* ropeTable, int64_t tablePositions, RopeLayout layout, int64_t position, float* qOut,
                    float* keyCache, float* valueCache, const DecodeAttentionShape& shape, ActType type);
void decodeAttentionRef(const float* q, const float* keyCache, const float* valueCache, int64_t position, float* out,
                        const DecodeAttentionShape& shape, float scale, ActType type);
void siluMulRef(const float* gate, int64_t gateStride, const float* up, int64_t upStride, float* out, int64_t rows,
                int64_t width, ActType type);
// fp32 [positions, 2, headDim] cos / signed-sin table for inverse frequencies theta^(-2i / headDim), laid out as
// the runtime's ropeTable() (for tests that need no LibTorch).
void ropeTableRef(double theta, int64_t headDim, int64_t positions, RopeLayout layout, float* table);

} // namespace cwb::kernels
