// Evaluation throughput on the CPU: tokens per second of the perplexity loop for a model, a text, a ctx and
// a thread count. Run by hand: bench_eval_throughput MODEL TEXT [--ctx N] [--chunks K] [--threads T ...]
#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/eval/perplexity.h"
#include "core/io/model_format.h"
#include "core/runtime/transformer.h"

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL TEXT [--ctx N] [--chunks K] [--threads T1,T2,...]\n", argv[0]);
        return 2;
    }
    int64_t ctx = 256, chunks = 8;
    std::vector<int> threads = {1, 2};
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--ctx")) ctx = std::atoll(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--chunks")) chunks = std::atoll(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--threads")) {
            threads.clear();
            for (char* t = std::strtok(argv[i + 1], ","); t; t = std::strtok(nullptr, ",")) threads.push_back(std::atoi(t));
        }
    }
    try {
        auto model = cwb::loadModel(argv[1]);
        auto tokens = model->tokenizer->encode(cwb::readTextFile(argv[2]), true);
        cwb::PerplexityParams p;
        p.ctx = ctx;
        p.maxChunks = chunks;
        std::printf("model %s, %lld parameters, ctx %lld, %lld chunks\n", argv[1],
                    static_cast<long long>(model->parameterCount()), static_cast<long long>(ctx), static_cast<long long>(chunks));
        double base = 0;
        for (int t : threads) {
            at::set_num_threads(t);
            cwb::Transformer rt(*model);
            cwb::evaluatePerplexity(rt, tokens, model->tokenizer->bos(), [&] { auto q = p; q.maxChunks = 1; return q; }());   // warm-up
            auto r = cwb::evaluatePerplexity(rt, tokens, model->tokenizer->bos(), p);
            if (base == 0) base = r.tokensPerSecond;
            std::printf("threads %2d: %10.0f tokens/s  (%.3f s, PPL %.4f, x%.2f vs %d thread%s)\n", t, r.tokensPerSecond,
                        r.seconds, r.perplexity, r.tokensPerSecond / base, threads[0], threads[0] == 1 ? "" : "s");
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    return 0;
}
