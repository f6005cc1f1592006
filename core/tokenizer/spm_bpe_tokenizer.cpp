#include "core/tokenizer/spm_bpe_tokenizer.h"

#include "core/tokenizer/bpe_merge.h"
#include "core/util/error.h"

namespace cwb {

namespace {

const std::string kSpace = "\xE2\x96\x81"; // U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space

std::string escapeSpaces(const std::string& text) {
    std::string out;
    out.reserve(text.size() + 8);
    for (char c : text) {
        if (c == ' ') out += kSpace;
        else out += c;
    }
    return out;
}

std::string unescapeSpaces(const std::string& piece) {
    std::string out;
    out.reserve(piece.size());
    for (size_t i = 0; i < piece.size();) {
        if (piece.compare(i, kSpace.size(), kSpace) == 0) {
            out += ' ';
            i += kSpace.size();
        } else {
            out += piece[i++];
        }
    }
    return out;
}

} // namespace

SpmBpeTokenizer::SpmBpeTokenizer(const TokenizerData& data)
    : mTokens(data.tokens), mScores(data.scores), mUnk(data.unk), mAddSpacePrefix(data.addSpacePrefix) {
    mBos = data.bos;
    mEos = data.eos;
    mAddBos = data.addBos;
    if (mScores.empty()) mScores.assign(mTokens.size(), 0.0f);
    mTypes.reserve(mTokens.size());
    for (int32_t t : data.types) mTypes.push_back(static_cast<TokenType>(t));
    for (auto& id : mByteIds) id = -1;

    for (size_t i = 0; i < mTokens.size(); ++i) {
        const auto id = static_cast<TokenId>(i);
        const TokenType type = mTypes[i];
        if (type == TokenType::Byte) {
            uint8_t byte = 0;
            if (parseByteToken(mTokens[i], byte) && mByteIds[byte] < 0) mByteIds[byte] = id;
        } else if (type == TokenType::Normal || type == TokenType::Undefined || type == TokenType::UserDefined) {
            mPieces.emplace(mTokens[i], id);
        }
        if (type == TokenType::UserDefined) mUserDefined.add(mTokens[i], id);
        if ((type == TokenType::UserDefined || type == TokenType::Control) && !mTokens[i].empty())
            mUserDefinedAndControl.add(mTokens[i], id);
    }
    if (!data.merges.empty()) mPairRanks = buildPairRanks(data.merges, buildTokenMap(mTokens));
}

TokenId SpmBpeTokenizer::findPiece(std::string_view piece) const {
    const auto it = mPieces.find(std::string(piece));
    return it == mPieces.end() ? -1 : it->second;
}

bool SpmBpeTokenizer::pairPriority(std::string_view left, std::string_view right, double& priority) const {
    if (!mPairRanks.empty()) {
        const TokenId l = findPiece(left);
        const TokenId r = findPiece(right);
        if (l < 0 || r < 0) return false;
        const auto it = mPairRanks.find(pairKey(l, r));
        if (it == mPairRanks.end()) return false;
        priority = -static_cast<double>(it->second);
        return true;
    }
    std::string joined(left);
    joined.append(right);
    const TokenId id = findPiece(joined);
    if (id < 0) return false;
    priority = mScores[id];
    return true;
}

void SpmBpeTokenizer::encodePlain(const std::string& text, bool withPrefix, std::vector<TokenId>& out) const {
    std::string escaped = escapeSpaces(text);
    if (withPrefix && mAddSpacePrefix && !(mPrefixOnlyWithoutSpace && !text.empty() && text[0] == ' ')) {
        escaped.insert(0, kSpace);
    }
    if (!mSplitOnSpace) {
        encodeEscaped(escaped, out);
        return;
    }
    size_t start = 0;
    while (start < escaped.size()) {
        size_t next = escaped.find(kSpace, start + 1);
        if (next == std::string::npos) next = escaped.size();
        encodeEscaped(escaped.substr(start, next - start), out);
        start = next;
    }
}

void SpmBpeTokenizer::encodeEscaped(const std::string& escaped, std::vector<TokenId>& out) const {
    const std::vector<std::pair<size_t, size_t>> pieces = bpeMerge(
        escaped, utf8Bounds(escaped),
        [this](std::string_view l, std::string_view r, double& p) { return pairPriority(l, r, p); });
    for (const auto& [offset, length] : pieces) {
        const std::string_view piece(escaped.data() + offset, length);
        const TokenId id = findPiece(piece);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        // byte_fallback: every byte must have its token, otherwise the whole symbol becomes unk.
        bool allBytes = true;
        for (char c : piece) allBytes = allBytes && mByteIds[static_cast<unsigned char>(c)] >= 0;
        if (allBytes) {
            for (char c : piece) out.push_back(mByteIds[static_cast<unsigned char>(c)]);
        } else if (mUnk >= 0) {
            out.push_back(mUnk);
        }
    }
}

std::vector<TokenId> SpmBpeTokenizer::encode(const std::string& text, bool addBos) const {
    return encodeMatching(mUserDefined, text, addBos);
}

std::vector<TokenId> SpmBpeTokenizer::encodeWithSpecialTokens(const std::string& text, bool addBos) const {
    return encodeMatching(mUserDefinedAndControl, text, addBos);
}

std::vector<TokenId> SpmBpeTokenizer::encodeMatching(const SpecialTokenMatcher& matcher, const std::string& text, bool addBos) const {
    std::vector<TokenId> out;
    if (addBos && mBos >= 0) out.push_back(mBos);
    if (text.empty()) return out;
    if (matcher.empty()) {
        encodePlain(text, true, out);
        return out;
    }
    // As llama.cpp: text after a matched token gets the dummy prefix again (unless only the start may have it).
    bool prefixNext = true;
    for (const auto& fragment : matcher.split(text)) {
        if (fragment.id >= 0) {
            out.push_back(fragment.id);
            prefixNext = !mPrefixFirstOnly;
        } else {
            encodePlain(fragment.text, prefixNext, out);
            prefixNext = false;
        }
    }
    return out;
}

std::string SpmBpeTokenizer::decode(const std::vector<TokenId>& ids) const {
    std::string out;
    bool stripSpace = mAddSpacePrefix; // the dummy prefix encode put before this piece
    for (TokenId id : ids) {
        if (id < 0 || id >= vocabSize()) {
            throw Error("token id " + std::to_string(id) + " is out of range (vocabulary has " +
                        std::to_string(vocabSize()) + " tokens)");
        }
        std::string piece;
        uint8_t byte = 0;
        switch (mTypes[id]) {
        case TokenType::Control: continue;
        case TokenType::Unknown: piece = " \xE2\x81\x87 "; break; // " ⁇ ", as SentencePiece shows unk
        case TokenType::UserDefined:
            out += mTokens[id];
            stripSpace = mAddSpacePrefix && !mPrefixFirstOnly;
            continue;
        case TokenType::Byte:
            piece = parseByteToken(mTokens[id], byte) ? std::string(1, static_cast<char>(byte)) : mTokens[id];
            break;
        default:
            piece = unescapeSpaces(mTokens[id]);
            // The dummy prefix that encode added shows up as a leading space.
            if (stripSpace && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
            break;
        }
        stripSpace = false;
        out += piece;
    }
    return out;
}

std::string SpmBpeTokenizer::tokenText(TokenId id) const {
    if (id < 0 || id >= vocabSize()) return std::string();
    return mTokens[id];
}

} // namespace cwb
