#include "core/export/hf_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/export/export_support.h"
#include "core/tokenizer/hf_tokenizer_writer.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"

namespace cwb::exporting {

double float32Decimal(double value) {
    if (!std::isfinite(value) || double(float(value)) != value) return value;
    char text[32];
    for (int digits = 1; digits <= 9; ++digits) {
        std::snprintf(text, sizeof text, "%.*g", digits, value);
        const double shortest = std::strtod(text, nullptr);
        if (float(shortest) == float(value)) return shortest;
    }
    return value;
}

namespace {
// bos/eos/pad_token_id: a Hugging Face source's as its config.json declared them (transformers reads them from there
// when no generation_config.json says otherwise), else the tokenizer's, every stop id as generation_config.json has them.
nlohmann::json specialTokenIds(const Model& model) {
    if (!model.spec.configTokenIds.empty()) return nlohmann::json::parse(model.spec.configTokenIds);
    nlohmann::json ids = nlohmann::json::object();
    const Tokenizer* tok = model.tokenizer.get();
    if (!tok) return ids;
    if (tok->bos() >= 0) ids["bos_token_id"] = tok->bos();
    // A list was cut to its first id (user probe).
    const std::vector<TokenId> stops = tok->stopIds();
    if (stops.size() == 1) ids["eos_token_id"] = stops.front();
    else if (stops.size() > 1) ids["eos_token_id"] = stops;
    if (tok->vocabulary() && tok->vocabulary()->pad >= 0) ids["pad_token_id"] = tok->vocabulary()->pad;
    return ids;
}
} // namespace

nlohmann::json hfConfig(const Model& model, const std::string& dtypeName) {
    const ArchSpec& s = model.spec;
    const std::string why = nonUniformLayers(s);
    if (!why.empty()) throw Error("config.json cannot describe this model: " + why);
    const LayerShape shape = uniformLayerShape(s);
    nlohmann::json c;
    if (s.family == Family::Gpt2) {
        c = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"},      {"n_embd", s.hidden},
             {"n_layer", s.layers},                  {"n_head", shape.heads},     {"n_inner", shape.ffn},
             {"n_positions", s.context},             {"n_ctx", s.context},        {"vocab_size", s.vocab},
             {"layer_norm_epsilon", float32Decimal(s.normEps)},      {"activation_function", "gelu_new"},
             {"tie_word_embeddings", s.tiedEmbeddings}};
        if (shape.heads * s.headDim != s.hidden)
            throw Error("config.json cannot describe this GPT-2: its heads (" + std::to_string(shape.heads) + " × " +
                        std::to_string(s.headDim) + ") no longer span n_embd " + std::to_string(s.hidden));
    } else {
        const std::string type = s.modelType == "qwen2" || s.modelType == "mistral" ? s.modelType : "llama";
        const std::string arch = type == "qwen2" ? "Qwen2ForCausalLM" : type == "mistral" ? "MistralForCausalLM" : "LlamaForCausalLM";
        c = {{"architectures", {arch}},
             {"model_type", type},
             {"hidden_size", s.hidden},
             {"intermediate_size", shape.ffn},
             {"num_hidden_layers", s.layers},
             {"num_attention_heads", shape.heads},
             {"num_key_value_heads", shape.kvHeads},
             {"head_dim", s.headDim},
             {"vocab_size", s.vocab},
             {"max_position_embeddings", s.slidingWindow > 0 && s.declaredContext > s.context ? s.declaredContext : s.context},
             {"rms_norm_eps", float32Decimal(s.normEps)},
             {"rope_theta", s.ropeTheta},
             {"hidden_act", "silu"},
             {"tie_word_embeddings", s.tiedEmbeddings}};
        if (type == "llama") {
            c["attention_bias"] = s.attentionBias;
            c["mlp_bias"] = false;
        }
        // The window as read: it was written as none, with the window for the context, and transformers then computed
        // full attention past it, another model (user probe).
        if (type == "mistral") c["sliding_window"] = s.slidingWindow > 0 ? nlohmann::json(s.slidingWindow) : nlohmann::json(nullptr);
        if (type == "qwen2" && s.slidingWindow > 0) {
            c["use_sliding_window"] = true;
            c["sliding_window"] = s.slidingWindow;
            c["max_window_layers"] = s.slidingFromLayer;
        }
        if (s.ropeScaling.type == "linear") {
            c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", s.ropeScaling.factor}};
        } else if (s.ropeScaling.type == "llama3") {
            c["rope_scaling"] = {{"rope_type", "llama3"},
                                 {"factor", s.ropeScaling.factor},
                                 {"low_freq_factor", s.ropeScaling.lowFreqFactor},
                                 {"high_freq_factor", s.ropeScaling.highFreqFactor},
                                 {"original_max_position_embeddings", s.ropeScaling.originalContext}};
        } else if (s.ropeScaling.type == "yarn") {
            c["rope_scaling"] = {{"rope_type", "yarn"},
                                 {"factor", s.ropeScaling.factor},
                                 {"original_max_position_embeddings", s.ropeScaling.originalContext},
                                 {"beta_fast", s.ropeScaling.betaFast},
                                 {"beta_slow", s.ropeScaling.betaSlow},
                                 {"attention_factor", s.ropeScaling.attentionFactor},
                                 {"truncate", s.ropeScaling.truncate}};
        }
    }
    c["torch_dtype"] = dtypeName;
    const nlohmann::json ids = specialTokenIds(model);   // items() of a temporary would dangle
    for (const auto& [key, id] : ids.items()) c[key] = id;
    return c;
}

