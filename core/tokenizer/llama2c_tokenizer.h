#pragma once
// llama2.c's tokenizer.bin and the encoder of its run.c: a dummy " " prefix, UTF-8 characters looked up
// whole or split into byte tokens (id = byte + 3), then repeated merges of the best-scoring adjacent pair.
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocab_util.h"

namespace cwb {

class Llama2cTokenizer : public Tokenizer {
public:
    Llama2cTokenizer(std::vector<std::string> tokens, std::vector<float> scores, uint32_t maxTokenLength);

    std::vector<TokenId> encode(const std::string& text, bool addBos) const override;
    std::string decode(const std::vector<TokenId>& ids) const override;
    std::string tokenText(TokenId id) const override;
    int32_t vocabSize() const override { return static_cast<int32_t>(mTokens.size()); }
    std::string kind() const override { return "llama2c"; }

    uint32_t maxTokenLength() const { return mMaxTokenLength; }
    // The same vocabulary as SentencePiece pieces (U+2581 for spaces, "<s>"/"</s>"), with GGUF token types.
    TokenizerData sentencePieceData() const;

private:
    TokenId lookup(const std::string& text) const;

    std::vector<std::string> mTokens;
    std::vector<float> mScores;
    TokenMap mIds;
    uint32_t mMaxTokenLength = 0;
};

} // namespace cwb
