// W4A16 / W8A16 GEMM (M = 1..64), FP8 E4M3 and W8A8 int8 through cuBLASLt (M = 2048, 8192) against cuBLAS FP16 on the
// issue's shapes, in one run. Run by hand on a GPU (--quick: two shapes, no FP8):
//   bench_kernels [--out FILE.md] [--sweep-split] [--quick] [--small-m] [--prefill] [--sweep-small]
//   --small-m: M <= 64 only, no FP8 / W8A8. --prefill: also M = 32, 48, 128 and the prefill path (dequantize the
//   packed weight into one fp16 scratch, then cuBLAS), to find where it beats the kernels. --sweep-small: every
//   configuration of the W4A16 small-M kernel at M <= 16 (wxa16SetSmallConfig), best one per shape at the end.
//   --w4-both: at M <= 16 both W4A16 small-M kernels by name (ring; tma on sm_90), beside the same cuBLAS time.
//   --sweep-tma: the TMA kernel's other shapes (wxa16SetTmaConfig), its default shape at splits 1, 2, 4, 8 (2..8 add
//   up in a cluster) and at splits 2, 4 added up through global memory (wxa16SetTmaClusterReduce(false)).
//   --w4-stream: at M <= 16 the stream W4A16 kernel under each of its shapes (wxa16SetStreamConfig) beside the ring
//   kernel; at M = 1 also three floors timed the same way: an empty kernel, a plain read of the packed weight's bytes
//   (16-byte loads, no arithmetic) and our dense fp16 GEMV (denseGemv) on the fp16 weight.
//   --w8-stream: at M <= 16 both W8A16 kernels by name (old; stream under each of its shapes, wxa16SetW8StreamConfig)
//   beside the same cuBLAS time; at M = 1 also a plain read of the packed 8-bit weight's bytes, timed the same way.
//   --shape KxN[,KxN...], --m M: only these shapes (any, not only the six), only that M (for a profiler, or to
//   see how time follows the row tiles' rounds of resident blocks).
//   --stream-configs LIST: with --w4-stream, only these stream shapes (comma-separated indices, e.g. 11,12,15).
//   --l2-resident: one copy of every weight, so that the timed calls read it from L2 where it stays: how fast a kernel
//   runs when the bytes come back at L2 latency. On the H200 only small weights stay (4096x4096 int4, 8.4 MB: a read
//   of it 2.37 against 3.50 us from HBM); from 4096x11008 int4 (23 MB) on, times are within 2% of the HBM ones
//   (session 23).
//   --pdl: launch the W4A16 stream kernel with programmatic dependent launch (the runtime's default), so that each
//   launch loads its first weights while the one before it finishes; off by default here, since cuBLAS cannot.
// Weights are random packed words (any word is a valid tiled16x64 weight; correctness is tests/gpu's job), scales
// near 0.01, activations random; every buffer is filled on the device. Each timing cycles through enough copies of
// the weights to exceed the L2 several times, so the weights come from HBM as in a real model. Time: CUDA events
// around 100 back-to-back launches, median of 9 such batches.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cwb/kernels/dense_gemv.h"
#include "cwb/kernels/dependent_launch.h"
#include "cwb/kernels/dequant_tiled.h"
#include "cwb/kernels/fp8_gemm.h"
#include "cwb/kernels/packed_weight.h"
#include "cwb/kernels/w8a8_gemm.h"
#include "cwb/kernels/wxa16_gemm.h"

using namespace cwb::kernels;

namespace {

#define CHECK_CUDA(call)                                                                                   \
    do {                                                                                                   \
        cudaError_t e_ = (call);                                                                           \
        if (e_ != cudaSuccess) {                                                                           \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            std::exit(1);                                                                                  \
        }                                                                                                  \
    } while (0)
#define CHECK_CUBLAS(call)                                                                   \
    do {                                                                                     \
        cublasStatus_t s_ = (call);                                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                   \
            std::fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #call, int(s_)); \
            std::exit(1);                                                                    \
        }                                                                                    \
    } while (0)

__device__ uint32_t hash32(uint64_t i, uint32_t seed) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return uint32_t(x >> 16);
}
__global__ void fillWords(uint32_t* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = hash32(i, seed);
}
// Values in [-1, 1), as fp16.
__global__ void fillHalf(__half* p, size_t n, uint32_t seed, float scale) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = __float2half(scale * (float(hash32(i, seed) & 0xffff) / 32768.0f - 1.0f));
}

