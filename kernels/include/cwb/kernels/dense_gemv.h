#pragma once
// Dense fp16 / bf16 matrix-vector product for decode: y = x Wᵀ (+ bias) (+ residual) for a few rows of x (M up to
// kDenseGemvMaxRows) and a row-major weight W [N, K], fp32 accumulation, one rounding to the activation type at the
// end. Memory-bound by design: one warp streams one weight row with 16-byte loads, many loads in flight, the rows of
// x read from cache, no split-K pass. Rows whose K, strides or addresses do not allow 16-byte loads take a scalar
// path (same results up to summation order). The launcher takes the stream; nothing here needs the CUDA headers.
#include <cstdint>
#include <string>

#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels {

// Most rows of x one launch takes (the weight is read once for all of them).
constexpr int64_t kDenseGemvMaxRows = 8;

struct DenseGemvShape {
    int64_t rows = 1;      // M: rows of x and y, 1..kDenseGemvMaxRows
    int64_t outputs = 0;   // N: rows of W, elements per row of y
    int64_t inputs = 0;    // K: columns of W, elements per row of x
    // Element (m, k) of x is x[m * xStride + k]; (m, n) of y is y[m * yStride + n], of residual
    // residual[m * residualStride + n]. W is contiguous [N, K].
    int64_t xStride = 0, yStride = 0, residualStride = 0;
};

// y = x Wᵀ + bias + residual. bias (fp32 [N]) and residual (activation type) may be nullptr; y may alias residual
// (each element is read before it is written, by the same thread). x, W, residual and y share `type`.
void denseGemv(const void* x, const void* weight, const float* bias, const void* residual, void* y,
               const DenseGemvShape& shape, ActType type, Stream stream);

// RMSNorm folded into the product (decode: the norm before q/k/v, gate/up and the output head), so that it needs no
// launch of its own: y[m, n] = r_m Σ_k W[n, k] (weight[k] x[m, k]) with r_m = 1 / sqrt(mean_k(x[m, k]²) + eps). Each
// warp sums x² over the same elements of x it multiplies, so nothing is normalised ahead of the weight loads. The
// norm weight is read in the activation type (coalesced like x; an fp32 one took 2-4 scattered loads per 8 elements
// and made the kernel L1-bound), and the normalised x is never rounded (rmsNorm of decode_ops.h takes an fp32 weight
// and rounds x before the product), so results differ from rmsNorm + denseGemv by those two roundings.
struct GemvRmsNorm {
    const void* weight = nullptr;   // [K], in the activation type
    float eps = 1e-5f;
};

// y = RMSNorm(x) Wᵀ + bias + residual, in one launch. As denseGemv, except that y must not alias x (every warp reads
// all of x). x is read in 16-byte pieces when it, its rows and the norm weight allow it, else element by element.
void denseGemvRmsNorm(const void* x, const GemvRmsNorm& norm, const void* weight, const float* bias,
                      const void* residual, void* y, const DenseGemvShape& shape, ActType type, Stream stream);
// How many times denseGemvRmsNorm has launched in this process (tests check that a runtime switch took this path).
int64_t denseGemvRmsNormLaunches();

// SwiGLU of the fused [gate; up] projection in one launch: W is [2N, K] (the N gate rows, then the N up rows), and
// y[m, n] = silu(g) u with g = (x Wᵀ)[m, n] + bias[n], u = (x Wᵀ)[m, N + n] + bias[N + n], neither rounded before
// the product (silu(g) = g / (1 + exp(-g)), as siluMul of decode_ops.h). shape.outputs is N, y has N elements per row;
// bias fp32 [2N] or nullptr. With `norm` (nullptr: none), x is normalised as in denseGemvRmsNorm. y must not alias x.
void denseGemvSwiGlu(const void* x, const GemvRmsNorm* norm, const void* weight, const float* bias, void* y,
                     const DenseGemvShape& shape, ActType type, Stream stream);
// How many times denseGemvSwiGlu has launched in this process.
int64_t denseGemvSwiGluLaunches();

