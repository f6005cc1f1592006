// Reads GGUF models (llama, qwen2, gpt2 architectures) into the canonical Model.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>
#include <utility>

#include "core/io/gguf_file.h"
#include "core/io/gguf_names.h"
#include "core/io/model_format.h"
#include "core/util/error.h"
#include "core/util/mapped_file.h"

namespace cwb {

namespace {

TokenizerData readTokenizerData(const GgufFile& g) {
    TokenizerData d;
    d.model = g.string("tokenizer.ggml.model");
    d.pre = g.stringOr("tokenizer.ggml.pre", d.model == "gpt2" ? "gpt2" : "");
    for (const auto& t : g.array("tokenizer.ggml.tokens")) {
        if (!t.is_string()) throw Error(g.file->path(), "tokenizer.ggml.tokens holds a non-string");
        d.tokens.push_back(t.get<std::string>());
    }
    // What makeTokenizer refuses is named here by the key that holds it (user probe: "BOS id 9999 is out of range"
    // named neither the file nor the key).
    const auto bad = [&](const std::string& what) { return Error(g.file->path(), what); };
    if (g.hasKey("tokenizer.ggml.scores"))
        for (const auto& s : g.array("tokenizer.ggml.scores")) {
            d.scores.push_back(s.get<float>());
            if (std::isnan(d.scores.back()))
                throw bad("tokenizer.ggml.scores[" + std::to_string(d.scores.size() - 1) + "] is NaN");
        }
    if (g.hasKey("tokenizer.ggml.token_type"))
        for (const auto& t : g.array("tokenizer.ggml.token_type")) {
            d.types.push_back(t.get<int32_t>());
            if (d.types.back() < 0 || d.types.back() > static_cast<int32_t>(TokenType::Byte))
                throw bad("tokenizer.ggml.token_type[" + std::to_string(d.types.size() - 1) + "] is " +
                          std::to_string(d.types.back()) + ", not a token type (0.." +
                          std::to_string(static_cast<int32_t>(TokenType::Byte)) + ")");
        }
    if (g.hasKey("tokenizer.ggml.merges"))
        for (const auto& m : g.array("tokenizer.ggml.merges")) d.merges.push_back(m.get<std::string>());
    for (const auto& [key, target] : {std::pair<const char*, TokenId*>{"tokenizer.ggml.bos_token_id", &d.bos},
                                      {"tokenizer.ggml.eos_token_id", &d.eos},
                                      {"tokenizer.ggml.unknown_token_id", &d.unk}}) {
        const int64_t id = g.integerOr(key, -1);
        if (id < -1 || id >= int64_t(d.tokens.size()))
            throw bad(std::string(key) + " is " + std::to_string(id) + ", outside the vocabulary of " +
                      std::to_string(d.tokens.size()) + " tokens (tokenizer.ggml.tokens)");
        *target = static_cast<TokenId>(id);
    }
    // cwb only carries these for engines: one it cannot use (wrong type, id outside the vocabulary) is dropped
    // rather than refused, as the keys were before cwb read them. ("seperator" is llama.cpp's spelling of the key.)
    for (const auto& [key, target] : {std::pair<const char*, TokenId*>{"tokenizer.ggml.padding_token_id", &d.pad},
                                      {"tokenizer.ggml.seperator_token_id", &d.sep},
                                      {"tokenizer.ggml.cls_token_id", &d.cls},
                                      {"tokenizer.ggml.mask_token_id", &d.mask}}) {
        const auto it = g.metadata.find(key);
        if (it == g.metadata.end() || !it->second.value.is_number_integer()) continue;
        const int64_t id = it->second.value.get<int64_t>();
        if (id >= 0 && id < int64_t(d.tokens.size())) *target = static_cast<TokenId>(id);
    }
    for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
        const auto stop = g.metadata.find(key);
        if (stop == g.metadata.end() || !stop->second.value.is_number_integer()) continue;
        const int64_t id = stop->second.value.get<int64_t>();
        if (id >= 0 && id < int64_t(d.tokens.size()) && id != d.eos &&
            std::find(d.stopIds.begin(), d.stopIds.end(), static_cast<TokenId>(id)) == d.stopIds.end())
            d.stopIds.push_back(static_cast<TokenId>(id));
    }
    const auto chat = g.metadata.find("tokenizer.chat_template");
    if (chat != g.metadata.end() && chat->second.value.is_string()) d.chatTemplate = chat->second.value.get<std::string>();
    d.addBos = g.hasKey("tokenizer.ggml.add_bos_token") ? g.integer("tokenizer.ggml.add_bos_token") != 0
                                                         : d.model == "llama";
    d.addEos = g.hasKey("tokenizer.ggml.add_eos_token") && g.integer("tokenizer.ggml.add_eos_token") != 0;
    d.addSpacePrefix = g.hasKey("tokenizer.ggml.add_space_prefix")
                           ? g.integer("tokenizer.ggml.add_space_prefix") != 0
                           : d.model == "llama";
    return d;
}

} // namespace

