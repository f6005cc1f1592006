// 2:4 sparse GEMM through cuSPARSELt against cuBLAS FP16 (dense, same run) on the issue's six K x N shapes at
// M = 2048 and 8192 (--sweep adds 512, 1024 and 4096, to place the runtime's sparseMinRows). Run by hand on a GPU:
//   bench_sparse24 [--sweep] [--quick] [--layout row|col] [--no-search] [--out results.md]
//   bench_sparse24 --configs [--layout row|col] [--shape KxN] [--m M] [--from-config N]
// Says "cuSPARSELt not found" and exits 0 when the library cannot be loaded (see CWB_CUSPARSELT).
// Weights are random fp16 with 2 of every 4 zeroed (a random pair per group), activations random; all filled on the
// device. TFLOP/s counts the dense product's 2·M·N·K for both, so its ratio is the speed-up. 2:4 runs what the
// runtime runs: the configuration our search picks on the first run of each M (the search is outside the timing),
// or with --no-search cuSPARSELt's default configuration 0 (never the configuration file: each run searches).
// --configs times every configuration, one line each,
// printed before it runs (a configuration that ends the process is the last line; --from-config resumes).
// Time: CUDA events around 10 back-to-back calls, median of 5 batches.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "cwb/kernels/sparse24_gemm.h"
#include "results_document.h"

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

__device__ uint32_t mix(uint64_t i, uint32_t seed) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return uint32_t(x >> 16);
}

// Values in [-scale, scale); with twoFour, 2 of every 4 consecutive elements zeroed (one of the 6 pairs, at random).
__global__ void fill(__half* p, size_t n, uint32_t seed, float scale, bool twoFour) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        float v = scale * (float(mix(i, seed) & 0xffff) / 32768.0f - 1.0f);
        if (twoFour) {
            const uint32_t pair = mix(i / 4, seed ^ 0x5bd1e995u) % 6;
            const int keepA[6] = {0, 0, 0, 1, 1, 2}, keepB[6] = {1, 2, 3, 2, 3, 3};
            const int j = int(i % 4);
            if (j != keepA[pair] && j != keepB[pair]) v = 0.0f;
        }
        p[i] = __float2half(v);
    }
}

double medianUs(const std::function<void()>& call, int perBatch = 10, int batches = 5) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 5; ++i) call();
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<double> t;
    for (int i = 0; i < batches; ++i) {
        cudaEventRecord(a);
        for (int j = 0; j < perBatch; ++j) call();
        cudaEventRecord(b);
        CHECK_CUDA(cudaEventSynchronize(b));
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        t.push_back(1000.0 * ms / perBatch);
    }
    CHECK_CUDA(cudaGetLastError());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

struct Shape {
    int64_t k, n;
};

const char* layoutName(Sparse24Layout l) { return l == Sparse24Layout::RowMajor ? "row" : "col"; }

} // namespace

