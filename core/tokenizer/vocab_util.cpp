#include "core/tokenizer/vocab_util.h"

#include "core/util/error.h"

#include <cstdio>

namespace cwb {

bool parseByteToken(const std::string& text, uint8_t& byte) {
    if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return false;
    unsigned value = 0;
    for (int i = 3; i < 5; ++i) {
        const char c = text[i];
        value <<= 4;
        if (c >= '0' && c <= '9') value |= c - '0';
        else if (c >= 'A' && c <= 'F') value |= c - 'A' + 10;
        else if (c >= 'a' && c <= 'f') value |= c - 'a' + 10;
        else return false;
    }
    byte = static_cast<uint8_t>(value);
    return true;
}

std::string byteTokenText(uint8_t byte) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", byte);
    return buf;
}

TokenMap buildTokenMap(const std::vector<std::string>& tokens) {
    TokenMap map;
    map.reserve(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) map.emplace(tokens[i], static_cast<TokenId>(i));
    return map;
}

PairRanks buildPairRanks(const std::vector<std::string>& merges, const TokenMap& ids) {
    PairRanks ranks;
    ranks.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const std::string& merge = merges[rank];
        const size_t space = merge.size() > 1 ? merge.find(' ', 1) : std::string::npos;
        if (space == std::string::npos || space + 1 >= merge.size()) {
            throw Error("merge " + std::to_string(rank) + " (" + quoteToken(merge) +
                        ") is not two tokens separated by a space");
        }
        const std::string left = merge.substr(0, space);
        const std::string right = merge.substr(space + 1);
        for (const std::string* part : {&left, &right}) {
            if (!ids.count(*part)) {
                throw Error("merge " + std::to_string(rank) + " (" + quoteToken(merge) + ") names token " +
                            quoteToken(*part) + ", which is not in the vocabulary");
            }
        }
        if (!ids.count(left + right)) {
            throw Error("merge " + std::to_string(rank) + " (" + quoteToken(merge) + ") produces " +
                        quoteToken(left + right) + ", which is not in the vocabulary");
        }
        // A repeated merge keeps its first (best) rank, as Hugging Face's loader does.
        ranks.emplace(pairKey(ids.at(left), ids.at(right)), static_cast<int32_t>(rank));
    }
    return ranks;
}

std::string quoteToken(const std::string& text) {
    std::string out = "'";
    for (size_t i = 0; i < text.size() && i < 40; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x20 || c == 0x7F) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\x%02X", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    if (text.size() > 40) out += "...";
    return out + "'";
}

} // namespace cwb
