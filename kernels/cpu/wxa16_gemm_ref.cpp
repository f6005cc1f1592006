// CPU reference of the weight-only GEMM: y = x · dequantize(w)^T, accumulated in double.
#include <vector>

#include "cwb/kernels/wxa16_gemm.h"

namespace cwb::kernels {

void wxa16GemmRef(const TiledIntWeight& w, const float* x, int64_t m, float* y) {
    const std::vector<float> deq = dequantizeTiledRef(w, false);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < w.rows; ++r) {
            double acc = 0.0;
            const float* wr = deq.data() + r * w.cols;
            const float* xi = x + i * w.cols;
            for (int64_t c = 0; c < w.cols; ++c) acc += double(xi[c]) * double(wr[c]);
            y[i * w.rows + r] = float(acc);
        }
}

} // namespace cwb::kernels
