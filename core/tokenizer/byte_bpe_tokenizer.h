#pragma once
// Byte-level BPE (GGUF tokenizer.ggml.model == "gpt2"; GPT-2, Llama 3, Qwen2): special tokens are cut out
// first, the rest is split by the pre-tokenizer regex, each piece's bytes are mapped to GPT-2's printable
// characters and merged by rank.
#include "core/tokenizer/pre_tokenizer.h"
#include "core/tokenizer/special_token_matcher.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocab_util.h"

#include <array>

namespace cwb {

class ByteBpeTokenizer : public Tokenizer {
public:
    // data must be validated by makeTokenizer. Throws cwb::Error on bad merges.
    explicit ByteBpeTokenizer(const TokenizerData& data);

    std::vector<TokenId> encode(const std::string& text, bool addBos) const override;
    std::string decode(const std::vector<TokenId>& ids) const override;
    std::string tokenText(TokenId id) const override;
    int32_t vocabSize() const override { return static_cast<int32_t>(mTokens.size()); }
    std::string kind() const override { return "byte-bpe"; }

    PreTokenizerKind preTokenizer() const { return mPre; }

    // GPT-2's bytes_to_unicode(): each byte to a printable code point (UTF-8 encoded).
    static const std::array<std::string, 256>& byteToUnicode();

private:
    void encodeWord(const std::string& word, std::vector<TokenId>& out) const;

    std::vector<std::string> mTokens;
    std::vector<TokenType> mTypes;
    TokenMap mIds;       // every token but control ones
    PairRanks mRanks;
    PreTokenizerKind mPre = PreTokenizerKind::Gpt2;
    bool mIgnoreMerges = false; // Llama 3: a word that is a whole token is taken as is
    bool mAddSpacePrefix = false;   // ByteLevel add_prefix_space: " " before each text that does not start with one
    TokenId mUnk = -1;
    SpecialTokenMatcher mSpecial;
};

} // namespace cwb
