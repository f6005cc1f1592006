#pragma once
// The weight layout of the W4A16 / W8A16 kernels ("tiled16x64") and its CPU pack / unpack from the core's
// integer format (cwb::quant::QuantizedWeight, seen here through raw host pointers so no LibTorch is needed).
//
// Layout. The weight is [rows = N out, cols = K in]. Columns are first put in group order (stable sort by group
// index: act-order becomes contiguous groups) and each group is padded with zero weights to a multiple of 64, giving
// paddedCols; rows are padded to a multiple of 16. The weight is cut into tiles of 16 rows x 64 columns ("chunks").
// The kernel computes Y^T = W·X^T with mma.m16n8k16, weights as the A operand, so each of the 32 lanes of a warp
// holds, per chunk, rows r0+g and r0+g+8 (g = lane/4) and the 16 columns c0 + 16·(lane%4) + [0, 16): k-step s
// (0..3) of the mma uses columns c0 + 16·(lane%4) + 4s + {0,1} as mma columns 2·(lane%4)+{0,1} and +{2,3} as
// mma columns 8+2·(lane%4)+{0,1}. A lane's activations for a chunk are then 16 contiguous values (two 16-byte loads).
//   4 bits: one 32-bit word per k-step; for the 8 values e0..e7 = (row g, col+0), (g, +1), (g+8, +0), (g+8, +1),
//           (g, +2), (g, +3), (g+8, +2), (g+8, +3), e(2i) sits in nibble i and e(2i+1) in nibble 4+i, so
//           (word >> 4i) & 0x000F000F | 0x64006400 is the fp16 pair (1024 + e(2i), 1024 + e(2i+1)).
//           words[((tile·chunks + chunk)·32 + lane)·4 + s]: a warp reads 512 contiguous bytes per chunk.
//   8 bits: two words per k-step, bytes e0..e3 then e4..e7; the lane's 8 words are two 16-byte vectors, vector v at
//           uint4 index ((tile·chunks + chunk)·2 + v)·32 + lane (each warp-wide load is 512 contiguous bytes).
// scaleZero[(tile·groups + group)·16 + r] holds the pair (scale, zero) for row 16·tile + r in the activation type
// (low 16 bits: scale; high 16 bits: the integer zero point, exact in fp16 and bf16). chunkGroup[chunk] is the
// group of every column of that chunk; columnOf[p] is the source column of packed column p (-1: padding). When
// columnOf is the identity and cols == paddedCols it is left empty and the kernels read X directly.
#include <cstdint>
#include <vector>

#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels {

// The core's format: levels in [0, 2^bits - 1] packed low bits first into int32 words along the input dimension.
struct CoreIntWeightView {
    int bits = 4;
    int64_t rows = 0, cols = 0, groups = 0;
    const int32_t* packed = nullptr;      // [rows, ceil(cols / (32 / bits))]
    const float* scales = nullptr;        // [rows, groups]
    const int32_t* zeros = nullptr;       // [rows, groups]
    const int32_t* groupIndex = nullptr;  // [cols], group of each input column (act-order permutes it)
};

constexpr int kTileRows = 16;
constexpr int kChunkCols = 64;

struct TiledIntWeight {
    int bits = 4;
    ActType act = ActType::Float16;
    int64_t rows = 0, cols = 0, groups = 0;
    int64_t paddedRows = 0, paddedCols = 0;
    std::vector<uint32_t> words;        // layout above
    std::vector<uint32_t> scaleZero;    // [paddedRows / 16][groups][16]
    std::vector<int32_t> chunkGroup;    // [paddedCols / 64]
    std::vector<int32_t> columnOf;      // [paddedCols] or empty (identity)

    int64_t tiles() const { return paddedRows / kTileRows; }
    int64_t chunks() const { return paddedCols / kChunkCols; }
    size_t weightBytes() const { return words.size() * 4 + scaleZero.size() * 4 + chunkGroup.size() * 4; }
};

// Throws KernelError when bits is not 4 or 8, a pointer is missing, a level or group index is out of range.
// Row tiles are packed on `threads` threads (0: one per hardware thread); the result does not depend on it.
TiledIntWeight packTiled(const CoreIntWeightView& core, ActType act, int threads = 0);

// Inverse of packTiled: levels one per byte [rows, cols], scales [rows, groups] (the act-type values, as float),
// zeros [rows, groups], groupIndex [cols].
struct UnpackedIntWeight {
    std::vector<uint8_t> levels;
    std::vector<float> scales;
    std::vector<int32_t> zeros;
    std::vector<int32_t> groupIndex;
};
UnpackedIntWeight unpackTiled(const TiledIntWeight& w);

// Packs one-per-byte levels [rows, cols] into the core's int32 words (for tests and the CPU side of the bench).
std::vector<int32_t> packCoreWords(const uint8_t* levels, int64_t rows, int64_t cols, int bits);

// Dense dequantized weight [rows, cols] in float from the tiled layout, (level - zero) · scale with the stored
// (activation-type) scales; roundToAct also rounds each value to the activation type, as rtnDequantize does.
// The GEMM kernels apply the scale to fp32 sums instead, so their reference does not round.
std::vector<float> dequantizeTiledRef(const TiledIntWeight& w, bool roundToAct = true);

} // namespace cwb::kernels
