#pragma once
// Decode-sized products of 8-bit weights with 8-bit per-token activations, one kernel each with the scales fused,
// for the M (token rows) at which cuBLASLt's FP8 / int8 GEMMs are built for much larger tiles:
// - int8 (W8A8): exact int32 sums by dp4a, then y = (float(sum) · xScale[m]) · wScale[n] rounded once to fp16 / bf16,
//   the same operations as W8a8Gemm's epilogue and w8a8GemmRef, so the output equals the reference bit for bit;
// - FP8 E4M3: codes decoded exactly (every E4M3 value is an fp16 value), exact products summed in fp32 (the order
//   differs from cuBLASLt's), then (sum · xScale[m]) · wScale[n] as scaleRowsCols does. NaN codes (0x7F / 0xFF) are
//   not decoded as NaN: weights never hold them, and activations only from NaN inputs.
// x [m, k] and w [n, k] row-major, k contiguous; 1 <= m <= kSmallMMaxRows, k a multiple of 16, x and w 16-byte aligned.
#include <cstdint>

#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels {

constexpr int64_t kSmallMMaxRows = 4;

void w8a8SmallM(const int8_t* x, const float* xScale, const int8_t* w, const float* wScale, void* y, ActType outType,
                int64_t m, int64_t n, int64_t k, Stream stream);
void fp8SmallM(const uint8_t* x, const float* xScale, const uint8_t* w, const float* wScale, void* y, ActType outType,
               int64_t m, int64_t n, int64_t k, Stream stream);

} // namespace cwb::kernels
