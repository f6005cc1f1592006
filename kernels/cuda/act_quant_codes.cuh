#pragma once
// Internal: the per-token activation codes of act_quant.h, shared by the quantize kernels (act_quant.cu) and the
// decode GEMV that quantizes its own input (w8_decode_gemv.cu), so both give the CPU references' codes bit for bit.
#include <cstdint>

namespace cwb::kernels::detail {

// max that keeps a NaN, as at::amax does (fmaxf drops it).
__device__ __forceinline__ float nanMax(float a, float b) { return (a > b || isnan(a)) ? a : b; }

// E4M3 code of v: round to nearest even on the E4M3 grid, saturate at ±448, NaN -> 0x7F, sign (of zero too) kept.
__device__ __forceinline__ uint8_t encodeE4m3(float v) {
    const uint8_t sign = uint8_t((__float_as_uint(v) >> 24) & 0x80u);
    const float a = fabsf(v);
    if (isnan(v)) return sign | 0x7F;
    if (a >= 448.0f) return sign | 0x7E;
    if (a < 0.015625f) return sign | uint8_t(rintf(a * 512.0f));   // below 2^-6: steps of 2^-9 (8 gives 2^-6)
    const int e = int((__float_as_uint(a) >> 23) & 0xFFu) - 127;     // -6..8
    const float toSteps = __uint_as_float(uint32_t(127 + 3 - e) << 23);   // 2^(3-e): a in units of its grid step
    int steps = int(rintf(a * toSteps));                                  // 8..16, exact scaling
    int biased = e + 7;
    if (steps == 16) {   // rounded up to the next power of two
        steps = 8;
        ++biased;
    }
    return uint8_t(sign | (biased << 3) | (steps - 8));
}

// int8 code of v at `scale`: rint(v / scale) (IEEE division, ties to even) clamped to [-127, 127].
__device__ __forceinline__ int8_t encodeInt8(float v, float scale) {
    return int8_t(fminf(fmaxf(rintf(__fdiv_rn(v, scale)), -127.0f), 127.0f));
}

// The per-token scale from a row's amax: amax / 448 (FP8) or / 127 (int8), IEEE division; 1 when that is 0.
__device__ __forceinline__ float tokenScaleOf(float amax, float codeMax) {
    const float scale = __fdiv_rn(amax, codeMax);
    return scale == 0.0f ? 1.0f : scale;
}

} // namespace cwb::kernels::detail
