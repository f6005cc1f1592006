// Tests for core/io/ggml_types: every decoder against blocks built byte by byte here, with expected values
// worked out by hand from the format's formula (ggml-common.h layouts, ggml-quants.c dequantize_row_*),
// half/bfloat conversion edge cases, row sizes, refusal of unknown/unsupported types, and quantize ->
// dequantize error bounds for every quantizer.
//
// Cross-checked once, outside this suite, against the Python `gguf` package 0.19.0 (gguf.quants): random
// blocks (random bytes, finite fp16 scales) of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K
// decoded bit-identically, and quantize() to Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16 and BF16 produced identical
// bytes. This suite needs no Python.
#include <QtTest/QtTest>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/io/ggml_types.h"
#include "core/util/error.h"

using namespace cwb::ggml;

namespace {

struct Case {
    QByteArray bytes;
    QList<float> expected;
};

void put16(QByteArray& b, int offset, uint16_t v) {
    b[offset] = char(v & 0xFF);
    b[offset + 1] = char(v >> 8);
}

void put32(QByteArray& b, int offset, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[offset + i] = char((v >> (8 * i)) & 0xFF);
}

void putBytes(QByteArray& b, int offset, std::initializer_list<int> values) {
    for (int v : values) b[offset++] = char(v & 0xFF);
}

// fp16 constants used below (IEEE half bits): 1.0, 0.5, 0.25, 2.0, -2.0.
constexpr uint16_t H_ONE = 0x3C00, H_HALF = 0x3800, H_QUARTER = 0x3400, H_TWO = 0x4000, H_MINUS_TWO = 0xC000;

Case caseF32() {
    Case c{QByteArray(8, 0), {1.5f, -2.25f}};
    put32(c.bytes, 0, 0x3FC00000u); // 1.5
    put32(c.bytes, 4, 0xC0100000u); // -2.25
    return c;
}

Case caseF16() {
    Case c{QByteArray(10, 0), {1.0f, -2.0f, 65504.0f, 5.9604644775390625e-08f /* 2^-24 */, 0.333251953125f}};
    put16(c.bytes, 0, 0x3C00);
    put16(c.bytes, 2, 0xC000);
    put16(c.bytes, 4, 0x7BFF);
    put16(c.bytes, 6, 0x0001);
    put16(c.bytes, 8, 0x3555); // 1.0101010101b * 2^-2 = 1365/4096
    return c;
}

Case caseBF16() {
    Case c{QByteArray(6, 0), {1.0f, -3.0f, 3.140625f}};
    put16(c.bytes, 0, 0x3F80);
    put16(c.bytes, 2, 0xC040);
    put16(c.bytes, 4, 0x4049); // 1.1001001b * 2 = 3.140625
    return c;
}

// Q4_0: d = 0.5; qs[j] = j | (15 - j) << 4, so element j (< 16) has q = j, element 16 + j has q = 15 - j.
// x = d * (q - 8).
Case caseQ4_0() {
    Case c{QByteArray(18, 0), {}};
    put16(c.bytes, 0, H_HALF);
    for (int j = 0; j < 16; ++j) c.bytes[2 + j] = char(j | ((15 - j) << 4));
    c.expected = {-4.0f, -3.5f, -3.0f, -2.5f, -2.0f, -1.5f, -1.0f, -0.5f, 0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  2.5f,  3.0f,  3.5f,
                  3.5f,  3.0f,  2.5f,  2.0f,  1.5f,  1.0f,  0.5f,  0.0f,  -0.5f, -1.0f, -1.5f, -2.0f, -2.5f, -3.0f, -3.5f, -4.0f};
    return c;
}

// Q4_1: d = 1.0, m = -2.0, same nibbles as Q4_0; x = d * q + m.
Case caseQ4_1() {
    Case c{QByteArray(20, 0), {}};
    put16(c.bytes, 0, H_ONE);
    put16(c.bytes, 2, H_MINUS_TWO);
    for (int j = 0; j < 16; ++j) c.bytes[4 + j] = char(j | ((15 - j) << 4));
    c.expected = {-2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, -1, -2};
    return c;
}

// Q5: qh bytes AA 00 01 80 set bits 1, 3, 5, 7, 16 and 31, i.e. bit 4 of elements 1, 3, 5, 7, 16, 31;
// nibbles as Q4_0. The resulting 5-bit q per element:
const int kQ5Levels[32] = {0, 17, 2, 19, 4, 21, 6, 23, 8, 9, 10, 11, 12, 13, 14, 15,
                           31, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 16};

// Q5_0: d = 0.5; x = d * (q - 16).
Case caseQ5_0() {
    Case c{QByteArray(22, 0), {}};
    put16(c.bytes, 0, H_HALF);
    putBytes(c.bytes, 2, {0xAA, 0x00, 0x01, 0x80});
    for (int j = 0; j < 16; ++j) c.bytes[6 + j] = char(j | ((15 - j) << 4));
    c.expected = {-8.0f, 0.5f, -7.0f, 1.5f, -6.0f, 2.5f, -5.0f, 3.5f, -4.0f, -3.5f, -3.0f, -2.5f, -2.0f, -1.5f, -1.0f, -0.5f,
                  7.5f,  -1.0f, -1.5f, -2.0f, -2.5f, -3.0f, -3.5f, -4.0f, -4.5f, -5.0f, -5.5f, -6.0f, -6.5f, -7.0f, -7.5f, 0.0f};
    return c;
}

// Q5_1: d = 1.0, m = 0.5; x = d * q + m.
Case caseQ5_1() {
    Case c{QByteArray(24, 0), {}};
    put16(c.bytes, 0, H_ONE);
    put16(c.bytes, 2, H_HALF);
    putBytes(c.bytes, 4, {0xAA, 0x00, 0x01, 0x80});
    for (int j = 0; j < 16; ++j) c.bytes[8 + j] = char(j | ((15 - j) << 4));
    c.expected = {0.5f,  17.5f, 2.5f,  19.5f, 4.5f,  21.5f, 6.5f, 23.5f, 8.5f, 9.5f, 10.5f, 11.5f, 12.5f, 13.5f, 14.5f, 15.5f,
                  31.5f, 14.5f, 13.5f, 12.5f, 11.5f, 10.5f, 9.5f, 8.5f,  7.5f, 6.5f, 5.5f,  4.5f,  3.5f,  2.5f,  1.5f,  16.5f};
    return c;
}

// Q8_0: d = 0.25; q[j] = j - 16 except q[0] = -128 and q[31] = 127; x = d * q.
Case caseQ8_0() {
    Case c{QByteArray(34, 0), {}};
    put16(c.bytes, 0, H_QUARTER);
    for (int j = 0; j < 32; ++j) {
        const int q = j == 0 ? -128 : j == 31 ? 127 : j - 16;
        c.bytes[2 + j] = char(q & 0xFF);
        c.expected << 0.25f * float(q);
    }
    return c;
}

// Q8_1: d = 2.0, s (ignored when decoding) = 0; q[j] = j for even j, -j for odd j; x = d * q.
Case caseQ8_1() {
    Case c{QByteArray(36, 0), {}};
    put16(c.bytes, 0, H_TWO);
    for (int j = 0; j < 32; ++j) {
        const int q = j % 2 ? -j : j;
        c.bytes[4 + j] = char(q & 0xFF);
        c.expected << 2.0f * float(q);
    }
    return c;
}

// Q2_K (84 bytes: scales[16] @0, qs[64] @16, d @80, dmin @82): d = 1.0, dmin = 0.5.
// Sub-block s (elements 16s..16s+15) has scale nibble sc = s % 15 + 1 and min nibble m = 15 - s.
// qs: bytes 0..31 (first 128 elements) = 0xE4 (2-bit fields 0,1,2,3 at shifts 0,2,4,6), bytes 32..63 = 0x1B
// (fields 3,2,1,0), except qs[5] = 0xFF (all 3) and qs[40] = 0x00 (all 0).
// Element e: half h = e/128, group g = (e%128)/32 (the shift 2g), l = e%32 reads byte 32h + l.
// x = d * sc * q - dmin * m.
Case caseQ2_K() {
    Case c{QByteArray(84, 0), {}};
    for (int s = 0; s < 16; ++s) c.bytes[s] = char((s % 15 + 1) | ((15 - s) << 4));
    for (int i = 0; i < 64; ++i) c.bytes[16 + i] = char(i < 32 ? 0xE4 : 0x1B);
    c.bytes[16 + 5] = char(0xFF);
    c.bytes[16 + 40] = char(0x00);
    put16(c.bytes, 80, H_ONE);
    put16(c.bytes, 82, H_HALF);
    for (int e = 0; e < 256; ++e) {
        const int h = e / 128, g = (e % 128) / 32, l = e % 32, s = e / 16;
        int q = h == 0 ? g : 3 - g;
        if (h == 0 && l == 5) q = 3;
        if (h == 1 && l == 8) q = 0;
        c.expected << 1.0f * float(s % 15 + 1) * float(q) - 0.5f * float(15 - s);
    }
    return c;
}

// Q3_K (110 bytes: hmask[32] @0, qs[64] @32, scales[12] @96, d @108): d = 0.5.
// Scales: stored 6-bit values v = {3, 7, 11, 15, 19, 23, 27, 31, 63, 43, 55, 35, 47, 59, 39, 51}, scale = v - 32
// (kQ3Scale). Low nibbles: j < 8 in the low nibble of byte j, j >= 8 in the high nibble of byte j-8
// -> bytes F3 B7 7B 3F F3 B7 7B 3F; top 2 bits of v_j (0,0,0,0,1,1,1,1,3,2,3,2,2,3,2,3) at bits 2*(j/4) of
// byte 8 + j%4 -> bytes B4 E4 B4 E4.
// Low 2 bits of q: as Q2_K without the exceptions (0xE4 for the first half, 0x1B for the second).
// hmask[l] = 0x0F for even l, 0xF0 for odd l, except hmask[3] = 0x21; bit 4h+g of hmask[e%32] set means
// q = low, clear means q = low - 4. x = d * scale * q.
const int kQ3Scale[16] = {-29, -25, -21, -17, -13, -9, -5, -1, 31, 11, 23, 3, 15, 27, 7, 19};
const std::initializer_list<int> kQ3Packed = {0xF3, 0xB7, 0x7B, 0x3F, 0xF3, 0xB7, 0x7B, 0x3F, 0xB4, 0xE4, 0xB4, 0xE4};

Case caseQ3_K() {
    Case c{QByteArray(110, 0), {}};
    for (int l = 0; l < 32; ++l) c.bytes[l] = char(l % 2 ? 0xF0 : 0x0F);
    c.bytes[3] = char(0x21);
    for (int i = 0; i < 64; ++i) c.bytes[32 + i] = char(i < 32 ? 0xE4 : 0x1B);
    putBytes(c.bytes, 96, kQ3Packed);
    put16(c.bytes, 108, H_HALF);
    for (int e = 0; e < 256; ++e) {
        const int h = e / 128, g = (e % 128) / 32, l = e % 32, s = e / 16;
        const int low = h == 0 ? g : 3 - g;
        const int hm = l == 3 ? 0x21 : (l % 2 ? 0xF0 : 0x0F);
        const int q = ((hm >> (4 * h + g)) & 1) ? low : low - 4;
        c.expected << 0.5f * float(kQ3Scale[s]) * float(q);
    }
    return c;
}

// Q4_K / Q5_K scales: 6-bit scales sc = {1, 2, 3, 4, 17, 33, 50, 63} and mins m = {0, 5, 10, 15, 36, 20, 15, 63}
// (top 2 bits of sc[4..7] = 1,2,3,3 and of m[4..7] = 2,1,0,3 differ, so mixing them up fails).
// Bytes 0..3: sc[j] | (sc[j+4] >> 4) << 6 = 41 82 C3 C4; bytes 4..7: m[j] | (m[j+4] >> 4) << 6 = 80 45 0A CF;
// bytes 8..11: (sc[j+4] & 15) | (m[j+4] & 15) << 4 = 41 41 F2 FF.
const int kKScale[8] = {1, 2, 3, 4, 17, 33, 50, 63};
const int kKMin[8] = {0, 5, 10, 15, 36, 20, 15, 63};
const std::initializer_list<int> kKPacked = {0x41, 0x82, 0xC3, 0xC4, 0x80, 0x45, 0x0A, 0xCF, 0x41, 0x41, 0xF2, 0xFF};

// Nibbles shared by Q4_K / Q5_K: qs[32c + i] = (i%16) | (15 - i%16) << 4; element e reads byte 32*(e/64) + e%32,
// low nibble when e%64 < 32.
int kNibble(int e) {
    const int i = e % 32;
    return (e % 64) < 32 ? i % 16 : 15 - i % 16;
}

// Q4_K (144 bytes: d @0, dmin @2, scales[12] @4, qs[128] @16): d = 1.0, dmin = 0.25; x = d*sc*q - dmin*m,
// sub-block e/32.
Case caseQ4_K() {
    Case c{QByteArray(144, 0), {}};
    put16(c.bytes, 0, H_ONE);
    put16(c.bytes, 2, H_QUARTER);
    putBytes(c.bytes, 4, kKPacked);
    for (int k = 0; k < 128; ++k) c.bytes[16 + k] = char((k % 32 % 16) | ((15 - k % 32 % 16) << 4));
    for (int e = 0; e < 256; ++e)
        c.expected << 1.0f * float(kKScale[e / 32]) * float(kNibble(e)) - 0.25f * float(kKMin[e / 32]);
    return c;
}

// Q5_K (176 bytes: d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48): as Q4_K, plus bit 4 of q from
// bit e/32 of qh[e%32]; qh[l] = 0xAA for even l, 0x55 for odd l.
Case caseQ5_K() {
    Case c{QByteArray(176, 0), {}};
    put16(c.bytes, 0, H_ONE);
    put16(c.bytes, 2, H_QUARTER);
    putBytes(c.bytes, 4, kKPacked);
    for (int l = 0; l < 32; ++l) c.bytes[16 + l] = char(l % 2 ? 0x55 : 0xAA);
    for (int k = 0; k < 128; ++k) c.bytes[48 + k] = char((k % 32 % 16) | ((15 - k % 32 % 16) << 4));
    for (int e = 0; e < 256; ++e) {
        const int qh = (e % 32) % 2 ? 0x55 : 0xAA;
        const int q = kNibble(e) + (((qh >> (e / 32)) & 1) ? 16 : 0);
        c.expected << 1.0f * float(kKScale[e / 32]) * float(q) - 0.25f * float(kKMin[e / 32]);
    }
    return c;
}

// Q6_K (210 bytes: ql[128] @0, qh[64] @128, scales[16] int8 @192, d @208): d = 0.5; scale of sub-block s is
// s+1 for even s, -(s+1) for odd s. ql = 0x21 everywhere except ql[5] = 0xF0 and ql[100] = 0x0E;
// qh = 0xE4 everywhere except qh[40] = 0x1B. Element e: h = e/128, g = (e%128)/32, l = e%32;
// low 4 bits from ql[64h + 32(g%2) + l] (high nibble when g >= 2), top 2 bits at bits 2g of qh[32h + l];
// x = d * scale * (q - 32).
Case caseQ6_K() {
    Case c{QByteArray(210, 0), {}};
    for (int k = 0; k < 128; ++k) c.bytes[k] = char(0x21);
    c.bytes[5] = char(0xF0);
    c.bytes[100] = char(0x0E);
    for (int k = 0; k < 64; ++k) c.bytes[128 + k] = char(0xE4);
    c.bytes[128 + 40] = char(0x1B);
    for (int s = 0; s < 16; ++s) c.bytes[192 + s] = char((s % 2 ? -(s + 1) : s + 1) & 0xFF);
    put16(c.bytes, 208, H_HALF);
    for (int e = 0; e < 256; ++e) {
        const int h = e / 128, g = (e % 128) / 32, l = e % 32, s = e / 16;
        const int qlIndex = 64 * h + 32 * (g % 2) + l, qhIndex = 32 * h + l;
        const int ql = qlIndex == 5 ? 0xF0 : qlIndex == 100 ? 0x0E : 0x21;
        const int qh = qhIndex == 40 ? 0x1B : 0xE4;
        const int q = ((g >= 2 ? ql >> 4 : ql) & 0x0F) | (((qh >> (2 * g)) & 3) << 4);
        c.expected << 0.5f * float(s % 2 ? -(s + 1) : s + 1) * float(q - 32);
    }
    return c;
}

// Q8_K (292 bytes: float d @0, qs[256] @4, bsums[16] @260): d = 0.125; q[e] = e - 128; x = d * q.
Case caseQ8_K() {
    Case c{QByteArray(292, 0), {}};
    put32(c.bytes, 0, 0x3E000000u); // 0.125f
    for (int e = 0; e < 256; ++e) {
        c.bytes[4 + e] = char((e - 128) & 0xFF);
        c.expected << 0.125f * float(e - 128);
    }
    return c;
}

Case caseFor(Type t) {
    switch (t) {
    case Type::F32: return caseF32();
    case Type::F16: return caseF16();
    case Type::BF16: return caseBF16();
    case Type::Q4_0: return caseQ4_0();
    case Type::Q4_1: return caseQ4_1();
    case Type::Q5_0: return caseQ5_0();
    case Type::Q5_1: return caseQ5_1();
    case Type::Q8_0: return caseQ8_0();
    case Type::Q8_1: return caseQ8_1();
    case Type::Q2_K: return caseQ2_K();
    case Type::Q3_K: return caseQ3_K();
    case Type::Q4_K: return caseQ4_K();
    case Type::Q5_K: return caseQ5_K();
    case Type::Q6_K: return caseQ6_K();
    case Type::Q8_K: return caseQ8_K();
    default: return {};
    }
}

std::vector<float> decode(Type t, const QByteArray& bytes, int64_t n) {
    std::vector<float> out(size_t(n), std::numeric_limits<float>::quiet_NaN());
    dequantize(t, bytes.constData(), out.data(), n);
    return out;
}

uint32_t bitsOf(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

float floatOf(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// Deterministic test data: uniform blocks, shifted (all-positive and all-negative) blocks, an outlier,
// a constant block and a zero block, so both signs of the scale and the mins are exercised.
std::vector<float> testSignal(int64_t n) {
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        const int64_t region = (i / 256) % 6;
        float v = uni(rng);
        if (region == 1) v = 1.5f + v * 0.5f;       // [1, 2]
        if (region == 2) v = -3.0f + v;             // [-4, -2]
        if (region == 3 && i % 256 == 77) v = 8.0f; // one outlier
        if (region == 4) v = (i % 256) < 128 ? 0.0f : -0.75f;
        if (region == 5) v = v * 1e-3f;
        x[size_t(i)] = v;
    }
    return x;
}

} // namespace

class TestGgmlTypes : public QObject {
    Q_OBJECT

private slots:
    void blockLayoutSizes();
    void dequantizeHandBuilt_data();
    void dequantizeHandBuilt();
    void handValues_data();
    void handValues();
    void packedScaleHelpers();
    void fp16Conversion_data();
    void fp16Conversion();
    void fp16Rounding_data();
    void fp16Rounding();
    void fp16SpecialsAndExhaustiveRoundTrip();
    void bf16Conversion_data();
    void bf16Conversion();
    void bf16Nan();
    void traitsTable();
    void rowBytes_data();
    void rowBytes();
    void rowBytesRejectsPartialBlocks();
    void unsupportedTypesRefused_data();
    void unsupportedTypesRefused();
    void exactValuesSurviveQuantization();
    void simpleQuantizerBounds_data();
    void simpleQuantizerBounds();
    void kQuantRoundTrip_data();
    void kQuantRoundTrip();
    void zeroInputQuantizesToZero();
};

void TestGgmlTypes::blockLayoutSizes() {
    // The ggml sizes, independently of the static_asserts in the header.
    QCOMPARE(sizeof(BlockQ4_0), size_t(18));
    QCOMPARE(sizeof(BlockQ4_1), size_t(20));
    QCOMPARE(sizeof(BlockQ5_0), size_t(22));
    QCOMPARE(sizeof(BlockQ5_1), size_t(24));
    QCOMPARE(sizeof(BlockQ8_0), size_t(34));
    QCOMPARE(sizeof(BlockQ2_K), size_t(84));
    QCOMPARE(sizeof(BlockQ3_K), size_t(110));
    QCOMPARE(sizeof(BlockQ4_K), size_t(144));
    QCOMPARE(sizeof(BlockQ5_K), size_t(176));
    QCOMPARE(sizeof(BlockQ6_K), size_t(210));
    QCOMPARE(sizeof(BlockQ8_K), size_t(292));
    // Field offsets the hand-built blocks below rely on.
    QCOMPARE(offsetof(BlockQ2_K, d), size_t(80));
    QCOMPARE(offsetof(BlockQ3_K, scales), size_t(96));
    QCOMPARE(offsetof(BlockQ5_K, qs), size_t(48));
    QCOMPARE(offsetof(BlockQ6_K, scales), size_t(192));
    QCOMPARE(offsetof(BlockQ8_K, bsums), size_t(260));
}

void TestGgmlTypes::dequantizeHandBuilt_data() {
    QTest::addColumn<int>("type");
    const std::pair<const char*, Type> rows[] = {
        {"f32", Type::F32},   {"f16", Type::F16},   {"bf16", Type::BF16}, {"q4_0", Type::Q4_0}, {"q4_1", Type::Q4_1},
        {"q5_0", Type::Q5_0}, {"q5_1", Type::Q5_1}, {"q8_0", Type::Q8_0}, {"q8_1", Type::Q8_1}, {"q2_K", Type::Q2_K},
        {"q3_K", Type::Q3_K}, {"q4_K", Type::Q4_K}, {"q5_K", Type::Q5_K}, {"q6_K", Type::Q6_K}, {"q8_K", Type::Q8_K},
    };
    for (const auto& r : rows) QTest::newRow(r.first) << int(r.second);
}

void TestGgmlTypes::dequantizeHandBuilt() {
    QFETCH(int, type);
    const Type t = Type(type);
    const Case c = caseFor(t);
    const int64_t n = c.expected.size();
    QCOMPARE(size_t(c.bytes.size()), ::cwb::ggml::rowBytes(t, n));

    const std::vector<float> got = decode(t, c.bytes, n);
    for (int64_t i = 0; i < n; ++i)
        QVERIFY2(got[size_t(i)] == c.expected[i],
                 qPrintable(QStringLiteral("element %1: got %2, expected %3").arg(i).arg(got[size_t(i)]).arg(c.expected[i])));

    // The block after an all-zero block (which decodes to zeros in every format), and before one: the
    // decoder must step by the block size and read each block's own scales.
    const QByteArray zeros(c.bytes.size(), 0);
    const std::vector<float> after = decode(t, zeros + c.bytes, 2 * n);
    const std::vector<float> before = decode(t, c.bytes + zeros, 2 * n);
    for (int64_t i = 0; i < 2 * n; ++i) {
        const float first = i < n ? 0.0f : c.expected[i - n], second = i < n ? c.expected[i] : 0.0f;
        QVERIFY2(after[size_t(i)] == first, qPrintable(QStringLiteral("zero block first, element %1").arg(i)));
        QVERIFY2(before[size_t(i)] == second, qPrintable(QStringLiteral("zero block second, element %1").arg(i)));
    }
}

void TestGgmlTypes::handValues_data() {
    // Single elements of the blocks above, worked out by hand (see the comments at each case).
    QTest::addColumn<int>("type");
    QTest::addColumn<int>("element");
    QTest::addColumn<float>("value");
    // Q2_K: e=0: s0 sc1 m15 q0 -> -7.5; e=5: qs[5]=FF q3 -> 3 - 7.5; e=37: g1 l5 q3, s2 sc3 m13 -> 9 - 6.5;
    // e=130: h1 g0 q3, s8 sc9 m7 -> 27 - 3.5; e=200: h1 g2 l8 q0, s12 m3 -> -1.5; e=255: s15 sc1 m0 q0 -> 0.
    QTest::newRow("q2_K e0") << int(Type::Q2_K) << 0 << -7.5f;
    QTest::newRow("q2_K e5") << int(Type::Q2_K) << 5 << -4.5f;
    QTest::newRow("q2_K e37") << int(Type::Q2_K) << 37 << 2.5f;
    QTest::newRow("q2_K e130") << int(Type::Q2_K) << 130 << 23.5f;
    QTest::newRow("q2_K e200") << int(Type::Q2_K) << 200 << -1.5f;
    QTest::newRow("q2_K e255") << int(Type::Q2_K) << 255 << 0.0f;
    // Q3_K: e=1: low0, hmask[1]=F0 bit0 clear -> q=-4, scale -29 -> 0.5*-29*-4; e=35: g1 l3 low1, hmask[3]=21
    // bit1 clear -> q=-3, s2 scale -21 -> 31.5; e=131: h1 g0 low3, bit4 clear -> q=-1, s8 scale 31 -> -15.5;
    // e=161: h1 g1 l1 low2, bit5 of F0 set -> q=2, s10 scale 23 -> 23; e=254: h1 g3 l30 low0, hmask 0F
    // bit7 clear -> q=-4, s15 scale 19 -> -38.
    QTest::newRow("q3_K e1") << int(Type::Q3_K) << 1 << 58.0f;
    QTest::newRow("q3_K e35") << int(Type::Q3_K) << 35 << 31.5f;
    QTest::newRow("q3_K e131") << int(Type::Q3_K) << 131 << -15.5f;
    QTest::newRow("q3_K e161") << int(Type::Q3_K) << 161 << 23.0f;
    QTest::newRow("q3_K e254") << int(Type::Q3_K) << 254 << -38.0f;
    // Q4_K: e=40: high nibble of byte 8 -> q7, s1 sc2 m5 -> 14 - 1.25; e=150: low nibble of byte 64+22 -> q6,
    // s4 sc17 m36 -> 102 - 9; e=200: low nibble of byte 96+8 -> q8, s6 sc50 m15 -> 400 - 3.75;
    // e=255: q0, s7 m63 -> -15.75.
    QTest::newRow("q4_K e40") << int(Type::Q4_K) << 40 << 12.75f;
    QTest::newRow("q4_K e150") << int(Type::Q4_K) << 150 << 93.0f;
    QTest::newRow("q4_K e200") << int(Type::Q4_K) << 200 << 396.25f;
    QTest::newRow("q4_K e255") << int(Type::Q4_K) << 255 << -15.75f;
    // Q5_K: e=1: qh[1]=55 bit0 set -> q=1+16, s0 sc1 m0 -> 17; e=40: qh[8]=AA bit1 set -> q=23 -> 46 - 1.25;
    // e=150: qh[22]=AA bit4 clear -> q6 -> 102 - 9; e=233: qh[9]=55 bit7 clear, high nibble of byte 96+9 -> q6 -> 378 - 15.75.
    QTest::newRow("q5_K e1") << int(Type::Q5_K) << 1 << 17.0f;
    QTest::newRow("q5_K e40") << int(Type::Q5_K) << 40 << 44.75f;
    QTest::newRow("q5_K e150") << int(Type::Q5_K) << 150 << 93.0f;
    QTest::newRow("q5_K e233") << int(Type::Q5_K) << 233 << 362.25f;
    // Q6_K: e=5: ql[5] low 0, qh g0 0 -> q-32 = -32, scale 1 -> -16; e=69: g2, ql[5] high F, qh[5] bits4-5 = 2
    // -> 47-32 = 15, s4 scale 5 -> 37.5; e=164: h1 g1 l4: ql[100] low E, qh[36] bits2-3 = 1 -> 30-32 = -2, s10
    // scale 11 -> -11; e=168: ql[104] low 1, qh[40]=1B bits2-3 = 2 -> 33-32 = 1 -> 5.5; e=228: g3 l4, ql[100]
    // high 0, qh[36] bits6-7 = 3 -> 16, s14 scale 15 -> 120; e=255: ql[127] high 2, qh[63] 3 -> 18, s15 scale
    // -16 -> -144.
    QTest::newRow("q6_K e5") << int(Type::Q6_K) << 5 << -16.0f;
    QTest::newRow("q6_K e69") << int(Type::Q6_K) << 69 << 37.5f;
    QTest::newRow("q6_K e164") << int(Type::Q6_K) << 164 << -11.0f;
    QTest::newRow("q6_K e168") << int(Type::Q6_K) << 168 << 5.5f;
    QTest::newRow("q6_K e228") << int(Type::Q6_K) << 228 << 120.0f;
    QTest::newRow("q6_K e255") << int(Type::Q6_K) << 255 << -144.0f;
}

void TestGgmlTypes::handValues() {
    QFETCH(int, type);
    QFETCH(int, element);
    QFETCH(float, value);
    const Case c = caseFor(Type(type));
    QCOMPARE(c.expected[element], value); // the pattern formula agrees with the hand computation
    QCOMPARE(decode(Type(type), c.bytes, c.expected.size())[size_t(element)], value);
}

void TestGgmlTypes::packedScaleHelpers() {
    const uint8_t packed[12] = {0x41, 0x82, 0xC3, 0xC4, 0x80, 0x45, 0x0A, 0xCF, 0x41, 0x41, 0xF2, 0xFF};
    for (int j = 0; j < 8; ++j) {
        uint8_t sc = 0, m = 0;
        unpackScaleMinK4(j, packed, sc, m);
        QCOMPARE(int(sc), kKScale[j]);
        QCOMPARE(int(m), kKMin[j]);
    }
    uint8_t sc8[8], m8[8], repacked[12];
    for (int j = 0; j < 8; ++j) {
        sc8[j] = uint8_t(kKScale[j]);
        m8[j] = uint8_t(kKMin[j]);
    }
    packScaleMinK4(sc8, m8, repacked);
    QCOMPARE(QByteArray(reinterpret_cast<const char*>(repacked), 12), QByteArray(reinterpret_cast<const char*>(packed), 12));

    const uint8_t q3[12] = {0xF3, 0xB7, 0x7B, 0x3F, 0xF3, 0xB7, 0x7B, 0x3F, 0xB4, 0xE4, 0xB4, 0xE4};
    int8_t scales[16];
    for (int j = 0; j < 16; ++j) {
        QCOMPARE(unpackScaleQ3K(j, q3), kQ3Scale[j]);
        scales[j] = int8_t(kQ3Scale[j]);
    }
    uint8_t q3re[12];
    packScalesQ3K(scales, q3re);
    QCOMPARE(QByteArray(reinterpret_cast<const char*>(q3re), 12), QByteArray(reinterpret_cast<const char*>(q3), 12));
}

void TestGgmlTypes::fp16Conversion_data() {
    // Exactly representable pairs: both directions must agree.
    QTest::addColumn<float>("value");
    QTest::addColumn<int>("bits");
    QTest::newRow("1.0") << 1.0f << 0x3C00;
    QTest::newRow("-2.0") << -2.0f << 0xC000;
    QTest::newRow("65504 (max)") << 65504.0f << 0x7BFF;
    QTest::newRow("0.5") << 0.5f << 0x3800;
    QTest::newRow("1/3 nearest") << 0.333251953125f << 0x3555;
    QTest::newRow("+0") << 0.0f << 0x0000;
    QTest::newRow("-0") << -0.0f << 0x8000;
    QTest::newRow("min normal 2^-14") << 6.103515625e-05f << 0x0400;
    QTest::newRow("min subnormal 2^-24") << 5.9604644775390625e-08f << 0x0001;
    QTest::newRow("max subnormal 1023*2^-24") << 6.097555160522461e-05f << 0x03FF;
    QTest::newRow("-subnormal 3*2^-24") << -1.7881393432617188e-07f << 0x8003;
    QTest::newRow("+inf") << std::numeric_limits<float>::infinity() << 0x7C00;
    QTest::newRow("-inf") << -std::numeric_limits<float>::infinity() << 0xFC00;
}

void TestGgmlTypes::fp16Conversion() {
    QFETCH(float, value);
    QFETCH(int, bits);
    QCOMPARE(int(floatToFp16(value)), bits);
    QCOMPARE(bitsOf(fp16ToFloat(uint16_t(bits))), bitsOf(value)); // bit-exact, so -0 is told from +0
}

void TestGgmlTypes::fp16Rounding_data() {
    QTest::addColumn<float>("value");
    QTest::addColumn<int>("bits");
    const float u = std::ldexp(1.0f, -11); // half an ulp of 1.0 in fp16
    QTest::newRow("1 + half ulp: tie to even 1.0") << 1.0f + u << 0x3C00;
    QTest::newRow("1 + 3 half ulps: tie to even 0x3C02") << 1.0f + 3 * u << 0x3C02;
    QTest::newRow("just above a tie rounds up") << 1.0f + u + std::ldexp(1.0f, -20) << 0x3C01;
    QTest::newRow("just below a tie rounds down") << 1.0f + u - std::ldexp(1.0f, -20) << 0x3C00;
    QTest::newRow("65519 rounds to max") << 65519.0f << 0x7BFF;
    QTest::newRow("65520 (tie) overflows to inf") << 65520.0f << 0x7C00;
    QTest::newRow("1e6 overflows to inf") << 1e6f << 0x7C00;
    QTest::newRow("-1e6 overflows to -inf") << -1e6f << 0xFC00;
    QTest::newRow("2^-25 (tie) rounds to 0") << std::ldexp(1.0f, -25) << 0x0000;
    QTest::newRow("just above 2^-25 rounds to min subnormal") << std::ldexp(1.0f, -25) + std::ldexp(1.0f, -35) << 0x0001;
    QTest::newRow("3*2^-25 (tie) to even subnormal 2") << 3 * std::ldexp(1.0f, -25) << 0x0002;
    QTest::newRow("1023.5*2^-24 (tie) carries into min normal") << 1023.5f * std::ldexp(1.0f, -24) << 0x0400;
    QTest::newRow("1e-10 flushes to 0") << 1e-10f << 0x0000;
    QTest::newRow("-1e-10 flushes to -0") << -1e-10f << 0x8000;
    QTest::newRow("0.1") << 0.1f << 0x2E66;
}

void TestGgmlTypes::fp16Rounding() {
    QFETCH(float, value);
    QFETCH(int, bits);
    QCOMPARE(int(floatToFp16(value)), bits);
}

void TestGgmlTypes::fp16SpecialsAndExhaustiveRoundTrip() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const uint16_t h = floatToFp16(nan);
    QVERIFY((h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0);
    QVERIFY((floatToFp16(-nan) & 0x8000) != 0);
    // A signalling nan whose payload sits only in the low bits must not turn into inf.
    const uint16_t hs = floatToFp16(floatOf(0x7F800001u));
    QVERIFY((hs & 0x7C00) == 0x7C00 && (hs & 0x03FF) != 0);
    QVERIFY(std::isnan(fp16ToFloat(0x7E00)));
    QVERIFY(std::isnan(fp16ToFloat(0xFC01)));

    // Every non-nan half survives half -> float -> half unchanged, and the float is the exact value.
    for (uint32_t b = 0; b < 0x10000; ++b) {
        const uint16_t bits = uint16_t(b);
        if ((bits & 0x7C00) == 0x7C00 && (bits & 0x03FF)) continue;
        const float f = fp16ToFloat(bits);
        QVERIFY2(floatToFp16(f) == bits, qPrintable(QString::number(b, 16)));
        const int exp = (bits >> 10) & 0x1F, mant = bits & 0x3FF;
        if (exp != 0x1F) {
            const double v = exp == 0 ? std::ldexp(double(mant), -24) : std::ldexp(1024.0 + mant, exp - 25);
            QVERIFY2(double(f) == ((bits & 0x8000) ? -v : v), qPrintable(QString::number(b, 16)));
        }
    }
}

void TestGgmlTypes::bf16Conversion_data() {
    QTest::addColumn<float>("value");
    QTest::addColumn<int>("bits");
    QTest::addColumn<bool>("exact"); // also check bf16 -> float
    const float u = std::ldexp(1.0f, -8); // half an ulp of 1.0 in bf16
    QTest::newRow("1.0") << 1.0f << 0x3F80 << true;
    QTest::newRow("-2.0") << -2.0f << 0xC000 << true;
    QTest::newRow("3.140625") << 3.140625f << 0x4049 << true;
    QTest::newRow("-0") << -0.0f << 0x8000 << true;
    QTest::newRow("inf") << std::numeric_limits<float>::infinity() << 0x7F80 << true;
    QTest::newRow("subnormal kept") << floatOf(0x00010000u) << 0x0001 << true;
    QTest::newRow("1 + half ulp: tie to even") << 1.0f + u << 0x3F80 << false;
    QTest::newRow("1 + 3 half ulps: tie to even") << 1.0f + 3 * u << 0x3F82 << false;
    QTest::newRow("above a tie rounds up") << 1.0f + u + std::ldexp(1.0f, -20) << 0x3F81 << false;
    QTest::newRow("pi") << 3.14159265f << 0x4049 << false;
    QTest::newRow("float max rounds to inf") << std::numeric_limits<float>::max() << 0x7F80 << false;
}

void TestGgmlTypes::bf16Conversion() {
    QFETCH(float, value);
    QFETCH(int, bits);
    QFETCH(bool, exact);
    QCOMPARE(int(floatToBf16(value)), bits);
    if (exact) QCOMPARE(bitsOf(bf16ToFloat(uint16_t(bits))), bitsOf(value));
}

void TestGgmlTypes::bf16Nan() {
    for (uint32_t bits : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
        const uint16_t h = floatToBf16(floatOf(bits));
        QVERIFY2(std::isnan(bf16ToFloat(h)), qPrintable(QString::number(bits, 16)));
        QCOMPARE(h & 0x8000, int((bits >> 16) & 0x8000));
    }
}

void TestGgmlTypes::traitsTable() {
    struct Row {
        uint32_t id;
        const char* name;
        int64_t block;
        size_t size;
        bool supported;
    };
    const Row rows[] = {
        {0, "f32", 1, 4, true},          {1, "f16", 1, 2, true},         {2, "q4_0", 32, 18, true},
        {3, "q4_1", 32, 20, true},       {6, "q5_0", 32, 22, true},      {7, "q5_1", 32, 24, true},
        {8, "q8_0", 32, 34, true},       {9, "q8_1", 32, 36, true},      {10, "q2_K", 256, 84, true},
        {11, "q3_K", 256, 110, true},    {12, "q4_K", 256, 144, true},   {13, "q5_K", 256, 176, true},
        {14, "q6_K", 256, 210, true},    {15, "q8_K", 256, 292, true},   {16, "iq2_xxs", 256, 66, false},
        {20, "iq4_nl", 32, 18, false},   {23, "iq4_xs", 256, 136, false}, {24, "i8", 1, 1, false},
        {27, "i64", 1, 8, false},        {28, "f64", 1, 8, false},       {30, "bf16", 1, 2, true},
        {35, "tq2_0", 256, 66, false},   {39, "mxfp4", 32, 17, false},
    };
    for (const Row& r : rows) {
        const TypeTraits* t = traits(r.id);
        QVERIFY2(t, qPrintable(QString::number(r.id)));
        QCOMPARE(QString(t->name), QString(r.name));
        QCOMPARE(t->blockSize, r.block);
        QCOMPARE(t->typeSize, r.size);
        QCOMPARE(t->supported, r.supported);
    }
    for (uint32_t unknown : {4u, 5u, 31u, 32u, 33u, 36u, 38u, 40u, 1000u, 0xFFFFFFFFu}) QVERIFY(traits(unknown) == nullptr);
}

void TestGgmlTypes::rowBytes_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<qint64>("n");
    QTest::addColumn<qint64>("bytes");
    QTest::newRow("f32 x10") << int(Type::F32) << qint64(10) << qint64(40);
    QTest::newRow("f16 x10") << int(Type::F16) << qint64(10) << qint64(20);
    QTest::newRow("bf16 x3") << int(Type::BF16) << qint64(3) << qint64(6);
    QTest::newRow("q4_0 x64") << int(Type::Q4_0) << qint64(64) << qint64(36);
    QTest::newRow("q4_1 x32") << int(Type::Q4_1) << qint64(32) << qint64(20);
    QTest::newRow("q5_0 x96") << int(Type::Q5_0) << qint64(96) << qint64(66);
    QTest::newRow("q5_1 x32") << int(Type::Q5_1) << qint64(32) << qint64(24);
    QTest::newRow("q8_0 x4096") << int(Type::Q8_0) << qint64(4096) << qint64(4352);
    QTest::newRow("q8_1 x32") << int(Type::Q8_1) << qint64(32) << qint64(36);
    QTest::newRow("q2_K x512") << int(Type::Q2_K) << qint64(512) << qint64(168);
    QTest::newRow("q3_K x256") << int(Type::Q3_K) << qint64(256) << qint64(110);
    QTest::newRow("q4_K x4096") << int(Type::Q4_K) << qint64(4096) << qint64(2304);
    QTest::newRow("q5_K x256") << int(Type::Q5_K) << qint64(256) << qint64(176);
    QTest::newRow("q6_K x768") << int(Type::Q6_K) << qint64(768) << qint64(630);
    QTest::newRow("q8_K x256") << int(Type::Q8_K) << qint64(256) << qint64(292);
    QTest::newRow("iq4_nl x64 (sized though not decoded)") << int(Type::IQ4_NL) << qint64(64) << qint64(36);
    QTest::newRow("i32 x5") << int(Type::I32) << qint64(5) << qint64(20);
    QTest::newRow("q4_K x0") << int(Type::Q4_K) << qint64(0) << qint64(0);
}

