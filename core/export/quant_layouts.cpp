#include "core/export/quant_layouts.h"

#include "core/util/error.h"

#include <numeric>

namespace cwb::layouts {

namespace {

constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// int64 words in [0, 2^32) to int32 with the same bits.
at::Tensor toInt32Bits(const at::Tensor& words) {
    return at::where(words >= (int64_t(1) << 31), words - (int64_t(1) << 32), words).to(at::kInt);
}
at::Tensor fromInt32Bits(const at::Tensor& words) {
    const at::Tensor w = words.to(at::kLong);
    return at::where(w < 0, w + (int64_t(1) << 32), w);
}

// A run of values that fills whole int32 words: 32/bits values in one word for 2, 4 and 8 bits; 32 values in
// three words for 3 bits (GPTQ lets a value straddle two words).
int runValues(int bits) { return 32 / std::gcd(32, bits); }
int runWords(int bits) { return bits / std::gcd(32, bits); }

// Packs the last dim of `values` (int, [..., n]) as a little-endian bit stream, `bits` per value: value j of a
// run starts at bit bits·j of the run's words. `order` (one word per run only) puts value order[j] of each run in
// slot j instead. With one word per run (2, 4, 8 bits) a last, partial word is zero-filled, as GPTQModel packs
// features that are not a multiple of 32 / bits; with 3 bits n must fill whole runs.
at::Tensor packLast(const at::Tensor& values, int bits, const int* order) {
    const int perRun = runValues(bits), wordsPerRun = runWords(bits);
    std::vector<int64_t> shape = values.sizes().vec();
    const int64_t pad = (perRun - shape.back() % perRun) % perRun;
    if (pad && wordsPerRun != 1) throw Error("GPTQ layout: " + std::to_string(shape.back()) + " values do not fill whole " + std::to_string(bits) + "-bit runs");
    const int64_t runs = (shape.back() + pad) / perRun;
    shape.back() = runs;
    shape.push_back(perRun);
    const at::Tensor v = at::constant_pad_nd(values.to(at::kLong), {0, pad}).reshape(shape);
    shape.back() = wordsPerRun;
    at::Tensor words = at::zeros(shape, at::kLong);
    for (int j = 0; j < perRun; ++j) {
        const at::Tensor value = v.select(-1, order ? order[j] : j);
        const int word = bits * j / 32, offset = bits * j % 32;
        words.select(-1, word).bitwise_or_(value.bitwise_left_shift(offset).bitwise_and(int64_t(0xFFFFFFFF)));
        if (offset + bits > 32) words.select(-1, word + 1).bitwise_or_(value.bitwise_right_shift(32 - offset));
    }
    shape.pop_back();
    shape.back() = runs * wordsPerRun;
    return toInt32Bits(words.reshape(shape));
}

// The inverse of packLast: `count` values from the last dim's words (the rest of a last partial word is dropped).
at::Tensor unpackLast(const at::Tensor& packed, int bits, const int* order, int64_t count) {
    const int perRun = runValues(bits), wordsPerRun = runWords(bits);
    std::vector<int64_t> shape = packed.sizes().vec();
    const int64_t runs = shape.back() / wordsPerRun;
    shape.back() = runs;
    shape.push_back(wordsPerRun);
    const at::Tensor words = fromInt32Bits(packed).reshape(shape);
    std::vector<at::Tensor> parts(static_cast<size_t>(perRun));
    for (int j = 0; j < perRun; ++j) {
        const int word = bits * j / 32, offset = bits * j % 32;
        at::Tensor value = words.select(-1, word).bitwise_right_shift(offset);
        if (offset + bits > 32) value = value.bitwise_or(words.select(-1, word + 1).bitwise_left_shift(32 - offset));
        parts[size_t(order ? order[j] : j)] = value.bitwise_and((int64_t(1) << bits) - 1);
    }
    shape.pop_back();
    shape.back() = runs * perRun;
    return at::stack(parts, -1).reshape(shape).narrow(-1, 0, count).to(at::kInt);
}

bool defaultGroups(const quant::QuantizedWeight& w) {
    return at::equal(w.groupIndex.to(at::kInt), quant::defaultGroupIndex(w.cols, w.spec.groupSize));
}

std::string shapeText(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

void expectShape(const at::Tensor& t, std::vector<int64_t> shape, const char* what, const std::string& file) {
    if (!t.defined() || t.sizes().vec() != shape)
        throw Error(file, std::string(what) + " has shape " + (t.defined() ? shapeText(t.sizes().vec()) : "none") +
                              ", expected " + shapeText(shape));
}

} // namespace

std::string gptqSpecRefusal(int bits, int64_t rows, int64_t cols) {
    const int b = bits;
    if (b != 2 && b != 3 && b != 4 && b != 8)
        return std::to_string(b) + "-bit weights: the GPTQ layout holds 2, 3, 4 or 8 bits";
    // 2, 4 and 8 bits pad a last partial word (GPTQModel's convention); 3-bit runs of three words must be whole.
    if (runWords(b) > 1) {
        const int k = runValues(b);
        if (cols >= 0 && cols % k) return "in_features " + std::to_string(cols) + " is not a multiple of " + std::to_string(k) + " (3 bits)";
        if (rows >= 0 && rows % k) return "out_features " + std::to_string(rows) + " is not a multiple of " + std::to_string(k) + " (3 bits)";
    }
    return "";
}

std::string gptqRefusal(const quant::QuantizedWeight& w) {
    const std::string why = gptqSpecRefusal(w.spec.bits, w.rows, w.cols);
    if (!why.empty()) return why;
    if (w.zeros.min().item<int>() < 1)
        return "a zero point of 0 occurs, which GPTQ's checkpoint format (zero − 1 stored) cannot hold; quantize "
               "symmetrically or export the AWQ layout";
    return "";
}

std::string awqSpecRefusal(int bits, int64_t groupSize, int64_t rows, int64_t cols, bool permutedGroups) {
    if (bits != 4) return std::to_string(bits) + "-bit weights: the AWQ layout holds 4 bits";
    if (groupSize <= 0) return "AWQ checkpoints need a positive group size";
    if (cols >= 0 && cols % groupSize)
        return "in_features " + std::to_string(cols) + " is not a multiple of the group size " + std::to_string(groupSize);
    if (rows >= 0 && rows % 8) return "out_features " + std::to_string(rows) + " is not a multiple of 8";
    if (permutedGroups) return "act-order group indices cannot be stored in the AWQ layout";
    return "";
}

std::string awqRefusal(const quant::QuantizedWeight& w) {
    return awqSpecRefusal(w.spec.bits, w.spec.groupSize, w.rows, w.cols, w.spec.groupSize > 0 && !defaultGroups(w));
}

int64_t gptqWords(int64_t n, int bits) { return (n * bits + 31) / 32; }

namespace {

void checkGptq(const quant::QuantizedWeight& w) {
    const std::string why = gptqRefusal(w);
    if (!why.empty()) throw Error("GPTQ layout: " + why);
}

void checkAwq(const quant::QuantizedWeight& w) {
    const std::string why = awqRefusal(w);
    if (!why.empty()) throw Error("AWQ layout: " + why);
}

} // namespace

at::Tensor packGptqWeight(const quant::QuantizedWeight& w) {
    checkGptq(w);
    // [in, out] levels, packed along the input dim: move that dim last, pack, move it back.
    return packLast(w.levels(), w.spec.bits, nullptr).t().contiguous();
}

at::Tensor packGptqZeros(const quant::QuantizedWeight& w) {
    checkGptq(w);
    const int b = w.spec.bits;
    return packLast(w.zeros.t().contiguous().sub(1).bitwise_and((1 << b) - 1), b, nullptr);
}

at::Tensor packAwqWeight(const quant::QuantizedWeight& w) {
    checkAwq(w);
    return packLast(w.levels().t().contiguous(), 4, kAwqOrder);
}

at::Tensor packAwqZeros(const quant::QuantizedWeight& w) {
    checkAwq(w);
    return packLast(w.zeros.t().contiguous(), 4, kAwqOrder);
}

at::Tensor packedScales(const quant::QuantizedWeight& w) { return w.scales.t().contiguous().to(at::kHalf); }

PackedLayer packGptq(const quant::QuantizedWeight& w) {
    return {packGptqWeight(w), packGptqZeros(w), packedScales(w), w.groupIndex.to(at::kInt).contiguous()};
}

PackedLayer packAwq(const quant::QuantizedWeight& w) {
    return {packAwqWeight(w), packAwqZeros(w), packedScales(w), at::Tensor()};
}

quant::QuantizedWeight unpackGptq(const PackedLayer& p, int bits, int64_t groupSize, bool symmetric, int64_t rows,
                                  int64_t cols, const std::string& file) {
    if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
        throw Error(file, "GPTQ bits " + std::to_string(bits) + " are not supported (2, 3, 4, 8)");
    const int k = runValues(bits);
    if (runWords(bits) > 1 && (cols % k || rows % k))
        throw Error(file, "GPTQ layer of " + std::to_string(rows) + "×" + std::to_string(cols) + " cannot be packed by " + std::to_string(k) + " (3 bits)");
    const int64_t groups = groupSize > 0 ? (cols + groupSize - 1) / groupSize : 1;
    expectShape(p.qweight, {gptqWords(cols, bits), rows}, "qweight", file);
    expectShape(p.qzeros, {groups, gptqWords(rows, bits)}, "qzeros", file);
    expectShape(p.scales, {groups, rows}, "scales", file);
    quant::QuantizedWeight w;
    w.spec.bits = bits;
    w.spec.symmetric = symmetric;
    w.spec.groupSize = groupSize > 0 ? groupSize : -1;
    w.rows = rows;
    w.cols = cols;
    if (runWords(bits) == 1) {
        // 2, 4, 8 bits: a qweight column is a row of cwb's words (same order, low bits first), so no unpacking.
        w.packed = quant::adoptPackedWords(p.qweight.t(), bits, cols);
    } else {
        w.packed = quant::packLevels(unpackLast(p.qweight.t().contiguous(), bits, nullptr, cols), bits);   // 3 bits
    }
    // The reader adds 1 without masking, as transformers and vLLM do (a stored 2^bits − 1 becomes 2^bits).
    w.zeros = unpackLast(p.qzeros, bits, nullptr, rows).add(1).t().contiguous();
    w.scales = p.scales.to(at::kFloat).t().contiguous();
    if (p.gIdx.defined()) {
        expectShape(p.gIdx, {cols}, "g_idx", file);
        w.groupIndex = p.gIdx.to(at::kInt).contiguous();
        if (w.groupIndex.min().item<int>() < 0 || w.groupIndex.max().item<int64_t>() >= groups)
            throw Error(file, "g_idx names a group outside [0, " + std::to_string(groups) + ")");
    } else {
        w.groupIndex = quant::defaultGroupIndex(cols, w.spec.groupSize);
    }
    return w;
}

quant::QuantizedWeight unpackAwq(const PackedLayer& p, int64_t groupSize, int64_t rows, int64_t cols,
                                 const std::string& file) {
    if (groupSize <= 0 || cols % groupSize) throw Error(file, "AWQ group size " + std::to_string(groupSize) + " does not divide in_features " + std::to_string(cols));
    if (rows % 8) throw Error(file, "AWQ out_features " + std::to_string(rows) + " is not a multiple of 8");
    const int64_t groups = cols / groupSize;
    expectShape(p.qweight, {cols, rows / 8}, "qweight", file);
    expectShape(p.qzeros, {groups, rows / 8}, "qzeros", file);
    expectShape(p.scales, {groups, rows}, "scales", file);
    quant::QuantizedWeight w;
    w.spec.bits = 4;
    w.spec.symmetric = false;
    w.spec.groupSize = groupSize;
    w.rows = rows;
    w.cols = cols;
    // Nibble j of a qweight word is output 8c + kAwqOrder[j]: spread into bytes [in, out], turned to [out, in] and
    // packed along the inputs. Bytes keep the transposition cheap (a 70B checkpoint has 35 G of these levels).
    const at::Tensor words = p.qweight.contiguous();
    at::Tensor levels = at::empty({cols, rows / 8, 8}, words.options().dtype(at::kByte));
    for (int j = 0; j < 8; ++j)
        levels.select(2, kAwqOrder[j]).copy_(words.bitwise_right_shift(4 * j).bitwise_and(0xF));
    w.packed = quant::packLevels(levels.reshape({cols, rows}).t().contiguous(), 4);
    w.zeros = unpackLast(p.qzeros, 4, kAwqOrder, rows).t().contiguous();
    w.scales = p.scales.to(at::kFloat).t().contiguous();
    w.groupIndex = quant::defaultGroupIndex(cols, groupSize);
    return w;
}

} // namespace cwb::layouts
