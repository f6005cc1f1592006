// Per-token FP8 / int8 activation quantization (one block per row) and the FP8 scale epilogue. IEEE division
// (__fdiv_rn) and rint (ties to even) as in cpu/act_quant_ref.cpp and the core's LibTorch code on the CPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "cuda_check.h"
#include "act_quant_codes.cuh"
#include "element_cast.cuh"
#include "cwb/kernels/act_quant.h"

namespace cwb::kernels {

namespace {

constexpr int kRowThreads = 512;

using detail::encodeE4m3;
using detail::encodeInt8;
using detail::fromFloat;
using detail::nanMax;
using detail::tokenScaleOf;
using detail::toFloat;

// Max over the block's threads, returned to every thread.
__device__ float blockMax(float v) {
    for (int o = 16; o > 0; o /= 2) v = nanMax(__shfl_xor_sync(0xffffffffu, v, o), v);
    __shared__ float warpMax[kRowThreads / 32];
    if (threadIdx.x % 32 == 0) warpMax[threadIdx.x / 32] = v;
    __syncthreads();
    v = warpMax[0];
    for (int i = 1; i < kRowThreads / 32; ++i) v = nanMax(warpMax[i], v);
    return v;
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    quantizeRowsFp8Kernel(const T* __restrict__ x, int64_t cols, uint8_t* __restrict__ codes, float* __restrict__ scales) {
    const T* row = x + int64_t(blockIdx.x) * cols;
    uint8_t* out = codes + int64_t(blockIdx.x) * cols;
    float amax = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) amax = nanMax(fabsf(toFloat(row[c])), amax);
    amax = blockMax(amax);
    const float scale = tokenScaleOf(amax, 448.0f);
    if (threadIdx.x == 0) scales[blockIdx.x] = scale;
    for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) out[c] = encodeE4m3(__fdiv_rn(toFloat(row[c]), scale));
}

template <typename T, bool Divided>
__global__ void __launch_bounds__(kRowThreads)
    quantizeRowsInt8Kernel(const T* __restrict__ x, const float* __restrict__ divisor, int64_t cols,
                           int8_t* __restrict__ codes, float* __restrict__ scales) {
    const T* row = x + int64_t(blockIdx.x) * cols;
    int8_t* out = codes + int64_t(blockIdx.x) * cols;
    auto value = [&](int64_t c) { return Divided ? __fdiv_rn(toFloat(row[c]), divisor[c]) : toFloat(row[c]); };
    float amax = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) amax = nanMax(fabsf(value(c)), amax);
    amax = blockMax(amax);
    const float scale = tokenScaleOf(amax, 127.0f);
    if (threadIdx.x == 0) scales[blockIdx.x] = scale;
    for (int64_t c = threadIdx.x; c < cols; c += kRowThreads)
        out[c] = encodeInt8(value(c), scale);
}

template <typename T>
__global__ void scaleRowsColsKernel(const float* __restrict__ sums, const float* __restrict__ rowScale,
                                    const float* __restrict__ colScale, int64_t m, int64_t n, T* __restrict__ y) {
    for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
        const float rs = rowScale[r];
        for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < n; c += int64_t(gridDim.x) * blockDim.x)
            y[r * n + c] = fromFloat<T>(__fmul_rn(__fmul_rn(sums[r * n + c], rs), colScale[c]));
    }
}

void checkShape(const char* what, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) throw KernelError(std::string(what) + ": rows and cols must be positive");
    if (rows > 0x7FFFFFFF) throw KernelError(std::string(what) + ": too many rows for one grid");
}

} // namespace

void quantizeRowsFp8(const void* x, ActType type, int64_t rows, int64_t cols, uint8_t* codes, float* scales,
                     Stream stream) {
    checkShape("quantizeRowsFp8", rows, cols);
    const cudaStream_t s = detail::toStream(stream);
    if (type == ActType::Float16)
        quantizeRowsFp8Kernel<__half><<<unsigned(rows), kRowThreads, 0, s>>>(static_cast<const __half*>(x), cols, codes, scales);
    else
        quantizeRowsFp8Kernel<__nv_bfloat16>
            <<<unsigned(rows), kRowThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(x), cols, codes, scales);
    CWB_CUDA_CHECK_LAUNCH("quantizeRowsFp8");
}

void quantizeRowsInt8Divided(const void* x, ActType type, const float* divisor, int64_t rows, int64_t cols,
                             int8_t* codes, float* scales, Stream stream) {
    checkShape("quantizeRowsInt8Divided", rows, cols);
    const cudaStream_t s = detail::toStream(stream);
    const unsigned grid = unsigned(rows);
    if (type == ActType::Float16) {
        const auto* in = static_cast<const __half*>(x);
        if (divisor) quantizeRowsInt8Kernel<__half, true><<<grid, kRowThreads, 0, s>>>(in, divisor, cols, codes, scales);
        else quantizeRowsInt8Kernel<__half, false><<<grid, kRowThreads, 0, s>>>(in, divisor, cols, codes, scales);
    } else {
        const auto* in = static_cast<const __nv_bfloat16*>(x);
        if (divisor) quantizeRowsInt8Kernel<__nv_bfloat16, true><<<grid, kRowThreads, 0, s>>>(in, divisor, cols, codes, scales);
        else quantizeRowsInt8Kernel<__nv_bfloat16, false><<<grid, kRowThreads, 0, s>>>(in, divisor, cols, codes, scales);
    }
    CWB_CUDA_CHECK_LAUNCH("quantizeRowsInt8Divided");
}

void scaleRowsCols(const float* sums, const float* rowScale, const float* colScale, int64_t m, int64_t n,
                   ActType outType, void* y, Stream stream) {
    checkShape("scaleRowsCols", m, n);
    const cudaStream_t s = detail::toStream(stream);
    const dim3 grid(unsigned(std::min<int64_t>((n + 255) / 256, 1024)), unsigned(std::min<int64_t>(m, 65535)));
    if (outType == ActType::Float16)
        scaleRowsColsKernel<__half><<<grid, 256, 0, s>>>(sums, rowScale, colScale, m, n, static_cast<__half*>(y));
    else
        scaleRowsColsKernel<__nv_bfloat16><<<grid, 256, 0, s>>>(sums, rowScale, colScale, m, n, static_cast<__nv_bfloat16*>(y));
    CWB_CUDA_CHECK_LAUNCH("scaleRowsCols");
}

} // namespace cwb::kernels