// Finite E4M3 codes (never the NaN codes 0x7F / 0xFF), magnitudes up to 0x7D.
__global__ void fillE4M3(uint8_t* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        const uint32_t h = hash32(i, seed);
        p[i] = uint8_t((h % 0x7Eu) | ((h >> 16) & 0x80u));
    }
}

__global__ void emptyKernel() {}

// Reads n 16-byte words once: each thread issues its 8 loads (streaming past L1) before using any, the grid sized to
// cover n in one pass, so every load of the kernel is in flight at once; one word is written only if the xor of all
// is a value it never is in practice, so the loads cannot be dropped. The speed of a plain read of those bytes.
__global__ void readOnce(const uint4* __restrict__ p, size_t n, uint32_t* sink) {
    const size_t base = blockIdx.x * size_t(blockDim.x) * 8 + threadIdx.x;
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
        const size_t i = base + size_t(u) * blockDim.x;
        if (i < n)
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                         : "l"(p + i));
        else
            v[u] = make_uint4(0, 0, 0, 0);
    }
    uint32_t acc = 0;
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    if (acc == 0x9E3779B9u) *sink = acc;
}

// Every timed launch goes to this stream (created in main), so that --graph can capture it.
cudaStream_t gStream = nullptr;

struct Timer {
    cudaEvent_t a, b;
    double lastHostUs = 0.0;  // host time to issue one call in the last median(): near the GPU time = launch-bound
    bool graph = false;       // --graph: the batch of calls is captured once into a CUDA graph and replayed
    Timer() { cudaEventCreate(&a); cudaEventCreate(&b); }
    ~Timer() { cudaEventDestroy(a); cudaEventDestroy(b); }
    // Median over batches of the time per call, in microseconds.
    double median(const std::function<void(int)>& call, int perBatch = 100, int batches = 9) {
        if (graph) return medianGraph(call, perBatch, batches);
        for (int i = 0; i < 20; ++i) call(i);
        CHECK_CUDA(cudaDeviceSynchronize());
        return timeBatches([&] { for (int i = 0; i < perBatch; ++i) call(i); }, perBatch, batches);
    }
    // The same batch of calls captured into one graph: the GPU time per call without the host's launch rate (the
    // runtime's decode step runs as a graph too). lastHostUs is then the host time per call of one replay.
    double medianGraph(const std::function<void(int)>& call, int perBatch, int batches) {
        cudaGraph_t g = nullptr;
        cudaGraphExec_t exec = nullptr;
        CHECK_CUDA(cudaStreamBeginCapture(gStream, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < perBatch; ++i) call(i);
        CHECK_CUDA(cudaStreamEndCapture(gStream, &g));
        CHECK_CUDA(cudaGraphInstantiate(&exec, g, nullptr, nullptr, 0));
        CHECK_CUDA(cudaGraphLaunch(exec, gStream));
        CHECK_CUDA(cudaStreamSynchronize(gStream));
        const double us = timeBatches([&] { CHECK_CUDA(cudaGraphLaunch(exec, gStream)); }, perBatch, batches);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(g);
        return us;
    }

private:
    // Median over `batches` runs of issueBatch (perBatch calls) of the time per call; sets lastHostUs.
    double timeBatches(const std::function<void()>& issueBatch, int perBatch, int batches) {
        std::vector<double> t, host;
        for (int b_ = 0; b_ < batches; ++b_) {
            cudaEventRecord(a, gStream);
            const auto h0 = std::chrono::steady_clock::now();
            issueBatch();
            host.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count() / perBatch);
            cudaEventRecord(b, gStream);
            CHECK_CUDA(cudaEventSynchronize(b));
            float ms = 0;
            cudaEventElapsedTime(&ms, a, b);
            t.push_back(1000.0 * ms / perBatch);
        }
        CHECK_CUDA(cudaGetLastError());
        std::sort(t.begin(), t.end());
        std::sort(host.begin(), host.end());
        lastHostUs = host[host.size() / 2];
        return t[t.size() / 2];
    }
};

double copyBandwidth(Timer& timer) {
    const size_t bytes = size_t(2) << 30;
    void *src, *dst;
    CHECK_CUDA(cudaMalloc(&src, bytes));
    CHECK_CUDA(cudaMalloc(&dst, bytes));
    fillWords<<<1024, 256>>>(static_cast<uint32_t*>(src), bytes / 4, 1);
    const double us = timer.median([&](int) { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, gStream); }, 5, 9);
    cudaFree(src);
    cudaFree(dst);
    return 2.0 * double(bytes) / (us * 1e3);  // GB/s, bytes read + written
}

