// K-quants (super-blocks of QK_K = 256 elements): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
// Layouts and the dequantization formulas are those of ggml (ggml-common.h, dequantize_row_* in
// ggml-quants.c); each element's position is written out below as index arithmetic. The quantizers are
// our own: a least-squares fit of each sub-block's scale (and min) over a few candidate grids, then the
// sub-block scales are quantized as the format stores them and every element is re-rounded against the
// scales actually stored, so dequantize(quantize(x)) is as close as the stored bits allow.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/io/ggml_types.h"

namespace cwb::ggml {

// ---- packed scales ----

void unpackScaleMinK4(int j, const uint8_t* q, uint8_t& scale, uint8_t& min) {
    if (j < 4) {
        scale = q[j] & 63;
        min = q[j + 4] & 63;
    } else {
        scale = uint8_t((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
        min = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

void packScaleMinK4(const uint8_t scale[8], const uint8_t min[8], uint8_t q[K_SCALE_SIZE]) {
    std::memset(q, 0, K_SCALE_SIZE);
    for (int j = 0; j < 8; ++j) {
        const uint8_t s = scale[j] & 63, m = min[j] & 63;
        if (j < 4) {
            q[j] |= s;
            q[j + 4] |= m;
        } else {
            q[j + 4] = uint8_t((s & 0x0F) | ((m & 0x0F) << 4));
            q[j - 4] |= uint8_t((s >> 4) << 6);
            q[j] |= uint8_t((m >> 4) << 6);
        }
    }
}

int unpackScaleQ3K(int j, const uint8_t* q) {
    const int low = j < 8 ? (q[j] & 0x0F) : (q[j - 8] >> 4);
    const int high = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (low | (high << 4)) - 32;
}

void packScalesQ3K(const int8_t scale[16], uint8_t q[12]) {
    std::memset(q, 0, 12);
    for (int j = 0; j < 16; ++j) {
        const int v = std::max(-32, std::min(31, int(scale[j]))) + 32; // 0..63
        q[j % 8] |= uint8_t((v & 0x0F) << (j < 8 ? 0 : 4));
        q[8 + j % 4] |= uint8_t((v >> 4) << (2 * (j / 4)));
    }
}

namespace {

// ---- element positions ----
// Q2_K / Q3_K: element e sits in byte qs[32*(e/128) + e%32] at bit 2*((e%128)/32); Q3_K's third bit is
// bit ((e/128)*4 + (e%128)/32) of hmask[e%32]. Sub-block (scale index) = e/16.
int q2Byte(int e) { return 32 * (e / 128) + e % 32; }
int q2Shift(int e) { return 2 * ((e % 128) / 32); }
int q3HmaskBit(int e) { return 4 * (e / 128) + (e % 128) / 32; }
// Q4_K / Q5_K: element e sits in qs[32*(e/64) + e%32], low nibble when (e%64) < 32; sub-block = e/32,
// and Q5_K's fifth bit is bit (e/32) of qh[e%32].
int q4Byte(int e) { return 32 * (e / 64) + e % 32; }
bool q4High(int e) { return (e % 64) >= 32; }
// Q6_K: with h = e/128, g = (e%128)/32, l = e%32: low 4 bits in ql[64h + 32*(g%2) + l] (high nibble when
// g >= 2), top 2 bits at bits 2g of qh[32h + l]; sub-block = e/16.
int q6LowByte(int e) { return 64 * (e / 128) + 32 * (((e % 128) / 32) % 2) + e % 32; }
bool q6LowHigh(int e) { return (e % 128) / 32 >= 2; }
int q6HighByte(int e) { return 32 * (e / 128) + e % 32; }
int q6HighShift(int e) { return 2 * ((e % 128) / 32); }

int roundInt(float v) { return int(std::lround(v)); }

// fp16 bits of v rounded away from zero when nearest rounding would shrink it, so the largest sub-block
// scale still fits the integer range after division by the stored super-scale.
uint16_t fp16NotSmaller(float v) {
    uint16_t bits = floatToFp16(v);
    if (std::fabs(fp16ToFloat(bits)) < std::fabs(v) && (bits & 0x7FFFu) < 0x7BFFu) ++bits;
    return bits;
}
int clampInt(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// Affine fit x ~= scale * L + offset with L in [0, nmax] and offset <= 0 (ggml stores -offset as the
// "min", always >= 0). Tries grids stretched around (max - min) / nmax and keeps the least-squares fit
// with the smallest squared error. Returns scale (>= 0); minOut = -offset.
float fitAffine(const float* x, int n, int nmax, float& minOut) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
    }
    if (lo > 0.0f) lo = 0.0f;
    if (!(hi > lo)) { // constant block at a value <= 0 (or nan): offset alone reproduces it
        minOut = std::isfinite(lo) ? -lo : 0.0f;
        return 0.0f;
    }
    float bestScale = (hi - lo) / float(nmax), bestOffset = lo, bestErr = -1.0f;
    int levels[QK_K];
    for (int t = -10; t <= 10; ++t) {
        const float iscale = (float(nmax) + 0.1f * float(t)) / (hi - lo);
        double sl = 0, sl2 = 0, sx = 0, sxl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clampInt(roundInt((x[i] - lo) * iscale), 0, nmax);
            levels[i] = l;
            sl += l;
            sl2 += double(l) * l;
            sx += x[i];
            sxl += double(x[i]) * l;
        }
        const double det = n * sl2 - sl * sl;
        if (det <= 0) continue;
        double scale = (n * sxl - sx * sl) / det;
        double offset = (sl2 * sx - sl * sxl) / det;
        if (offset > 0) { // the format cannot add a positive offset: fit through zero instead
            offset = 0;
            scale = sxl / sl2;
        }
        if (scale <= 0) continue;
        double err = 0;
        for (int i = 0; i < n; ++i) {
            const double diff = scale * levels[i] + offset - x[i];
            err += diff * diff;
        }
        if (bestErr < 0 || err < bestErr) {
            bestErr = float(err);
            bestScale = float(scale);
            bestOffset = float(offset);
        }
    }
    minOut = -bestOffset;
    return bestScale;
}

// Symmetric fit x ~= scale * L with L in [-nmax, nmax - 1]. The element of largest magnitude is mapped
// to -nmax (so it uses the longer side of the range); grids around that are tried and the least-squares
// scale with the smallest error kept. The scale is signed (negative when that element is positive).
float fitSymmetric(const float* x, int n, int nmax) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; ++i) {
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            max = x[i];
        }
    }
    if (!(amax > 1e-30f)) return 0.0f;
    float bestScale = -max / float(nmax), bestErr = -1.0f;
    for (int t = -9; t <= 9; ++t) {
        const float iscale = -(float(nmax) + 0.1f * float(t)) / max;
        double sxl = 0, sl2 = 0;
        int levels[QK_K];
        for (int i = 0; i < n; ++i) {
            const int l = clampInt(roundInt(iscale * x[i]), -nmax, nmax - 1);
            levels[i] = l;
            sxl += double(x[i]) * l;
            sl2 += double(l) * l;
        }
        if (sl2 <= 0) continue;
        const double scale = sxl / sl2;
        double err = 0;
        for (int i = 0; i < n; ++i) {
            const double diff = scale * levels[i] - x[i];
            err += diff * diff;
        }
        if (bestErr < 0 || err < bestErr) {
            bestErr = float(err);
            bestScale = float(scale);
        }
    }
    return bestScale;
}

// Quantizes non-negative sub-block values v[0..count) to integers 0..top with one fp16 super-scale
// (max / top). Returns the stored fp16 bits; q receives the integers.
uint16_t quantizeUnsignedScales(const float* v, int count, int top, uint8_t* q) {
    float max = 0.0f;
    for (int j = 0; j < count; ++j) max = std::max(max, v[j]);
    if (!(max > 0.0f)) {
        std::fill(q, q + count, uint8_t(0));
        return floatToFp16(0.0f);
    }
    // Round the super-scale to fp16 first and fit the integers to the value actually stored: for small
    // weights d is an fp16 subnormal with only a few significant bits.
    const uint16_t bits = fp16NotSmaller(max / float(top));
    const float d = fp16ToFloat(bits);
    for (int j = 0; j < count; ++j) q[j] = d > 0.0f ? uint8_t(clampInt(roundInt(v[j] / d), 0, top)) : uint8_t(0);
    return bits;
}

// Shared by Q2_K, Q4_K, Q5_K: fits affine sub-blocks of `sub` elements with levels 0..nmax, stores the
// scales and mins quantized to 0..scaleTop, then re-rounds every element against the stored values.
// Outputs the per-element levels L, the integer scales/mins and the fp16 d / dmin bits.
void quantizeAffineSuperBlock(const float* x, int sub, int nmax, int scaleTop, uint8_t* L, uint8_t* sc, uint8_t* mn,
                              uint16_t& dBits, uint16_t& dminBits) {
    const int count = QK_K / sub;
    float scales[QK_K / 16] = {}, mins[QK_K / 16] = {};
    for (int j = 0; j < count; ++j) scales[j] = fitAffine(x + sub * j, sub, nmax, mins[j]);
    dBits = quantizeUnsignedScales(scales, count, scaleTop, sc);
    dminBits = quantizeUnsignedScales(mins, count, scaleTop, mn);
    const float d = fp16ToFloat(dBits), dmin = fp16ToFloat(dminBits);
    for (int j = 0; j < count; ++j) {
        const float ds = d * float(sc[j]), dm = dmin * float(mn[j]);
        for (int i = 0; i < sub; ++i) {
            const int e = sub * j + i;
            L[e] = ds > 0.0f ? uint8_t(clampInt(roundInt((x[e] + dm) / ds), 0, nmax)) : uint8_t(0);
        }
    }
}

// Shared by Q3_K and Q6_K: symmetric sub-blocks of 16 with levels -nmax..nmax-1; signed integer
// scales in scaleLo..scaleHi with the super-scale chosen so the largest-magnitude scale maps to scaleLo.
// Outputs levels L (signed), integer scales and the fp16 d bits.
void quantizeSymmetricSuperBlock(const float* x, int nmax, int scaleLo, int scaleHi, int* L, int* sc, uint16_t& dBits) {
    float scales[QK_K / 16];
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK_K / 16; ++j) {
        scales[j] = fitSymmetric(x + 16 * j, 16, nmax);
        if (std::fabs(scales[j]) > amax) {
            amax = std::fabs(scales[j]);
            max = scales[j];
        }
    }
    if (!(amax > 1e-30f)) {
        std::fill(sc, sc + QK_K / 16, 0);
        std::fill(L, L + QK_K, 0);
        dBits = floatToFp16(0.0f);
        return;
    }
    // d maps the largest-magnitude scale to scaleLo; the integers are fitted to d as stored in fp16.
    dBits = fp16NotSmaller(max / float(scaleLo));
    const float d = fp16ToFloat(dBits);
    for (int j = 0; j < QK_K / 16; ++j) sc[j] = d != 0.0f ? clampInt(roundInt(scales[j] / d), scaleLo, scaleHi) : 0;
    for (int j = 0; j < QK_K / 16; ++j) {
        const float ds = d * float(sc[j]);
        for (int i = 0; i < 16; ++i) {
            const int e = 16 * j + i;
            L[e] = ds != 0.0f ? clampInt(roundInt(x[e] / ds), -nmax, nmax - 1) : 0;
        }
    }
}

} // namespace

