#pragma once
// FP8 E4M3 ("fn" variant: bias 7, 3 mantissa bits, subnormals, no infinities, max ±448, NaN = S.1111.111)
// emulated on fp32, since LibTorch 1.13 has no float8 dtype. Weights store one byte per value plus an fp32
// scale per output channel or per tensor; activations are fake-quantized per token.
#include <cstddef>
#include <cstdint>

#include <ATen/ATen.h>

namespace cwb::quant {

// Nearest E4M3FN value, ties to even; saturates at ±448 (infinities too); NaN stays NaN; keeps the sign of zero.
float roundToE4m3(float x);
uint8_t encodeE4m3(float x);      // rounds as above; NaN → 0x7F (or 0xFF with the sign bit)
float decodeE4m3(uint8_t code);   // 0x7F and 0xFF decode to NaN

// roundToE4m3 elementwise with tensor ops, so it runs on any device; float32 result.
at::Tensor roundToE4m3(const at::Tensor& x);

struct Fp8Weight {
    at::Tensor codes;    // uint8 [out, in]
    at::Tensor scales;   // float32 [out] per channel, or [1] per tensor
    at::Tensor dequantize() const;   // float32 [out, in] = decode(codes) · scale
    size_t storageBytes() const;     // codes plus scales
};

// scale = amax / 448 over each row (perChannel) or the whole matrix; an all-zero row gets scale 1.
// Computed on the CPU (one byte per weight). Throws cwb::Error unless w is a finite 2-D matrix.
Fp8Weight quantizeFp8(const at::Tensor& w, bool perChannel);

// Dynamic activation quantization over the last dimension: per row scale amax/448, round to E4M3,
// dequantize. Same shape, dtype and device as x. For an x that requires grad, the gradient passes through the
// rounding unchanged (straight-through estimator).
at::Tensor fakeQuantizeFp8PerToken(const at::Tensor& x);

// encodeE4m3 elementwise with tensor ops (any device): uint8 codes of values already on the E4M3 grid (the
// output of roundToE4m3); NaN gives 0x7F / 0xFF.
at::Tensor encodeE4m3(const at::Tensor& values);
// The same quantization as fakeQuantizeFp8PerToken, kept as codes for an FP8 GEMM: x [rows, cols] ->
// codes uint8 [rows, cols] and scales float32 [rows], on x's device (decode(codes) · scale = the fake-quantized x).
void quantizeFp8PerToken(const at::Tensor& x, at::Tensor& codes, at::Tensor& scales);

} // namespace cwb::quant
