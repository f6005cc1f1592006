#pragma once
// Finds special/added tokens (e.g. "<|endoftext|>") written literally in the text, so they become their own
// id instead of being split by BPE. Longest match wins where several start at the same byte.
#include "core/tokenizer/tokenizer.h"

#include <string>
#include <utility>
#include <vector>

namespace cwb {

class SpecialTokenMatcher {
public:
    struct Fragment {
        TokenId id;       // >= 0: a matched special token; -1: plain text in `text`
        std::string text;
    };

    void add(const std::string& text, TokenId id);
    bool empty() const { return mCount == 0; }
    std::vector<Fragment> split(const std::string& text) const;

private:
    // Candidates grouped by first byte, longest first, so the scan costs little for ordinary text.
    std::vector<std::pair<std::string, TokenId>> mByFirstByte[256];
    size_t mCount = 0;
};

} // namespace cwb
