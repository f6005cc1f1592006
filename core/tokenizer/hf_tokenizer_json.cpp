// loadHfTokenizer: reads a Hugging Face tokenizer.json (BPE model) into TokenizerData and builds it.
// Byte-level files (GPT-2, Llama 3, Qwen2) become "gpt2"; SentencePiece-style files (Llama 2: "▁" for
// spaces, byte_fallback) become "llama" with the merge ranks in place of scores.
#include "core/tokenizer/pre_tokenizer.h"
#include "core/tokenizer/spm_bpe_tokenizer.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocab_util.h"
#include "core/util/error.h"

#include <utility>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>

namespace cwb {

namespace {

using nlohmann::json;

const std::string kMetaSpace = "\xE2\x96\x81"; // "▁"
constexpr int64_t kMaxVocab = 16 * 1024 * 1024;

// Metaspace pre-tokenizer settings that TokenizerData has no field for.
struct SpmOptions {
    bool prefixOnlyWithoutSpace = false;
    bool prefixFirstOnly = false;
    bool splitOnSpace = false;
};

json readJson(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path, "cannot open the file");
    try {
        return json::parse(in);
    } catch (const json::exception& e) {
        throw Error(path, std::string("not valid JSON: ") + e.what());
    }
}

// Calls visit on node and, for a "Sequence", on each of its members (pretokenizers/normalizers/processors).
template <typename Visit>
void forEachComponent(const json& node, const Visit& visit) {
    if (!node.is_object()) return;
    visit(node);
    for (const char* key : {"pretokenizers", "normalizers", "processors", "decoders"}) {
        const auto it = node.find(key);
        if (it != node.end() && it->is_array()) {
            for (const json& child : *it) forEachComponent(child, visit);
        }
    }
}

bool hasComponent(const json& root, const char* section, const char* type) {
    bool found = false;
    const auto it = root.find(section);
    if (it == root.end()) return false;
    forEachComponent(*it, [&](const json& n) { found = found || n.value("type", std::string()) == type; });
    return found;
}

// The regex of the pre-tokenizer's first Split ("" when there is none).
std::string splitPattern(const json& root) {
    std::string pattern;
    const auto it = root.find("pre_tokenizer");
    if (it != root.end()) {
        forEachComponent(*it, [&](const json& n) {
            if (n.value("type", std::string()) != "Split" || !pattern.empty()) return;
            const auto p = n.find("pattern");
            if (p != n.end() && p->is_object() && p->contains("Regex") && (*p)["Regex"].is_string()) {
                pattern = (*p)["Regex"].get<std::string>();
            }
        });
    }
    return pattern;
}

// Maps the pre-tokenizer's Split regex to one of the hand-written pre-tokenizers.
std::string preTokenizerName(const json& root) {
    const std::string pattern = splitPattern(root);
    if (pattern.empty() || pattern == preTokenizerRegex(PreTokenizerKind::Gpt2)) return "gpt2";
    if (pattern == preTokenizerRegex(PreTokenizerKind::Llama3)) return "llama-bpe";
    if (pattern == preTokenizerRegex(PreTokenizerKind::Qwen2)) return "qwen2";
    // Close variants (whitespace or case differences in the contractions) still show the digit rule.
    if (pattern.find("\\p{N}{1,3}") != std::string::npos) return "llama-bpe";
    if (pattern.find("|\\p{N}|") != std::string::npos && pattern.find("[\\r\\n]") != std::string::npos) {
        return "qwen2";
    }
    // No Split (plain ByteLevel with use_regex) or an unrecognised regex: GPT-2's is the ByteLevel default
    // and the best guess we have; ids may differ from Hugging Face for an unrecognised regex.
    return "gpt2";
}

// What the file asks for that the tokenizer built from it does not do, one sentence each: a normalizer other than the
// SentencePiece-style Prepend/Replace (Qwen2's NFC), a Split pattern that is none of the pre-tokenizers cwb has (GPT-2's
// is used). Both were ignored without a word, and ids differed from the tokenizers library's (user probe).
std::vector<std::string> unsupportedParts(const json& root, const TokenizerData& data) {
    std::vector<std::string> found;
    if (root.contains("normalizer")) {
        std::vector<std::string> names;
        forEachComponent(root["normalizer"], [&](const json& n) {
            const std::string type = n.value("type", std::string());
            if (type != "Sequence" && type != "Prepend" && type != "Replace") names.push_back(type);
        });
        if (!names.empty()) {
            std::string list;
            for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
            found.push_back("its normalizer (" + list + ") is not applied: a text not already in that form (decomposed "
                            "accents, compatibility characters, other case) gets other ids than from the model's own "
                            "tokenizer; plain NFC text, most text, is not affected");
        }
    }
    if (data.model == "gpt2") {
        const std::string pattern = splitPattern(root);
        bool known = false;
        for (PreTokenizerKind kind : {PreTokenizerKind::Gpt2, PreTokenizerKind::Llama3, PreTokenizerKind::Qwen2})
            known = known || pattern == preTokenizerRegex(kind);
        if (!pattern.empty() && !known)
            found.push_back("its pre-tokenizer pattern " + pattern + " is not one cwb has (GPT-2's, Llama 3's, Qwen2's); text is "
                            "split as " + (data.pre == "gpt2" ? std::string("GPT-2's") : data.pre == "qwen2" ? "Qwen2's" : "Llama 3's") +
                            " pattern splits it, so ids may differ from the model's own tokenizer");
    }
    return found;
}

// SentencePiece-style files add the dummy "▁" either with a Prepend normalizer (always) or a Metaspace
// pre-tokenizer (only when the text does not start with a space: *metaspace is set).
bool spmAddsSpacePrefix(const json& root, SpmOptions& options) {
    bool prefix = false;
    if (root.contains("normalizer")) {
        forEachComponent(root["normalizer"], [&](const json& n) {
            if (n.value("type", std::string()) == "Prepend" && n.value("prepend", std::string()) == kMetaSpace) {
                prefix = true;
            }
        });
    }
    if (root.contains("pre_tokenizer")) {
        forEachComponent(root["pre_tokenizer"], [&](const json& n) {
            if (n.value("type", std::string()) != "Metaspace" || prefix) return;
            if (n.contains("prepend_scheme") && n["prepend_scheme"].is_string()) {
                const std::string scheme = n["prepend_scheme"].get<std::string>();
                prefix = scheme != "never";
                options.prefixFirstOnly = scheme == "first";
            } else {
                prefix = n.value("add_prefix_space", false);
            }
            options.prefixOnlyWithoutSpace = prefix;
            options.splitOnSpace = n.value("split", true); // the tokenizers crate's default
        });
    }
    return prefix;
}

// bos_token/eos_token in tokenizer_config.json: a string, an AddedToken object, or null.
bool configToken(const json& config, const char* key, std::string& out, bool& present) {
    const auto it = config.find(key);
    present = it != config.end();
    if (!present || it->is_null()) return false;
    if (it->is_string()) out = it->get<std::string>();
    else if (it->is_object() && it->contains("content")) out = (*it)["content"].get<std::string>();
    else return false;
    return true;
}

// The first SpecialToken of the post-processor's "single" template is the BOS it adds.
std::string templateBos(const json& root) {
    std::string bos;
    if (!root.contains("post_processor")) return bos;
    forEachComponent(root["post_processor"], [&](const json& n) {
        if (n.value("type", std::string()) != "TemplateProcessing" || !bos.empty()) return;
        const auto single = n.find("single");
        if (single == n.end() || !single->is_array() || single->empty()) return;
        const json& first = single->front();
        if (first.contains("SpecialToken")) bos = first["SpecialToken"].at("id").get<std::string>();
    });
    return bos;
}

TokenId findId(const std::vector<std::string>& tokens, const std::string& text) {
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] == text) return static_cast<TokenId>(i);
    }
    return -1;
}

