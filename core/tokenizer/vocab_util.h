#pragma once
// Small helpers shared by the tokenizers: byte tokens, merge lists and token lookup maps.
#include "core/tokenizer/tokenizer.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace cwb {

using TokenMap = std::unordered_map<std::string, TokenId>;
// (left id, right id) → merge rank; lower ranks merge first.
using PairRanks = std::unordered_map<uint64_t, int32_t>;

inline uint64_t pairKey(TokenId left, TokenId right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// "<0xXX>" → byte value.
bool parseByteToken(const std::string& text, uint8_t& byte);
std::string byteTokenText(uint8_t byte);

// Map from token text to id; the first of duplicated strings wins.
TokenMap buildTokenMap(const std::vector<std::string>& tokens);

// Parses "left right" merges (split at the first space after the first byte, as llama.cpp does) into ranks.
// Throws cwb::Error when a merge is malformed or names a token (or a merged result) missing from the vocabulary.
PairRanks buildPairRanks(const std::vector<std::string>& merges, const TokenMap& ids);

// Human-readable quoting of a token for error messages (control bytes escaped, long ones cut).
std::string quoteToken(const std::string& text);

} // namespace cwb
