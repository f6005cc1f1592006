#include <cmath>
#include <cstring>

#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels {

uint16_t floatToHalfBits(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));  // inf / NaN
    if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: overflow to inf
    if (absx < 0x38800000u) {  // below the smallest normal half: denormal (or zero), round to nearest even
        float a;
        std::memcpy(&a, &absx, 4);
        const float scaled = a * 16777216.0f;  // 2^24: one unit of the last denormal place
        return uint16_t(sign | uint32_t(std::nearbyint(scaled)));
    }
    const uint32_t mant = absx & 0x7fffffu;
    uint32_t h = ((absx >> 23) - 112u) << 10 | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry into the exponent is correct rounding
    return uint16_t(sign | h);
}

float halfBitsToFloat(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    float out;
    if (exp == 0) {
        out = std::ldexp(float(mant), -24);
        if (sign) out = -out;
        return out;
    }
    const uint32_t bits = sign | (exp == 31 ? 0x7f800000u | (mant << 13) : ((exp + 112u) << 23) | (mant << 13));
    std::memcpy(&out, &bits, 4);
    return out;
}

uint16_t floatToBf16Bits(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
    x += 0x7fffu + ((x >> 16) & 1u);
    return uint16_t(x >> 16);
}

float bf16BitsToFloat(uint16_t b) {
    const uint32_t x = uint32_t(b) << 16;
    float out;
    std::memcpy(&out, &x, 4);
    return out;
}

} // namespace cwb::kernels
