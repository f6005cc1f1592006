#include "tests/support/reference_forward.h"

#include <cmath>

#include "core/model/model.h"

namespace cwb::test {

namespace {

using Vec = std::vector<double>;

Vec row(const at::Tensor& m, int64_t r) {
    at::Tensor t = m[r].to(at::kDouble).contiguous();
    return Vec(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

Vec vec(const at::Tensor& v) { return row(v.unsqueeze(0), 0); }

// y = W x (+ b), W [out, in]
Vec matvec(const at::Tensor& w, const Vec& x, const at::Tensor* bias = nullptr) {
    at::Tensor wd = w.to(at::kDouble).contiguous();
    const int64_t out = wd.size(0), in = wd.size(1);
    const double* p = wd.data_ptr<double>();
    Vec y(static_cast<size_t>(out), 0.0);
    for (int64_t o = 0; o < out; ++o) {
        double s = 0;
        for (int64_t i = 0; i < in; ++i) s += p[o * in + i] * x[static_cast<size_t>(i)];
        y[static_cast<size_t>(o)] = s;
    }
    if (bias) {
        Vec b = vec(*bias);
        for (size_t i = 0; i < y.size(); ++i) y[i] += b[i];
    }
    return y;
}

Vec rmsNorm(const Vec& x, const at::Tensor& w, double eps) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double scale = 1.0 / std::sqrt(ss / double(x.size()) + eps);
    Vec g = vec(w), y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * g[i];
    return y;
}

Vec layerNorm(const Vec& x, const at::Tensor& w, const at::Tensor& b, double eps) {
    double mean = 0, var = 0;
    for (double v : x) mean += v;
    mean /= double(x.size());
    for (double v : x) var += (v - mean) * (v - mean);
    var /= double(x.size());
    Vec g = vec(w), bb = vec(b), y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) / std::sqrt(var + eps) * g[i] + bb[i];
    return y;
}

// Rotates one head vector in place for position pos.
void rope(double* h, int64_t dim, int64_t pos, const ArchSpec& s) {
    for (int64_t i = 0; i < dim / 2; ++i) {
        double freq = 1.0 / std::pow(s.ropeTheta, double(2 * i) / double(dim));
        if (s.ropeScaling.type == "linear") freq /= s.ropeScaling.factor;
        if (s.ropeScaling.type == "llama3") {   // Llama 3.1: long wavelengths slowed by `factor`, a blend between
            const RopeScaling& r = s.ropeScaling;
            const double wavelength = 2 * M_PI / freq;
            const double ratio = r.originalContext / wavelength;   // periods that fit in the original context
            if (ratio < r.lowFreqFactor) {
                freq /= r.factor;
            } else if (ratio <= r.highFreqFactor) {
                const double t = (ratio - r.lowFreqFactor) / (r.highFreqFactor - r.lowFreqFactor);
                freq = (1 - t) * freq / r.factor + t * freq;
            }
        }
        double magnitude = 1.0;
        if (s.ropeScaling.type == "yarn") {   // YaRN: by how often pair i turns within the original context
            const RopeScaling& r = s.ropeScaling;
            // Pair index at which a pair turns `turns` times over the original context (freq = theta^(-2i/dim)).
            auto pairTurning = [&](double turns) {
                return std::log(r.originalContext / (2 * M_PI * turns)) / std::log(s.ropeTheta) * double(dim) / 2;
            };
            double fast = pairTurning(r.betaFast), slow = pairTurning(r.betaSlow);
            if (r.truncate) {
                fast = std::floor(fast);
                slow = std::ceil(slow);
            }
            fast = std::max(fast, 0.0);
            slow = std::min(slow, double(dim - 1));
            const double span = slow == fast ? 0.001 : slow - fast;
            const double interpolated = std::min(1.0, std::max(0.0, (double(i) - fast) / span));   // 1: divided by the factor
            freq = interpolated * freq / r.factor + (1 - interpolated) * freq;
            magnitude = r.attentionFactor;
        }
        const double c = magnitude * std::cos(pos * freq), sn = magnitude * std::sin(pos * freq);
        const int64_t a = s.ropeStyle == RopeStyle::AdjacentPairs ? 2 * i : i;
        const int64_t b = s.ropeStyle == RopeStyle::AdjacentPairs ? 2 * i + 1 : i + dim / 2;
        const double x0 = h[a], x1 = h[b];
        h[a] = x0 * c - x1 * sn;
        h[b] = x0 * sn + x1 * c;
    }
}

} // namespace

at::Tensor referenceLogits(const ArchSpec& s, const WeightMap& w, const std::vector<int64_t>& tokens) {
    const int64_t T = static_cast<int64_t>(tokens.size()), hd = s.headDim;
    const bool llama = s.family == Family::Llama;
    std::vector<Vec> x(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
        x[static_cast<size_t>(t)] = row(w.at(llama ? "model.embed_tokens.weight" : "transformer.wte.weight"), tokens[static_cast<size_t>(t)]);
        if (!llama) {
            Vec p = row(w.at("transformer.wpe.weight"), t);
            for (size_t i = 0; i < p.size(); ++i) x[static_cast<size_t>(t)][i] += p[i];
        }
    }
    auto W = [&](int64_t l, const std::string& suffix) -> const at::Tensor& {
        return w.at(llama ? names::llamaLayer(l, suffix) : names::gpt2Layer(l, suffix));
    };
    auto has = [&](int64_t l, const std::string& suffix) {
        return w.count(llama ? names::llamaLayer(l, suffix) : names::gpt2Layer(l, suffix)) != 0;
    };
    for (int64_t l = 0; l < s.layers; ++l) {
        std::vector<Vec> q(static_cast<size_t>(T)), k(static_cast<size_t>(T)), v(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) {
            const Vec& xt = x[static_cast<size_t>(t)];
            if (llama) {
                Vec h = rmsNorm(xt, W(l, "input_layernorm.weight"), s.normEps);
                const at::Tensor* qb = has(l, "self_attn.q_proj.bias") ? &W(l, "self_attn.q_proj.bias") : nullptr;
                const at::Tensor* kb = has(l, "self_attn.k_proj.bias") ? &W(l, "self_attn.k_proj.bias") : nullptr;
                const at::Tensor* vb = has(l, "self_attn.v_proj.bias") ? &W(l, "self_attn.v_proj.bias") : nullptr;
                q[t] = matvec(W(l, "self_attn.q_proj.weight"), h, qb);
                k[t] = matvec(W(l, "self_attn.k_proj.weight"), h, kb);
                v[t] = matvec(W(l, "self_attn.v_proj.weight"), h, vb);
                for (int64_t hh = 0; hh < s.heads; ++hh) rope(&q[t][static_cast<size_t>(hh * hd)], hd, t, s);
                for (int64_t hh = 0; hh < s.kvHeads; ++hh) rope(&k[t][static_cast<size_t>(hh * hd)], hd, t, s);
            } else {
                Vec h = layerNorm(xt, W(l, "ln_1.weight"), W(l, "ln_1.bias"), s.normEps);
                Vec qkv = matvec(W(l, "attn.c_attn.weight"), h, &W(l, "attn.c_attn.bias"));
                const auto H = static_cast<size_t>(s.hidden);
                q[t] = Vec(qkv.begin(), qkv.begin() + H);
                k[t] = Vec(qkv.begin() + H, qkv.begin() + 2 * H);
                v[t] = Vec(qkv.begin() + 2 * H, qkv.end());
            }
        }
        for (int64_t t = 0; t < T; ++t) {
            Vec attn(static_cast<size_t>(s.heads * hd), 0.0);
            for (int64_t hh = 0; hh < s.heads; ++hh) {
                const int64_t kvh = hh / (s.heads / s.kvHeads);
                Vec scores(static_cast<size_t>(t + 1));
                double mx = -1e300;
                for (int64_t u = 0; u <= t; ++u) {
                    double d = 0;
                    for (int64_t i = 0; i < hd; ++i) d += q[t][hh * hd + i] * k[u][kvh * hd + i];
                    scores[u] = d / std::sqrt(double(hd));
                    mx = std::max(mx, scores[u]);
                }
                double z = 0;
                for (auto& sc : scores) z += (sc = std::exp(sc - mx));
                for (int64_t u = 0; u <= t; ++u)
                    for (int64_t i = 0; i < hd; ++i) attn[hh * hd + i] += scores[u] / z * v[u][kvh * hd + i];
            }
            Vec& xt = x[static_cast<size_t>(t)];
            Vec o = llama ? matvec(W(l, "self_attn.o_proj.weight"), attn) : matvec(W(l, "attn.c_proj.weight"), attn, &W(l, "attn.c_proj.bias"));
            for (size_t i = 0; i < xt.size(); ++i) xt[i] += o[i];
            Vec m;
            if (llama) {
                Vec h = rmsNorm(xt, W(l, "post_attention_layernorm.weight"), s.normEps);
                Vec g = matvec(W(l, "mlp.gate_proj.weight"), h), u = matvec(W(l, "mlp.up_proj.weight"), h);
                for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
                m = matvec(W(l, "mlp.down_proj.weight"), g);
            } else {
                Vec h = layerNorm(xt, W(l, "ln_2.weight"), W(l, "ln_2.bias"), s.normEps);
                Vec f = matvec(W(l, "mlp.c_fc.weight"), h, &W(l, "mlp.c_fc.bias"));
                for (double& a : f) a = 0.5 * a * (1 + std::tanh(std::sqrt(2 / M_PI) * (a + 0.044715 * a * a * a)));
                m = matvec(W(l, "mlp.c_proj.weight"), f, &W(l, "mlp.c_proj.bias"));
            }
            for (size_t i = 0; i < xt.size(); ++i) xt[i] += m[i];
        }
    }
    const at::Tensor& head = llama ? (w.count("lm_head.weight") ? w.at("lm_head.weight") : w.at("model.embed_tokens.weight"))
                                   : (w.count("lm_head.weight") ? w.at("lm_head.weight") : w.at("transformer.wte.weight"));
    at::Tensor logits = at::empty({T, s.vocab}, at::kDouble);
    for (int64_t t = 0; t < T; ++t) {
        Vec h = llama ? rmsNorm(x[t], w.at("model.norm.weight"), s.normEps)
                      : layerNorm(x[t], w.at("transformer.ln_f.weight"), w.at("transformer.ln_f.bias"), s.normEps);
        Vec y = matvec(head, h);
        for (int64_t i = 0; i < s.vocab; ++i) logits[t][i] = y[static_cast<size_t>(i)];
    }
    return logits;
}

} // namespace cwb::test