std::unique_ptr<Tokenizer> loadGgufTokenizer(const std::string& path) {
    const GgufFile g = GgufFile::open(path);
    if (!g.hasKey("tokenizer.ggml.model")) throw Error(path, "the GGUF file holds no tokenizer (no tokenizer.ggml.model)");
    try {
        return makeTokenizer(readTokenizerData(g));
    } catch (const Error& e) {
        if (std::string(e.what()).rfind(path, 0) == 0) throw;
        throw Error(path, e.what());
    }
}

namespace {

bool isArray(const GgufFile& g, const std::string& key) {
    return g.hasKey(key) && g.metadata.at(key).value.is_array();
}

// One value per layer from a scalar or an array key; `absent` when the key is missing.
std::vector<int64_t> layerValues(const GgufFile& g, const std::string& key, int64_t layers, int64_t absent) {
    if (!g.hasKey(key)) {
        if (absent == -1) throw Error(g.file->path(), "metadata key '" + key + "' is missing");
        return std::vector<int64_t>(size_t(layers), absent);
    }
    if (!isArray(g, key)) return std::vector<int64_t>(size_t(layers), g.integer(key));
    const nlohmann::json& a = g.array(key);
    if (int64_t(a.size()) != layers)
        throw Error(g.file->path(), "'" + key + "' has " + std::to_string(a.size()) + " values for " + std::to_string(layers) + " layers");
    std::vector<int64_t> values;
    for (const auto& v : a) {
        if (!v.is_number_integer() || v.get<int64_t>() <= 0) throw Error(g.file->path(), "'" + key + "' holds a value that is not a positive integer");
        values.push_back(v.get<int64_t>());
    }
    return values;
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
    // llama.cpp allows one value per layer for these (structurally pruned models).
    const bool perLayer = isArray(g, p + "feed_forward_length") || isArray(g, p + "attention.head_count") ||
                          isArray(g, p + "attention.head_count_kv");
    if (perLayer) {
        if (s.layers <= 0 || s.layers > 100000) throw Error(path, "block_count must be positive");
        const std::vector<int64_t> ffn = layerValues(g, p + "feed_forward_length", s.layers, -1);
        const std::vector<int64_t> heads = layerValues(g, p + "attention.head_count", s.layers, -1);
        const std::vector<int64_t> kv = layerValues(g, p + "attention.head_count_kv", s.layers, -2);
        s.layerShapes.resize(size_t(s.layers));
        for (size_t l = 0; l < s.layerShapes.size(); ++l)
            s.layerShapes[l] = {heads[l], kv[l] == -2 ? heads[l] : kv[l], ffn[l]};
        s.ffn = *std::max_element(ffn.begin(), ffn.end());
        s.heads = *std::max_element(heads.begin(), heads.end());
        s.kvHeads = s.layerShapes[0].kvHeads;
        for (const auto& ls : s.layerShapes) s.kvHeads = std::max(s.kvHeads, ls.kvHeads);
        s.headDim = g.integer(p + "attention.key_length");
    } else {
        s.ffn = g.integer(p + "feed_forward_length");
        s.heads = g.integer(p + "attention.head_count");
        s.kvHeads = g.integerOr(p + "attention.head_count_kv", s.heads);
    }
    if (s.heads <= 0) throw Error(path, "attention.head_count must be positive");
    if (s.hidden <= 0) throw Error(path, p + "embedding_length must be positive, got " + std::to_string(s.hidden));
    if (!perLayer && !g.hasKey(p + "attention.key_length") && s.hidden % s.heads != 0)
        throw Error(path, p + "embedding_length " + std::to_string(s.hidden) + " is not a multiple of attention.head_count " +
                              std::to_string(s.heads) + ", and no attention.key_length gives the head size");
    if (!perLayer) s.headDim = g.integerOr(p + "attention.key_length", s.hidden / s.heads);
    s.context = g.integerOr(p + "context_length", 2048);
    if (s.family == Family::Llama) {
        s.normEps = g.numberOr(p + "attention.layer_norm_rms_epsilon", 1e-5);
        s.ropeTheta = g.numberOr(p + "rope.freq_base", 10000.0);
        const std::string scaling = g.stringOr(p + "rope.scaling.type", "none");
        if (scaling == "linear") {
            s.ropeScaling.type = "linear";
            s.ropeScaling.factor = g.number(p + "rope.scaling.factor");
        } else if (scaling == "yarn") {
            // llama.cpp's YaRN with its defaults is transformers' (attention factor 0.1 ln(factor) + 1, correction
            // range rounded outwards); the keys that change it are not computed here.
            for (const char* key : {"rope.scaling.yarn_log_multiplier", "rope.scaling.yarn_ext_factor",
                                    "rope.scaling.yarn_attn_factor", "rope.scaling.attn_factor"}) {
                const std::string name = key;
                const double neutral = name.find("log_multiplier") != std::string::npos ? 0.0 : 1.0;
                const double value = g.numberOr(p + key, neutral);
                // A negative ext_factor is llama.cpp's "from the model": 1 for yarn.
                if (g.hasKey(p + key) && value != neutral && !(name.find("ext_factor") != std::string::npos && value < 0))
                    throw Error(path, p + key + " is not supported with yarn rope scaling (only llama.cpp's defaults are computed)");
            }
            RopeScaling& y = s.ropeScaling;
            y.type = "yarn";
            y.factor = g.number(p + "rope.scaling.factor");
            y.originalContext = g.integerOr(p + "rope.scaling.original_context_length", s.context);
            // llama.cpp's common loader (llama, qwen2) does not read the betas: such a file runs with 32 / 1 there.
            for (const auto& [key, standard] : {std::pair<const char*, double>{"rope.scaling.yarn_beta_fast", 32.0},
                                                std::pair<const char*, double>{"rope.scaling.yarn_beta_slow", 1.0}})
                if (g.hasKey(p + key) && g.numberOr(p + key, standard) != standard)
                    throw Error(path, p + key + " is not " + std::to_string(int(standard)) + ": llama.cpp does not read it "
                                      "for this architecture, so the file's model is ambiguous");
            if (!(y.factor > 0) || !std::isfinite(y.factor) || y.originalContext <= 0 || !(y.betaFast > 0) || !(y.betaSlow > 0))
                throw Error(path, "yarn rope scaling needs a positive factor, original context length and betas");
            y.attentionFactor = yarnMscale(y.factor);
            // The context the scaling was made for, as the Hugging Face loader takes it.
            const double scaled = std::floor(y.factor * double(y.originalContext));
            if (!(scaled <= double(1LL << 31))) throw Error(path, "yarn rope scaling: factor times original context exceeds 2^31");
            s.context = std::max(s.context, int64_t(scaled));
        } else if (scaling != "none") {
            throw Error(path, "rope scaling '" + scaling + "' is not supported (supported: none, linear, yarn, and "
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
            std::string name = gguf::canonicalName(family, t.name);
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
        const std::string embed = names::embedding(family);
        model->spec.vocab = model->tensor(embed).shape.at(0);
        model->spec.tiedEmbeddings = !model->has("lm_head.weight");
        // q/k/v biases are computed wherever the file has them (llama.cpp loads them for llama too, not only qwen2).
        if (family == Family::Llama) model->spec.attentionBias = model->has(names::llamaLayer(0, "self_attn.q_proj.bias"));
        if (g.hasKey("tokenizer.ggml.model")) {
            // A damaged tokenizer leaves the model readable (info, weights) without one, as a Hugging Face folder's
            // does; what needs tokens says why there is none.
            try {
                model->tokenizer = makeTokenizer(readTokenizerData(g));
            } catch (const Error& e) {
                const std::string why = e.what();
                model->metadata["tokenizer_note"] = "no tokenizer: " + (why.rfind(path, 0) == 0 ? why : path + ": " + why);
            }
            if (model->tokenizer && model->tokenizer->vocabSize() != model->spec.vocab)
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
