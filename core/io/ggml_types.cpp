// GGML type table, half/bfloat conversion, and the 32-element block formats (Q4_0 .. Q8_1).
// The K-quants live in ggml_quants_k.cpp. Formats as documented by ggml's ggml-common.h / ggml-quants.c.
#include "core/io/ggml_types.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/util/error.h"

namespace cwb::ggml {

namespace {

uint32_t floatBits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

float bitsFloat(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

struct TraitsEntry {
    uint32_t id;
    TypeTraits t;
};

// Block sizes and byte sizes from ggml-common.h (QK_K = 256).
const TraitsEntry kTraits[] = {
    {0, {"f32", 1, 4, true}},
    {1, {"f16", 1, 2, true}},
    {2, {"q4_0", 32, sizeof(BlockQ4_0), true}},
    {3, {"q4_1", 32, sizeof(BlockQ4_1), true}},
    {6, {"q5_0", 32, sizeof(BlockQ5_0), true}},
    {7, {"q5_1", 32, sizeof(BlockQ5_1), true}},
    {8, {"q8_0", 32, sizeof(BlockQ8_0), true}},
    {9, {"q8_1", 32, sizeof(BlockQ8_1), true}},
    {10, {"q2_K", QK_K, sizeof(BlockQ2_K), true}},
    {11, {"q3_K", QK_K, sizeof(BlockQ3_K), true}},
    {12, {"q4_K", QK_K, sizeof(BlockQ4_K), true}},
    {13, {"q5_K", QK_K, sizeof(BlockQ5_K), true}},
    {14, {"q6_K", QK_K, sizeof(BlockQ6_K), true}},
    {15, {"q8_K", QK_K, sizeof(BlockQ8_K), true}},
    {16, {"iq2_xxs", QK_K, 66, false}},
    {17, {"iq2_xs", QK_K, 74, false}},
    {18, {"iq3_xxs", QK_K, 98, false}},
    {19, {"iq1_s", QK_K, 50, false}},
    {20, {"iq4_nl", 32, 18, false}},
    {21, {"iq3_s", QK_K, 110, false}},
    {22, {"iq2_s", QK_K, 82, false}},
    {23, {"iq4_xs", QK_K, 136, false}},
    {24, {"i8", 1, 1, false}},
    {25, {"i16", 1, 2, false}},
    {26, {"i32", 1, 4, false}},
    {27, {"i64", 1, 8, false}},
    {28, {"f64", 1, 8, false}},
    {29, {"iq1_m", QK_K, 56, false}},
    {30, {"bf16", 1, 2, true}},
    {34, {"tq1_0", QK_K, 54, false}},
    {35, {"tq2_0", QK_K, 66, false}},
    {39, {"mxfp4", 32, 17, false}},
};

std::string typeLabel(Type type) {
    const TypeTraits* t = traits(type);
    return t ? std::string(t->name) : "unknown tensor type " + std::to_string(static_cast<uint32_t>(type));
}

// Checks the type is known and n a non-negative multiple of its block size; returns the block count.
int64_t blockCount(Type type, int64_t n) {
    const TypeTraits* t = traits(type);
    if (!t) throw Error("unknown tensor type " + std::to_string(static_cast<uint32_t>(type)));
    if (n < 0 || n % t->blockSize != 0)
        throw Error("a row of " + std::string(t->name) + " must hold a multiple of " + std::to_string(t->blockSize) +
                    " elements, not " + std::to_string(n));
    return n / t->blockSize;
}

// ---- 32-element blocks ----

void dequantizeQ4_0(const BlockQ4_0* x, float* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, y += 32) {
        const float d = fp16ToFloat(x[b].d);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * static_cast<float>((x[b].qs[j] & 0x0F) - 8);
            y[j + 16] = d * static_cast<float>((x[b].qs[j] >> 4) - 8);
        }
    }
}

void dequantizeQ4_1(const BlockQ4_1* x, float* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, y += 32) {
        const float d = fp16ToFloat(x[b].d), m = fp16ToFloat(x[b].m);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * static_cast<float>(x[b].qs[j] & 0x0F) + m;
            y[j + 16] = d * static_cast<float>(x[b].qs[j] >> 4) + m;
        }
    }
}

uint32_t loadQh(const uint8_t qh[4]) {
    return uint32_t(qh[0]) | (uint32_t(qh[1]) << 8) | (uint32_t(qh[2]) << 16) | (uint32_t(qh[3]) << 24);
}

void storeQh(uint32_t v, uint8_t qh[4]) {
    for (int i = 0; i < 4; ++i) qh[i] = uint8_t(v >> (8 * i));
}

