// Time per launch of each fused decode kernel (decode_ops.h) at Llama-2-7B shapes (hidden 4096, 32 heads of 128, ffn
// 11008, batch 1), as a decode step replays them: 200 launches captured in one CUDA graph, the graph replayed 5
// times, the median replay divided by 200. Attention at cache capacities 192 (the bench's 128 + 64 tokens), 1024 and
// 4096, at the last position. Needs a GPU; prints a markdown table.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cwb/kernels/decode_ops.h"

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

// Microseconds per launch of `launch` (which enqueues one kernel on `stream`) inside a CUDA graph.
double microsecondsPerLaunch(cudaStream_t stream, const std::function<void()>& launch) {
    constexpr int kLaunches = 200;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
    for (int i = 0; i < kLaunches; ++i) launch();
    ok(cudaStreamEndCapture(stream, &graph), "end capture");
    ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    ok(cudaGraphLaunch(exec, stream), "warm-up replay");
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    std::vector<float> ms;
    for (int r = 0; r < 5; ++r) {
        cudaEventRecord(start, stream);
        ok(cudaGraphLaunch(exec, stream), "replay");
        cudaEventRecord(stop, stream);
        ok(cudaEventSynchronize(stop), "synchronise");
        float t = 0;
        cudaEventElapsedTime(&t, start, stop);
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return double(ms[ms.size() / 2]) * 1e3 / kLaunches;
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
        auto* weight = deviceZeros<float>(hidden);
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
            std::printf("| %s | %.2f |\n", name.c_str(), microsecondsPerLaunch(stream, launch));
        };
        row("rmsNorm 4096", [&] { rmsNorm(x, nullptr, nullptr, weight, y, 1, hidden, 1e-5f, t, stream); });
        row("rmsNorm 4096 + residual", [&] { rmsNorm(x, residual, sum, weight, y, 1, hidden, 1e-5f, t, stream); });
        row("siluMul 11008", [&] { siluMul(gateUp, 2 * ffn, gateUp + ffn, 2 * ffn, out, 1, ffn, t, stream); });
        for (int64_t capacity : {int64_t(192), int64_t(1024), maxCapacity}) {
            const DecodeAttentionShape s{1, heads, heads, hd, capacity};
            const int64_t last = capacity - 1;
            ok(cudaMemcpy(position, &last, sizeof(last), cudaMemcpyHostToDevice), "position");
            row("ropeKvWrite 32+32 heads of 128, capacity " + std::to_string(capacity), [&] {
                ropeKvWrite(qkv, 3 * hidden, qkv + hidden, 3 * hidden, qkv + 2 * hidden, 3 * hidden, table, maxCapacity,
                            RopeLayout::HalfSplit, position, qOut, keys, values, s, t, stream);
            });
            const DecodeAttentionPlan plan = planDecodeAttention(s, deviceMultiprocessors());
            const size_t bytes = decodeAttentionWorkspaceBytes(s, plan);
            float* ws = deviceZeros<float>(bytes / sizeof(float) + 1);
            row("decodeAttention 32/32 heads of 128, " + std::to_string(last + 1) + " keys (" + std::to_string(plan.splits) +
                    " splits of " + std::to_string(plan.keysPerSplit) + ", merge included)",
                [&] { decodeAttention(qOut, keys, values, position, out, s, 0.088f, plan, ws, bytes, t, stream); });
            cudaFree(ws);
        }
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return 0;
}
