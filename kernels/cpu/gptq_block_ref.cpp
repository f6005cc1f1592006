// CPU reference of one GPTQ column block (gptq_block.h). Compiled with -ffp-contract=off: every multiply and add
// rounds on its own unless written as std::fma, as in the CUDA kernel.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cwb/kernels/gptq_block.h"

namespace cwb::kernels {

namespace {

constexpr float kSmallestScale = 5.9604645e-08f;  // fp16's smallest subnormal
constexpr float kLargestScale = 65504.0f;

float roundUpToHalf(float x) {
    const uint16_t nearest = floatToHalfBits(x);
    const float value = halfBitsToFloat(nearest);
    return value < x ? halfBitsToFloat(uint16_t(nearest + 1)) : value;
}

// Scale and zero of one row's group from the min/max of its values (lo <= 0 <= hi already folded in).
void groupParams(float lo, float hi, int bits, bool symmetric, float& scale, int32_t& zero) {
    const float maxq = float((1 << bits) - 1);
    if (symmetric) {
        float amax = std::max(-lo, hi);
        if (amax == 0.0f) amax = 1.0f;
        scale = (amax * 2.0f) / maxq;
        zero = 1 << (bits - 1);
    } else {
        if (lo == 0.0f && hi == 0.0f) {
            lo = -1.0f;
            hi = 1.0f;
        }
        scale = (hi - lo) / maxq;
    }
    scale = roundUpToHalf(std::min(std::max(scale, kSmallestScale), kLargestScale));
    if (!symmetric) zero = int32_t(std::min(std::max(std::nearbyint(-lo / scale), 0.0f), maxq));
}

} // namespace

void checkGptqBlockArgs(const GptqBlockArgs& a, const char* where) {
    const std::string w = where;
    if (!a.weight || !a.hinvUpper || !a.scales || !a.zeros || !a.levels || !a.errors)
        throw KernelError(w + ": a buffer pointer is null");
    if (a.rows <= 0 || a.cols <= 0) throw KernelError(w + ": rows and cols must be positive");
    if (a.begin < 0 || a.end > a.cols || a.end <= a.begin || a.end - a.begin > kGptqMaxBlock)
        throw KernelError(w + ": block [" + std::to_string(a.begin) + ", " + std::to_string(a.end) +
                          ") must lie in the weight and hold 1.." + std::to_string(kGptqMaxBlock) + " columns");
    if (a.bits < 2 || a.bits > 8) throw KernelError(w + ": bits must be between 2 and 8, got " + std::to_string(a.bits));
    if (a.groupWidth <= 0 || a.groups <= 0) throw KernelError(w + ": group width and count must be positive");
    if (!a.columnGroup && (a.cols + a.groupWidth - 1) / a.groupWidth > a.groups)
        throw KernelError(w + ": " + std::to_string(a.groups) + " groups cannot cover " + std::to_string(a.cols) +
                          " columns of width " + std::to_string(a.groupWidth));
    if (a.errorOffset < 0 || a.errorStride < a.errorOffset + (a.end - a.begin))
        throw KernelError(w + ": the error rows are too short for the block");
}

void gptqBlockRef(const GptqBlockArgs& a) {
    checkGptqBlockArgs(a, "gptqBlockRef");
    const int64_t count = a.end - a.begin;
    const float maxq = float((1 << a.bits) - 1);
    std::vector<float> v(static_cast<size_t>(count)), err(static_cast<size_t>(count));
    for (int64_t r = 0; r < a.rows; ++r) {
        const float* row = a.weight + r * a.cols;
        std::copy(row + a.begin, row + a.end, v.begin());
        float scale = 0.0f;
        int32_t zero = 0;
        int64_t loaded = -1;  // group whose parameters are in scale / zero
        for (int64_t i = 0; i < count; ++i) {
            const int64_t c = a.begin + i;
            int64_t g;
            if (!a.columnGroup) {
                g = c / a.groupWidth;
                if (c % a.groupWidth == 0) {
                    const int64_t groupEnd = std::min(c + a.groupWidth, a.cols);
                    float lo = 0.0f, hi = 0.0f;
                    for (int64_t j = i; j < std::min(groupEnd, a.end) - a.begin; ++j) {
                        lo = std::min(lo, v[size_t(j)]);
                        hi = std::max(hi, v[size_t(j)]);
                    }
                    for (int64_t j = a.end; j < groupEnd; ++j) {  // past the block: with the pending update
                        float x = row[j];
                        for (int64_t k = 0; k < i; ++k) x = std::fma(-err[size_t(k)], a.hinvUpper[(a.begin + k) * a.cols + j], x);
                        lo = std::min(lo, x);
                        hi = std::max(hi, x);
                    }
                    groupParams(lo, hi, a.bits, a.symmetric, scale, zero);
                    a.scales[r * a.groups + g] = scale;
                    a.zeros[r * a.groups + g] = zero;
                    loaded = g;
                }
            } else {
                g = a.columnGroup[c];
            }
            if (g != loaded) {
                scale = a.scales[r * a.groups + g];
                zero = a.zeros[r * a.groups + g];
                loaded = g;
            }
            const float x = v[size_t(i)];
            const bool keep = a.keepZero && a.keepZero[r * a.cols + c] != 0;
            const float level = keep ? float(zero) : std::min(std::max(std::nearbyint(x / scale) + float(zero), 0.0f), maxq);
            const float q = (level - float(zero)) * scale;
            const float e = (x - q) / a.hinvUpper[c * a.cols + c];
            err[size_t(i)] = e;
            a.levels[r * a.cols + c] = int32_t(level);
            a.errors[r * a.errorStride + a.errorOffset + i] = e;
            const float* u = a.hinvUpper + c * a.cols + a.begin;
            for (int64_t j = i + 1; j < count; ++j) v[size_t(j)] = std::fma(-e, u[j], v[size_t(j)]);
        }
    }
}

} // namespace cwb::kernels
