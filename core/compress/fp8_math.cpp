#include "core/compress/fp8_math.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "core/util/error.h"

namespace cwb::quant {

namespace {

constexpr double kMax = 448.0;
constexpr int kMinExponent = -6;   // exponent of the smallest normal; subnormals share its spacing
constexpr int kMantissaBits = 3;

// Ties to even written out, so the result does not depend on the thread's floating-point rounding mode.
double roundHalfEven(double t) {
    const double down = std::floor(t), rest = t - down;
    if (rest > 0.5) return down + 1.0;
    if (rest < 0.5) return down;
    return std::fmod(down, 2.0) == 0.0 ? down : down + 1.0;
}

const std::array<float, 256>& decodeTable() {
    static const std::array<float, 256> table = [] {
        std::array<float, 256> t{};
        for (int c = 0; c < 256; ++c) t[c] = decodeE4m3(uint8_t(c));
        return t;
    }();
    return table;
}

// amax / 448 per row of a [rows, cols] float matrix; rows with amax 0 get 1 so division stays finite.
at::Tensor rowScales(const at::Tensor& rows) {
    at::Tensor scale = rows.abs().amax(1, /*keepdim=*/true) / float(kMax);
    return scale.masked_fill(scale == 0, 1.0f);
}

} // namespace

float roundToE4m3(float x) {
    if (std::isnan(x)) return x;
    const double a = std::fabs(double(x));
    double r = kMax;
    if (a == 0.0) {
        r = 0.0;
    } else if (a < kMax) {
        int e = 0;
        std::frexp(a, &e);   // a = f·2^e, f ∈ [0.5, 1): the leading bit is worth 2^(e−1)
        const double quantum = std::ldexp(1.0, std::max(e - 1, kMinExponent) - kMantissaBits);
        r = std::min(kMax, roundHalfEven(a / quantum) * quantum);   // exact: dividing by a power of two
    }
    return std::copysign(float(r), x);
}

uint8_t encodeE4m3(float x) {
    const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
    if (std::isnan(x)) return sign | 0x7F;
    const double r = std::fabs(double(roundToE4m3(x)));
    if (r == 0.0) return sign;
    int e = 0;
    const double f = std::frexp(r, &e);
    const int biased = e - 1 + 7;
    if (biased <= 0)   // subnormal: r = m · 2^−9
        return sign | uint8_t(std::ldexp(r, -kMinExponent + kMantissaBits));
    const int mantissa = int((2.0 * f - 1.0) * 8.0);
    return sign | uint8_t(biased << 3) | uint8_t(mantissa);
}

float decodeE4m3(uint8_t code) {
    const int exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
    if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
    const double magnitude = exponent == 0 ? std::ldexp(double(mantissa), kMinExponent - kMantissaBits)
                                           : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
    return float((code & 0x80) ? -magnitude : magnitude);
}

at::Tensor roundToE4m3(const at::Tensor& x) {
    at::Tensor xf = x.detach().to(at::kFloat);
    at::Tensor a = xf.abs();
    auto [fraction, exponent] = at::frexp(a);   // a = f·2^e, f ∈ [0.5, 1)
    at::Tensor step = (exponent - 1).clamp_min(kMinExponent) - kMantissaBits;
    at::Tensor quantum = at::ldexp(at::ones_like(a), step);
    // at::round is half to even; quanta are powers of two, so the division and product are exact.
    at::Tensor r = at::round(a / quantum) * quantum;
    r = at::where(a >= float(kMax), at::full_like(a, float(kMax)), r);   // also catches infinity
    return at::where(at::isnan(xf), xf, at::copysign(r, xf));
}

at::Tensor Fp8Weight::dequantize() const {
    const auto& table = decodeTable();
    at::Tensor values = at::from_blob(const_cast<float*>(table.data()), {256}, at::kFloat).to(codes.device());
    at::Tensor decoded = values.index_select(0, codes.reshape({-1}).to(at::kLong)).reshape(codes.sizes());
    return decoded * scales.reshape({-1, 1});
}

size_t Fp8Weight::storageBytes() const {
    return size_t(codes.numel()) + size_t(scales.numel()) * sizeof(float);
}

Fp8Weight quantizeFp8(const at::Tensor& w, bool perChannel) {
    if (!w.defined() || w.dim() != 2 || w.numel() == 0) throw Error("FP8: weight must be a non-empty [out, in] matrix");
    if (!at::isfinite(w).all().item<bool>()) throw Error("FP8: weight holds NaN or infinity");
    at::Tensor wf = w.detach().to(at::kCPU, at::kFloat).contiguous();
    Fp8Weight r;
    at::Tensor scale = rowScales(perChannel ? wf : wf.reshape({1, -1}));   // [out, 1] or [1, 1]
    at::Tensor scaled = (wf / scale).contiguous();
    r.codes = at::empty(wf.sizes(), at::kByte);
    const float* in = scaled.data_ptr<float>();
    uint8_t* out = r.codes.data_ptr<uint8_t>();
    for (int64_t i = 0, n = scaled.numel(); i < n; ++i) out[i] = encodeE4m3(in[i]);
    r.scales = scale.reshape({-1}).clone();
    return r;
}

at::Tensor fakeQuantizeFp8PerToken(const at::Tensor& x) {
    if (!x.defined() || x.dim() < 1) throw Error("FP8: activations need at least one dimension");
    if (x.numel() == 0) return x.clone();
    at::Tensor rows = x.detach().to(at::kFloat).reshape({-1, x.size(-1)});
    at::Tensor scale = rowScales(rows);
    at::Tensor q = (roundToE4m3(rows / scale) * scale).reshape(x.sizes()).to(x.scalar_type());
    // Training (distillation): the rounding passes gradients through unchanged (straight-through estimator), so
    // the layers before an FP8 layer still learn.
    return x.requires_grad() ? x + (q - x.detach()) : q;
}

at::Tensor encodeE4m3(const at::Tensor& values) {
    const at::Tensor v = values.detach().to(at::kFloat);
    const at::Tensor a = v.abs();
    auto [fraction, exponent] = at::frexp(a);   // a = f·2^e, f ∈ [0.5, 1): biased exponent e − 1 + 7
    const at::Tensor normal = (exponent + 6).to(at::kFloat) * 8 + (fraction * 2 - 1) * 8;
    const at::Tensor subnormal = a * float(1 << (-kMinExponent + kMantissaBits));   // a = m · 2^−9
    at::Tensor code = at::where(a >= std::ldexp(1.0f, kMinExponent), normal, subnormal);
    code = at::where(at::isnan(v), at::full_like(code, 0x7F), code);
    code = code + at::signbit(v).to(at::kFloat) * 128;
    return code.to(at::kInt).to(at::kByte);
}

void quantizeFp8PerToken(const at::Tensor& x, at::Tensor& codes, at::Tensor& scales) {
    if (!x.defined() || x.dim() != 2) throw Error("FP8: per-token quantization needs [rows, cols] activations");
    const at::Tensor rows = x.detach().to(at::kFloat);
    const at::Tensor scale = rowScales(rows);
    codes = encodeE4m3(roundToE4m3(rows / scale)).contiguous();
    scales = scale.reshape({-1}).contiguous();
}

} // namespace cwb::quant
