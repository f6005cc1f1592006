#include <iostream>

#include <nlohmann/json.hpp>

#include "app/cli/arguments.h"
#include "app/cli/commands.h"
#include "core/io/model_format.h"
#include "core/runtime/generate.h"
#include "core/runtime/transformer.h"
#include "core/tokenizer/chat_format.h"
#include "core/util/error.h"
#include "core/util/json_text.h"

namespace cwb::cli {

int runGenerate(const std::vector<std::string>& args) {
    Arguments a(args, {"prompt", "chat", "system", "chat-format", "tokens", "temperature", "top-k", "seed", "threads", "tokenizer", "device", "dtype"},
                {"json", "no-stop", "special"});
    applyThreads(a.integer("threads", 0));
    // Options are checked before the model is read.
    const int64_t tokens = a.integer("tokens", 64), topK = a.integer("top-k", 0);
    const double temperature = a.number("temperature", 0.0);
    if (tokens < 1) throw Error("--tokens must be at least 1");
    if (temperature < 0) throw Error("--temperature must be 0 (greedy) or more");
    if (topK < 0) throw Error("--top-k must be 0 (the whole vocabulary) or more, got " + std::to_string(topK));
    if (temperature == 0 && (a.has("top-k") || a.has("seed")))
        std::cerr << "warning: --top-k and --seed apply to sampling (--temperature above 0); greedy decoding ignores them\n";
    if (a.flag("special") && !a.has("prompt"))
        std::cerr << "warning: --special applies to the text of --prompt (--chat prompts always read their control tokens)\n";
    LoadOptions options;
    options.tokenizerPath = a.value("tokenizer");
    const std::string path = a.requirePositional("MODEL");
    auto model = loadModel(path, options);
    requireTokenizer(*model, path);
    GenerateParams p;
    p.prompt = a.value("prompt");
    p.addBos = model->tokenizer->addBosByDefault();   // BOS was put before every prompt, also Qwen2's and GPT-2's
    p.parseSpecial = a.flag("special");
    ChatPrompt chat;
    if (a.has("chat")) {
        if (a.has("prompt")) throw Error("--chat and --prompt exclude each other (--chat builds the prompt from the model's chat format)");
        ChatFormat format = ChatFormat::Unknown;
        if (a.has("chat-format")) {
            format = chatFormatFromName(a.value("chat-format"));
            if (format == ChatFormat::Unknown)
                throw Error("unknown --chat-format '" + a.value("chat-format") + "' (" + chatFormatNameList() + ")");
        }
        std::vector<ChatMessage> messages;
        if (a.has("system")) messages.push_back({"system", a.value("system")});
        messages.push_back({"user", a.value("chat")});
        try {
            chat = prepareChatPrompt(*model->tokenizer, messages, format);
        } catch (const Error& e) {
            throw Error(path, e.what());
        }
        for (const auto& w : chat.warnings) std::cerr << "warning: " << w << "\n";
        p.prompt = chat.text;
        p.parseSpecial = true;
        p.addBos = model->tokenizer->addBosByDefault();
        p.stopIds = chat.stopIds;
    } else if (a.has("system") || a.has("chat-format")) {
        throw Error("--system and --chat-format go with --chat");
    }
    p.tokens = tokens;
    p.temperature = temperature;
    p.topK = topK;
    p.seed = a.unsignedInteger("seed", 0);
    p.stopAtEos = !a.flag("no-stop");
    Transformer runtime(*model, runtimeOptions(a));
    GenerateResult r = generate(runtime, *model->tokenizer, p);
    const Tokenizer& tok = *model->tokenizer;
    if (tok.bos() >= 0 && r.promptIds.size() >= 2 && r.promptIds[0] == tok.bos() && r.promptIds[1] == tok.bos())
        std::cerr << "warning: the prompt starts with BOS (" << tok.tokenText(tok.bos())
                  << ") and BOS is added as well: two BOS ids, which the model did not see in training\n";
    if (r.contextLimited)
        std::cerr << "note: the model's context of " << model->spec.context << " tokens left room for "
                  << model->spec.context - int64_t(r.promptIds.size()) << " of the " << tokens << " tokens asked for\n";
    if (a.flag("json")) {
        nlohmann::json j = {{"prompt_ids", r.promptIds},
                            {"ids", r.generatedIds},
                            {"text", r.text},
                            {"stopped", r.stopped},
                            {"context_limited", r.contextLimited},
                            {"prefill_seconds", r.prefillSeconds},
                            {"decode_ms_per_token", r.decodeSecondsPerToken * 1000}};
        if (a.has("chat")) {
            j["chat_format"] = chatFormatName(chat.format);
            j["prompt"] = chat.text;
        }
        std::cout << jsonText(j) << "\n";
    } else if (a.has("chat")) {
        std::cout << r.text << std::endl;   // the answer only (the rendered prompt is in --json); flushed before stderr's line
        std::cerr << "chat format " << chatFormatName(chat.format) << "; " << r.generatedIds.size() << " tokens, "
                  << r.decodeSecondsPerToken * 1000 << " ms/token" << (r.stopped ? "" : " (stopped at the token budget)") << "\n";
    } else {
        std::cout << p.prompt << r.text << std::endl;   // flushed: stderr's line comes after it on a terminal (user probe)
        std::cerr << r.generatedIds.size() << " tokens, " << r.decodeSecondsPerToken * 1000 << " ms/token\n";
    }
    return 0;
}

} // namespace cwb::cli