void TestGgmlTypes::rowBytes() {
    QFETCH(int, type);
    QFETCH(qint64, n);
    QFETCH(qint64, bytes);
    QCOMPARE(qint64(::cwb::ggml::rowBytes(Type(type), n)), bytes);
}

void TestGgmlTypes::rowBytesRejectsPartialBlocks() {
    QVERIFY_THROWS_EXCEPTION(cwb::Error, ::cwb::ggml::rowBytes(Type::Q4_0, 33));
    QVERIFY_THROWS_EXCEPTION(cwb::Error, ::cwb::ggml::rowBytes(Type::Q4_K, 128));
    QVERIFY_THROWS_EXCEPTION(cwb::Error, ::cwb::ggml::rowBytes(Type::Q8_0, -32));
    QVERIFY_THROWS_EXCEPTION(cwb::Error, ::cwb::ggml::rowBytes(Type(4), 32));
    try {
        ::cwb::ggml::rowBytes(Type::Q6_K, 100);
        QFAIL("no exception");
    } catch (const cwb::Error& e) {
        const QString message = e.what();
        QVERIFY2(message.contains("q6_K") && message.contains("256") && message.contains("100"), e.what());
    }
    // dequantize and quantize check n the same way.
    std::vector<float> out(64);
    const QByteArray block(18 * 2, 0);
    QVERIFY_THROWS_EXCEPTION(cwb::Error, dequantize(Type::Q4_0, block.constData(), out.data(), 48));
    QByteArray dst(64, 0);
    QVERIFY_THROWS_EXCEPTION(cwb::Error, quantize(Type::Q8_0, out.data(), dst.data(), 31));
}

