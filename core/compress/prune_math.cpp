#include "core/compress/prune_math.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/util/error.h"

namespace cwb::prune {

namespace {

void checkSparsity(double sparsity) {
    if (!(sparsity >= 0.0 && sparsity < 1.0))   // also refuses NaN
        throw Error("prune: sparsity must be in [0, 1), got " + std::to_string(sparsity));
}

void checkMatrix(const at::Tensor& t, const char* what) {
    if (!t.defined() || t.dim() != 2)
        throw Error(std::string("prune: ") + what + " must be a 2-D [out, in] tensor");
}

int64_t prunedCount(double sparsity, int64_t count) {
    return static_cast<int64_t>(std::llround(sparsity * double(count)));
}

// Mask keeping everything except the `k` lowest entries along the last dimension. The sort is stable, so
// among equal scores the earlier position is pruned first and the same input always gives the same mask.
at::Tensor pruneLowestPerRow(const at::Tensor& scores, int64_t k) {
    at::Tensor mask = at::ones(scores.sizes(), scores.options().dtype(at::kBool));
    if (k == 0) return mask;
    at::Tensor order = std::get<1>(at::sort(scores, /*stable=*/true, /*dim=*/-1, /*descending=*/false));
    mask.scatter_(-1, order.narrow(-1, 0, k), false);
    return mask;
}

} // namespace

at::Tensor magnitudeMask(const at::Tensor& w, double sparsity) {
    checkSparsity(sparsity);
    if (!w.defined()) throw Error("prune: no weight given");
    at::Tensor flat = w.detach().to(at::kFloat).abs().reshape({1, -1});
    return pruneLowestPerRow(flat, prunedCount(sparsity, flat.numel())).reshape(w.sizes());
}

float kthSmallestMagnitude(const std::function<at::Tensor(size_t)>& tensorAt, size_t count, int64_t k) {
    // |w| as fp32 has a zero sign bit, so its bit pattern read as an integer orders like the value.
    auto bitsOf = [&](size_t i) { return tensorAt(i).detach().to(at::kFloat).abs().contiguous().view(at::kInt).flatten(); };
    constexpr int64_t bins = 1 << 16;
    auto findBin = [&](const at::Tensor& histogram, int64_t& rank) {
        const int64_t* h = histogram.data_ptr<int64_t>();
        for (int64_t b = 0; b < bins; ++b) {
            if (rank <= h[b]) return b;
            rank -= h[b];
        }
        throw Error("prune: the magnitude rank " + std::to_string(k) + " is past the number of weights");
    };
    if (k < 1) throw Error("prune: the magnitude rank must be at least 1, got " + std::to_string(k));
    at::Tensor high = at::zeros({bins}, at::kLong);
    for (size_t i = 0; i < count; ++i) high += at::bincount(bitsOf(i).__rshift__(16).to(at::kLong), {}, bins);
    int64_t rank = k;
    const int64_t highBin = findBin(high, rank);
    at::Tensor low = at::zeros({bins}, at::kLong);
    for (size_t i = 0; i < count; ++i) {
        at::Tensor bits = bitsOf(i);
        at::Tensor inBin = bits.masked_select(bits.__rshift__(16) == highBin);
        if (inBin.numel() > 0) low += at::bincount(inBin.__and__(0xFFFF).to(at::kLong), {}, bins);
    }
    const int64_t lowBin = findBin(low, rank);
    const int32_t pattern = static_cast<int32_t>((highBin << 16) | lowBin);
    float value;
    std::memcpy(&value, &pattern, sizeof value);
    return value;
}

at::Tensor wandaScores(const at::Tensor& w, const at::Tensor& inputNorms) {
    checkMatrix(w, "weight");
    if (!inputNorms.defined() || inputNorms.dim() != 1 || inputNorms.size(0) != w.size(1))
        throw Error("prune: Wanda needs one input norm per weight column (" + std::to_string(w.size(1)) + ")");
    return w.detach().to(at::kFloat).abs() * inputNorms.to(at::kFloat).unsqueeze(0);
}

at::Tensor rowwiseMask(const at::Tensor& scores, double sparsity) {
    checkSparsity(sparsity);
    checkMatrix(scores, "scores");
    return pruneLowestPerRow(scores.detach().to(at::kFloat), prunedCount(sparsity, scores.size(1)));
}

at::Tensor nmMask(const at::Tensor& scores, int n, int m) {
    checkMatrix(scores, "scores");
    if (n < 1 || n >= m)
        throw Error("prune: n:m needs 1 <= n < m, got " + std::to_string(n) + ":" + std::to_string(m));
    if (scores.size(1) % m != 0)
        throw Error("prune: " + std::to_string(scores.size(1)) + " input columns are not a multiple of m = " +
                    std::to_string(m));
    const int64_t rows = scores.size(0), groups = scores.size(1) / m;
    at::Tensor grouped = scores.detach().to(at::kFloat).reshape({rows, groups, m});
    return pruneLowestPerRow(grouped, m - n).reshape(scores.sizes());
}

InputNormAccumulator::InputNormAccumulator(int64_t columns) {
    if (columns <= 0) throw Error("prune: an input norm accumulator needs at least one column");
    mSquares = at::zeros({columns}, at::kDouble);
}

void InputNormAccumulator::add(const at::Tensor& inputs) {
    if (!inputs.defined() || inputs.dim() < 1 || inputs.size(-1) != mSquares.size(0))
        throw Error("prune: inputs must end in " + std::to_string(mSquares.size(0)) + " columns");
    at::Tensor x = inputs.detach().to(at::kDouble).reshape({-1, mSquares.size(0)});
    mSquares += x.square().sum(0).to(at::kCPU);   // reduce where the inputs live, keep the sums on the CPU
    mRows += x.size(0);
}

at::Tensor InputNormAccumulator::norms() const { return mSquares.sqrt().to(at::kFloat); }

double sparsityOf(const at::Tensor& w) {
    if (!w.defined() || w.numel() == 0) return 0.0;
    return double((w == 0).sum().item<int64_t>()) / double(w.numel());
}

} // namespace cwb::prune
