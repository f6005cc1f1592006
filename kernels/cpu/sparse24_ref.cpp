// CPU side of the 2:4 sparse GEMM: the pattern checker, 2:4 magnitude pruning and the dense reference product.
#include <cmath>
#include <utility>
#include <vector>

#include "cwb/kernels/sparse24_gemm.h"

namespace cwb::kernels {

std::string TwoFourCheck::describe() const {
    if (ok) return "";
    if (row < 0) return "the column count is not a multiple of 4";
    return "row " + std::to_string(row) + ", columns " + std::to_string(column) + ".." + std::to_string(column + 3) +
           " hold " + std::to_string(nonzeros) + " nonzeros (2:4 allows 2)";
}

namespace {

template <typename IsNonzero>
TwoFourCheck firstBadGroup(int64_t n, int64_t k, IsNonzero nonzero) {
    TwoFourCheck result;
    if (k % 4) {
        result.ok = false;
        return result;
    }
    for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; c += 4) {
            int count = 0;
            for (int64_t j = 0; j < 4; ++j) count += nonzero(r * k + c + j) ? 1 : 0;
            if (count > 2) return {false, r, c, count};
        }
    return result;
}

} // namespace

TwoFourCheck checkTwoFourRef(const float* w, int64_t n, int64_t k) {
    return firstBadGroup(n, k, [&](int64_t i) { return w[i] != 0.0f; });
}

TwoFourCheck checkTwoFourRef(const uint16_t* wBits, int64_t n, int64_t k) {
    // fp16 and bf16 both keep the sign in the top bit: zero is every other bit clear.
    return firstBadGroup(n, k, [&](int64_t i) { return (wBits[i] & 0x7fffu) != 0; });
}

void pruneTwoFourRef(float* w, int64_t n, int64_t k) {
    for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c + 4 <= k; c += 4) {
            float* g = w + r * k + c;
            // Indices of the two largest magnitudes; the earlier index wins a tie.
            int first = 0;
            for (int j = 1; j < 4; ++j)
                if (std::fabs(g[j]) > std::fabs(g[first])) first = j;
            int second = first == 0 ? 1 : 0;
            for (int j = 0; j < 4; ++j)
                if (j != first && std::fabs(g[j]) > std::fabs(g[second])) second = j;
            for (int j = 0; j < 4; ++j)
                if (j != first && j != second) g[j] = 0.0f;
        }
}

void sparse24GemmRef(const uint16_t* x, const uint16_t* w, ActType type, int64_t m, int64_t n, int64_t k, float* y) {
    std::vector<double> xd(size_t(m * k)), wd(size_t(n * k));
    for (size_t i = 0; i < xd.size(); ++i) xd[i] = actBitsToFloat(x[i], type);
    for (size_t i = 0; i < wd.size(); ++i) wd[i] = actBitsToFloat(w[i], type);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            const double* xr = &xd[size_t(i * k)];
            const double* wr = &wd[size_t(j * k)];
            for (int64_t c = 0; c < k; ++c) acc += xr[c] * wr[c];
            y[i * n + j] = float(acc);
        }
}

} // namespace cwb::kernels
