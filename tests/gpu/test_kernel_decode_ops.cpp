// GPU test (label `gpu`, exit 77 without a GPU): the fused decode kernels (decode_ops.h) against their CPU
// references: RMSNorm with and without the residual add; RoPE + KV-cache write for both RoPE layouts at positions 0,
// mid and capacity - 1 (and a position past the cache, which must write nothing); the same RoPE and cache write fused
// into attention (ropeDecodeAttention) against both references in turn; single-token GQA attention over
// the cache, unsplit and split over the sequence; SiLU(gate) * up on a fused [gate; up] row. fp16 and bf16, GQA
// ratios 1 and 4, head dimensions 64 and 128, batch 1 and 2.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "../kernels/kernel_check.h"
#include "device_memory.h"
#include "cwb/kernels/decode_ops.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

// Normalised MSE allowed between a decode kernel and its reference. Both see the same rounded inputs; what remains
// is fp32 against double arithmetic, which may round an output to the neighbouring value (one unit in the last
// place: 2^-11 relative in fp16, 2^-8 in bf16) in a few elements.
constexpr double kDecodeNmseFp16 = 1e-6;
constexpr double kDecodeNmseBf16 = 5e-5;

double tolerance(ActType t) { return t == ActType::Float16 ? kDecodeNmseFp16 : kDecodeNmseBf16; }

// roundedGaussian, drawn once per (size, seed, type, sigma): the attention cases at 32 kv heads x 4096 keys draw 2 x 16.8M
// values per call, 60 calls in all, which took the test past 90 s on the H200's host; the data are the same each time.
std::vector<float> sameGaussian(size_t n, uint32_t seed, ActType t, float sigma = 1.0f) {
    static std::map<std::tuple<size_t, uint32_t, int, float>, std::vector<float>> drawn;
    static ActType lastType = t;
    if (t != lastType) drawn.clear();   // the cases run type by type: keep one type's draws (about 0.3 GB)
    lastType = t;
    const auto key = std::make_tuple(n, seed, int(t), sigma);
    auto found = drawn.find(key);
    if (found == drawn.end()) found = drawn.emplace(key, roundedGaussian(n, seed, t, sigma)).first;
    return found->second;
}

void synchronised(const std::string& what) { check(cudaDeviceSynchronize() == cudaSuccess, (what + " ran").c_str()); }

void testRmsNorm(ActType t, int64_t rows, int64_t dim, bool residual) {
    const std::string tag = std::string("rmsNorm ") + actTypeName(t) + " " + std::to_string(rows) + "x" +
                            std::to_string(dim) + (residual ? " + residual" : "");
    const size_t n = size_t(rows * dim);
    std::vector<float> x = roundedGaussian(n, 1, t), r = roundedGaussian(n, 2, t), w = gaussian(size_t(dim), 3, 0.1f);
    for (float& v : w) v += 1.0f;
    std::vector<float> refSum(n), refY(n);
    rmsNormRef(x.data(), residual ? r.data() : nullptr, refSum.data(), w.data(), refY.data(), rows, dim, 1e-5f, t);
    uint16_t *dx = upload(x, t), *dr = upload(r, t), *dy = upload(std::vector<float>(n, 0.0f), t);
    float* dw = toDevice(w);
    // The sum is written over x (the runtime's in-place use).
    rmsNorm(dx, residual ? dr : nullptr, residual ? dx : nullptr, dw, dy, rows, dim, 1e-5f, t, nullptr);
    synchronised(tag);
    check(nmse(download(dy, n, t), refY) <= tolerance(t), (tag + ": output matches the reference").c_str());
    if (residual) check(download(dx, n, t) == refSum, (tag + ": x + residual written exactly").c_str());
    cudaFree(dx), cudaFree(dr), cudaFree(dy), cudaFree(dw);
}

struct AttentionCase {
    int64_t batch, heads, kvHeads, headDim, capacity;
};

// The attention kernel the cases run under (setDecodeAttentionKernel), for their messages.
std::string attentionKernelTag() {
    switch (currentDecodeAttentionKernel()) {
    case DecodeAttentionKernel::Wide: return ", 16-byte-row kernel";
    case DecodeAttentionKernel::Scalar: return ", scalar kernel";
    case DecodeAttentionKernel::OnePass: return ", one-pass kernel";
    default: return ", auto";
    }
}

