// CPU reference of the dense GEMV (dense_gemv.h): double sums, one rounding to the activation type.
#include "cwb/kernels/dense_gemv.h"

#include <algorithm>
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

namespace cwb::kernels {

bool packSparse24Rows(const float* dense, int64_t rows, int64_t cols, float* values, uint16_t* meta, std::string* why) {
    if (cols <= 0 || cols % kSparse24RowsColumnMultiple != 0) {
        if (why) *why = std::to_string(cols) + " columns, not a positive multiple of " +
                        std::to_string(kSparse24RowsColumnMultiple);
        return false;
    }
    const int64_t groups = cols / 4;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t g = 0; g < groups; ++g) {
            const float* e = dense + r * cols + 4 * g;
            int kept[2], count = 0;
            for (int i = 0; i < 4; ++i)
                if (e[i] != 0.0f) {
                    if (count == 2) {
                        if (why) *why = "row " + std::to_string(r) + ", columns " + std::to_string(4 * g) + ".." +
                                        std::to_string(4 * g + 3) + ": more than two non-zeros";
                        return false;
                    }
                    kept[count++] = i;
                }
            for (int i = 0; i < 4 && count < 2; ++i)   // fewer than two: the first free positions
                if (e[i] == 0.0f && (count == 0 || kept[0] != i)) kept[count++] = i;
            if (kept[0] > kept[1]) std::swap(kept[0], kept[1]);
            values[r * (cols / 2) + 2 * g] = e[kept[0]];
            values[r * (cols / 2) + 2 * g + 1] = e[kept[1]];
            uint16_t& word = meta[r * (cols / 16) + g / 4];
            if (g % 4 == 0) word = 0;
            word = uint16_t(word | ((kept[0] | (kept[1] << 2)) << (4 * (g % 4))));
        }
    }
    return true;
}

void unpackSparse24Rows(const float* values, const uint16_t* meta, int64_t rows, int64_t cols, float* dense) {
    const int64_t groups = cols / 4;
    for (int64_t r = 0; r < rows; ++r) {
        std::fill(dense + r * cols, dense + (r + 1) * cols, 0.0f);
        for (int64_t g = 0; g < groups; ++g) {
            const int nibble = (meta[r * (cols / 16) + g / 4] >> (4 * (g % 4))) & 15;
            dense[r * cols + 4 * g + (nibble & 3)] = values[r * (cols / 2) + 2 * g];   // one column named twice:
            dense[r * cols + 4 * g + (nibble >> 2)] = values[r * (cols / 2) + 2 * g + 1];   // the later value, as on the GPU
        }
    }
}

} // namespace cwb::kernels
