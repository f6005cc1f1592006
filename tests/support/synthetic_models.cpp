#include "tests/support/synthetic_models.h"

#include <cstring>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/compress/pipeline.h"
#include "core/io/gguf_file.h"
#include "core/io/safetensors.h"
#include "core/model/model.h"
#include "core/runtime/transformer.h"
#include "core/tokenizer/tokenizer.h"

namespace cwb::test {

ArchSpec tinyLlamaSpec() {
    ArchSpec s;
    s.family = Family::Llama;
    s.modelType = "llama";
    s.layers = 2;
    s.hidden = 32;
    s.heads = 4;
    s.kvHeads = 2;
    s.headDim = 8;
    s.ffn = 48;
    s.vocab = 64;
    s.context = 128;
    s.ropeTheta = 10000.0;
    s.ropeStyle = RopeStyle::Halves;
    s.normEps = 1e-5;
    return s;
}

ArchSpec packableLlamaSpec() {
    ArchSpec s = tinyLlamaSpec();
    s.hidden = 64;
    s.headDim = 16;
    s.heads = 4;
    s.kvHeads = 2;
    s.ffn = 128;
    return s;
}

std::shared_ptr<Tokenizer> tinyVocabulary(int64_t size) {
    TokenizerData d;
    d.model = "llama";
    d.tokens = {"<unk>", "<s>", "</s>"};
    for (int64_t i = 3; i < size; ++i) d.tokens.push_back("\xE2\x96\x81t" + std::to_string(i));
    for (size_t i = 0; i < d.tokens.size(); ++i) d.scores.push_back(-float(i));
    d.unk = 0;
    d.bos = 1;
    d.eos = 2;
    return makeTokenizer(d);
}

ArchSpec tinyGpt2Spec() {
    ArchSpec s;
    s.family = Family::Gpt2;
    s.modelType = "gpt2";
    s.layers = 2;
    s.hidden = 32;
    s.heads = 4;
    s.kvHeads = 4;
    s.headDim = 8;
    s.ffn = 64;
    s.vocab = 64;
    s.context = 64;
    s.normEps = 1e-5;
    s.tiedEmbeddings = true;
    return s;
}

static at::Tensor roundTo(const at::Tensor& t, ggml::Type storage) {
    if (storage == ggml::Type::F16) return t.to(at::kHalf).to(at::kFloat);
    if (storage == ggml::Type::BF16) return t.to(at::kBFloat16).to(at::kFloat);
    return t;
}

WeightMap randomWeights(const ArchSpec& s, uint64_t seed, ggml::Type storage) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    WeightMap w;
    auto randn = [&](std::vector<int64_t> shape, double scale) {
        return roundTo(at::randn(shape, gen, at::kFloat) * scale, storage);
    };
    auto norm = [&](int64_t n) { return roundTo(1.0 + 0.1 * at::randn({n}, gen, at::kFloat), storage); };
    const int64_t q = s.heads * s.headDim, kv = s.kvHeads * s.headDim;
    if (s.family == Family::Llama) {
        w["model.embed_tokens.weight"] = randn({s.vocab, s.hidden}, 0.5);
        for (int64_t l = 0; l < s.layers; ++l) {
            auto n = [&](const char* suffix) { return names::llamaLayer(l, suffix); };
            w[n("input_layernorm.weight")] = norm(s.hidden);
            w[n("self_attn.q_proj.weight")] = randn({q, s.hidden}, 0.2);
            w[n("self_attn.k_proj.weight")] = randn({kv, s.hidden}, 0.2);
            w[n("self_attn.v_proj.weight")] = randn({kv, s.hidden}, 0.2);
            w[n("self_attn.o_proj.weight")] = randn({s.hidden, q}, 0.2);
            if (s.attentionBias) {
                w[n("self_attn.q_proj.bias")] = randn({q}, 0.1);
                w[n("self_attn.k_proj.bias")] = randn({kv}, 0.1);
                w[n("self_attn.v_proj.bias")] = randn({kv}, 0.1);
            }
            w[n("post_attention_layernorm.weight")] = norm(s.hidden);
            w[n("mlp.gate_proj.weight")] = randn({s.ffn, s.hidden}, 0.2);
            w[n("mlp.up_proj.weight")] = randn({s.ffn, s.hidden}, 0.2);
            w[n("mlp.down_proj.weight")] = randn({s.hidden, s.ffn}, 0.2);
        }
        w["model.norm.weight"] = norm(s.hidden);
        if (!s.tiedEmbeddings) w["lm_head.weight"] = randn({s.vocab, s.hidden}, 0.3);
    } else {
        w["transformer.wte.weight"] = randn({s.vocab, s.hidden}, 0.5);
        w["transformer.wpe.weight"] = randn({s.context, s.hidden}, 0.1);
        for (int64_t l = 0; l < s.layers; ++l) {
            auto n = [&](const char* suffix) { return names::gpt2Layer(l, suffix); };
            w[n("ln_1.weight")] = norm(s.hidden);
            w[n("ln_1.bias")] = randn({s.hidden}, 0.1);
            w[n("attn.c_attn.weight")] = randn({3 * s.hidden, s.hidden}, 0.2);
            w[n("attn.c_attn.bias")] = randn({3 * s.hidden}, 0.1);
            w[n("attn.c_proj.weight")] = randn({s.hidden, s.hidden}, 0.2);
            w[n("attn.c_proj.bias")] = randn({s.hidden}, 0.1);
            w[n("ln_2.weight")] = norm(s.hidden);
            w[n("ln_2.bias")] = randn({s.hidden}, 0.1);
            w[n("mlp.c_fc.weight")] = randn({s.ffn, s.hidden}, 0.2);
            w[n("mlp.c_fc.bias")] = randn({s.ffn}, 0.1);
            w[n("mlp.c_proj.weight")] = randn({s.hidden, s.ffn}, 0.2);
            w[n("mlp.c_proj.bias")] = randn({s.hidden}, 0.1);
        }
        w["transformer.ln_f.weight"] = norm(s.hidden);
        w["transformer.ln_f.bias"] = randn({s.hidden}, 0.1);
    }
    return w;
}

