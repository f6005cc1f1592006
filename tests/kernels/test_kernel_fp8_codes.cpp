// CPU-only test of the FP8 E4M3 codes used by the FP8 GEMM: every finite code decodes and encodes back to itself,
// rounding is to the nearest representable value (ties to even), values past 448 saturate, per-tensor scaling
// keeps the error within E4M3's 3-bit mantissa.
#include <cmath>
#include <vector>

#include "cwb/kernels/fp8_gemm.h"
#include "kernel_check.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

int main() {
    bool roundTrip = true;
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7F) == 0x7F) continue;  // NaN
        const float v = e4m3ToFloat(uint8_t(c));
        roundTrip &= floatToE4M3(v) == uint8_t(c) || (v == 0.0f && (c & 0x7F) == 0);
    }
    check(roundTrip, "every finite E4M3 code decodes and encodes back to itself");
    check(e4m3ToFloat(0x7E) == 448.0f && e4m3ToFloat(0x01) == std::ldexp(1.0f, -9), "largest normal 448, smallest subnormal 2^-9");
    check(std::isnan(e4m3ToFloat(0x7F)) && std::isnan(e4m3ToFloat(0xFF)), "0x7F and 0xFF are NaN");
    check(floatToE4M3(1000.0f) == 0x7E && floatToE4M3(-1000.0f) == 0xFE, "values past 448 saturate");
    check(e4m3ToFloat(floatToE4M3(1.0625f)) == 1.0f, "a tie rounds to the even mantissa (down)");
    check(e4m3ToFloat(floatToE4M3(1.1875f)) == 1.25f, "a tie rounds to the even mantissa (up)");
    check(e4m3ToFloat(floatToE4M3(1.07f)) == 1.125f, "above the tie rounds up");
    check(e4m3ToFloat(floatToE4M3(3.0f * std::ldexp(1.0f, -10))) == std::ldexp(1.0f, -8), "subnormal tie rounds to even");

    std::vector<float> v = gaussian(4096, 3);
    std::vector<uint8_t> codes(v.size());
    const float scale = quantizeE4M3Ref(v.data(), v.size(), codes.data());
    std::vector<float> back(v.size());
    for (size_t i = 0; i < v.size(); ++i) back[i] = e4m3ToFloat(codes[i]) * scale;
    check(nmse(back, v) < kFp8NmseE4M3, "per-tensor E4M3 quantization error within the 3-bit-mantissa bound");
    return finish();
}