// Element j of a Q5 block: low nibble per Q4 order, bit 4 from bit j of qh.
int q5Value(const uint8_t qs[16], uint32_t qh, int j) {
    const int low = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
    return low | int((qh >> j) & 1u) << 4;
}

void dequantizeQ5_0(const BlockQ5_0* x, float* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, y += 32) {
        const float d = fp16ToFloat(x[b].d);
        const uint32_t qh = loadQh(x[b].qh);
        for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q5Value(x[b].qs, qh, j) - 16);
    }
}

void dequantizeQ5_1(const BlockQ5_1* x, float* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, y += 32) {
        const float d = fp16ToFloat(x[b].d), m = fp16ToFloat(x[b].m);
        const uint32_t qh = loadQh(x[b].qh);
        for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q5Value(x[b].qs, qh, j)) + m;
    }
}

void dequantizeQ8_0(const BlockQ8_0* x, float* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, y += 32) {
        const float d = fp16ToFloat(x[b].d);
        for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(x[b].qs[j]);
    }
}

void dequantizeQ8_1(const BlockQ8_1* x, float* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, y += 32) {
        const float d = fp16ToFloat(x[b].d);
        for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(x[b].qs[j]);
    }
}

// The *_ref quantizers of ggml: symmetric types scale by the signed extreme (so it maps to the most
// negative level), affine types by (max - min); levels are rounded to nearest and clamped.

// Signed value of largest magnitude (the first one on ties), 0 for an all-zero block.
float signedAbsMax(const float* x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; ++j) {
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    return max;
}

void minMax(const float* x, int n, float& lo, float& hi) {
    lo = std::numeric_limits<float>::max();
    hi = -std::numeric_limits<float>::max();
    for (int j = 0; j < n; ++j) {
        lo = std::min(lo, x[j]);
        hi = std::max(hi, x[j]);
    }
}

// floor(v + bias) clamped to [0, top]; v + bias is >= 0 for in-range inputs, as in ggml's (int8_t) cast.
int levelOf(float v, float bias, int top) {
    const float r = std::floor(v + bias);
    if (!(r > 0.0f)) return 0; // also maps nan to 0
    return r >= float(top) ? top : int(r);
}

void quantizeQ4_0(const float* x, BlockQ4_0* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, x += 32) {
        const float d = signedAbsMax(x, 32) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = floatToFp16(d);
        for (int j = 0; j < 16; ++j) {
            const int lo = levelOf(x[j] * id, 8.5f, 15), hi = levelOf(x[j + 16] * id, 8.5f, 15);
            y[b].qs[j] = uint8_t(lo | (hi << 4));
        }
    }
}

void quantizeQ4_1(const float* x, BlockQ4_1* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, x += 32) {
        float lo, hi;
        minMax(x, 32, lo, hi);
        const float d = (hi - lo) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = floatToFp16(d);
        y[b].m = floatToFp16(lo);
        for (int j = 0; j < 16; ++j) {
            const int a = levelOf((x[j] - lo) * id, 0.5f, 15), c = levelOf((x[j + 16] - lo) * id, 0.5f, 15);
            y[b].qs[j] = uint8_t(a | (c << 4));
        }
    }
}

} // namespace

void packQ5(const int q[32], uint8_t qs[16], uint8_t qhBytes[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) qs[j] = uint8_t((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    for (int j = 0; j < 32; ++j) qh |= uint32_t((q[j] >> 4) & 1) << j;
    storeQh(qh, qhBytes);
}

namespace {

void quantizeQ5_0(const float* x, BlockQ5_0* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, x += 32) {
        const float d = signedAbsMax(x, 32) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = floatToFp16(d);
        int q[32];
        for (int j = 0; j < 32; ++j) q[j] = levelOf(x[j] * id, 16.5f, 31);
        packQ5(q, y[b].qs, y[b].qh);
    }
}

void quantizeQ5_1(const float* x, BlockQ5_1* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, x += 32) {
        float lo, hi;
        minMax(x, 32, lo, hi);
        const float d = (hi - lo) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = floatToFp16(d);
        y[b].m = floatToFp16(lo);
        int q[32];
        for (int j = 0; j < 32; ++j) q[j] = levelOf((x[j] - lo) * id, 0.5f, 31);
        packQ5(q, y[b].qs, y[b].qh);
    }
}

// Shared by Q8_0 and Q8_1: d = amax / 127, q = round-half-away(x / d). Returns d.
float quantize8(const float* x, int8_t qs[32]) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; ++j) qs[j] = int8_t(std::max(-127.0f, std::min(127.0f, std::round(x[j] * id))));
    return d;
}

