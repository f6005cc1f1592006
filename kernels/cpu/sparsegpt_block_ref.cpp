// CPU reference of one SparseGPT column block (sparsegpt_block.h). Compiled with -ffp-contract=off, like the GPTQ
// reference: only the explicit std::fma fuses.
#include <cmath>
#include <string>
#include <vector>

#include "cwb/kernels/sparsegpt_block.h"

namespace cwb::kernels {

namespace {

// Pruned flags for the `count` scores starting at s: the `prune` lowest, earlier first on ties.
void lowest(const float* s, int64_t count, int64_t prune, std::vector<uint8_t>& pruned, int64_t at) {
    for (int64_t j = 0; j < count; ++j) {
        int64_t rank = 0;
        for (int64_t i = 0; i < count; ++i) rank += s[i] < s[j] || (s[i] == s[j] && i < j);
        pruned[size_t(at + j)] = rank < prune;
    }
}

} // namespace

void checkSparseGptBlockArgs(const SparseGptBlockArgs& a, const char* where) {
    const std::string w = where;
    if (!a.weight || !a.hinvUpper || !a.mask || !a.errors) throw KernelError(w + ": a buffer pointer is null");
    if (a.rows <= 0 || a.cols <= 0) throw KernelError(w + ": rows and cols must be positive");
    const int64_t count = a.end - a.begin;
    if (a.begin < 0 || a.end > a.cols || count <= 0 || count > kSparseGptMaxBlock)
        throw KernelError(w + ": block [" + std::to_string(a.begin) + ", " + std::to_string(a.end) +
                          ") must lie in the weight and hold 1.." + std::to_string(kSparseGptMaxBlock) + " columns");
    if (a.m > 0) {
        if (a.m < 2 || a.m > 16 || a.n < 1 || a.n >= a.m)
            throw KernelError(w + ": n:m needs 2 <= m <= 16 and 1 <= n < m");
        if (a.begin % a.m != 0 || count % a.m != 0) throw KernelError(w + ": the block must hold whole groups of m columns");
    } else if (a.pruneCount < 0 || a.pruneCount > count) {
        throw KernelError(w + ": cannot prune " + std::to_string(a.pruneCount) + " of " + std::to_string(count) + " columns");
    }
    if (a.errorOffset < 0 || a.errorStride < a.errorOffset + count) throw KernelError(w + ": the error rows are too short for the block");
}

void sparseGptBlockRef(const SparseGptBlockArgs& a) {
    checkSparseGptBlockArgs(a, "sparseGptBlockRef");
    const int64_t count = a.end - a.begin;
    const size_t n = static_cast<size_t>(count);
    std::vector<float> v(n), score(n), d2(n);
    std::vector<uint8_t> pruned(n);
    for (int64_t j = 0; j < count; ++j) {
        const float d = a.hinvUpper[(a.begin + j) * a.cols + a.begin + j];
        d2[size_t(j)] = d * d;
    }
    for (int64_t r = 0; r < a.rows; ++r) {
        float* row = a.weight + r * a.cols;
        for (int64_t j = 0; j < count; ++j) v[size_t(j)] = row[a.begin + j];
        if (a.m == 0) {
            for (int64_t j = 0; j < count; ++j) score[size_t(j)] = (v[size_t(j)] * v[size_t(j)]) / d2[size_t(j)];
            lowest(score.data(), count, a.pruneCount, pruned, 0);
        }
        for (int64_t i = 0; i < count; ++i) {
            if (a.m > 0 && i % a.m == 0) {
                for (int64_t j = i; j < i + a.m; ++j) score[size_t(j)] = (v[size_t(j)] * v[size_t(j)]) / d2[size_t(j)];
                lowest(score.data() + i, a.m, a.m - a.n, pruned, i);
            }
            const int64_t c = a.begin + i;
            const float x = v[size_t(i)];
            const float q = pruned[size_t(i)] ? 0.0f : x;
            const float e = (x - q) / a.hinvUpper[c * a.cols + c];
            row[c] = q;
            a.mask[r * a.cols + c] = pruned[size_t(i)] ? 0 : 1;
            a.errors[r * a.errorStride + a.errorOffset + i] = e;
            const float* u = a.hinvUpper + c * a.cols + a.begin;
            for (int64_t j = i + 1; j < count; ++j) v[size_t(j)] = std::fma(-e, u[j], v[size_t(j)]);
        }
    }
}

} // namespace cwb::kernels
