#pragma once
// Just enough Unicode for the tokenizers: UTF-8 decoding that never fails, and the \p{L}, \p{N}, \s
// classes the GPT-2 / Llama 3 / Qwen2 pre-tokenizer regexes use (std::regex has no \p{..}).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cwb::unicode {

struct CodeRange {
    uint32_t lo;
    uint32_t hi;
};

// Generated tables (unicode_tables.cpp), sorted and merged.
extern const CodeRange kLetterRanges[];
extern const size_t kLetterRangesCount;
extern const CodeRange kNumberRanges[];
extern const size_t kNumberRangesCount;

bool isLetter(uint32_t cp);
bool isNumber(uint32_t cp);
bool isWhitespace(uint32_t cp); // Unicode White_Space, as regex \s

// One decoded character and where its bytes lie in the source string.
struct CodePoint {
    uint32_t cp;
    uint32_t offset;
    uint32_t length;
};

// Code point substituted for a malformed byte; it keeps its single raw byte in the source string.
constexpr uint32_t kInvalid = 0xFFFD;

// Length of the UTF-8 sequence starting at s[pos] (1 for malformed bytes), never past the end.
size_t utf8Length(const std::string& s, size_t pos);
std::vector<CodePoint> decodeUtf8(const std::string& s);
std::string encodeUtf8(uint32_t cp);

} // namespace cwb::unicode
