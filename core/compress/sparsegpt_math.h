#pragma once
// SparseGPT (Frantar & Alistarh 2023) for one linear layer: choose a mask block by block from the
// inverse-Hessian Cholesky factor and update the unpruned weights (OBS) so the layer output moves least.
#include <cstdint>

#include <ATen/ATen.h>

namespace cwb::prune {

struct SparseGptOptions {
    double sparsity = 0.5;      // unstructured: fraction pruned per row within each block, in [0, 1)
    int n = 0, m = 0;           // n:m when m > 0: keep n of every m columns (sparsity is then ignored)
    int64_t blockSize = 128;    // columns per block; rounded up to a multiple of m for n:m
    double dampPercent = 0.01;  // λ = dampPercent · mean(diag H) added to the diagonal
};

struct SparseGptResult {
    at::Tensor weight;          // pruned and updated, float32 [out, in]
    at::Tensor mask;            // bool [out, in], true = kept
    double squaredError = 0;    // ½ Σ_rows ΔW H ΔWᵀ with the damped H (SparseGPT's loss); for
                                // H = 2/n·XᵀX and no damping this is ‖ΔW Xᵀ‖² / n
};

// w [out, in]; hessian [in, in], e.g. 2/n·XᵀX over the layer's calibration inputs. Runs on the Hessian's
// device: in double on the CPU, in float32 on CUDA. The result is on the CPU.
// Throws cwb::Error on bad options, a Hessian of the wrong size, or one that stays singular after damping.
SparseGptResult sparseGpt(const at::Tensor& w, const at::Tensor& hessian, const SparseGptOptions& options);

} // namespace cwb::prune