namespace detail {

// ---- dequantization ----

void dequantizeQ2K(const BlockQ2_K* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, y += QK_K) {
        const float d = fp16ToFloat(x[b].d), dmin = fp16ToFloat(x[b].dmin);
        for (int e = 0; e < QK_K; ++e) {
            const uint8_t s = x[b].scales[e / 16];
            const int q = (x[b].qs[q2Byte(e)] >> q2Shift(e)) & 3;
            y[e] = d * float(s & 0x0F) * float(q) - dmin * float(s >> 4);
        }
    }
}

void dequantizeQ3K(const BlockQ3_K* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, y += QK_K) {
        const float d = fp16ToFloat(x[b].d);
        int scale[16];
        for (int j = 0; j < 16; ++j) scale[j] = unpackScaleQ3K(j, x[b].scales);
        for (int e = 0; e < QK_K; ++e) {
            const int low = (x[b].qs[q2Byte(e)] >> q2Shift(e)) & 3;
            const bool high = (x[b].hmask[e % 32] >> q3HmaskBit(e)) & 1;
            y[e] = d * float(scale[e / 16]) * float(low - (high ? 0 : 4));
        }
    }
}

void dequantizeQ4K(const BlockQ4_K* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, y += QK_K) {
        const float d = fp16ToFloat(x[b].d), dmin = fp16ToFloat(x[b].dmin);
        for (int e = 0; e < QK_K; ++e) {
            uint8_t sc, m;
            unpackScaleMinK4(e / 32, x[b].scales, sc, m);
            const uint8_t byte = x[b].qs[q4Byte(e)];
            const int q = q4High(e) ? (byte >> 4) : (byte & 0x0F);
            y[e] = d * float(sc) * float(q) - dmin * float(m);
        }
    }
}

