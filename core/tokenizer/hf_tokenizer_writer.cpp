#include "core/tokenizer/hf_tokenizer_writer.h"

#include "core/tokenizer/pre_tokenizer.h"
#include "core/tokenizer/vocab_util.h"
#include "core/util/error.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace cwb {

namespace {

using nlohmann::json;

const std::string kMetaSpace = "\xE2\x96\x81"; // "▁", SentencePiece's space

TokenType typeOf(const TokenizerData& d, size_t id) { return static_cast<TokenType>(d.types[id]); }

// The pieces SentencePiece merging may produce or consume (as SpmBpeTokenizer keeps them); the first of
// duplicated strings wins.
TokenMap mergeablePieces(const TokenizerData& d) {
    TokenMap pieces;
    for (size_t i = 0; i < d.tokens.size(); ++i) {
        const TokenType t = typeOf(d, i);
        if (t == TokenType::Normal || t == TokenType::Undefined || t == TokenType::UserDefined) {
            pieces.emplace(d.tokens[i], static_cast<TokenId>(i));
        }
    }
    return pieces;
}

struct MergeCandidate {
    float score;
    TokenId merged;
    size_t split;
};

// Longer tokens are not split into merges: the search is quadratic in a token's length, and SentencePiece
// vocabularies hold pieces of a few dozen bytes, so only a hostile file reaches the limit.
constexpr size_t kLongestMergedToken = 256;

std::vector<MergeCandidate> mergeCandidates(const TokenizerData& d, const TokenMap& pieces,
                                            std::vector<std::string>* notes = nullptr) {
    std::vector<MergeCandidate> out;
    size_t tooLong = 0;
    for (size_t id = 0; id < d.tokens.size(); ++id) {
        const std::string& text = d.tokens[id];
        const auto self = pieces.find(text);
        if (self == pieces.end() || self->second != static_cast<TokenId>(id)) continue;
        if (text.size() > kLongestMergedToken) {
            ++tooLong;
            continue;
        }
        // Splits at UTF-8 character boundaries only: merging starts from whole characters.
        for (size_t split = 1; split < text.size(); ++split) {
            if ((static_cast<unsigned char>(text[split]) & 0xC0) == 0x80) continue;
            if (pieces.count(text.substr(0, split)) && pieces.count(text.substr(split))) {
                const float score = d.scores.empty() ? 0.0f : d.scores[id];
                out.push_back({score, static_cast<TokenId>(id), split});
            }
        }
    }
    if (tooLong > 0 && notes) {
        notes->push_back(std::to_string(tooLong) + " tokens longer than " + std::to_string(kLongestMergedToken) +
                         " bytes get no merge (no text will be tokenized into them)");
    }
    std::sort(out.begin(), out.end(), [](const MergeCandidate& a, const MergeCandidate& b) {
        return std::make_tuple(-a.score, a.merged, a.split) < std::make_tuple(-b.score, b.merged, b.split);
    });
    return out;
}

std::vector<std::pair<std::string, std::string>> mergeTexts(const TokenizerData& d,
                                                          const std::vector<MergeCandidate>& candidates) {
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(candidates.size());
    for (const MergeCandidate& c : candidates) {
        const std::string& text = d.tokens[c.merged];
        merges.emplace_back(text.substr(0, c.split), text.substr(c.split));
    }
    return merges;
}

json addedToken(TokenId id, const std::string& text, bool special) {
    return {{"id", id},          {"content", text},      {"single_word", false}, {"lstrip", false},
            {"rstrip", false},   {"normalized", false},  {"special", special}};
}

// What transformers' Llama tokenizers build from add_bos_token / add_eos_token: [BOS] $A [EOS], and for pairs
// [BOS] $A [EOS] [BOS] $B [EOS] with B's tokens of type 1. Either token may be absent (empty).
json specialTokenTemplate(const std::string& bos, TokenId bosId, const std::string& eos, TokenId eosId) {
    auto sequence = [&](const char* id, int type) {
        json items = json::array();
        if (!bos.empty()) items.push_back({{"SpecialToken", {{"id", bos}, {"type_id", type}}}});
        items.push_back({{"Sequence", {{"id", id}, {"type_id", type}}}});
        if (!eos.empty()) items.push_back({{"SpecialToken", {{"id", eos}, {"type_id", type}}}});
        return items;
    };
    json pair = sequence("A", 0);
    for (auto& item : sequence("B", 1)) pair.push_back(item);
    json special = json::object();
    if (!bos.empty()) special[bos] = {{"id", bos}, {"ids", {bosId}}, {"tokens", {bos}}};
    if (!eos.empty()) special[eos] = {{"id", eos}, {"ids", {eosId}}, {"tokens", {eos}}};
    return {{"type", "TemplateProcessing"}, {"single", sequence("A", 0)}, {"pair", pair}, {"special_tokens", special}};
}

json mergesJson(const std::vector<std::pair<std::string, std::string>>& merges) {
    // "a b" strings are what every tokenizers release reads; pairs ([a, b], 0.20+) only when a token has a space.
    const bool needPairs = std::any_of(merges.begin(), merges.end(), [](const auto& m) {
        return m.first.find(' ') != std::string::npos || m.second.find(' ') != std::string::npos;
    });
    json out = json::array();
    for (const auto& [left, right] : merges) {
        if (needPairs) out.push_back(json::array({left, right}));
        else out.push_back(left + " " + right);
    }
    return out;
}

std::vector<std::pair<std::string, std::string>> splitMerges(const std::vector<std::string>& merges) {
    std::vector<std::pair<std::string, std::string>> out;
    out.reserve(merges.size());
    for (const std::string& m : merges) {
        // As buildPairRanks reads them: split at the first space after the first byte.
        const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
        if (space == std::string::npos) throw Error("merge " + quoteToken(m) + " has no space between its two tokens");
        out.emplace_back(m.substr(0, space), m.substr(space + 1));
    }
    return out;
}

// Distinct merged tokens whose score another merged token shares: their relative order is a guess (SentencePiece
// takes the leftmost pair on a tie, Hugging Face the lower rank).
size_t tiedMergedTokens(const std::vector<MergeCandidate>& candidates) {
    std::map<float, std::vector<TokenId>> byScore;
    for (const MergeCandidate& c : candidates) {
        auto& ids = byScore[c.score];
        if (ids.empty() || ids.back() != c.merged) ids.push_back(c.merged);
    }
    size_t tied = 0;
    for (const auto& [score, ids] : byScore) {
        if (ids.size() > 1) tied += ids.size();
    }
    return tied;
}

} // namespace

