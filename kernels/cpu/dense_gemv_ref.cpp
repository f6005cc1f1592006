// CPU reference of the dense GEMV (dense_gemv.h): double sums, one rounding to the activation type.
#include "cwb/kernels/dense_gemv.h"

#include <cmath>
#include <vector>

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

void denseGemvRmsNormRef(const float* x, const float* normWeight, float eps, const float* weight, const float* bias,
                         const float* residual, float* y, const DenseGemvShape& s, ActType type) {
    std::vector<float> normed(static_cast<size_t>(s.rows * s.inputs));
    for (int64_t m = 0; m < s.rows; ++m) {
        const float* row = x + m * s.xStride;
        double squares = 0.0;
        for (int64_t k = 0; k < s.inputs; ++k) squares += double(row[k]) * double(row[k]);
        const double inverse = 1.0 / std::sqrt(squares / double(s.inputs) + double(eps));
        for (int64_t k = 0; k < s.inputs; ++k)
            normed[size_t(m * s.inputs + k)] =
                actBitsToFloat(floatToActBits(float(double(row[k]) * inverse * double(normWeight[k])), type), type);
    }
    DenseGemvShape packed = s;
    packed.xStride = s.inputs;
    denseGemvRef(normed.data(), weight, bias, residual, y, packed, type);
}

} // namespace cwb::kernels