void dequantizeQ5K(const BlockQ5_K* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, y += QK_K) {
        const float d = fp16ToFloat(x[b].d), dmin = fp16ToFloat(x[b].dmin);
        for (int e = 0; e < QK_K; ++e) {
            uint8_t sc, m;
            unpackScaleMinK4(e / 32, x[b].scales, sc, m);
            const uint8_t byte = x[b].qs[q4Byte(e)];
            const int low = q4High(e) ? (byte >> 4) : (byte & 0x0F);
            const int q = low | (((x[b].qh[e % 32] >> (e / 32)) & 1) << 4);
            y[e] = d * float(sc) * float(q) - dmin * float(m);
        }
    }
}

void dequantizeQ6K(const BlockQ6_K* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, y += QK_K) {
        const float d = fp16ToFloat(x[b].d);
        for (int e = 0; e < QK_K; ++e) {
            const uint8_t lowByte = x[b].ql[q6LowByte(e)];
            const int low = q6LowHigh(e) ? (lowByte >> 4) : (lowByte & 0x0F);
            const int high = (x[b].qh[q6HighByte(e)] >> q6HighShift(e)) & 3;
            y[e] = d * float(x[b].scales[e / 16]) * float((low | (high << 4)) - 32);
        }
    }
}

void dequantizeQ8K(const BlockQ8_K* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, y += QK_K) {
        for (int e = 0; e < QK_K; ++e) y[e] = x[b].d * float(x[b].qs[e]);
    }
}

