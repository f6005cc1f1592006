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

// CPU reference on float data (values taken as already rounded to `type`): double accumulation, the output rounded
// to `type` once.
void denseGemvRef(const float* x, const float* weight, const float* bias, const float* residual, float* y,
                  const DenseGemvShape& shape, ActType type);

} // namespace cwb::kernels