std::string describe(const AttentionCase& c, ActType t) {
    return std::string(actTypeName(t)) + " batch " + std::to_string(c.batch) + ", " + std::to_string(c.heads) + "/" +
           std::to_string(c.kvHeads) + " heads of " + std::to_string(c.headDim) + ", capacity " + std::to_string(c.capacity);
}

// The key cache after a write at `position`: that slot holds the reference's rotated key within rounding (the
// kernels may fuse x·cos + y·sin), every other slot its value before, exactly (a position outside the cache: all).
void checkKeySlots(const std::string& tag, ActType t, const AttentionCase& c, int64_t position,
                   const std::vector<float>& got, const std::vector<float>& before, const std::vector<float>& ref) {
    std::vector<float> gotAtPosition, refAtPosition;
    size_t otherSlotsChanged = 0;
    for (int64_t row = 0; row < c.batch * c.kvHeads; ++row)
        for (int64_t slot = 0; slot < c.capacity; ++slot)
            for (int64_t i = 0; i < c.headDim; ++i) {
                const size_t e = size_t((row * c.capacity + slot) * c.headDim + i);
                if (slot != position) {
                    otherSlotsChanged += got[e] != before[e];
                } else {
                    gotAtPosition.push_back(got[e]);
                    refAtPosition.push_back(ref[e]);
                }
            }
    if (!gotAtPosition.empty())
        check(nmse(gotAtPosition, refAtPosition) <= tolerance(t), (tag + ": rotated keys at the position").c_str());
    check(otherSlotsChanged == 0, (tag + ": other key slots untouched").c_str());
}

// The RoPE table, and ropeKvWriteRef's rotated queries and caches for fused [q | k | v] rows at `position`.
struct RopeReference {
    std::vector<float> table, q, keys, values;
};
RopeReference ropeReference(const AttentionCase& c, RopeLayout layout, int64_t position, const std::vector<float>& qkv,
                            const std::vector<float>& keys, const std::vector<float>& values, ActType t) {
    const DecodeAttentionShape s{c.batch, c.heads, c.kvHeads, c.headDim, c.capacity};
    const int64_t width = (c.heads + 2 * c.kvHeads) * c.headDim;
    RopeReference r{std::vector<float>(size_t(c.capacity * 2 * c.headDim)),
                    std::vector<float>(size_t(c.batch * c.heads * c.headDim), 0.0f), keys, values};
    ropeTableRef(10000.0, c.headDim, c.capacity, layout, r.table.data());
    const float* q = qkv.data();
    ropeKvWriteRef(q, width, q + c.heads * c.headDim, width, q + (c.heads + c.kvHeads) * c.headDim, width, r.table.data(),
                   c.capacity, layout, position, r.q.data(), r.keys.data(), r.values.data(), s, t);
    return r;
}

// RoPE + cache write from a fused [q | k | v] row per sequence, at `position`; the caches start full of other values.
void testRopeKvWrite(ActType t, const AttentionCase& c, RopeLayout layout, int64_t position) {
    const std::string tag = "ropeKvWrite " + describe(c, t) + (layout == RopeLayout::AdjacentPairs ? ", adjacent" : ", half-split") +
                            ", position " + std::to_string(position);
    const DecodeAttentionShape s{c.batch, c.heads, c.kvHeads, c.headDim, c.capacity};
    const int64_t width = (c.heads + 2 * c.kvHeads) * c.headDim, cacheSize = c.batch * c.kvHeads * c.capacity * c.headDim;
    std::vector<float> qkv = roundedGaussian(size_t(c.batch * width), 4, t);
    std::vector<float> keys = sameGaussian(size_t(cacheSize), 5, t), values = sameGaussian(size_t(cacheSize), 6, t);
    const RopeReference r = ropeReference(c, layout, position, qkv, keys, values, t);
    const std::vector<float>&table = r.table, &refQ = r.q, &refKeys = r.keys, &refValues = r.values;
    uint16_t *dqkv = upload(qkv, t), *dq = upload(std::vector<float>(refQ.size(), 0.0f), t);
    uint16_t *dk = upload(keys, t), *dv = upload(values, t);
    float* dtable = toDevice(table);
    int64_t* dpos = toDevice(std::vector<int64_t>{position});
    ropeKvWrite(dqkv, width, dqkv + c.heads * c.headDim, width, dqkv + (c.heads + c.kvHeads) * c.headDim, width, dtable,
                c.capacity, layout, dpos, dq, dk, dv, s, t, nullptr);
    synchronised(tag);
    const bool inside = position >= 0 && position < c.capacity;
    if (inside) check(nmse(download(dq, refQ.size(), t), refQ) <= tolerance(t), (tag + ": rotated queries").c_str());
    checkKeySlots(tag, t, c, position, download(dk, size_t(cacheSize), t), keys, refKeys);
    check(download(dv, size_t(cacheSize), t) == refValues, (tag + ": values written exactly at the position").c_str());
    cudaFree(dqkv), cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dtable), cudaFree(dpos);
}