void TestGgmlTypes::unsupportedTypesRefused_data() {
    QTest::addColumn<uint>("id");
    QTest::addColumn<bool>("known");
    QTest::newRow("iq2_xxs") << 16u << true;
    QTest::newRow("iq4_nl") << 20u << true;
    QTest::newRow("iq4_xs") << 23u << true;
    QTest::newRow("i8") << 24u << true;
    QTest::newRow("i32") << 26u << true;
    QTest::newRow("f64") << 28u << true;
    QTest::newRow("iq1_m") << 29u << true;
    QTest::newRow("tq1_0") << 34u << true;
    QTest::newRow("mxfp4") << 39u << true;
    QTest::newRow("removed q4_2 (4)") << 4u << false;
    QTest::newRow("removed q4_0_4_4 (31)") << 31u << false;
    QTest::newRow("future (77)") << 77u << false;
}

void TestGgmlTypes::unsupportedTypesRefused() {
    QFETCH(uint, id);
    QFETCH(bool, known);
    QCOMPARE(traits(id) != nullptr, known);
    const Type t = Type(id);
    const int64_t n = known ? traits(id)->blockSize : 32;
    QByteArray src(4096, 0);
    std::vector<float> dst(static_cast<size_t>(n));
    try {
        dequantize(t, src.constData(), dst.data(), n);
        QFAIL("dequantize accepted the type");
    } catch (const cwb::Error& e) {
        const QString message = e.what();
        if (known) QVERIFY2(message.contains(traits(id)->name), e.what());
        else QVERIFY2(message.contains(QString("unknown tensor type %1").arg(id)), e.what());
    }
    QVERIFY(!canQuantize(t));
    QVERIFY_THROWS_EXCEPTION(cwb::Error, quantize(t, dst.data(), src.data(), n));
}

