#pragma once
// The chunking shared by perplexity and divergence: chunk c holds tokens [c·ctx, (c+1)·ctx) with its first
// token replaced by BOS; positions first .. ctx-2 are scored against the token that follows each.
#include <vector>

#include <ATen/ATen.h>

#include "core/eval/perplexity.h"

namespace cwb {

struct ChunkPlan {
    int64_t chunks = 0;
    int64_t ctx = 0;
    int64_t first = 0;    // first scored position (ctx / 2)
    int64_t scored = 0;   // positions scored per chunk (ctx - 1 - first)
};

// Validates ctx against the text and the model; throws cwb::Error with what to change.
ChunkPlan planChunks(const Transformer& model, const std::vector<TokenId>& tokens, const PerplexityParams& params);
at::Tensor chunkTokens(const std::vector<TokenId>& tokens, const ChunkPlan& plan, int64_t chunk, TokenId bos);   // [1, ctx]
at::Tensor chunkTargets(const std::vector<TokenId>& tokens, const ChunkPlan& plan, int64_t chunk);                 // [scored]

} // namespace cwb
