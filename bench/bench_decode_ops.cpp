// Time per launch of each op of one decode step at Llama-2-7B shapes (hidden 4096, 32 heads of 128, ffn 11008,
// vocabulary 32000, batch 1), as a decode step replays them: 200 launches captured in one CUDA graph, the graph
// replayed 5 times, the median replay divided by 200. The fused decode kernels (decode_ops.h), with attention at cache
// capacities 192 (the bench's 128 + 64 tokens), 1024 and 4096, and with GQA (32/8, 64/8, 28/4 heads; batch 1 to 8)
// in every division of a kv head's query heads among blocks, the planner's marked; the dense linears through cuBLAS and through the dense
// GEMV (dense_gemv.h) at M = 1, 4 and 8, each launch reading another copy of the weight so that none is served from
// L2; at M = 1 the linears that follow an RMSNorm (q/k/v, gate/up, head) also as rmsNorm + GEMV (two launches)
// against the GEMV with the norm folded in (denseGemvRmsNorm), and gate/up as rmsNorm + GEMV + siluMul (three)
// against rmsNorm + denseGemvSwiGlu and denseGemvSwiGlu with the norm (one); then the sum per token of the 32 blocks
// and the head, GEMVs against the rest, next to the weight-read floor; and last, a whole decode step of these kernels
// (32 blocks + head, 200-300 launches) captured as one graph, with separate norms and SiLU, the norms folded, and
// both folded, with and without programmatic dependent launch: against the sum of its launches timed one by one, the
// difference is what the gaps between dependent launches cost; last, the same step with INT4 (W4A16) block linears,
// with the norms and residual adds as separate kernels and inside the W4A16 launches.
// Needs a GPU; prints markdown tables.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cwb/kernels/decode_ops.h"
#include "cwb/kernels/dense_gemv.h"
#include "cwb/kernels/dependent_launch.h"
#include "cwb/kernels/packed_weight.h"
#include "cwb/kernels/wxa16_gemm.h"

using namespace cwb::kernels;

namespace {

void ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw KernelError(std::string(what) + ": " + cudaGetErrorString(e));
}

template <typename V>
V* deviceZeros(size_t n) {
    V* p = nullptr;
    ok(cudaMalloc(&p, n * sizeof(V) + 16), "cudaMalloc");
    ok(cudaMemset(p, 0, n * sizeof(V) + 16), "cudaMemset");
    return p;
}

// Median over 5 runs of `enqueue` on `stream`, in milliseconds (CUDA events).
double medianMilliseconds(cudaStream_t stream, const std::function<void()>& enqueue) {
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    std::vector<float> ms;
    for (int r = 0; r < 5; ++r) {
        cudaEventRecord(start, stream);
        enqueue();
        cudaEventRecord(stop, stream);
        ok(cudaEventSynchronize(stop), "synchronise");
        float t = 0;
        cudaEventElapsedTime(&t, start, stop);
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return double(ms[ms.size() / 2]);
}

// Microseconds per call of `launch` (which enqueues one kernel, or a sequence, on `stream`) inside a CUDA graph of
// kLaunches calls.
double microsecondsPerLaunch(cudaStream_t stream, const std::function<void()>& launch, int kLaunches = 200) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
    for (int i = 0; i < kLaunches; ++i) launch();
    ok(cudaStreamEndCapture(stream, &graph), "end capture");
    ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    ok(cudaGraphLaunch(exec, stream), "warm-up replay");
    const double ms = medianMilliseconds(stream, [&] { ok(cudaGraphLaunch(exec, stream), "replay"); });
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return ms * 1e3 / kLaunches;
}

void blasOk(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS) throw KernelError(std::string(what) + ": cuBLAS status " + std::to_string(int(s)));
}

// Device-to-device copy of 1 GiB: bytes read + written per second (median of 5).
double copyGBs(cudaStream_t stream) {
    const size_t bytes = size_t(1) << 30;
    void *a = nullptr, *b = nullptr;
    ok(cudaMalloc(&a, bytes), "cudaMalloc");
    ok(cudaMalloc(&b, bytes), "cudaMalloc");
    ok(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream), "copy");
    const double ms =
        medianMilliseconds(stream, [&] { ok(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream), "copy"); });
    cudaFree(a);
    cudaFree(b);
    return 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
}

// One dense linear of the decode step: x [M, K] times W [N, K]ᵀ, plus the residual [M, N] where the runtime adds it.
struct LinearShape {
    const char* name;
    int64_t inputs, outputs;
    bool residual;
    int perToken;   // launches per token in a 32-block model
    bool normed;    // reads an RMSNorm's output (which denseGemvRmsNorm can fold in)
};

// Weights for `shape` spread over a pool larger than L2: launch i reads copy i % copies.
struct WeightPool {
    uint16_t* base = nullptr;
    size_t copies = 0, elements = 0;
    const uint16_t* next() {
        const uint16_t* w = base + (cursor % copies) * elements;
        ++cursor;
        return w;
    }
    size_t cursor = 0;
};

