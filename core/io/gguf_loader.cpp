// Reads GGUF models (llama, qwen2, gpt2 architectures) into the canonical Model.
#include <cstring>
#include <regex>

#include "core/io/gguf_file.h"
#include "core/io/model_format.h"
#include "core/util/error.h"
#include "core/util/mapped_file.h"

namespace cwb {

namespace {

// GGUF tensor name -> canonical name, per family. Per-layer names are "blk.N.<suffix>".
std::string canonicalName(Family family, const std::string& ggufName) {
    static const std::regex layerPattern(R"(blk\.(\d+)\.(.+))");
    std::smatch m;
    if (std::regex_match(ggufName, m, layerPattern)) {
        const int64_t layer = std::stoll(m[1]);
        const std::string rest = m[2];
        const auto dot = rest.find('.');
        const std::string part = rest.substr(0, dot), kind = dot == std::string::npos ? "" : rest.substr(dot);
        if (family == Family::Llama) {
            static const std::map<std::string, std::string> map = {
                {"attn_norm", "input_layernorm"},      {"attn_q", "self_attn.q_proj"},
                {"attn_k", "self_attn.k_proj"},         {"attn_v", "self_attn.v_proj"},
                {"attn_output", "self_attn.o_proj"},    {"ffn_norm", "post_attention_layernorm"},
                {"ffn_gate", "mlp.gate_proj"},          {"ffn_up", "mlp.up_proj"},
                {"ffn_down", "mlp.down_proj"}};
            auto it = map.find(part);
            if (it != map.end()) return names::llamaLayer(layer, it->second + kind);
        } else {
            static const std::map<std::string, std::string> map = {
                {"attn_norm", "ln_1"},        {"attn_qkv", "attn.c_attn"}, {"attn_output", "attn.c_proj"},
                {"ffn_norm", "ln_2"},         {"ffn_up", "mlp.c_fc"},      {"ffn_down", "mlp.c_proj"}};
            auto it = map.find(part);
            if (it != map.end()) return names::gpt2Layer(layer, it->second + kind);
        }
        return "";
    }
    if (family == Family::Llama) {
        if (ggufName == "token_embd.weight") return "model.embed_tokens.weight";
        if (ggufName == "output_norm.weight") return "model.norm.weight";
        if (ggufName == "output.weight") return "lm_head.weight";
        if (ggufName == "rope_freqs.weight") return "rope_freqs.weight";
    } else {
        if (ggufName == "token_embd.weight") return "transformer.wte.weight";
        if (ggufName == "position_embd.weight") return "transformer.wpe.weight";
        if (ggufName == "output_norm.weight") return "transformer.ln_f.weight";
        if (ggufName == "output_norm.bias") return "transformer.ln_f.bias";
        if (ggufName == "output.weight") return "lm_head.weight";
    }
    return "";
}

TokenizerData readTokenizerData(const GgufFile& g) {
    TokenizerData d;
    d.model = g.string("tokenizer.ggml.model");
    d.pre = g.stringOr("tokenizer.ggml.pre", d.model == "gpt2" ? "gpt2" : "");
    for (const auto& t : g.array("tokenizer.ggml.tokens")) {
        if (!t.is_string()) throw Error(g.file->path(), "tokenizer.ggml.tokens holds a non-string");
        d.tokens.push_back(t.get<std::string>());
    }
    if (g.hasKey("tokenizer.ggml.scores"))
        for (const auto& s : g.array("tokenizer.ggml.scores")) d.scores.push_back(s.get<float>());
    if (g.hasKey("tokenizer.ggml.token_type"))
        for (const auto& t : g.array("tokenizer.ggml.token_type")) d.types.push_back(t.get<int32_t>());
    if (g.hasKey("tokenizer.ggml.merges"))
        for (const auto& m : g.array("tokenizer.ggml.merges")) d.merges.push_back(m.get<std::string>());
    d.bos = static_cast<TokenId>(g.integerOr("tokenizer.ggml.bos_token_id", -1));
    d.eos = static_cast<TokenId>(g.integerOr("tokenizer.ggml.eos_token_id", -1));
    d.unk = static_cast<TokenId>(g.integerOr("tokenizer.ggml.unknown_token_id", -1));
    d.addBos = g.hasKey("tokenizer.ggml.add_bos_token") ? g.integer("tokenizer.ggml.add_bos_token") != 0
                                                         : d.model == "llama";
    d.addSpacePrefix = g.hasKey("tokenizer.ggml.add_space_prefix")
                           ? g.integer("tokenizer.ggml.add_space_prefix") != 0
                           : d.model == "llama";
    return d;
}

ArchSpec readSpec(const GgufFile& g) {
    const std::string& path = g.file->path();
    const std::string arch = g.string("general.architecture");
    ArchSpec s;
    s.modelType = arch;
    if (arch == "llama" || arch == "mistral") {
        s.family = Family::Llama;
        s.ropeStyle = RopeStyle::AdjacentPairs;
    } else if (arch == "qwen2") {
        s.family = Family::Llama;
        s.ropeStyle = RopeStyle::Halves;
        s.attentionBias = true;
    } else if (arch == "gpt2") {
        s.family = Family::Gpt2;
    } else {
        throw Error(path, "GGUF architecture '" + arch + "' is not supported (supported: llama, mistral, qwen2, gpt2)");
    }
    const std::string p = arch + ".";
    s.layers = g.integer(p + "block_count");
    s.hidden = g.integer(p + "embedding_length");
    s.ffn = g.integer(p + "feed_forward_length");
    s.heads = g.integer(p + "attention.head_count");
    s.kvHeads = g.integerOr(p + "attention.head_count_kv", s.heads);
    if (s.heads <= 0) throw Error(path, "attention.head_count must be positive");
    s.headDim = g.integerOr(p + "attention.key_length", s.hidden / s.heads);
    s.context = g.integerOr(p + "context_length", 2048);
    if (s.family == Family::Llama) {
        s.normEps = g.numberOr(p + "attention.layer_norm_rms_epsilon", 1e-5);
        s.ropeTheta = g.numberOr(p + "rope.freq_base", 10000.0);
        const std::string scaling = g.stringOr(p + "rope.scaling.type", "none");
        if (scaling == "linear") {
            s.ropeScaling.type = "linear";
            s.ropeScaling.factor = g.number(p + "rope.scaling.factor");
        } else if (scaling != "none") {
            throw Error(path, "rope scaling '" + scaling + "' is not supported (supported: none, linear, and "
                              "Llama 3 frequency factors in rope_freqs.weight)");
        }
        const int64_t ropeDims = g.integerOr(p + "rope.dimension_count", s.headDim);
        if (ropeDims != s.headDim)
            throw Error(path, "partial RoPE (" + std::to_string(ropeDims) + " of " + std::to_string(s.headDim) +
                              " head dimensions) is not supported");
    } else {
        s.normEps = g.numberOr(p + "attention.layer_norm_epsilon", 1e-5);
    }
    return s;
}

class GgufFormat : public ModelFormat {
public:
    std::string id() const override { return "gguf"; }
    std::string displayName() const override { return "GGUF (llama.cpp)"; }

