#include "core/eval/chunks.h"

#include "core/runtime/transformer.h"
#include "core/util/error.h"

namespace cwb {

ChunkPlan planChunks(const Transformer& model, const std::vector<TokenId>& tokens, const PerplexityParams& params) {
    if (params.ctx < 4) throw Error("evaluation: ctx must be at least 4 tokens, got " + std::to_string(params.ctx));
    if (params.ctx > model.spec().context)
        throw Error("evaluation: ctx " + std::to_string(params.ctx) + " exceeds the model's context of " +
                    std::to_string(model.spec().context) + " tokens" + model.spec().contextLimitNote());
    ChunkPlan plan;
    plan.ctx = params.ctx;
    plan.chunks = chunkCount(static_cast<int64_t>(tokens.size()), params);
    if (plan.chunks == 0)
        throw Error(params.textPath, std::string(tokens.size() <= 1 ? "the evaluation text is empty or all but empty (" : "the evaluation text has ") +
                                         std::to_string(tokens.size()) + (tokens.size() == 1 ? " token" : " tokens") +
                                         (tokens.size() <= 1 ? ")" : "") + ", less than one chunk of " + std::to_string(params.ctx) +
                                         "; use a longer text or a smaller --ctx");
    plan.first = params.ctx / 2;
    plan.scored = params.ctx - 1 - plan.first;
    return plan;
}

at::Tensor chunkTokens(const std::vector<TokenId>& tokens, const ChunkPlan& plan, int64_t chunk, TokenId bos) {
    at::Tensor ids = at::empty({1, plan.ctx}, at::kLong);
    auto a = ids.accessor<int64_t, 2>();
    const size_t start = static_cast<size_t>(chunk * plan.ctx);
    for (int64_t i = 0; i < plan.ctx; ++i) a[0][i] = tokens[start + static_cast<size_t>(i)];
    if (bos >= 0) a[0][0] = bos;
    return ids;
}

at::Tensor chunkTargets(const std::vector<TokenId>& tokens, const ChunkPlan& plan, int64_t chunk) {
    at::Tensor t = at::empty({plan.scored}, at::kLong);
    auto a = t.accessor<int64_t, 1>();
    const size_t start = static_cast<size_t>(chunk * plan.ctx + plan.first + 1);
    for (int64_t i = 0; i < plan.scored; ++i) a[i] = tokens[start + static_cast<size_t>(i)];
    return t;
}

} // namespace cwb
