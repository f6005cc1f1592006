#pragma once
// Hugging Face tokenizer files written from a vocabulary in GGUF's terms, so that a Hugging Face folder exported
// from a GGUF or llama2.c model tokenizes as its source did. SentencePiece vocabularies ("llama") become a BPE
// tokenizer.json whose merges are ranked by the score of the merged token (the rule the scores encode);
// byte-level vocabularies ("gpt2") keep their merges and get the Split regex of their pre-tokenizer.
#include "core/tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cwb {

struct HfTokenizerFiles {
    nlohmann::json tokenizer;       // tokenizer.json
    nlohmann::json config;          // tokenizer_config.json
    nlohmann::json specialTokens;   // special_tokens_map.json
    std::vector<std::string> notes; // what the files cannot carry over exactly
};

// maxLength becomes model_max_length (the model's context). Throws cwb::Error when the vocabulary is empty,
// its model is neither "llama" nor "gpt2", or its ids are out of range.
HfTokenizerFiles hfTokenizerFiles(const TokenizerData& data, int64_t maxLength);

// The merges a SentencePiece vocabulary implies: every split of a mergeable token into two mergeable tokens,
// ordered by the merged token's score (highest first), then its id, then the split's offset.
std::vector<std::pair<std::string, std::string>> sentencePieceMerges(const TokenizerData& data);

} // namespace cwb