void TestGgmlTypes::exactValuesSurviveQuantization() {
    // Q8_0: values k * 0.25 with |k| <= 127 and 127*0.25 present: d = 31.75 / 127 = 0.25 exactly.
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[size_t(j)] = 0.25f * float(j % 2 ? 127 - 4 * j : -3 * j);
    x[3] = 31.75f;
    QByteArray q(34, 0);
    quantize(Type::Q8_0, x.data(), q.data(), 32);
    QCOMPARE(uint8_t(q[0]) | (uint8_t(q[1]) << 8), int(H_QUARTER));
    QCOMPARE(decode(Type::Q8_0, q, 32), x);

    // Q4_0: values (q - 8) * 0.5, the extreme -4 at element 9: d = -4 / -8 = 0.5; all levels round-trip.
    // Element 0 has level 0 (-4.0), the first value of largest magnitude.
    std::vector<float> y(32);
    for (int j = 0; j < 32; ++j) y[size_t(j)] = 0.5f * float((j * 5) % 16 - 8);
    QByteArray q4(18, 0);
    quantize(Type::Q4_0, y.data(), q4.data(), 32);
    QCOMPARE(uint8_t(q4[0]) | (uint8_t(q4[1]) << 8), int(H_HALF));
    QCOMPARE(int(uint8_t(q4[2 + 1])), 5 | (((16 + 1) * 5 % 16) << 4)); // element 1 -> level 5, element 17 -> level 5
    QCOMPARE(decode(Type::Q4_0, q4, 32), y);

    // Q4_1: -1 + 0.25 * L with L 0..15 both ends present: d = 3.75 / 15 = 0.25, m = -1, exact.
    std::vector<float> z(32);
    for (int j = 0; j < 32; ++j) z[size_t(j)] = -1.0f + 0.25f * float((j * 7) % 16);
    QByteArray q41(20, 0);
    quantize(Type::Q4_1, z.data(), q41.data(), 32);
    QCOMPARE(decode(Type::Q4_1, q41, 32), z);
}

