#pragma once
// Integer weight quantization as pure tensor functions (no I/O, no progress): min/max scale and zero point
// per group of input columns, round-to-nearest, and the GPTQ-style packing of levels into int32 words.
// Everything is float32 on the inputs' device (GPTQ runs them on CUDA); GPTQ and AWQ (gptq_math.h, awq_math.h)
// build on these.
//
// Rounding rule: round half to EVEN (at::round, the same as torch.round in the GPTQ and AWQ references), so
// 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, then clamp to [0, 2^bits - 1].
#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>

namespace cwb::quant {

struct QuantSpec {
    int bits = 4;             // 2..8
    bool symmetric = true;    // sym: zero point fixed at 2^(bits-1); asym: min/max range with integer zero point
    int64_t groupSize = 128;  // >0: groups of that many input columns (the last may be shorter);
                              // -1: per output channel; 0: per tensor
};

struct QuantizedWeight {
    QuantSpec spec;
    int64_t rows = 0, cols = 0;  // [out, in]
    at::Tensor packed;           // int32 [rows, ceil(cols / (32 / bits))]: levels along the input dim, low bits first
    at::Tensor scales;           // float32 [rows, groups] (per tensor: one group, the same value in every row)
    at::Tensor zeros;            // int32 [rows, groups] integer zero points (sym: 2^(bits-1))
    at::Tensor groupIndex;       // int32 [cols] group of each input column; always filled (act-order permutes it)

    at::Tensor levels() const;      // unpacked levels, int32 [rows, cols]
    at::Tensor dequantize() const;  // float32 [rows, cols] = (level - zero[g]) * scale[g]
    // Bytes of the packed form: packed words as cwb holds them (whole levels per word: 10 at 3 bits, where GPTQ's
    // 3-bit bit stream needs 6% fewer), scales as fp16, zeros packed the same way ([groups, ceil(rows / (32 /
    // bits))] words; per tensor one word), and groupIndex (int32) only when it differs from column / groupSize.
    // Per tensor stores one scale, not one per row.
    size_t storageBytes() const;
};

// Throws cwb::Error unless 2 <= bits <= 8 and groupSize >= -1.
void validateSpec(const QuantSpec& spec);
// Throws cwb::Error unless w is a defined, non-empty, 2-D, finite floating tensor.
void validateWeight(const at::Tensor& w, const char* context);

int levelsPerWord(int bits);                                   // 32 / bits (3 bits: 10)
int64_t groupWidth(int64_t cols, int64_t groupSize);           // groupSize > 0 ? groupSize : cols
int64_t groupCount(int64_t cols, int64_t groupSize);           // ceil(cols / groupWidth)
at::Tensor defaultGroupIndex(int64_t cols, int64_t groupSize); // int32 [cols]: column / groupWidth

// The smallest fp16 value >= x (positive, finite, at most 65504), as float32: scales are rounded this way so that
// checkpoints storing them as fp16 hold exactly the quantized weights.
at::Tensor roundUpToFp16(const at::Tensor& x);

// Scale (float32 [rows]) and zero (int32 [rows]) for each row of a [rows, n] slab, by the min/max rule:
// sym: scale = 2·max|x| / (2^bits - 1), zero = 2^(bits-1); asym: range [min(x,0), max(x,0)],
// scale = range / (2^bits - 1), zero = round(-min / scale); the scale is then rounded up to fp16. An all-zero row gets the range [-1, 1].
// Unlike the GPTQ reference, a sym row with no negative value still gets the full ±max range (the
// reference halves it, clipping positive weights at 7/15 of the maximum for 4 bits).
void groupParams(const at::Tensor& slab, const QuantSpec& spec, at::Tensor& scale, at::Tensor& zero);

// Levels int32 = clamp(round_half_even(w / scale) + zero, 0, 2^bits - 1); scale and zero broadcast to w.
at::Tensor quantizeLevels(const at::Tensor& w, const at::Tensor& scale, const at::Tensor& zero, int bits);

// Round-to-nearest quantization of a [out, in] weight with the min/max parameters of each group.
QuantizedWeight quantizeRtn(const at::Tensor& w, const QuantSpec& spec);
// quantizeRtn(w, spec).dequantize(), bit for bit, computed where w lives with nothing packed: all groups of a row
// at once (a search that rounds a layer many times, e.g. AWQ's, stays on the GPU).
at::Tensor roundTrip(const at::Tensor& w, const QuantSpec& spec);

// Packs int levels [rows, cols] in [0, 2^bits - 1] into int32 words; throws on a level out of range.
at::Tensor packLevels(const at::Tensor& levels, int bits);
// Inverse of packLevels; `cols` says how many levels of the last word are real.
at::Tensor unpackLevels(const at::Tensor& packed, int bits, int64_t cols);
// Words another writer packed in cwb's layout (2, 4 or 8 bits: whole levels per word, low bits first), as cwb holds
// them: int32 [rows, ceil(cols / (32 / bits))] with the bits past the last level cleared. A copy when it clears any.
at::Tensor adoptPackedWords(const at::Tensor& words, int bits, int64_t cols);

} // namespace cwb::quant