void quantizeQ8_0(const float* x, BlockQ8_0* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, x += 32) y[b].d = floatToFp16(quantize8(x, y[b].qs));
}

void quantizeQ8_1(const float* x, BlockQ8_1* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, x += 32) {
        const float d = quantize8(x, y[b].qs);
        int sum = 0;
        for (int j = 0; j < 32; ++j) sum += y[b].qs[j];
        y[b].d = floatToFp16(d);
        y[b].s = floatToFp16(float(sum) * d);
    }
}

} // namespace

// ---- public API ----

const TypeTraits* traits(uint32_t typeId) {
    for (const TraitsEntry& e : kTraits)
        if (e.id == typeId) return &e.t;
    return nullptr;
}

size_t rowBytes(Type type, int64_t n) {
    return size_t(blockCount(type, n)) * traits(type)->typeSize;
}

void dequantize(Type type, const void* src, float* dst, int64_t n) {
    const int64_t nb = blockCount(type, n);
    if (!traits(type)->supported) throw Error("tensor type " + typeLabel(type) + " cannot be decoded (not supported)");
    switch (type) {
    case Type::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); return;
    case Type::F16: {
        const auto* h = static_cast<const uint16_t*>(src);
        for (int64_t i = 0; i < n; ++i) dst[i] = fp16ToFloat(h[i]);
        return;
    }
    case Type::BF16: {
        const auto* h = static_cast<const uint16_t*>(src);
        for (int64_t i = 0; i < n; ++i) dst[i] = bf16ToFloat(h[i]);
        return;
    }
    case Type::Q4_0: dequantizeQ4_0(static_cast<const BlockQ4_0*>(src), dst, nb); return;
    case Type::Q4_1: dequantizeQ4_1(static_cast<const BlockQ4_1*>(src), dst, nb); return;
    case Type::Q5_0: dequantizeQ5_0(static_cast<const BlockQ5_0*>(src), dst, nb); return;
    case Type::Q5_1: dequantizeQ5_1(static_cast<const BlockQ5_1*>(src), dst, nb); return;
    case Type::Q8_0: dequantizeQ8_0(static_cast<const BlockQ8_0*>(src), dst, nb); return;
    case Type::Q8_1: dequantizeQ8_1(static_cast<const BlockQ8_1*>(src), dst, nb); return;
    case Type::Q2_K: detail::dequantizeQ2K(static_cast<const BlockQ2_K*>(src), dst, n); return;
    case Type::Q3_K: detail::dequantizeQ3K(static_cast<const BlockQ3_K*>(src), dst, n); return;
    case Type::Q4_K: detail::dequantizeQ4K(static_cast<const BlockQ4_K*>(src), dst, n); return;
    case Type::Q5_K: detail::dequantizeQ5K(static_cast<const BlockQ5_K*>(src), dst, n); return;
    case Type::Q6_K: detail::dequantizeQ6K(static_cast<const BlockQ6_K*>(src), dst, n); return;
    case Type::Q8_K: detail::dequantizeQ8K(static_cast<const BlockQ8_K*>(src), dst, n); return;
    default: break;
    }
    throw Error("tensor type " + typeLabel(type) + " cannot be decoded (not supported)");
}

bool canQuantize(Type type) {
    switch (type) {
    case Type::F32: case Type::F16: case Type::BF16:
    case Type::Q4_0: case Type::Q4_1: case Type::Q5_0: case Type::Q5_1: case Type::Q8_0: case Type::Q8_1:
    case Type::Q2_K: case Type::Q3_K: case Type::Q4_K: case Type::Q5_K: case Type::Q6_K: case Type::Q8_K:
        return true;
    default:
        return false;
    }
}

const std::vector<Type>& writableTypes() {
    static const std::vector<Type> types = {Type::F32,  Type::F16,  Type::BF16, Type::Q8_0, Type::Q4_0, Type::Q4_1, Type::Q5_0,
                                            Type::Q5_1, Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K};
    return types;
}

bool isWritable(Type type) {
    const auto& types = writableTypes();
    return std::find(types.begin(), types.end(), type) != types.end();
}

