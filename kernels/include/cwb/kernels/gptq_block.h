#pragma once
// One block of GPTQ's column loop (Frantar et al. 2022), with the rules of core/compress/gptq_math.cpp:
// for each column c of the block [begin, end), in processing order (act-order is the caller's permutation),
//   - at a dynamic group start (c % groupWidth == 0): scale and zero per row from the min/max of the group's
//     current weights (columns past the block are read with the pending update of this block's errors so far),
//     sym: scale = 2·max|x| / maxq, zero = 2^(bits-1); asym: scale = (max(x,0) - min(x,0)) / maxq,
//     zero = round(-min / scale); all-zero: range [-1, 1]; the scale then rounded up to an fp16 value;
//   - level = clamp(round_half_even(w / scale) + zero, 0, maxq), or the group's zero where keepZero marks the
//     weight (a pruned weight stays exactly 0: q = 0 and its whole value becomes the error), q = (level - zero) · scale,
//     err = (w - q) / U[c][c] with U the upper Cholesky factor of H⁻¹,
//   - the block's later columns j: w_j -= err · U[c][j] (one fused multiply-add).
// The errors come back so that the caller updates the columns after the block with one GEMM
// (W[:, end:] -= E · U[begin:end, end:]). Every row is independent: float32 throughout, IEEE division and
// round-half-even, and the CPU reference performs the same operations in the same order, so levels, scales,
// zeros and errors agree bit for bit.
#include <cstdint>

#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels {

constexpr int64_t kGptqMaxBlock = 128;  // columns one launch can take

struct GptqBlockArgs {
    float* weight = nullptr;          // [rows, cols] row-major, processing order; the block's columns are consumed
    const float* hinvUpper = nullptr; // [cols, cols] row-major: U, upper Cholesky factor of the damped H⁻¹
    int64_t rows = 0, cols = 0;
    int64_t begin = 0, end = 0;       // the block's columns; 1 <= end - begin <= kGptqMaxBlock
    int bits = 4;                     // 2..8
    bool symmetric = true;
    // Group parameters [rows, groups]. Dynamic groups (columnGroup null): group c / groupWidth, written at its
    // first column from the weights as updated so far. Static (columnGroup given, one entry per processed
    // column): read only.
    int64_t groupWidth = 128;
    int64_t groups = 1;
    float* scales = nullptr;
    int32_t* zeros = nullptr;
    const int32_t* columnGroup = nullptr;
    int32_t* levels = nullptr;        // [rows, cols] processing order: column c written
    // [rows, cols] processing order, or null: nonzero marks a weight whose level is the zero point (keeps a pruning
    // mask through GPTQ, GptqOptions::keepZeros).
    const uint8_t* keepZero = nullptr;
    float* errors = nullptr;          // [rows, errorStride]: err of column c at (c - begin) + errorOffset
    int64_t errorStride = 0;
    int64_t errorOffset = 0;
};

// Throws KernelError naming the problem for inconsistent arguments.
void checkGptqBlockArgs(const GptqBlockArgs& args, const char* where);

// CPU reference (every pointer host memory).
void gptqBlockRef(const GptqBlockArgs& args);
// CUDA launcher (every pointer device memory); one warp per row.
void gptqBlock(const GptqBlockArgs& args, Stream stream);

} // namespace cwb::kernels
