#pragma once
// GGML tensor element types as stored in GGUF files: type ids, block layouts, dequantization to fp32
// and reference (round-to-nearest) quantization. Layouts follow ggml's ggml-common.h; ids follow the
// ggml_type enum that GGUF stores in each tensor-info record.
//
// All multi-byte fields are little-endian, as in GGUF; the block structs are read in place, so this
// module assumes a little-endian host (checked at compile time where the compiler says).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cwb::ggml {

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "ggml block structs are read in place: little-endian host needed");
#endif

enum class Type : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    // 4 and 5 were Q4_2 / Q4_3, removed from ggml.
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16, // IQ*, TQ* and MXFP4 are known (name and size) but not decoded here.
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    // 31..33 were the Q4_0_4_4 / Q4_0_4_8 / Q4_0_8_8 repacks, removed from GGUF.
    TQ1_0 = 34,
    TQ2_0 = 35,
    // 36..38 were the IQ4_NL_x_x repacks, removed from GGUF.
    MXFP4 = 39,
};

struct TypeTraits {
    const char* name;  // ggml's name: "f32", "q4_K", ...
    int64_t blockSize; // elements per block (1 for plain types)
    size_t typeSize;   // bytes per block
    bool supported;    // dequantize() decodes it
};

// nullptr for an id we do not know (caller reports "unknown tensor type N").
const TypeTraits* traits(uint32_t typeId);
inline const TypeTraits* traits(Type type) { return traits(static_cast<uint32_t>(type)); }

// Bytes a row of n elements takes; throws cwb::Error when n is not a multiple of the block size
// (or negative, or the type is unknown).
size_t rowBytes(Type type, int64_t n);

// Dequantize n elements (n a multiple of the block size) from src into dst (fp32).
// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
// Throws cwb::Error for any other type or a bad n.
void dequantize(Type type, const void* src, float* dst, int64_t n);

// Whether quantize() can write the type.
bool canQuantize(Type type);

// The types a GGUF export writes, in the order it prefers among types of equal width: the float types and the
// quantized types llama.cpp reads as weights (quantize() also writes Q8_1 and Q8_K, which are activation types there).
const std::vector<Type>& writableTypes();
bool isWritable(Type type);
// `wanted` where rows of rowLength fill its blocks; else the narrowest writable quantized type no narrower than it
// whose blocks fit (q4_K rows of 4032 → q4_0), else floatType.
Type fittingType(Type wanted, int64_t rowLength, Type floatType);

// Quantize n fp32 elements (n a multiple of the block size) into dst, which must hold rowBytes(type, n).
// F32/F16/BF16 convert; Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 follow ggml's *_ref quantizers (round to
// nearest, one scale per block); the K-quants (Q2_K..Q6_K, Q8_K) fit per-sub-block scales (and mins)
// by a small least-squares search of our own, then quantize those scales as the format requires.
// The K-quant bytes are valid ggml blocks but not byte-identical to llama-quantize's output.
// Throws cwb::Error for other types or a bad n.
void quantize(Type type, const float* src, void* dst, int64_t n);

// IEEE binary16: round-to-nearest-even, subnormals, inf and nan (quiet, sign kept) handled.
float fp16ToFloat(uint16_t h);
uint16_t floatToFp16(float f);
// The 32 levels (0..31) of a Q5_0 / Q5_1 block: low nibbles as in Q4 blocks, bit 4 of level j in bit j of qh.
void packQ5(const int q[32], uint8_t qs[16], uint8_t qh[4]);
// bfloat16: round-to-nearest-even; nan stays nan (made quiet).
float bf16ToFloat(uint16_t h);
uint16_t floatToBf16(float f);

// ---- Block layouts (ggml-common.h); fp16 fields are raw IEEE half bits ----

constexpr int QK_K = 256;       // K-quant super-block size
constexpr int K_SCALE_SIZE = 12; // packed 6-bit scales/mins of Q4_K / Q5_K

