#pragma once
// How far a variant's next-token distribution is from the base model's on the same chunks (the scored
// half of each, as for perplexity): KL(base ‖ variant) mean and 99th percentile, and top-1 agreement.
#include <vector>

#include "core/eval/perplexity.h"

namespace cwb {

struct DivergenceResult {
    double klMean = 0;
    double klP99 = 0;
    double klMax = 0;
    double top1Agreement = 0;   // fraction of positions where both argmaxes agree
    int64_t positions = 0;
    PerplexityResult base;      // both perplexities, from the same forward passes
    PerplexityResult variant;
};

// Throws cwb::Error when the two models do not share a vocabulary size.
DivergenceResult compareModels(Transformer& base, Transformer& variant, const std::vector<TokenId>& tokens, TokenId bos,
                               const PerplexityParams& params, Feedback* feedback = nullptr);

} // namespace cwb
