// The TinyStories sample split into calibration and evaluation text by document, so the two never overlap.
#pragma once

#include <string>
#include <utility>

namespace cwb::bench {

// Documents are separated by <|endoftext|>; the first `calibDocs` go to .first, the rest to .second.
inline std::pair<std::string, std::string> splitStories(const std::string& text, int calibDocs) {
    const std::string separator = "<|endoftext|>";
    std::pair<std::string, std::string> parts;
    size_t start = 0;
    for (int doc = 0; start < text.size(); ++doc) {
        const size_t end = text.find(separator, start);
        (doc < calibDocs ? parts.first : parts.second) += text.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (end == std::string::npos) break;
        start = end + separator.size();
    }
    return parts;
}

} // namespace cwb::bench
