#include "core/compress/smoothquant_math.h"

#include <cmath>
#include <string>

#include "core/util/error.h"

namespace cwb::quant {

namespace {

constexpr float kInt8Max = 127.0f;

// amax / 127 per row of [rows, cols]; 1 for all-zero rows so division stays finite.
at::Tensor int8RowScales(const at::Tensor& rows) {
    at::Tensor scale = rows.abs().amax(1, /*keepdim=*/true) / kInt8Max;
    return scale.masked_fill(scale == 0, 1.0f);
}

// at::round rounds half to even, as torch.round does.
at::Tensor roundToInt8Grid(const at::Tensor& rows, const at::Tensor& scale) {
    return at::round(rows / scale).clamp(-kInt8Max, kInt8Max);
}

} // namespace

at::Tensor smoothingScales(const at::Tensor& activationAbsMax, const at::Tensor& weights, double alpha) {
    if (!(alpha >= 0.0 && alpha <= 1.0)) throw Error("SmoothQuant: alpha must be in [0, 1], got " + std::to_string(alpha));
    if (!weights.defined() || weights.dim() != 2 || weights.numel() == 0)
        throw Error("SmoothQuant: weights must be a non-empty [out, in] matrix");
    if (!activationAbsMax.defined() || activationAbsMax.dim() != 1 || activationAbsMax.size(0) != weights.size(1))
        throw Error("SmoothQuant: need one activation maximum per weight column (" + std::to_string(weights.size(1)) + ")");
    at::Tensor act = activationAbsMax.detach().to(at::kCPU, at::kDouble);
    if (!at::isfinite(act).all().item<bool>() || (act < 0).any().item<bool>())
        throw Error("SmoothQuant: activation maxima must be finite and non-negative");
    at::Tensor wmax = weights.detach().to(at::kDouble).abs().amax(0).to(at::kCPU);
    if (!at::isfinite(wmax).all().item<bool>()) throw Error("SmoothQuant: weights hold NaN or infinity");
    at::Tensor s = (act.pow(alpha) / wmax.pow(1.0 - alpha)).clamp_min(1e-5);
    // 0^0 and x/0 would give 1 or infinity; a channel that is silent on either side needs no balancing.
    s.masked_fill_((act == 0).logical_or(wmax == 0), 1.0);
    return s.to(at::kFloat);
}

AbsMaxAccumulator::AbsMaxAccumulator(int64_t columns) {
    if (columns <= 0) throw Error("SmoothQuant: an abs-max accumulator needs at least one column");
    mMax = at::zeros({columns}, at::kFloat);
}

void AbsMaxAccumulator::add(const at::Tensor& inputs) {
    if (!inputs.defined() || inputs.dim() < 1 || inputs.size(-1) != mMax.size(0))
        throw Error("SmoothQuant: inputs must end in " + std::to_string(mMax.size(0)) + " columns");
    if (inputs.numel() == 0) return;
    at::Tensor x = inputs.detach().to(at::kFloat).reshape({-1, mMax.size(0)});
    mMax = at::maximum(mMax, x.abs().amax(0).to(at::kCPU));   // reduce on the inputs' device
}

at::Tensor AbsMaxAccumulator::absMax() const { return mMax.clone(); }

at::Tensor fakeQuantizeInt8PerToken(const at::Tensor& x) {
    if (!x.defined() || x.dim() < 1) throw Error("int8: activations need at least one dimension");
    if (x.numel() == 0) return x.clone();
    at::Tensor rows = x.detach().to(at::kFloat).reshape({-1, x.size(-1)});
    at::Tensor scale = int8RowScales(rows);
    at::Tensor q = (roundToInt8Grid(rows, scale) * scale).reshape(x.sizes()).to(x.scalar_type());
    // Training (distillation): straight-through estimator, so the layers before a W8A8 layer still learn.
    return x.requires_grad() ? x + (q - x.detach()) : q;
}

void quantizeInt8PerToken(const at::Tensor& x, at::Tensor& codes, at::Tensor& scales) {
    if (!x.defined() || x.dim() != 2) throw Error("int8: per-token quantization needs [rows, cols] activations");
    const at::Tensor rows = x.detach().to(at::kFloat);
    const at::Tensor scale = int8RowScales(rows);
    codes = roundToInt8Grid(rows, scale).to(at::kChar).contiguous();
    scales = scale.reshape({-1}).contiguous();
}

at::Tensor Int8Weight::dequantize() const { return q.to(at::kFloat) * scales.unsqueeze(1); }

size_t Int8Weight::storageBytes() const { return size_t(q.numel()) + size_t(scales.numel()) * sizeof(float); }

Int8Weight quantizeInt8PerChannel(const at::Tensor& w) {
    if (!w.defined() || w.dim() != 2 || w.numel() == 0) throw Error("int8: weight must be a non-empty [out, in] matrix");
    if (!at::isfinite(w).all().item<bool>()) throw Error("int8: weight holds NaN or infinity");
    at::Tensor wf = w.detach().to(at::kFloat);
    at::Tensor scale = int8RowScales(wf);
    Int8Weight r;
    r.q = roundToInt8Grid(wf, scale).to(at::kChar);
    r.scales = scale.reshape({-1}).clone();
    return r;
}

} // namespace cwb::quant
