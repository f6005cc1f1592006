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

// Decode GEMVs that quantize their own input: one launch where a layer otherwise takes quantizeRows* (act_quant.h)
// and a product. Every block forms each token row's scale and codes from x exactly as quantizeRowsFp8 /
// quantizeRowsInt8Divided do (the same device functions), keeps the codes in shared memory, and streams 16-row tiles
// of the weight through 8-bit tensor-core products (mma m16n8k32: int8 with exact int32 sums; E4M3 with each 64
// columns summed afresh and added in fp32), the 16 warps of a block splitting the columns. Output as the small-M
// kernels: y = (sum · xScale[m]) · wScale[n], rounded once, so the int8 form equals quantizeRowsInt8Divided followed by
// w8a8SmallM bit for bit. Launched with programmatic dependent launch where available (the first weights are loaded
// before the wait). x [m, k] fp16 / bf16 contiguous, w [n, k] row-major, y [m, n] in x's type.
constexpr int64_t kDecodeGemvMaxRows = 8;
// True when these kernels take the shape: 1 <= m <= kDecodeGemvMaxRows, k a positive multiple of 64 whose codes for m
// rows fit the shared memory they may use on the current device (up to 96 KB: k = 11008 fits 8 rows on an A100 or
// H100, 7 on GPUs of compute capability 8.6 / 8.9, which allow 99 KB per block), x and w 16-byte aligned. The FP8
// form also needs compute capability 8.9+ (fp8GemmSupported in fp8_gemm.h).
bool decodeGemvTakes(const void* x, const void* w, int64_t m, int64_t k);
// divisor [k]: SmoothQuant's per-column divisor (x / divisor is quantized), or nullptr.
void w8a8DecodeGemv(const void* x, ActType type, const float* divisor, const int8_t* w, const float* wScale, void* y,
                    int64_t m, int64_t n, int64_t k, Stream stream);
void fp8DecodeGemv(const void* x, ActType type, const uint8_t* w, const float* wScale, void* y, int64_t m, int64_t n,
                   int64_t k, Stream stream);
// 64-column chunks a warp loads before it computes any (4 or 8; default 8, or CWB_W8_DECODE_BATCH): for the bench.
void decodeGemvSetBatch(int chunks);

} // namespace cwb::kernels