void TestGgmlTypes::simpleQuantizerBounds_data() {
    QTest::addColumn<int>("type");
    QTest::newRow("q4_0") << int(Type::Q4_0);
    QTest::newRow("q4_1") << int(Type::Q4_1);
    QTest::newRow("q5_0") << int(Type::Q5_0);
    QTest::newRow("q5_1") << int(Type::Q5_1);
    QTest::newRow("q8_0") << int(Type::Q8_0);
    QTest::newRow("q8_1") << int(Type::Q8_1);
    QTest::newRow("f16") << int(Type::F16);
    QTest::newRow("bf16") << int(Type::BF16);
    QTest::newRow("f32") << int(Type::F32);
}

void TestGgmlTypes::simpleQuantizerBounds() {
    QFETCH(int, type);
    const Type t = Type(type);
    const int64_t n = 256 * 6;
    const std::vector<float> x = testSignal(n);
    QByteArray q(int(::cwb::ggml::rowBytes(t, n)), 0);
    quantize(t, x.data(), q.data(), n);
    const std::vector<float> y = decode(t, q, n);

    const TypeTraits* tr = traits(t);
    const auto* bytes = reinterpret_cast<const uint8_t*>(q.constData());
    const float eps = std::ldexp(1.0f, -11); // fp16 relative rounding of the stored d and m
    const float tiny = std::ldexp(1.0f, -25); // fp16 absolute rounding below the normal range
    for (int64_t i = 0; i < n; ++i) {
        const int64_t block = i / tr->blockSize;
        const uint8_t* b = bytes + block * int64_t(tr->typeSize);
        const float d = std::fabs(fp16ToFloat(uint16_t(b[0] | (b[1] << 8))));
        const float m = std::fabs(fp16ToFloat(uint16_t(b[2] | (b[3] << 8))));
        // The quantizer divides by the exact d but the block keeps d rounded to fp16 (off by dd at most),
        // which moves level q by up to |q| * dd; hence the second term. Symmetric 4/5-bit types map the
        // signed extreme to -8 / -16, so its mirror image clamps to +7 / +15: up to one full step there.
        const float dd = d * eps + tiny, dm = m * eps + tiny;
        float bound = 0.0f;
        switch (t) {
        case Type::Q8_0: case Type::Q8_1: bound = 0.5f * (d + dd) + 127 * dd; break;
        case Type::Q4_0: bound = d + dd + 8 * dd; break;
        case Type::Q5_0: bound = d + dd + 16 * dd; break;
        case Type::Q4_1: bound = 0.5f * (d + dd) + 15 * dd + dm; break;
        case Type::Q5_1: bound = 0.5f * (d + dd) + 31 * dd + dm; break;
        case Type::F16: bound = std::fabs(x[size_t(i)]) * eps + 3e-8f; break; // + half the smallest subnormal
        case Type::BF16: bound = std::fabs(x[size_t(i)]) * std::ldexp(1.0f, -8); break;
        default: bound = 0.0f; break;
        }
        const float err = std::fabs(y[size_t(i)] - x[size_t(i)]);
        QVERIFY2(err <= bound * 1.0001f + 1e-12f,
                 qPrintable(QStringLiteral("element %1: x %2 y %3 err %4 > bound %5").arg(i).arg(x[size_t(i)]).arg(y[size_t(i)]).arg(err).arg(bound)));
    }
}

