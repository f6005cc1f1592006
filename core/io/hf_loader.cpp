// Reads Hugging Face model folders: config.json plus model.safetensors or index-described shards.
#include <cmath>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <map>
#include <set>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "core/compress/compressed_layers.h"
#include "core/export/ct_layout.h"
#include "core/export/quant_layouts.h"
#include "core/io/model_format.h"
#include "core/io/safetensors.h"
#include "core/util/error.h"
#include "core/util/mapped_file.h"

namespace cwb {

namespace {

bool isFile(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool isDir(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

nlohmann::json readJson(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error(path, "cannot open");
    try {
        return nlohmann::json::parse(in);
    } catch (const std::exception& e) {
        throw Error(path, std::string("is not valid JSON: ") + e.what());
    }
}

int64_t intField(const nlohmann::json& j, const std::string& key, const std::string& file) {
    if (!j.contains(key) || !j[key].is_number_integer()) throw Error(file, "'" + key + "' is missing or not an integer");
    return j[key].get<int64_t>();
}
// Absent or null: the fallback. A value of another type is refused, not replaced by the default (a context of 64.0 or a
// theta of "50000" ran as 2048 and 10000); integers may be written as whole floats, as Python's json writes them.
int64_t intFieldOr(const nlohmann::json& j, const std::string& key, int64_t fallback, const std::string& file) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    const nlohmann::json& v = j[key];
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
        const double d = v.get<double>();
        if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.0e15) return int64_t(d);
    }
    throw Error(file, "'" + key + "' is not an integer (" + v.dump() + ")");
}
double numFieldOr(const nlohmann::json& j, const std::string& key, double fallback, const std::string& file) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number()) throw Error(file, "'" + key + "' is not a number (" + j[key].dump() + ")");
    return j[key].get<double>();
}