// A random 4-bit g128 packed weight [outputs, inputs] (any word is a valid tiled16x64 weight), scales near 0.01,
// zero 8: for timing only.
TiledIntWeight randomInt4(int64_t inputs, int64_t outputs, uint32_t seed) {
    TiledIntWeight t;
    t.bits = 4;
    t.act = ActType::Float16;
    t.rows = outputs;
    t.cols = inputs;
    t.paddedRows = (outputs + 15) / 16 * 16;
    t.paddedCols = (inputs + 63) / 64 * 64;
    t.groups = (inputs + 127) / 128;
    t.words.resize(size_t(t.tiles() * t.chunks() * 32 * 4));
    uint32_t state = seed * 2654435761u + 1u;
    for (uint32_t& w : t.words) w = state = state * 1664525u + 1013904223u;
    t.scaleZero.resize(size_t(t.tiles() * t.groups * 16));
    const uint32_t zero = floatToHalfBits(8.0f);
    for (size_t i = 0; i < t.scaleZero.size(); ++i)
        t.scaleZero[i] = floatToHalfBits(0.01f * (1.0f + float(i % 7) / 7.0f)) | (zero << 16);
    for (int64_t c = 0; c < t.chunks(); ++c) t.chunkGroup.push_back(int32_t(c * 64 / 128));
    return t;
}

} // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("no CUDA device\n");
        return 77;
    }
    try {
        cudaDeviceProp prop{};
        cudaGetDeviceProperties(&prop, 0);
        cudaStream_t stream;
        ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
        const ActType t = ActType::Float16;
        const int64_t hidden = 4096, heads = 32, hd = 128, ffn = 11008, maxCapacity = 4096;
        auto* x = deviceZeros<uint16_t>(hidden);
        auto* residual = deviceZeros<uint16_t>(hidden);
        auto* sum = deviceZeros<uint16_t>(hidden);
        auto* y = deviceZeros<uint16_t>(2 * ffn);
        auto* weight = deviceZeros<float>(hidden);                    // rmsNorm's weight (fp32)
        auto* foldedNormWeight = deviceZeros<uint16_t>(hidden);       // the GEMV's (activation type)
        auto* qkv = deviceZeros<uint16_t>(3 * hidden);
        auto* qOut = deviceZeros<uint16_t>(hidden);
        auto* keys = deviceZeros<uint16_t>(size_t(heads * maxCapacity * hd));
        auto* values = deviceZeros<uint16_t>(size_t(heads * maxCapacity * hd));
        auto* table = deviceZeros<float>(size_t(maxCapacity * 2 * hd));
        auto* position = deviceZeros<int64_t>(1);
        auto* gateUp = deviceZeros<uint16_t>(2 * ffn);
        auto* out = deviceZeros<uint16_t>(ffn);
        std::printf("GPU: %s (%d SMs)\n\n| kernel (fp16, batch 1) | µs per launch in a CUDA graph |\n| --- | ---: |\n", prop.name,
                    deviceMultiprocessors());
        auto row = [&](const std::string& name, const std::function<void()>& launch) {
            const double us = microsecondsPerLaunch(stream, launch);
            std::printf("| %s | %.2f |\n", name.c_str(), us);
            return us;
        };
        const double normUs = row("rmsNorm 4096", [&] { rmsNorm(x, nullptr, nullptr, weight, y, 1, hidden, 1e-5f, t, stream); });
        row("rmsNorm 4096 + residual", [&] { rmsNorm(x, residual, sum, weight, y, 1, hidden, 1e-5f, t, stream); });
        const double siluUs = row("siluMul 11008", [&] { siluMul(gateUp, 2 * ffn, gateUp + ffn, 2 * ffn, out, 1, ffn, t, stream); });
        double ropeUs = 0, attentionUs = 0, ropeAttentionUs = 0;   // at capacity 192, as in `cwb bench --prompt-tokens 128 --gen-tokens 64`
        for (int64_t capacity : {int64_t(192), int64_t(1024), maxCapacity}) {
            const DecodeAttentionShape s{1, heads, heads, hd, capacity};
            const int64_t last = capacity - 1;
            ok(cudaMemcpy(position, &last, sizeof(last), cudaMemcpyHostToDevice), "position");
            const double ropeThis = row("ropeKvWrite 32+32 heads of 128, capacity " + std::to_string(capacity), [&] {
                ropeKvWrite(qkv, 3 * hidden, qkv + hidden, 3 * hidden, qkv + 2 * hidden, 3 * hidden, table, maxCapacity,
                            RopeLayout::HalfSplit, position, qOut, keys, values, s, t, stream);
            });
            DecodeAttentionPlan plan = planDecodeAttention(s, deviceMultiprocessors());
            plan.mergeInKernel = false;   // these rows: the merge kernel, whatever CWB_ATTENTION_MERGE_IN_KERNEL says
            plan.mergeInCluster = false;  // and whatever the cluster default is
            const size_t bytes = decodeAttentionWorkspaceBytes(s, plan);
            float* ws = deviceZeros<float>(bytes / sizeof(float) + 1);
            const double attentionThis = row("decodeAttention 32/32 heads of 128, " + std::to_string(last + 1) + " keys (" + std::to_string(plan.splits) +
                    " splits of " + std::to_string(plan.keysPerSplit) + ", merge included)",
                [&] { decodeAttention(qOut, keys, values, position, out, s, 0.088f, plan, ws, bytes, t, stream); });
            const double fusedThis = row("ropeDecodeAttention (RoPE, cache write and attention in one launch + merge), " +
                                             std::to_string(last + 1) + " keys",
                [&] {
                    ropeDecodeAttention(qkv, 3 * hidden, qkv + hidden, 3 * hidden, qkv + 2 * hidden, 3 * hidden, table,
                                        maxCapacity, RopeLayout::HalfSplit, position, keys, values, out, s, 0.088f, plan,
                                        ws, bytes, t, stream);
                });
            // Each kernel forced (the rows above are Auto's choice): the scalar one (2- and 4-byte loads; the only
            // one before session 12), the 16-byte-row one in two passes and in one (session 29), same data, same run.
            for (DecodeAttentionKernel k :
                 {DecodeAttentionKernel::Scalar, DecodeAttentionKernel::Wide, DecodeAttentionKernel::OnePass}) {
                const std::string kernel = k == DecodeAttentionKernel::Scalar ? "scalar"
                                           : k == DecodeAttentionKernel::Wide ? "16-byte-row"
                                                                              : "one-pass 16-byte-row";
                setDecodeAttentionKernel(k);
                row("  decodeAttention, " + kernel + " kernel",
                    [&] { decodeAttention(qOut, keys, values, position, out, s, 0.088f, plan, ws, bytes, t, stream); });
                row("  ropeDecodeAttention, " + kernel + " kernel", [&] {
                    ropeDecodeAttention(qkv, 3 * hidden, qkv + hidden, 3 * hidden, qkv + 2 * hidden, 3 * hidden, table,
                                        maxCapacity, RopeLayout::HalfSplit, position, keys, values, out, s, 0.088f,
                                        plan, ws, bytes, t, stream);
                });
            }
            setDecodeAttentionKernel(DecodeAttentionKernel::Auto);
            // The same plan with the chunks merged by the last block of each head inside the attention launch (no
            // merge launch; its counters start zeroed). One chunk per head, the other way to drop the merge launch,
            // measured slower at every length in session 13 (docs/performance.md) and is no longer timed.
            if (plan.splits > 1) {
                DecodeAttentionPlan merged = plan;
                merged.mergeInKernel = true;
                const size_t mergedBytes = decodeAttentionWorkspaceBytes(s, merged);
                float* mergedWs = deviceZeros<float>(mergedBytes / sizeof(float) + 1);
                row("  ropeDecodeAttention, merged by the last block (no merge launch)", [&] {
                    ropeDecodeAttention(qkv, 3 * hidden, qkv + hidden, 3 * hidden, qkv + 2 * hidden, 3 * hidden, table,
                                        maxCapacity, RopeLayout::HalfSplit, position, keys, values, out, s, 0.088f,
                                        merged, mergedWs, mergedBytes, t, stream);
                });
                cudaFree(mergedWs);
                if (plan.splits <= kMaxClusterSplits && deviceRunsClusters()) {
                    DecodeAttentionPlan cluster = plan;   // merged through shared memory in clusters: no workspace
                    cluster.mergeInCluster = true;
                    // Auto's kernel, then both forced: which of chunk length and kernel decides the cost
                    for (DecodeAttentionKernel k :
                         {DecodeAttentionKernel::Auto, DecodeAttentionKernel::Scalar, DecodeAttentionKernel::Wide}) {
                        setDecodeAttentionKernel(k);
                        const std::string kernel = k == DecodeAttentionKernel::Auto     ? ""
                                                   : k == DecodeAttentionKernel::Scalar ? ", scalar kernel"
                                                                                        : ", 16-byte-row kernel";
                        row("  decodeAttention, merged in clusters (no merge launch)" + kernel, [&] {
                            decodeAttention(qOut, keys, values, position, out, s, 0.088f, cluster, nullptr, 0, t, stream);
                        });
                        row("  ropeDecodeAttention, merged in clusters (no merge launch)" + kernel, [&] {
                            ropeDecodeAttention(qkv, 3 * hidden, qkv + hidden, 3 * hidden, qkv + 2 * hidden, 3 * hidden,
                                                table, maxCapacity, RopeLayout::HalfSplit, position, keys, values, out, s,
                                                0.088f, cluster, nullptr, 0, t, stream);
                        });
                    }
                    setDecodeAttentionKernel(DecodeAttentionKernel::Auto);
                }
            }
            std::printf("| (keys and values read at this position: %.1f MB) | |\n", 2.0 * double(heads * capacity * hd * 2) / 1e6);
            cudaFree(ws);
            if (capacity == 192) ropeUs = ropeThis, attentionUs = attentionThis, ropeAttentionUs = fusedThis;
        }
        // Plans by hand (RoPE fused, Auto's kernel): how many chunks per head, and whether all the blocks (and, merged in
        // clusters, all the clusters) run at once. planDecodeAttention took ceil(2 x SMs / heads) chunks per head
        // before session 27 (9 of 480 at 4096 keys on 132 SMs: 288 blocks) and takes the floor now (8 of 512: 256).
        std::printf("\nDecode attention by plan (RoPE fused, fp16, 32/32 heads of 128, last position; blocks at once ="
                    " blocks per SM x SMs):\n\n| keys | plan | merge | blocks | per SM | clusters at once | us |\n"
                    "| ---: | --- | --- | ---: | ---: | ---: | ---: |\n");
        struct ByHand { int64_t capacity, splits, keys; bool cluster; };
        const ByHand byHand[] = {{1024, 8, 128, false}, {1024, 8, 128, true},  {1024, 4, 256, false}, {1024, 4, 256, true},
                                 {2112, 9, 256, false}, {2112, 8, 288, false}, {2112, 8, 288, true},  {2112, 17, 128, false},
                                 {4096, 9, 480, false}, {4096, 8, 512, false}, {4096, 8, 512, true},  {4096, 16, 256, false},
                                 {4096, 32, 128, false}, {4096, 4, 1024, true}};
        for (const ByHand& h : byHand) {
            if (h.cluster && !deviceRunsClusters()) continue;
            const DecodeAttentionShape s{1, heads, heads, hd, h.capacity};
            const int64_t last = h.capacity - 1;
            ok(cudaMemcpy(position, &last, sizeof(last), cudaMemcpyHostToDevice), "position");
            DecodeAttentionPlan plan{h.splits, h.keys, false, h.cluster};
            const size_t bytes = decodeAttentionWorkspaceBytes(s, plan);
            float* ws = deviceZeros<float>(bytes / sizeof(float) + 1);
            const DecodeAttentionOccupancy o = decodeAttentionOccupancy(s, plan, t, true);
            const double us = microsecondsPerLaunch(stream, [&] {
                ropeDecodeAttention(qkv, 3 * hidden, qkv + hidden, 3 * hidden, qkv + 2 * hidden, 3 * hidden, table,
                                    maxCapacity, RopeLayout::HalfSplit, position, keys, values, out, s, 0.088f, plan, ws,
                                    bytes, t, stream);
            });
            const DecodeAttentionPlan chosen = planDecodeAttention(s, deviceMultiprocessors());
            std::printf("| %lld | %lld x %lld%s | %s | %lld | %d | %d | %.2f |\n", (long long)h.capacity, (long long)h.splits,
                        (long long)h.keys, chosen.splits == h.splits && chosen.keysPerSplit == h.keys ? " (planned)" : "",
                        h.cluster ? "cluster" : "kernel", (long long)o.blocks, o.blocksPerMultiprocessor, o.activeClusters, us);
            cudaFree(ws);
        }

        // GQA: every division of a kv head's query heads among blocks (DecodeAttentionPlan::headParts; one part is the
        // planner before session 29), the planner's choice marked, at the shapes of Llama-3-8B / Mistral-7B (32/8),
        // Llama-2-70B (64/8) and Qwen2-7B (28/4), at batch 1 and, for 32/8 and 64/8, batch 2, 4 and 8 and 8192 and
        // 16384 keys (the data the head-parts rule is fitted to), and 64/8 at batch 6 and 7 and 2112 keys, where 2 parts
        // would take 3 chunks of 1024 (a second wave). Own buffers: q/k/v rows, outputs and a RoPE table for up to 8
        // sequences and 16384 positions (the caches above hold every case).
        std::printf("\nDecode attention with GQA (RoPE fused, fp16, heads of 128, last position, Auto's kernel): each division"
                    " of a kv head's query heads among blocks (parts), the planner's marked\n\n| heads / kv heads | batch |"
                    " keys | parts | plan | us | against one part |\n| --- | ---: | ---: | ---: | --- | ---: | ---: |\n");
        struct GqaCase { int64_t heads, kvHeads, batch, capacity; };
        const GqaCase gqa[] = {{32, 8, 1, 192},  {32, 8, 1, 1024}, {32, 8, 1, 4096}, {64, 8, 1, 192},  {64, 8, 1, 1024},
                               {64, 8, 1, 2048}, {64, 8, 1, 2112}, {64, 8, 1, 4096}, {28, 4, 1, 192},  {28, 4, 1, 1024},
                               {32, 8, 2, 1024}, {32, 8, 2, 2048}, {32, 8, 4, 1024}, {32, 8, 4, 2048}, {64, 8, 2, 1024},
                               {64, 8, 2, 2048}, {32, 8, 2, 4096}, {32, 8, 8, 1024}, {64, 8, 8, 1024}, {32, 8, 1, 8192},
                               {64, 8, 1, 8192}, {32, 8, 4, 4096}, {64, 8, 4, 1024}, {64, 8, 4, 2048}, {64, 8, 8, 2048},
                               {32, 8, 1, 16384}, {64, 8, 1, 16384}, {64, 8, 6, 2112}, {64, 8, 7, 2112}};
        constexpr int64_t kGqaMaxBatch = 8, kGqaMaxPositions = 16384;
        auto* gqaQkv = deviceZeros<uint16_t>(kGqaMaxBatch * (64 + 2 * 8) * hd);   // q/k/v of the widest case
        auto* gqaOut = deviceZeros<uint16_t>(kGqaMaxBatch * 64 * hd);
        auto* gqaTable = deviceZeros<float>(size_t(kGqaMaxPositions * 2 * hd));
        int gqaCases = 0, plannerBest = 0;   // how often the planner's head parts were the fastest division
        double worstMiss = 1.0;
        std::string worstCase;
        for (const GqaCase& g : gqa) {
            const DecodeAttentionShape s{g.batch, g.heads, g.kvHeads, hd, g.capacity};
            if (g.batch * g.kvHeads * g.capacity > heads * maxCapacity || g.batch > kGqaMaxBatch ||
                g.capacity > kGqaMaxPositions)
                continue;   // past the buffers
            const int64_t last = g.capacity - 1, width = (g.heads + 2 * g.kvHeads) * hd;
            ok(cudaMemcpy(position, &last, sizeof(last), cudaMemcpyHostToDevice), "position");
            auto timed = [&](const DecodeAttentionPlan& plan) {
                const size_t bytes = decodeAttentionWorkspaceBytes(s, plan);
                float* ws = deviceZeros<float>(bytes / sizeof(float) + 1);
                const double us = microsecondsPerLaunch(stream, [&] {
                    ropeDecodeAttention(gqaQkv, width, gqaQkv + g.heads * hd, width, gqaQkv + (g.heads + g.kvHeads) * hd,
                                        width, gqaTable, kGqaMaxPositions, RopeLayout::HalfSplit, position, keys, values,
                                        gqaOut, s, 0.088f, plan, ws, bytes, t, stream);
                });
                cudaFree(ws);
                return us;
            };
            const int64_t planned = planDecodeAttention(s, deviceMultiprocessors()).headParts;
            double oneUs = 0, bestUs = 0, plannedUs = 0;
            for (int64_t parts = 1; parts <= g.heads / g.kvHeads; ++parts) {
                if ((g.heads / g.kvHeads) % parts != 0) continue;
                const DecodeAttentionPlan p = planDecodeAttention(s, deviceMultiprocessors(), parts);
                const double us = timed(p);
                if (parts == 1) oneUs = us;
                if (parts == 1 || us < bestUs) bestUs = us;
                if (parts == planned) plannedUs = us;
                std::printf("| %lld / %lld | %lld | %lld | %lld%s | %lld x %lld%s | %.2f | %.2fx |\n", (long long)g.heads,
                            (long long)g.kvHeads, (long long)g.batch, (long long)g.capacity, (long long)parts,
                            parts == planned ? " (planned)" : "", (long long)p.splits, (long long)p.keysPerSplit,
                            p.mergeInCluster ? ", cluster" : "", us, oneUs / us);
            }
            ++gqaCases;
            if (plannedUs <= bestUs * 1.0001) {
                ++plannerBest;
            } else if (plannedUs / bestUs > worstMiss) {
                worstMiss = plannedUs / bestUs;
                worstCase = std::to_string(g.heads) + "/" + std::to_string(g.kvHeads) + " heads, batch " +
                            std::to_string(g.batch) + ", " + std::to_string(g.capacity) + " keys";
            }
        }
        std::printf("\nThe planner's division was the fastest in %d of %d cases", plannerBest, gqaCases);
        if (plannerBest < gqaCases)
            std::printf("; its worst: %s, %.1f%% slower than the fastest", worstCase.c_str(), 100.0 * (worstMiss - 1.0));
        std::printf("\n");
        cudaFree(gqaQkv);
        cudaFree(gqaOut);
        cudaFree(gqaTable);

        // Dense linears: cuBLAS (what at::linear / at::addmm call) against the GEMV, same data, same run.
        const double copy = copyGBs(stream);
        std::printf("\nDevice-to-device copy: %.0f GB/s (read + write)\n\n", copy);
        cublasHandle_t blas;
        blasOk(cublasCreate(&blas), "cublasCreate");
        blasOk(cublasSetStream(blas, stream), "cublasSetStream");
        void* blasWorkspace = deviceZeros<uint8_t>(size_t(32) << 20);
        blasOk(cublasSetWorkspace(blas, blasWorkspace, size_t(32) << 20), "cublasSetWorkspace");
        const LinearShape shapes[] = {{"qkv_proj (fused q, k, v)", hidden, 3 * hidden, false, 32, true},
                                      {"o_proj + residual", hidden, hidden, true, 32, false},
                                      {"gate_up_proj (fused)", hidden, 2 * ffn, false, 32, true},
                                      {"down_proj + residual", ffn, hidden, true, 32, false},
                                      {"lm_head", hidden, 32000, false, 1, true}};
        const size_t poolElements = size_t(3) << 29;   // 3 GiB of fp16: every shape has 5+ copies, far past L2
        auto* pool = deviceZeros<uint16_t>(poolElements);
        auto* gx = deviceZeros<uint16_t>(size_t(8 * ffn));
        auto* gy = deviceZeros<uint16_t>(size_t(8 * 32000));
        auto* gr = deviceZeros<uint16_t>(size_t(8 * 32000));
        // Per token at M = 1: every linear's GEMV; with the norms folded (the linears after a norm also count their
        // siluMul there); with the norms and SiLU * up folded.
        double gemvTokenUs = 0, cublasTokenUs = 0, foldedTokenUs = 0, allFoldedTokenUs = 0, weightBytes = 0;
        std::vector<std::string> foldedRows;   // the RMSNorm table, printed after the first
        std::printf("| linear (fp16) | M | cuBLAS µs | GB/s | %% of copy | GEMV µs | GB/s | %% of copy | GEMV speed-up |\n"
                    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for (const LinearShape& l : shapes) {
            WeightPool weights{pool, poolElements / size_t(l.inputs * l.outputs), size_t(l.inputs * l.outputs)};
            weightBytes += double(l.perToken) * double(weights.elements) * 2.0;
            for (int64_t m : {int64_t(1), int64_t(4), int64_t(8)}) {
                const float alpha = 1.0f, beta = l.residual ? 1.0f : 0.0f;
                // With the residual, y = W x + y in place (beta 1), as at::addmm adds its input.
                const double cublasUs = microsecondsPerLaunch(stream, [&] {
                    blasOk(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(l.outputs), int(m), int(l.inputs), &alpha,
                                        weights.next(), CUDA_R_16F, int(l.inputs), gx, CUDA_R_16F, int(l.inputs), &beta, gy,
                                        CUDA_R_16F, int(l.outputs), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           "cublasGemmEx");
                });
                DenseGemvShape g;
                g.rows = m;
                g.outputs = l.outputs;
                g.inputs = l.inputs;
                g.xStride = l.inputs;
                g.yStride = g.residualStride = l.outputs;
                const double gemvUs = microsecondsPerLaunch(stream, [&] {
                    denseGemv(gx, weights.next(), nullptr, l.residual ? gr : nullptr, gy, g, t, stream);
                });
                const double bytes = double(weights.elements + size_t(m * (l.inputs + l.outputs * (l.residual ? 2 : 1)))) * 2.0;
                const double blasGBs = bytes / (cublasUs * 1e3), gemvGBs = bytes / (gemvUs * 1e3);
                std::printf("| %s %lldx%lld | %lld | %.2f | %.0f | %.0f%% | %.2f | %.0f | %.0f%% | %.2fx |\n", l.name,
                            (long long)l.inputs, (long long)l.outputs, (long long)m, cublasUs, blasGBs,
                            100.0 * blasGBs / copy, gemvUs, gemvGBs, 100.0 * gemvGBs / copy, cublasUs / gemvUs);
                if (m == 1) {
                    gemvTokenUs += l.perToken * gemvUs;
                    cublasTokenUs += l.perToken * cublasUs;
                    if (!l.normed) foldedTokenUs += l.perToken * gemvUs, allFoldedTokenUs += l.perToken * gemvUs;
                }
                if (m != 1 || !l.normed) continue;
                // The norm's input is the raw residual stream gr; separately it writes y, which the GEMV then reads.
                GemvRmsNorm norm;
                norm.weight = foldedNormWeight;
                const bool gateUpShape = l.outputs == 2 * ffn;
                DenseGemvShape half = g;   // the SwiGLU forms write ffn outputs from the 2 ffn rows
                half.outputs = half.yStride = ffn;
                const double separateUs = microsecondsPerLaunch(stream, [&] {
                    rmsNorm(gr, nullptr, nullptr, weight, gx, 1, l.inputs, 1e-5f, t, stream);
                    denseGemv(gx, weights.next(), nullptr, nullptr, gy, g, t, stream);
                    if (gateUpShape) siluMul(gy, 2 * ffn, gy + ffn, 2 * ffn, out, 1, ffn, t, stream);
                });
                const double foldedUs = microsecondsPerLaunch(stream, [&] {
                    denseGemvRmsNorm(gr, norm, weights.next(), nullptr, nullptr, gy, g, t, stream);
                    if (gateUpShape) siluMul(gy, 2 * ffn, gy + ffn, 2 * ffn, out, 1, ffn, t, stream);
                });
                char line[512];
                std::snprintf(line, sizeof(line), "| %s | %.2f | %.2f (%.2fx) |", l.name, separateUs, foldedUs,
                              separateUs / foldedUs);
                std::string text = line;
                if (gateUpShape) {
                    const double swiGluUs = microsecondsPerLaunch(stream, [&] {
                        rmsNorm(gr, nullptr, nullptr, weight, gx, 1, l.inputs, 1e-5f, t, stream);
                        denseGemvSwiGlu(gx, nullptr, weights.next(), nullptr, out, half, t, stream);
                    });
                    const double bothUs = microsecondsPerLaunch(stream, [&] {
                        denseGemvSwiGlu(gr, &norm, weights.next(), nullptr, out, half, t, stream);
                    });
                    std::snprintf(line, sizeof(line), " %.2f (%.2fx) | %.2f (%.2fx) |", swiGluUs, separateUs / swiGluUs,
                                  bothUs, separateUs / bothUs);
                    text += line;
                    allFoldedTokenUs += l.perToken * bothUs;
                } else {
                    text += " | |";
                    allFoldedTokenUs += l.perToken * foldedUs;
                }
                foldedRows.push_back(text);
                foldedTokenUs += l.perToken * foldedUs;
            }
        }
        std::printf("\nRMSNorm (and SiLU * up) folded into the GEMV at M = 1 (x read raw; µs per group of launches in a"
                    " CUDA graph, speed-up over the separate launches):\n\n"
                    "| linear (fp16) | rmsNorm + GEMV (+ siluMul) µs | GEMV with RMSNorm (+ siluMul) µs |"
                    " rmsNorm + GEMV with SwiGLU µs | GEMV with RMSNorm and SwiGLU µs |\n| --- | ---: | ---: | ---: | ---: |\n");
        for (const std::string& line : foldedRows) std::printf("%s\n", line.c_str());
        // Per token: 32 blocks of (2 RMSNorms, RoPE + cache write, attention, SiLU * up) plus the final RMSNorm; the
        // embedding gather and the logits' fp32 cast are left out.
        const double restUs = 32 * (2 * normUs + ropeAttentionUs + siluUs) + normUs;   // RoPE fused into attention
        const double floorUs = weightBytes / (copy * 1e3);
        std::printf("\nPer token, 32 blocks + head, sum of the launches above (attention at 192 keys):\n\n"
                    "| | linears ms | other kernels ms | sum ms | weight-read floor ms | sum / floor |\n"
                    "| --- | ---: | ---: | ---: | ---: | ---: |\n");
        // Folded: the norms are inside the GEMVs, and gate/up's siluMul is counted with it above.
        const double restFoldedUs = 32 * ropeAttentionUs;
        std::printf("\n(RoPE + cache write and attention: %.2f + %.2f us as two launches, %.2f us as one.)\n", ropeUs,
                    attentionUs, ropeAttentionUs);
        for (const auto& [name, linearUs, otherUs] :
             {std::tuple<const char*, double, double>{"cuBLAS", cublasTokenUs, restUs},
              {"dense GEMV", gemvTokenUs, restUs},
              {"dense GEMV, RMSNorm folded in", foldedTokenUs, restFoldedUs},
              {"dense GEMV, RMSNorm and SiLU * up folded in", allFoldedTokenUs, restFoldedUs}})
            std::printf("| %s | %.3f | %.3f | %.3f | %.3f | %.2fx |\n", name, linearUs / 1e3, otherUs / 1e3,
                        (linearUs + otherUs) / 1e3, floorUs / 1e3, (linearUs + otherUs) / floorUs);
        // The 2:4 GEMV on packed rows (values K/2 + positions K/16 words per row) against the dense GEMV, in the forms
        // decode uses: q/k/v and gate/up with the RMSNorm folded in (gate/up with SwiGLU too), o/down with the
        // residual. The pool's zeros are a valid packed weight; the kernels' work does not depend on the values.
        std::printf("\n2:4 GEMV on packed rows (1.125 K bytes per row) against the dense GEMV, decode forms, µs per launch"
                    " in a CUDA graph (GB/s of the bytes each reads):\n\n"
                    "| linear (fp16) | M | dense GEMV µs | GB/s | 2:4 GEMV µs | GB/s | %% of copy | speed-up |\n"
                    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        double denseBlockUs = 0, sparseBlockUs = 0;
        for (const LinearShape& l : shapes) {
            if (l.perToken != 32) continue;   // the block linears (a pruned model keeps its head dense)
            const size_t elements = size_t(l.inputs * l.outputs), packedHalves = elements / 2 + elements / 16;
            WeightPool dense{pool, poolElements / elements, elements};
            const size_t packedCopies = poolElements / packedHalves;
            size_t packedCursor = 0;
            auto nextPacked = [&] {
                const uint16_t* base = pool + (packedCursor++ % packedCopies) * packedHalves;
                return Sparse24RowsWeight{base, base + elements / 2};
            };
            const bool gateUpShape = l.outputs == 2 * ffn;
            for (int64_t m : {int64_t(1), int64_t(4)}) {
                DenseGemvShape g;
                g.rows = m;
                g.outputs = gateUpShape ? ffn : l.outputs;
                g.inputs = l.inputs;
                g.xStride = l.inputs;
                g.yStride = g.residualStride = g.outputs;
                GemvRmsNorm norm;
                norm.weight = foldedNormWeight;
                uint16_t* y = gy;   // room for 8 rows of every shape
                const double denseUs = microsecondsPerLaunch(stream, [&] {
                    if (gateUpShape) denseGemvSwiGlu(gr, &norm, dense.next(), nullptr, y, g, t, stream);
                    else if (l.normed) denseGemvRmsNorm(gr, norm, dense.next(), nullptr, nullptr, y, g, t, stream);
                    else denseGemv(gx, dense.next(), nullptr, gr, y, g, t, stream);
                });
                const double sparseUs = microsecondsPerLaunch(stream, [&] {
                    if (gateUpShape) sparse24GemvSwiGlu(gr, &norm, nextPacked(), nullptr, y, g, t, stream);
                    else if (l.normed) sparse24GemvRmsNorm(gr, norm, nextPacked(), nullptr, nullptr, y, g, t, stream);
                    else sparse24Gemv(gx, nextPacked(), nullptr, gr, y, g, t, stream);
                });
                const double denseGBs = double(elements) * 2.0 / (denseUs * 1e3);
                const double sparseGBs = double(packedHalves) * 2.0 / (sparseUs * 1e3);
                std::printf("| %s %lldx%lld | %lld | %.2f | %.0f | %.2f | %.0f | %.0f%% | %.2fx |\n", l.name,
                            (long long)l.inputs, (long long)l.outputs, (long long)m, denseUs, denseGBs, sparseUs,
                            sparseGBs, 100.0 * sparseGBs / copy, denseUs / sparseUs);
                if (m == 1) denseBlockUs += l.perToken * denseUs, sparseBlockUs += l.perToken * sparseUs;
            }
        }
        std::printf("\nPer token at M = 1, the 32 blocks' linears: dense GEMV %.3f ms, 2:4 GEMV %.3f ms (%.2fx)\n",
                    denseBlockUs / 1e3, sparseBlockUs / 1e3, denseBlockUs / sparseBlockUs);
        // A whole decode step of the kernels above: every weight read from a new place in the pool (never from L2).
        const int64_t last = 191;   // 192 keys, as above
        ok(cudaMemcpy(position, &last, sizeof(last), cudaMemcpyHostToDevice), "position");
        const DecodeAttentionShape attention{1, heads, heads, hd, 192};
        DecodeAttentionPlan plan = planDecodeAttention(attention, deviceMultiprocessors());
        plan.mergeInKernel = false;   // the merge kernel, except in the steps that say otherwise
        plan.mergeInCluster = false;
        const size_t workspaceBytes = decodeAttentionWorkspaceBytes(attention, plan);
        float* workspace = deviceZeros<float>(workspaceBytes / sizeof(float) + 1);
        DecodeAttentionPlan mergedPlan = plan;   // the chunks merged inside the attention launch (counters zeroed)
        mergedPlan.mergeInKernel = plan.splits > 1;
        const size_t mergedBytes = decodeAttentionWorkspaceBytes(attention, mergedPlan);
        float* mergedWorkspace = deviceZeros<float>(mergedBytes / sizeof(float) + 1);
        DecodeAttentionPlan clusterPlan = plan;   // the chunks merged in thread-block clusters (sm_90+, no workspace)
        clusterPlan.mergeInCluster = plan.splits > 1 && plan.splits <= kMaxClusterSplits && deviceRunsClusters();
        auto* cacheKeys = deviceZeros<uint16_t>(size_t(heads * 192 * hd));
        auto* cacheValues = deviceZeros<uint16_t>(size_t(heads * 192 * hd));
        size_t cursor = 0;
        auto weightOf = [&](int64_t elements) {   // consecutive regions of the pool, wrapping around
            if (cursor + size_t(elements) > poolElements) cursor = 0;
            const uint16_t* w = pool + cursor;
            cursor += size_t(elements);
            return w;
        };
        auto gemvShape = [](int64_t inputs, int64_t outputs) {
            DenseGemvShape g;
            g.outputs = outputs;
            g.inputs = g.xStride = inputs;
            g.yStride = g.residualStride = outputs;
            return g;
        };
        auto* stream_x = residual;   // the residual stream, updated in place by o_proj and down_proj
        auto normedLinear = [&](bool fold, int64_t outputs, uint16_t* result) {
            const DenseGemvShape g = gemvShape(hidden, outputs);
            if (fold) {
                GemvRmsNorm norm;
                norm.weight = foldedNormWeight;
                denseGemvRmsNorm(stream_x, norm, weightOf(hidden * outputs), nullptr, nullptr, result, g, t, stream);
            } else {
                rmsNorm(stream_x, nullptr, nullptr, weight, x, 1, hidden, 1e-5f, t, stream);
                denseGemv(x, weightOf(hidden * outputs), nullptr, nullptr, result, g, t, stream);
            }
        };
        bool mergeInKernel = false, mergeInCluster = false;
        auto ropeAttention = [&] {   // as the runtime runs it: one launch (+ the merge, unless merged in the launch)
            ropeDecodeAttention(qkv, 3 * hidden, qkv + hidden, 3 * hidden, qkv + 2 * hidden, 3 * hidden, table, maxCapacity,
                                RopeLayout::HalfSplit, position, cacheKeys, cacheValues, out, attention, 0.088f,
                                mergeInCluster ? clusterPlan : mergeInKernel ? mergedPlan : plan,
                                mergeInKernel ? mergedWorkspace : workspace, mergeInKernel ? mergedBytes : workspaceBytes,
                                t, stream);
        };
        enum class Folding { None, Norms, NormsAndSwiGlu };
        auto decodeStep = [&](Folding folding) {
            const bool fold = folding != Folding::None;
            for (int layer = 0; layer < 32; ++layer) {
                normedLinear(fold, 3 * hidden, qkv);
                ropeAttention();
                denseGemv(out, weightOf(hidden * hidden), nullptr, stream_x, stream_x, gemvShape(hidden, hidden), t, stream);
                if (folding == Folding::NormsAndSwiGlu) {
                    GemvRmsNorm norm;
                    norm.weight = foldedNormWeight;
                    DenseGemvShape g = gemvShape(hidden, ffn);
                    denseGemvSwiGlu(stream_x, &norm, weightOf(2 * ffn * hidden), nullptr, out, g, t, stream);
                } else {
                    normedLinear(fold, 2 * ffn, gateUp);
                    siluMul(gateUp, 2 * ffn, gateUp + ffn, 2 * ffn, out, 1, ffn, t, stream);
                }
                denseGemv(out, weightOf(ffn * hidden), nullptr, stream_x, stream_x, gemvShape(ffn, hidden), t, stream);
            }
            normedLinear(fold, 32000, gy);
        };
        std::printf("\nOne decode step of these kernels in one CUDA graph (32 blocks + head, attention at 192 keys; median"
                    " of 5 replays of 3 steps):\n\n| RMSNorm, SiLU * up | launches | ms, PDL off | ms, PDL on | PDL speed-up |\n"
                    "| --- | ---: | ---: | ---: | ---: |\n");
        const bool pdlBefore = programmaticDependentLaunch();
        for (Folding folding : {Folding::None, Folding::Norms, Folding::NormsAndSwiGlu}) {
            double stepMs[2] = {0, 0};
            for (bool pdl : {false, true}) {
                setProgrammaticDependentLaunch(pdl);
                stepMs[pdl] = microsecondsPerLaunch(stream, [&] { decodeStep(folding); }, 3) / 1e3;
            }
            // Per block: norm, q/k/v, RoPE with attention (+ merge), o_proj, norm, gate/up, siluMul, down_proj.
            const int perBlock = folding == Folding::None ? 8 : folding == Folding::Norms ? 6 : 5;
            const int launches = 32 * perBlock + (plan.splits > 1 ? 32 : 0) + (folding == Folding::None ? 2 : 1);
            const char* name = folding == Folding::None    ? "separate kernels"
                               : folding == Folding::Norms ? "norms folded into the GEMV"
                                                           : "norms and SiLU * up folded into the GEMV";
            std::printf("| %s | %d | %.3f | %.3f | %.2fx |\n", name, launches, stepMs[0], stepMs[1], stepMs[0] / stepMs[1]);
        }
        // The same step with INT4 (W4A16 g128) block linears, the head dense: as the runtime ran it before
        // (rmsNorm before q/k/v; o_proj, then rmsNorm adding the residual; siluMul; down_proj, then the residual add,
        // here rmsNorm's add standing in for at::add) and with the norms and residual adds inside the W4A16 launches
        // (Wxa16Fusion). Two copies of each weight alternate: 200 MB between two reads of one, far past L2.
        {
            struct Int4Linear { std::vector<std::unique_ptr<DeviceTiledWeight>> copies; int next = 0; };
            auto make = [&](int64_t inputs, int64_t outputs, uint32_t seed) {
                Int4Linear l;
                const TiledIntWeight host = randomInt4(inputs, outputs, seed);
                for (int c = 0; c < 2; ++c) l.copies.push_back(std::make_unique<DeviceTiledWeight>(host));
                return l;
            };
            Int4Linear qkvW = make(hidden, 3 * hidden, 1), oW = make(hidden, hidden, 2), gateUpW = make(hidden, 2 * ffn, 3),
                       downW = make(ffn, hidden, 4);
            const size_t wsBytes = size_t(64) << 20;
            void* ws = allocateWorkspace(wsBytes);
            auto w4 = [&](Int4Linear& l, const void* in, void* result, const Wxa16Fusion& fusion) {
                const DeviceTiledWeight& w = *l.copies[size_t(l.next++) % l.copies.size()];
                wxa16Gemm(w, in, result, 1, ws, wsBytes, stream, 0, fusion);
            };
            Wxa16Fusion none, normed, plusResidual, normedGlu;
            normed.normWeight = weight;
            plusResidual.residual = stream_x;
            normedGlu.normWeight = weight;   // gate/up writes silu(gate) * up
            normedGlu.swiglu = true;
            enum class Int4Folding { None, NormsAndAdds, AlsoSwiGlu, AlsoMerge, AlsoClusterMerge };
            auto int4Step = [&](Int4Folding folding) {
                const bool fold = folding != Int4Folding::None;
                for (int layer = 0; layer < 32; ++layer) {
                    if (fold) {
                        w4(qkvW, stream_x, qkv, normed);
                    } else {
                        rmsNorm(stream_x, nullptr, nullptr, weight, x, 1, hidden, 1e-5f, t, stream);
                        w4(qkvW, x, qkv, none);
                    }
                    ropeAttention();
                    if (folding == Int4Folding::AlsoSwiGlu || folding == Int4Folding::AlsoMerge ||
                        folding == Int4Folding::AlsoClusterMerge) {
                        w4(oW, out, stream_x, plusResidual);
                        w4(gateUpW, stream_x, out, normedGlu);
                        w4(downW, out, stream_x, plusResidual);
                        continue;
                    }
                    if (fold) {
                        w4(oW, out, stream_x, plusResidual);
                        w4(gateUpW, stream_x, gateUp, normed);
                    } else {
                        w4(oW, out, y, none);
                        rmsNorm(y, stream_x, stream_x, weight, x, 1, hidden, 1e-5f, t, stream);
                        w4(gateUpW, x, gateUp, none);
                    }
                    siluMul(gateUp, 2 * ffn, gateUp + ffn, 2 * ffn, out, 1, ffn, t, stream);
                    if (fold) {
                        w4(downW, out, stream_x, plusResidual);
                    } else {
                        w4(downW, out, y, none);
                        rmsNorm(y, stream_x, stream_x, weight, x, 1, hidden, 1e-5f, t, stream);   // stands in for the add
                    }
                }
                normedLinear(true, 32000, gy);
            };
            std::printf("\n(gate/up %s silu(gate) * up itself at one token here.)\n",
                        wxa16FoldsSwiGlu(*gateUpW.copies[0], 1) ? "writes" : "does NOT write (siluMul runs after it)");
            std::printf("\nOne INT4 decode step (W4A16 g128 block linears, dense head with its norm folded; same"
                        " timing):\n\n| norms and residual adds (SiLU * up) | launches | ms, PDL off | ms, PDL on |"
                        " PDL speed-up |\n| --- | ---: | ---: | ---: | ---: |\n");
            double lastStepMs = 0;   // PDL on, the last folding of the table
            for (Int4Folding folding : {Int4Folding::None, Int4Folding::NormsAndAdds, Int4Folding::AlsoSwiGlu,
                                        Int4Folding::AlsoMerge, Int4Folding::AlsoClusterMerge}) {
                const bool inLaunch = folding == Int4Folding::AlsoMerge || folding == Int4Folding::AlsoClusterMerge;
                if (inLaunch && plan.splits == 1) continue;   // nothing to merge
                if (folding == Int4Folding::AlsoClusterMerge && !clusterPlan.mergeInCluster) continue;
                double stepMs[2] = {0, 0};
                mergeInKernel = folding == Int4Folding::AlsoMerge;
                mergeInCluster = folding == Int4Folding::AlsoClusterMerge;
                for (bool pdl : {false, true}) {
                    setProgrammaticDependentLaunch(pdl);
                    stepMs[pdl] = microsecondsPerLaunch(stream, [&] { int4Step(folding); }, 3) / 1e3;
                }
                mergeInKernel = mergeInCluster = false;
                // attention's merge counted below
                const int perBlock = folding == Int4Folding::None ? 9 : folding == Int4Folding::NormsAndAdds ? 6 : 5;
                const int launches = 32 * perBlock + (plan.splits > 1 && !inLaunch ? 32 : 0) + 1;
                std::printf("| %s | %d | %.3f | %.3f | %.2fx |\n",
                            folding == Int4Folding::None           ? "separate kernels"
                            : folding == Int4Folding::NormsAndAdds ? "inside the W4A16 launches"
                            : folding == Int4Folding::AlsoSwiGlu   ? "inside the W4A16 launches, SiLU * up too"
                            : folding == Int4Folding::AlsoMerge    ? "the same, attention merged in its launch"
                                                                   : "the same, attention merged in clusters",
                            launches, stepMs[0], stepMs[1], stepMs[0] / stepMs[1]);
                lastStepMs = stepMs[1];
            }
            // The last step above by launch: each of a block's launches 64 times in a CUDA graph with PDL on, every
            // weight read from one of enough copies that 128+ MB lie between two reads of one (not from L2), against
            // its bytes at copy speed. What the sum misses of the step is what launches of different kernels lose
            // (or gain) next to each other.
            {
                auto spread = [&](int64_t inputs, int64_t outputs, uint32_t seed, double& mb) {
                    Int4Linear l;
                    const TiledIntWeight host = randomInt4(inputs, outputs, seed);
                    mb = double((host.words.size() + host.scaleZero.size()) * sizeof(uint32_t)) / 1e6;
                    const int copies = std::max(2, int(std::ceil(128.0 / mb)) + 1);
                    for (int c = 0; c < copies; ++c) l.copies.push_back(std::make_unique<DeviceTiledWeight>(host));
                    return l;
                };
                double qkvMb = 0, oMb = 0, gateUpMb = 0, downMb = 0;
                Int4Linear qkvS = spread(hidden, 3 * hidden, 1, qkvMb), oS = spread(hidden, hidden, 2, oMb),
                           gateUpS = spread(hidden, 2 * ffn, 3, gateUpMb), downS = spread(ffn, hidden, 4, downMb);
                const double attentionMb = 2.0 * double(heads * 192 * hd * 2) / 1e6, headMb = double(32000 * hidden * 2) / 1e6;
                setProgrammaticDependentLaunch(true);
                mergeInCluster = clusterPlan.mergeInCluster;
                std::printf("\nThat INT4 step by launch (each launch 64 times in a CUDA graph, PDL on, weights read from copies"
                            " 128+ MB apart):\n\n| launch | MB read | µs | %% of copy | x 32 blocks, ms |\n"
                            "| --- | ---: | ---: | ---: | ---: |\n");
                double blockUs = 0, blockMb = 0;
                auto launchRow = [&](const char* name, double mb, int times, const std::function<void()>& launch) {
                    const double us = microsecondsPerLaunch(stream, launch, 64);
                    blockUs += times == 32 ? us : 0.0;
                    blockMb += times == 32 ? mb : 0.0;
                    std::printf("| %s | %.1f | %.2f | %.0f%% | %.3f |\n", name, mb, us, 100.0 * mb * 1e3 / us / copy,
                                times * us / 1e3);
                    return us;
                };
                launchRow("q/k/v 4096x12288, RMSNorm folded", qkvMb, 32, [&] { w4(qkvS, stream_x, qkv, normed); });
                launchRow(clusterPlan.mergeInCluster ? "RoPE + attention, 192 keys, merged in clusters"
                                                     : "RoPE + attention, 192 keys (+ merge)",
                          attentionMb, 32, ropeAttention);
                launchRow("o_proj 4096x4096 + residual", oMb, 32, [&] { w4(oS, out, stream_x, plusResidual); });
                launchRow("gate/up 4096x22016, RMSNorm folded, SiLU * up", gateUpMb, 32,
                          [&] { w4(gateUpS, stream_x, out, normedGlu); });
                launchRow("down_proj 11008x4096 + residual", downMb, 32, [&] { w4(downS, out, stream_x, plusResidual); });
                const double headUs = launchRow("head 4096x32000 (fp16), RMSNorm folded", headMb, 1,
                                                [&] { normedLinear(true, 32000, gy); });
                mergeInCluster = false;
                const double sumMs = (32 * blockUs + headUs) / 1e3;
                std::printf("| one block's launches (sum) | %.1f | %.2f | %.0f%% | |\n", blockMb, blockUs,
                            100.0 * blockMb * 1e3 / blockUs / copy);
                std::printf("\nSum of the launches: %.3f ms per step against %.3f ms for the step above; the bytes at copy"
                            " speed: %.3f ms.\n", sumMs, lastStepMs, (32 * blockMb + headMb) * 1e3 / copy / 1e3);
            }
            freeWorkspace(ws);
        }
        setProgrammaticDependentLaunch(pdlBefore);
        std::printf("\n(PDL acts only on compute capability 9.0+: %s here.)\n",
                    programmaticDependentLaunchSupported() ? "supported" : "not supported");
        cudaFree(workspace);
        cudaFree(mergedWorkspace);
        cudaFree(cacheKeys);
        cudaFree(cacheValues);
        cudaFree(keys);
        cudaFree(values);
        cublasDestroy(blas);
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return 0;
}