nlohmann::json hfGenerationConfig(const Model& model) { return specialTokenIds(model); }

namespace {

void writeTextFile(const std::string& path, const std::string& text) { writeFileAtomically(path, text + "\n"); }

// tokenizer.json, tokenizer_config.json and special_tokens_map.json from the model's vocabulary.
std::vector<std::string> writeFromVocabulary(const Model& model, const std::string& folder,
                                             std::vector<std::string>& notes) {
    const TokenizerData& vocabulary = *model.tokenizer->vocabulary();
    HfTokenizerFiles files = hfTokenizerFiles(vocabulary, model.spec.context);
    const std::pair<const char*, const nlohmann::json*> parts[] = {{"tokenizer.json", &files.tokenizer},
                                                                   {"tokenizer_config.json", &files.config},
                                                                   {"special_tokens_map.json", &files.specialTokens}};
    std::vector<std::string> texts;
    try {
        for (const auto& part : parts) texts.push_back(part.second->dump(2));
    } catch (const nlohmann::json::exception&) {
        // JSON strings must be valid UTF-8; the weights are still worth having without the tokenizer.
        notes.push_back("no tokenizer files were written: a token or the chat template is not valid UTF-8, which "
                        "tokenizer.json cannot hold");
        return {};
    }
    std::vector<std::string> written;
    for (size_t i = 0; i < texts.size(); ++i) {
        writeTextFile(folder + "/" + parts[i].first, texts[i]);
        written.push_back(parts[i].first);
    }
    notes.push_back("tokenizer.json, tokenizer_config.json and special_tokens_map.json written from the model's "
                    "vocabulary (" + vocabulary.model + ", " + std::to_string(vocabulary.tokens.size()) + " tokens)");
    for (std::string& note : files.notes) notes.push_back("tokenizer: " + std::move(note));
    return written;
}

} // namespace

void writeJsonFile(const std::string& path, const nlohmann::json& j) {
    std::string text;
    try {
        text = j.dump(2);
    } catch (const nlohmann::json::exception& e) {
        throw Error(path, std::string("holds text that is not valid UTF-8, which JSON cannot carry (") + e.what() + ")");
    }
    writeTextFile(path, text);
}

std::vector<std::string> writeHfTokenizerFiles(const Model& model, const std::string& folder,
                                               std::vector<std::string>& notes) {
    namespace fs = std::filesystem;
    std::vector<std::string> copied;
    bool copiedTokenizerFiles = false;
    if (model.format == "hf") {
        for (const char* name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                                 "special_tokens_map.json", "vocab.json", "merges.txt", "chat_template.jinja",
                                 "chat_template.json", "generation_config.json"}) {
            const fs::path from = fs::path(model.path) / name;
            std::error_code ec;
            if (!fs::is_regular_file(from, ec)) continue;
            fs::copy_file(from, fs::path(folder) / name, fs::copy_options::overwrite_existing, ec);
            if (ec) throw Error(from.string(), "cannot copy into the export: " + ec.message());
            copied.push_back(name);
            copiedTokenizerFiles = copiedTokenizerFiles || std::string(name) != "generation_config.json";
        }
    }
    const auto has = [&](const char* name) { return std::find(copied.begin(), copied.end(), name) != copied.end(); };
    if (has("tokenizer.json") || has("tokenizer.model")) return copied;
    if (!model.tokenizer || !model.tokenizer->vocabulary()) {
        notes.push_back(copiedTokenizerFiles
                            ? "the source has no tokenizer.json and cwb read no vocabulary from it; its other "
                              "tokenizer files were copied as they are"
                            : "the model has no tokenizer vocabulary; no tokenizer files were written");
        return copied;
    }
    for (const std::string& name : writeFromVocabulary(model, folder, notes)) {
        if (!has(name.c_str())) copied.push_back(name);
    }
    return copied;
}

} // namespace cwb::exporting
