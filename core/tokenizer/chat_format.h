#pragma once
// Chat prompts for instruction-tuned models. cwb has no Jinja interpreter: as llama.cpp does, it recognises the
// common chat formats by the markers their templates write, and renders those formats itself. A template it does
// not recognise (or a relative that shares markers but writes other text: Phi-4, GLM-4, Mistral's later templates)
// is reported, and the caller may name a format instead. Mistral here is its first template, v0.1.
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace cwb {

enum class ChatFormat { Unknown, ChatMl, Llama3, Llama2, Mistral, Zephyr, Phi3, Gemma };

struct ChatMessage {
    std::string role;      // "system", "user" or "assistant"
    std::string content;
};

// The format a Jinja chat template writes, judged by its markers (<|im_start|>, <|start_header_id|>, [INST], …);
// Unknown when none matches.
ChatFormat detectChatFormat(const std::string& jinjaTemplate);

// Stable names, as the command line takes them: "chatml", "llama3", "llama2", "mistral", "zephyr", "phi3", "gemma".
std::string chatFormatName(ChatFormat format);
// Unknown for a name that is none of those.
ChatFormat chatFormatFromName(const std::string& name);
std::vector<std::string> chatFormatNames();
std::string chatFormatNameList();   // "chatml, llama3, …", for messages

// The conversation in the format, ending with the opening of the assistant's turn. The leading BOS is not written:
// the tokenizer adds it where the model's settings ask for it; `bos` and `eos` are the texts of the model's BOS and
// EOS, which Llama 2, Mistral and Zephyr write between turns. No default system message is added (some templates,
// e.g. Qwen2's, insert one; pass it as a "system" message to match them). Throws cwb::Error for an Unknown format,
// an unknown role or an empty conversation.
std::string renderChat(ChatFormat format, const std::vector<ChatMessage>& messages, const std::string& bos = "<s>",
                       const std::string& eos = "</s>");

// Token texts that end an assistant turn in the format ("<|im_end|>", "<|eot_id|>", …); empty for the formats that
// end it with the model's EOS (Llama 2, Mistral, Zephyr).
std::vector<std::string> chatTurnEndTokens(ChatFormat format);

// A chat prompt ready for generate(): encode it with encodeWithSpecialTokens and the tokenizer's own BOS setting,
// and stop at stopIds as well as EOS.
struct ChatPrompt {
    ChatFormat format = ChatFormat::Unknown;
    std::string text;
    std::vector<TokenId> stopIds;        // the format's end-of-turn tokens that the vocabulary has
    std::vector<std::string> warnings;   // e.g. a format whose markers the vocabulary lacks
};

// Renders `messages` in `format`, or, when it is Unknown, in the format the tokenizer's chat template writes.
// Throws cwb::Error when there is no template, or one cwb does not recognise, and no format is named.
ChatPrompt prepareChatPrompt(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                             ChatFormat format = ChatFormat::Unknown);

} // namespace cwb