ArchSpec readConfigFields(const nlohmann::json& c, const std::string& file) {
    ArchSpec s;
    if (!c.contains("model_type") || !c["model_type"].is_string()) throw Error(file, "'model_type' is missing");
    s.modelType = c["model_type"].get<std::string>();
    if (s.modelType == "llama" || s.modelType == "mistral" || s.modelType == "qwen2") {
        s.family = Family::Llama;
        s.ropeStyle = RopeStyle::Halves;
        s.hidden = intField(c, "hidden_size", file);
        s.ffn = intField(c, "intermediate_size", file);
        s.layers = intField(c, "num_hidden_layers", file);
        s.heads = intField(c, "num_attention_heads", file);
        s.kvHeads = intFieldOr(c, "num_key_value_heads", s.heads, file);
        if (s.heads <= 0) throw Error(file, "num_attention_heads must be positive");
        s.headDim = intFieldOr(c, "head_dim", s.hidden / s.heads, file);
        s.vocab = intField(c, "vocab_size", file);
        s.context = intFieldOr(c, "max_position_embeddings", 2048, file);
        s.normEps = numFieldOr(c, "rms_norm_eps", 1e-6, file);
        // transformers 5 writes theta and scaling into "rope_parameters"; earlier releases at the top level.
        const nlohmann::json none = nlohmann::json::object();
        for (const char* key : {"rope_parameters", "rope_scaling"})
            if (c.contains(key) && !c[key].is_null() && !c[key].is_object())
                throw Error(file, std::string("'") + key + "' is not an object (" + c[key].dump() + ")");
        // As transformers 5 takes them: the RoPE dict is rope_scaling when it is a non-empty object, else
        // rope_parameters; theta comes from that dict before the top-level rope_theta.
        const bool scalingGiven = c.contains("rope_scaling") && c["rope_scaling"].is_object() && !c["rope_scaling"].empty();
        const nlohmann::json& rope = scalingGiven ? c["rope_scaling"]
                                     : c.contains("rope_parameters") && c["rope_parameters"].is_object() ? c["rope_parameters"] : none;
        for (const nlohmann::json* holder : {&c, &rope})   // transformers fails on a null theta; not the default here either
            if (holder->contains("rope_theta") && (*holder)["rope_theta"].is_null()) throw Error(file, "'rope_theta' is null");
        s.ropeTheta = numFieldOr(rope, "rope_theta", numFieldOr(c, "rope_theta", 10000.0, file), file);
        if (!(s.ropeTheta > 0) || !std::isfinite(s.ropeTheta)) throw Error(file, "rope_theta must be a positive number");
        s.tiedEmbeddings = c.value("tie_word_embeddings", false);
        s.attentionBias = s.modelType == "qwen2" || c.value("attention_bias", false);
        // What the forward pass does not compute is refused, not ignored: it would change what the model computes.
        const std::string act = c.value("hidden_act", std::string("silu"));
        if (act != "silu" && act != "swish")
            throw Error(file, "hidden_act '" + act + "' is not supported (the Llama family here runs SiLU)");
        if (c.value("mlp_bias", false)) throw Error(file, "mlp_bias is not supported (MLP layers without biases)");
        const nlohmann::json* scaling = rope.contains("rope_type") || rope.contains("type") ? &rope : nullptr;
        // llama3 and yarn: a top-level original_max_position_embeddings first (transformers gives it priority), then
        // the dict's, then max_position_embeddings.
        auto originalContext = [&](const nlohmann::json& r) {
            for (const nlohmann::json* holder : {&c, &r})
                if (holder->contains("original_max_position_embeddings") && (*holder)["original_max_position_embeddings"].is_null())
                    throw Error(file, "rope scaling: 'original_max_position_embeddings' is null");
            const int64_t original = intFieldOr(c, "original_max_position_embeddings",
                                                intFieldOr(r, "original_max_position_embeddings", s.context, file), file);
            if (original <= 0) throw Error(file, "rope scaling needs a positive original_max_position_embeddings");
            return original;
        };
        if (scaling) {
            const auto& r = *scaling;
            // "rope_type", or the older "type" (transformers reads either).
            const char* typeKey = r.contains("rope_type") ? "rope_type" : r.contains("type") ? "type" : nullptr;
            if (typeKey && !r[typeKey].is_string())
                throw Error(file, std::string("rope scaling '") + typeKey + "' is not a string (" + r[typeKey].dump() + ")");
            const std::string type = typeKey ? r[typeKey].get<std::string>() : "default";
            auto positive = [&](const char* key, double fallback) {
                if (r.contains(key) && !r[key].is_number()) throw Error(file, std::string("rope scaling '") + key + "' is not a number");
                const double v = numFieldOr(r, key, fallback, file);
                if (!(v > 0) || !std::isfinite(v)) throw Error(file, std::string("rope scaling '") + key + "' must be positive");
                return v;
            };
            if (type == "llama3") {
                s.ropeScaling.type = "llama3";
                s.ropeScaling.factor = positive("factor", 8.0);
                s.ropeScaling.lowFreqFactor = positive("low_freq_factor", 1.0);
                s.ropeScaling.highFreqFactor = positive("high_freq_factor", 4.0);
                s.ropeScaling.originalContext = originalContext(r);
                if (s.ropeScaling.highFreqFactor <= s.ropeScaling.lowFreqFactor || s.ropeScaling.originalContext <= 0)
                    throw Error(file, "llama3 rope scaling needs high_freq_factor > low_freq_factor and a positive "
                                      "original_max_position_embeddings");
            } else if (type == "linear") {
                s.ropeScaling.type = "linear";
                s.ropeScaling.factor = positive("factor", 1.0);
            } else if (type == "yarn") {
                // As transformers 5 reads it: a factor of null is the ratio of the two contexts (transformers refuses
                // an absent one; taken the same way here); the attention factor given, or from mscale / mscale_all_dim.
                RopeScaling& y = s.ropeScaling;
                y.type = "yarn";
                auto given = [&](const char* key) { return r.contains(key) && !r[key].is_null(); };
                y.originalContext = originalContext(r);
                y.factor = given("factor") ? positive("factor", 1.0) : double(s.context) / double(y.originalContext);
                if (!(y.factor > 0)) throw Error(file, "yarn rope scaling: factor must be positive");
                y.betaFast = given("beta_fast") && r["beta_fast"] != 0 ? positive("beta_fast", 32.0) : 32.0;
                y.betaSlow = given("beta_slow") && r["beta_slow"] != 0 ? positive("beta_slow", 1.0) : 1.0;
                if (given("truncate") && !r["truncate"].is_boolean()) throw Error(file, "rope scaling 'truncate' is not true or false");
                // Absent: true; null: false, as transformers' rope_parameters.get("truncate", True) gives None.
                y.truncate = r.contains("truncate") ? given("truncate") && r["truncate"].get<bool>() : true;
                // 0 counts as not given (transformers: "if mscale and mscale_all_dim").
                const double mscale = given("mscale") && r["mscale"] != 0 ? positive("mscale", 1.0) : 0.0;
                const double mscaleAllDim = given("mscale_all_dim") && r["mscale_all_dim"] != 0 ? positive("mscale_all_dim", 1.0) : 0.0;
                y.attentionFactor = given("attention_factor") ? positive("attention_factor", 1.0)
                                    : mscale > 0 && mscaleAllDim > 0 ? yarnMscale(y.factor, mscale) / yarnMscale(y.factor, mscaleAllDim)
                                                                     : yarnMscale(y.factor);
                // The context the scaling was made for (vLLM takes the same): the original one times the factor.
                const double scaled = std::floor(y.factor * double(y.originalContext));
                if (!(scaled <= double(1LL << 31)))
                    throw Error(file, "yarn rope scaling: factor " + std::to_string(y.factor) + " times the original context " +
                                          std::to_string(y.originalContext) + " is more positions than cwb addresses (2^31)");
                s.context = std::max(s.context, int64_t(scaled));
            } else if (type != "default" && type != "none") {
                throw Error(file, "rope_scaling type '" + type + "' is not supported (supported: llama3, linear, yarn)");
            }
        }
        for (const nlohmann::json* holder : {&c, &rope, scaling ? scaling : &none})
            if (holder->contains("partial_rotary_factor") && numFieldOr(*holder, "partial_rotary_factor", 1.0, file) != 1.0)
                throw Error(file, "partial_rotary_factor other than 1 (RoPE on part of each head) is not supported");
        // Sliding-window attention is not computed: within the window it equals full attention, so the context is
        // limited to the window (Mistral v0.1: 4096), and longer inputs are refused rather than computed otherwise.
        const bool sliding = s.modelType == "mistral" || c.value("use_sliding_window", false);
        if (sliding && c.contains("sliding_window") && c["sliding_window"].is_number_integer()) {
            const int64_t window = c["sliding_window"].get<int64_t>();
            if (window > 0 && window < s.context) {
                s.declaredContext = s.context;
                s.slidingFromLayer = s.modelType == "qwen2" ? c.value("max_window_layers", int64_t(0)) : 0;
                s.context = s.slidingWindow = window;
            }
        }
    } else if (s.modelType == "gpt2") {
        s.family = Family::Gpt2;
        s.hidden = intField(c, "n_embd", file);
        s.layers = intField(c, "n_layer", file);
        s.heads = intField(c, "n_head", file);
        if (s.heads <= 0) throw Error(file, "n_head must be positive");
        if (s.hidden % s.heads != 0)
            throw Error(file, "n_embd " + std::to_string(s.hidden) + " is not a multiple of n_head " + std::to_string(s.heads));
        s.kvHeads = s.heads;
        s.headDim = s.hidden / s.heads;
        s.ffn = intFieldOr(c, "n_inner", 4 * s.hidden, file);
        s.vocab = intField(c, "vocab_size", file);
        s.context = intFieldOr(c, "n_positions", 1024, file);
        s.normEps = numFieldOr(c, "layer_norm_epsilon", 1e-5, file);
        s.tiedEmbeddings = c.value("tie_word_embeddings", true);
        const std::string act = c.value("activation_function", std::string("gelu_new"));
        if (act != "gelu_new" && act != "gelu_pytorch_tanh")
            throw Error(file, "activation_function '" + act + "' is not supported (GPT-2 here runs the tanh GELU, gelu_new)");
        if (c.value("scale_attn_by_inverse_layer_idx", false))
            throw Error(file, "scale_attn_by_inverse_layer_idx is not supported");
        if (!c.value("scale_attn_weights", true))   // scores not divided by sqrt(head_dim): not what the forward pass computes
            throw Error(file, "scale_attn_weights: false is not supported (attention scores are divided by the square root of "
                              "the head dimension)");
    } else {
        throw Error(file, "model_type '" + s.modelType + "' is not supported (supported: llama, mistral, qwen2, gpt2)");
    }
    nlohmann::json tokenIds = nlohmann::json::object();
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
        if (!c.contains(key)) continue;
        const nlohmann::json& v = c[key];
        const bool ids = v.is_array() && std::all_of(v.begin(), v.end(), [](const nlohmann::json& e) { return e.is_number_integer(); });
        if (v.is_null() || v.is_number_integer() || ids) tokenIds[key] = v;   // anything else is no id to carry over
    }
    s.configTokenIds = tokenIds.dump();
    return s;
}

