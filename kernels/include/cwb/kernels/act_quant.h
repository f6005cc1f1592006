#pragma once
// The pieces around the FP8 and W8A8 GEMMs of a native layer, one kernel each, so a layer's forward is
// quantize -> GEMM -> (FP8 only) scale epilogue with no LibTorch ops in between:
// - per-token FP8 E4M3 quantization: amax = max |x| over the row, scale = amax / 448 (IEEE float division; 1 when
//   that is 0), code = E4M3 of x / scale rounded to nearest even, saturating at ±448, signed zero kept; the codes
//   and scales of quant::quantizeFp8PerToken (core/compress/fp8_math.h) on the same float values;
// - per-token int8 quantization of x / divisor (SmoothQuant's input divisor, one float per column; none: x itself):
//   v = x / divisor (IEEE), scale = max |v| / 127 (1 when 0), code = clamp(rint(v / scale), -127, 127); the codes
//   and scales of quant::quantizeInt8PerToken(x / s) in float32 (core/compress/smoothquant_math.h);
// - the scale epilogue: y[m, n] = (sums[m, n] · rowScale[m]) · colScale[n] in float, rounded once to fp16 / bf16.
// Rows are fp16 / bf16 (ActType), read as floats exactly. The CPU references take the same 16-bit patterns.
#include <cstdint>

#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels {

// CPU references. x holds fp16 / bf16 bit patterns [rows, cols]; codes [rows, cols], scales [rows].
// The FP8 reference encodes by a search over the E4M3 value table (not the kernel's bit arithmetic).
void quantizeRowsFp8Ref(const uint16_t* x, ActType type, int64_t rows, int64_t cols, uint8_t* codes, float* scales);
// divisor [cols] or nullptr.
void quantizeRowsInt8DividedRef(const uint16_t* x, ActType type, const float* divisor, int64_t rows, int64_t cols,
                                int8_t* codes, float* scales);
// sums [m, n] float; y [m, n] as fp16 / bf16 bit patterns.
void scaleRowsColsRef(const float* sums, const float* rowScale, const float* colScale, int64_t m, int64_t n,
                      ActType outType, uint16_t* y);

// GPU: device pointers, launched on `stream`; no allocation, no synchronisation (safe inside a CUDA graph capture).
void quantizeRowsFp8(const void* x, ActType type, int64_t rows, int64_t cols, uint8_t* codes, float* scales,
                     Stream stream);
void quantizeRowsInt8Divided(const void* x, ActType type, const float* divisor, int64_t rows, int64_t cols,
                             int8_t* codes, float* scales, Stream stream);
void scaleRowsCols(const float* sums, const float* rowScale, const float* colScale, int64_t m, int64_t n,
                   ActType outType, void* y, Stream stream);

} // namespace cwb::kernels