// Cache slots past the position hold huge values that would dominate the attention output if they were read.
void poisonPastPosition(const AttentionCase& c, int64_t position, std::vector<float>& keys, std::vector<float>& values) {
    for (int64_t row = 0; row < c.batch * c.kvHeads; ++row)
        for (int64_t slot = position + 1; slot < c.capacity; ++slot)
            for (int64_t i = 0; i < c.headDim; ++i) {
                keys[size_t((row * c.capacity + slot) * c.headDim + i)] = 8.0f;
                values[size_t((row * c.capacity + slot) * c.headDim + i)] = 1000.0f;
            }
}

// Split plans merge their chunks inside the attention launch (DecodeAttentionPlan::mergeInKernel) while this is set,
// or, where they have at most kMaxClusterSplits chunks, in thread-block clusters (mergeInCluster) while that is.
bool mergeSplitsInKernel = false;
bool mergeSplitsInCluster = false;
int64_t clusterPlansRun = 0;

// The merge the cases ask for, on a plan of planDecodeAttention's (which follows decodeAttentionClusterMerge(), off
// in this test) or a forced one (`forced`: its own mergeInKernel is kept, so a cluster can be shown to win over it).
void chooseMerge(DecodeAttentionPlan& plan, bool forced) {
    plan.mergeInKernel = (mergeSplitsInKernel || (forced && plan.mergeInKernel)) && plan.splits > 1;
    plan.mergeInCluster = mergeSplitsInCluster && plan.splits > 1 && plan.splits <= kMaxClusterSplits;
    clusterPlansRun += plan.mergeInCluster;
}
std::string partsTag(const DecodeAttentionPlan& plan) {
    return plan.headParts > 1 ? ", query heads in " + std::to_string(plan.headParts) + " parts" : "";
}
std::string mergeTag(const DecodeAttentionPlan& plan) {
    return plan.mergeInCluster ? " merged in a cluster" : plan.mergeInKernel ? " merged in the launch" : "";
}

// A poisoned workspace for `plan`: NaN where the partials go, zeros where mergeInKernel's counters are (they must
// start at zero).
float* poisonedWorkspace(const DecodeAttentionShape& s, const DecodeAttentionPlan& plan, size_t bytes) {
    if (!bytes) return nullptr;
    std::vector<float> ws(bytes / sizeof(float), NAN);
    if (plan.mergeInKernel && !plan.mergeInCluster)
        for (size_t i = ws.size() - size_t(s.batch * s.kvHeads * plan.headParts); i < ws.size(); ++i) ws[i] = 0.0f;
    return toDevice(ws);
}

// With mergeInKernel: the counters are back at zero after a launch (the next launch relies on it).
void checkCountersReset(const std::string& tag, const DecodeAttentionShape& s, const DecodeAttentionPlan& plan,
                        const float* ws, size_t bytes) {
    if (!plan.mergeInKernel || plan.mergeInCluster) return;   // no counters
    const size_t words = bytes / sizeof(float), counters = size_t(s.batch * s.kvHeads * plan.headParts);
    const std::vector<int32_t> tail = toHost(reinterpret_cast<const int32_t*>(ws + (words - counters)), counters);
    size_t nonzero = 0;
    for (int32_t v : tail) nonzero += v != 0;
    check(nonzero == 0, (tag + ": merge counters reset to zero").c_str());
}

