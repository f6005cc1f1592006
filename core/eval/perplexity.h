#pragma once
// Perplexity by the method of llama.cpp's perplexity tool, so numbers compare with published ones:
// tokenize the whole text, cut it into non-overlapping chunks of ctx tokens, put BOS first in each chunk,
// score only the second half of each chunk.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace cwb {

class Transformer;
class Feedback;

struct PerplexityParams {
    int64_t ctx = 512;
    int64_t maxChunks = -1;   // -1: all chunks the text holds
    std::string textPath;     // named in errors about the text (too short); may be empty
};

struct PerplexityResult {
    double perplexity = 0;
    double error = 0;          // standard error of the perplexity
    double meanNll = 0;
    int64_t tokensScored = 0;
    int64_t chunks = 0;
    int64_t ctx = 0;
    double seconds = 0;
    double tokensPerSecond = 0;   // all tokens run through the model, not only the scored ones
};

// Texts past this size are refused (WikiText-103's training text is about 0.5 GiB).
constexpr size_t kMaxTextBytes = size_t(1) << 30;
// Reads a UTF-8 text file; throws cwb::Error naming the file when missing, unreadable or longer than `limit` bytes
// (a device or a pipe without end, such as /dev/zero, is refused once past it, not read until memory runs out).
std::string readTextFile(const std::string& path, size_t limit = kMaxTextBytes);

// How many chunks `tokenCount` tokens make at this ctx (what evaluatePerplexity will run).
int64_t chunkCount(int64_t tokenCount, const PerplexityParams& params);

// tokens: the whole text, tokenized with BOS first. Throws cwb::Error when the text holds no full chunk.
PerplexityResult evaluatePerplexity(Transformer& model, const std::vector<TokenId>& tokens, TokenId bos,
                                    const PerplexityParams& params, Feedback* feedback = nullptr);

// "" for a plausible result; else a sentence for the user: the model predicts the text worse than a uniform guess over
// its `vocab` tokens (perplexity above the vocabulary size), or its perplexity overflows a double (mean NLL past ~709):
// broken weights (a wrong scale, a bad dequantization), not a measurement to compare.
std::string perplexityWarning(const PerplexityResult& result, int64_t vocab);
// The same from a stored perplexity alone (project results).
std::string perplexityWarning(double perplexity, int64_t vocab);

// Accumulates −log p over scored tokens and turns it into PPL ± error as llama.cpp does.
class NllAccumulator {
public:
    // Welford's update: the variance stays exact when every nll is nearly equal (no cancellation).
    void add(double nll) {
        ++mCount;
        const double delta = nll - mMean;
        mMean += delta / double(mCount);
        mM2 += delta * (nll - mMean);
    }
    int64_t count() const { return mCount; }
    double mean() const { return mMean; }
    double perplexity() const;
    double perplexityError() const;

private:
    double mMean = 0, mM2 = 0;   // running mean and sum of squared deviations
    int64_t mCount = 0;
};

} // namespace cwb