TokenId firstPresent(const std::vector<std::string>& tokens, std::initializer_list<const char*> names) {
    for (const char* name : names) {
        const TokenId id = findId(tokens, name);
        if (id >= 0) return id;
    }
    return -1;
}

// chat_template in tokenizer_config.json: a string, or a list of {"name", "template"} (the "default" one, else the
// first); empty when absent.
std::string configChatTemplate(const json& config) {
    const auto it = config.find("chat_template");
    if (it == config.end()) return std::string();
    if (it->is_string()) return it->get<std::string>();
    if (!it->is_array() || it->empty()) return std::string();
    for (const json& named : *it) {
        if (named.value("name", std::string()) == "default") return named.at("template").get<std::string>();
    }
    return it->front().at("template").get<std::string>();
}

// Newer transformers releases save the template as chat_template.jinja, which wins over tokenizer_config.json's.
std::string jinjaChatTemplate(const std::string& folder) {
    std::ifstream jinja(folder + "chat_template.jinja", std::ios::binary);
    return jinja ? std::string(std::istreambuf_iterator<char>(jinja), std::istreambuf_iterator<char>()) : std::string();
}

// A processor's chat_template.json: read last, when nothing else names a template.
std::string processorChatTemplate(const std::string& folder) {
    const std::string jsonPath = folder + "chat_template.json";
    if (!std::ifstream(jsonPath)) return std::string();
    const json file = readJson(jsonPath);
    if (!file.is_object() || !file.contains("chat_template") || !file["chat_template"].is_string()) {
        throw Error(jsonPath, "expected an object with a \"chat_template\" string");
    }
    return file["chat_template"].get<std::string>();
}