static std::vector<uint8_t> bytesOf(const at::Tensor& t, ggml::Type storage) {
    at::Tensor c = t.contiguous();
    if (storage != ggml::Type::F32 && storage != ggml::Type::F16 && storage != ggml::Type::BF16) {
        std::vector<uint8_t> out(ggml::rowBytes(storage, c.size(-1)) * static_cast<size_t>(c.numel() / c.size(-1)));
        ggml::quantize(storage, c.data_ptr<float>(), out.data(), c.numel());
        return out;
    }
    if (storage == ggml::Type::F16) c = c.to(at::kHalf);
    if (storage == ggml::Type::BF16) c = c.to(at::kBFloat16);
    const uint8_t* p = static_cast<const uint8_t*>(c.data_ptr());
    return std::vector<uint8_t>(p, p + c.numel() * c.element_size());
}

static bool isGpt2Conv1d(const std::string& name) {
    for (const char* s : {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"})
        if (name.size() > std::strlen(s) && name.compare(name.size() - std::strlen(s), std::strlen(s), s) == 0) return true;
    return false;
}

WeightMap storedWeights(const WeightMap& weights, ggml::Type storage) {
    WeightMap out;
    for (const auto& [name, t] : weights) {
        if (t.dim() < 2 || storage == ggml::Type::F32) {
            out[name] = t;
            continue;
        }
        std::vector<uint8_t> bytes = bytesOf(t, storage);
        at::Tensor back = at::empty(t.sizes(), at::kFloat);
        ggml::dequantize(storage, bytes.data(), back.data_ptr<float>(), t.numel());
        out[name] = back;
    }
    return out;
}

void writeHfFolder(const std::string& folder, const ArchSpec& s, const WeightMap& weights, ggml::Type storage, int shards) {
    nlohmann::json config;
    if (s.family == Family::Llama) {
        config = {{"model_type", s.modelType}, {"hidden_size", s.hidden}, {"intermediate_size", s.ffn},
                  {"num_hidden_layers", s.layers}, {"num_attention_heads", s.heads},
                  {"num_key_value_heads", s.kvHeads}, {"vocab_size", s.vocab},
                  {"max_position_embeddings", s.context}, {"rms_norm_eps", s.normEps},
                  {"rope_theta", s.ropeTheta}, {"tie_word_embeddings", s.tiedEmbeddings},
                  {"architectures", {s.modelType == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}}};
        // Without it a llama folder's q/k/v biases were read and ignored (now refused as unused tensors).
        if (s.attentionBias) config["attention_bias"] = true;
        if (s.ropeScaling.type == "llama3")
            config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", s.ropeScaling.factor},
                                      {"low_freq_factor", s.ropeScaling.lowFreqFactor},
                                      {"high_freq_factor", s.ropeScaling.highFreqFactor},
                                      {"original_max_position_embeddings", s.ropeScaling.originalContext}};
        if (s.ropeScaling.type == "yarn")
            config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", s.ropeScaling.factor},
                                      {"original_max_position_embeddings", s.ropeScaling.originalContext},
                                      {"beta_fast", s.ropeScaling.betaFast}, {"beta_slow", s.ropeScaling.betaSlow},
                                      {"attention_factor", s.ropeScaling.attentionFactor}, {"truncate", s.ropeScaling.truncate}};
    } else {
        config = {{"model_type", "gpt2"}, {"n_embd", s.hidden}, {"n_layer", s.layers}, {"n_head", s.heads},
                  {"n_inner", s.ffn}, {"vocab_size", s.vocab}, {"n_positions", s.context},
                  {"layer_norm_epsilon", s.normEps}, {"architectures", {"GPT2LMHeadModel"}}};
    }
    std::ofstream(folder + "/config.json") << config.dump(2);

    std::vector<SafetensorsWriter> writers(static_cast<size_t>(shards));
    nlohmann::json weightMap = nlohmann::json::object();
    size_t i = 0;
    for (const auto& [name, tensor] : weights) {
        std::string fileName = shards == 1 ? "model.safetensors"
                                           : "model-0000" + std::to_string(i % shards + 1) + "-of-0000" +
                                                 std::to_string(shards) + ".safetensors";
        std::string key = name;
        at::Tensor t = tensor;
        if (s.family == Family::Gpt2) {
            key = name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;   // as openai-community/gpt2 names them
            if (isGpt2Conv1d(name)) t = t.t().contiguous();
        }
        std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
        writers[i % static_cast<size_t>(shards)].add(key, storage, shape, bytesOf(t, storage));
        weightMap[key] = fileName;
        ++i;
    }
    if (shards == 1) {
        writers[0].write(folder + "/model.safetensors");
    } else {
        for (int k = 0; k < shards; ++k)
            writers[static_cast<size_t>(k)].write(folder + "/model-0000" + std::to_string(k + 1) + "-of-0000" +
                                                  std::to_string(shards) + ".safetensors");
        std::ofstream(folder + "/model.safetensors.index.json")
            << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", weightMap}}.dump(2);
    }
}

