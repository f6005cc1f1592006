#include "core/runtime/cpu_int_linear.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/util/error.h"

namespace cwb {

namespace {

// Dequantized weight rows per tile above kCpuGemvMaxRows input rows (the scratch is tile x cols floats). On a 4096 x
// 11008 layer, one thread: 256 rows took 1.33x the dense product at 512 input rows, 1024 rows 1.09x, 4096 rows 1.5x.
constexpr int64_t kTileRows = 1024;
// Output rows per task of the intra-op thread pool.
constexpr int64_t kRowsPerTask = 16;

// The inner loops, in 8-wide vectors (GCC/Clang vector extensions). On x86-64 with GCC they are compiled twice, for
// the baseline (SSE2) and for AVX2, and the loader picks one by the CPU's feature bits. (An "arch=haswell" clone was
// not picked on a virtual CPU that reports no known model; AVX2 alone measured as fast as AVX2 + FMA here.)
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__)   // ifunc
#define CWB_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#pragma GCC diagnostic ignored "-Wpsabi"   // the 32-byte vectors only pass between always-inlined helpers
#else
#define CWB_CPU_CLONES
#endif
#define CWB_INLINE __attribute__((always_inline)) inline

typedef float V8f __attribute__((vector_size(32)));
typedef int32_t V8i __attribute__((vector_size(32)));
typedef uint32_t V8u __attribute__((vector_size(32)));

// What the loops read of a layer: levels two per byte (low nibble first) or one per byte, rows mRowBytes apart;
// scales and zeros [rows, groups]; stored column c of group g for groupStart[g] <= c < groupStart[g + 1].
struct PackedRows {
    const uint8_t* levels;
    int64_t rowBytes;
    bool nibbles;
    const float* scales;
    const float* zeros;
    const int64_t* groupStart;
    int64_t groups, cols;
};

CWB_INLINE float levelAt(const uint8_t* row, int64_t c, bool nibbles) {
    return nibbles ? float((row[c / 2] >> (4 * (c & 1))) & 15) : float(row[c]);
}

// Levels c .. c + 7 of a row as floats (c a multiple of 8 for nibbles: they start a 4-byte word).
CWB_INLINE V8f eightLevels(const uint8_t* row, int64_t c, bool nibbles) {
    if (nibbles) {
        uint32_t word;
        std::memcpy(&word, row + c / 2, 4);
        const V8u shifts = {0, 4, 8, 12, 16, 20, 24, 28};
        const V8u v = ((V8u{} + word) >> shifts) & 15u;
        return __builtin_convertvector((V8i)v, V8f);
    }
    // Two 4-byte words shifted per lane (a conversion of 8 bytes compiled to scalar code, 2x slower).
    uint32_t words[2];
    std::memcpy(words, row + c, 8);
    const V8u spread = {words[0], words[0], words[0], words[0], words[1], words[1], words[1], words[1]};
    const V8u shifts = {0, 8, 16, 24, 0, 8, 16, 24};
    return __builtin_convertvector((V8i)((spread >> shifts) & 255u), V8f);
}

CWB_INLINE float sumOf(V8f v) { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); }