Type fittingType(Type wanted, int64_t rowLength, Type floatType) {
    const auto width = [](Type t) { return 8.0 * double(traits(t)->typeSize) / double(traits(t)->blockSize); };
    if (rowLength % traits(wanted)->blockSize == 0) return wanted;
    Type best = floatType;
    for (Type t : writableTypes()) {
        if (t == Type::F32 || t == Type::F16 || t == Type::BF16) continue;   // the float type is floatType
        if (rowLength % traits(t)->blockSize || width(t) < width(wanted)) continue;
        if (width(t) < width(best)) best = t;
    }
    return best;
}

void quantize(Type type, const float* src, void* dst, int64_t n) {
    const int64_t nb = blockCount(type, n);
    switch (type) {
    case Type::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); return;
    case Type::F16: {
        auto* h = static_cast<uint16_t*>(dst);
        for (int64_t i = 0; i < n; ++i) h[i] = floatToFp16(src[i]);
        return;
    }
    case Type::BF16: {
        auto* h = static_cast<uint16_t*>(dst);
        for (int64_t i = 0; i < n; ++i) h[i] = floatToBf16(src[i]);
        return;
    }
    case Type::Q4_0: quantizeQ4_0(src, static_cast<BlockQ4_0*>(dst), nb); return;
    case Type::Q4_1: quantizeQ4_1(src, static_cast<BlockQ4_1*>(dst), nb); return;
    case Type::Q5_0: quantizeQ5_0(src, static_cast<BlockQ5_0*>(dst), nb); return;
    case Type::Q5_1: quantizeQ5_1(src, static_cast<BlockQ5_1*>(dst), nb); return;
    case Type::Q8_0: quantizeQ8_0(src, static_cast<BlockQ8_0*>(dst), nb); return;
    case Type::Q8_1: quantizeQ8_1(src, static_cast<BlockQ8_1*>(dst), nb); return;
    case Type::Q2_K: detail::quantizeQ2K(src, static_cast<BlockQ2_K*>(dst), n); return;
    case Type::Q3_K: detail::quantizeQ3K(src, static_cast<BlockQ3_K*>(dst), n); return;
    case Type::Q4_K: detail::quantizeQ4K(src, static_cast<BlockQ4_K*>(dst), n); return;
    case Type::Q5_K: detail::quantizeQ5K(src, static_cast<BlockQ5_K*>(dst), n); return;
    case Type::Q6_K: detail::quantizeQ6K(src, static_cast<BlockQ6_K*>(dst), n); return;
    case Type::Q8_K: detail::quantizeQ8K(src, static_cast<BlockQ8_K*>(dst), n); return;
    default: break;
    }
    throw Error("cannot quantize to tensor type " + typeLabel(type) + " (not supported)");
}

// ---- half / bfloat ----

float fp16ToFloat(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu;
    const uint32_t mant = h & 0x3FFu;
    if (exp == 0x1F) return bitsFloat(sign | 0x7F800000u | (mant << 13)); // inf / nan (payload kept)
    if (exp == 0) {
        const float v = std::ldexp(float(mant), -24); // zero or subnormal: mant * 2^-24, exact in fp32
        return sign ? -v : v;
    }
    return bitsFloat(sign | ((exp + 112u) << 23) | (mant << 13)); // rebias 15 -> 127
}

uint16_t floatToFp16(float f) {
    const uint32_t u = floatBits(f);
    const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return uint16_t(sign | 0x7E00u | ((a >> 13) & 0x3FFu)); // nan: quiet, top payload bits
    if (a == 0x7F800000u) return uint16_t(sign | 0x7C00u);
    const int exp = int(a >> 23) - 127;
    if (exp > 15) return uint16_t(sign | 0x7C00u); // overflow -> inf
    uint32_t mant = (a & 0x7FFFFFu) | 0x800000u; // 24-bit significand with the implicit 1
    int shift;                                   // bits dropped from the 24-bit significand
    uint32_t base;                               // exponent field of the result before rounding
    if (exp >= -14) {
        shift = 13;
        base = uint32_t(exp + 15) << 10;
        mant &= 0x7FFFFFu; // normal: the implicit 1 lives in the exponent field
    } else {
        if (exp < -25) return sign; // below half the smallest subnormal (2^-25): rounds to zero
        shift = -1 - exp;           // exp -15 -> 14 ... exp -25 -> 24
        base = 0;
    }
    uint32_t h = base + (mant >> shift);
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h; // a carry moves into the exponent (max -> inf) correctly
    return uint16_t(sign | h);
}

float bf16ToFloat(uint16_t h) { return bitsFloat(uint32_t(h) << 16); }

uint16_t floatToBf16(float f) {
    const uint32_t u = floatBits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40u); // nan: keep sign/payload top, force quiet
    return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

} // namespace cwb::ggml