// 2:4 sparse weights in packed rows, for the same GEMV (decode of pruned 2:4 layers without a dense copy): every group
// of 4 columns of a row holds at most 2 non-zeros, and only those are read, with 4 bits of positions per group, so a
// row costs 1.125 K bytes instead of 2 K. Layout for W [N, K] (K a multiple of kSparse24RowsColumnMultiple):
// - values [N, K/2] in the activation type: group g (columns 4g..4g+3) stores its kept elements at 2g and 2g + 1, in
//   column order (zeros where a group has fewer than two non-zeros);
// - meta [N, K/16] 16-bit words: bits 4j..4j+3 of word w describe group 4w + j, bits 0-1 the column (0..3) in the
//   group of value 2g and bits 2-3 that of value 2g + 1 (always the larger of the two).
// Both contiguous and 16-byte aligned (each row of values is a whole number of 16-byte pieces).
constexpr int64_t kSparse24RowsColumnMultiple = 16;

struct Sparse24RowsWeight {
    const void* values = nullptr;     // [N, K/2] activation type
    const uint16_t* meta = nullptr;   // [N, K/16]
};

// y = x Wᵀ + bias + residual for W in packed 2:4 rows; as denseGemv otherwise (rows of x up to kDenseGemvMaxRows,
// y may alias residual). Throws KernelError when K is not a multiple of kSparse24RowsColumnMultiple or the values
// are not 16-byte aligned.
void sparse24Gemv(const void* x, const Sparse24RowsWeight& weight, const float* bias, const void* residual, void* y,
                  const DenseGemvShape& shape, ActType type, Stream stream);
// As denseGemvRmsNorm, for W in packed 2:4 rows.
void sparse24GemvRmsNorm(const void* x, const GemvRmsNorm& norm, const Sparse24RowsWeight& weight, const float* bias,
                         const void* residual, void* y, const DenseGemvShape& shape, ActType type, Stream stream);
// As denseGemvSwiGlu, for the fused [gate; up] W [2N, K] in packed 2:4 rows.
void sparse24GemvSwiGlu(const void* x, const GemvRmsNorm* norm, const Sparse24RowsWeight& weight, const float* bias,
                        void* y, const DenseGemvShape& shape, ActType type, Stream stream);
// How many times one of the three has launched in this process (tests check that the runtime took this path).
int64_t sparse24GemvLaunches();

// The dense weight [rows, cols] (contiguous, activation type) of packed 2:4 rows, zeros where nothing is stored: one
// 16-byte read of values and one position word per 16 columns, two 16-byte writes. For inputs of more rows than the
// GEMV takes, when the runtime keeps no dense copy. Same requirements as sparse24Gemv; `dense` 16-byte aligned.
void sparse24UnpackRows(const Sparse24RowsWeight& weight, void* dense, int64_t rows, int64_t cols, ActType type,
                        Stream stream);

// Packs a dense W [rows, cols] (float values, taken as already in the activation type) into the layout above:
// values [rows, cols/2], meta [rows, cols/16]. Returns false with `why` (the first row and group that break it, or
// the column count) when a group has more than two non-zeros or cols is not a multiple of 16; nothing is then valid.
// Where a group has fewer than two non-zeros the positions are the first free ones, in column order.
bool packSparse24Rows(const float* dense, int64_t rows, int64_t cols, float* values, uint16_t* meta, std::string* why);
// The inverse: dense [rows, cols], zeros where nothing is stored (a column named twice holds the later value).
void unpackSparse24Rows(const float* values, const uint16_t* meta, int64_t rows, int64_t cols, float* dense);

// CPU reference on float data (values taken as already rounded to `type`): double accumulation, the output rounded
// to `type` once.
void denseGemvRef(const float* x, const float* weight, const float* bias, const float* residual, float* y,
                  const DenseGemvShape& shape, ActType type);

// CPU reference of denseGemvRmsNorm (normWeight's values taken as rounded to `type`, like the others): r Σ W
// (normWeight x) in double, bias and residual added, rounded once.
void denseGemvRmsNormRef(const float* x, const float* normWeight, float eps, const float* weight, const float* bias,
                         const float* residual, float* y, const DenseGemvShape& shape, ActType type);

// CPU reference of denseGemvSwiGlu (normWeight nullptr: no norm): g and u in double, silu(g) u rounded once.
void denseGemvSwiGluRef(const float* x, const float* normWeight, float eps, const float* weight, const float* bias,
                        float* y, const DenseGemvShape& shape, ActType type);

} // namespace cwb::kernels
