#include "core/eval/perplexity.h"

#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/eval/chunks.h"
#include "core/model/model_info.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

std::string readTextFile(const std::string& path, size_t limit) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw Error(path, "is a folder; give a text file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path, std::string("cannot open the text file: ") + std::strerror(errno));
    const auto tooLong = [&] {
        return Error(path, "is longer than " + humanBytes(double(limit)) + "; texts are read whole into memory, so give an excerpt");
    };
    if (std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) > limit && !ec) throw tooLong();
    // Read in pieces up to a limit: a device or a pipe without end (/dev/zero) must not take all memory.
    std::string text;
    std::vector<char> piece(size_t(1) << 20);
    while (in) {
        in.read(piece.data(), std::streamsize(piece.size()));
        const size_t got = size_t(in.gcount());
        if (text.size() + got > limit) throw tooLong();
        text.append(piece.data(), got);
    }
    if (in.bad()) throw Error(path, "read failed");
    return text;
}

double NllAccumulator::perplexity() const { return std::exp(mean()); }

double NllAccumulator::perplexityError() const {
    if (mCount < 2) return 0.0;
    // llama.cpp: sqrt(population variance / (n - 1)) * ppl
    const double variance = mM2 / double(mCount);
    return std::sqrt(variance / double(mCount - 1)) * perplexity();
}

int64_t chunkCount(int64_t tokenCount, const PerplexityParams& params) {
    int64_t n = params.ctx > 0 ? tokenCount / params.ctx : 0;
    if (params.maxChunks >= 0) n = std::min(n, params.maxChunks);
    return n;
}

std::string perplexityWarning(const PerplexityResult& result, int64_t vocab) {
    if (vocab <= 1 || result.tokensScored == 0) return "";
    if (std::isnan(result.meanNll)) return "the perplexity is NaN: the model's outputs are not numbers; its weights are probably broken";
    const double uniform = std::log(double(vocab));
    // 1e-6 nats of slack: a model whose logits are all equal scores ln(vocab) up to rounding.
    if (!(result.meanNll > uniform + 1e-6)) return "";
    char text[400];
    if (!std::isfinite(result.perplexity))
        std::snprintf(text, sizeof text, "the perplexity overflows (mean NLL %.6g nats per token, where a uniform guess over the "
                      "%lld-token vocabulary scores %.4g): the model's weights are probably broken", result.meanNll,
                      static_cast<long long>(vocab), uniform);
    else
        // Broken weights, or a text unlike any the model read (random bytes were taken for broken weights, user probe).
        std::snprintf(text, sizeof text, "perplexity %.6g is above the vocabulary size %lld (what a uniform guess scores): the model "
                      "predicts this text worse than chance; its weights are probably broken, or the text is nothing like what "
                      "it was trained on (binary data, another tokenizer's text)", result.perplexity, static_cast<long long>(vocab));
    return text;
}

std::string perplexityWarning(double perplexity, int64_t vocab) {
    PerplexityResult r;
    r.perplexity = perplexity;
    r.meanNll = std::log(perplexity);   // inf for an overflowed figure, NaN for NaN
    r.tokensScored = 1;
    return perplexityWarning(r, vocab);
}

PerplexityResult evaluatePerplexity(Transformer& model, const std::vector<TokenId>& tokens, TokenId bos,
                                    const PerplexityParams& params, Feedback* feedback) {
    ChunkPlan plan = planChunks(model, tokens, params);
    auto t0 = std::chrono::steady_clock::now();
    NllAccumulator acc;
    for (int64_t c = 0; c < plan.chunks; ++c) {
        if (feedback) {
            feedback->throwIfCancelled();
            feedback->setProgress(double(c) / double(plan.chunks));
        }
        at::Tensor logits = model.forward(chunkTokens(tokens, plan, c, bos))[0];   // [ctx, vocab]
        // Scoring happens on the CPU whatever device ran the model: targets and accessors live there.
        at::Tensor logProbs = at::log_softmax(logits.narrow(0, plan.first, plan.scored).to(at::kCPU, at::kDouble), -1);
        at::Tensor targets = chunkTargets(tokens, plan, c);
        at::Tensor nll = -logProbs.gather(1, targets.unsqueeze(1)).squeeze(1);
        // Finite logits always give a finite log-probability in double: anything else is a broken model or overflow.
        if (!at::all(at::isfinite(nll)).item<bool>())
            throw model.model().computeError("perplexity: the model's output is not finite (NaN or infinity) in chunk " + std::to_string(c + 1) +
                        " of " + std::to_string(plan.chunks) + ": its weights hold NaN or infinite values, or the compute "
                        "type overflowed (try f32)");
        auto n = nll.accessor<double, 1>();
        for (int64_t i = 0; i < n.size(0); ++i) acc.add(n[i]);
    }
    PerplexityResult r;
    r.perplexity = acc.perplexity();
    r.error = acc.perplexityError();
    r.meanNll = acc.mean();
    r.tokensScored = acc.count();
    r.chunks = plan.chunks;
    r.ctx = params.ctx;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.tokensPerSecond = r.seconds > 0 ? double(plan.chunks * params.ctx) / r.seconds : 0;
    if (feedback) feedback->setProgress(1.0);
    return r;
}

} // namespace cwb
