#include "core/tokenizer/special_token_matcher.h"

#include <algorithm>

namespace cwb {

void SpecialTokenMatcher::add(const std::string& text, TokenId id) {
    if (text.empty()) return;
    auto& bucket = mByFirstByte[static_cast<unsigned char>(text[0])];
    bucket.emplace_back(text, id);
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    ++mCount;
}

std::vector<SpecialTokenMatcher::Fragment> SpecialTokenMatcher::split(const std::string& text) const {
    std::vector<Fragment> out;
    size_t plainStart = 0;
    size_t i = 0;
    while (i < text.size()) {
        const auto& bucket = mByFirstByte[static_cast<unsigned char>(text[i])];
        const std::pair<std::string, TokenId>* hit = nullptr;
        for (const auto& candidate : bucket) {
            if (text.compare(i, candidate.first.size(), candidate.first) == 0) {
                hit = &candidate;
                break;
            }
        }
        if (!hit) {
            ++i;
            continue;
        }
        if (i > plainStart) out.push_back({-1, text.substr(plainStart, i - plainStart)});
        out.push_back({hit->second, hit->first});
        i += hit->first.size();
        plainStart = i;
    }
    if (plainStart < text.size()) out.push_back({-1, text.substr(plainStart)});
    return out;
}

} // namespace cwb