struct BlockQ4_0 { // x = d * (q - 8); element j < 16 in the low nibble of qs[j], j >= 16 in the high nibble of qs[j-16]
    uint16_t d;
    uint8_t qs[16];
};
struct BlockQ4_1 { // x = d * q + m
    uint16_t d;
    uint16_t m;
    uint8_t qs[16];
};
struct BlockQ5_0 { // x = d * (q - 16); bit j of the little-endian 32-bit qh is bit 4 of element j
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
};
struct BlockQ5_1 { // x = d * q + m
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[16];
};
struct BlockQ8_0 { // x = d * q
    uint16_t d;
    int8_t qs[32];
};
struct BlockQ8_1 { // x = d * q; s = d * sum(q)
    uint16_t d;
    uint16_t s;
    int8_t qs[32];
};
struct BlockQ2_K { // 16 sub-blocks of 16: x = d * (sc & 15) * q - dmin * (sc >> 4), q in 0..3
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d;
    uint16_t dmin;
};
struct BlockQ3_K { // 16 sub-blocks of 16: x = d * (sc - 32) * q, q in -4..3, sc 6-bit
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
};
struct BlockQ4_K { // 8 sub-blocks of 32: x = d * sc * q - dmin * m, q in 0..15, sc/m 6-bit
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
};
struct BlockQ5_K { // 8 sub-blocks of 32: x = d * sc * q - dmin * m, q in 0..31
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
struct BlockQ6_K { // 16 sub-blocks of 16: x = d * sc * q, q in -32..31, sc int8
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
};
struct BlockQ8_K { // x = d * q (d is fp32); bsums = sums of q over groups of 16
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18, "block_q4_0 is 18 bytes");
static_assert(sizeof(BlockQ4_1) == 20, "block_q4_1 is 20 bytes");
static_assert(sizeof(BlockQ5_0) == 22, "block_q5_0 is 22 bytes");
static_assert(sizeof(BlockQ5_1) == 24, "block_q5_1 is 24 bytes");
static_assert(sizeof(BlockQ8_0) == 34, "block_q8_0 is 34 bytes");
static_assert(sizeof(BlockQ8_1) == 36, "block_q8_1 is 36 bytes");
static_assert(sizeof(BlockQ2_K) == 84, "block_q2_K is 84 bytes");
static_assert(sizeof(BlockQ3_K) == 110, "block_q3_K is 110 bytes");
static_assert(sizeof(BlockQ4_K) == 144, "block_q4_K is 144 bytes");
static_assert(sizeof(BlockQ5_K) == 176, "block_q5_K is 176 bytes");
static_assert(sizeof(BlockQ6_K) == 210, "block_q6_K is 210 bytes");
static_assert(sizeof(BlockQ8_K) == 292, "block_q8_K is 292 bytes");

// Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes. Sub-blocks 0..3 keep
// their scale in the low 6 bits of bytes 0..3 and their min in bytes 4..7; sub-blocks 4..7 keep the low
// 4 bits of scale / min in the low / high nibble of bytes 8..11 and the top 2 bits in bits 6..7 of
// bytes 0..3 (scale) / 4..7 (min).
void unpackScaleMinK4(int j, const uint8_t* packed, uint8_t& scale, uint8_t& min);
void packScaleMinK4(const uint8_t scale[8], const uint8_t min[8], uint8_t packed[K_SCALE_SIZE]);
// Q3_K: signed scale (-32..31) of sub-block j (0..15) from the 12 packed bytes: low 4 bits in the low
// (j < 8) or high (j >= 8) nibble of byte j % 8, top 2 bits at bits 2*(j/4) of byte 8 + j % 4.
int unpackScaleQ3K(int j, const uint8_t* packed);
void packScalesQ3K(const int8_t scale[16], uint8_t packed[12]);

namespace detail {
// K-quant row kernels (ggml_quants_k.cpp); n is a multiple of QK_K, checked by the caller.
void dequantizeQ2K(const BlockQ2_K* x, float* y, int64_t n);
void dequantizeQ3K(const BlockQ3_K* x, float* y, int64_t n);
void dequantizeQ4K(const BlockQ4_K* x, float* y, int64_t n);
void dequantizeQ5K(const BlockQ5_K* x, float* y, int64_t n);
void dequantizeQ6K(const BlockQ6_K* x, float* y, int64_t n);
void dequantizeQ8K(const BlockQ8_K* x, float* y, int64_t n);
void quantizeQ2K(const float* x, BlockQ2_K* y, int64_t n);
void quantizeQ3K(const float* x, BlockQ3_K* y, int64_t n);
void quantizeQ4K(const float* x, BlockQ4_K* y, int64_t n);
void quantizeQ5K(const float* x, BlockQ5_K* y, int64_t n);
void quantizeQ6K(const float* x, BlockQ6_K* y, int64_t n);
void quantizeQ8K(const float* x, BlockQ8_K* y, int64_t n);
} // namespace detail

} // namespace cwb::ggml