// y[t * ldy + r] = Σ_g s[r, g] · Σ_{c in g} (q[r, c] − z[r, g]) · x[t * cols + c] for rows r0 .. r1 and M tokens
// (a compile-time count, so that the accumulators stay in registers).
template <int M>
CWB_INLINE void gemvRowsOf(const PackedRows& w, const float* x, int64_t r0, int64_t r1, float* y, int64_t ldy) {
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = w.levels + r * w.rowBytes;
        float acc[M] = {};
        for (int64_t g = 0; g < w.groups; ++g) {
            const int64_t a = w.groupStart[g], b = w.groupStart[g + 1];
            if (a == b) continue;
            const float z = w.zeros[r * w.groups + g], s = w.scales[r * w.groups + g];
            float part[M] = {};
            int64_t c = a;
            for (; c < b && (c & 7); ++c) {   // to a multiple of 8
                const float q = levelAt(row, c, w.nibbles) - z;
                for (int t = 0; t < M; ++t) part[t] += q * x[t * w.cols + c];
            }
            V8f vec[M] = {};
            for (; c + 8 <= b; c += 8) {
                const V8f q = eightLevels(row, c, w.nibbles) - z;
                for (int t = 0; t < M; ++t) {
                    V8f xv;
                    std::memcpy(&xv, x + t * w.cols + c, sizeof xv);
                    vec[t] += q * xv;
                }
            }
            for (; c < b; ++c) {
                const float q = levelAt(row, c, w.nibbles) - z;
                for (int t = 0; t < M; ++t) part[t] += q * x[t * w.cols + c];
            }
            for (int t = 0; t < M; ++t) acc[t] += s * (sumOf(vec[t]) + part[t]);
        }
        for (int t = 0; t < M; ++t) y[t * ldy + r] = acc[t];
    }
}

CWB_CPU_CLONES void gemvRows(const PackedRows& w, const float* x, int64_t m, int64_t r0, int64_t r1, float* y,
                             int64_t ldy) {
    static_assert(kCpuGemvMaxRows == 8, "one case per token count");
    switch (m) {
    case 1: return gemvRowsOf<1>(w, x, r0, r1, y, ldy);
    case 2: return gemvRowsOf<2>(w, x, r0, r1, y, ldy);
    case 3: return gemvRowsOf<3>(w, x, r0, r1, y, ldy);
    case 4: return gemvRowsOf<4>(w, x, r0, r1, y, ldy);
    case 5: return gemvRowsOf<5>(w, x, r0, r1, y, ldy);
    case 6: return gemvRowsOf<6>(w, x, r0, r1, y, ldy);
    case 7: return gemvRowsOf<7>(w, x, r0, r1, y, ldy);
    default: return gemvRowsOf<8>(w, x, r0, r1, y, ldy);
    }
}

// out[(r − r0) · cols + c] = (q[r, c] − z[r, g]) · s[r, g]: the values QuantizedWeight::dequantize gives.
CWB_CPU_CLONES void dequantizeRows(const PackedRows& w, int64_t r0, int64_t r1, float* out) {
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = w.levels + r * w.rowBytes;
        float* o = out + (r - r0) * w.cols;
        for (int64_t g = 0; g < w.groups; ++g) {
            const int64_t a = w.groupStart[g], b = w.groupStart[g + 1];
            const float z = w.zeros[r * w.groups + g], s = w.scales[r * w.groups + g];
            int64_t c = a;
            for (; c < b && (c & 7); ++c) o[c] = (levelAt(row, c, w.nibbles) - z) * s;
            for (; c + 8 <= b; c += 8) {
                const V8f v = (eightLevels(row, c, w.nibbles) - z) * s;
                std::memcpy(o + c, &v, sizeof v);
            }
            for (; c < b; ++c) o[c] = (levelAt(row, c, w.nibbles) - z) * s;
        }
    }
}

