#include "core/tokenizer/bpe_merge.h"

#include "core/tokenizer/unicode_classes.h"

#include <queue>

namespace cwb {

namespace {

struct Symbol {
    int prev;
    int next;
    size_t offset;
    size_t length; // 0 once merged into its left neighbour
};

struct Bigram {
    double priority;
    int left;
    int right;
    size_t size; // left.length + right.length when queued; a mismatch means the pair went stale

    bool operator<(const Bigram& o) const {
        // std::priority_queue pops the largest: higher priority, then smaller (leftmost) index.
        return priority < o.priority || (priority == o.priority && left > o.left);
    }
};

} // namespace

std::vector<size_t> utf8Bounds(const std::string& text) {
    std::vector<size_t> bounds;
    bounds.reserve(text.size() + 1);
    size_t i = 0;
    while (i < text.size()) {
        bounds.push_back(i);
        i += unicode::utf8Length(text, i);
    }
    bounds.push_back(text.size());
    return bounds;
}

std::vector<std::pair<size_t, size_t>> bpeMerge(std::string_view text, const std::vector<size_t>& bounds,
                                                const PairPriority& priority) {
    std::vector<Symbol> symbols;
    if (bounds.size() < 2) return {};
    const int count = static_cast<int>(bounds.size() - 1);
    symbols.reserve(count);
    for (int i = 0; i < count; ++i) {
        symbols.push_back({i - 1, i + 1 < count ? i + 1 : -1, bounds[i], bounds[i + 1] - bounds[i]});
    }

    std::priority_queue<Bigram> queue;
    auto tryAdd = [&](int left, int right) {
        if (left < 0 || right < 0) return;
        const Symbol& l = symbols[left];
        const Symbol& r = symbols[right];
        double p = 0;
        if (priority(text.substr(l.offset, l.length), text.substr(r.offset, r.length), p)) {
            queue.push({p, left, right, l.length + r.length});
        }
    };
    for (int i = 1; i < count; ++i) tryAdd(i - 1, i);

    while (!queue.empty()) {
        const Bigram top = queue.top();
        queue.pop();
        Symbol& l = symbols[top.left];
        Symbol& r = symbols[top.right];
        if (l.length == 0 || r.length == 0 || l.length + r.length != top.size || l.next != top.right) continue;
        l.length += r.length;
        r.length = 0;
        l.next = r.next;
        if (r.next >= 0) symbols[r.next].prev = top.left;
        tryAdd(l.prev, top.left);
        tryAdd(top.left, l.next);
    }

    std::vector<std::pair<size_t, size_t>> out;
    for (int i = 0; i >= 0 && i < count; i = symbols[i].next) out.emplace_back(symbols[i].offset, symbols[i].length);
    return out;
}

} // namespace cwb
