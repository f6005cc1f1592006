// CPU-only test of the kernel layout (no GPU needed): core format -> tiled16x64 -> back gives the same levels,
// zeros and group index, scales rounded to the activation type; the tiled dequantization equals the core rule
// (level - zero) · scale; padding (rows not a multiple of 16, groups not a multiple of 64, act-order) is handled.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "cwb/kernels/packed_weight.h"
#include "cwb/kernels/rtn_quant.h"
#include "cwb/kernels/wxa16_gemm.h"
#include "kernel_check.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

struct Case {
    const char* name;
    int bits;
    bool symmetric;
    int64_t rows, cols, groupSize;
    bool actOrder;
    ActType act;
};

void runCase(const Case& c) {
    const std::string tag = std::string(c.name) + ": ";
    RtnSpec spec{c.bits, c.symmetric, c.groupSize};
    const int64_t groups = rtnGroupCount(c.cols, spec);
    std::vector<float> w = gaussian(size_t(c.rows * c.cols), 7u + uint32_t(c.rows));
    // Act-order: column perm[j] takes the j-th place in group order (as GPTQ's g_idx after its permutation), so
    // the groups are quantized over the permuted columns.
    std::vector<int64_t> perm(size_t(c.cols));
    std::iota(perm.begin(), perm.end(), int64_t(0));
    if (c.actOrder) {
        std::mt19937 rng(11);
        std::shuffle(perm.begin(), perm.end(), rng);
    }
    std::vector<float> wp(w.size());
    for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t j = 0; j < c.cols; ++j) wp[size_t(r * c.cols + j)] = w[size_t(r * c.cols + perm[size_t(j)])];
    std::vector<uint8_t> levelsPermuted(w.size()), levels(w.size());
    std::vector<float> scales(size_t(c.rows * groups));
    std::vector<int32_t> zeros(scales.size());
    rtnQuantizeRef(wp.data(), c.rows, c.cols, spec, levelsPermuted.data(), scales.data(), zeros.data());
    std::vector<int32_t> groupIndex(size_t(c.cols));
    const int64_t width = c.groupSize > 0 ? c.groupSize : c.cols;
    for (int64_t j = 0; j < c.cols; ++j) {
        groupIndex[size_t(perm[size_t(j)])] = int32_t(j / width);
        for (int64_t r = 0; r < c.rows; ++r)
            levels[size_t(r * c.cols + perm[size_t(j)])] = levelsPermuted[size_t(r * c.cols + j)];
    }
    const std::vector<int32_t> words = packCoreWords(levels.data(), c.rows, c.cols, c.bits);
    CoreIntWeightView view{c.bits, c.rows, c.cols, groups, words.data(), scales.data(), zeros.data(), groupIndex.data()};
    const TiledIntWeight t = packTiled(view, c.act);
    // Row tiles pack on several threads: any count (more than the tiles, too) gives the same words.
    for (int threads : {1, 3, 64}) {
        const TiledIntWeight p = packTiled(view, c.act, threads);
        check(p.words == t.words && p.scaleZero == t.scaleZero && p.columnOf == t.columnOf,
              (tag + "packing on " + std::to_string(threads) + " threads gives the same words").c_str());
    }
    check(t.paddedRows % 16 == 0 && t.paddedCols % 64 == 0 && t.paddedCols >= c.cols,
          (tag + "padded sizes are multiples of the tile").c_str());
    check(t.columnOf.empty() == (!c.actOrder && c.cols % 64 == 0 && (c.groupSize < 0 || c.groupSize % 64 == 0)),
          (tag + "a column map exists exactly when columns move or are padded").c_str());

    const UnpackedIntWeight u = unpackTiled(t);
    check(u.levels == levels, (tag + "levels survive pack and unpack").c_str());
    check(u.zeros == zeros, (tag + "zero points survive").c_str());
    check(u.groupIndex == groupIndex, (tag + "group index survives").c_str());
    bool scalesOk = true;
    for (size_t i = 0; i < scales.size(); ++i)
        scalesOk &= u.scales[i] == actBitsToFloat(floatToActBits(scales[i], c.act), c.act);
    check(scalesOk, (tag + "scales are the activation-type rounding of the core's float scales").c_str());

    // The tiled dequantization is the core rule with the rounded scales (then rounded to the activation type).
    const std::vector<float> deq = dequantizeTiledRef(t);
    bool deqOk = true;
    for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t col = 0; col < c.cols; ++col) {
            const size_t g = size_t(r * groups + groupIndex[size_t(col)]);
            const float v = float(int(levels[size_t(r * c.cols + col)]) - zeros[g]) *
                            actBitsToFloat(floatToActBits(scales[g], c.act), c.act);
            deqOk &= deq[size_t(r * c.cols + col)] == actBitsToFloat(floatToActBits(v, c.act), c.act);
        }
    check(deqOk, (tag + "tiled dequantization equals (level - zero) * scale").c_str());
    // Quantization error stays at what the bit width allows (guards against a scrambled layout that round-trips).
    check(nmse(deq, w) < (c.bits == 4 ? kRtnNmseInt4 : kRtnNmseInt8), (tag + "dequantized weight is close to the original").c_str());
}

} // namespace

int main() {
    const Case cases[] = {
        {"int4 sym g128 fp16", 4, true, 48, 256, 128, false, ActType::Float16},
        {"int4 asym g64 bf16", 4, false, 40, 320, 64, false, ActType::BFloat16},
        {"int4 sym per-row fp16", 4, true, 16, 192, -1, false, ActType::Float16},
        {"int4 asym g128 act-order fp16", 4, false, 32, 384, 128, true, ActType::Float16},
        {"int4 sym g32 (padded groups) bf16", 4, true, 20, 96, 32, false, ActType::BFloat16},
        {"int8 sym g128 fp16", 8, true, 24, 256, 128, false, ActType::Float16},
        {"int8 asym g128 act-order bf16", 8, false, 32, 200, 128, true, ActType::BFloat16},
        {"int4 asym g128 act-order, 40 row tiles", 4, false, 640, 384, 128, true, ActType::Float16},
    };
    for (const Case& c : cases) runCase(c);

    // Half / bf16 conversions: round to nearest even at the tie, exact for representable values.
    check(halfBitsToFloat(floatToHalfBits(1.0f + 1.0f / 2048.0f)) == 1.0f, "fp16 tie rounds to even (down)");
    check(halfBitsToFloat(floatToHalfBits(1.0f + 3.0f / 2048.0f)) == 1.0f + 2.0f / 1024.0f, "fp16 tie rounds to even (up)");
    check(halfBitsToFloat(floatToHalfBits(6.0e-8f)) == std::ldexp(1.0f, -24), "fp16 denormal rounds to the nearest");
    check(bf16BitsToFloat(floatToBf16Bits(1.0f + 1.0f / 256.0f)) == 1.0f, "bf16 tie rounds to even");
    check(floatToHalfBits(70000.0f) == 0x7c00u, "fp16 overflow gives inf");

    bool threw = false;
    try {
        CoreIntWeightView bad{3, 4, 4, 1, nullptr, nullptr, nullptr, nullptr};
        packTiled(bad, ActType::Float16);
    } catch (const KernelError&) {
        threw = true;
    }
    check(threw, "packTiled refuses 3-bit weights with a KernelError");
    return finish();
}
