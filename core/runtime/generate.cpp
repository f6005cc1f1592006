#include "core/runtime/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

namespace {

// Sampling on the CPU with our own RNG so a seed gives the same text on every LibTorch version.
TokenId pick(const at::Tensor& logitsRow, const GenerateParams& p, std::mt19937_64& rng) {
    at::Tensor logits = logitsRow.to(at::kCPU, at::kDouble).contiguous();
    if (p.temperature <= 0) return static_cast<TokenId>(logits.argmax().item<int64_t>());
    const double* l = logits.data_ptr<double>();
    const int64_t n = logits.numel();
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    int64_t keep = p.topK > 0 ? std::min(p.topK, n) : n;
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int64_t a, int64_t b) { return l[a] > l[b]; });
    const double top = l[order[0]];
    std::vector<double> weights(static_cast<size_t>(keep));
    for (int64_t i = 0; i < keep; ++i) weights[static_cast<size_t>(i)] = std::exp((l[order[static_cast<size_t>(i)]] - top) / p.temperature);
    std::discrete_distribution<int64_t> dist(weights.begin(), weights.end());
    return static_cast<TokenId>(order[static_cast<size_t>(dist(rng))]);
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

GenerateResult generate(Transformer& model, const Tokenizer& tokenizer, const GenerateParams& params, Feedback* feedback) {
    GenerateResult result;
    result.promptIds = params.parseSpecial ? tokenizer.encodeWithSpecialTokens(params.prompt, params.addBos)
                                           : tokenizer.encode(params.prompt, params.addBos);
    if (result.promptIds.empty()) {
        if (tokenizer.bos() < 0) throw Error("generate: empty prompt and the tokenizer has no BOS token");
        result.promptIds.push_back(tokenizer.bos());
    }
    const int64_t context = model.spec().context;
    const int64_t promptLength = static_cast<int64_t>(result.promptIds.size());
    if (promptLength >= context)
        throw Error("generate: the prompt has " + std::to_string(promptLength) + " tokens; the model's context is " +
                    std::to_string(context) + model.spec().contextLimitNote());
    const int64_t budget = std::min<int64_t>(params.tokens, context - promptLength);
    result.contextLimited = budget < params.tokens;
    std::vector<TokenId> stops = tokenizer.stopIds();
    stops.insert(stops.end(), params.stopIds.begin(), params.stopIds.end());
    if (tokenizer.bos() >= 0) stops.push_back(tokenizer.bos());
    auto cache = model.makeCache(1, promptLength + budget);
    std::mt19937_64 rng(params.seed);

    std::vector<int64_t> prompt(result.promptIds.begin(), result.promptIds.end());
    auto t0 = std::chrono::steady_clock::now();
    at::Tensor logits = model.forward(at::tensor(prompt, at::kLong).unsqueeze(0), cache.get());
    result.prefillSeconds = secondsSince(t0);
    auto t1 = std::chrono::steady_clock::now();
    // The answer as text: decoded after the prompt, not alone (a SentencePiece word piece drops its leading space when
    // it starts the text); the stop token is not part of it (some vocabularies type end-of-turn tokens as text).
    const std::string promptText = tokenizer.decode(result.promptIds);
    const auto answerText = [&](bool stopped) {
        std::vector<TokenId> answer = result.generatedIds;
        if (stopped) answer.pop_back();
        std::vector<TokenId> whole = result.promptIds;
        whole.insert(whole.end(), answer.begin(), answer.end());
        const std::string after = tokenizer.decode(whole);
        return after.compare(0, promptText.size(), promptText) == 0 ? after.substr(promptText.size()) : tokenizer.decode(answer);
    };
    auto lastText = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < budget; ++i) {
        if (feedback) {
            feedback->throwIfCancelled();
            feedback->setProgress(double(i) / double(budget));
        }
        // One copy to the CPU, which sampling needs anyway; the check adds no work on the GPU.
        const at::Tensor last = logits[0][logits.size(1) - 1].to(at::kCPU, at::kDouble).contiguous();
        if (!at::all(at::isfinite(last)).item<bool>())
            throw model.model().computeError("generate: the model's output is not finite (NaN or infinity) at token " + std::to_string(i + 1) +
                        ": its weights hold NaN or infinite values, or the compute type overflowed (try f32)");
        TokenId next = pick(last, params, rng);
        result.generatedIds.push_back(next);
        if (params.stopAtEos && std::find(stops.begin(), stops.end(), next) != stops.end()) {
            result.stopped = true;
            break;
        }
        if (i + 1 == budget) break;
        if (params.onText && secondsSince(lastText) >= params.textInterval) {
            params.onText(answerText(false));
            lastText = std::chrono::steady_clock::now();
        }
        logits = model.forward(at::full({1, 1}, static_cast<int64_t>(next), at::kLong), cache.get());
    }
    if (!result.generatedIds.empty()) result.decodeSecondsPerToken = secondsSince(t1) / double(result.generatedIds.size());
    result.text = answerText(result.stopped);
    if (params.onText) params.onText(result.text);
    if (feedback) feedback->setProgress(1.0);
    return result;
}

} // namespace cwb