// expectSplit: 1 split over the sequence whatever the device, 0 never, -1 as the device's size decides.
// `forced`: that plan instead of planDecodeAttention's (longer chunks than this device's plans give).
void testAttention(ActType t, const AttentionCase& c, int64_t position, int expectSplit,
                   const DecodeAttentionPlan* forced = nullptr) {
    const DecodeAttentionShape s{c.batch, c.heads, c.kvHeads, c.headDim, c.capacity};
    DecodeAttentionPlan plan = forced ? *forced : planDecodeAttention(s, deviceMultiprocessors());
    chooseMerge(plan, forced != nullptr);
    const std::string tag = "decodeAttention " + describe(c, t) + ", position " + std::to_string(position) + ", " +
                            std::to_string(plan.splits) + " splits of " + std::to_string(plan.keysPerSplit) +
                            partsTag(plan) + mergeTag(plan) + attentionKernelTag();
    if (expectSplit >= 0)
        check((plan.splits > 1) == (expectSplit == 1), (tag + ": " + (expectSplit ? "split" : "not split") + " as intended").c_str());
    const int64_t qSize = c.batch * c.heads * c.headDim, cacheSize = c.batch * c.kvHeads * c.capacity * c.headDim;
    std::vector<float> q = roundedGaussian(size_t(qSize), 7, t);
    // Keys large enough that the softmax is far from uniform.
    std::vector<float> keys = sameGaussian(size_t(cacheSize), 8, t, 0.5f), values = sameGaussian(size_t(cacheSize), 9, t);
    poisonPastPosition(c, position, keys, values);
    const float scale = float(1.0 / std::sqrt(double(c.headDim)));
    std::vector<float> ref(static_cast<size_t>(qSize));
    decodeAttentionRef(q.data(), keys.data(), values.data(), position, ref.data(), s, scale, t);
    uint16_t *dq = upload(q, t), *dk = upload(keys, t), *dv = upload(values, t), *dout = upload(std::vector<float>(ref.size(), NAN), t);
    int64_t* dpos = toDevice(std::vector<int64_t>{position});
    const size_t bytes = decodeAttentionWorkspaceBytes(s, plan);
    float* ws = poisonedWorkspace(s, plan, bytes);
    // Twice with an in-launch merge: the second launch runs on the counters the first left.
    for (int run = 0; run < (plan.mergeInKernel ? 2 : 1); ++run) {
        if (run) cudaMemset(dout, 0xFF, ref.size() * 2);
        decodeAttention(dq, dk, dv, dpos, dout, s, scale, plan, ws, bytes, t, nullptr);
        synchronised(tag);
        const double error = nmse(download(dout, ref.size(), t), ref);
        std::printf("  %s%s: nmse %.3g\n", tag.c_str(), run ? " (second launch)" : "", error);
        check(error <= tolerance(t), (tag + (run ? " (second launch)" : "") + ": output matches the reference").c_str());
        checkCountersReset(tag, s, plan, ws, bytes);
    }
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(dpos), cudaFree(ws);
}

// ropeDecodeAttention (RoPE, cache write and attention in one launch) against ropeKvWriteRef then decodeAttentionRef:
// the output, the position's key and value in the caches, every other slot untouched; the slots past the position
// hold huge values that would dominate the output if they were read. A position past the cache writes nothing.
void testRopeAttention(ActType t, const AttentionCase& c, RopeLayout layout, int64_t position,
                       const DecodeAttentionPlan* forced = nullptr) {
    const DecodeAttentionShape s{c.batch, c.heads, c.kvHeads, c.headDim, c.capacity};
    DecodeAttentionPlan plan = forced ? *forced : planDecodeAttention(s, deviceMultiprocessors());
    chooseMerge(plan, forced != nullptr);
    const std::string tag = "ropeDecodeAttention " + describe(c, t) +
                            (layout == RopeLayout::AdjacentPairs ? ", adjacent" : ", half-split") + ", position " +
                            std::to_string(position) + ", " + std::to_string(plan.splits) + " splits of " +
                            std::to_string(plan.keysPerSplit) + partsTag(plan) + mergeTag(plan) +
                            attentionKernelTag();
    const int64_t width = (c.heads + 2 * c.kvHeads) * c.headDim, cacheSize = c.batch * c.kvHeads * c.capacity * c.headDim;
    std::vector<float> qkv = roundedGaussian(size_t(c.batch * width), 11, t);
    std::vector<float> keys = sameGaussian(size_t(cacheSize), 12, t, 0.5f), values = sameGaussian(size_t(cacheSize), 13, t);
    poisonPastPosition(c, position, keys, values);
    const RopeReference r = ropeReference(c, layout, position, qkv, keys, values, t);
    const std::vector<float>&table = r.table, &refQ = r.q, &refKeys = r.keys, &refValues = r.values;
    const float scale = float(1.0 / std::sqrt(double(c.headDim)));
    std::vector<float> ref(refQ.size());
    const bool inside = position >= 0 && position < c.capacity;
    if (inside) decodeAttentionRef(refQ.data(), refKeys.data(), refValues.data(), position, ref.data(), s, scale, t);
    uint16_t *dqkv = upload(qkv, t), *dk = upload(keys, t), *dv = upload(values, t);
    uint16_t* dout = upload(std::vector<float>(ref.size(), NAN), t);
    float* dtable = toDevice(table);
    int64_t* dpos = toDevice(std::vector<int64_t>{position});
    const size_t bytes = decodeAttentionWorkspaceBytes(s, plan);
    float* ws = poisonedWorkspace(s, plan, bytes);
    ropeDecodeAttention(dqkv, width, dqkv + c.heads * c.headDim, width, dqkv + (c.heads + c.kvHeads) * c.headDim, width,
                        dtable, c.capacity, layout, dpos, dk, dv, dout, s, scale, plan, ws, bytes, t, nullptr);
    synchronised(tag);
    if (inside) {
        const double error = nmse(download(dout, ref.size(), t), ref);
        std::printf("  %s: nmse %.3g\n", tag.c_str(), error);
        check(error <= tolerance(t), (tag + ": output matches the reference").c_str());
    }
    checkCountersReset(tag, s, plan, ws, bytes);
    checkKeySlots(tag, t, c, position, download(dk, size_t(cacheSize), t), keys, refKeys);
    check(download(dv, size_t(cacheSize), t) == refValues, (tag + ": values: the value at the position, all else untouched").c_str());
    cudaFree(dqkv), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(dtable), cudaFree(dpos), cudaFree(ws);
}