void TestGgmlTypes::kQuantRoundTrip_data() {
    // maxRel: largest |error| over a super-block divided by that block's largest |x|;
    // rmsRel: overall RMS error divided by RMS of the signal (mostly uniform data, see testSignal).
    QTest::addColumn<int>("type");
    QTest::addColumn<double>("maxRel");
    QTest::addColumn<double>("rmsRel");
    QTest::newRow("q2_K") << int(Type::Q2_K) << 0.45 << 0.13;
    QTest::newRow("q3_K") << int(Type::Q3_K) << 0.33 << 0.13;
    QTest::newRow("q4_K") << int(Type::Q4_K) << 0.12 << 0.04;
    QTest::newRow("q5_K") << int(Type::Q5_K) << 0.05 << 0.02;
    QTest::newRow("q6_K") << int(Type::Q6_K) << 0.025 << 0.015;
    QTest::newRow("q8_K") << int(Type::Q8_K) << 1.0 / 254 + 1e-6 << 0.008;
}

void TestGgmlTypes::kQuantRoundTrip() {
    QFETCH(int, type);
    QFETCH(double, maxRel);
    QFETCH(double, rmsRel);
    const Type t = Type(type);
    const int64_t n = 256 * 12;
    const std::vector<float> x = testSignal(n);
    QByteArray q(int(::cwb::ggml::rowBytes(t, n)), 0);
    quantize(t, x.data(), q.data(), n);
    const std::vector<float> y = decode(t, q, n);

    double sumErr2 = 0, sumX2 = 0, worst = 0;
    for (int64_t b = 0; b < n / 256; ++b) {
        double amax = 0, maxErr = 0;
        for (int64_t i = 256 * b; i < 256 * (b + 1); ++i) {
            const double err = double(y[size_t(i)]) - x[size_t(i)];
            QVERIFY(std::isfinite(y[size_t(i)]));
            amax = std::max(amax, std::fabs(double(x[size_t(i)])));
            maxErr = std::max(maxErr, std::fabs(err));
            sumErr2 += err * err;
            sumX2 += double(x[size_t(i)]) * x[size_t(i)];
        }
        worst = std::max(worst, amax > 0 ? maxErr / amax : maxErr);
        QVERIFY2(maxErr <= maxRel * amax + 1e-12,
                 qPrintable(QStringLiteral("super-block %1: max error %2, largest |x| %3").arg(b).arg(maxErr).arg(amax)));
    }
    const double rms = std::sqrt(sumErr2 / sumX2);
    qDebug("%s: worst max-error/amax %.4f, relative RMS error %.4f", traits(t)->name, worst, rms);
    QVERIFY2(rms <= rmsRel, qPrintable(QStringLiteral("relative RMS error %1").arg(rms)));

    // Quantizing the decoded values again changes nothing much: the decoded grid is (nearly) representable.
    QByteArray q2(q.size(), 0);
    quantize(t, y.data(), q2.data(), n);
    const std::vector<float> y2 = decode(t, q2, n);
    double sumErr2b = 0;
    for (int64_t i = 0; i < n; ++i) sumErr2b += double(y2[size_t(i)] - y[size_t(i)]) * (y2[size_t(i)] - y[size_t(i)]);
    QVERIFY2(std::sqrt(sumErr2b / sumX2) <= rmsRel, "re-quantizing decoded values drifted");
}

void TestGgmlTypes::zeroInputQuantizesToZero() {
    const Type types[] = {Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1, Type::Q8_0, Type::Q8_1, Type::Q2_K,
                          Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K, Type::Q8_K, Type::F16, Type::BF16};
    const std::vector<float> zeros(512, 0.0f);
    for (Type t : types) {
        QByteArray q(int(::cwb::ggml::rowBytes(t, 512)), char(0x5A));
        quantize(t, zeros.data(), q.data(), 512);
        const std::vector<float> y = decode(t, q, 512);
        for (float v : y) QVERIFY2(v == 0.0f, traits(t)->name);
    }
}

QTEST_APPLESS_MAIN(TestGgmlTypes)
#include "test_ggml_types.moc"
