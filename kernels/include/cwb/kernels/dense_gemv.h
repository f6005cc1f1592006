#pragma once
// Dense fp16 / bf16 matrix-vector product for decode: y = x Wᵀ (+ bias) (+ residual) for a few rows of x (M up to
// kDenseGemvMaxRows) and a row-major weight W [N, K], fp32 accumulation, one rounding to the activation type at the
// end. Memory-bound by design: one warp streams one weight row with 16-byte loads, many loads in flight, the rows of
// x read from cache, no split-K pass. Rows whose K, strides or addresses do not allow 16-byte loads take a scalar
// path (same results up to summation order). The launcher takes the stream; nothing here needs the CUDA headers.
#include <cstdint>

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
// launch of its own. Each block first replaces the rows of x by x / sqrt(mean(x²) + eps) * weight, rounded to the
// activation type element by element exactly as rmsNorm of decode_ops.h rounds its output, in shared memory; the
// product then reads them from there. The sum of squares is formed in another order than rmsNorm's (its fp32
// result may differ in the last bit).
struct GemvRmsNorm {
    const float* weight = nullptr;   // fp32 [K]
    float eps = 1e-5f;
    // Weight rows each warp computes one after the other: more rows, fewer blocks normalising x again.
    // 0: denseGemvRmsNormRowsPerWarp.
    int64_t rowsPerWarp = 0;
};

// Shared memory the normalised rows of x may take (the default limit of a launch).
constexpr int64_t kDenseGemvRmsNormSharedBytes = 48 * 1024;
// True when `rows` normalised rows of `inputs` elements fit in that shared memory.
constexpr bool denseGemvRmsNormFits(int64_t rows, int64_t inputs) {
    return rows >= 1 && rows <= kDenseGemvMaxRows && inputs >= 1 &&
           rows * ((inputs + 7) / 8 * 8) * 2 <= kDenseGemvRmsNormSharedBytes;
}
// Rows per warp when GemvRmsNorm::rowsPerWarp is 0: as many as leave at least kDenseGemvRmsNormBlocksPerSm blocks per
// multiprocessor (at most kDenseGemvRmsNormMaxRowsPerWarp), so the blocks that each normalise x (8 KB of x and 16 KB
// of norm weight from L2 for a 4096-wide row) stay few beside the weight they stream. On the H200 4 rows per warp was
// the fastest of 1, 2 and 4 for q/k/v, gate/up and the head of Llama-2-7B (bench_decode_ops), so 4 for all three.
constexpr int64_t kDenseGemvRmsNormBlocksPerSm = 2;
constexpr int64_t kDenseGemvRmsNormMaxRowsPerWarp = 4;
int64_t denseGemvRmsNormRowsPerWarp(int64_t outputs, int multiprocessors);

// y = RMSNorm(x) Wᵀ + bias + residual, in one launch. As denseGemv, except that y must not alias x (every block
// reads all of x), and rows of x need no alignment (they are read element by element). Throws KernelError when the
// rows do not fit denseGemvRmsNormFits.
void denseGemvRmsNorm(const void* x, const GemvRmsNorm& norm, const void* weight, const float* bias,
                      const void* residual, void* y, const DenseGemvShape& shape, ActType type, Stream stream);
// How many times denseGemvRmsNorm has launched in this process (tests check that a runtime switch took this path).
int64_t denseGemvRmsNormLaunches();

// CPU reference on float data (values taken as already rounded to `type`): double accumulation, the output rounded
// to `type` once.
void denseGemvRef(const float* x, const float* weight, const float* bias, const float* residual, float* y,
                  const DenseGemvShape& shape, ActType type);

// CPU reference of denseGemvRmsNorm: each row normalised as rmsNormRef (decode_ops.h) does it (double sum, each
// element rounded to `type`), then denseGemvRef.
void denseGemvRmsNormRef(const float* x, const float* normWeight, float eps, const float* weight, const float* bias,
                         const float* residual, float* y, const DenseGemvShape& shape, ActType type);

} // namespace cwb::kernels