// decodeAttentionOccupancy against what planDecodeAttention promises on this device: each planned split plan's blocks
// all fit at once (blocks per multiprocessor x multiprocessors) unless its chunks are the longest allowed, and the
// 192-key Llama-2-7B plan that the cluster default takes runs all its clusters at once (what session 27 found missing
// for 8 clusters of 128+ keys: 30 of 32 on the H200).
void testPlansFitOneWave(ActType t, const AttentionCase* cases, size_t count) {
    const int sms = deviceMultiprocessors();
    for (size_t i = 0; i < count; ++i) {
        const AttentionCase& c = cases[i];
        const DecodeAttentionShape s{c.batch, c.heads, c.kvHeads, c.headDim, c.capacity};
        const DecodeAttentionPlan plan = planDecodeAttention(s, sms);
        for (bool rope : {false, true}) {
            const DecodeAttentionOccupancy o = decodeAttentionOccupancy(s, plan, t, rope);
            const std::string tag = "occupancy " + describe(c, t) + (rope ? ", RoPE fused" : "") + ": " +
                                    std::to_string(plan.splits) + " x " + std::to_string(plan.keysPerSplit) + ", " +
                                    std::to_string(o.blocks) + " blocks, " + std::to_string(o.blocksPerMultiprocessor) +
                                    " per SM";
            check(o.blocks == plan.splits * c.kvHeads * plan.headParts * c.batch && o.blocksPerMultiprocessor >= 1,
                  (tag + ": blocks counted, at least one per multiprocessor").c_str());
            if (plan.splits > 1)
                check(o.blocks <= int64_t(o.blocksPerMultiprocessor) * sms || plan.keysPerSplit == 1024,
                      (tag + ": all blocks at once").c_str());
        }
    }
    if (!deviceRunsClusters()) return;
    const DecodeAttentionShape llama{1, 32, 32, 128, 192};
    DecodeAttentionPlan plan = planDecodeAttention(llama, sms);
    if (plan.splits < 2 || plan.splits > kMaxClusterSplits) return;
    plan.mergeInCluster = true;
    const DecodeAttentionOccupancy o = decodeAttentionOccupancy(llama, plan, t, true);
    std::printf("  7B at 192 keys, %lld chunks in clusters: %d clusters at once for %lld\n", (long long)plan.splits,
                o.activeClusters, (long long)(o.blocks / plan.splits));
    check(o.activeClusters >= o.blocks / plan.splits, "the 192-key 7B cluster plan runs all its clusters at once");
}

