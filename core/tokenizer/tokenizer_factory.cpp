// makeTokenizer: checks a TokenizerData for consistency and builds the tokenizer its model names.
#include "core/tokenizer/byte_bpe_tokenizer.h"
#include "core/tokenizer/spm_bpe_tokenizer.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocab_util.h"
#include "core/util/error.h"

#include <algorithm>
#include <cmath>

namespace cwb {

namespace {

void checkId(TokenId id, const char* what, size_t count) {
    if (id < -1 || id >= static_cast<TokenId>(count)) {
        throw Error(std::string(what) + " id " + std::to_string(id) + " is out of range (vocabulary has " +
                    std::to_string(count) + " tokens)");
    }
}

// Fills in token types when the source had none, so the tokenizers can rely on one type per token.
std::vector<int32_t> resolveTypes(const TokenizerData& data, bool detectBytes) {
    const size_t n = data.tokens.size();
    if (!data.types.empty()) {
        for (size_t i = 0; i < n; ++i) {
            if (data.types[i] < 0 || data.types[i] > static_cast<int32_t>(TokenType::Byte)) {
                throw Error("token " + std::to_string(i) + " has unknown type " + std::to_string(data.types[i]));
            }
        }
        return data.types;
    }
    std::vector<int32_t> types(n, static_cast<int32_t>(TokenType::Normal));
    uint8_t byte = 0;
    for (size_t i = 0; i < n; ++i) {
        if (detectBytes && parseByteToken(data.tokens[i], byte)) types[i] = static_cast<int32_t>(TokenType::Byte);
    }
    if (data.unk >= 0) types[data.unk] = static_cast<int32_t>(TokenType::Unknown);
    if (data.bos >= 0) types[data.bos] = static_cast<int32_t>(TokenType::Control);
    if (data.eos >= 0) types[data.eos] = static_cast<int32_t>(TokenType::Control);
    return types;
}

} // namespace

std::vector<TokenId> Tokenizer::stopIds() const {
    std::vector<TokenId> ids;
    if (mEos >= 0) ids.push_back(mEos);
    if (mVocabulary) {
        for (TokenId id : mVocabulary->stopIds)
            if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    return ids;
}

std::unique_ptr<Tokenizer> makeTokenizer(const TokenizerData& data) {
    const size_t n = data.tokens.size();
    if (n == 0) throw Error("the tokenizer vocabulary is empty");
    if (n > static_cast<size_t>(INT32_MAX)) throw Error("the tokenizer vocabulary is too large");
    if (!data.scores.empty() && data.scores.size() != n) {
        throw Error("the tokenizer has " + std::to_string(data.scores.size()) + " scores for " + std::to_string(n) +
                    " tokens");
    }
    if (!data.types.empty() && data.types.size() != n) {
        throw Error("the tokenizer has " + std::to_string(data.types.size()) + " token types for " +
                    std::to_string(n) + " tokens");
    }
    for (size_t i = 0; i < data.scores.size(); ++i) {
        if (std::isnan(data.scores[i])) throw Error("token " + std::to_string(i) + " has a NaN score");
    }
    checkId(data.bos, "BOS", n);
    checkId(data.eos, "EOS", n);
    checkId(data.unk, "unknown-token", n);
    checkId(data.pad, "padding-token", n);
    checkId(data.sep, "separator-token", n);
    checkId(data.cls, "classifier-token", n);
    checkId(data.mask, "mask-token", n);
    for (TokenId id : data.stopIds) {
        if (id < 0) throw Error("stop id " + std::to_string(id) + " is out of range");
        checkId(id, "stop", n);
    }

    TokenizerData resolved = data;
    if (data.model == "llama") {
        resolved.types = resolveTypes(data, true);
        auto tokenizer = std::make_unique<SpmBpeTokenizer>(resolved);
        tokenizer->setVocabulary(std::make_shared<const TokenizerData>(std::move(resolved)));
        return tokenizer;
    }
    if (data.model == "gpt2") {
        resolved.types = resolveTypes(data, false);
        auto tokenizer = std::make_unique<ByteBpeTokenizer>(resolved);
        tokenizer->setVocabulary(std::make_shared<const TokenizerData>(std::move(resolved)));
        return tokenizer;
    }
    throw Error("unsupported tokenizer model '" + data.model + "' (supported: llama, gpt2)");
}

} // namespace cwb
