#include "core/tokenizer/llama2c_tokenizer.h"

#include "core/tokenizer/bpe_merge.h"
#include "core/tokenizer/unicode_classes.h"
#include "core/util/error.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

namespace cwb {

namespace {

constexpr TokenId kBos = 1; // llama2.c stores these as "\n<s>\n" and "\n</s>\n"
constexpr TokenId kEos = 2;
constexpr TokenId kByteOffset = 3; // run.c: byte b is token b + 3
// Far above any real token; protects against reading a garbage length as a huge allocation.
constexpr int32_t kMaxPieceBytes = 1 << 16;

} // namespace

Llama2cTokenizer::Llama2cTokenizer(std::vector<std::string> tokens, std::vector<float> scores,
                                   uint32_t maxTokenLength)
    : mTokens(std::move(tokens)), mScores(std::move(scores)), mMaxTokenLength(maxTokenLength) {
    mBos = vocabSize() > kBos ? kBos : -1;
    mEos = vocabSize() > kEos ? kEos : -1;
    mAddBos = true;
    mIds = buildTokenMap(mTokens);
    setVocabulary(std::make_shared<const TokenizerData>(sentencePieceData()));
}

// llama2.c's exporter wrote SentencePiece pieces with U+2581 turned into spaces and BOS/EOS wrapped in newlines;
// undo that so the vocabulary can be written as a GGUF "llama" tokenizer.
TokenizerData Llama2cTokenizer::sentencePieceData() const {
    TokenizerData d;
    d.model = "llama";
    d.scores = mScores;
    d.bos = mBos;
    d.eos = mEos;
    d.unk = vocabSize() > 0 ? 0 : -1;
    for (size_t i = 0; i < mTokens.size(); ++i) {
        std::string t = mTokens[i];
        if (TokenId(i) == mBos && t == "\n<s>\n") t = "<s>";
        if (TokenId(i) == mEos && t == "\n</s>\n") t = "</s>";
        std::string piece;
        for (char c : t) piece += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
        int32_t type = int32_t(TokenType::Normal);
        if (TokenId(i) == d.unk) type = int32_t(TokenType::Unknown);
        else if (TokenId(i) == mBos || TokenId(i) == mEos) type = int32_t(TokenType::Control);
        else if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>') type = int32_t(TokenType::Byte);
        d.tokens.push_back(std::move(piece));
        d.types.push_back(type);
    }
    return d;
}

TokenId Llama2cTokenizer::lookup(const std::string& text) const {
    const auto it = mIds.find(text);
    return it == mIds.end() ? -1 : it->second;
}

std::vector<TokenId> Llama2cTokenizer::encode(const std::string& text, bool addBos) const {
    std::vector<TokenId> ids;
    if (addBos && mBos >= 0) ids.push_back(mBos);
    const size_t mergeStart = ids.size(); // BOS never merges
    // run.c prepends the dummy prefix " " to non-empty text, as SentencePiece's add_dummy_prefix does.
    if (!text.empty()) {
        const TokenId space = lookup(" ");
        if (space >= 0) ids.push_back(space);
    }
    for (size_t i = 0; i < text.size();) {
        const size_t len = unicode::utf8Length(text, i);
        const TokenId id = lookup(text.substr(i, len));
        if (id >= 0) {
            ids.push_back(id);
        } else {
            for (size_t k = 0; k < len; ++k) {
                const TokenId byteId = static_cast<unsigned char>(text[i + k]) + kByteOffset;
                // Vocabularies without byte tokens fall back to <unk> (id 0) rather than an invalid id.
                ids.push_back(byteId < vocabSize() ? byteId : 0);
            }
        }
        i += len;
    }
    // run.c merges the best-scoring adjacent pair (leftmost on ties) until none merges, rescanning all pairs
    // each round; bpeMerge's priority queue gives the same result without the quadratic cost.
    std::string joined;
    std::vector<size_t> bounds;
    for (size_t i = mergeStart; i < ids.size(); ++i) {
        bounds.push_back(joined.size());
        joined += mTokens[ids[i]];
    }
    bounds.push_back(joined.size());
    auto priority = [this](std::string_view l, std::string_view r, double& p) {
        std::string both(l);
        both.append(r);
        const TokenId id = lookup(both);
        if (id < 0) return false;
        p = mScores[id];
        return true;
    };
    const auto pieces = bpeMerge(joined, bounds, priority);
    ids.resize(mergeStart);
    for (const auto& [offset, length] : pieces) {
        ids.push_back(std::max<TokenId>(0, lookup(joined.substr(offset, length))));
    }
    return ids;
}

std::string Llama2cTokenizer::decode(const std::vector<TokenId>& ids) const {
    std::string out;
    bool first = true;
    for (TokenId id : ids) {
        if (id < 0 || id >= vocabSize()) {
            throw Error("token id " + std::to_string(id) + " is out of range (vocabulary has " +
                        std::to_string(vocabSize()) + " tokens)");
        }
        if (id == mBos || id == mEos) continue;
        std::string piece = mTokens[id];
        uint8_t byte = 0;
        if (parseByteToken(piece, byte)) piece = std::string(1, static_cast<char>(byte));
        // run.c strips the space after BOS; here the first piece, whose space is encode's dummy prefix.
        if (first && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
        first = false;
        out += piece;
    }
    return out;
}

std::string Llama2cTokenizer::tokenText(TokenId id) const {
    if (id < 0 || id >= vocabSize()) return std::string();
    return mTokens[id];
}

std::unique_ptr<Tokenizer> loadLlama2cTokenizer(const std::string& path, int32_t vocabSize, bool wholeFile) {
    if (vocabSize <= 0) {
        throw Error(path, "vocabulary size must be positive, got " + std::to_string(vocabSize));
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path, "cannot open the tokenizer file");
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw Error(path, "cannot read the tokenizer file");

    size_t pos = 0;
    auto read = [&](void* dst, size_t n, const char* what, int32_t index) {
        if (bytes.size() - pos < n) {
            throw Error(path, "file is truncated: it ends while reading the " + std::string(what) +
                                  (index >= 0 ? " of token " + std::to_string(index) : std::string()) + " (" +
                                  std::to_string(bytes.size()) + " bytes, expected " + std::to_string(vocabSize) +
                                  " tokens)");
        }
        std::memcpy(dst, bytes.data() + pos, n);
        pos += n;
    };

    uint32_t maxTokenLength = 0;
    read(&maxTokenLength, 4, "header (max_token_length)", -1);
    // Each token takes at least 8 bytes; refuse before allocating for a vocabulary the file cannot hold.
    if (static_cast<uint64_t>(vocabSize) * 8 > bytes.size()) {
        throw Error(path, "file is too small (" + std::to_string(bytes.size()) + " bytes) for " +
                              std::to_string(vocabSize) + " tokens; wrong vocabulary size or truncated file");
    }
    std::vector<std::string> tokens(static_cast<size_t>(vocabSize));
    std::vector<float> scores(static_cast<size_t>(vocabSize));
    for (int32_t i = 0; i < vocabSize; ++i) {
        int32_t len = 0;
        read(&scores[i], 4, "score", i);
        // Merges are chosen by score: a NaN one would change the tokens without a word (the GGUF reader refuses it too).
        if (std::isnan(scores[i])) throw Error(path, "token " + std::to_string(i) + " has a NaN score (file corrupt)");
        read(&len, 4, "length", i);
        if (len < 0 || len > kMaxPieceBytes) {
            throw Error(path, "token " + std::to_string(i) + " has an invalid length " + std::to_string(len) +
                                  " (file corrupt or not a llama2.c tokenizer)");
        }
        tokens[i].resize(static_cast<size_t>(len));
        read(tokens[i].data(), static_cast<size_t>(len), "text", i);
    }
    if (wholeFile && pos != bytes.size())
        throw Error(path, std::to_string(bytes.size() - pos) + " bytes follow token " + std::to_string(vocabSize - 1) +
                              ": the tokenizer has more tokens than the model's embedding (" + std::to_string(vocabSize) + ")");
    return std::make_unique<Llama2cTokenizer>(std::move(tokens), std::move(scores), maxTokenLength);
}

} // namespace cwb
