#pragma once
// Tokenizers turn text into token ids and back. Every model format brings its own vocabulary; the
// factories below build one of the three algorithms we support from the format's data.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cwb {

using TokenId = int32_t;
struct TokenizerData;

class Tokenizer {
public:
    virtual ~Tokenizer() = default;

    // Text to ids. addBos puts the BOS id first (when the vocabulary has one).
    virtual std::vector<TokenId> encode(const std::string& text, bool addBos) const = 0;
    // As encode, but control tokens written in the text ("<|im_start|>", "</s>") become their own ids, as Hugging Face
    // tokenizers do and llama.cpp with parse_special: for chat prompts. Byte-level BPE already does so in encode.
    virtual std::vector<TokenId> encodeWithSpecialTokens(const std::string& text, bool addBos) const { return encode(text, addBos); }
    // Ids to text; special tokens (BOS/EOS/control) are dropped, byte tokens are reassembled.
    virtual std::string decode(const std::vector<TokenId>& ids) const = 0;
    // The stored string of one token, as the vocabulary holds it (for display).
    virtual std::string tokenText(TokenId id) const = 0;
    virtual int32_t vocabSize() const = 0;
    // Short name of the algorithm: "spm-bpe", "byte-bpe", "llama2c".
    virtual std::string kind() const = 0;

    TokenId bos() const { return mBos; }
    TokenId eos() const { return mEos; }
    // Whether the vocabulary's own settings ask for BOS at the start of a text (TokenizerData::addBos,
    // tokenizer_config.json's add_bos_token, llama2.c: always). Callers pass it as encode's addBos.
    bool addBosByDefault() const { return mAddBos; }
    // The id a text's tokens start with: BOS where the vocabulary adds one, -1 where it adds none (Qwen2, GPT-2), as
    // llama.cpp's perplexity takes it. Evaluation chunks and calibration windows start with it; they started with BOS
    // (or id 0) for every model, so Qwen2 and GPT-2 perplexities differed from the reference (user probe).
    TokenId textBos() const { return mAddBos ? mBos : -1; }
    // Ids that end generation: EOS and the vocabulary's other stop ids (TokenizerData::stopIds), without repeats.
    std::vector<TokenId> stopIds() const;
    // The vocabulary in GGUF's terms (tokenizer.ggml.*, types resolved), for exporters; nullptr when unknown.
    std::shared_ptr<const TokenizerData> vocabulary() const { return mVocabulary; }
    void setVocabulary(std::shared_ptr<const TokenizerData> data) { mVocabulary = std::move(data); }
    // What the files ask for that this tokenizer does not do (a normalizer, a pre-tokenizer pattern it does not have):
    // its ids may differ from the model's own tokenizer's for some texts. Said by the commands that tokenize.
    const std::vector<std::string>& warnings() const { return mWarnings; }
    void addWarning(std::string warning) { mWarnings.push_back(std::move(warning)); }

protected:
    std::vector<std::string> mWarnings;
    std::shared_ptr<const TokenizerData> mVocabulary;
    TokenId mBos = -1;
    TokenId mEos = -1;
    bool mAddBos = false;
};

// GGUF/SentencePiece token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

// Everything a tokenizer can be built from, as GGUF stores it (tokenizer.ggml.*); other formats fill the same.
struct TokenizerData {
    std::string model;               // "llama" (SentencePiece BPE with scores) or "gpt2" (byte-level BPE with merges)
    std::string pre;                 // gpt2 pre-tokenizer: "gpt2" (default), "llama-bpe" (Llama 3), "qwen2"
    std::vector<std::string> tokens;
    std::vector<float> scores;       // llama: merge priority scores; may be empty for gpt2
    std::vector<int32_t> types;      // TokenType per token; may be empty (then derived, see makeTokenizer)
    std::vector<std::string> merges; // gpt2: "left right" per line, in rank order. llama: normally empty; when
                                     // given (HF tokenizer.json) the merge ranks replace the scores
    TokenId bos = -1;
    TokenId eos = -1;
    TokenId unk = -1;
    TokenId pad = -1;                // padding token, carried over for engines (cwb itself never pads)
    TokenId sep = -1;                // separator, classifier and mask tokens (BERT-style vocabularies), carried
    TokenId cls = -1;                // over for engines like the padding token; cwb's models never use them
    TokenId mask = -1;
    std::vector<TokenId> stopIds;    // besides EOS, ids that end generation: GGUF eot/eom_token_id, the other
                                     // entries of generation_config.json's eos_token_id list
    bool addBos = true;              // llama default true, gpt2 default false
    bool addEos = false;             // the vocabulary asks for EOS after a text (GGUF add_eos_token, tokenizer_config's
                                     // add_eos_token): carried for engines; cwb never appends EOS itself
    bool addSpacePrefix = true;      // SentencePiece "add_dummy_prefix"
    bool byteLevelPrefixSpace = false;   // byte-level: tokenizer.json's ByteLevel add_prefix_space, a space before each
                                         // text between special tokens that does not start with one (GGUF has no key)
    std::string chatTemplate;        // Jinja chat template (GGUF tokenizer.chat_template), carried over for engines
};

// Throws cwb::Error when the data is inconsistent (e.g. a merge naming a missing token, ids out of range).
// Empty types are derived: bos/eos Control, unk Unknown, "<0xXX>" Byte (llama only), the rest Normal.
// An unknown gpt2 `pre` name falls back to the GPT-2 regex.
std::unique_ptr<Tokenizer> makeTokenizer(const TokenizerData& data);

// Hugging Face tokenizer.json (BPE model: byte-level as in GPT-2/Llama 3/Qwen2, or SentencePiece-style as in
// Llama 2). Throws cwb::Error naming the file on anything it cannot read.
std::unique_ptr<Tokenizer> loadHfTokenizer(const std::string& tokenizerJsonPath);
// The files loadHfTokenizer reads for `tokenizerJsonPath`: it, and the files beside it that it takes when they open
// (special tokens, chat template, stop tokens), found as the loader finds them.
std::vector<std::string> hfTokenizerFilesRead(const std::string& tokenizerJsonPath);

// SentencePiece tokenizer.model (the protobuf Llama 2 and Mistral ship): BPE models with the identity normalizer, read
// into the same vocabulary llama.cpp's GGUF conversion writes. Throws cwb::Error naming the file for a damaged file, a
// unigram model or another normalizer.
std::unique_ptr<Tokenizer> loadSentencePieceTokenizer(const std::string& path);

// llama2.c tokenizer.bin: uint32 max_token_length, then vocabSize × (f32 score, int32 len, bytes). The format does not
// say how many tokens it holds; with `wholeFile`, bytes left after vocabSize tokens are an error (more tokens than the
// model's embedding) instead of being ignored as llama2.c does.
std::unique_ptr<Tokenizer> loadLlama2cTokenizer(const std::string& path, int32_t vocabSize, bool wholeFile = false);

} // namespace cwb