ArchSpec readConfig(const nlohmann::json& c, const std::string& file) {
    try {
        return readConfigFields(c, file);
    } catch (const nlohmann::json::exception& e) {   // a field of the wrong JSON type (tie_word_embeddings: "true")
        throw Error(file, std::string("has a field of the wrong type: ") + e.what());
    }
}

// GPT-2 checkpoints name tensors with or without the "transformer." prefix and store Conv1D weights [in, out].
std::string gpt2Canonical(const std::string& name, bool* conv1d, bool* skip) {
    *conv1d = false;
    *skip = false;
    std::string n = name;
    if (n.rfind("transformer.", 0) != 0 && n != "lm_head.weight") n = "transformer." + n;
    auto endsWith = [&](const char* s) {
        const size_t len = std::strlen(s);
        return n.size() >= len && n.compare(n.size() - len, len, s) == 0;
    };
    if (endsWith(".attn.bias") || endsWith(".attn.masked_bias")) *skip = true;   // causal-mask buffers
    *conv1d = endsWith("attn.c_attn.weight") || endsWith("attn.c_proj.weight") || endsWith("mlp.c_fc.weight") ||
              endsWith("mlp.c_proj.weight");
    return n;
}

// quantization_config of a GPTQ, AWQ or compressed-tensors checkpoint (empty method: a dense checkpoint).
struct QuantizedCheckpoint {
    std::string method;   // "gptq", "awq" or "compressed-tensors"
    int bits = 4;
    int64_t groupSize = 128;
    bool symmetric = true;
    nlohmann::json config;   // compressed-tensors: the whole quantization_config (schemes per config group)
};

