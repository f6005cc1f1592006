#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/cli/arguments.h"
#include "app/cli/commands.h"
#include "core/eval/perplexity.h"
#include "core/io/model_format.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "core/util/json_text.h"

namespace cwb::cli {

int runEval(const std::vector<std::string>& args) {
    Arguments a(args, {"text", "ctx", "chunks", "threads", "tokenizer", "device", "dtype"}, {"json", "quiet"});
    applyThreads(a.integer("threads", 0));
    LoadOptions options;
    options.tokenizerPath = a.value("tokenizer");
    const std::string path = a.requirePositional("MODEL");
    if (!a.has("text")) throw Error("eval needs --text FILE");
    auto model = loadModel(path, options);
    requireTokenizer(*model, path);
    const std::string textPath = a.value("text");
    std::vector<TokenId> tokens = model->tokenizer->encode(readTextFile(textPath), model->tokenizer->addBosByDefault());
    PerplexityParams p;
    p.ctx = a.integer("ctx", std::min<int64_t>(512, model->spec.context));
    p.maxChunks = chunksOption(a);
    p.textPath = textPath;

    CallbackFeedback feedback;
    const bool quiet = a.flag("quiet") || a.flag("json");
    if (!quiet) showProgress(feedback, "eval");
    Transformer runtime(*model, runtimeOptions(a));
    PerplexityResult r = evaluatePerplexity(runtime, tokens, model->tokenizer->textBos(), p, &feedback);
    const std::string warning = perplexityWarning(r, model->spec.vocab);
    if (!warning.empty()) std::fprintf(stderr, "warning: %s\n", warning.c_str());
    if (a.flag("json")) {
        nlohmann::json j = {{"model", path},          {"text", textPath},         {"ctx", r.ctx},
                            {"chunks", r.chunks},     {"tokens_scored", r.tokensScored},
                            {"perplexity", r.perplexity}, {"error", r.error},      {"mean_nll", r.meanNll},
                            {"seconds", r.seconds},   {"tokens_per_second", r.tokensPerSecond},
                            {"text_tokens", tokens.size()},
                            {"warnings", warning.empty() ? std::vector<std::string>{} : std::vector<std::string>{warning}}};
        // Which compressed layers ran through a kernel on their packed weights and which were dequantized.
        if (!runtime.layerPaths().empty()) j["compressed_layers"] = runtime.layerPathSummary();
        if (!runtime.cpuWeightPlan().empty()) j["cpu_weight_plan"] = runtime.cpuWeightPlan();
        std::cout << jsonText(j) << "\n";
    } else {
        std::printf("PPL = %.4f +/- %.4f  (%lld tokens scored in %lld chunks of %lld, %.0f tokens/s)\n", r.perplexity,
                    r.error, static_cast<long long>(r.tokensScored), static_cast<long long>(r.chunks),
                    static_cast<long long>(r.ctx), r.tokensPerSecond);
        if (!runtime.layerPaths().empty()) std::printf("compressed layers: %s\n", runtime.layerPathSummary().c_str());
        if (!runtime.cpuWeightPlan().empty()) std::printf("weights: %s\n", runtime.cpuWeightPlan().c_str());
    }
    return 0;
}

} // namespace cwb::cli
