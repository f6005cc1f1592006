// One FP8 / W8A8 layer at decode and small-prefill sizes on the GPU, each piece timed inside a CUDA graph (as the
// decode runs): cuBLAS fp16 GEMM, the cuBLASLt FP8 and int8 GEMMs alone, and the whole native layer (act_quant
// kernel + GEMM + scales) with outer-vector scales and with the fp32-sums epilogue, and at M <= 4 the small-M
// kernels (w8_small_m.h), at M <= 8 the decode GEMVs that quantize their own input (one launch per layer, batches of
// 4 and 8 chunks). The last column is the weight bytes read per microsecond against the device-to-device copy
// bandwidth measured at the start (bytes read + written). Run by hand on a GPU:
//   bench_act_quant            (prints one table row per shape, M and path)
// Weights cycle through enough copies to exceed the L2, so they come from HBM as in a model; values are random
// (speed only). Time: 50 calls captured in one graph, median of 9 replays, per call.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cwb/kernels/act_quant.h"
#include "cwb/kernels/fp8_gemm.h"
#include "cwb/kernels/w8_small_m.h"
#include "cwb/kernels/w8a8_gemm.h"

using namespace cwb::kernels;

namespace {

void checkCuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

__global__ void fillBytes(uint8_t* p, size_t n, uint32_t seed, bool e4m3) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u + seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = e4m3 ? uint8_t((h % 0x7Eu) | ((h >> 16) & 0x80u)) : uint8_t(h);
    }
}

__global__ void fillHalf(__half* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u + seed;
        h ^= h >> 15;
        p[i] = __float2half(float(h & 0xffff) / 32768.0f - 1.0f);
    }
}

__global__ void fillFloat(float* p, size_t n, float v) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}

