#pragma once
// Integer layers on the CPU from their packed levels (any of 2-8 bits, any group size, act-order), so that a
// quantized variant measured on the CPU reads its small weights instead of a dequantized float copy. No dense copy is
// held: levels are kept one per byte (5-8 bits) or two per byte (2-4 bits), columns in group order (act-order's
// groups made contiguous, the input permuted to match). Up to kCpuGemvMaxRows rows of input (decode), each weight row
// is unpacked once per call into a float buffer with its group's zero subtracted (exact: small integers), and its
// dot with every input row is summed per group and scaled: y = Σ_g s_g · Σ_{k in g} (q_k − z_g) · x_k. Above, tiles
// of weight rows are dequantized ((q − z) · s, the values QuantizedWeight::dequantize gives) into a scratch and
// multiplied with at::mm. Rows are divided among LibTorch's intra-op threads. Float32 in and out.
#include <memory>
#include <string>

#include "core/runtime/cuda_linear.h"

namespace cwb {

constexpr int64_t kCpuGemvMaxRows = 8;

// The kernel for `weight`, whose input is first divided by `inputScale` (AWQ; undefined: none), as
// IntLinear::prepareInput does. Returns nullptr and sets `reason` where it does not apply.
std::unique_ptr<NativeIntLinear> makeCpuIntLinear(const quant::QuantizedWeight& weight, const at::Tensor& inputScale,
                                                  std::string& reason);

} // namespace cwb