// A packed weight of random words for a K x N layer (no host data: the device copy is filled in place).
TiledIntWeight randomTiledShape(int bits, int64_t k, int64_t n, int64_t group) {
    TiledIntWeight t;
    t.bits = bits;
    t.act = ActType::Float16;
    t.rows = n;
    t.cols = k;
    t.paddedRows = (n + 15) / 16 * 16;
    t.paddedCols = (k + 63) / 64 * 64;
    t.groups = (k + group - 1) / group;
    t.words.assign(1, 0u);  // placeholder, sized below on the device
    t.scaleZero.assign(size_t(t.tiles() * t.groups * 16), 0u);
    const uint32_t zero = floatToHalfBits(bits == 4 ? 8.0f : 128.0f);
    for (size_t i = 0; i < t.scaleZero.size(); ++i)
        t.scaleZero[i] = floatToHalfBits(0.01f * (1.0f + float(i % 7) / 7.0f)) | (zero << 16);
    for (int64_t c = 0; c < t.chunks(); ++c) t.chunkGroup.push_back(int32_t(c * 64 / group));
    t.words.assign(size_t(t.tiles() * t.chunks() * 32 * (bits == 4 ? 4 : 8)), 0u);
    return t;
}

struct Row {
    std::string shape;
    int m;
    std::string kernel;
    double us, tflops, gbs, vsCublas, ofCopy;
};

} // namespace

