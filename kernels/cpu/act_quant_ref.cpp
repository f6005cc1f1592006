// CPU references of the activation quantization kernels and the scale epilogue (kernels/cuda/act_quant.cu).
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "cwb/kernels/act_quant.h"
#include "cwb/kernels/fp8_gemm.h"

namespace cwb::kernels {

namespace {

// max that keeps a NaN, as at::amax does (std::max and fmaxf drop it).
float nanMax(float a, float b) { return (a > b || std::isnan(a)) ? a : b; }

// Values of the finite non-negative E4M3 codes 0x00..0x7E, increasing with the code.
const std::array<double, 127>& e4m3Values() {
    static const std::array<double, 127> table = [] {
        std::array<double, 127> t{};
        for (int c = 0; c < 127; ++c) t[size_t(c)] = double(e4m3ToFloat(uint8_t(c)));
        return t;
    }();
    return table;
}

// Nearest E4M3 code by searching the value table; ties go to the even code (its last mantissa bit is 0).
uint8_t nearestE4m3(float v) {
    const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
    if (std::isnan(v)) return sign | 0x7F;
    const double a = std::fabs(double(v));
    const auto& table = e4m3Values();
    if (a >= table.back()) return sign | 0x7E;   // saturate (infinity too)
    const size_t hi = size_t(std::lower_bound(table.begin(), table.end(), a) - table.begin());
    if (table[hi] == a || hi == 0) return uint8_t(sign | hi);
    const size_t lo = hi - 1;
    const double below = a - table[lo], above = table[hi] - a;
    const size_t code = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
    return uint8_t(sign | code);
}

float rowAbsMax(const float* v, int64_t cols) {
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = nanMax(std::fabs(v[c]), amax);
    return amax;
}

} // namespace

void quantizeRowsFp8Ref(const uint16_t* x, ActType type, int64_t rows, int64_t cols, uint8_t* codes, float* scales) {
    std::vector<float> row(size_t(std::max<int64_t>(cols, 0)));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) row[size_t(c)] = actBitsToFloat(x[r * cols + c], type);
        float scale = rowAbsMax(row.data(), cols) / 448.0f;
        if (scale == 0.0f) scale = 1.0f;
        scales[r] = scale;
        for (int64_t c = 0; c < cols; ++c) codes[r * cols + c] = nearestE4m3(row[size_t(c)] / scale);
    }
}

void quantizeRowsInt8DividedRef(const uint16_t* x, ActType type, const float* divisor, int64_t rows, int64_t cols,
                                int8_t* codes, float* scales) {
    std::vector<float> row(size_t(std::max<int64_t>(cols, 0)));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const float v = actBitsToFloat(x[r * cols + c], type);
            row[size_t(c)] = divisor ? v / divisor[c] : v;
        }
        float scale = rowAbsMax(row.data(), cols) / 127.0f;
        if (scale == 0.0f) scale = 1.0f;
        scales[r] = scale;
        for (int64_t c = 0; c < cols; ++c)
            codes[r * cols + c] = int8_t(std::clamp(std::nearbyint(row[size_t(c)] / scale), -127.0f, 127.0f));
    }
}

void scaleRowsColsRef(const float* sums, const float* rowScale, const float* colScale, int64_t m, int64_t n,
                      ActType outType, uint16_t* y) {
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            const float scaled = sums[i * n + j] * rowScale[i];
            y[i * n + j] = floatToActBits(scaled * colScale[j], outType);
        }
}

} // namespace cwb::kernels
