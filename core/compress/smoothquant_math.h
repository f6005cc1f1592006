#pragma once
// SmoothQuant (Xiao et al. 2023) math: per-input-channel smoothing scales that move activation outliers
// into the weights (x/s · (W·s)ᵀ = x·Wᵀ), and the W8A8 pieces it is evaluated with: int8 per-token
// activation fake quantization and int8 per-output-channel weights.
#include <cstddef>
#include <cstdint>

#include <ATen/ATen.h>

namespace cwb::quant {

// s_j = max|X_j|^α / max|W_j|^(1−α) over input channel j, where W stacks the rows of every linear that
// reads this input. A channel with zero activation or zero weight maximum gets s = 1 (nothing to
// balance); otherwise s ≥ 1e-5. activationAbsMax [in] (≥ 0), weights [out_total, in], α ∈ [0, 1]. float32 [in].
at::Tensor smoothingScales(const at::Tensor& activationAbsMax, const at::Tensor& weights, double alpha);

// max |x_j| per input column over every row fed to add(). NaN inputs propagate.
class AbsMaxAccumulator {
public:
    explicit AbsMaxAccumulator(int64_t columns);
    void add(const at::Tensor& inputs);   // [..., columns]
    at::Tensor absMax() const;            // float32 [columns]

private:
    at::Tensor mMax;
};

// Symmetric int8 over the last dimension: scale amax/127 per row, round half to even, clamp to
// [−127, 127], dequantize. An all-zero row stays zero. Same shape and dtype as x.
at::Tensor fakeQuantizeInt8PerToken(const at::Tensor& x);
// The same quantization kept as codes for an int8 GEMM: x [rows, cols] -> codes int8 [rows, cols] and
// scales float32 [rows], on x's device (codes · scale = fakeQuantizeInt8PerToken(x) in float32).
void quantizeInt8PerToken(const at::Tensor& x, at::Tensor& codes, at::Tensor& scales);

struct Int8Weight {
    at::Tensor q;        // int8 [out, in]
    at::Tensor scales;   // float32 [out]
    at::Tensor dequantize() const;   // float32 [out, in]
    size_t storageBytes() const;
};

// Scale amax/127 per output row (1 for an all-zero row); |w − dequantize| ≤ scale/2.
Int8Weight quantizeInt8PerChannel(const at::Tensor& w);

} // namespace cwb::quant
