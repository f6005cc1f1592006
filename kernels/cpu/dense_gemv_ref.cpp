// CPU reference of the dense GEMV (dense_gemv.h): double sums, one rounding to the activation type.
#include "cwb/kernels/dense_gemv.h"

namespace cwb::kernels {

void denseGemvRef(const float* x, const float* weight, const float* bias, const float* residual, float* y,
                  const DenseGemvShape& s, ActType type) {
    for (int64_t m = 0; m < s.rows; ++m) {
        for (int64_t n = 0; n < s.outputs; ++n) {
            double sum = 0.0;
            for (int64_t k = 0; k < s.inputs; ++k) sum += double(weight[n * s.inputs + k]) * double(x[m * s.xStride + k]);
            if (bias) sum += double(bias[n]);
            if (residual) sum += double(residual[m * s.residualStride + n]);
            y[m * s.yStride + n] = actBitsToFloat(floatToActBits(float(sum), type), type);
        }
    }
}

} // namespace cwb::kernels
