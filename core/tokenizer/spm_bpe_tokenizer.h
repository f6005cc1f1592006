#pragma once
// SentencePiece BPE (GGUF tokenizer.ggml.model == "llama"), as llama.cpp's SPM tokenizer does it:
// spaces become U+2581, pairs merge by the score of the merged token, unknown characters fall back to
// <0xXX> byte tokens. Built from HF tokenizer.json, merges (ranks) replace the scores.
#include "core/tokenizer/special_token_matcher.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocab_util.h"

namespace cwb {

class SpmBpeTokenizer : public Tokenizer {
public:
    // data must be validated by makeTokenizer (types filled for every token). Throws cwb::Error on bad merges.
    explicit SpmBpeTokenizer(const TokenizerData& data);

    std::vector<TokenId> encode(const std::string& text, bool addBos) const override;
    std::vector<TokenId> encodeWithSpecialTokens(const std::string& text, bool addBos) const override;
    std::string decode(const std::vector<TokenId>& ids) const override;
    std::string tokenText(TokenId id) const override;
    int32_t vocabSize() const override { return static_cast<int32_t>(mTokens.size()); }
    std::string kind() const override { return "spm-bpe"; }

    // Hugging Face's Metaspace pre-tokenizer adds the dummy "▁" only when the text does not already start
    // with a space (SentencePiece and the Prepend normalizer always add it).
    void setPrefixOnlyWithoutSpace(bool on) { mPrefixOnlyWithoutSpace = on; }
    // The dummy prefix goes before every piece of text, including text that follows a user-defined token (llama.cpp,
    // Hugging Face's Prepend normalizer); Metaspace with prepend_scheme "first" puts it before the text's start only.
    void setPrefixFirstOnly(bool on) { mPrefixFirstOnly = on; }
    // Metaspace with split: the text is cut before every "▁" and merges never cross the cuts.
    void setSplitOnSpace(bool on) { mSplitOnSpace = on; }

private:
    std::vector<TokenId> encodeMatching(const SpecialTokenMatcher& matcher, const std::string& text, bool addBos) const;
    void encodePlain(const std::string& text, bool withPrefix, std::vector<TokenId>& out) const;
    void encodeEscaped(const std::string& escaped, std::vector<TokenId>& out) const;
    bool pairPriority(std::string_view left, std::string_view right, double& priority) const;
    TokenId findPiece(std::string_view piece) const;

    std::vector<std::string> mTokens;
    std::vector<float> mScores;
    std::vector<TokenType> mTypes;
    TokenMap mPieces;     // normal and user-defined tokens: the only ones merging may produce
    PairRanks mPairRanks; // from HF merges; when non-empty it ranks pairs instead of mScores
    TokenId mByteIds[256];
    TokenId mUnk = -1;
    bool mAddSpacePrefix = true;
    bool mPrefixOnlyWithoutSpace = false;
    bool mPrefixFirstOnly = false;
    bool mSplitOnSpace = false;
    SpecialTokenMatcher mUserDefined;
    SpecialTokenMatcher mUserDefinedAndControl;   // encodeWithSpecialTokens
};

} // namespace cwb
