// GPU test (plain executable, CTest label `gpu`): the runtime and evaluation on CUDA agree with the CPU.
// Exits 77 (skipped) without a GPU or without the fixtures. Regression: evaluation on CUDA once failed because
// the scored logits stayed on the GPU while the targets were on the CPU.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "tests/gpu/gpu_check.h"
#include "core/eval/divergence.h"
#include "core/eval/perplexity.h"
#include "core/io/model_format.h"
#include "core/runtime/generate.h"
#include "core/runtime/transformer.h"

namespace {
using cwb::testing::check;
} // namespace

int main() {
    if (!at::hasCUDA()) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    const std::string model = std::string(CWB_FIXTURES_DIR) + "/models/stories260K.gguf";
    const std::string text = std::string(CWB_FIXTURES_DIR) + "/text/tinystories_v2_valid_first100.txt";
    if (!std::ifstream(model) || !std::ifstream(text)) {
        std::printf("SKIP: fixtures not found under %s\n", CWB_FIXTURES_DIR);
        return 77;
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
        cwb::RuntimeOptions o;
        o.device = at::Device(at::kCUDA);
        cwb::Transformer gpu(*m, o);
        cwb::GenerateParams g;
        g.tokens = 40;
        cwb::Transformer cpuAgain(*m);
        check(cwb::generate(gpu, *m->tokenizer, g).generatedIds == cwb::generate(cpuAgain, *m->tokenizer, g).generatedIds,
              "greedy generation on CUDA f32 gives the CPU's ids");
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return cwb::testing::finishChecks();
}