// llama.cpp's converter reorders Q/K rows so that RoPE on adjacent pairs equals HF's RoPE on halves.
// As llama.cpp's converter: the rows of q and k (weights and biases) from rotate-half order to adjacent pairs.
static at::Tensor permuteForAdjacentPairs(const at::Tensor& w, int64_t heads) {
    const int64_t out = w.size(0), in = w.dim() == 2 ? w.size(1) : 1;
    return w.reshape({heads, 2, out / heads / 2, in}).transpose(1, 2).reshape(w.sizes()).contiguous();
}

void writeGguf(const std::string& path, const ArchSpec& s, const WeightMap& weights, ggml::Type storage) {
    GgufWriter g;
    const std::string arch = s.family == Family::Gpt2 ? "gpt2" : s.modelType;
    g.addString("general.architecture", arch);
    g.addString("general.name", "synthetic");
    g.addUInt32(arch + ".block_count", static_cast<uint32_t>(s.layers));
    g.addUInt32(arch + ".embedding_length", static_cast<uint32_t>(s.hidden));
    g.addUInt32(arch + ".feed_forward_length", static_cast<uint32_t>(s.ffn));
    g.addUInt32(arch + ".attention.head_count", static_cast<uint32_t>(s.heads));
    g.addUInt32(arch + ".attention.head_count_kv", static_cast<uint32_t>(s.kvHeads));
    g.addUInt32(arch + ".context_length", static_cast<uint32_t>(s.context));
    if (s.family == Family::Llama) {
        g.addFloat32(arch + ".attention.layer_norm_rms_epsilon", static_cast<float>(s.normEps));
        g.addFloat32(arch + ".rope.freq_base", static_cast<float>(s.ropeTheta));
        g.addUInt32(arch + ".rope.dimension_count", static_cast<uint32_t>(s.headDim));
    } else {
        g.addFloat32(arch + ".attention.layer_norm_epsilon", static_cast<float>(s.normEps));
    }
    static const std::map<std::string, std::string> llamaParts = {
        {"input_layernorm", "attn_norm"}, {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"},
        {"self_attn.v_proj", "attn_v"}, {"self_attn.o_proj", "attn_output"}, {"post_attention_layernorm", "ffn_norm"},
        {"mlp.gate_proj", "ffn_gate"}, {"mlp.up_proj", "ffn_up"}, {"mlp.down_proj", "ffn_down"}};
    static const std::map<std::string, std::string> gpt2Parts = {
        {"ln_1", "attn_norm"}, {"attn.c_attn", "attn_qkv"}, {"attn.c_proj", "attn_output"},
        {"ln_2", "ffn_norm"}, {"mlp.c_fc", "ffn_up"}, {"mlp.c_proj", "ffn_down"}};
    static const std::map<std::string, std::string> globals = {
        {"model.embed_tokens.weight", "token_embd.weight"}, {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"}, {"transformer.wte.weight", "token_embd.weight"},
        {"transformer.wpe.weight", "position_embd.weight"}, {"transformer.ln_f.weight", "output_norm.weight"},
        {"transformer.ln_f.bias", "output_norm.bias"}};
    const std::string layerPrefix = s.family == Family::Llama ? "model.layers." : "transformer.h.";
    for (const auto& [name, tensor] : weights) {
        std::string ggufName;
        at::Tensor t = tensor;
        if (globals.count(name)) {
            ggufName = globals.at(name);
        } else {
            const std::string rest = name.substr(layerPrefix.size());
            const std::string layer = rest.substr(0, rest.find('.'));
            const std::string tail = rest.substr(layer.size() + 1);
            const std::string part = tail.substr(0, tail.rfind('.')), kind = tail.substr(tail.rfind('.'));
            const auto& parts = s.family == Family::Llama ? llamaParts : gpt2Parts;
            ggufName = "blk." + layer + "." + parts.at(part) + kind;
            if (s.family == Family::Llama && s.ropeStyle == RopeStyle::Halves && s.modelType != "qwen2") {
                if (part == "self_attn.q_proj") t = permuteForAdjacentPairs(t, s.heads);
                if (part == "self_attn.k_proj") t = permuteForAdjacentPairs(t, s.kvHeads);
            }
        }
        // Norms and biases stay F32, as llama.cpp writes them.
        ggml::Type type = t.dim() >= 2 ? storage : ggml::Type::F32;
        std::vector<int64_t> ne(t.sizes().rbegin(), t.sizes().rend());
        g.addTensor(ggufName, type, ne, bytesOf(t, type));
    }
    g.write(path);
}

std::unique_ptr<Model> compressWithRecipe(const Model& base, const std::string& recipe) {
    const at::Tensor windows = at::randint(3, base.spec.vocab, {4, 16}, at::TensorOptions().dtype(at::kLong));
    return std::move(compressModel(base, Recipe::fromJson(nlohmann::json::parse(recipe), "test recipe"), windows).model);
}

at::Tensor probeLogits(const Model& model) {
    Transformer runtime(model);
    return runtime.forward(at::tensor(std::vector<int64_t>{1, 5, 9, 17, 33, 2, 40, 63}, at::kLong).unsqueeze(0));
}

double maxRelativeError(const at::Tensor& a, const at::Tensor& b) {
    return (a - b).abs().max().item<double>() / std::max(1e-12, b.abs().max().item<double>());
}

} // namespace cwb::test
