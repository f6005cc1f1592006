#include "core/eval/divergence.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/eval/chunks.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

DivergenceResult compareModels(Transformer& base, Transformer& variant, const std::vector<TokenId>& tokens, TokenId bos,
                               const PerplexityParams& params, Feedback* feedback) {
    if (base.spec().vocab != variant.spec().vocab)
        throw Error("compare: the base has " + std::to_string(base.spec().vocab) + " tokens, the variant " +
                    std::to_string(variant.spec().vocab));
    ChunkPlan plan = planChunks(base, tokens, params);
    planChunks(variant, tokens, params);
    auto t0 = std::chrono::steady_clock::now();
    NllAccumulator baseNll, variantNll;
    std::vector<double> kls;
    int64_t agree = 0;
    for (int64_t c = 0; c < plan.chunks; ++c) {
        if (feedback) {
            feedback->throwIfCancelled();
            feedback->setProgress(double(c) / double(plan.chunks));
        }
        at::Tensor ids = chunkTokens(tokens, plan, c, bos);
        at::Tensor targets = chunkTargets(tokens, plan, c).unsqueeze(1);
        at::Tensor lb = at::log_softmax(base.forward(ids)[0].narrow(0, plan.first, plan.scored).to(at::kCPU, at::kDouble), -1);
        at::Tensor lv = at::log_softmax(variant.forward(ids)[0].narrow(0, plan.first, plan.scored).to(at::kCPU, at::kDouble), -1);
        // Finite logits give finite log-probabilities in double; a NaN would read as a KL of 0 below (max(0, NaN)).
        for (const auto& [logProbs, which] : {std::make_pair(lb, "base"), std::make_pair(lv, "variant")})
            if (!at::all(at::isfinite(logProbs)).item<bool>())
                throw (std::string(which) == "base" ? base : variant).model().computeError(std::string("compare: the ") + which + "'s output is not finite (NaN or infinity) in chunk " +
                            std::to_string(c + 1) + " of " + std::to_string(plan.chunks) + ": its weights hold NaN or " +
                            "infinite values, or the compute type overflowed (try f32)");
        at::Tensor kl = (lb.exp() * (lb - lv)).sum(-1);
        at::Tensor nb = -lb.gather(1, targets).squeeze(1), nv = -lv.gather(1, targets).squeeze(1);
        agree += (lb.argmax(-1) == lv.argmax(-1)).sum().item<int64_t>();
        auto k = kl.accessor<double, 1>();
        auto b = nb.accessor<double, 1>();
        auto v = nv.accessor<double, 1>();
        for (int64_t i = 0; i < plan.scored; ++i) {
            kls.push_back(std::max(0.0, k[i]));   // rounding can make a zero KL slightly negative
            baseNll.add(b[i]);
            variantNll.add(v[i]);
        }
    }
    DivergenceResult r;
    r.positions = static_cast<int64_t>(kls.size());
    double sum = 0;
    for (double x : kls) sum += x;
    r.klMean = sum / double(r.positions);
    std::vector<double> sorted = kls;
    std::sort(sorted.begin(), sorted.end());
    // Nearest-rank percentile.
    size_t rank = static_cast<size_t>(std::ceil(0.99 * double(sorted.size())));
    r.klP99 = sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
    r.klMax = sorted.back();
    r.top1Agreement = double(agree) / double(r.positions);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto fill = [&](PerplexityResult& p, const NllAccumulator& acc) {
        p.perplexity = acc.perplexity();
        p.error = acc.perplexityError();
        p.meanNll = acc.mean();
        p.tokensScored = acc.count();
        p.chunks = plan.chunks;
        p.ctx = plan.ctx;
        p.seconds = seconds;
    };
    fill(r.base, baseNll);
    fill(r.variant, variantNll);
    if (feedback) feedback->setProgress(1.0);
    return r;
}

} // namespace cwb
