// GPU test (plain executable, CTest label `gpu`): the runtime and evaluation on CUDA agree with the CPU, and fused
// (scaled_dot_product_attention) prefill attention agrees with the reference path.
// Exits 77 (skipped) without a GPU or without the fixtures. Regression: evaluation on CUDA once failed because
// the scored logits stayed on the GPU while the targets were on the CPU.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "tests/gpu/gpu_check.h"
#include "core/eval/divergence.h"
#include "core/eval/perplexity.h"
#include "core/io/model_format.h"
#include "core/runtime/generate.h"
#include "core/runtime/latency.h"
#include "core/runtime/transformer.h"

namespace {
using cwb::testing::check;

double normalisedError(const at::Tensor& got, const at::Tensor& want) {
    const at::Tensor g = got.to(at::kCPU, at::kDouble), w = want.to(at::kCPU, at::kDouble);
    return (g - w).pow(2).mean().item<double>() / std::max(w.pow(2).mean().item<double>(), 1e-30);
}

// Attention through scaled_dot_product_attention (RuntimeOptions::fusedAttention) against the reference path on
// the same GPU, in fp16 and bf16, on the fixture's GQA model (8 query heads, 4 key/value heads): a whole prompt
// (SDPA's causal mask) and a second chunk after a cached one (explicit mask); one decode step stays on the
// reference path.
void fusedAttentionCases(const cwb::Model& m) {
    if (!cwb::Transformer::fusedAttentionAvailable()) {
        std::printf("fused attention not checked: this LibTorch has no scaled_dot_product_attention\n");
        return;
    }
    const at::Tensor prompt = at::randint(3, m.spec.vocab, {2, 64}, at::kLong);
    for (auto dtype : {at::kHalf, at::kBFloat16}) {
        cwb::RuntimeOptions o;
        o.device = at::Device(at::kCUDA);
        o.dtype = dtype;
        o.decode = cwb::DecodeMode::Eager;
        cwb::RuntimeOptions ref = o;
        ref.fusedAttention = false;
        cwb::Transformer fused(m, o), reference(m, ref);
        const double tolerance = dtype == at::kHalf ? 1e-3 : 1e-2;
        const std::string type = c10::toString(dtype);
        auto compare = [&](const at::Tensor& a, const at::Tensor& b, const std::string& what) {
            const double e = normalisedError(a, b);
            char line[200];
            std::snprintf(line, sizeof line, "%s, %s: normalised logit error %.2e <= %.0e", what.c_str(), type.c_str(), e, tolerance);
            check(e <= tolerance, line);
            return a.to(at::kCPU).equal(b.to(at::kCPU));
        };
        const bool same = compare(fused.forward(prompt), reference.forward(prompt), "fused attention, whole prompt of 64");
        check(!same, "the fused path ran (its logits are not bit-identical to the reference's), " + type);
        auto cacheA = fused.makeCache(2, 96), cacheB = reference.makeCache(2, 96);
        fused.forward(prompt.narrow(1, 0, 40), cacheA.get());
        reference.forward(prompt.narrow(1, 0, 40), cacheB.get());
        compare(fused.forward(prompt.narrow(1, 40, 24), cacheA.get()),
                reference.forward(prompt.narrow(1, 40, 24), cacheB.get()), "fused attention, 24 tokens after 40 cached");
        // Token by token (one query each) from empty caches: every step must be the reference path's.
        auto stepA = fused.makeCache(2, 16), stepB = reference.makeCache(2, 16);
        at::Tensor lastA, lastB;
        for (int64_t i = 0; i < 8; ++i) {
            lastA = fused.forward(prompt.narrow(1, i, 1), stepA.get());
            lastB = reference.forward(prompt.narrow(1, i, 1), stepB.get());
        }
        check(compare(lastA, lastB, "eager decode, 8th step token by token"),
              "one query keeps the reference path (bit-identical logits), " + type);
    }
}
} // namespace

int main() {
    if (!at::hasCUDA()) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    const std::string model = std::string(CWB_FIXTURES_DIR) + "/models/stories260K.gguf";
    const std::string text = std::string(CWB_FIXTURES_DIR) + "/text/tinystories_v2_valid_first100.txt";
    if (!std::ifstream(model) || !std::ifstream(text)) {
        return cwb::testing::missingFixtures(CWB_FIXTURES_DIR);
    }
    try {
        auto m = cwb::loadModel(model);
        std::vector<cwb::TokenId> tokens = m->tokenizer->encode(cwb::readTextFile(text), true);
        cwb::PerplexityParams p;
        p.ctx = 256;
        p.maxChunks = 8;
        cwb::Transformer cpu(*m);
        const double reference = cwb::evaluatePerplexity(cpu, tokens, m->tokenizer->bos(), p).perplexity;
        for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
            cwb::RuntimeOptions o;
            o.device = at::Device(at::kCUDA);
            o.dtype = dtype;
            cwb::Transformer gpu(*m, o);
            const double ppl = cwb::evaluatePerplexity(gpu, tokens, m->tokenizer->bos(), p).perplexity;
            const double tolerance = dtype == at::kFloat ? 1e-4 : 1e-2;
            std::printf("  %s: PPL %.6f (CPU %.6f)\n", c10::toString(dtype), ppl, reference);
            check(std::abs(ppl - reference) <= tolerance * reference, "CUDA perplexity matches the CPU within the dtype's tolerance");
            cwb::DivergenceResult d = cwb::compareModels(cpu, gpu, tokens, m->tokenizer->bos(), p);
            check(d.klMean < (dtype == at::kFloat ? 1e-6 : 1e-3), "KL between CPU and CUDA runs is tiny");
        }
        fusedAttentionCases(*m);
        cwb::RuntimeOptions o;
        o.device = at::Device(at::kCUDA);
        cwb::Transformer gpu(*m, o);
        cwb::GenerateParams g;
        g.tokens = 40;
        cwb::Transformer cpuAgain(*m);
        check(cwb::generate(gpu, *m->tokenizer, g).generatedIds == cwb::generate(cpuAgain, *m->tokenizer, g).generatedIds,
              "greedy generation on CUDA f32 gives the CPU's ids");
        // cwb bench's measurement on CUDA: untimed prefills for the warm-up time first, then the timed ones.
        cwb::LatencyParams lp;
        lp.promptTokens = 32;
        lp.genTokens = 8;
        lp.prefillWarmupSeconds = 0.05;
        const cwb::LatencyResult r = cwb::measureLatency(*m, o, lp);
        std::printf("  bench on CUDA: %lld warm-up prefills, prefill %.0f tok/s, decode p50 %.3f ms\n",
                    (long long)r.prefillWarmupRuns, r.prefillTokensPerSecond, r.decodeP50Ms);
        check(r.prefillWarmupRuns >= 1 && r.prefillWarmupRuns <= 100 && r.prefillSeconds > 0 && r.decodeP50Ms > 0,
              "the CUDA latency run warms up with untimed prefills, then times prefill and decode");
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return cwb::testing::finishChecks();
}
