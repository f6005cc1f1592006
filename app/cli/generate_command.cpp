#include <iostream>

#include <nlohmann/json.hpp>

#include "app/cli/arguments.h"
#include "app/cli/commands.h"
#include "core/io/model_format.h"
#include "core/runtime/generate.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/json_text.h"

namespace cwb::cli {

int runGenerate(const std::vector<std::string>& args) {
    Arguments a(args, {"prompt", "tokens", "temperature", "top-k", "seed", "threads", "tokenizer", "device", "dtype"}, {"json", "no-stop"});
    applyThreads(a.integer("threads", 0));
    LoadOptions options;
    options.tokenizerPath = a.value("tokenizer");
    const std::string path = a.requirePositional("MODEL");
    auto model = loadModel(path, options);
    if (!model->tokenizer) throw Error(path, "has no tokenizer; pass --tokenizer FILE");
    GenerateParams p;
    p.prompt = a.value("prompt");
    p.tokens = a.integer("tokens", 64);
    p.temperature = a.number("temperature", 0.0);
    p.topK = a.integer("top-k", 0);
    p.seed = static_cast<uint64_t>(a.integer("seed", 0));
    p.stopAtEos = !a.flag("no-stop");
    if (p.tokens < 1) throw Error("--tokens must be at least 1");
    if (p.temperature < 0) throw Error("--temperature must be 0 (greedy) or more");
    Transformer runtime(*model, runtimeOptions(a));
    GenerateResult r = generate(runtime, *model->tokenizer, p);
    if (a.flag("json")) {
        nlohmann::json j = {{"prompt_ids", r.promptIds},
                            {"ids", r.generatedIds},
                            {"text", r.text},
                            {"prefill_seconds", r.prefillSeconds},
                            {"decode_ms_per_token", r.decodeSecondsPerToken * 1000}};
        std::cout << jsonText(j) << "\n";
    } else {
        std::cout << p.prompt << r.text << "\n";
        std::cerr << r.generatedIds.size() << " tokens, " << r.decodeSecondsPerToken * 1000 << " ms/token\n";
    }
    return 0;
}

} // namespace cwb::cli