// generation_config.json's eos_token_id (an id or a list: Llama 3.1 Instruct stops at three) gives the stop ids
// besides EOS. The file only serves generation, so one that cannot be read, or ids outside the vocabulary, are
// passed over rather than making the model unloadable.
std::vector<TokenId> generationStopIds(const std::string& folder, const TokenizerData& data) {
    std::vector<TokenId> ids;
    std::ifstream in(folder + "generation_config.json", std::ios::binary);
    if (!in) return ids;
    const json config = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!config.is_object() || !config.contains("eos_token_id")) return ids;
    const json& eos = config["eos_token_id"];
    const json list = eos.is_array() ? eos : json::array({eos});
    for (const json& id : list) {
        if (!id.is_number_integer()) continue;
        const int64_t v = id.get<int64_t>();
        if (v < 0 || v >= int64_t(data.tokens.size()) || v == data.eos) continue;
        if (std::find(ids.begin(), ids.end(), TokenId(v)) == ids.end()) ids.push_back(TokenId(v));
    }
    return ids;
}

// Special tokens from the tokenizer.json (and tokenizer_config.json beside it, when present), and the chat template.
void applyTokenizerConfig(const std::string& path, const json& root, bool byteLevel, TokenizerData& data) {
    data.bos = firstPresent(data.tokens, {"<s>", "<|begin_of_text|>", "<|endoftext|>"});
    data.eos = firstPresent(data.tokens, {"</s>", "<|end_of_text|>", "<|endoftext|>", "<|im_end|>"});
    const std::string fromTemplate = templateBos(root);
    const TokenId templateId = fromTemplate.empty() ? -1 : findId(data.tokens, fromTemplate);
    if (templateId >= 0) data.bos = templateId;
    // Llama 2 (SentencePiece) adds BOS; byte-level models only when their template says so.
    data.addBos = byteLevel ? !fromTemplate.empty() : data.bos >= 0;

    const size_t slash = path.find_last_of("/\\");
    const std::string folder = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
    const std::string configPath = folder + "tokenizer_config.json";
    data.chatTemplate = jinjaChatTemplate(folder);
    if (!std::ifstream(configPath)) {
        if (data.chatTemplate.empty()) data.chatTemplate = processorChatTemplate(folder);
        return;
    }
    const json config = readJson(configPath);
    if (!config.is_object()) throw Error(configPath, "expected a JSON object");
    try {
        std::string name;
        bool present = false;
        const std::pair<const char*, TokenId*> keys[] = {{"bos_token", &data.bos}, {"eos_token", &data.eos}};
        for (auto [key, target] : keys) {
            name.clear();
            if (configToken(config, key, name, present)) {
                *target = findId(data.tokens, name);
                if (*target < 0) {
                    throw Error(configPath, std::string(key) + " " + quoteToken(name) + " is not in the vocabulary");
                }
            } else if (present) {
                *target = -1; // explicitly null: the model has none
            }
        }
        if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
            data.addBos = config["add_bos_token"].get<bool>();
        }
        if (config.contains("add_eos_token") && config["add_eos_token"].is_boolean()) {
            data.addEos = config["add_eos_token"].get<bool>();
        }
        // A pad (sep, cls, mask) token missing from the vocabulary stays unset: cwb never uses them, and transformers
        // adds it at load.
        for (const auto& [key, target] : {std::pair<const char*, TokenId*>{"pad_token", &data.pad},
                                          {"sep_token", &data.sep},
                                          {"cls_token", &data.cls},
                                          {"mask_token", &data.mask}}) {
            name.clear();
            if (configToken(config, key, name, present)) *target = findId(data.tokens, name);
        }
        if (data.chatTemplate.empty()) data.chatTemplate = configChatTemplate(config);
    } catch (const json::exception& e) {
        throw Error(configPath, std::string("unexpected structure: ") + e.what());
    }
    if (data.chatTemplate.empty()) data.chatTemplate = processorChatTemplate(folder);
}