int main(int argc, char** argv) {
    std::string outPath, onlyShape;
    int onlyM = 0;
    std::vector<int> streamConfigs;   // empty: every stream shape
    bool sweep = false, quick = false, smallOnly = false, prefill = false, sweepSmall = false, bothW4 = false,
         sweepTma = false, streamW4 = false, streamW8 = false, graph = false, pdl = false, l2Resident = false;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--out") && i + 1 < argc) outPath = argv[++i];
        else if (!std::strcmp(argv[i], "--sweep-split")) sweep = true;
        else if (!std::strcmp(argv[i], "--quick")) quick = true;
        else if (!std::strcmp(argv[i], "--small-m")) smallOnly = true;
        else if (!std::strcmp(argv[i], "--prefill")) prefill = true;
        else if (!std::strcmp(argv[i], "--sweep-small")) sweepSmall = true;
        else if (!std::strcmp(argv[i], "--w4-both")) bothW4 = true;
        else if (!std::strcmp(argv[i], "--sweep-tma")) sweepTma = true;
        else if (!std::strcmp(argv[i], "--w4-stream")) streamW4 = true;
        else if (!std::strcmp(argv[i], "--w8-stream")) streamW8 = true;
        else if (!std::strcmp(argv[i], "--graph")) graph = true;
        else if (!std::strcmp(argv[i], "--pdl")) pdl = true;
        else if (!std::strcmp(argv[i], "--l2-resident")) l2Resident = true;
        else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) onlyShape = argv[++i];
        else if (!std::strcmp(argv[i], "--m") && i + 1 < argc) onlyM = std::atoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--stream-configs") && i + 1 < argc) {
            for (const char* c = argv[++i]; *c;) {
                char* end = nullptr;
                const long v = std::strtol(c, &end, 10);
                if (end == c || v < 0 || v >= wxa16StreamConfigCount()) {
                    std::fprintf(stderr, "bench_kernels: --stream-configs takes indices in [0, %d), comma-separated\n",
                                 wxa16StreamConfigCount());
                    return 2;
                }
                streamConfigs.push_back(int(v));
                c = *end == ',' ? end + 1 : end;
            }
        } else {
            std::fprintf(stderr, "usage: bench_kernels [--out FILE.md] [--sweep-split] [--quick] [--small-m] [--prefill] "
                                 "[--sweep-small] [--w4-both] [--sweep-tma] [--w4-stream] [--w8-stream] [--graph] "
                                 "[--shape KxN] [--m M] [--pdl] [--l2-resident] [--stream-configs LIST]\n");
            return 2;
        }
    }
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::fprintf(stderr, "bench_kernels: no CUDA device\n");
        return 1;
    }
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    CHECK_CUDA(cudaStreamCreateWithFlags(&gStream, cudaStreamNonBlocking));
    setProgrammaticDependentLaunch(pdl);
    Timer timer;
    const double copyGBs = copyBandwidth(timer);
    timer.graph = graph;
    std::printf("Timing: %s; programmatic dependent launch of the W4A16 stream kernel %s; %s\n",
                graph ? "M <= 128 as CUDA graphs of 100 calls, replayed (no host launch cost)"
                      : "100 back-to-back stream launches per batch",
                pdl ? "on (--pdl)" : "off",
                l2Resident ? "one copy of each weight (--l2-resident: read from L2 where it fits)"
                           : "weights cycled past the L2 (read from HBM)");
    std::printf("GPU %s, %d SMs, L2 %d MB; device-to-device copy %.0f GB/s (read + write); W4A16 m <= 16 kernel: %s; "
                "W8A16 m <= 16 kernel: %s\n",
                prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, copyGBs,
                wxa16SmallKernelName(wxa16SmallKernel()), wxa16W8KernelName(wxa16W8Kernel()));
    cublasHandle_t handle;
    CHECK_CUBLAS(cublasCreate(&handle));
    CHECK_CUBLAS(cublasSetStream(handle, gStream));

    struct Shape { int64_t k, n; };
    std::vector<Shape> shapes = {{4096, 4096}, {4096, 11008}, {11008, 4096}, {8192, 8192}, {8192, 28672}, {28672, 8192}};
    if (quick) shapes = {{4096, 4096}, {4096, 11008}};
    std::vector<int> ms = {1, 4, 16, 64};
    if (prefill) ms = {1, 4, 16, 32, 48, 64, 128};
    if (!onlyShape.empty()) {   // "KxN[,KxN...]": any K a multiple of 128 and N of 16, not only the issue's six
        shapes.clear();
        for (const char* c = onlyShape.c_str(); *c;) {
            char* end = nullptr;
            const long long k = std::strtoll(c, &end, 10);
            const long long n = (end != c && *end == 'x') ? std::strtoll(end + 1, &end, 10) : 0;
            if (k <= 0 || n <= 0 || k % 128 != 0 || n % 16 != 0 || (*end != ',' && *end != '\0')) {
                std::fprintf(stderr, "bench_kernels: --shape takes KxN[,KxN...] with K a multiple of 128 and N of 16 "
                                     "(got \"%s\")\n", onlyShape.c_str());
                return 2;
            }
            shapes.push_back({k, n});
            c = *end == ',' ? end + 1 : end;
        }
    }
    if (onlyM > 0) ms = {onlyM};
    const double l2 = double(prop.l2CacheSize);
    std::vector<Row> rows;

    for (const Shape& s : shapes) {
        const std::string shape = std::to_string(s.k) + "x" + std::to_string(s.n);
        // fp16 weights for cuBLAS, [n, k] row-major, copies cycling past the L2.
        const size_t denseBytes = size_t(s.k * s.n * 2);
        const int denseCopies = l2Resident ? 1 : int(std::clamp(3.0 * l2 / double(denseBytes) + 1.0, 1.0, 16.0));
        std::vector<__half*> dense(static_cast<size_t>(denseCopies));
        for (int c = 0; c < denseCopies; ++c) {
            CHECK_CUDA(cudaMalloc(&dense[size_t(c)], denseBytes));
            fillHalf<<<1024, 256>>>(dense[size_t(c)], size_t(s.k * s.n), 100u + c, 0.02f);
        }
        __half *x, *y;
        const int64_t maxM = quick || smallOnly ? (prefill ? 128 : 64) : 8192;  // large M only for the FP8 comparison
        __half* scratch = nullptr;  // the prefill path's dense weight (one buffer, as in the runtime)
        if (prefill) CHECK_CUDA(cudaMalloc(&scratch, denseBytes));
        CHECK_CUDA(cudaMalloc(&x, size_t(maxM * s.k * 2)));
        CHECK_CUDA(cudaMalloc(&y, size_t(maxM * s.n * 2)));
        fillHalf<<<1024, 256>>>(x, size_t(maxM * s.k), 7u, 1.0f);

        // Quantized copies: 4 and 8 bits, group 128.
        struct Quant { int bits; std::vector<std::unique_ptr<DeviceTiledWeight>> copies; size_t bytes; };
        std::vector<Quant> quants;
        for (int bits : {4, 8}) {
            Quant q{bits, {}, 0};
            const TiledIntWeight host = randomTiledShape(bits, s.k, s.n, 128);
            q.bytes = host.weightBytes();
            const int copies = l2Resident ? 1 : int(std::clamp(3.0 * l2 / double(q.bytes) + 1.0, 1.0, 32.0));
            for (int c = 0; c < copies; ++c) {
                q.copies.push_back(std::make_unique<DeviceTiledWeight>(host));
                fillWords<<<1024, 256>>>(const_cast<uint32_t*>(q.copies.back()->words), host.words.size(), 1000u + c);
            }
            quants.push_back(std::move(q));
        }
        CHECK_CUDA(cudaDeviceSynchronize());

        for (int m : ms) {
            const double flops = 2.0 * m * double(s.k) * double(s.n);
            const double ioBytes = double(m) * double(s.k + s.n) * 2.0;
            const float alpha = 1.0f, beta = 0.0f;
            const double tCublas = timer.median([&](int i) {
                CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(s.n), m, int(s.k), &alpha,
                                          dense[size_t(i % denseCopies)], CUDA_R_16F, int(s.k), x, CUDA_R_16F, int(s.k),
                                          &beta, y, CUDA_R_16F, int(s.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            });
            double hostUs = timer.lastHostUs;
            auto add = [&](const std::string& kernel, double us, double bytes) {
                const double gbs = bytes / (us * 1e3);
                rows.push_back({shape, m, kernel, us, flops / (us * 1e6), gbs, tCublas / us, gbs / copyGBs});
                const Row& r = rows.back();
                std::printf("%-12s M=%-3d %-16s %9.2f us %7.2f TFLOP/s %7.0f GB/s  %5.2fx cuBLAS  %4.0f%% of copy  (host %.1f us/call)\n",
                            r.shape.c_str(), r.m, r.kernel.c_str(), r.us, r.tflops, r.gbs, r.vsCublas, 100 * r.ofCopy, hostUs);
                std::fflush(stdout);
            };
            add("cuBLAS fp16", tCublas, double(denseBytes) + ioBytes);
            for (Quant& q : quants) {
                const DeviceTiledWeight& w0 = *q.copies[0];
                const int chosen = wxa16DefaultSplitK(w0, m);
                std::vector<int> splits = {0};
                if (sweep) splits = {0, 1, 2, 4, 8, 16};
                for (int split : splits) {
                    if (split == chosen) continue;
                    const size_t wsBytes = wxa16WorkspaceBytes(w0, m, split);
                    void* ws = allocateWorkspace(wsBytes);
                    const int nCopies = int(q.copies.size());
                    const double us = timer.median([&](int i) {
                        wxa16Gemm(*q.copies[size_t(i % nCopies)], x, y, m, ws, wsBytes, gStream, split);
                    });
                    hostUs = timer.lastHostUs;
                    freeWorkspace(ws);
                    std::string name = "W" + std::to_string(q.bits) + "A16 g128";
                    if (sweep) name += " s" + std::to_string(split ? split : chosen) + (split ? "" : "*");
                    add(name, us, double(q.bytes) + ioBytes);
                }
                // A kernel that only reads the packed weight's bytes once (no arithmetic), timed the same way.
                auto timeRead = [&] {
                    uint32_t* sink = nullptr;
                    CHECK_CUDA(cudaMalloc(&sink, 4));
                    const int nCopies = int(q.copies.size());
                    const size_t words16 = size_t(w0.paddedRows * w0.paddedCols * q.bits / 128);  // 16-byte words
                    const double read = timer.median([&](int i) {
                        readOnce<<<unsigned((words16 + 2047) / 2048), 256, 0, gStream>>>(
                            reinterpret_cast<const uint4*>(q.copies[size_t(i % nCopies)]->words), words16, sink);
                    });
                    hostUs = timer.lastHostUs;
                    add("read W" + std::to_string(q.bits) + " bytes only", read, double(words16) * 16.0);
                    cudaFree(sink);
                };
                // One W4A16 / W8A16 timing under the small-M kernels, configuration and split in force.
                auto timeW4 = [&](const std::string& name, int split) {
                    const size_t wsBytes = wxa16WorkspaceBytes(w0, m, split);
                    void* ws = allocateWorkspace(wsBytes);
                    const int nCopies = int(q.copies.size());
                    const double us = timer.median([&](int i) {
                        wxa16Gemm(*q.copies[size_t(i % nCopies)], x, y, m, ws, wsBytes, gStream, split);
                    });
                    hostUs = timer.lastHostUs;
                    freeWorkspace(ws);
                    add(name, us, double(q.bytes) + ioBytes);
                };
                const bool smallW4 = q.bits == 4 && m <= 16;
                const W4SmallKernel defaultKernel = wxa16SmallKernel();
                // The other shapes of the ring small-M kernel (the default, 0, was timed above).
                wxa16SetSmallKernel(W4SmallKernel::Ring);
                for (int config = 1; sweepSmall && smallW4 && config < wxa16SmallConfigCount(); ++config) {
                    wxa16SetSmallConfig(config);
                    timeW4("W4A16 g128 config " + std::to_string(config), 0);
                    wxa16SetSmallConfig(0);
                }
                // Both small-M kernels by name, one after the other, beside the same cuBLAS time.
                if (bothW4 && smallW4) {
                    timeW4("W4A16 g128 ring", 0);
                    if (wxa16TmaAvailable()) {
                        wxa16SetSmallKernel(W4SmallKernel::Tma);
                        timeW4("W4A16 g128 tma s" + std::to_string(wxa16DefaultSplitK(w0, m)), 0);
                    }
                }
                // The TMA kernel's other shapes (default split), then its default shape at fixed splits.
                if (sweepTma && smallW4 && wxa16TmaAvailable()) {
                    wxa16SetSmallKernel(W4SmallKernel::Tma);
                    for (int config = 1; config < wxa16TmaConfigCount(); ++config) {
                        wxa16SetTmaConfig(config);
                        timeW4("W4A16 g128 tma c" + std::to_string(config) + " s" +
                                   std::to_string(wxa16DefaultSplitK(w0, m)), 0);
                    }
                    wxa16SetTmaConfig(0);
                    for (int split : {1, 2, 4, 8})
                        if (split != wxa16DefaultSplitK(w0, m)) timeW4("W4A16 g128 tma s" + std::to_string(split), split);
                    wxa16SetTmaClusterReduce(false);  // the same splits through fp32 partials and a last block
                    for (int split : {2, 4})
                        timeW4("W4A16 g128 tma s" + std::to_string(split) + " global", split);
                    wxa16SetTmaClusterReduce(true);
                }
                // The stream kernel's shapes beside the ring kernel; at M = 1 the floors of this timing method.
                if (streamW4 && smallW4) {
                    wxa16SetSmallKernel(W4SmallKernel::Ring);
                    timeW4("W4A16 g128 ring", 0);
                    wxa16SetSmallKernel(W4SmallKernel::Stream);
                    const int defaultStreamConfig = wxa16StreamConfig();
                    for (int config = 0; config < wxa16StreamConfigCount(); ++config) {
                        if (!streamConfigs.empty() &&
                            std::find(streamConfigs.begin(), streamConfigs.end(), config) == streamConfigs.end())
                            continue;
                        wxa16SetStreamConfig(config);
                        timeW4("W4A16 g128 stream c" + std::to_string(config), 0);
                    }
                    wxa16SetStreamConfig(defaultStreamConfig);
                    if (m == 1) {
                        const double empty = timer.median([&](int) { emptyKernel<<<1, 32, 0, gStream>>>(); });
                        hostUs = timer.lastHostUs;
                        add("empty kernel", empty, 0.0);
                        timeRead();
                        DenseGemvShape g;
                        g.outputs = s.n;
                        g.inputs = s.k;
                        g.xStride = s.k;
                        g.yStride = s.n;
                        const double gemv = timer.median([&](int i) {
                            denseGemv(x, dense[size_t(i % denseCopies)], nullptr, nullptr, y, g, ActType::Float16, gStream);
                        });
                        hostUs = timer.lastHostUs;
                        add("dense fp16 GEMV", gemv, double(denseBytes) + ioBytes);
                    }
                }
                wxa16SetSmallKernel(defaultKernel);
                // Both W8A16 kernels by name at M <= 16: old, then the stream kernel in each shape; at M = 1 the read floor.
                if (streamW8 && q.bits == 8 && m <= 16) {
                    const W8SmallKernel defaultW8 = wxa16W8Kernel();
                    const int defaultConfig = wxa16W8StreamConfig();
                    wxa16SetW8Kernel(W8SmallKernel::Old);
                    timeW4("W8A16 g128 old", 0);
                    wxa16SetW8Kernel(W8SmallKernel::Stream);
                    for (int config = 0; config < wxa16W8StreamConfigCount(); ++config) {
                        wxa16SetW8StreamConfig(config);
                        timeW4("W8A16 g128 stream c" + std::to_string(config), 0);
                    }
                    wxa16SetW8StreamConfig(defaultConfig);
                    wxa16SetW8Kernel(defaultW8);
                    if (m == 1) timeRead();
                }
                // Prefill path: dequantize into the scratch, then the same cuBLAS call on it.
                if (prefill && m >= 16) {
                    const int nCopies = int(q.copies.size());
                    if (m == 64) {
                        const double us = timer.median([&](int i) { dequantizeTiled(*q.copies[size_t(i % nCopies)], scratch, gStream); });
                        hostUs = timer.lastHostUs;
                        add("W" + std::to_string(q.bits) + " dequantize only", us, double(q.bytes) + double(denseBytes));
                    }
                    const double us = timer.median([&](int i) {
                        dequantizeTiled(*q.copies[size_t(i % nCopies)], scratch, gStream);
                        CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(s.n), m, int(s.k), &alpha, scratch,
                                                  CUDA_R_16F, int(s.k), x, CUDA_R_16F, int(s.k), &beta, y, CUDA_R_16F,
                                                  int(s.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                    });
                    hostUs = timer.lastHostUs;
                    add("W" + std::to_string(q.bits) + " dequant + cuBLAS", us, double(q.bytes) + ioBytes);
                }
            }
        }
        // FP8 E4M3 through cuBLASLt against cuBLAS fp16 where the issue's target is (M >= 2048).
        timer.graph = false;   // large M is far from launch-bound: always timed as stream launches
        if (!quick && !smallOnly && fp8GemmSupported()) {
            Fp8Gemm fp8;
            uint8_t *w8, *x8;
            float* scales;
            CHECK_CUDA(cudaMalloc(&w8, size_t(s.n * s.k)));
            CHECK_CUDA(cudaMalloc(&x8, size_t(maxM * s.k)));
            CHECK_CUDA(cudaMalloc(&scales, 128 * sizeof(float)));  // two 256-byte aligned slots
            const float hostScales[2] = {0.01f, 0.02f};
            CHECK_CUDA(cudaMemcpy(scales, hostScales, sizeof(float), cudaMemcpyHostToDevice));
            CHECK_CUDA(cudaMemcpy(scales + 64, hostScales + 1, sizeof(float), cudaMemcpyHostToDevice));
            fillE4M3<<<1024, 256>>>(w8, size_t(s.n * s.k), 11u);
            fillE4M3<<<1024, 256>>>(x8, size_t(maxM * s.k), 12u);
            for (int m : {2048, 8192}) {
                const double flops = 2.0 * m * double(s.k) * double(s.n);
                const float alpha = 1.0f, beta = 0.0f;
                const double tCublas = timer.median([&](int) {
                    CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(s.n), m, int(s.k), &alpha, dense[0],
                                              CUDA_R_16F, int(s.k), x, CUDA_R_16F, int(s.k), &beta, y, CUDA_R_16F,
                                              int(s.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                }, 20, 7);
                double tFp8 = 0.0;
                try {
                    tFp8 = timer.median([&](int) {
                        fp8.run(x8, scales, w8, scales + 64, y, ActType::Float16, m, s.n, s.k, gStream);
                    }, 20, 7);
                } catch (const KernelError& e) {
                    std::printf("%-12s M=%-5d FP8 E4M3 cuBLASLt: %s\n", shape.c_str(), m, e.what());
                    continue;
                }
                const double dense16 = double(s.n * s.k) * 2 + double(m) * double(s.k + s.n) * 2;
                const double bytes8 = double(s.n * s.k) + double(m) * double(s.k) + double(m) * double(s.n) * 2;
                for (int which = 0; which < 2; ++which) {
                    const double us = which ? tFp8 : tCublas, gbs = (which ? bytes8 : dense16) / (us * 1e3);
                    rows.push_back({shape, m, which ? "FP8 E4M3 cuBLASLt" : "cuBLAS fp16", us, flops / (us * 1e6), gbs,
                                    tCublas / us, gbs / copyGBs});
                    std::printf("%-12s M=%-5d %-18s %9.2f us %7.1f TFLOP/s  %5.2fx cuBLAS\n", shape.c_str(), m,
                                rows.back().kernel.c_str(), us, rows.back().tflops, rows.back().vsCublas);
                }
            }
            // W8A8 int8 (cuBLASLt IMMA + scale epilogue) on the same random bytes read as int8.
            W8a8Gemm int8;
            float *rowScales, *colScales;
            CHECK_CUDA(cudaMalloc(&rowScales, size_t(maxM) * sizeof(float)));
            CHECK_CUDA(cudaMalloc(&colScales, size_t(s.n) * sizeof(float)));
            {
                const std::vector<float> hostRow(size_t(maxM), 0.01f), hostCol(size_t(s.n), 0.02f);
                CHECK_CUDA(cudaMemcpy(rowScales, hostRow.data(), hostRow.size() * 4, cudaMemcpyHostToDevice));
                CHECK_CUDA(cudaMemcpy(colScales, hostCol.data(), hostCol.size() * 4, cudaMemcpyHostToDevice));
            }
            for (int m : {2048, 8192}) {
                const double flops = 2.0 * m * double(s.k) * double(s.n);
                double t8 = 0.0;
                try {
                    t8 = timer.median([&](int) {
                        int8.run(reinterpret_cast<const int8_t*>(x8), rowScales, reinterpret_cast<const int8_t*>(w8),
                                 colScales, y, ActType::Float16, m, s.n, s.k, gStream);
                    }, 20, 7);
                } catch (const KernelError& e) {
                    std::printf("%-12s M=%-5d W8A8 int8: %s\n", shape.c_str(), m, e.what());
                    continue;
                }
                double tCublas = 0.0;
                for (const Row& r : rows)
                    if (r.shape == shape && r.m == m && r.kernel == "cuBLAS fp16") tCublas = r.us;
                const double bytes = double(s.n * s.k) + double(m) * double(s.k) + double(m) * double(s.n) * 2;
                rows.push_back({shape, m, "W8A8 int8 cuBLASLt", t8, flops / (t8 * 1e6), bytes / (t8 * 1e3),
                                tCublas / t8, bytes / (t8 * 1e3) / copyGBs});
                std::printf("%-12s M=%-5d %-18s %9.2f us %7.1f TFLOP/s  %5.2fx cuBLAS\n", shape.c_str(), m,
                            rows.back().kernel.c_str(), t8, rows.back().tflops, rows.back().vsCublas);
            }
            cudaFree(rowScales);
            cudaFree(colScales);
            cudaFree(w8);
            cudaFree(x8);
            cudaFree(scales);
        }
        timer.graph = graph;
        for (__half* d : dense) cudaFree(d);
        if (scratch) cudaFree(scratch);
        cudaFree(x);
        cudaFree(y);
    }
    cublasDestroy(handle);

    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    std::string md = std::string(graph ? "Timing: M <= 128 as CUDA graphs of 100 calls, replayed. " : "Timing: 100 stream launches per batch. ") + "GPU: " + std::string(prop.name) + ", " + std::to_string(prop.multiProcessorCount) + " SMs; " + date +
                     (l2Resident ? "; one copy of each weight (L2-resident where it fits)" : "") +
                     "; device-to-device copy " + std::to_string(int(copyGBs)) + " GB/s (read + write); W4A16 m <= 16 kernel \"W4A16 g128\": " +
                     wxa16SmallKernelName(wxa16SmallKernel()) + "; W8A16 m <= 16 kernel \"W8A16 g128\": " +
                     wxa16W8KernelName(wxa16W8Kernel()) + ".\n\n";
    md += "| K x N | M | kernel | time (us) | TFLOP/s | eff. GB/s | vs cuBLAS fp16 | of copy bw |\n";
    md += "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
    for (const Row& r : rows) {
        char line[256];
        std::snprintf(line, sizeof line, "| %s | %d | %s | %.2f | %.2f | %.0f | %.2fx | %.0f%% |\n", r.shape.c_str(), r.m,
                      r.kernel.c_str(), r.us, r.tflops, r.gbs, r.vsCublas, 100 * r.ofCopy);
        md += line;
    }
    if (sweepSmall) {  // the fastest configuration of the small-M kernel per shape and M
        md += "\nW4A16 small-M kernel configurations (";
        for (int c = 0; c < wxa16SmallConfigCount(); ++c)
            md += (c ? "; " : "") + std::to_string(c) + ": " + wxa16SmallConfigName(c);
        md += "):\n\n| K x N | M | config 0 (us) | best | best (us) | best vs cuBLAS | best of copy bw |\n| --- | --- | --- | --- | --- | --- | --- |\n";
        for (const Row& r : rows) {
            if (r.kernel != "W4A16 g128" || r.m > 16) continue;
            const Row* best = &r;
            for (const Row& o : rows)
                if (o.shape == r.shape && o.m == r.m && o.kernel.rfind("W4A16 g128 config ", 0) == 0 && o.us < best->us) best = &o;
            char line[256];
            std::snprintf(line, sizeof line, "| %s | %d | %.2f | %s | %.2f | %.2fx | %.0f%% |\n", r.shape.c_str(), r.m, r.us,
                          best == &r ? "0" : best->kernel.substr(18).c_str(), best->us, best->vsCublas, 100 * best->ofCopy);
            md += line;
        }
    }
    std::printf("\n%s", md.c_str());
    if (!outPath.empty()) {
        std::ofstream out(outPath + ".tmp");
        out << md;
        out.close();
        if (!out || std::rename((outPath + ".tmp").c_str(), outPath.c_str()) != 0) {
            std::fprintf(stderr, "bench_kernels: cannot write %s\n", outPath.c_str());
            return 1;
        }
    }
    return 0;
}