std::vector<std::pair<std::string, std::string>> sentencePieceMerges(const TokenizerData& data) {
    const std::unique_ptr<Tokenizer> checked = makeTokenizer(data); // validates and resolves the token types
    const TokenizerData& d = *checked->vocabulary();
    return mergeTexts(d, mergeCandidates(d, mergeablePieces(d)));
}

HfTokenizerFiles hfTokenizerFiles(const TokenizerData& data, int64_t maxLength) {
    const std::unique_ptr<Tokenizer> checked = makeTokenizer(data);
    const TokenizerData& d = *checked->vocabulary();
    const bool spm = d.model == "llama";
    HfTokenizerFiles files;

    json vocab = json::object();
    json added = json::array();
    size_t duplicates = 0;
    for (size_t i = 0; i < d.tokens.size(); ++i) {
        const auto id = static_cast<TokenId>(i);
        if (vocab.contains(d.tokens[i])) ++duplicates;
        else vocab[d.tokens[i]] = id;
        const TokenType type = typeOf(d, i);
        if (type == TokenType::Control || type == TokenType::Unknown) added.push_back(addedToken(id, d.tokens[i], true));
        else if (type == TokenType::UserDefined) added.push_back(addedToken(id, d.tokens[i], false));
    }
    if (duplicates > 0) {
        files.notes.push_back(std::to_string(duplicates) +
                              " tokens repeat the text of an earlier token; tokenizer.json keeps the first id of each");
    }

    // Byte fallback where the vocabulary has <0xXX> tokens; unknown pieces stay one unk each, as cwb and llama.cpp
    // emit them.
    const bool byteTokens = std::any_of(d.types.begin(), d.types.end(),
                                        [](int32_t t) { return t == static_cast<int32_t>(TokenType::Byte); });
    json model = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", false},
                  {"byte_fallback", spm && byteTokens},
                  {"ignore_merges", false}};
    if (d.unk >= 0) model["unk_token"] = d.tokens[d.unk];

    json root = {{"version", "1.0"},       {"truncation", nullptr}, {"padding", nullptr},
                 {"added_tokens", added}, {"normalizer", nullptr}, {"pre_tokenizer", nullptr},
                 {"post_processor", nullptr}, {"decoder", nullptr}};
    const bool addsBos = d.addBos && d.bos >= 0;
    const bool addsEos = d.addEos && d.eos >= 0;
    const bool addsSpecial = addsBos || addsEos;
    const json specialTemplate = addsSpecial ? specialTokenTemplate(addsBos ? d.tokens[d.bos] : "", addsBos ? d.bos : -1,
                                                                    addsEos ? d.tokens[d.eos] : "", addsEos ? d.eos : -1)
                                             : json();
    if (spm) {
        if (!d.merges.empty()) {
            // The vocabulary came with merge ranks (from a tokenizer.json): they, not the scores, drive its tokenizer.
            model["merges"] = mergesJson(splitMerges(d.merges));
        } else {
            const std::vector<MergeCandidate> candidates = mergeCandidates(d, mergeablePieces(d), &files.notes);
            if (const size_t tied = tiedMergedTokens(candidates)) {
                files.notes.push_back(std::to_string(tied) +
                                      " merged tokens share a score with another; their merges are ordered by id");
            }
            model["merges"] = mergesJson(mergeTexts(d, candidates));
        }
        const json replaceSpaces = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMetaSpace}};
        root["normalizer"] = d.addSpacePrefix
                                 ? json{{"type", "Sequence"},
                                        {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", kMetaSpace}},
                                                                     replaceSpaces})}}
                                 : replaceSpaces;
        json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", kMetaSpace}}}, {"content", " "}},
                                     {{"type", "ByteFallback"}},
                                     {{"type", "Fuse"}}});
        if (d.addSpacePrefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
        root["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
        if (addsSpecial) root["post_processor"] = specialTemplate;
    } else {
        bool known = true;
        const PreTokenizerKind kind = preTokenizerFromName(d.pre, &known);
        if (!known) {
            files.notes.push_back("pre-tokenizer '" + d.pre + "' is not one cwb knows; GPT-2's regex was written");
        }
        model["merges"] = mergesJson(splitMerges(d.merges));
        // Llama 3's tokenizer.json sets ignore_merges (a word that is a token is taken whole), as llama.cpp does.
        model["ignore_merges"] = kind == PreTokenizerKind::Llama3;
        root["pre_tokenizer"] = {
            {"type", "Sequence"},
            {"pretokenizers",
             json::array({{{"type", "Split"},
                           {"pattern", {{"Regex", preTokenizerRegex(kind)}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", d.byteLevelPrefixSpace}, {"trim_offsets", true},
                           {"use_regex", false}}})}};
        const json byteLevel = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false},
                                {"use_regex", true}};
        root["post_processor"] =
            addsSpecial ? json{{"type", "Sequence"}, {"processors", json::array({byteLevel, specialTemplate})}} : byteLevel;
        root["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
                           {"use_regex", true}};
    }
    model["vocab"] = std::move(vocab);
    root["model"] = std::move(model);
    files.tokenizer = std::move(root);

    auto tokenOrNull = [&](TokenId id) { return id >= 0 ? json(d.tokens[id]) : json(nullptr); };
    files.config = {{"add_bos_token", addsBos},
                    {"add_eos_token", addsEos},
                    {"bos_token", tokenOrNull(d.bos)},
                    {"eos_token", tokenOrNull(d.eos)},
                    {"clean_up_tokenization_spaces", false},
                    {"model_max_length", maxLength},
                    // The generic class loads tokenizer.json as written; model-specific ones may rebuild parts of it.
                    {"tokenizer_class", "PreTrainedTokenizerFast"}};
    if (d.unk >= 0) files.config["unk_token"] = d.tokens[d.unk];
    if (d.pad >= 0) files.config["pad_token"] = d.tokens[d.pad];
    if (d.sep >= 0) files.config["sep_token"] = d.tokens[d.sep];
    if (d.cls >= 0) files.config["cls_token"] = d.tokens[d.cls];
    if (d.mask >= 0) files.config["mask_token"] = d.tokens[d.mask];
    if (!d.chatTemplate.empty()) files.config["chat_template"] = d.chatTemplate;
    files.specialTokens = json::object();
    if (d.bos >= 0) files.specialTokens["bos_token"] = d.tokens[d.bos];
    if (d.eos >= 0) files.specialTokens["eos_token"] = d.tokens[d.eos];
    if (d.unk >= 0) files.specialTokens["unk_token"] = d.tokens[d.unk];
    if (d.pad >= 0) files.specialTokens["pad_token"] = d.tokens[d.pad];
    if (d.sep >= 0) files.specialTokens["sep_token"] = d.tokens[d.sep];
    if (d.cls >= 0) files.specialTokens["cls_token"] = d.tokens[d.cls];
    if (d.mask >= 0) files.specialTokens["mask_token"] = d.tokens[d.mask];
    return files;
}

} // namespace cwb
