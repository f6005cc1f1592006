#include "core/compress/distill_math.h"

#include <c10/core/GradMode.h>   // NoGradGuard: ATen/ATen.h does not bring it in LibTorch 2.x
#include <cmath>
#include <sstream>

#include "core/util/error.h"

namespace cwb::distill {

at::Tensor crossEntropy(const at::Tensor& logits, const at::Tensor& labels) {
    at::Tensor logProbs = at::log_softmax(logits.to(at::kFloat), -1);
    return -logProbs.gather(1, labels.to(at::kLong).unsqueeze(1)).mean();
}

at::Tensor kdLoss(const at::Tensor& student, const at::Tensor& teacher, double temperature) {
    if (temperature <= 0) throw Error("distillation: the temperature must be positive");
    at::Tensor logS = at::log_softmax(student.to(at::kFloat) / temperature, -1);
    at::Tensor logT = at::log_softmax(teacher.to(at::kFloat) / temperature, -1);
    at::Tensor kl = (logT.exp() * (logT - logS)).sum(-1).mean();
    return kl * (temperature * temperature);
}

LossTerms combine(const at::Tensor& ce, const at::Tensor& kd, const at::Tensor& hidden, const at::Tensor& attention,
                  const LossWeights& w) {
    LossTerms t{at::Tensor(), ce, kd, hidden, attention};
    t.total = ce * w.alpha + kd * (1.0 - w.alpha);
    if (w.hidden != 0) t.total = t.total + hidden * w.hidden;
    if (w.attention != 0) t.total = t.total + attention * w.attention;
    return t;
}

at::Tensor attentionMse(const at::Tensor& student, const at::Tensor& teacher) {
    if (student.size(1) == teacher.size(1)) return (student - teacher).pow(2).mean();
    return (student.mean(1) - teacher.mean(1)).pow(2).mean();
}

std::vector<int64_t> uniformLayerMap(int64_t studentLayers, int64_t teacherLayers) {
    std::vector<int64_t> map;
    for (int64_t i = 0; i < studentLayers; ++i) map.push_back((i + 1) * teacherLayers / studentLayers - 1);
    return map;
}

std::vector<int64_t> parseLayerMap(const std::string& text, int64_t studentLayers, int64_t teacherLayers) {
    std::vector<int64_t> map(static_cast<size_t>(studentLayers), -1);
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        if (item.find_first_not_of(' ') == std::string::npos) continue;
        const auto colon = item.find(':');
        int64_t s = -1, t = -1;
        try {
            if (colon == std::string::npos) throw std::invalid_argument(item);
            s = std::stoll(item.substr(0, colon));
            t = std::stoll(item.substr(colon + 1));
        } catch (const std::exception&) {
            throw Error("layer map: '" + item + "' is not 'student:teacher'");
        }
        if (s < 0 || s >= studentLayers) throw Error("layer map: the student has no layer " + std::to_string(s));
        if (t < 0 || t >= teacherLayers) throw Error("layer map: the teacher has no layer " + std::to_string(t));
        map[static_cast<size_t>(s)] = t;
    }
    return map;
}

