#pragma once
// GPTQ (Frantar et al. 2022, reference IST-DASLab/gptq gptq.py; act-order/static-groups bookkeeping as in
// AutoGPTQ/GPTQModel) as pure tensor functions: a Hessian accumulator over calibration inputs and the
// column-by-column OBS quantization of one [out, in] weight. The work follows the Hessian's device: on the CPU
// the Hessian algebra runs in float64, on CUDA in float32 (as the reference does on GPUs; fp64 there would
// cost more than the few differing levels it saves, see docs/performance.md). The quantization itself
// (scales, rounding) is the float32 code of quant_math.h, so an identity Hessian reproduces quantizeRtn bit
// for bit. Results always come back on the CPU. On CUDA the column loop runs one kernel per block of columns
// (kernels/gptq_block.h, same operations in float32) and one GEMM for the columns after it, when blockSize <= 128.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "core/compress/quant_math.h"

namespace cwb::quant {

struct GptqOptions {
    QuantSpec quant;
    double dampPercent = 0.01;  // λ = dampPercent · mean(diag H), added to the diagonal
    bool actOrder = false;      // process columns by descending diag(H)
    bool staticGroups = false;  // group parameters from the original weight, fixed before any update
    int64_t blockSize = 128;    // columns per lazy batch update
    // Weights that are exactly zero (a pruning mask: 2:4, magnitude, Wanda) stay zero: their level is the zero point,
    // and the error of holding them there flows to later columns as any rounding error does. Without it the updates
    // fill the pruned places and the mask is lost. On CUDA the block kernel takes the mask (GptqBlockArgs::keepZero).
    bool keepZeros = false;
};

// H = 2/n · Σ XᵀX over all n calibration rows seen so far, kept as a running average so that batches can
// be added one at a time (gptq.py add_batch). Every leading dimension of an input counts as rows; the
// reference counts only the first (sequences), which scales H by a constant GPTQ's updates ignore.
// H lives on the device of the first inputs added: float64 on the CPU, float32 on CUDA.
class HessianAccumulator {
public:
    // Only the blocks on and below the diagonal are multiplied (H is symmetric), in blocks of at least
    // blockColumns columns; hessian() mirrors the rest.
    explicit HessianAccumulator(int64_t columns, int64_t blockColumns = 2048);
    void add(const at::Tensor& inputs);  // [..., in]
    at::Tensor hessian() const;          // [in, in] on the inputs' device (float64 on the CPU, float32 on CUDA)
    int64_t samples() const { return mSamples; }
    int64_t columns() const { return mColumns; }

private:
    int64_t mColumns = 0;
    std::vector<int64_t> mBounds;   // column bounds of the blocks
    int64_t mSamples = 0;
    at::Tensor mHessian;
};

struct GptqResult {
    QuantizedWeight weight;     // dequantizes in the original column order
    double squaredError = 0;    // Σ of the OBS losses (w - q)² / (2 · [H⁻¹]cc²)
    double damping = 0;         // λ actually added to the diagonal, after any retries
    at::Tensor permutation;     // int64 [in]: column processed at each step (identity without act-order)
};

// Throws cwb::Error for a bad spec or weight, a Hessian that is not [in, in], non-finite or with a negative
// diagonal, or one that stays not positive definite after the damping is raised ×10 three times.
// Dead columns (H_cc == 0) get H_cc = 1 and a zero weight column, as in the reference. Group parameters are
// taken from the current (already updated) weights when a group starts; where a group starts inside a
// block, its columns beyond the block include the pending block update (the reference reads them stale).
GptqResult gptqQuantize(const at::Tensor& w, const at::Tensor& hessian, const GptqOptions& options);

} // namespace cwb::quant
