#pragma once
// One block of SparseGPT's column loop (Frantar & Alistarh 2023), with the rules of core/compress/sparsegpt_math.cpp:
//   - unstructured: at the block start, each row prunes the `pruneCount` columns of the block with the lowest
//     score w² / U[c][c]² (ties: the earlier column first);
//   - n:m (m > 0): at every m-th column of the block, the m - n lowest scores of the next m columns, with the
//     weights as updated so far (ties: the earlier column first);
//   - per column: q = w if kept else 0, err = (w - q) / U[c][c], later columns of the block w_j -= err · U[c][j]
//     (one fused multiply-add).
// The block's columns of the weight are overwritten with q; the errors come back for the caller's GEMM update of
// the columns after the block. float32 with the same operations as the CPU reference: bit-identical results.
#include <cstdint>

#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels {

constexpr int64_t kSparseGptMaxBlock = 128;

struct SparseGptBlockArgs {
    float* weight = nullptr;           // [rows, cols] row-major; block columns replaced by the pruned values
    const float* hinvUpper = nullptr;  // [cols, cols] row-major upper Cholesky factor U of the damped H⁻¹
    int64_t rows = 0, cols = 0;
    int64_t begin = 0, end = 0;        // 1 <= end - begin <= kSparseGptMaxBlock
    int64_t pruneCount = 0;            // unstructured: columns pruned per row in this block
    int n = 0, m = 0;                  // n:m when m > 0 (2 <= m <= 16, 1 <= n < m, begin and end multiples of m)
    uint8_t* mask = nullptr;           // [rows, cols]: 1 kept, 0 pruned, written for the block's columns
    float* errors = nullptr;           // [rows, errorStride]: err of column c at (c - begin) + errorOffset
    int64_t errorStride = 0;
    int64_t errorOffset = 0;
};

void checkSparseGptBlockArgs(const SparseGptBlockArgs& args, const char* where);
void sparseGptBlockRef(const SparseGptBlockArgs& args);
void sparseGptBlock(const SparseGptBlockArgs& args, Stream stream);

} // namespace cwb::kernels
