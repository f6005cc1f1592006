#pragma once
// The merge loop shared by both BPE flavours (as llama.cpp does it): a priority queue over adjacent
// pairs, highest priority first, ties to the leftmost pair. SentencePiece ranks a pair by the score of
// the merged token, byte-level BPE (and HF tokenizer.json) by the merge's rank.
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cwb {

// Returns true and sets priority when left+right may merge; higher priority merges first.
using PairPriority = std::function<bool(std::string_view left, std::string_view right, double& priority)>;

// text is cut at the byte offsets in bounds (first 0, last text.size()) into the starting symbols;
// returns the final symbols as (offset, length) pairs into text.
std::vector<std::pair<size_t, size_t>> bpeMerge(std::string_view text, const std::vector<size_t>& bounds,
                                                const PairPriority& priority);

// Byte offsets of the UTF-8 characters of text, plus text.size() at the end.
std::vector<size_t> utf8Bounds(const std::string& text);

} // namespace cwb