// What cwb runs of compressed-tensors: pack-, float-, naive- and int-quantized weights, no sparsity compression,
// transforms or quantized KV cache (each of which would change what the weights mean if it were ignored).
void checkCompressedTensorsFormat(const nlohmann::json& holder, const std::string& file) {
    static const std::set<std::string> formats = {"pack-quantized", "float-quantized", "naive-quantized",
                                                  "int-quantized", "mixed-precision", "dense"};
    const std::string format = holder.contains("format") && holder["format"].is_string() ? holder["format"].get<std::string>() : "";
    if (!format.empty() && !formats.count(format))
        throw Error(file, "compressed-tensors format '" + format + "' is not supported (supported: pack-quantized, "
                          "float-quantized, naive-quantized, int-quantized, mixed-precision)");
}

void checkCompressedTensorsConfig(const nlohmann::json& qc, const std::string& file) {
    checkCompressedTensorsFormat(qc, file);
    const std::string status = qc.contains("quantization_status") && qc["quantization_status"].is_string()
                                   ? qc["quantization_status"].get<std::string>() : "compressed";
    if (status != "compressed")
        throw Error(file, "compressed-tensors quantization_status '" + status + "' is not supported (compressed)");
    if (qc.contains("sparsity_config") && qc["sparsity_config"].is_object() &&
        qc["sparsity_config"].value("format", "dense") != "dense")
        throw Error(file, "compressed-tensors sparsity format '" + qc["sparsity_config"].value("format", "") +
                          "' is not supported (sparse weights must be stored dense)");
    // compressed-tensors writes {} for "none" in some keys and null in others.
    for (const char* key : {"kv_cache_scheme", "transform_config", "moe_sparsity_config"})
        if (qc.contains(key) && !qc[key].is_null() && !(qc[key].is_object() && qc[key].empty()))
            throw Error(file, std::string("compressed-tensors ") + key + " is not supported");
    if (qc.contains("config_groups") && !qc["config_groups"].is_object())
        throw Error(file, "compressed-tensors config_groups must be an object");
    if (qc.contains("config_groups"))
        for (const auto& [name, group] : qc["config_groups"].items()) {
            if (!group.is_object()) throw Error(file, "compressed-tensors config group '" + name + "' is not an object");
            checkCompressedTensorsFormat(group, file);   // per group under mixed-precision
            const bool weights = group.contains("weights") && group["weights"].is_object();
            const bool inputs = group.contains("input_activations") && !group["input_activations"].is_null();
            if (!weights && inputs)
                throw Error(file, "compressed-tensors config group '" + name + "' quantizes activations without weights, "
                                  "which cwb does not run");
        }
}