class CpuIntLinear : public NativeIntLinear {
public:
    CpuIntLinear(const quant::QuantizedWeight& w, const at::Tensor& inputScale)
        : mRows(w.rows), mCols(w.cols), mBits(w.spec.bits), mNibbles(w.spec.bits <= 4) {
        const at::Tensor groupIndex = w.groupIndex.to(at::kLong).contiguous();
        const int64_t groups = w.scales.size(1);
        // Columns in group order (stable): act-order's scattered groups become contiguous ranges.
        const bool ordered = mCols < 2 || (groupIndex.slice(0, 1) >= groupIndex.slice(0, 0, mCols - 1)).all().item<bool>();
        if (!ordered) mOrder = std::get<1>(at::sort(groupIndex, /*stable=*/true, 0, false));
        const at::Tensor counts = at::bincount(groupIndex, {}, groups).contiguous();
        const auto count = counts.accessor<int64_t, 1>();
        mGroupStart.assign(size_t(groups + 1), 0);
        for (int64_t g = 0; g < groups; ++g) mGroupStart[size_t(g + 1)] = mGroupStart[size_t(g)] + count[g];
        mScales = w.scales.to(at::kFloat).contiguous();
        mZeros = w.zeros.to(at::kFloat).contiguous();
        if (inputScale.defined()) mInputScale = inputScale.to(at::kFloat).contiguous();
        if (ordered && (mBits == 4 || mBits == 8) && w.packed.is_contiguous() && w.packed.device().is_cpu()) {
            // The packed int32 words already are this layout (little-endian, checked by makeCpuIntLinear: byte i of a
            // 4-bit word holds levels 2i and 2i + 1, low nibble first; of an 8-bit word, level i): read in place.
            mLevels = w.packed;
            mRowBytes = w.packed.size(1) * 4;
            return;
        }
        at::Tensor levels = w.levels();   // int32 [rows, cols]
        if (!ordered) levels = levels.index_select(1, mOrder);
        // One level per byte, or two (low nibble first) for 2-4 bits.
        const at::Tensor bytes = levels.to(at::kByte).contiguous();
        if (mNibbles) {
            const int64_t pairs = (mCols + 1) / 2;
            at::Tensor padded = at::constant_pad_nd(bytes, {0, pairs * 2 - mCols}, 0).reshape({mRows, pairs, 2});
            mLevels = (padded.select(2, 0) + padded.select(2, 1) * 16).to(at::kByte).contiguous();
            mRowBytes = pairs;
        } else {
            mLevels = bytes;
            mRowBytes = mCols;
        }
    }

    at::Tensor forward(const at::Tensor& xIn) const override {
        if (xIn.dim() < 1 || xIn.size(-1) != mCols)
            throw Error("CPU integer layer: the input has " + std::to_string(xIn.dim() < 1 ? 0 : xIn.size(-1)) +
                        " features, the layer " + std::to_string(mCols));
        at::Tensor x = xIn.reshape({-1, mCols}).to(at::kFloat);
        if (mInputScale.defined()) x = x / mInputScale;
        if (mOrder.defined()) x = x.index_select(1, mOrder);
        x = x.contiguous();
        const int64_t m = x.size(0);
        // The GEMV writes through raw pointers, outside autograd: an input that needs a gradient (head gates, a
        // trained layer before this one) takes the tiles, whose matmul autograd follows back to x.
        const bool needsGradient = at::GradMode::is_enabled() && x.requires_grad();
        at::Tensor y;
        if (m > 0 && m <= kCpuGemvMaxRows && !needsGradient) {
            y = at::empty({m, mRows}, x.options().requires_grad(false));
            gemv(x, y);
        } else {
            y = m > 0 ? tiles(x) : at::empty({0, mRows}, x.options());
        }
        std::vector<int64_t> shape = xIn.sizes().vec();
        shape.back() = mRows;
        return y.view(shape);
    }

    std::string kernelName() const override {
        return "CPU INT" + std::to_string(mBits) + " from packed levels (GEMV up to " + std::to_string(kCpuGemvMaxRows) +
               " rows, dequantized row tiles + matmul above)";
    }
    size_t deviceBytes() const override {
        return size_t(mLevels.nbytes() + mScales.nbytes() + mZeros.nbytes()) +
               (mOrder.defined() ? size_t(mOrder.nbytes()) : 0) + (mInputScale.defined() ? size_t(mInputScale.nbytes()) : 0);
    }

private:
    PackedRows view() const {
        return {static_cast<const uint8_t*>(mLevels.data_ptr()), mRowBytes, mNibbles, mScales.data_ptr<float>(),
                mZeros.data_ptr<float>(), mGroupStart.data(), int64_t(mGroupStart.size()) - 1, mCols};
    }

