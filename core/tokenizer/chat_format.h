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

// What a template writes by itself around the system message, read from the template's own string literals:
// - defaultSystem: the system message of ChatML templates that add one when the conversation has none (Qwen2's "You
//   are a helpful assistant.", Qwen2.5's, SmolLM2's);
// - systemPreamble: the dated opening of Llama 3.1–3.3's system turn, written even without a system message
//   ("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"). Templates that take the date from
//   strftime_now (Llama 3.2) get `today` ("05 Dec 2026"), as transformers renders them; the others their own default.
// Both empty when the template has none (or the format is another).
struct ChatTemplateDefaults {
    std::string defaultSystem;
    std::string systemPreamble;
};
ChatTemplateDefaults chatTemplateDefaults(const std::string& jinjaTemplate, ChatFormat format, const std::string& today);
// Today's date as "%d %b %Y" with English month names, whatever the locale.
std::string chatTemplateToday();

// The conversation in the format, ending with the opening of the assistant's turn. The leading BOS is not written:
// the tokenizer adds it where the model's settings ask for it; `bos` and `eos` are the texts of the model's BOS and
// EOS, which Llama 2, Mistral and Zephyr write between turns. `defaults` adds what the model's template writes by
// itself (see chatTemplateDefaults); without them no system text is added. Throws cwb::Error for an Unknown format,
// an unknown role or an empty conversation.
std::string renderChat(ChatFormat format, const std::vector<ChatMessage>& messages, const std::string& bos = "<s>",
                       const std::string& eos = "</s>", const ChatTemplateDefaults& defaults = {});

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

// Renders `messages` in `format`, or, when it is Unknown, in the format the tokenizer's chat template writes, with
// the template's defaults (chatTemplateDefaults, dated today) when the template is of that format.
// Throws cwb::Error when there is no template, or one cwb does not recognise, and no format is named.
ChatPrompt prepareChatPrompt(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                             ChatFormat format = ChatFormat::Unknown);

} // namespace cwb
