#pragma once
// AWQ activation-aware scaling (Lin et al. 2023, reference mit-han-lab/llm-awq auto_scale.py) as a pure
// tensor function: grid-search the exponent α of per-input-channel scales s = mean|x|^α that minimise the
// output error of round-to-nearest quantization of W·diag(s). Applying the scales (folding 1/s into the
// previous norm or linear layer) is the caller's business.
#include <ATen/ATen.h>

#include <vector>

#include "core/compress/quant_math.h"

namespace cwb::quant {

struct AwqOptions {
    QuantSpec quant;
    int grid = 20;  // candidates α = 0, 1/grid, ..., (grid-1)/grid
    // Rows of the weights are searched in slices of at most this many weights, so the search's temporaries stay
    // slice-sized: a 128K × 4096 head no longer needs several 4 GiB float64 copies per candidate.
    int64_t sliceWeights = int64_t(1) << 22;
};

struct AwqResult {
    at::Tensor inputScales;      // float32 [in]: W' = W·diag(s), x' = x / s
    double bestError = 0;        // error of the chosen α
    double alpha = 0;            // the chosen α
    std::vector<double> errors;  // error of every candidate, in grid order
};

// weights: the linear layers sharing one input, concatenated along rows [out_total, in]; inputs: calibration
// activations [n, in]. s = max(mean|x_j|^α, 1e-4), divided by sqrt(max(s)·min(s)); error = mean over n·out of
// ((W - Q(W·diag(s))/s) xᵀ)², through XᵀX when n > in, computed where the inputs live: in float64 on the CPU, in
// float32 on a GPU (inputScales stays there too; the weights are moved to it a slice of rows at a time). The first
// strictly smaller error wins, so α = 0 (plain RTN, s = 1) is kept unless some α beats it. Throws cwb::Error on a
// bad spec, shapes that do not match, grid < 1 or sliceWeights < 1.
AwqResult awqSearch(const at::Tensor& weights, const at::Tensor& inputs, const AwqOptions& options);

} // namespace cwb::quant
