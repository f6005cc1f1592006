// CPU side of the FP8 E4M3 GEMM: code conversions and the reference product.
#include <algorithm>
#include <cmath>

#include "cwb/kernels/fp8_gemm.h"

namespace cwb::kernels {

float e4m3ToFloat(uint8_t code) {
    const int sign = code >> 7, exp = (code >> 3) & 0xF, mant = code & 0x7;
    if (exp == 0xF && mant == 0x7) return NAN;
    const float mag = exp == 0 ? std::ldexp(float(mant), -9) : std::ldexp(1.0f + float(mant) / 8.0f, exp - 7);
    return sign ? -mag : mag;
}

uint8_t floatToE4M3(float f) {
    if (std::isnan(f)) return 0x7F;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
    const float a = std::min(std::fabs(f), 448.0f);
    // Spacing of representable values around a: 2^(e-3) for normals (e >= -6), 2^-9 for subnormals.
    int e = a > 0.0f ? int(std::floor(std::log2(a))) : -6;
    e = std::max(e, -6);
    const float step = std::ldexp(1.0f, e - 3);
    float q = std::nearbyint(a / step) * step;  // ties to even on the last mantissa bit
    q = std::min(q, 448.0f);
    // Encode q exactly.
    if (q == 0.0f) return sign;
    int qe = int(std::floor(std::log2(q)));
    if (qe < -6) return uint8_t(sign | uint8_t(std::nearbyint(q / std::ldexp(1.0f, -9))));
    const int mant = int(std::nearbyint((q / std::ldexp(1.0f, qe) - 1.0f) * 8.0f));
    return uint8_t(sign | uint8_t((qe + 7) << 3) | uint8_t(mant));
}

float quantizeE4M3Ref(const float* v, size_t count, uint8_t* codes) {
    float amax = 0.0f;
    for (size_t i = 0; i < count; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
    for (size_t i = 0; i < count; ++i) codes[i] = floatToE4M3(v[i] / scale);
    return scale;
}

void fp8GemmRef(const uint8_t* x, float xScale, const uint8_t* w, float wScale, int64_t m, int64_t n, int64_t k,
                float* y) {
    std::vector<float> wd(size_t(n * k)), xd(size_t(m * k));
    for (size_t i = 0; i < wd.size(); ++i) wd[i] = e4m3ToFloat(w[i]);
    for (size_t i = 0; i < xd.size(); ++i) xd[i] = e4m3ToFloat(x[i]);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int64_t c = 0; c < k; ++c) acc += double(xd[size_t(i * k + c)]) * double(wd[size_t(j * k + c)]);
            y[i * n + j] = float(acc * double(xScale) * double(wScale));
        }
}

} // namespace cwb::kernels