    void gemv(const at::Tensor& x, at::Tensor& y) const {
        const PackedRows w = view();
        const float* xs = x.data_ptr<float>();
        float* ys = y.data_ptr<float>();
        const int64_t m = x.size(0);
        at::parallel_for(0, mRows, kRowsPerTask, [&](int64_t r0, int64_t r1) { gemvRows(w, xs, m, r0, r1, ys, mRows); });
    }

    // x · Wᵀ by tiles of dequantized rows (differentiable in x: each tile's product is an at::mm).
    at::Tensor tiles(const at::Tensor& x) const {
        const PackedRows w = view();
        std::vector<at::Tensor> parts;
        for (int64_t t0 = 0; t0 < mRows; t0 += kTileRows) {
            const int64_t t1 = std::min(mRows, t0 + kTileRows);
            at::Tensor scratch = at::empty({t1 - t0, mCols}, x.options().requires_grad(false));
            float* out = scratch.data_ptr<float>();
            at::parallel_for(t0, t1, kRowsPerTask, [&](int64_t r0, int64_t r1) {
                dequantizeRows(w, r0, r1, out + (r0 - t0) * mCols);
            });
            parts.push_back(at::mm(x, scratch.t()));
        }
        return parts.size() == 1 ? parts.front() : at::cat(parts, 1);
    }

    int64_t mRows, mCols;
    int mBits;
    bool mNibbles;
    at::Tensor mLevels;              // levels one per byte or two per byte (the layer's own int32 words where they are)
    int64_t mRowBytes = 0;           // bytes from one row of levels to the next
    at::Tensor mScales, mZeros;      // float32 [rows, groups]
    at::Tensor mOrder;               // int64 [cols]: input column of each stored column (act-order), or undefined
    at::Tensor mInputScale;          // float32 [cols] (AWQ), or undefined
    std::vector<int64_t> mGroupStart;   // [groups + 1]: the stored columns of group g are [start[g], start[g + 1])
};

} // namespace

std::unique_ptr<NativeIntLinear> makeCpuIntLinear(const quant::QuantizedWeight& weight, const at::Tensor& inputScale,
                                                  std::string& reason) {
    if (weight.spec.bits < 2 || weight.spec.bits > 8) {
        reason = std::to_string(weight.spec.bits) + "-bit levels (the CPU kernel takes 2 to 8 bits)";
        return nullptr;
    }
    const uint32_t probe = 1;
    if (*reinterpret_cast<const uint8_t*>(&probe) != 1) {   // the loops read levels out of little-endian words
        reason = "a big-endian CPU (the CPU kernel reads little-endian words)";
        return nullptr;
    }
    // What the loops index must be there: a malformed weight takes the dequantized path, which reports it.
    const int64_t words = (weight.cols + quant::levelsPerWord(weight.spec.bits) - 1) / quant::levelsPerWord(weight.spec.bits);
    const bool complete =
        weight.packed.defined() && weight.rows > 0 && weight.cols > 0 && weight.packed.dim() == 2 &&
        weight.packed.scalar_type() == at::kInt && weight.packed.size(0) == weight.rows && weight.packed.size(1) >= words &&
        weight.scales.defined() && weight.scales.dim() == 2 && weight.scales.size(0) == weight.rows &&
        weight.scales.size(1) > 0 && weight.zeros.defined() && weight.zeros.sizes() == weight.scales.sizes() &&
        weight.groupIndex.defined() && weight.groupIndex.dim() == 1 && weight.groupIndex.numel() == weight.cols &&
        (!inputScale.defined() || inputScale.numel() == weight.cols);
    if (!complete) {
        reason = "an incomplete quantized weight";
        return nullptr;
    }
    const at::Tensor groups = weight.groupIndex.to(at::kLong);
    if (groups.min().item<int64_t>() < 0 || groups.max().item<int64_t>() >= weight.scales.size(1)) {
        reason = "a group index outside the weight's " + std::to_string(weight.scales.size(1)) + " groups";
        return nullptr;
    }
    return std::make_unique<CpuIntLinear>(weight, inputScale);
}

} // namespace cwb