// The query heads of each kv head divided among blocks (DecodeAttentionPlan::headParts), every divisor of the group
// forced, under the merge kernel, the in-launch merge and (sm_90+) clusters, both kernels; fused RoPE at the position
// (only the first part writes the caches) and past it. Batch 2 and 5 heads per kv head (two passes of four) included.
void testHeadParts(ActType t) {
    const AttentionCase cases[] = {{1, 32, 8, 128, 192}, {2, 8, 2, 64, 300}, {1, 10, 2, 64, 160}, {1, 64, 8, 128, 1100}};
    const bool clusters = deviceRunsClusters();
    for (DecodeAttentionKernel k :
         {DecodeAttentionKernel::Scalar, DecodeAttentionKernel::Wide, DecodeAttentionKernel::OnePass}) {
        setDecodeAttentionKernel(k);
        for (const AttentionCase& c : cases) {
            const DecodeAttentionShape s{c.batch, c.heads, c.kvHeads, c.headDim, c.capacity};
            const int64_t groups = c.heads / c.kvHeads;
            for (int64_t parts = 1; parts <= groups; ++parts) {
                if (groups % parts != 0) continue;
                const DecodeAttentionPlan planned = planDecodeAttention(s, deviceMultiprocessors(), parts);
                check(planned.headParts == parts, "planDecodeAttention keeps the head parts it is given");
                for (int merge = 0; merge < (clusters ? 3 : 2); ++merge) {
                    DecodeAttentionPlan plan = planned;
                    plan.mergeInKernel = merge == 1;
                    mergeSplitsInCluster = merge == 2;
                    if (merge == 2 && (plan.splits < 2 || plan.splits > kMaxClusterSplits)) continue;
                    for (int64_t p : {int64_t(0), c.capacity / 2 + 7, c.capacity - 1}) {
                        testAttention(t, c, p, -1, &plan);
                        testRopeAttention(t, c, RopeLayout::HalfSplit, p, &plan);
                    }
                    testRopeAttention(t, c, RopeLayout::AdjacentPairs, c.capacity, &plan);   // past the cache
                }
                mergeSplitsInCluster = false;
            }
        }
    }
    setDecodeAttentionKernel(DecodeAttentionKernel::Auto);
    bool refused = false;
    try {
        planDecodeAttention({1, 32, 8, 128, 192}, deviceMultiprocessors(), 3);
    } catch (const KernelError&) {
        refused = true;
    }
    check(refused, "head parts that do not divide the group are refused");
}

void testSiluMul(ActType t, int64_t rows, int64_t width) {
    const std::string tag = std::string("siluMul ") + actTypeName(t) + " " + std::to_string(rows) + "x" + std::to_string(width);
    std::vector<float> gateUp = roundedGaussian(size_t(rows * 2 * width), 10, t, 2.0f), ref(size_t(rows * width));
    siluMulRef(gateUp.data(), 2 * width, gateUp.data() + width, 2 * width, ref.data(), rows, width, t);
    uint16_t *d = upload(gateUp, t), *dout = upload(std::vector<float>(ref.size(), 0.0f), t);
    siluMul(d, 2 * width, d + width, 2 * width, dout, rows, width, t, nullptr);
    synchronised(tag);
    check(nmse(download(dout, ref.size(), t), ref) <= tolerance(t), (tag + ": output matches the reference").c_str());
    cudaFree(d), cudaFree(dout);
}

} // namespace