template <typename T>
T* deviceArray(size_t count) {
    T* p = nullptr;
    checkCuda(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc");
    return p;
}

// Microseconds per call: `perGraph` calls captured into one graph on `stream`, median of 9 replays.
double graphMicroseconds(cudaStream_t stream, const std::function<void(int)>& call, int perGraph = 50) {
    for (int i = 0; i < 3; ++i) call(i);   // first calls settle lazy choices (outer-vector scales, buffers)
    checkCuda(cudaStreamSynchronize(stream), "warm-up");
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    checkCuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin capture");
    for (int i = 0; i < perGraph; ++i) call(i);
    checkCuda(cudaStreamEndCapture(stream, &graph), "end capture");
    checkCuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    checkCuda(cudaGraphLaunch(exec, stream), "graph launch");
    std::vector<double> t;
    for (int r = 0; r < 9; ++r) {
        cudaEventRecord(a, stream);
        cudaGraphLaunch(exec, stream);
        cudaEventRecord(b, stream);
        checkCuda(cudaEventSynchronize(b), "replay");
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        t.push_back(1000.0 * ms / perGraph);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

} // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::printf("%s, L2 %d MiB\n", prop.name, prop.l2CacheSize >> 20);
    cudaStream_t stream;
    checkCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    cublasHandle_t blas;
    cublasCreate(&blas);
    cublasSetStream(blas, stream);
    Fp8Gemm fp8;
    W8a8Gemm int8;
    const bool haveFp8 = fp8GemmSupported();
    const int64_t maxM = 128;
    double copyGBs = 0;
    {   // device-to-device copy of 1 GiB, best of 5
        const size_t bytes = size_t(1) << 30;
        void *a = deviceArray<uint8_t>(bytes), *b = deviceArray<uint8_t>(bytes);
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        for (int r = 0; r < 6; ++r) {
            cudaEventRecord(e0, stream);
            checkCuda(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream), "copy");
            cudaEventRecord(e1, stream);
            checkCuda(cudaEventSynchronize(e1), "copy");
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            if (r > 0) copyGBs = std::max(copyGBs, 2.0 * double(bytes) / (ms * 1e6));
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        cudaFree(a);
        cudaFree(b);
    }
    std::printf("device-to-device copy: %.0f GB/s (read + written)\n", copyGBs);
    std::printf("| K x N | M | path | us per call | weight GB/s (of copy) |\n| --- | --- | --- | --- | --- |\n");
    for (const auto& shape : {std::pair<int64_t, int64_t>{4096, 11008}, {11008, 4096}, {4096, 4096}}) {
        const int64_t k = shape.first, n = shape.second;
        const size_t weights = size_t(k * n);
        const int copies = int(std::max<size_t>(2, (size_t(prop.l2CacheSize) * 4) / weights + 1));
        std::vector<__half*> w16;
        std::vector<uint8_t*> w8;
        for (int c = 0; c < copies; ++c) {
            w16.push_back(deviceArray<__half>(weights));
            w8.push_back(deviceArray<uint8_t>(weights));
            fillHalf<<<1024, 256>>>(w16.back(), weights, 3u + c);
            fillBytes<<<1024, 256>>>(w8.back(), weights, 5u + c, true);   // E4M3 codes; read as int8 too
        }
        __half* x = deviceArray<__half>(size_t(maxM * k));
        __half* y = deviceArray<__half>(size_t(maxM * n));
        uint8_t* xq = deviceArray<uint8_t>(size_t(maxM * k));
        float* sums = deviceArray<float>(size_t(maxM * n));
        float* rowScales = deviceArray<float>(size_t(maxM));
        float* colScales = deviceArray<float>(size_t(n));
        float* divisor = deviceArray<float>(size_t(k));
        fillHalf<<<1024, 256>>>(x, size_t(maxM * k), 1u);
        fillBytes<<<1024, 256>>>(xq, size_t(maxM * k), 2u, true);
        fillFloat<<<64, 256>>>(rowScales, size_t(maxM), 0.01f);
        fillFloat<<<64, 256>>>(colScales, size_t(n), 0.02f);
        fillFloat<<<64, 256>>>(divisor, size_t(k), 1.25f);
        checkCuda(cudaDeviceSynchronize(), "fill");
        // weightBytes: bytes per weight the path reads (2 for fp16, 1 for 8-bit codes; 0: not a product).
        auto row = [&](int64_t m, const char* path, double us, int weightBytes = 1) {
            char bandwidth[64] = "-";
            if (weightBytes > 0) {
                const double gbs = double(weights) * weightBytes / (us * 1e3);
                std::snprintf(bandwidth, sizeof(bandwidth), "%.0f (%.0f%%)", gbs, 100.0 * gbs / copyGBs);
            }
            std::printf("| %lld x %lld | %lld | %s | %.2f | %s |\n", (long long)k, (long long)n, (long long)m, path, us,
                        bandwidth);
        };
        for (int64_t m : {int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(8), int64_t(16), int64_t(128)}) {
            const float alpha = 1.0f, beta = 0.0f;
            row(m, "cuBLAS fp16 GEMM", graphMicroseconds(stream, [&](int i) {
                    cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, w16[size_t(i % copies)],
                                 CUDA_R_16F, int(k), x, CUDA_R_16F, int(k), &beta, y, CUDA_R_16F, int(n),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                }), 2);
            if (haveFp8) {
                row(m, "FP8 cuBLASLt GEMM alone (per-tensor scales)", graphMicroseconds(stream, [&](int i) {
                        fp8.run(xq, rowScales, w8[size_t(i % copies)], colScales, y, ActType::Float16, m, n, k, stream);
                    }));
                for (bool outer : {true, false}) {
                    fp8.setOuterVectorAllowed(outer);
                    const double us = graphMicroseconds(stream, [&](int i) {
                        quantizeRowsFp8(x, ActType::Float16, m, k, xq, rowScales, stream);
                        fp8.runRowwise(xq, rowScales, w8[size_t(i % copies)], colScales, y, sums, ActType::Float16, m, n, k,
                                       stream);
                    });
                    row(m, (std::string("FP8 layer: quantize + GEMM, ") + fp8.rowwisePath(ActType::Float16)).c_str(), us);
                }
                fp8.setOuterVectorAllowed(false);   // the default
            }
            row(m, "int8 cuBLASLt GEMM + scale epilogue", graphMicroseconds(stream, [&](int i) {
                    int8.run(reinterpret_cast<const int8_t*>(xq), rowScales, reinterpret_cast<const int8_t*>(w8[size_t(i % copies)]),
                             colScales, y, ActType::Float16, m, n, k, stream);
                }));
            row(m, "W8A8 layer: quantize x / s + int8 GEMM + epilogue", graphMicroseconds(stream, [&](int i) {
                    quantizeRowsInt8Divided(x, ActType::Float16, divisor, m, k, reinterpret_cast<int8_t*>(xq), rowScales,
                                            stream);
                    int8.run(reinterpret_cast<const int8_t*>(xq), rowScales, reinterpret_cast<const int8_t*>(w8[size_t(i % copies)]),
                             colScales, y, ActType::Float16, m, n, k, stream);
                }));
            if (m <= kSmallMMaxRows) {
                if (haveFp8)
                    row(m, "FP8 small-M kernel alone", graphMicroseconds(stream, [&](int i) {
                            fp8SmallM(xq, rowScales, w8[size_t(i % copies)], colScales, y, ActType::Float16, m, n, k, stream);
                        }));
                row(m, "FP8 layer: quantize + small-M kernel", graphMicroseconds(stream, [&](int i) {
                        quantizeRowsFp8(x, ActType::Float16, m, k, xq, rowScales, stream);
                        fp8SmallM(xq, rowScales, w8[size_t(i % copies)], colScales, y, ActType::Float16, m, n, k, stream);
                    }));
                row(m, "int8 small-M kernel alone", graphMicroseconds(stream, [&](int i) {
                        w8a8SmallM(reinterpret_cast<const int8_t*>(xq), rowScales,
                                   reinterpret_cast<const int8_t*>(w8[size_t(i % copies)]), colScales, y, ActType::Float16,
                                   m, n, k, stream);
                    }));
                row(m, "W8A8 layer: quantize x / s + small-M kernel", graphMicroseconds(stream, [&](int i) {
                        quantizeRowsInt8Divided(x, ActType::Float16, divisor, m, k, reinterpret_cast<int8_t*>(xq), rowScales,
                                                stream);
                        w8a8SmallM(reinterpret_cast<const int8_t*>(xq), rowScales,
                                   reinterpret_cast<const int8_t*>(w8[size_t(i % copies)]), colScales, y, ActType::Float16,
                                   m, n, k, stream);
                    }));
            }
            if (m <= kDecodeGemvMaxRows) {
                for (int batch : {4, 8}) {
                    decodeGemvSetBatch(batch);
                    const std::string chunks = " (batch " + std::to_string(batch) + ")";
                    if (haveFp8)
                        row(m, ("FP8 layer: decode GEMV quantizing its input" + chunks).c_str(),
                            graphMicroseconds(stream, [&](int i) {
                                fp8DecodeGemv(x, ActType::Float16, w8[size_t(i % copies)], colScales, y, m, n, k, stream);
                            }));
                    row(m, ("W8A8 layer: decode GEMV quantizing x / s" + chunks).c_str(), graphMicroseconds(stream, [&](int i) {
                            w8a8DecodeGemv(x, ActType::Float16, divisor, reinterpret_cast<const int8_t*>(w8[size_t(i % copies)]),
                                           colScales, y, m, n, k, stream);
                        }));
                    // Folded smoothing (unit divisors): the runtime passes no divisor.
                    row(m, ("W8A8 layer: decode GEMV quantizing x, no divisor" + chunks).c_str(),
                        graphMicroseconds(stream, [&](int i) {
                            w8a8DecodeGemv(x, ActType::Float16, nullptr, reinterpret_cast<const int8_t*>(w8[size_t(i % copies)]),
                                           colScales, y, m, n, k, stream);
                        }));
                }
                decodeGemvSetBatch(8);   // the default
            }
            row(m, "quantize kernel alone (FP8)", graphMicroseconds(stream, [&](int) {
                    quantizeRowsFp8(x, ActType::Float16, m, k, xq, rowScales, stream);
                }), 0);
        }
        for (int c = 0; c < copies; ++c) {
            cudaFree(w16[size_t(c)]);
            cudaFree(w8[size_t(c)]);
        }
        for (void* p : {(void*)x, (void*)y, (void*)xq, (void*)sums, (void*)rowScales, (void*)colScales, (void*)divisor})
            cudaFree(p);
    }
    cublasDestroy(blas);
    return 0;
}
