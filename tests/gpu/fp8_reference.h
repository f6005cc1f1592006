#pragma once
// The FP8 product of per-token x codes and per-channel weight codes in double, for the GPU kernel tests.
#include <cstdint>
#include <vector>

#include "cwb/kernels/fp8_gemm.h"

namespace cwb::kernels::testing {

// (Σ_c dec(xq[i, c]) · dec(wq[j, c])) · xs[i] · ws[j], [m, n].
inline std::vector<float> fp8ProductRef(const std::vector<uint8_t>& xq, const std::vector<float>& xs,
                                        const std::vector<uint8_t>& wq, const std::vector<float>& ws, int64_t m,
                                        int64_t n, int64_t k) {
    std::vector<float> ref(size_t(m * n));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int64_t c = 0; c < k; ++c)
                acc += double(e4m3ToFloat(xq[size_t(i * k + c)])) * double(e4m3ToFloat(wq[size_t(j * k + c)]));
            ref[size_t(i * n + j)] = float(acc * double(xs[size_t(i)]) * double(ws[size_t(j)]));
        }
    return ref;
}

} // namespace cwb::kernels::testing
