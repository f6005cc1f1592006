// Round-to-nearest quantize / dequantize on the GPU; same arithmetic as cpu/rtn_quant_ref.cpp (IEEE division,
// round half to even), so levels, scales and zeros match the reference exactly.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <string>

#include "cuda_check.h"
#include "element_cast.cuh"
#include "cwb/kernels/rtn_quant.h"

namespace cwb::kernels {

namespace {

// One warp per (row, group): min/max by warp reduction, then the levels.
__global__ void rtnQuantizeKernel(const float* __restrict__ w, int64_t rows, int64_t cols, int bits, bool symmetric,
                                  int64_t groupWidth, int64_t groups, uint8_t* __restrict__ levels,
                                  float* __restrict__ scales, int32_t* __restrict__ zeros) {
    const int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (item >= rows * groups) return;
    const int64_t r = item / groups, g = item % groups;
    const int64_t begin = g * groupWidth, end = min(cols, begin + groupWidth);
    const float* x = w + r * cols;
    float lo = 0.0f, hi = 0.0f;
    for (int64_t c = begin + lane; c < end; c += 32) {
        lo = fminf(lo, x[c]);
        hi = fmaxf(hi, x[c]);
    }
    for (int o = 16; o > 0; o /= 2) {
        lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
        hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
    const float maxq = float((1 << bits) - 1);
    float scale;
    int32_t zero;
    if (symmetric) {
        float amax = fmaxf(-lo, hi);
        if (amax == 0.0f) amax = 1.0f;
        scale = fmaxf(__fdiv_rn(__fmul_rn(amax, 2.0f), maxq), FLT_MIN);
        zero = 1 << (bits - 1);
    } else {
        if (lo == 0.0f && hi == 0.0f) {
            lo = -1.0f;
            hi = 1.0f;
        }
        scale = fmaxf(__fdiv_rn(__fsub_rn(hi, lo), maxq), FLT_MIN);
        zero = int32_t(fminf(fmaxf(rintf(__fdiv_rn(-lo, scale)), 0.0f), maxq));
    }
    if (lane == 0) {
        scales[item] = scale;
        zeros[item] = zero;
    }
    for (int64_t c = begin + lane; c < end; c += 32)
        levels[r * cols + c] = uint8_t(fminf(fmaxf(__fadd_rn(rintf(__fdiv_rn(x[c], scale)), float(zero)), 0.0f), maxq));
}

using detail::fromFloat;

template <typename T>
__global__ void rtnDequantizeKernel(const uint8_t* __restrict__ levels, const float* __restrict__ scales,
                                    const int32_t* __restrict__ zeros, int64_t rows, int64_t cols, int64_t groupWidth,
                                    int64_t groups, T* __restrict__ out) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    const int64_t r = i / cols, c = i % cols, g = r * groups + c / groupWidth;
    out[i] = fromFloat<T>(__fmul_rn(float(int32_t(levels[i]) - zeros[g]), scales[g]));
}

void checkGpuSpec(const RtnSpec& spec, int64_t rows, int64_t cols, const char* where) {
    if (spec.bits != 4 && spec.bits != 8)
        throw KernelError(std::string(where) + ": the GPU kernels take 4 or 8 bits, got " + std::to_string(spec.bits));
    if (spec.groupSize == 0 || spec.groupSize < -1)
        throw KernelError(std::string(where) + ": group size must be -1 (per row) or positive");
    if (rows <= 0 || cols <= 0) throw KernelError(std::string(where) + ": rows and cols must be positive");
}

unsigned blocksFor(int64_t threads, int perBlock) { return unsigned((threads + perBlock - 1) / perBlock); }

} // namespace

void rtnQuantize(const float* w, int64_t rows, int64_t cols, const RtnSpec& spec, uint8_t* levels, float* scales,
                 int32_t* zeros, Stream stream) {
    checkGpuSpec(spec, rows, cols, "rtnQuantize");
    const int64_t groups = rtnGroupCount(cols, spec), width = spec.groupSize > 0 ? spec.groupSize : cols;
    rtnQuantizeKernel<<<blocksFor(rows * groups * 32, 256), 256, 0, detail::toStream(stream)>>>(
        w, rows, cols, spec.bits, spec.symmetric, width, groups, levels, scales, zeros);
    CWB_CUDA_CHECK_LAUNCH("rtnQuantize");
}

void rtnDequantize(const uint8_t* levels, const float* scales, const int32_t* zeros, int64_t rows, int64_t cols,
                   const RtnSpec& spec, void* out, ActType outType, Stream stream) {
    checkGpuSpec(spec, rows, cols, "rtnDequantize");
    const int64_t groups = rtnGroupCount(cols, spec), width = spec.groupSize > 0 ? spec.groupSize : cols;
    const unsigned blocks = blocksFor(rows * cols, 256);
    if (outType == ActType::Float16)
        rtnDequantizeKernel<__half><<<blocks, 256, 0, detail::toStream(stream)>>>(
            levels, scales, zeros, rows, cols, width, groups, static_cast<__half*>(out));
    else
        rtnDequantizeKernel<__nv_bfloat16><<<blocks, 256, 0, detail::toStream(stream)>>>(
            levels, scales, zeros, rows, cols, width, groups, static_cast<__nv_bfloat16*>(out));
    CWB_CUDA_CHECK_LAUNCH("rtnDequantize");
}

} // namespace cwb::kernels
