// CPU reference of the dense GEMV (dense_gemv.h): double sums, one rounding to the activation type.
#include "cwb/kernels/dense_gemv.h"

#include <cmath>
#include <vector>

namespace cwb::kernels {

namespace {

float rounded(double v, ActType type) { return actBitsToFloat(floatToActBits(float(v), type), type); }

// Row m of x W[n]ᵀ in double, x scaled element by element by normWeight (nullptr: not) and the sum by `scale`.
double rowProduct(const float* x, const float* normWeight, double scale, const float* weight, int64_t n,
                  int64_t inputs) {
    double sum = 0.0;
    for (int64_t k = 0; k < inputs; ++k)
        sum += double(weight[n * inputs + k]) * double(x[k]) * (normWeight ? double(normWeight[k]) : 1.0);
    return sum * scale;
}

// 1 / sqrt(mean(x²) + eps) of one row, or 1 without a norm.
double normScale(const float* x, const float* normWeight, float eps, int64_t inputs) {
    if (!normWeight) return 1.0;
    double squares = 0.0;
    for (int64_t k = 0; k < inputs; ++k) squares += double(x[k]) * double(x[k]);
    return 1.0 / std::sqrt(squares / double(inputs) + double(eps));
}

} // namespace

void denseGemvRef(const float* x, const float* weight, const float* bias, const float* residual, float* y,
                  const DenseGemvShape& s, ActType type) {
    denseGemvRmsNormRef(x, nullptr, 0.0f, weight, bias, residual, y, s, type);
}

void denseGemvRmsNormRef(const float* x, const float* normWeight, float eps, const float* weight, const float* bias,
                         const float* residual, float* y, const DenseGemvShape& s, ActType type) {
    for (int64_t m = 0; m < s.rows; ++m) {
        const float* row = x + m * s.xStride;
        const double scale = normScale(row, normWeight, eps, s.inputs);
        for (int64_t n = 0; n < s.outputs; ++n) {
            double sum = rowProduct(row, normWeight, scale, weight, n, s.inputs);
            if (bias) sum += double(bias[n]);
            if (residual) sum += double(residual[m * s.residualStride + n]);
            y[m * s.yStride + n] = rounded(sum, type);
        }
    }
}

void denseGemvSwiGluRef(const float* x, const float* normWeight, float eps, const float* weight, const float* bias,
                        float* y, const DenseGemvShape& s, ActType type) {
    for (int64_t m = 0; m < s.rows; ++m) {
        const float* row = x + m * s.xStride;
        const double scale = normScale(row, normWeight, eps, s.inputs);
        for (int64_t n = 0; n < s.outputs; ++n) {
            const double g = rowProduct(row, normWeight, scale, weight, n, s.inputs) + (bias ? double(bias[n]) : 0.0);
            const double u = rowProduct(row, normWeight, scale, weight, s.outputs + n, s.inputs) +
                             (bias ? double(bias[s.outputs + n]) : 0.0);
            y[m * s.yStride + n] = rounded(g / (1.0 + std::exp(-g)) * u, type);
        }
    }
}

} // namespace cwb::kernels
