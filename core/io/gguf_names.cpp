#include "core/io/gguf_names.h"

#include <map>
#include <regex>
#include <vector>

namespace cwb::gguf {

namespace {

struct NamePair {
    const char* gguf;
    const char* canonical;
};

// Per-layer parts: blk.N.<gguf> <-> <layer prefix>.<canonical>, each followed by ".weight" or ".bias".
const std::vector<NamePair>& layerParts(Family family) {
    static const std::vector<NamePair> llama = {
        {"attn_norm", "input_layernorm"},   {"attn_q", "self_attn.q_proj"},      {"attn_k", "self_attn.k_proj"},
        {"attn_v", "self_attn.v_proj"},     {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
        {"ffn_gate", "mlp.gate_proj"},      {"ffn_up", "mlp.up_proj"},           {"ffn_down", "mlp.down_proj"}};
    static const std::vector<NamePair> gpt2 = {
        {"attn_norm", "ln_1"}, {"attn_qkv", "attn.c_attn"}, {"attn_output", "attn.c_proj"},
        {"ffn_norm", "ln_2"},  {"ffn_up", "mlp.c_fc"},      {"ffn_down", "mlp.c_proj"}};
    return family == Family::Llama ? llama : gpt2;
}

const std::vector<NamePair>& globalNames(Family family) {
    static const std::vector<NamePair> llama = {{"token_embd.weight", "model.embed_tokens.weight"},
                                                {"output_norm.weight", "model.norm.weight"},
                                                {"output.weight", "lm_head.weight"},
                                                {"rope_freqs.weight", "rope_freqs.weight"}};
    static const std::vector<NamePair> gpt2 = {{"token_embd.weight", "transformer.wte.weight"},
                                               {"position_embd.weight", "transformer.wpe.weight"},
                                               {"output_norm.weight", "transformer.ln_f.weight"},
                                               {"output_norm.bias", "transformer.ln_f.bias"},
                                               {"output.weight", "lm_head.weight"}};
    return family == Family::Llama ? llama : gpt2;
}

std::string layerPrefix(Family family, const std::string& layer) {
    return (family == Family::Llama ? "model.layers." : "transformer.h.") + layer + ".";
}

} // namespace

std::string canonicalName(Family family, const std::string& name) {
    static const std::regex layerPattern(R"(blk\.(\d+)\.([a-z_]+)(\.weight|\.bias))");
    std::smatch m;
    if (std::regex_match(name, m, layerPattern)) {
        for (const auto& p : layerParts(family))
            if (m[2] == p.gguf) return layerPrefix(family, m[1]) + p.canonical + std::string(m[3]);
        return "";
    }
    for (const auto& p : globalNames(family))
        if (name == p.gguf) return p.canonical;
    return "";
}

std::string ggufName(Family family, const std::string& name) {
    static const std::regex llamaPattern(R"(model\.layers\.(\d+)\.(.+)(\.weight|\.bias))");
    static const std::regex gpt2Pattern(R"(transformer\.h\.(\d+)\.(.+)(\.weight|\.bias))");
    std::smatch m;
    if (std::regex_match(name, m, family == Family::Llama ? llamaPattern : gpt2Pattern)) {
        for (const auto& p : layerParts(family))
            if (m[2] == p.canonical) return "blk." + std::string(m[1]) + "." + p.gguf + std::string(m[3]);
        return "";
    }
    for (const auto& p : globalNames(family))
        if (name == p.canonical) return p.gguf;
    return "";
}

std::string ggufArchitecture(const ArchSpec& spec) {
    if (spec.family == Family::Gpt2) return "gpt2";
    return spec.modelType == "qwen2" ? "qwen2" : "llama";
}

} // namespace cwb::gguf
