#include "core/tokenizer/unicode_classes.h"

#include <algorithm>

namespace cwb::unicode {

namespace {

bool inRanges(const CodeRange* ranges, size_t count, uint32_t cp) {
    const CodeRange* end = ranges + count;
    // First range whose upper bound is >= cp.
    const CodeRange* it = std::lower_bound(ranges, end, cp, [](const CodeRange& r, uint32_t v) { return r.hi < v; });
    return it != end && it->lo <= cp;
}

} // namespace

bool isLetter(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return inRanges(kLetterRanges, kLetterRangesCount, cp);
}

bool isNumber(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    return inRanges(kNumberRanges, kNumberRangesCount, cp);
}

bool isWhitespace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

size_t utf8Length(const std::string& s, size_t pos) {
    const auto b = static_cast<unsigned char>(s[pos]);
    size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
    return std::min(len, s.size() - pos);
}

std::vector<CodePoint> decodeUtf8(const std::string& s) {
    std::vector<CodePoint> out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const auto b = static_cast<unsigned char>(s[i]);
        uint32_t cp = kInvalid;
        size_t len = 1;
        size_t want = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
        if (want == 1) {
            cp = b;
        } else if (want > 1 && i + want <= s.size()) {
            uint32_t v = b & (0xFF >> (want + 1));
            bool ok = true;
            for (size_t k = 1; k < want; ++k) {
                const auto c = static_cast<unsigned char>(s[i + k]);
                if ((c & 0xC0) != 0x80) { ok = false; break; }
                v = (v << 6) | (c & 0x3F);
            }
            if (ok) { cp = v; len = want; }
        }
        // Malformed bytes become one kInvalid each, so the caller still covers every byte.
        out.push_back({cp, static_cast<uint32_t>(i), static_cast<uint32_t>(len)});
        i += len;
    }
    return out;
}

std::string encodeUtf8(uint32_t cp) {
    std::string out;
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return out;
}

} // namespace cwb::unicode