int main(int argc, char** argv) {
    bool sweep = false, quick = false, configs = false;
    Sparse24Options options;
    std::string out;
    Shape onlyShape{0, 0};
    int64_t onlyM = 0;
    int fromConfig = 0;
    for (int i = 1; i < argc; ++i) {
        long long a = 0, b = 0;
        if (!std::strcmp(argv[i], "--sweep")) sweep = true;
        else if (!std::strcmp(argv[i], "--quick")) quick = true;
        else if (!std::strcmp(argv[i], "--configs")) configs = true;
        else if (!std::strcmp(argv[i], "--no-search")) options.search = false;
        else if (!std::strcmp(argv[i], "--layout") && i + 1 < argc && (!std::strcmp(argv[i + 1], "row") || !std::strcmp(argv[i + 1], "col")))
            options.layout = !std::strcmp(argv[++i], "row") ? Sparse24Layout::RowMajor : Sparse24Layout::ColumnMajorTransposed;
        else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc && std::sscanf(argv[i + 1], "%lldx%lld", &a, &b) == 2) {
            onlyShape = {a, b};
            ++i;
        } else if (!std::strcmp(argv[i], "--m") && i + 1 < argc) onlyM = std::atoll(argv[++i]);
        else if (!std::strcmp(argv[i], "--from-config") && i + 1 < argc) fromConfig = std::atoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else {
            std::fprintf(stderr, "usage: bench_sparse24 [--sweep] [--quick] [--layout row|col] [--no-search] [--out results.md]\n"
                                 "       bench_sparse24 --configs [--layout row|col] [--shape KxN] [--m M] [--from-config N]\n");
            return 2;
        }
    }
    setenv("CWB_SPARSE24_CACHE", "off", 1);   // every run searches: the first-run figures include it
    const CusparseLtAvailability& lt = cusparseLtAvailability();
    if (!lt.available) {
        std::printf("%s\nskipped: 2:4 needs cuSPARSELt\n", lt.detail.c_str());
        return 0;
    }
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s; %s\n", prop.name, lt.detail.c_str());

    std::vector<Shape> shapes = {{4096, 4096}, {4096, 11008}, {11008, 4096}, {8192, 8192}, {8192, 28672}, {28672, 8192}};
    if (quick) shapes = {{4096, 11008}, {8192, 28672}};
    std::vector<int64_t> ms = {2048, 8192};
    if (sweep) ms = {512, 1024, 2048, 4096, 8192};
    if (onlyShape.k) shapes = {onlyShape};
    if (onlyM) ms = {onlyM};
    if (configs) options.search = false;

    cublasHandle_t handle;
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "cublasCreate failed\n");
        return 1;
    }
    std::string md = "Device: " + std::string(prop.name) + "; " + lt.detail + "; weight layout " +
                     layoutName(options.layout) + (options.search ? ", searched" : ", configuration 0") + ".\n\n"
                     "| K x N | M | cuBLAS fp16 (us) | TFLOP/s | 2:4 cuSPARSELt (us) | TFLOP/s | 2:4 vs cuBLAS | compress (ms) |\n"
                     "|---|---|---|---|---|---|---|---|\n";
    const int64_t maxM = *std::max_element(ms.begin(), ms.end());
    for (const Shape& s : shapes) {
        __half *w = nullptr, *x = nullptr, *y = nullptr;
        CHECK_CUDA(cudaMalloc(&w, size_t(s.n * s.k) * 2));
        CHECK_CUDA(cudaMalloc(&x, size_t(maxM * s.k) * 2));
        CHECK_CUDA(cudaMalloc(&y, size_t(maxM * s.n) * 2));
        fill<<<4096, 256>>>(w, size_t(s.n * s.k), 1, 0.05f, true);
        fill<<<4096, 256>>>(x, size_t(maxM * s.k), 2, 1.0f, false);
        CHECK_CUDA(cudaDeviceSynchronize());
        const std::string shape = std::to_string(s.k) + "x" + std::to_string(s.n);
        try {
            const auto t0 = std::chrono::steady_clock::now();
            Sparse24Gemm sparse(w, ActType::Float16, s.n, s.k, nullptr, options);
            CHECK_CUDA(cudaDeviceSynchronize());
            const double compressMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            for (int64_t m : ms) {
                const float alpha = 1.0f, beta = 0.0f;
                const double dense = medianUs([&] {
                    cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(s.n), int(m), int(s.k), &alpha, w, CUDA_R_16F,
                                 int(s.k), x, CUDA_R_16F, int(s.k), &beta, y, CUDA_R_16F, int(s.n), CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT);
                });
                const double flop = 2.0 * double(m) * double(s.n) * double(s.k);
                auto tf = [&](double t) { return flop / (t * 1e6); };
                if (configs) {
                    const int count = sparse.configCount(m);
                    std::printf("%-12s M=%-5lld layout %s: cuBLAS %9.1f us %6.1f TFLOP/s; %d configurations\n", shape.c_str(),
                                (long long)m, layoutName(options.layout), dense, tf(dense), count);
                    for (int id = fromConfig; id < count; ++id) {
                        std::printf("  config %3d ... ", id);
                        std::fflush(stdout);
                        try {
                            sparse.useConfig(m, id);
                            std::printf("set ... ");
                            std::fflush(stdout);
                            sparse.run(x, y, m, nullptr);
                            CHECK_CUDA(cudaDeviceSynchronize());
                            std::printf("ran ... ");
                            const double us = medianUs([&] { sparse.run(x, y, m, nullptr); }, 5, 3);
                            std::printf("%9.1f us %6.1f TFLOP/s %5.2fx\n", us, tf(us), dense / us);
                        } catch (const KernelError& e) {
                            std::printf("refused: %s\n", e.what());
                        }
                        std::fflush(stdout);
                    }
                    continue;
                }
                const auto firstStart = std::chrono::steady_clock::now();
                sparse.run(x, y, m, nullptr);   // the plan and the search, outside the timing
                CHECK_CUDA(cudaDeviceSynchronize());
                const double firstMs =
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - firstStart).count();
                if (m > 17) sparse.run(x, y, m - 17, nullptr);   // another plan (m - 16 padded), same size class: no search
                CHECK_CUDA(cudaDeviceSynchronize());
                const double secondPlanMs =
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - firstStart).count() - firstMs;
                // A second weight of this shape (a model's next layer): its first run makes no plan of its own.
                double otherWeightMs = 0;
                {
                    Sparse24Gemm other(w, ActType::Float16, s.n, s.k, nullptr, options);
                    CHECK_CUDA(cudaDeviceSynchronize());
                    const auto t = std::chrono::steady_clock::now();
                    other.run(x, y, m, nullptr);
                    CHECK_CUDA(cudaDeviceSynchronize());
                    otherWeightMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
                }
                const double us = medianUs([&] { sparse.run(x, y, m, nullptr); });
                std::printf("%-12s M=%-5lld cuBLAS %9.1f us %6.1f TFLOP/s | 2:4 %9.1f us %6.1f TFLOP/s | %5.2fx | "
                            "compress %.1f ms | first run %.0f ms, first run of M-17 %.0f ms, of a second weight %.1f ms | %s\n",
                            shape.c_str(), (long long)m, dense, tf(dense), us, tf(us), dense / us, compressMs, firstMs,
                            secondPlanMs, otherWeightMs, sparse.kernelNote(m).c_str());
                std::fflush(stdout);
                char row[320];
                std::snprintf(row, sizeof row, "| %s | %lld | %.1f | %.1f | %.1f | %.1f | %.2fx | %.1f |\n", shape.c_str(),
                              (long long)m, dense, tf(dense), us, tf(us), dense / us, compressMs);
                md += row;
            }
        } catch (const KernelError& e) {
            std::printf("%s: %s\n", shape.c_str(), e.what());
            md += "| " + shape + " | failed: " + e.what() + " |\n";
        }
        cudaFree(w);
        cudaFree(x);
        cudaFree(y);
    }
    cublasDestroy(handle);
    if (!out.empty()) {
        const std::time_t now = std::time(nullptr);
        char date[32];
        std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
        cwb::bench::writeResultsSection(out, "sparse24", "## 2:4 sparse GEMM (cuSPARSELt) vs cuBLAS FP16, " +
                                                             std::string(date) + "\n\n" + md);
    }
    return 0;
}
