#include "app/cli/commands.h"

#include <ATen/Parallel.h>

#include "core/util/error.h"

namespace cwb::cli {

const std::vector<Command>& commands() {
    static const std::vector<Command> list = {
        {"info", "cwb info MODEL [--json]", "architecture, parameter count and every tensor of a model", runInfo},
        {"generate", "cwb generate MODEL [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S] [--json]",
         "generate text (greedy unless --temperature is set)", runGenerate},
        {"eval", "cwb eval MODEL --text FILE [--ctx N] [--chunks K] [--threads N] [--json]",
         "perplexity by llama.cpp's method (second half of each ctx chunk scored)", runEval},
    };
    return list;
}

void applyThreads(int64_t threads) {
    if (threads < 0) throw Error("--threads must be 0 or more");
    if (threads > 0) at::set_num_threads(static_cast<int>(threads));
}

} // namespace cwb::cli