TokenizerData readTokenizerJson(const std::string& path, const json& root, SpmOptions& options) {
    if (!root.is_object()) throw Error(path, "expected a JSON object at the top level");
    const auto modelIt = root.find("model");
    if (modelIt == root.end() || !modelIt->is_object()) throw Error(path, "no \"model\" object");
    const json& model = *modelIt;
    const std::string type = model.value("type", std::string("BPE"));
    if (type != "BPE") throw Error(path, "model type '" + type + "' is not supported (only BPE)");
    if (!model.contains("vocab") || !model["vocab"].is_object()) throw Error(path, "model has no \"vocab\" object");

    std::map<int64_t, std::string> byId;
    for (const auto& [text, idValue] : model["vocab"].items()) {
        if (!idValue.is_number_integer()) {
            throw Error(path, "vocab entry " + quoteToken(text) + " has no integer id");
        }
        const int64_t id = idValue.get<int64_t>();
        if (id < 0 || id >= kMaxVocab) throw Error(path, "vocab entry " + quoteToken(text) + " has id out of range");
        const auto [at, fresh] = byId.emplace(id, text);
        if (!fresh)   // one id, two pieces: which one a text would get depends on the order read
            throw Error(path, "vocab entries " + quoteToken(at->second) + " and " + quoteToken(text) + " have the same id " +
                                  std::to_string(id));
    }
    struct Added { int64_t id; std::string text; bool special; };
    std::vector<Added> added;
    if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
        for (const json& t : root.at("added_tokens")) {
            Added a{t.at("id").get<int64_t>(), t.at("content").get<std::string>(), t.value("special", false)};
            if (a.id < 0 || a.id >= kMaxVocab) {
                throw Error(path, "added token " + quoteToken(a.text) + " has id out of range");
            }
            byId[a.id] = a.text;
            added.push_back(a);
        }
    }
    if (byId.empty()) throw Error(path, "the vocabulary is empty");

    TokenizerData data;
    const size_t n = static_cast<size_t>(byId.rbegin()->first) + 1;
    data.tokens.assign(n, std::string());
    // Ids without a token (holes) stay empty and Unused; they are never produced.
    data.types.assign(n, static_cast<int32_t>(TokenType::Unused));
    for (const auto& [id, text] : byId) {
        data.tokens[id] = text;
        data.types[id] = static_cast<int32_t>(TokenType::Normal);
    }

    if (model.contains("merges") && !model["merges"].is_null()) {
        for (const json& m : model.at("merges")) {
            if (m.is_string()) data.merges.push_back(m.get<std::string>());
            else if (m.is_array() && m.size() == 2)
                data.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
            else throw Error(path, "a merge is neither \"a b\" nor [\"a\", \"b\"]: " + m.dump());
        }
    }

    const bool byteLevel =
        hasComponent(root, "pre_tokenizer", "ByteLevel") || hasComponent(root, "decoder", "ByteLevel");
    const bool byteFallback = model.value("byte_fallback", false);
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
        data.unk = findId(data.tokens, model["unk_token"].get<std::string>());
        if (data.unk >= 0) data.types[data.unk] = static_cast<int32_t>(TokenType::Unknown);
    }
    if (byteLevel) {
        data.model = "gpt2";
        data.pre = preTokenizerName(root);
        // ByteLevel's add_prefix_space puts a space before each text between special tokens (it was ignored, and
        // every id of such a tokenizer differed, user probe).
        data.addSpacePrefix = false;
        if (root.contains("pre_tokenizer"))
            forEachComponent(root["pre_tokenizer"], [&](const json& n) {
                if (n.value("type", std::string()) == "ByteLevel" && n.value("add_prefix_space", false)) data.byteLevelPrefixSpace = true;
            });
    } else {
        data.model = "llama";
        data.addSpacePrefix = spmAddsSpacePrefix(root, options);
        uint8_t byte = 0;
        for (size_t i = 0; i < n && byteFallback; ++i) {
            if (parseByteToken(data.tokens[i], byte)) data.types[i] = static_cast<int32_t>(TokenType::Byte);
        }
        // Scores only for display: a token made by merge r scores -r (the merges themselves drive encoding).
        data.scores.assign(n, 0.0f);
        const TokenMap ids = buildTokenMap(data.tokens);
        for (size_t r = 0; r < data.merges.size(); ++r) {
            const std::string& m = data.merges[r];
            const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
            if (space == std::string::npos) continue; // reported by makeTokenizer
            const auto it = ids.find(m.substr(0, space) + m.substr(space + 1));
            if (it != ids.end() && data.scores[it->second] == 0.0f) {
                data.scores[it->second] = -static_cast<float>(r + 1);
            }
        }
    }
    for (const Added& a : added) {
        // Keep Unknown and Byte types, as SentencePiece/GGUF have them, even when listed as added tokens.
        if (a.id == data.unk || data.types[a.id] == static_cast<int32_t>(TokenType::Byte)) continue;
        data.types[a.id] = static_cast<int32_t>(a.special ? TokenType::Control : TokenType::UserDefined);
    }
    applyTokenizerConfig(path, root, byteLevel, data);
    const size_t slash = path.find_last_of("/\\");
    data.stopIds = generationStopIds(slash == std::string::npos ? std::string() : path.substr(0, slash + 1), data);
    return data;
}

} // namespace

