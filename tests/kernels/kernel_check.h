#pragma once
// Small helpers shared by the kernel tests (plain executables, no Qt): PASS/FAIL lines, normalised MSE,
// random data, and the tolerances, named per bit width and activation type.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace cwb::kernels::testing {

// ‖out − ref‖² / ‖ref‖² allowed for a GEMM output. Both sides see the same rounded activations and exact integer
// weights, so what remains is fp32 summation order and the final rounding to the activation type (relative
// 2^-11 for fp16, 2^-8 for bf16, i.e. an NMSE near 1e-7 and 1e-6).
constexpr double kGemmNmseFp16 = 2e-6;
constexpr double kGemmNmseBf16 = 2e-5;
// Quantization error of RTN on Gaussian weights (what the dequantized weight may differ from the original).
constexpr double kRtnNmseInt4 = 2e-2;
constexpr double kRtnNmseInt8 = 1e-4;
// E4M3 per-tensor quantization of Gaussian data (3 mantissa bits: about 2^-4 relative when normal).
constexpr double kFp8NmseE4M3 = 2e-3;
// FP8 GEMM output: both sides use the same codes, so only accumulation and the output rounding remain.
constexpr double kFp8GemmNmseFp16 = 1e-5;
constexpr double kFp8GemmNmseBf16 = 5e-5;
// W8A8 output against the float product: int8 per-token and per-channel rounding of Gaussian data.
constexpr double kW8A8OutputNmse = 1e-3;

inline int& failures() {
    static int n = 0;
    return n;
}

inline void check(bool ok, const char* what) {
    std::printf("%s: %s\n", ok ? "PASS" : "FAIL", what);
    if (!ok) ++failures();
}

inline double nmse(const std::vector<float>& out, const std::vector<float>& ref) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double d = double(out[i]) - double(ref[i]);
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
    }
    if (!std::isfinite(num)) return INFINITY;
    return den > 0 ? num / den : num;
}

inline std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

inline int finish() {
    std::printf("%d failed\n", failures());
    return failures() ? 1 : 0;
}

} // namespace cwb::kernels::testing