QuantizedCheckpoint readQuantizationConfig(const nlohmann::json& c, const std::string& file) {
    QuantizedCheckpoint q;
    // Older llm-compressor releases wrote the same object as "compression_config".
    const char* key = c.contains("quantization_config") ? "quantization_config" : c.contains("compression_config") ? "compression_config" : nullptr;
    if (!key) return q;
    const auto& qc = c[key];
    if (!qc.is_object()) throw Error(file, std::string(key) + " is not an object");
    q.method = qc.value("quant_method", "");
    if (q.method == "compressed-tensors") {
        try {
            checkCompressedTensorsConfig(qc, file);
        } catch (const nlohmann::json::exception& e) {   // a field of the wrong JSON type
            throw Error(file, std::string("malformed compressed-tensors quantization_config (") + e.what() + ")");
        }
        q.config = qc;
        return q;
    }
    if (q.method != "gptq" && q.method != "awq")
        throw Error(file, "quantization_config.quant_method '" + q.method + "' is not supported (supported: gptq, awq, compressed-tensors)");
    q.bits = int(intFieldOr(qc, "bits", 4, file));
    q.groupSize = intFieldOr(qc, "group_size", 128, file);
    q.symmetric = qc.value("sym", q.method == "gptq");
    if (q.method == "gptq" && qc.value("checkpoint_format", "gptq") != "gptq")
        throw Error(file, "GPTQ checkpoint_format '" + qc.value("checkpoint_format", "") + "' is not supported (supported: gptq)");
    if (q.method == "awq" && qc.value("version", "gemm") != "gemm")
        throw Error(file, "AWQ version '" + qc.value("version", "") + "' is not supported (supported: gemm)");
    return q;
}

bool packedPart(const std::string& name) {
    for (const char* s : {".qweight", ".qzeros", ".scales", ".g_idx"}) {
        const size_t n = std::strlen(s);
        if (name.size() > n && name.compare(name.size() - n, n, s) == 0) return true;
    }
    return false;
}

at::Tensor entryTensor(const SafetensorsEntry& e, const std::string& file) {
    at::ScalarType type;
    switch (e.type) {
    case ggml::Type::I8: type = e.dtype == "I8" ? at::kChar : at::kByte; break;   // U8 and F8_E4M3 codes: bytes
    case ggml::Type::I64: type = at::kLong; break;
    case ggml::Type::I32: type = at::kInt; break;
    case ggml::Type::F16: type = at::kHalf; break;
    case ggml::Type::F32: type = at::kFloat; break;
    case ggml::Type::BF16: type = at::kBFloat16; break;
    default: throw Error(file, "tensor '" + e.name + "' has dtype " + e.dtype + ", unexpected in a quantized layer");
    }
    return at::from_blob(const_cast<uint8_t*>(e.data), e.shape, at::TensorOptions().dtype(type)).clone();
}

void addPackedLayer(Model& model, const QuantizedCheckpoint& q, const std::string& layer,
                    const std::map<std::string, at::Tensor>& parts, const std::string& folder) {
    auto part = [&](const char* name) {
        auto it = parts.find(name);
        if (it == parts.end()) throw Error(folder, "quantized layer '" + layer + "' has no '" + name + "' tensor");
        return it->second;
    };
    layouts::PackedLayer p;
    p.qweight = part("qweight");
    p.qzeros = part("qzeros");
    p.scales = part("scales");
    if (p.scales.dim() != 2 || p.qweight.dim() != 2) throw Error(folder, "quantized layer '" + layer + "' has tensors of the wrong rank");
    // Packed words and group indices are integers: a float tensor there is not read by its bits (nor converted).
    for (const auto& [tensor, what] : {std::pair<const at::Tensor&, const char*>{p.qweight, "qweight"}, {p.qzeros, "qzeros"}})
        if (tensor.scalar_type() != at::kInt) throw Error(folder, "quantized layer '" + layer + "': " + what + " must be I32");
    if (!at::isFloatingType(p.scales.scalar_type())) throw Error(folder, "quantized layer '" + layer + "': scales must be F16, BF16 or F32");
    const int64_t rows = p.scales.size(1);
    quant::QuantizedWeight w;
    if (q.method == "gptq") {
        // in_features: g_idx has one entry per input; without it, qweight's words are taken to be full (GPTQModel
        // zero-fills a last partial word, and always writes g_idx). unpackGptq checks the shapes either way.
        if (parts.count("g_idx")) {
            p.gIdx = part("g_idx");
            if (p.gIdx.scalar_type() != at::kInt || p.gIdx.dim() != 1 || p.gIdx.numel() == 0)
                throw Error(folder, "quantized layer '" + layer + "': g_idx must be a non-empty 1-D I32 tensor");
        }
        const int64_t cols = p.gIdx.defined() ? p.gIdx.size(0) : q.bits > 0 ? p.qweight.size(0) * 32 / q.bits : 0;
        if (cols <= 0) throw Error(folder, "quantized layer '" + layer + "' has no input features");
        w = layouts::unpackGptq(p, q.bits, q.groupSize, q.symmetric, rows, cols, folder + " (" + layer + ")");
    } else {
        if (q.bits != 4) throw Error(folder, "AWQ checkpoints with " + std::to_string(q.bits) + " bits are not supported (4)");
        w = layouts::unpackAwq(p, q.groupSize, rows, p.qweight.size(0), folder + " (" + layer + ")");
    }
    model.addPackedLayer(layer, std::make_shared<IntLinear>(std::move(w), at::Tensor(), q.method), folder);
}

