#include "core/tokenizer/pre_tokenizer.h"

#include "core/tokenizer/unicode_classes.h"

namespace cwb {

using unicode::CodePoint;

PreTokenizerKind preTokenizerFromName(const std::string& name, bool* known) {
    if (known) *known = true;
    // Names as llama.cpp's converter writes them; smaug-bpe and dbrx use Llama 3's regex.
    for (const char* n : {"", "gpt2", "gpt-2", "default", "phi-2"}) {
        if (name == n) return PreTokenizerKind::Gpt2;
    }
    for (const char* n : {"llama-bpe", "llama3", "llama-v3", "falcon3", "smaug-bpe", "dbrx"}) {
        if (name == n) return PreTokenizerKind::Llama3;
    }
    if (name == "qwen2" || name == "deepseek-r1-qwen") return PreTokenizerKind::Qwen2;
    if (known) *known = false;
    return PreTokenizerKind::Gpt2;
}

const char* preTokenizerRegex(PreTokenizerKind kind) {
    switch (kind) {
    case PreTokenizerKind::Llama3:
        return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    case PreTokenizerKind::Qwen2:
        return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    case PreTokenizerKind::Gpt2:
        break;
    }
    return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
}

namespace {

// Scans one regex alternative at a time, in the order the pattern lists them; each match* returns the
// number of code points matched at position i, or 0 when that alternative does not match.
class Scanner {
public:
    Scanner(const std::vector<CodePoint>& cps) : mCps(cps), mN(cps.size()) {}

    uint32_t at(size_t i) const { return i < mN ? mCps[i].cp : 0xFFFFFFFFu; }
    bool valid(size_t i) const { return i < mN; }
    bool isL(size_t i) const { return valid(i) && unicode::isLetter(at(i)); }
    bool isN(size_t i) const { return valid(i) && unicode::isNumber(at(i)); }
    bool isS(size_t i) const { return valid(i) && unicode::isWhitespace(at(i)); }
    bool isNl(size_t i) const { return valid(i) && (at(i) == '\r' || at(i) == '\n'); }
    // [^\s\p{L}\p{N}]
    bool isOther(size_t i) const { return valid(i) && !isS(i) && !isL(i) && !isN(i); }

    size_t runOf(size_t i, bool (Scanner::*pred)(size_t) const) const {
        size_t j = i;
        while ((this->*pred)(j)) ++j;
        return j - i;
    }

    // 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive (Llama 3 / Qwen2).
    size_t contraction(size_t i, bool ignoreCase) const {
        if (at(i) != '\'') return 0;
        auto lower = [&](size_t k) -> uint32_t {
            uint32_t c = at(k);
            return (ignoreCase && c >= 'A' && c <= 'Z') ? c + 32 : c;
        };
        const uint32_t a = lower(i + 1);
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        const uint32_t b = lower(i + 2);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
        return 0;
    }

    // \s+(?!\S)|\s+ : a whitespace run, leaving its last character to the next word when a non-space follows.
    size_t whitespace(size_t i) const {
        const size_t run = runOf(i, &Scanner::isS);
        if (run == 0) return 0;
        if (i + run == mN || run == 1) return run;
        return run - 1;
    }

    size_t gpt2(size_t i) const {
        if (size_t n = contraction(i, false)) return n;
        const size_t sp = at(i) == ' ' ? 1 : 0;
        if (isL(i + sp)) return sp + runOf(i + sp, &Scanner::isL);
        if (isN(i + sp)) return sp + runOf(i + sp, &Scanner::isN);
        if (isOther(i + sp)) return sp + runOf(i + sp, &Scanner::isOther);
        if (size_t n = whitespace(i)) return n;
        return 1;
    }

    size_t llama3(size_t i, size_t maxDigits) const {
        if (size_t n = contraction(i, true)) return n;
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if (isL(i)) return runOf(i, &Scanner::isL);
        if (valid(i) && !isNl(i) && !isN(i) && isL(i + 1)) return 1 + runOf(i + 1, &Scanner::isL);
        // \p{N}{1,maxDigits}
        if (isN(i)) {
            size_t n = 0;
            while (n < maxDigits && isN(i + n)) ++n;
            return n;
        }
        //  ?[^\s\p{L}\p{N}]+[\r\n]*
        const size_t sp = at(i) == ' ' ? 1 : 0;
        if (isOther(i + sp)) {
            size_t j = i + sp + runOf(i + sp, &Scanner::isOther);
            return j - i + runOf(j, &Scanner::isNl);
        }
        // \s*[\r\n]+ : greedy \s* backs off to the last newline inside the whitespace run.
        const size_t run = runOf(i, &Scanner::isS);
        for (size_t k = run; k > 0; --k) {
            if (isNl(i + k - 1)) return k;
        }
        if (size_t n = whitespace(i)) return n;
        return 1;
    }

private:
    const std::vector<CodePoint>& mCps;
    size_t mN;
};

} // namespace

std::vector<std::string> preTokenize(const std::string& text, PreTokenizerKind kind) {
    const std::vector<CodePoint> cps = unicode::decodeUtf8(text);
    Scanner scanner(cps);
    std::vector<std::string> out;
    size_t i = 0;
    while (i < cps.size()) {
        size_t n = 0;
        switch (kind) {
        case PreTokenizerKind::Gpt2: n = scanner.gpt2(i); break;
        case PreTokenizerKind::Llama3: n = scanner.llama3(i, 3); break;
        case PreTokenizerKind::Qwen2: n = scanner.llama3(i, 1); break;
        }
        if (n == 0) n = 1; // cannot happen with the patterns above; guards against an endless loop
        const size_t begin = cps[i].offset;
        const size_t end = cps[i + n - 1].offset + cps[i + n - 1].length;
        out.push_back(text.substr(begin, end - begin));
        i += n;
    }
    return out;
}

} // namespace cwb
