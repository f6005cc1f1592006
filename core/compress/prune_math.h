#pragma once
// Pure pruning math: which weights to keep (magnitude, Wanda, n:m) and the statistics the choice needs.
// Masks are bool tensors the shape of the weight: true = keep. CPU, fp32 in, no state beyond accumulators.
#include <cstdint>
#include <functional>

#include <ATen/ATen.h>

namespace cwb::prune {

// Prunes the `sparsity` fraction with the smallest |w| over the whole tensor; exactly
// round(sparsity·numel) weights are pruned, ties broken by position. sparsity ∈ [0, 1).
at::Tensor magnitudeMask(const at::Tensor& w, double sparsity);

// The k-th smallest |w| (1-based) over several tensors, read one at a time through `tensorAt(i)` for i < count,
// twice: an exact radix selection on the fp32 bits (high 16, then low 16), so memory stays one tensor whatever
// the total. Equals kthvalue of the concatenation. Requires 1 ≤ k ≤ total elements; NaN counts as largest.
float kthSmallestMagnitude(const std::function<at::Tensor(size_t)>& tensorAt, size_t count, int64_t k);

// Wanda's importance |W_ij| · ‖X_j‖₂; w [out, in], inputNorms [in].
at::Tensor wandaScores(const at::Tensor& w, const at::Tensor& inputNorms);

// Per output row (Wanda's comparison group), prunes the round(sparsity·in) lowest scores. scores [out, in].
at::Tensor rowwiseMask(const at::Tensor& scores, double sparsity);

// In every m consecutive input columns of each row, keeps the n highest scores (2:4 keeps 2 of 4).
// Requires 1 ≤ n < m and in % m == 0.
at::Tensor nmMask(const at::Tensor& scores, int n, int m);

// ‖X_j‖₂ per input column over every row fed to add(); sums of squares are kept in double.
class InputNormAccumulator {
public:
    explicit InputNormAccumulator(int64_t columns);
    void add(const at::Tensor& inputs);   // [..., columns]
    at::Tensor norms() const;             // float32 [columns]
    int64_t rows() const { return mRows; }

private:
    at::Tensor mSquares;
    int64_t mRows = 0;
};

// Fraction of exact zeros (0 for an empty tensor).
double sparsityOf(const at::Tensor& w);

} // namespace cwb::prune
