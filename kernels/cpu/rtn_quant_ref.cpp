// CPU reference of round-to-nearest quantization (the rule of core/compress/quant_math.cpp, in plain C++).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "cwb/kernels/rtn_quant.h"

namespace cwb::kernels {

namespace {
void checkSpec(const RtnSpec& spec, const char* where) {
    if (spec.bits < 2 || spec.bits > 8)
        throw KernelError(std::string(where) + ": bits must be between 2 and 8, got " + std::to_string(spec.bits));
    if (spec.groupSize == 0 || spec.groupSize < -1)
        throw KernelError(std::string(where) + ": group size must be -1 (per row) or positive, got " +
                          std::to_string(spec.groupSize));
}
int64_t width(int64_t cols, const RtnSpec& spec) { return spec.groupSize > 0 ? spec.groupSize : cols; }
} // namespace

int64_t rtnGroupCount(int64_t cols, const RtnSpec& spec) {
    const int64_t w = width(cols, spec);
    return w > 0 ? (cols + w - 1) / w : 0;
}

void rtnQuantizeRef(const float* w, int64_t rows, int64_t cols, const RtnSpec& spec, uint8_t* levels, float* scales,
                    int32_t* zeros) {
    checkSpec(spec, "rtnQuantizeRef");
    const float maxq = float((1 << spec.bits) - 1);
    const int64_t gw = width(cols, spec), groups = rtnGroupCount(cols, spec);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t g = 0; g < groups; ++g) {
            const float* x = w + r * cols + g * gw;
            const int64_t n = std::min(gw, cols - g * gw);
            float lo = 0.0f, hi = 0.0f;
            for (int64_t i = 0; i < n; ++i) {
                lo = std::min(lo, x[i]);
                hi = std::max(hi, x[i]);
            }
            float scale;
            int32_t zero;
            if (spec.symmetric) {
                float amax = std::max(-lo, hi);
                if (amax == 0.0f) amax = 1.0f;
                scale = std::max(amax * 2.0f / maxq, std::numeric_limits<float>::min());
                zero = 1 << (spec.bits - 1);
            } else {
                if (lo == 0.0f && hi == 0.0f) {
                    lo = -1.0f;
                    hi = 1.0f;
                }
                scale = std::max((hi - lo) / maxq, std::numeric_limits<float>::min());
                zero = int32_t(std::clamp(std::nearbyint(-lo / scale), 0.0f, maxq));
            }
            scales[r * groups + g] = scale;
            zeros[r * groups + g] = zero;
            uint8_t* q = levels + r * cols + g * gw;
            for (int64_t i = 0; i < n; ++i)
                q[i] = uint8_t(std::clamp(std::nearbyint(x[i] / scale) + float(zero), 0.0f, maxq));
        }
    }
}

void rtnDequantizeRef(const uint8_t* levels, const float* scales, const int32_t* zeros, int64_t rows, int64_t cols,
                      const RtnSpec& spec, float* out) {
    checkSpec(spec, "rtnDequantizeRef");
    const int64_t gw = width(cols, spec), groups = rtnGroupCount(cols, spec);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            const int64_t g = r * groups + c / gw;
            out[r * cols + c] = float(int32_t(levels[r * cols + c]) - zeros[g]) * scales[g];
        }
}

} // namespace cwb::kernels