int main() {
    if (noCudaDevice()) return 77;
    // The cases below ask for each merge themselves (chooseMerge); planDecodeAttention's cluster default is checked
    // on its own further down.
    const bool clusterDefault = decodeAttentionClusterMerge();
    setDecodeAttentionClusterMerge(false);
    try {
        for (ActType t : {ActType::Float16, ActType::BFloat16}) {
            testRmsNorm(t, 1, 4096, false);
            testRmsNorm(t, 3, 1000, true);
            testRmsNorm(t, 2, 4096, true);
            testSiluMul(t, 1, 11008);
            testSiluMul(t, 2, 688);
            // GQA ratio 1 and 4, head dims 64 and 128; batch 2 in one case.
            const AttentionCase shapes[] = {{1, 8, 8, 128, 48}, {2, 8, 2, 64, 40}, {1, 32, 8, 128, 300}};
            for (const AttentionCase& c : shapes) {
                for (RopeLayout layout : {RopeLayout::AdjacentPairs, RopeLayout::HalfSplit})
                    for (int64_t p : {int64_t(0), c.capacity / 2, c.capacity - 1}) testRopeKvWrite(t, c, layout, p);
                testRopeKvWrite(t, c, RopeLayout::HalfSplit, c.capacity);   // past the cache: nothing written
            }
            // Short caches (at most 32 keys) run in one chunk; caches past 1024 keys always split; Llama-2-7B's
            // shape at a 192-token cache splits as the device's multiprocessor count decides.
            // Head dims 96 (lanes past the row's end) and 256 (every lane's four pairs); in the 16-byte-row kernel
            // 8 is 32 rows per warp, 96 12 of 16 lanes per row, 256 a warp per row; 36 (not a multiple of 8) runs
            // the scalar kernel under every choice; 5 query heads per kv head: two passes of at most four.
            const AttentionCase attention[] = {{1, 32, 32, 128, 32},  {1, 4, 1, 64, 24},     {1, 8, 8, 128, 2048},
                                               {2, 8, 2, 64, 1500},   {1, 32, 8, 128, 4096}, {1, 32, 32, 128, 192},
                                               {1, 4, 2, 96, 70},     {1, 2, 1, 256, 300},   {1, 4, 2, 36, 100},
                                               {1, 8, 4, 8, 600},     {1, 10, 2, 64, 333},   {1, 32, 32, 128, 4096}};
            const int splits[] = {0, 0, 1, 1, 1, -1, -1, 1, -1, -1, -1, 1};
            testPlansFitOneWave(t, attention, std::size(attention));
            // RoPE, the cache write and attention in one launch: split and unsplit caches, GQA, batch 2, both layouts.
            const AttentionCase fused[] = {{1, 32, 32, 128, 192}, {1, 4, 1, 64, 24},    {2, 8, 2, 64, 1500},
                                           {1, 4, 2, 96, 70},     {1, 2, 1, 256, 300},  {1, 4, 2, 36, 100},
                                           {1, 8, 4, 8, 600},     {1, 10, 2, 64, 333},  {1, 32, 8, 128, 4096},
                                           {1, 32, 32, 128, 4096}};
            // Every case under each kernel (Wide: 4 warps below 128 keys per chunk, 8 from there; OnePass: Wide where a block
            // has more than two query heads), then Auto.
            static_assert(sizeof(splits) / sizeof(splits[0]) == sizeof(attention) / sizeof(attention[0]),
                          "one split expectation per attention case");
            for (DecodeAttentionKernel k : {DecodeAttentionKernel::Wide, DecodeAttentionKernel::Scalar,
                                            DecodeAttentionKernel::OnePass, DecodeAttentionKernel::Auto}) {
                setDecodeAttentionKernel(k);
                for (size_t i = 0; i < std::size(attention); ++i) {
                    const AttentionCase& c = attention[i];
                    for (int64_t p : {int64_t(0), c.capacity / 2 + 7, c.capacity - 1}) testAttention(t, c, p, splits[i]);
                }
                for (const AttentionCase& c : fused) {
                    for (RopeLayout layout : {RopeLayout::HalfSplit, RopeLayout::AdjacentPairs})
                        for (int64_t p : {int64_t(0), c.capacity / 2 + 7, c.capacity - 1}) testRopeAttention(t, c, layout, p);
                    testRopeAttention(t, c, RopeLayout::HalfSplit, c.capacity);   // past the cache: nothing written
                }
                // Chunks of several rounds of rows (a 16-byte-row block holds 128 rows of 128 per round at 8 warps):
                // 1024 keys per chunk with 8 query heads per kv head (two full passes), positions in the first,
                // a middle and a partial last round of a chunk. (32 kv heads at 4096 keys above: 480 per chunk on
                // 132 multiprocessors.)
                const AttentionCase longChunks{1, 32, 4, 128, 4096};
                const DecodeAttentionPlan fourChunks{4, 1024};
                for (int64_t p : {int64_t(100), int64_t(1024 + 300), int64_t(3 * 1024 + 1000), int64_t(4095)}) {
                    testAttention(t, longChunks, p, 1, &fourChunks);
                    testRopeAttention(t, longChunks, RopeLayout::HalfSplit, p, &fourChunks);
                }
            }
            check(currentDecodeAttentionKernel() == DecodeAttentionKernel::Auto, "the attention kernel choice is back to Auto");
            // The split cases once more with the chunks merged by the last block of each kv head (Auto: the scalar
            // kernel for short chunks, the 16-byte-row one from 128 keys per chunk), the multi-round plan included.
            mergeSplitsInKernel = true;
            for (size_t i = 0; i < std::size(attention); ++i) {
                const AttentionCase& c = attention[i];
                for (int64_t p : {int64_t(0), c.capacity / 2 + 7, c.capacity - 1}) testAttention(t, c, p, splits[i]);
            }
            for (const AttentionCase& c : fused) {
                // a position past the cache last: nothing written, and the counters must still come back to zero
                for (int64_t p : {int64_t(0), c.capacity / 2 + 7, c.capacity - 1, c.capacity})
                    testRopeAttention(t, c, RopeLayout::HalfSplit, p);
            }
            {
                const AttentionCase longChunks{1, 32, 4, 128, 4096};
                const DecodeAttentionPlan fourChunks{4, 1024};
                for (int64_t p : {int64_t(100), int64_t(3 * 1024 + 1000)}) testRopeAttention(t, longChunks, RopeLayout::HalfSplit, p, &fourChunks);
            }
            mergeSplitsInKernel = false;
            testHeadParts(t);
            // And merged in clusters (sm_90+): every case of at most 8 chunks, under both kernels, a plan of 8 chunks
            // of several rounds (1024 keys of 8 query heads per kv head), and a mergeInKernel plan the cluster wins.
            if (deviceRunsClusters()) {
                check(clusterDefault, "the cluster merge is on by default (CWB_ATTENTION_CLUSTER_MERGE unset or not 0)");
                check(!planDecodeAttention({1, 32, 32, 128, 192}, deviceMultiprocessors()).mergeInCluster,
                      "plans merge in clusters only when asked (decodeAttentionClusterMerge is off here)");
                setDecodeAttentionClusterMerge(true);
                const DecodeAttentionPlan asked = planDecodeAttention({1, 32, 32, 128, 192}, deviceMultiprocessors());
                const DecodeAttentionPlan tooMany = planDecodeAttention({1, 8, 2, 64, 4096}, deviceMultiprocessors());
                const DecodeAttentionPlan wideChunks = planDecodeAttention({1, 32, 32, 128, 4 * 1024}, 16);
                setDecodeAttentionClusterMerge(false);
                check(asked.mergeInCluster ==
                          (asked.splits > 1 && asked.splits <= kMaxClusterSplits && asked.keysPerSplit < 128),
                      "a 192-key 7B plan merges in clusters when asked and its chunks fit one");
                check(tooMany.splits > kMaxClusterSplits && !tooMany.mergeInCluster,
                      "a plan of more chunks than a cluster holds keeps the merge kernel");
                check(wideChunks.splits > 1 && wideChunks.splits <= kMaxClusterSplits &&
                          wideChunks.keysPerSplit >= 128 && !wideChunks.mergeInCluster,
                      "chunks of 128+ keys (the 16-byte-row kernel's, slower in clusters) keep the merge kernel");
                check(decodeAttentionWorkspaceBytes({1, 32, 32, 128, 192}, asked) == 0 || !asked.mergeInCluster,
                      "a cluster plan needs no workspace");
                mergeSplitsInCluster = true;
                const int64_t before = clusterPlansRun;
                for (DecodeAttentionKernel k :
                     {DecodeAttentionKernel::Wide, DecodeAttentionKernel::Scalar, DecodeAttentionKernel::OnePass}) {
                    setDecodeAttentionKernel(k);
                    for (size_t i = 0; i < std::size(attention); ++i) {
                        const AttentionCase& c = attention[i];
                        for (int64_t p : {int64_t(0), c.capacity / 2 + 7, c.capacity - 1}) testAttention(t, c, p, splits[i]);
                    }
                    for (const AttentionCase& c : fused)
                        for (int64_t p : {int64_t(0), c.capacity / 2 + 7, c.capacity - 1, c.capacity})
                            testRopeAttention(t, c, RopeLayout::AdjacentPairs, p);
                    const AttentionCase longChunks{1, 64, 8, 128, 8192};
                    const DecodeAttentionPlan eightChunks{8, 1024, true};
                    for (int64_t p : {int64_t(5), int64_t(1024 + 300), int64_t(5 * 1024 + 1000), int64_t(8191)}) {
                        testAttention(t, longChunks, p, 1, &eightChunks);
                        testRopeAttention(t, longChunks, RopeLayout::HalfSplit, p, &eightChunks);
                    }
                }
                setDecodeAttentionKernel(DecodeAttentionKernel::Auto);
                mergeSplitsInCluster = false;
                std::printf("  %lld launches merged in clusters\n", (long long)(clusterPlansRun - before));
                check(clusterPlansRun - before > 0, "the cluster cases ran as cluster plans");
            } else {
                std::printf("  cluster merge not run: this device is below compute capability 9.0\n");
            }
        }
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    setDecodeAttentionClusterMerge(clusterDefault);
    return finish();
}