class HfFormat : public ModelFormat {
public:
    std::string id() const override { return "hf"; }
    std::string displayName() const override { return "Hugging Face folder (safetensors)"; }

    bool canRead(const std::string& path) const override {
        return isDir(path) && isFile(path + "/config.json");
    }

    std::unique_ptr<Model> read(const std::string& folder, const LoadOptions&) const override {
        const std::string configPath = folder + "/config.json";
        auto model = std::make_unique<Model>();
        model->path = folder;
        const nlohmann::json configJson = readJson(configPath);
        model->spec = readConfig(configJson, configPath);
        // Said untied, a folder without lm_head.weight is not a tied model: transformers would start a new random head.
        const bool saidUntied = configJson.contains("tie_word_embeddings") && configJson["tie_word_embeddings"].is_boolean() &&
                                !configJson["tie_word_embeddings"].get<bool>();

        std::vector<std::string> shards;
        const std::string single = folder + "/model.safetensors", index = folder + "/model.safetensors.index.json";
        if (isFile(index)) {
            nlohmann::json j = readJson(index);
            if (!j.contains("weight_map") || !j["weight_map"].is_object())
                throw Error(index, "'weight_map' is missing or not an object");
            std::set<std::string> files;
            for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
                if (!it.value().is_string()) throw Error(index, "weight_map entry '" + it.key() + "' is not a file name");
                std::string shard = it.value().get<std::string>();
                if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
                    throw Error(index, "shard name '" + shard + "' must be a plain file name in the folder");
                files.insert(shard);
            }
            for (const auto& f : files) {
                if (!isFile(folder + "/" + f)) throw Error(index, "names shard '" + f + "', which is missing from the folder");
                shards.push_back(folder + "/" + f);
            }
        } else if (isFile(single)) {
            shards.push_back(single);
        } else {
            throw Error(folder, "has config.json but neither model.safetensors nor model.safetensors.index.json "
                                "(PyTorch .bin checkpoints are not supported: convert them to safetensors)");
        }

