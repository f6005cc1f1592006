#pragma once
// Text generation: prefill the prompt, then decode one token at a time through the KV cache.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace cwb {

class Transformer;
class Feedback;

struct GenerateParams {
    std::string prompt;          // empty: start from BOS alone
    int64_t tokens = 64;         // tokens to generate
    double temperature = 0.0;    // 0: greedy
    int64_t topK = 0;            // 0: whole vocabulary
    uint64_t seed = 0;
    // Stop at EOS, the tokenizer's other stop ids (end of turn), stopIds, and BOS: a BOS generated starts another
    // document (llama2.c's stories models end one so, and its run.c stops there).
    bool stopAtEos = true;
    std::vector<TokenId> stopIds;   // more ids that end generation (a chat format's end of turn)
    bool addBos = true;          // put BOS before the prompt; the CLI and GUI pass the tokenizer's own setting
    bool parseSpecial = false;   // control tokens written in the prompt become their ids (chat prompts)
    // Called with the text generated so far (as GenerateResult::text would be), at most every textInterval seconds
    // and once at the end, from the thread that generates: for showing it as it comes.
    std::function<void(const std::string& text)> onText;
    double textInterval = 0.1;
};

struct GenerateResult {
    std::vector<TokenId> promptIds;
    std::vector<TokenId> generatedIds;
    bool stopped = false;        // ended at a stop id rather than at the token budget or the context
    bool contextLimited = false; // the model's context left room for fewer tokens than asked for
    std::string text;            // the generated tokens as they continue the decoded prompt (spaces kept)
    double prefillSeconds = 0;
    double decodeSecondsPerToken = 0;
};

// Throws cwb::Error (no tokenizer, prompt longer than the context) or cwb::Cancelled.
GenerateResult generate(Transformer& model, const Tokenizer& tokenizer, const GenerateParams& params,
                        Feedback* feedback = nullptr);

} // namespace cwb
