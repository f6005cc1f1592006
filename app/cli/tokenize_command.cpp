// cwb tokenize: the ids and pieces a model's own tokenizer gives a text, to check a prompt or an exported tokenizer.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "app/cli/arguments.h"
#include "app/cli/commands.h"
#include "core/io/model_format.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocab_util.h"
#include "core/util/error.h"
#include "core/eval/perplexity.h"
#include "core/util/json_text.h"

namespace cwb::cli {

int runTokenize(const std::vector<std::string>& args) {
    Arguments a(args, {"text", "file", "tokenizer"}, {"json", "no-bos", "special"});
    if (a.has("text") == a.has("file")) throw Error("give the text with --text TEXT or --file FILE (one of them)");
    std::string text = a.value("text");
    const std::string file = a.value("file");
    if (a.has("file") && file.empty()) throw Error("--file needs a path");
    if (!file.empty()) text = readTextFile(file);
    LoadOptions options;
    options.tokenizerPath = a.value("tokenizer");
    const std::string path = a.requirePositional("MODEL");
    const auto model = loadModel(path, options);
    requireTokenizer(*model, path);
    const Tokenizer& tok = *model->tokenizer;
    const bool bos = tok.addBosByDefault() && !a.flag("no-bos") && tok.bos() >= 0;
    // --special: control tokens written in the text ("</s>", "<|im_start|>") become their ids, as in chat prompts.
    const std::vector<TokenId> ids = a.flag("special") ? tok.encodeWithSpecialTokens(text, bos) : tok.encode(text, bos);
    if (bos && ids.size() >= 2 && ids[1] == tok.bos())
        std::fprintf(stderr, "warning: the text starts with BOS (%s) and BOS is added as well: two BOS ids; --no-bos adds none\n",
                     tok.tokenText(tok.bos()).c_str());

    if (a.flag("json")) {
        nlohmann::json pieces = nlohmann::json::array();
        for (TokenId id : ids) pieces.push_back(tok.tokenText(id));
        std::cout << jsonText({{"tokenizer", tok.kind()}, {"bos_added", bos}, {"bytes", text.size()},
                               {"count", ids.size()}, {"ids", ids}, {"pieces", pieces}})
                  << "\n";
        return 0;
    }
    std::printf("%zu tokens from %zu bytes (%s, %s)\n", ids.size(), text.size(), tok.kind().c_str(),
                bos ? "BOS added" : "no BOS");
    // A file is usually long: its count is what matters; a --text prompt is shown token by token.
    if (!file.empty()) {
        if (!ids.empty()) std::printf("%.2f bytes per token\n", double(text.size()) / double(ids.size()));
        return 0;
    }
    for (TokenId id : ids) std::printf("%8d  %s\n", id, quoteToken(tok.tokenText(id)).c_str());
    return 0;
}

} // namespace cwb::cli