std::unique_ptr<Tokenizer> loadHfTokenizer(const std::string& tokenizerJsonPath) {
    const json root = readJson(tokenizerJsonPath);
    try {
        SpmOptions options;
        const TokenizerData data = readTokenizerJson(tokenizerJsonPath, root, options);
        std::unique_ptr<Tokenizer> tokenizer = makeTokenizer(data);
        for (std::string& w : unsupportedParts(root, data)) tokenizer->addWarning(tokenizerJsonPath + ": " + w);
        if (auto* spm = dynamic_cast<SpmBpeTokenizer*>(tokenizer.get())) {
            spm->setPrefixOnlyWithoutSpace(options.prefixOnlyWithoutSpace);
            spm->setPrefixFirstOnly(options.prefixFirstOnly);
            spm->setSplitOnSpace(options.splitOnSpace);
        }
        return tokenizer;
    } catch (const json::exception& e) {
        throw Error(tokenizerJsonPath, std::string("unexpected structure: ") + e.what());
    } catch (const Error& e) {
        if (!e.file().empty()) throw;
        throw Error(tokenizerJsonPath, e.what());
    }
}

std::vector<std::string> hfTokenizerFilesRead(const std::string& tokenizerJsonPath) {
    const size_t slash = tokenizerJsonPath.find_last_of("/\\");
    const std::string folder = slash == std::string::npos ? std::string() : tokenizerJsonPath.substr(0, slash + 1);
    std::vector<std::string> files = {tokenizerJsonPath};
    for (const char* name : {"tokenizer_config.json", "chat_template.jinja", "chat_template.json", "generation_config.json"})
        if (std::ifstream(folder + name)) files.push_back(folder + name);
    return files;
}

} // namespace cwb
