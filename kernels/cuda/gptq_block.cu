// One GPTQ column block on the GPU (gptq_block.h): one warp per weight row, lane l holding the block's columns
// l, l + 32, l + 64, l + 96 in registers. Each column is broadcast from its lane, quantized by every lane alike
// (no second broadcast), and the lanes update their later columns with one FMA each. A keep-zero mask is read the
// same way: each lane loads its columns' bytes up front, one bit per register slot, broadcast with the column.
// Intrinsics with explicit
// rounding keep the compiler from contracting what the CPU reference rounds separately.
#include <cuda_fp16.h>

#include <string>

#include "cuda_check.h"
#include "cwb/kernels/gptq_block.h"

namespace cwb::kernels {

namespace {

constexpr int kRegs = int(kGptqMaxBlock / 32);
constexpr int kWarpsPerBlock = 8;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ float roundUpToHalf(float x) {
    const __half nearest = __float2half_rn(x);
    const float value = __half2float(nearest);
    return value < x ? __half2float(__ushort_as_half(static_cast<unsigned short>(__half_as_ushort(nearest) + 1))) : value;
}

__device__ void groupParams(float lo, float hi, int bits, bool symmetric, float& scale, int32_t& zero) {
    const float maxq = float((1 << bits) - 1);
    if (symmetric) {
        float amax = fmaxf(-lo, hi);
        if (amax == 0.0f) amax = 1.0f;
        scale = __fdiv_rn(__fmul_rn(amax, 2.0f), maxq);
        zero = 1 << (bits - 1);
    } else {
        if (lo == 0.0f && hi == 0.0f) {
            lo = -1.0f;
            hi = 1.0f;
        }
        scale = __fdiv_rn(__fsub_rn(hi, lo), maxq);
    }
    scale = roundUpToHalf(fminf(fmaxf(scale, 5.9604645e-08f), 65504.0f));
    if (!symmetric) zero = int32_t(fminf(fmaxf(rintf(__fdiv_rn(-lo, scale)), 0.0f), maxq));
}

__global__ void __launch_bounds__(kWarpsPerBlock * 32) gptqBlockKernel(GptqBlockArgs a) {
    const int lane = int(threadIdx.x % 32);
    const int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    if (r >= a.rows) return;  // whole warps leave together
    const int count = int(a.end - a.begin);
    const float* row = a.weight + r * a.cols;
    const float* u = a.hinvUpper;
    float* errRow = a.errors + r * a.errorStride + a.errorOffset;
    const float maxq = float((1 << a.bits) - 1);
    float v[kRegs];
    unsigned keepMine = 0;   // bit k: this lane's column lane + 32 k keeps its zero
#pragma unroll
    for (int k = 0; k < kRegs; ++k) {
        const int j = lane + 32 * k;
        v[k] = j < count ? row[a.begin + j] : 0.0f;
        if (a.keepZero && j < count && a.keepZero[r * a.cols + a.begin + j] != 0) keepMine |= 1u << k;
    }
    float scale = 0.0f;
    int32_t zero = 0;
    int64_t loaded = -1;
#pragma unroll
    for (int k = 0; k < kRegs; ++k) {
        for (int l = 0; l < 32; ++l) {
            const int i = 32 * k + l;
            if (i >= count) break;
            const int64_t c = a.begin + i;
            int64_t g;
            if (!a.columnGroup) {
                g = c / a.groupWidth;
                if (c % a.groupWidth == 0) {
                    const int64_t groupEnd = min(c + a.groupWidth, a.cols);
                    const int inBlockEnd = int(min(groupEnd, a.end) - a.begin);
                    float lo = 0.0f, hi = 0.0f;
#pragma unroll
                    for (int kk = 0; kk < kRegs; ++kk) {
                        const int j = lane + 32 * kk;
                        if (j >= i && j < inBlockEnd) {
                            lo = fminf(lo, v[kk]);
                            hi = fmaxf(hi, v[kk]);
                        }
                    }
                    if (groupEnd > a.end) {  // past the block: with the pending update of this block's errors
                        __syncwarp();
                        for (int64_t j = a.end + lane; j < groupEnd; j += 32) {
                            float x = row[j];
                            for (int p = 0; p < i; ++p) x = fmaf(-errRow[p], u[(a.begin + p) * a.cols + j], x);
                            lo = fminf(lo, x);
                            hi = fmaxf(hi, x);
                        }
                    }
                    for (int o = 16; o > 0; o /= 2) {
                        lo = fminf(lo, __shfl_xor_sync(kFullMask, lo, o));
                        hi = fmaxf(hi, __shfl_xor_sync(kFullMask, hi, o));
                    }
                    groupParams(lo, hi, a.bits, a.symmetric, scale, zero);
                    if (lane == 0) {
                        a.scales[r * a.groups + g] = scale;
                        a.zeros[r * a.groups + g] = zero;
                    }
                    loaded = g;
                }
            } else {
                g = a.columnGroup[c];
            }
            if (g != loaded) {
                scale = a.scales[r * a.groups + g];
                zero = a.zeros[r * a.groups + g];
                loaded = g;
            }
            const float x = __shfl_sync(kFullMask, v[k], l);
            const bool keep = (__shfl_sync(kFullMask, keepMine, l) >> k) & 1u;
            const float level = keep ? float(zero) : fminf(fmaxf(__fadd_rn(rintf(__fdiv_rn(x, scale)), float(zero)), 0.0f), maxq);
            const float q = __fmul_rn(__fsub_rn(level, float(zero)), scale);
            const float e = __fdiv_rn(__fsub_rn(x, q), u[c * a.cols + c]);
            if (lane == 0) {
                a.levels[r * a.cols + c] = int32_t(level);
                errRow[i] = e;
            }
            const float* uRow = u + c * a.cols + a.begin;
#pragma unroll
            for (int kk = 0; kk < kRegs; ++kk) {
                const int j = lane + 32 * kk;
                if (j > i && j < count) v[kk] = fmaf(-e, uRow[j], v[kk]);
            }
        }
    }
}

} // namespace

void gptqBlock(const GptqBlockArgs& args, Stream stream) {
    checkGptqBlockArgs(args, "gptqBlock");
    const int64_t warps = args.rows;
    const unsigned blocks = unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
    gptqBlockKernel<<<blocks, kWarpsPerBlock * 32, 0, detail::toStream(stream)>>>(args);
    CWB_CUDA_CHECK_LAUNCH("gptqBlock");
}

} // namespace cwb::kernels