    bool canRead(const std::string& path) const override {
        // A .gguf name is enough: a damaged file then gets the GGUF reader's precise error.
        if (path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) return true;
        FILE* f = std::fopen(path.c_str(), "rb");
        if (!f) return false;
        char magic[4] = {};
        const bool ok = std::fread(magic, 1, 4, f) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
        std::fclose(f);
        return ok;
    }

    std::unique_ptr<Model> read(const std::string& path, const LoadOptions&) const override {
        GgufFile g = GgufFile::open(path);
        auto model = std::make_unique<Model>();
        model->path = path;
        model->spec = readSpec(g);
        Family family = model->spec.family;
        for (const auto& t : g.tensors) {
            std::string name = canonicalName(family, t.name);
            if (name.empty()) throw Error(path, "unexpected tensor '" + t.name + "' for architecture " + model->spec.modelType);
            TensorRecord r;
            r.name = name;
            r.shape.assign(t.ne.rbegin(), t.ne.rend());
            r.type = t.type;
            r.data = g.tensorData(t);
            r.bytes = t.bytes;
            r.file = path;
            model->addTensor(std::move(r));
        }
        model->keepAlive(g.file);
        const std::string embed = family == Family::Llama ? "model.embed_tokens.weight" : "transformer.wte.weight";
        model->spec.vocab = model->tensor(embed).shape.at(0);
        model->spec.tiedEmbeddings = !model->has("lm_head.weight");
        if (family == Family::Llama && model->spec.attentionBias && !model->has(names::llamaLayer(0, "self_attn.q_proj.bias")))
            model->spec.attentionBias = false;
        if (g.hasKey("tokenizer.ggml.model")) {
            model->tokenizer = makeTokenizer(readTokenizerData(g));
            if (model->tokenizer->vocabSize() != model->spec.vocab)
                model->metadata["tokenizer_note"] = "tokenizer has " + std::to_string(model->tokenizer->vocabSize()) +
                                                    " tokens, embedding has " + std::to_string(model->spec.vocab);
        }
        model->metadata["gguf_version"] = std::to_string(g.version);
        model->metadata["name"] = g.stringOr("general.name", "");
        if (g.hasKey("general.file_type")) model->metadata["file_type"] = std::to_string(g.integer("general.file_type"));
        return model;
    }
};

} // namespace

std::unique_ptr<ModelFormat> makeGgufFormat() { return std::make_unique<GgufFormat>(); }

} // namespace cwb