double learningRate(int64_t step, int64_t steps, int64_t warmup, double base, bool cosine, double minRatio) {
    if (step < warmup) return base * double(step + 1) / double(warmup);
    if (!cosine || steps <= warmup) return base;
    const double progress = std::min(1.0, double(step - warmup) / double(std::max<int64_t>(1, steps - warmup)));
    return base * (minRatio + (1.0 - minRatio) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

void adamwUpdate(at::Tensor& param, const at::Tensor& grad, at::Tensor& m, at::Tensor& v, int64_t step, double lr,
                 const AdamSettings& s) {
    if (s.weightDecay != 0) param.mul_(1.0 - lr * s.weightDecay);
    m.mul_(s.beta1).add_(grad, 1.0 - s.beta1);
    v.mul_(s.beta2).addcmul_(grad, grad, 1.0 - s.beta2);
    const double correction1 = 1.0 - std::pow(s.beta1, double(step));
    const double correction2 = 1.0 - std::pow(s.beta2, double(step));
    at::Tensor denom = (v / correction2).sqrt_().add_(s.eps);
    param.addcdiv_(m, denom, -lr / correction1);
}

double clipGradNorm(std::vector<at::Tensor>& grads, double maxNorm) {
    double sumSquares = 0;
    for (const auto& g : grads)
        if (g.defined()) sumSquares += g.to(at::kDouble).pow(2).sum().item<double>();
    const double norm = std::sqrt(sumSquares);
    if (maxNorm > 0 && std::isfinite(norm) && norm > maxNorm) {
        const double factor = maxNorm / (norm + 1e-6);
        for (auto& g : grads)
            if (g.defined()) g.mul_(factor);
    }
    return norm;
}

namespace {

void gridColumns(const quant::QuantizedWeight& grid, const at::Device& device, at::Tensor& scale, at::Tensor& zero) {
    const at::Tensor index = grid.groupIndex.to(at::kLong).to(device);
    scale = grid.scales.to(device).index_select(1, index);
    zero = grid.zeros.to(device).index_select(1, index).to(at::kFloat);
}

} // namespace

at::Tensor fakeQuantize(const at::Tensor& w, const quant::QuantizedWeight& grid) {
    at::Tensor scale, zero;
    gridColumns(grid, w.device(), scale, zero);
    const double maxq = double((int64_t(1) << grid.spec.bits) - 1);
    at::Tensor q;
    {
        c10::NoGradGuard noGrad;
        at::Tensor levels = at::round(w.detach() / scale).add(zero).clamp(0, maxq);
        q = (levels - zero) * scale;
    }
    return w + (q - w.detach());   // forward: q; backward: identity to w
}

quant::QuantizedWeight requantize(const at::Tensor& w, const quant::QuantizedWeight& grid) {
    at::Tensor scale, zero;
    gridColumns(grid, at::kCPU, scale, zero);
    quant::QuantizedWeight q = grid;
    q.packed = quant::packLevels(quant::quantizeLevels(w.detach().to(at::kCPU, at::kFloat), scale, zero, grid.spec.bits),
                                 grid.spec.bits);
    return q;
}

namespace {

// Scales as a column that broadcasts over [out, in]: [out] per channel, [1] per tensor.
at::Tensor scaleColumn(const at::Tensor& scales, const at::Device& device) {
    return scales.to(device, at::kFloat).reshape({-1, 1});
}

} // namespace

at::Tensor fakeQuantizeFp8(const at::Tensor& w, const at::Tensor& scales) {
    at::Tensor q;
    {
        c10::NoGradGuard noGrad;
        const at::Tensor s = scaleColumn(scales, w.device());
        q = quant::roundToE4m3(w.detach() / s) * s;
    }
    return w + (q - w.detach());
}

quant::Fp8Weight requantizeFp8(const at::Tensor& w, const at::Tensor& scales) {
    const at::Tensor s = scaleColumn(scales, at::kCPU);
    quant::Fp8Weight r;
    r.codes = quant::encodeE4m3(quant::roundToE4m3(w.detach().to(at::kCPU, at::kFloat) / s)).contiguous();
    r.scales = scales.detach().to(at::kCPU, at::kFloat).clone();
    return r;
}

at::Tensor fakeQuantizeInt8(const at::Tensor& w, const at::Tensor& scales) {
    at::Tensor q;
    {
        c10::NoGradGuard noGrad;
        const at::Tensor s = scaleColumn(scales, w.device());
        q = at::round(w.detach() / s).clamp(-127, 127) * s;
    }
    return w + (q - w.detach());
}

namespace {

// level · s with LSQ's gradients; `level` and `inside` carry no gradient, x = w / s detached.
at::Tensor learnedScaleProduct(const at::Tensor& w, const at::Tensor& s, const at::Tensor& x, const at::Tensor& level,
                               const at::Tensor& inside) {
    // Forward: inside·w + (level − inside·x)·s = level·s, since x·s = w.
    return inside * w + (level - inside * x) * s;
}

} // namespace

at::Tensor fakeQuantizeLearnedScales(const at::Tensor& w, const quant::QuantizedWeight& grid, const at::Tensor& logScales) {
    const at::Tensor index = grid.groupIndex.to(at::kLong).to(w.device());
    // Per tensor: one log-scale [1, 1] for every row, as the grid stores one scale.
    const at::Tensor s = logScales.exp().expand({grid.scales.size(0), grid.scales.size(1)}).index_select(1, index);
    const at::Tensor zero = grid.zeros.to(w.device()).index_select(1, index).to(at::kFloat);
    const double maxq = double((int64_t(1) << grid.spec.bits) - 1);
    at::Tensor x, level, inside;
    {
        c10::NoGradGuard noGrad;
        x = w.detach() / s.detach();
        // Clipped where w / s itself is outside the grid's range (LSQ's rule), not where its rounding is.
        inside = ((x + zero >= 0) & (x + zero <= maxq)).to(at::kFloat);
        level = at::round(x).add(zero).clamp(0, maxq).sub(zero);
    }
    return learnedScaleProduct(w, s, x, level, inside);
}

at::Tensor fakeQuantizeFp8LearnedScales(const at::Tensor& w, const at::Tensor& logScales) {
    const at::Tensor s = logScales.exp().reshape({-1, 1});
    at::Tensor x, level, inside;
    {
        c10::NoGradGuard noGrad;
        x = w.detach() / s.detach();
        level = quant::roundToE4m3(x);
        inside = (x.abs() <= 448.0).to(at::kFloat);
    }
    return learnedScaleProduct(w, s, x, level, inside);
}

at::Tensor fakeQuantizeInt8LearnedScales(const at::Tensor& w, const at::Tensor& logScales) {
    const at::Tensor s = logScales.exp().reshape({-1, 1});
    at::Tensor x, level, inside;
    {
        c10::NoGradGuard noGrad;
        x = w.detach() / s.detach();
        inside = (x.abs() <= 127).to(at::kFloat);
        level = at::round(x).clamp(-127, 127);
    }
    return learnedScaleProduct(w, s, x, level, inside);
}

quant::QuantizedWeight withScales(const quant::QuantizedWeight& grid, const at::Tensor& logScales) {
    quant::QuantizedWeight g = grid;
    g.scales = logScales.detach().exp().to(at::kCPU, grid.scales.scalar_type()).expand_as(grid.scales).contiguous();
    return g;
}

quant::Int8Weight requantizeInt8(const at::Tensor& w, const at::Tensor& scales) {
    const at::Tensor s = scaleColumn(scales, at::kCPU);
    quant::Int8Weight r;
    r.q = at::round(w.detach().to(at::kCPU, at::kFloat) / s).clamp(-127, 127).to(at::kChar).contiguous();
    r.scales = scales.detach().to(at::kCPU, at::kFloat).clone();
    return r;
}

} // namespace cwb::distill
