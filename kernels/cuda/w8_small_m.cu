// Small-M FP8 / int8 products (w8_small_m.h): each warp computes kRowsPerWarp output channels for all m token rows;
// each lane reads 16 weight bytes per step (one uint4), so a warp streams 512 contiguous bytes of a weight row.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "element_cast.cuh"
#include "cwb/kernels/w8_small_m.h"

namespace cwb::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 2;

using detail::fromFloat;

// Four E4M3 codes (one 32-bit word) -> four floats equal to the codes' values times 2^-8: moving sign, exponent and
// mantissa into fp16's fields keeps the significand and lowers the exponent by the bias difference (15 - 7 = 8),
// subnormals included.
__device__ __forceinline__ void decodeE4m3x4(uint32_t v, float* out) {
    const uint32_t lo = __byte_perm(v, 0u, 0x4140), hi = __byte_perm(v, 0u, 0x4342);   // codes 0,1 / 2,3 in 16-bit lanes
    const uint32_t hlo = ((lo & 0x00800080u) << 8) | ((lo & 0x007F007Fu) << 7);
    const uint32_t hhi = ((hi & 0x00800080u) << 8) | ((hi & 0x007F007Fu) << 7);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&hlo));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hhi));
    out[0] = a.x;
    out[1] = a.y;
    out[2] = b.x;
    out[3] = b.y;
}

__device__ __forceinline__ void decodeE4m3x16(const uint4& v, float* out) {
    decodeE4m3x4(v.x, out);
    decodeE4m3x4(v.y, out + 4);
    decodeE4m3x4(v.z, out + 8);
    decodeE4m3x4(v.w, out + 12);
}

__device__ __forceinline__ int dot16(const uint4& a, const uint4& b, int acc) {
    acc = __dp4a(int(a.x), int(b.x), acc);
    acc = __dp4a(int(a.y), int(b.y), acc);
    acc = __dp4a(int(a.z), int(b.z), acc);
    return __dp4a(int(a.w), int(b.w), acc);
}

template <typename Out, bool Fp8, int M>
__global__ void __launch_bounds__(kThreads)
    smallMKernel(const uint8_t* __restrict__ x, const float* __restrict__ xScale, const uint8_t* __restrict__ w,
                 const float* __restrict__ wScale, int64_t n, int64_t k, Out* __restrict__ y) {
    using Acc = typename std::conditional<Fp8, float, int>::type;
    const int lane = threadIdx.x % 32;
    const int64_t row0 = (int64_t(blockIdx.x) * kWarps + threadIdx.x / 32) * kRowsPerWarp;
    if (row0 >= n) return;
    const int64_t chunks = k / 16;
    const uint4* wRows[kRowsPerWarp];
    bool rowValid[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        rowValid[r] = row0 + r < n;
        wRows[r] = reinterpret_cast<const uint4*>(w + (rowValid[r] ? row0 + r : row0) * k);
    }
    Acc acc[M][kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < M; ++i)
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) acc[i][r] = Acc(0);
#pragma unroll 4
    for (int64_t c = lane; c < chunks; c += 32) {
        uint4 wv[kRowsPerWarp];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) wv[r] = __ldg(wRows[r] + c);
#pragma unroll
        for (int i = 0; i < M; ++i) {
            const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + i * k) + c);
            if constexpr (Fp8) {
                float xf[16];
                decodeE4m3x16(xv, xf);
#pragma unroll
                for (int r = 0; r < kRowsPerWarp; ++r) {
                    float wf[16];
                    decodeE4m3x16(wv[r], wf);
#pragma unroll
                    for (int j = 0; j < 16; ++j) acc[i][r] = fmaf(xf[j], wf[j], acc[i][r]);
                }
            } else {
#pragma unroll
                for (int r = 0; r < kRowsPerWarp; ++r) acc[i][r] = dot16(wv[r], xv, acc[i][r]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < M; ++i)
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
            for (int o = 16; o > 0; o /= 2) acc[i][r] += __shfl_xor_sync(0xffffffffu, acc[i][r], o);
    if (lane != 0) return;
#pragma unroll
    for (int i = 0; i < M; ++i)
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
            if (!rowValid[r]) continue;
            // FP8: the decoded values carry 2^-8 each, so the sum 2^-16 (exactly undone: a power of two).
            const float sum = Fp8 ? __fmul_rn(float(acc[i][r]), 65536.0f) : float(acc[i][r]);
            y[i * n + row0 + r] = fromFloat<Out>(__fmul_rn(__fmul_rn(sum, xScale[i]), wScale[row0 + r]));
        }
}

template <typename Out, bool Fp8>
void launch(const uint8_t* x, const float* xScale, const uint8_t* w, const float* wScale, void* y, int64_t m,
            int64_t n, int64_t k, cudaStream_t s) {
    const unsigned blocks = unsigned((n + kWarps * kRowsPerWarp - 1) / (kWarps * kRowsPerWarp));
    Out* out = static_cast<Out*>(y);
    switch (m) {
    case 1: smallMKernel<Out, Fp8, 1><<<blocks, kThreads, 0, s>>>(x, xScale, w, wScale, n, k, out); break;
    case 2: smallMKernel<Out, Fp8, 2><<<blocks, kThreads, 0, s>>>(x, xScale, w, wScale, n, k, out); break;
    case 3: smallMKernel<Out, Fp8, 3><<<blocks, kThreads, 0, s>>>(x, xScale, w, wScale, n, k, out); break;
    default: smallMKernel<Out, Fp8, 4><<<blocks, kThreads, 0, s>>>(x, xScale, w, wScale, n, k, out); break;
    }
}

void checkArguments(const char* what, const void* x, const void* w, int64_t m, int64_t n, int64_t k) {
    if (m < 1 || m > kSmallMMaxRows || n <= 0 || k <= 0)
        throw KernelError(std::string(what) + ": needs 1 <= m <= " + std::to_string(kSmallMMaxRows) + " and positive n, k");
    if (k % 16) throw KernelError(std::string(what) + ": k must be a multiple of 16, got " + std::to_string(k));
    if (reinterpret_cast<uintptr_t>(x) % 16 || reinterpret_cast<uintptr_t>(w) % 16)
        throw KernelError(std::string(what) + ": x and w must be 16-byte aligned");
}

} // namespace

void w8a8SmallM(const int8_t* x, const float* xScale, const int8_t* w, const float* wScale, void* y, ActType outType,
                int64_t m, int64_t n, int64_t k, Stream stream) {
    checkArguments("w8a8SmallM", x, w, m, n, k);
    const auto* xb = reinterpret_cast<const uint8_t*>(x);
    const auto* wb = reinterpret_cast<const uint8_t*>(w);
    if (outType == ActType::Float16) launch<__half, false>(xb, xScale, wb, wScale, y, m, n, k, detail::toStream(stream));
    else launch<__nv_bfloat16, false>(xb, xScale, wb, wScale, y, m, n, k, detail::toStream(stream));
    CWB_CUDA_CHECK_LAUNCH("w8a8SmallM");
}

void fp8SmallM(const uint8_t* x, const float* xScale, const uint8_t* w, const float* wScale, void* y, ActType outType,
               int64_t m, int64_t n, int64_t k, Stream stream) {
    checkArguments("fp8SmallM", x, w, m, n, k);
    if (outType == ActType::Float16) launch<__half, true>(x, xScale, w, wScale, y, m, n, k, detail::toStream(stream));
    else launch<__nv_bfloat16, true>(x, xScale, w, wScale, y, m, n, k, detail::toStream(stream));
    CWB_CUDA_CHECK_LAUNCH("fp8SmallM");
}

} // namespace cwb::kernels
