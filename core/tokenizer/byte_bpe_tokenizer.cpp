#include "core/tokenizer/byte_bpe_tokenizer.h"

#include "core/tokenizer/bpe_merge.h"
#include "core/tokenizer/unicode_classes.h"
#include "core/util/error.h"

#include <unordered_map>

namespace cwb {

namespace {

const std::unordered_map<uint32_t, uint8_t>& unicodeToByte() {
    static const std::unordered_map<uint32_t, uint8_t> table = [] {
        std::unordered_map<uint32_t, uint8_t> t;
        const auto& forward = ByteBpeTokenizer::byteToUnicode();
        for (int b = 0; b < 256; ++b) t[unicode::decodeUtf8(forward[b])[0].cp] = static_cast<uint8_t>(b);
        return t;
    }();
    return table;
}

} // namespace

const std::array<std::string, 256>& ByteBpeTokenizer::byteToUnicode() {
    static const std::array<std::string, 256> table = [] {
        std::array<std::string, 256> t;
        // Printable Latin-1 bytes map to themselves; the others to 256, 257, ... in byte order.
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            t[b] = unicode::encodeUtf8(keep ? static_cast<uint32_t>(b) : next++);
        }
        return t;
    }();
    return table;
}

ByteBpeTokenizer::ByteBpeTokenizer(const TokenizerData& data)
    : mTokens(data.tokens), mPre(preTokenizerFromName(data.pre)), mUnk(data.unk) {
    mBos = data.bos;
    mEos = data.eos;
    mAddBos = data.addBos;
    mIgnoreMerges = mPre == PreTokenizerKind::Llama3;
    mAddSpacePrefix = data.byteLevelPrefixSpace;
    mTypes.reserve(mTokens.size());
    for (int32_t t : data.types) mTypes.push_back(static_cast<TokenType>(t));
    for (size_t i = 0; i < mTokens.size(); ++i) {
        const auto id = static_cast<TokenId>(i);
        if (mTypes[i] == TokenType::Control || mTypes[i] == TokenType::UserDefined) mSpecial.add(mTokens[i], id);
        if (mTypes[i] != TokenType::Control) mIds.emplace(mTokens[i], id);
    }
    mRanks = buildPairRanks(data.merges, buildTokenMap(mTokens));
}

void ByteBpeTokenizer::encodeWord(const std::string& word, std::vector<TokenId>& out) const {
    std::string mapped;
    mapped.reserve(word.size() * 2);
    const auto& table = byteToUnicode();
    for (char c : word) mapped += table[static_cast<unsigned char>(c)];

    if (mIgnoreMerges) {
        const auto it = mIds.find(mapped);
        if (it != mIds.end()) {
            out.push_back(it->second);
            return;
        }
    }
    auto priority = [this](std::string_view l, std::string_view r, double& p) {
        const auto li = mIds.find(std::string(l));
        const auto ri = mIds.find(std::string(r));
        if (li == mIds.end() || ri == mIds.end()) return false;
        const auto it = mRanks.find(pairKey(li->second, ri->second));
        if (it == mRanks.end()) return false;
        p = -static_cast<double>(it->second); // lower rank merges first
        return true;
    };
    for (const auto& [offset, length] : bpeMerge(mapped, utf8Bounds(mapped), priority)) {
        const std::string symbol = mapped.substr(offset, length);
        const auto it = mIds.find(symbol);
        if (it != mIds.end()) {
            out.push_back(it->second);
        } else if (mUnk >= 0) {
            // Only when the vocabulary lacks some of the 256 byte characters.
            out.push_back(mUnk);
        }
    }
}

std::vector<TokenId> ByteBpeTokenizer::encode(const std::string& text, bool addBos) const {
    std::vector<TokenId> out;
    if (addBos && mBos >= 0) out.push_back(mBos);
    for (const auto& fragment : mSpecial.split(text)) {
        if (fragment.id >= 0) {
            out.push_back(fragment.id);
            continue;
        }
        const bool prefix = mAddSpacePrefix && !fragment.text.empty() && fragment.text[0] != ' ';
        for (const std::string& word : preTokenize(prefix ? " " + fragment.text : fragment.text, mPre)) encodeWord(word, out);
    }
    return out;
}

std::string ByteBpeTokenizer::decode(const std::vector<TokenId>& ids) const {
    const auto& table = unicodeToByte();
    std::string out;
    for (TokenId id : ids) {
        if (id < 0 || id >= vocabSize()) {
            throw Error("token id " + std::to_string(id) + " is out of range (vocabulary has " +
                        std::to_string(vocabSize()) + " tokens)");
        }
        const TokenType type = mTypes[id];
        if (type == TokenType::Control) continue;
        if (type == TokenType::UserDefined) {
            out += mTokens[id]; // added tokens are stored as plain text, not byte-mapped
            continue;
        }
        const std::string& text = mTokens[id];
        for (const auto& cp : unicode::decodeUtf8(text)) {
            const auto it = table.find(cp.cp);
            if (it != table.end() && cp.cp != unicode::kInvalid) out += static_cast<char>(it->second);
            else out.append(text, cp.offset, cp.length); // not a mapped byte: keep the text as written
        }
    }
    return out;
}

std::string ByteBpeTokenizer::tokenText(TokenId id) const {
    if (id < 0 || id >= vocabSize()) return std::string();
    return mTokens[id];
}

} // namespace cwb