// ---- quantization ----

void quantizeQ2K(const float* x, BlockQ2_K* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        uint8_t L[QK_K], sc[16], mn[16];
        quantizeAffineSuperBlock(x, 16, 3, 15, L, sc, mn, y[b].d, y[b].dmin);
        for (int j = 0; j < 16; ++j) y[b].scales[j] = uint8_t(sc[j] | (mn[j] << 4));
        std::memset(y[b].qs, 0, sizeof y[b].qs);
        for (int e = 0; e < QK_K; ++e) y[b].qs[q2Byte(e)] |= uint8_t(L[e] << q2Shift(e));
    }
}

void quantizeQ3K(const float* x, BlockQ3_K* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        int L[QK_K], sc[16];
        quantizeSymmetricSuperBlock(x, 4, -32, 31, L, sc, y[b].d);
        int8_t sc8[16];
        for (int j = 0; j < 16; ++j) sc8[j] = int8_t(sc[j]);
        packScalesQ3K(sc8, y[b].scales);
        std::memset(y[b].qs, 0, sizeof y[b].qs);
        std::memset(y[b].hmask, 0, sizeof y[b].hmask);
        for (int e = 0; e < QK_K; ++e) {
            const int v = L[e] + 4; // 0..7
            y[b].qs[q2Byte(e)] |= uint8_t((v & 3) << q2Shift(e));
            if (v & 4) y[b].hmask[e % 32] |= uint8_t(1u << q3HmaskBit(e));
        }
    }
}

void quantizeQ4K(const float* x, BlockQ4_K* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        uint8_t L[QK_K], sc[8], mn[8];
        quantizeAffineSuperBlock(x, 32, 15, 63, L, sc, mn, y[b].d, y[b].dmin);
        packScaleMinK4(sc, mn, y[b].scales);
        std::memset(y[b].qs, 0, sizeof y[b].qs);
        for (int e = 0; e < QK_K; ++e) y[b].qs[q4Byte(e)] |= uint8_t(L[e] << (q4High(e) ? 4 : 0));
    }
}

void quantizeQ5K(const float* x, BlockQ5_K* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        uint8_t L[QK_K], sc[8], mn[8];
        quantizeAffineSuperBlock(x, 32, 31, 63, L, sc, mn, y[b].d, y[b].dmin);
        packScaleMinK4(sc, mn, y[b].scales);
        std::memset(y[b].qs, 0, sizeof y[b].qs);
        std::memset(y[b].qh, 0, sizeof y[b].qh);
        for (int e = 0; e < QK_K; ++e) {
            y[b].qs[q4Byte(e)] |= uint8_t((L[e] & 0x0F) << (q4High(e) ? 4 : 0));
            if (L[e] & 0x10) y[b].qh[e % 32] |= uint8_t(1u << (e / 32));
        }
    }
}

void quantizeQ6K(const float* x, BlockQ6_K* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        int L[QK_K], sc[16];
        quantizeSymmetricSuperBlock(x, 32, -128, 127, L, sc, y[b].d);
        for (int j = 0; j < 16; ++j) y[b].scales[j] = int8_t(sc[j]);
        std::memset(y[b].ql, 0, sizeof y[b].ql);
        std::memset(y[b].qh, 0, sizeof y[b].qh);
        for (int e = 0; e < QK_K; ++e) {
            const int v = L[e] + 32; // 0..63
            y[b].ql[q6LowByte(e)] |= uint8_t((v & 0x0F) << (q6LowHigh(e) ? 4 : 0));
            y[b].qh[q6HighByte(e)] |= uint8_t((v >> 4) << q6HighShift(e));
        }
    }
}

void quantizeQ8K(const float* x, BlockQ8_K* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        float amax = 0.0f;
        for (int e = 0; e < QK_K; ++e) amax = std::max(amax, std::fabs(x[e]));
        const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        y[b].d = d;
        for (int e = 0; e < QK_K; ++e) y[b].qs[e] = int8_t(clampInt(roundInt(x[e] * id), -127, 127));
        for (int g = 0; g < QK_K / 16; ++g) {
            int sum = 0;
            for (int i = 0; i < 16; ++i) sum += y[b].qs[16 * g + i];
            y[b].bsums[g] = int16_t(sum);
        }
    }
}

} // namespace detail

} // namespace cwb::ggml