        const bool gpt2 = model->spec.family == Family::Gpt2;
        const QuantizedCheckpoint quantized = readQuantizationConfig(readJson(configPath), configPath);
        const bool compressedTensors = quantized.method == "compressed-tensors";
        std::map<std::string, std::map<std::string, at::Tensor>> packed;   // layer -> qweight/qzeros/scales/g_idx
        // compressed-tensors: layer -> suffix ("weight_packed", ...) -> tensor and its dtype as stored
        std::map<std::string, std::map<std::string, std::pair<at::Tensor, std::string>>> ctLayers;
        for (const auto& shardPath : shards) {
            SafetensorsFile st = SafetensorsFile::open(shardPath);
            for (auto& e : st.entries) {
                if (compressedTensors) {
                    for (const char* scale : {".q_scale", ".k_scale", ".v_scale", ".kv_scale"}) {
                        const std::string suffix = scale;
                        if (e.name.size() > suffix.size() && e.name.compare(e.name.size() - suffix.size(), suffix.size(), suffix) == 0)
                            throw Error(shardPath, "tensor '" + e.name + "': attention or KV-cache quantization scales are not supported");
                    }
                }
                if (compressedTensors && (ct::isCompressedPart(e.name) ||
                                          (e.type == ggml::Type::I8 && e.name.size() > 7 &&
                                           e.name.compare(e.name.size() - 7, 7, ".weight") == 0))) {
                    const auto dot = e.name.rfind('.');
                    ctLayers[e.name.substr(0, dot)][e.name.substr(dot + 1)] = {entryTensor(e, shardPath), e.dtype};
                    continue;
                }
                if (!compressedTensors && !quantized.method.empty() && packedPart(e.name)) {
                    const auto dot = e.name.rfind('.');
                    packed[e.name.substr(0, dot)][e.name.substr(dot + 1)] = entryTensor(e, shardPath);
                    continue;
                }
                TensorRecord r;
                bool skip = false;
                r.name = gpt2 ? gpt2Canonical(e.name, &r.storedTransposed, &skip) : e.name;
                if (skip) continue;
                // RoPE tables some trainers save (inv_freq, ColossalAI's cos/sin caches): recomputed from the config.
                if (r.name.find("rotary_emb.inv_freq") != std::string::npos || r.name.find("rotary_emb.cos_cached") != std::string::npos ||
                    r.name.find("rotary_emb.sin_cached") != std::string::npos)
                    continue;
                r.shape = e.shape;
                if (r.storedTransposed) {
                    if (r.shape.size() != 2) throw Error(shardPath, "Conv1D tensor '" + e.name + "' is not 2-D");
                    std::swap(r.shape[0], r.shape[1]);
                }
                r.type = e.type;
                if (r.type != ggml::Type::F32 && r.type != ggml::Type::F16 && r.type != ggml::Type::BF16)
                    throw Error(shardPath, "tensor '" + e.name + "' has dtype " + e.dtype +
                                               "; model weights must be F32, F16 or BF16");
                r.data = e.data;
                r.bytes = e.bytes;
                r.file = shardPath;
                model->addTensor(std::move(r));
            }
            model->keepAlive(st.file);
        }
        // Each layer's file tensors are dropped once it is built, so the packed model is not held twice.
        for (auto it = packed.begin(); it != packed.end(); it = packed.erase(it))
            addPackedLayer(*model, quantized, it->first, it->second, folder);
        for (auto it = ctLayers.begin(); it != ctLayers.end(); it = ctLayers.erase(it)) {
            const std::string& layer = it->first;
            const auto& parts = it->second;
            const nlohmann::json* group = ct::groupFor(quantized.config, layer, configPath);
            if (!group) throw Error(configPath, "'" + layer + "' has compressed tensors but no config group targets it");
            auto linear = ct::readLayer(*group, layer, parts, folder);
            // A quantized embedding is kept dequantized (it is looked up, not multiplied); the head runs compressed.
            if (layer.rfind("model.layers.", 0) == 0 || layer == names::kHead) model->addPackedLayer(layer, linear, folder);
            else model->replaceTensor(layer + ".weight", linear->effectiveWeight());
        }
        if (!model->has("lm_head.weight") && saidUntied)
            throw Error(folder, "config.json says tie_word_embeddings: false, but no shard holds lm_head.weight (the output "
                                "head); a tied model says true");
        if (!model->has("lm_head.weight")) model->spec.tiedEmbeddings = true;
        // Tied, transformers uses the embedding as the head even where the file also holds an lm_head.weight.
        else if (model->spec.tiedEmbeddings) model->removeTensor("lm_head.weight");
        if (isFile(folder + "/tokenizer.json")) {
            model->tokenizer = loadHfTokenizer(folder + "/tokenizer.json");
        } else if (isFile(folder + "/tokenizer.model")) {   // older Llama/Mistral folders ship only the SentencePiece file
            // One cwb cannot read (a unigram model, another normalizer) leaves the model without a tokenizer, as
            // before cwb read these files: info, export and compression without calibration still work.
            try {
                model->tokenizer = loadSentencePieceTokenizer(folder + "/tokenizer.model");
                model->metadata["tokenizer_note"] = "read from tokenizer.model (the folder has no tokenizer.json); its chat "
                                                    "template and tokenizer_config.json settings are not read";
            } catch (const Error& e) {
                model->metadata["tokenizer_note"] = std::string("no tokenizer: ") + e.what();
            }
        }
        model->metadata["shards"] = std::to_string(shards.size());
        return model;
    }
};

} // namespace

std::unique_ptr<ModelFormat> makeHfFormat() { return std::make_unique<HfFormat>(); }

} // namespace cwb
