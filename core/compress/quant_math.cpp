#include "core/compress/quant_math.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "core/util/error.h"

namespace cwb::quant {

namespace {

int64_t maxLevel(int bits) { return (int64_t(1) << bits) - 1; }

void checkBits(int bits, const char* context) {
    if (bits < 2 || bits > 8)
        throw Error(std::string(context) + ": bits must be between 2 and 8, got " + std::to_string(bits));
}

std::string shapeText(const at::Tensor& t) {
    std::string s = "[";
    for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
    return s + "]";
}

} // namespace

void validateSpec(const QuantSpec& spec) {
    checkBits(spec.bits, "quantize");
    if (spec.groupSize < -1)
        throw Error("quantize: group size must be -1 (per output channel), 0 (per tensor) or positive, got " +
                    std::to_string(spec.groupSize));
}

void validateWeight(const at::Tensor& w, const char* context) {
    if (!w.defined()) throw Error(std::string(context) + ": no weight tensor");
    if (w.dim() != 2) throw Error(std::string(context) + ": a weight must be 2-D [out, in], got " + shapeText(w));
    if (w.numel() == 0) throw Error(std::string(context) + ": the weight " + shapeText(w) + " is empty");
    if (!at::isFloatingType(w.scalar_type()))
        throw Error(std::string(context) + ": the weight must be a floating-point tensor");
    // A slice of rows at a time: isfinite's temporaries of a whole 128K-row head would be several bytes per weight.
    const int64_t rows = w.size(0), sliceRows = std::max<int64_t>(1, (int64_t(1) << 22) / std::max<int64_t>(1, w.size(1)));
    for (int64_t first = 0; first < rows; first += sliceRows)
        if (!w.narrow(0, first, std::min(sliceRows, rows - first)).isfinite().all().item<bool>())
            throw Error(std::string(context) + ": the weight has non-finite values");
}

int levelsPerWord(int bits) {
    checkBits(bits, "pack");
    return 32 / bits;
}

int64_t groupWidth(int64_t cols, int64_t groupSize) { return groupSize > 0 ? groupSize : cols; }

int64_t groupCount(int64_t cols, int64_t groupSize) {
    const int64_t width = groupWidth(cols, groupSize);
    return width > 0 ? (cols + width - 1) / width : 0;
}

at::Tensor defaultGroupIndex(int64_t cols, int64_t groupSize) {
    const int64_t width = groupWidth(cols, groupSize);
    std::vector<int32_t> index(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) index[size_t(c)] = int32_t(c / width);
    return at::tensor(index, at::kInt);
}

// The smallest fp16 value >= x, for positive finite x up to 65504, as float32.
at::Tensor roundUpToFp16(const at::Tensor& x) {
    const at::Tensor nearest = x.to(at::kHalf);
    // For positive halves the next larger value has the next bit pattern.
    const at::Tensor up = (nearest.view(at::kShort) + 1).view(at::kHalf);
    return at::where(nearest.to(at::kFloat) < x, up, nearest).to(at::kFloat);
}

void groupParams(const at::Tensor& slab, const QuantSpec& spec, at::Tensor& scale, at::Tensor& zero) {
    validateSpec(spec);
    validateWeight(slab, "quantize");
    const at::Tensor x = slab.to(at::kFloat);
    const double maxq = double(maxLevel(spec.bits));
    at::Tensor xmin = x.amin(1).clamp_max(0);
    at::Tensor xmax = x.amax(1).clamp_min(0);
    if (spec.symmetric) {
        at::Tensor amax = at::maximum(xmin.neg(), xmax);
        amax.masked_fill_(amax == 0, 1.0);  // all-zero row: range [-1, 1], as the reference does
        scale = amax.mul(2.0).div(maxq);
        zero = at::full({x.size(0)}, int64_t(1) << (spec.bits - 1), x.options().dtype(at::kInt));
    } else {
        const at::Tensor flat = (xmin == 0).logical_and(xmax == 0);
        xmin.masked_fill_(flat, -1.0);
        xmax.masked_fill_(flat, 1.0);
        scale = (xmax - xmin).div(maxq);
    }
    // Scales are kept fp16-representable: checkpoints (GPTQ, AWQ, GGUF) store them as fp16, and an export must
    // dequantize to exactly the weights evaluated here. Rounding up (never down) keeps every weight of the range
    // on the grid, so the half-step error bound holds. The floor (fp16's smallest subnormal) keeps a tiny range
    // from giving scale 0 and then inf/NaN levels.
    scale = roundUpToFp16(scale.clamp(5.9604645e-08, 65504.0));
    if (!spec.symmetric) zero = at::round(xmin.neg().div(scale)).clamp(0, maxq).to(at::kInt);
}

at::Tensor quantizeLevels(const at::Tensor& w, const at::Tensor& scale, const at::Tensor& zero, int bits) {
    checkBits(bits, "quantize");
    // at::round rounds half to even; the zero point is an integer, so adding it after rounding is exact.
    at::Tensor q = at::round(w.to(at::kFloat).div(scale.to(at::kFloat))).add(zero.to(at::kFloat));
    return q.clamp(0, double(maxLevel(bits))).to(at::kInt);
}

QuantizedWeight quantizeRtn(const at::Tensor& w, const QuantSpec& spec) {
    validateSpec(spec);
    validateWeight(w, "quantize");
    const at::Tensor x = w.to(at::kFloat).contiguous();
    QuantizedWeight q;
    q.spec = spec;
    q.rows = x.size(0);
    q.cols = x.size(1);
    const int64_t groups = groupCount(q.cols, spec.groupSize);
    q.scales = at::empty({q.rows, groups}, at::kFloat);
    q.zeros = at::empty({q.rows, groups}, at::kInt);
    at::Tensor levels = at::empty({q.rows, q.cols}, at::kInt);
    at::Tensor scale, zero;
    if (spec.groupSize == 0) {
        groupParams(x.reshape({1, -1}), spec, scale, zero);
        q.scales.fill_(scale.item<float>());
        q.zeros.fill_(zero.item<int>());
        levels.copy_(quantizeLevels(x, scale, zero, spec.bits));
    } else {
        const int64_t width = groupWidth(q.cols, spec.groupSize);
        for (int64_t g = 0; g < groups; ++g) {
            const at::Tensor slab = x.slice(1, g * width, std::min((g + 1) * width, q.cols));
            groupParams(slab, spec, scale, zero);
            q.scales.select(1, g).copy_(scale);
            q.zeros.select(1, g).copy_(zero);
            levels.slice(1, g * width, g * width + slab.size(1))
                .copy_(quantizeLevels(slab, scale.unsqueeze(1), zero.unsqueeze(1), spec.bits));
        }
    }
    q.packed = packLevels(levels, spec.bits);
    q.groupIndex = defaultGroupIndex(q.cols, spec.groupSize);
    return q;
}

at::Tensor roundTrip(const at::Tensor& w, const QuantSpec& spec) {
    validateSpec(spec);
    validateWeight(w, "quantize");
    const at::Tensor x = w.to(at::kFloat).contiguous();
    // Rows of equal-width groups, each quantized as quantizeRtn quantizes one group's slab row.
    const auto rounded = [&spec](const at::Tensor& slabs) {
        at::Tensor scale, zero;
        groupParams(slabs, spec, scale, zero);
        const at::Tensor s = scale.unsqueeze(1), z = zero.unsqueeze(1);
        return (quantizeLevels(slabs, s, z, spec.bits).to(at::kFloat) - z.to(at::kFloat)).mul(s);
    };
    if (spec.groupSize == 0) return rounded(x.reshape({1, -1})).view(x.sizes());
    const int64_t rows = x.size(0), cols = x.size(1), width = groupWidth(cols, spec.groupSize);
    const int64_t whole = cols / width;
    std::vector<at::Tensor> parts;
    if (whole > 0) parts.push_back(rounded(x.narrow(1, 0, whole * width).reshape({rows * whole, width})).view({rows, whole * width}));
    if (whole * width < cols) parts.push_back(rounded(x.narrow(1, whole * width, cols - whole * width).contiguous()));
    return parts.size() == 1 ? parts.front() : at::cat(parts, 1);
}

at::Tensor packLevels(const at::Tensor& levels, int bits) {
    const int k = levelsPerWord(bits);
    if (!levels.defined() || levels.dim() != 2)
        throw Error("pack: levels must be 2-D [rows, cols]");
    if (at::isFloatingType(levels.scalar_type())) throw Error("pack: levels must be integers");
    if (levels.numel() > 0 && (levels.min().item<int64_t>() < 0 || levels.max().item<int64_t>() > maxLevel(bits)))
        throw Error("pack: a level is outside [0, " + std::to_string(maxLevel(bits)) + "] for " +
                    std::to_string(bits) + " bits");
    const int64_t rows = levels.size(0), cols = levels.size(1);
    const int64_t words = (cols + k - 1) / k;
    // One pass per slot of a word over every k-th level, accumulated in int64 words: the only wide temporaries are
    // word-sized (a k-th of the levels), which is what makes packing a large model cheap.
    at::Tensor packed = at::zeros({rows, words}, levels.options().dtype(at::kLong));
    for (int j = 0; j < k && j < cols; ++j) {
        const at::Tensor slot = levels.slice(1, j, cols, k);   // levels j, j + k, ...: words 0 .. slot width - 1
        packed.narrow(1, 0, slot.size(1)).bitwise_or_(slot.to(at::kLong).bitwise_left_shift(int64_t(j) * bits));
    }
    // Words are unsigned 32-bit; store the same bits in int32 (two's complement) without relying on narrowing.
    const int64_t two31 = int64_t(1) << 31;
    packed = at::where(packed >= two31, packed - 2 * two31, packed);
    return packed.to(at::kInt);
}

at::Tensor adoptPackedWords(const at::Tensor& words, int bits, int64_t cols) {
    const int k = levelsPerWord(bits);   // checks bits first
    if (32 % bits != 0) throw Error("pack: " + std::to_string(bits) + "-bit levels do not fill whole words");
    if (!words.defined() || words.dim() != 2 || words.scalar_type() != at::kInt || words.size(1) != (cols + k - 1) / k)
        throw Error("pack: " + std::to_string(cols) + " levels of " + std::to_string(bits) + " bits need int32 words [rows, " +
                    std::to_string((cols + k - 1) / k) + "]");
    const int64_t used = cols % k;
    if (used == 0) return words.contiguous();
    at::Tensor out = words.clone(at::MemoryFormat::Contiguous);
    out.select(1, out.size(1) - 1).bitwise_and_(int32_t((int64_t(1) << (bits * used)) - 1));
    return out;
}

at::Tensor unpackLevels(const at::Tensor& packed, int bits, int64_t cols) {
    const int k = levelsPerWord(bits);
    if (!packed.defined() || packed.dim() != 2 || packed.scalar_type() != at::kInt)
        throw Error("unpack: packed levels must be a 2-D int32 tensor");
    if (cols < 0 || packed.size(1) < (cols + k - 1) / k)
        throw Error("unpack: " + std::to_string(packed.size(1)) + " words cannot hold " + std::to_string(cols) +
                    " levels of " + std::to_string(bits) + " bits");
    at::Tensor p = packed.to(at::kLong);
    p = at::where(p < 0, p + (int64_t(1) << 32), p);
    // Slot j of every word holds levels j, j + k, ...: written with a stride, one pass per slot.
    at::Tensor levels = at::empty({packed.size(0), packed.size(1) * k}, packed.options());
    for (int j = 0; j < k; ++j)
        levels.slice(1, j, levels.size(1), k).copy_(p.bitwise_right_shift(int64_t(j) * bits).bitwise_and(maxLevel(bits)));
    return levels.slice(1, 0, cols).contiguous();
}

at::Tensor QuantizedWeight::levels() const { return unpackLevels(packed, spec.bits, cols); }

at::Tensor QuantizedWeight::dequantize() const {
    const at::Tensor index = groupIndex.to(at::kLong);
    const at::Tensor scale = scales.index_select(1, index);
    const at::Tensor zero = zeros.index_select(1, index).to(at::kFloat);
    return (levels().to(at::kFloat) - zero).mul(scale);
}

size_t QuantizedWeight::storageBytes() const {
    const int64_t k = levelsPerWord(spec.bits);
    const int64_t groups = scales.defined() ? scales.size(1) : 0;
    int64_t bytes = packed.numel() * 4;
    if (spec.groupSize == 0) {
        bytes += 2 + 4;
    } else {
        bytes += rows * groups * 2;
        bytes += groups * ((rows + k - 1) / k) * 4;
    }
    if (groupIndex.defined() && !at::equal(groupIndex.to(at::kInt), defaultGroupIndex(cols, spec.groupSize)))
        bytes += cols * 4;
    return size_t(bytes);
}

} // namespace cwb::quant
