#pragma once
// The packed layouts of quantized checkpoints as transformers, vLLM and llama.cpp read them, as pure tensor
// functions from and to cwb's QuantizedWeight ([out, in] levels, scales and zeros per group).
//
// GPTQ (AutoGPTQ "gptq" checkpoint format, v1):
//   qweight int32 [⌈in · bits / 32⌉, out]  levels packed along the INPUT dim as a little-endian bit stream: input i
//           at bit bits·i of its column (2/4/8 bits: word i / (32/bits), bits·(i mod 32/bits), a last partial word
//           zero-filled as GPTQModel writes it; 3 bits: 32 inputs fill 3 words, inputs 10 and 21 of each 32
//           straddling two words, and in and out must be multiples of 32)
//   qzeros  int32 [groups, ⌈out · bits / 32⌉]  (zero − 1) packed along the OUTPUT dim, same bit order
//   scales  fp16  [groups, out];  g_idx int32 [in] (group of each input column; act-order permutes it)
//   W[o, i] = scales[g, o] · (q[i, o] − (qzeros[g, o] + 1)), g = g_idx[i]
// AWQ (AutoAWQ "gemm" version, 4 bits):
//   qweight int32 [in, out / 8]  levels packed along the OUTPUT dim; nibble k of word c holds output
//   column 8c + kAwqOrder[k] with kAwqOrder = {0, 2, 4, 6, 1, 3, 5, 7}
//   qzeros  int32 [groups, out / 8]  zeros as they are (no offset), same order;  scales fp16 [groups, out]
//   W[o, i] = scales[i / group, o] · (q[i, o] − z[i / group, o])
#include <string>

#include <ATen/ATen.h>

#include "core/compress/quant_math.h"

namespace cwb::layouts {

struct PackedLayer {
    at::Tensor qweight;   // int32
    at::Tensor qzeros;    // int32
    at::Tensor scales;    // fp16
    at::Tensor gIdx;      // int32 (GPTQ only)
};

// Empty when the layer fits the layout, else why not (bits, divisibility, zero points, group order).
std::string gptqRefusal(const quant::QuantizedWeight& w);
std::string awqRefusal(const quant::QuantizedWeight& w);
// The same from what a recipe says before the layer exists: bit width, group size (<= 0: per channel or tensor),
// shape (rows/cols < 0: not known yet, e.g. after structured pruning) and whether act-order permutes the groups.
// Zero points are not known then, so gptqSpecRefusal cannot see a zero of 0.
std::string gptqSpecRefusal(int bits, int64_t rows, int64_t cols);
std::string awqSpecRefusal(int bits, int64_t groupSize, int64_t rows, int64_t cols, bool permutedGroups);

// int32 words that n values of `bits` take in GPTQ's bit stream: ⌈n · bits / 32⌉ (gptqRefusal checks n fits).
int64_t gptqWords(int64_t n, int bits);

PackedLayer packGptq(const quant::QuantizedWeight& w);
PackedLayer packAwq(const quant::QuantizedWeight& w);
// The same tensors one at a time, for writers that stream a layer part by part and keep none of it.
at::Tensor packGptqWeight(const quant::QuantizedWeight& w);
at::Tensor packGptqZeros(const quant::QuantizedWeight& w);
at::Tensor packAwqWeight(const quant::QuantizedWeight& w);
at::Tensor packAwqZeros(const quant::QuantizedWeight& w);
at::Tensor packedScales(const quant::QuantizedWeight& w);   // fp16 [groups, out], both layouts

// Inverses; check the tensor shapes against rows × cols (GPTQ: cols is in_features, which a padded qweight does
// not tell; the loader takes it from g_idx) and throw cwb::Error(file, ...) when they differ.
quant::QuantizedWeight unpackGptq(const PackedLayer& p, int bits, int64_t groupSize, bool symmetric, int64_t rows,
                                  int64_t cols, const std::string& file);
quant::QuantizedWeight unpackAwq(const PackedLayer& p, int64_t groupSize, int64_t rows, int64_t cols,
                                 const std::string& file);

} // namespace cwb::layouts
