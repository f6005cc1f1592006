// Shared by the GPU tests that need a small Llama-family model in memory: random weights for the spec already set
// on the model (q/k/v biases when spec.attentionBias), and the normalised error used to compare CPU and CUDA.
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/model/model.h"

namespace cwb::testing {

// The small GQA Llama the GPU tests share (2 blocks, hidden 256, 4 query heads of 64 over 2 kv heads, ffn 688, so
// that g128 and g32 leave a partial group), with no weights yet; tests change what they need, then fillRandomLlama.
inline ArchSpec smallLlamaSpec() {
    ArchSpec s;
    s.modelType = "llama";
    s.layers = 2;
    s.hidden = 256;
    s.heads = 4;
    s.kvHeads = 2;
    s.headDim = 64;
    s.ffn = 688;
    s.vocab = 96;
    s.context = 128;
    return s;
}

// Seeds LibTorch's generator with `seed`, fills every tensor of m.spec, and validates the spec.
inline void fillRandomLlama(Model& m, uint64_t seed) {
    const ArchSpec& s = m.spec;
    at::manual_seed(seed);
    auto put = [&](const std::string& name, std::vector<int64_t> shape, double scale) {
        m.replaceTensor(name, at::randn(shape, at::kFloat) * scale);
    };
    put("model.embed_tokens.weight", {s.vocab, s.hidden}, 0.5);
    for (int64_t l = 0; l < s.layers; ++l) {
        auto n = [&](const char* suffix) { return names::llamaLayer(l, suffix); };
        m.replaceTensor(n("input_layernorm.weight"), at::ones({s.hidden}) + 0.1 * at::randn({s.hidden}));
        m.replaceTensor(n("post_attention_layernorm.weight"), at::ones({s.hidden}) + 0.1 * at::randn({s.hidden}));
        put(n("self_attn.q_proj.weight"), {s.heads * s.headDim, s.hidden}, 0.08);
        put(n("self_attn.k_proj.weight"), {s.kvHeads * s.headDim, s.hidden}, 0.08);
        put(n("self_attn.v_proj.weight"), {s.kvHeads * s.headDim, s.hidden}, 0.08);
        if (s.attentionBias) {
            put(n("self_attn.q_proj.bias"), {s.heads * s.headDim}, 0.1);
            put(n("self_attn.k_proj.bias"), {s.kvHeads * s.headDim}, 0.1);
            put(n("self_attn.v_proj.bias"), {s.kvHeads * s.headDim}, 0.1);
        }
        put(n("self_attn.o_proj.weight"), {s.hidden, s.heads * s.headDim}, 0.08);
        put(n("mlp.gate_proj.weight"), {s.ffn, s.hidden}, 0.08);
        put(n("mlp.up_proj.weight"), {s.ffn, s.hidden}, 0.08);
        put(n("mlp.down_proj.weight"), {s.hidden, s.ffn}, 0.05);
    }
    m.replaceTensor("model.norm.weight", at::ones({s.hidden}));
    put("lm_head.weight", {s.vocab, s.hidden}, 0.3);
    s.validate(m.path);
}

// ‖reference − value‖² / ‖reference‖², in double on the CPU.
inline double normalisedError(const at::Tensor& reference, const at::Tensor& value) {
    at::Tensor r = reference.to(at::kCPU, at::kDouble), v = value.to(at::kCPU, at::kDouble);
    return (r - v).pow(2).sum().item<double>() / r.pow(2).sum().item<double>();
}

} // namespace cwb::testing
