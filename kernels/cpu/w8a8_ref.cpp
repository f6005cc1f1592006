// CPU references of the W8A8 path: per-row symmetric int8 quantization and the scaled integer product.
#include <algorithm>
#include <cmath>

#include "cwb/kernels/w8a8_gemm.h"

namespace cwb::kernels {

void quantizeRowsInt8Ref(const float* v, int64_t rows, int64_t cols, int8_t* codes, float* scales) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* x = v + r * cols;
        float amax = 0.0f;
        for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[c]));
        const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
        scales[r] = scale;
        for (int64_t c = 0; c < cols; ++c)
            codes[r * cols + c] = int8_t(std::clamp(std::nearbyint(x[c] / scale), -127.0f, 127.0f));
    }
}

void w8a8GemmRef(const int8_t* x, const float* xScale, const int8_t* w, const float* wScale, int64_t m, int64_t n,
                 int64_t k, float* y) {
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            int32_t acc = 0;
            for (int64_t c = 0; c < k; ++c) acc += int32_t(x[i * k + c]) * int32_t(w[j * k + c]);
            y[i * n + j] = float(acc) * xScale[i] * wScale[j];
        }
}

} // namespace cwb::kernels
