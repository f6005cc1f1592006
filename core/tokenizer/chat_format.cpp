#include "core/tokenizer/chat_format.h"

#include <cstdio>
#include <ctime>

#include "core/util/error.h"

namespace cwb {

namespace {

bool has(const std::string& text, const char* marker) { return text.find(marker) != std::string::npos; }

std::string trimmed(const std::string& s) {
    const char* space = " \t\r\n";
    const size_t first = s.find_first_not_of(space);
    if (first == std::string::npos) return std::string();
    return s.substr(first, s.find_last_not_of(space) - first + 1);
}

struct Conversation {
    bool hasSystem = false;
    std::string system;
    std::vector<ChatMessage> turns;   // user and assistant, alternating, starting with user
};

// Checks roles (a system message only first; then user and assistant alternating, from user, ending with user)
// and splits off the system message.
Conversation split(const std::vector<ChatMessage>& messages) {
    if (messages.empty()) throw Error("chat: the conversation is empty");
    Conversation c;
    size_t i = 0;
    if (messages[0].role == "system") {
        c.hasSystem = true;
        c.system = messages[0].content;
        ++i;
    }
    for (; i < messages.size(); ++i) {
        const std::string& role = messages[i].role;
        if (role != "user" && role != "assistant") {
            throw Error("chat: message " + std::to_string(i + 1) + " has role '" + role +
                        "' (expected user or assistant; system only first)");
        }
        const std::string expected = c.turns.size() % 2 == 0 ? "user" : "assistant";
        if (role != expected) {
            throw Error("chat: message " + std::to_string(i + 1) + " is from " + role + " where " + expected +
                        " was expected (turns alternate, starting with user)");
        }
        c.turns.push_back(messages[i]);
    }
    if (c.turns.empty() || c.turns.back().role != "user") throw Error("chat: the conversation must end with a user message");
    return c;
}

// Formats without a system role put it before the first user message.
void mergeSystemIntoFirstTurn(Conversation& c) {
    if (!c.hasSystem) return;
    c.turns.front().content = c.system + "\n\n" + c.turns.front().content;
    c.hasSystem = false;
    c.system.clear();
}

} // namespace

ChatFormat detectChatFormat(const std::string& t) {
    // Relatives that share a marker but write other text are left Unknown (the caller is asked to name a format)
    // rather than rendered wrongly: Phi-4 (<|im_sep|>), GLM-4 ([gMASK]), Mistral v3/v7 and tekken.
    if (has(t, "<|im_sep|>") || has(t, "[gMASK]")) return ChatFormat::Unknown;
    if (has(t, "<|im_start|>")) return ChatFormat::ChatMl;
    if (has(t, "<|start_header_id|>")) return ChatFormat::Llama3;
    if (has(t, "<start_of_turn>")) return ChatFormat::Gemma;
    // Phi-3 puts a newline after each role marker (Phi-4-mini, with the same markers, does not).
    const bool newlineAfterRole = has(t, "|>\n") || has(t, "|>\\n") || has(t, "|>' + '\n'") || has(t, "|>' + '\\n'");
    if (has(t, "<|user|>") && has(t, "<|end|>")) return newlineAfterRole ? ChatFormat::Phi3 : ChatFormat::Unknown;
    if (has(t, "<|user|>")) return newlineAfterRole && has(t, "eos_token") ? ChatFormat::Zephyr : ChatFormat::Unknown;
    if (has(t, "[INST]")) {
        if (has(t, "<<SYS>>")) return ChatFormat::Llama2;
        // Mistral's first template: '[INST] ' + content + ' [/INST]'. Later ones differ in spacing and system
        // placement ([/INST] without a space, ' [INST] ' with one, [SYSTEM_PROMPT], [AVAILABLE_TOOLS]).
        const bool v1 = has(t, "'[INST] '") && has(t, "' [/INST]'");
        const bool later = has(t, "[SYSTEM_PROMPT]") || has(t, "[AVAILABLE_TOOLS]") || has(t, "' [INST] '");
        return v1 && !later ? ChatFormat::Mistral : ChatFormat::Unknown;
    }
    return ChatFormat::Unknown;
}

std::vector<std::string> chatFormatNames() { return {"chatml", "llama3", "llama2", "mistral", "zephyr", "phi3", "gemma"}; }

std::string chatFormatNameList() {
    std::string names;
    for (const auto& n : chatFormatNames()) names += (names.empty() ? "" : ", ") + n;
    return names;
}

std::string chatFormatName(ChatFormat format) {
    switch (format) {
    case ChatFormat::ChatMl: return "chatml";
    case ChatFormat::Llama3: return "llama3";
    case ChatFormat::Llama2: return "llama2";
    case ChatFormat::Mistral: return "mistral";
    case ChatFormat::Zephyr: return "zephyr";
    case ChatFormat::Phi3: return "phi3";
    case ChatFormat::Gemma: return "gemma";
    case ChatFormat::Unknown: break;
    }
    return "unknown";
}

ChatFormat chatFormatFromName(const std::string& name) {
    for (ChatFormat f : {ChatFormat::ChatMl, ChatFormat::Llama3, ChatFormat::Llama2, ChatFormat::Mistral,
                         ChatFormat::Zephyr, ChatFormat::Phi3, ChatFormat::Gemma}) {
        if (chatFormatName(f) == name) return f;
    }
    return ChatFormat::Unknown;
}

namespace {

// The text of a Jinja string literal's body: \n, \t, \\, \' and \" decoded.
std::string unescapeJinja(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\' || i + 1 == s.size()) {
            out += s[i];
            continue;
        }
        const char next = s[++i];
        out += next == 'n' ? '\n' : next == 't' ? '\t' : next;
    }
    return out;
}

// The literal text that follows `opening` in the template up to `closing`, at the first place where it is plain text
// (no quote, brace or +: not an expression); empty when there is none.
std::string literalAfter(const std::string& t, const std::string& opening, const std::string& closing) {
    for (size_t at = t.find(opening); at != std::string::npos; at = t.find(opening, at + 1)) {
        const size_t start = at + opening.size();
        const size_t end = t.find(closing, start);
        if (end == std::string::npos) break;
        const std::string body = t.substr(start, end - start);
        if (!body.empty() && body.find_first_of("'\"{}+") == std::string::npos) return unescapeJinja(body);
    }
    return {};
}

// A ChatML template's default system message: a whole string literal '<|im_start|>system\n…<|im_end|>…' (quoted with
// ' or ", the newline escaped or real), written where the nearest control tag before it is an else or tests the
// system role, not one about tools (Qwen2.5's tools branch writes its own system turn). Empty when there is none.
std::string chatMlDefaultSystem(const std::string& t) {
    const std::string opening = "<|im_start|>system";
    for (size_t at = t.find(opening); at != std::string::npos; at = t.find(opening, at + 1)) {
        if (at == 0 || (t[at - 1] != '\'' && t[at - 1] != '"')) continue;
        const char quote = t[at - 1];
        size_t end = at;   // the closing quote: the first unescaped one
        while (end < t.size() && t[end] != quote) end += t[end] == '\\' ? 2 : 1;
        if (end >= t.size()) break;
        const std::string literal = unescapeJinja(t.substr(at, end - at));
        const size_t close = literal.find("<|im_end|>");
        if (close == std::string::npos || literal.compare(opening.size(), 1, "\n") != 0) continue;
        const size_t tag = t.rfind("{%", at);
        const std::string guard = tag == std::string::npos ? std::string() : t.substr(tag, t.find("%}", tag) - tag);
        const bool aboutTools = guard.find("tools") != std::string::npos;
        const bool plausible = guard.find("else") != std::string::npos || guard.find("system") != std::string::npos;
        if (aboutTools || !plausible) continue;
        return literal.substr(opening.size() + 1, close - opening.size() - 1);
    }
    return {};
}

} // namespace

ChatTemplateDefaults chatTemplateDefaults(const std::string& t, ChatFormat format, const std::string& today) {
    ChatTemplateDefaults d;
    if (format == ChatFormat::ChatMl) {
        d.defaultSystem = chatMlDefaultSystem(t);
    } else if (format == ChatFormat::Llama3 && has(t, "Cutting Knowledge Date: ") && has(t, "Today Date: ")) {
        std::string known = literalAfter(t, "Cutting Knowledge Date: ", "\\n");
        if (known.empty()) known = literalAfter(t, "Cutting Knowledge Date: ", "\n");
        std::string date = literalAfter(t, "date_string = \"", "\"");
        if (has(t, "strftime_now")) date = today;
        if (date.empty()) date = "26 Jul 2024";   // Llama 3.1's own default
        if (!known.empty()) d.systemPreamble = "Cutting Knowledge Date: " + known + "\nToday Date: " + date + "\n\n";
    }
    return d;
}

std::string chatTemplateToday() {
    static const char* months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char text[32];
    std::snprintf(text, sizeof text, "%02d %s %04d", local.tm_mday, months[local.tm_mon % 12], local.tm_year + 1900);
    return text;
}

std::string renderChat(ChatFormat format, const std::vector<ChatMessage>& messages, const std::string& bos,
                       const std::string& eos, const ChatTemplateDefaults& defaults) {
    Conversation c = split(messages);
    std::string out;
    switch (format) {
    case ChatFormat::ChatMl:
        if (!c.hasSystem && !defaults.defaultSystem.empty()) {
            c.hasSystem = true;
            c.system = defaults.defaultSystem;
        }
        if (c.hasSystem) out += "<|im_start|>system\n" + c.system + "<|im_end|>\n";
        for (const auto& m : c.turns) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        return out + "<|im_start|>assistant\n";
    case ChatFormat::Llama3: {
        auto turn = [](const std::string& role, const std::string& content) {
            return "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + trimmed(content) + "<|eot_id|>";
        };
        if (!defaults.systemPreamble.empty())   // Llama 3.1+: always a system turn, the preamble untrimmed
            out += "<|start_header_id|>system<|end_header_id|>\n\n" + defaults.systemPreamble +
                   (c.hasSystem ? trimmed(c.system) : std::string()) + "<|eot_id|>";
        else if (c.hasSystem)
            out += turn("system", c.system);
        for (const auto& m : c.turns) out += turn(m.role, m.content);
        return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
    }
    case ChatFormat::Llama2:
        // Meta's template: the system message inside the first [INST]; each later user turn opens with BOS, each
        // answer closes with EOS (the first BOS is the tokenizer's).
        for (size_t i = 0; i < c.turns.size(); ++i) {
            const auto& m = c.turns[i];
            if (m.role == "user") {
                std::string content = m.content;
                if (i == 0 && c.hasSystem) content = "<<SYS>>\n" + c.system + "\n<</SYS>>\n\n" + content;
                out += (i == 0 ? "" : bos) + "[INST] " + trimmed(content) + " [/INST]";
            } else {
                out += " " + trimmed(m.content) + " " + eos;
            }
        }
        return out;
    case ChatFormat::Mistral:
        mergeSystemIntoFirstTurn(c);
        for (const auto& m : c.turns) out += m.role == "user" ? "[INST] " + m.content + " [/INST]" : m.content + eos;
        return out;
    case ChatFormat::Zephyr:
        if (c.hasSystem) out += "<|system|>\n" + c.system + eos + "\n";
        for (const auto& m : c.turns) out += "<|" + m.role + "|>\n" + m.content + eos + "\n";
        return out + "<|assistant|>\n";
    case ChatFormat::Phi3:
        if (c.hasSystem) out += "<|system|>\n" + c.system + "<|end|>\n";
        for (const auto& m : c.turns) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
        return out + "<|assistant|>\n";
    case ChatFormat::Gemma:
        // Gemma 3: a system message opens the first user turn, untrimmed, followed by a blank line.
        for (size_t i = 0; i < c.turns.size(); ++i) {
            const auto& m = c.turns[i];
            out += "<start_of_turn>" + std::string(m.role == "assistant" ? "model" : "user") + "\n" +
                   (i == 0 && c.hasSystem ? c.system + "\n\n" : std::string()) + trimmed(m.content) + "<end_of_turn>\n";
        }
        return out + "<start_of_turn>model\n";
    case ChatFormat::Unknown: break;
    }
    throw Error("chat: no chat format to render with");
}

namespace {

TokenId idOf(const TokenizerData& vocabulary, const std::string& text) {
    for (size_t i = 0; i < vocabulary.tokens.size(); ++i)
        if (vocabulary.tokens[i] == text) return TokenId(i);
    return -1;
}

} // namespace

ChatPrompt prepareChatPrompt(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages, ChatFormat format) {
    const auto vocabulary = tokenizer.vocabulary();
    ChatPrompt prompt;
    prompt.format = format;
    const std::string jinja = vocabulary ? vocabulary->chatTemplate : std::string();
    if (format == ChatFormat::Unknown) {
        if (jinja.empty())
            throw Error("the model has no chat template (GGUF tokenizer.chat_template, or chat_template in "
                        "tokenizer_config.json); name a chat format: " + chatFormatNameList());
        prompt.format = detectChatFormat(jinja);
        if (prompt.format == ChatFormat::Unknown)
            throw Error("the model's chat template is not one cwb recognises; name a chat format: " + chatFormatNameList());
    }
    // Formats that write BOS and EOS between turns write the model's own (Llama 2's <s>, StableLM-Zephyr's
    // <|endoftext|>).
    auto text = [&](TokenId id, const char* fallback) {
        return vocabulary && id >= 0 && size_t(id) < vocabulary->tokens.size() ? vocabulary->tokens[size_t(id)] : std::string(fallback);
    };
    // The template's own defaults only where it is of the format rendered (a named format may be another's).
    const ChatTemplateDefaults defaults = !jinja.empty() && detectChatFormat(jinja) == prompt.format
                                              ? chatTemplateDefaults(jinja, prompt.format, chatTemplateToday())
                                              : ChatTemplateDefaults{};
    prompt.text = renderChat(prompt.format, messages, text(tokenizer.bos(), "<s>"), text(tokenizer.eos(), "</s>"), defaults);
    const std::vector<std::string> ends = chatTurnEndTokens(prompt.format);
    for (const std::string& end : ends) {
        const TokenId id = vocabulary ? idOf(*vocabulary, end) : -1;
        if (id >= 0) prompt.stopIds.push_back(id);
    }
    if (!vocabulary)
        prompt.warnings.push_back("this tokenizer (" + tokenizer.kind() + ") has no control tokens to parse: the " +
                                  chatFormatName(prompt.format) + " markers are tokenized as text");
    else if (ends.empty() ? tokenizer.eos() < 0 : prompt.stopIds.empty())
        prompt.warnings.push_back("the vocabulary has no " + (ends.empty() ? std::string("EOS") : ends.front()) + " token: the " +
                                  chatFormatName(prompt.format) + " format may not be this model's" +
                                  (tokenizer.eos() >= 0 ? ", and only EOS ends the answer" : ""));
    return prompt;
}

std::vector<std::string> chatTurnEndTokens(ChatFormat format) {
    switch (format) {
    case ChatFormat::ChatMl: return {"<|im_end|>"};
    case ChatFormat::Llama3: return {"<|eot_id|>", "<|eom_id|>"};
    case ChatFormat::Phi3: return {"<|end|>"};
    case ChatFormat::Gemma: return {"<end_of_turn>"};
    case ChatFormat::Llama2:
    case ChatFormat::Mistral:
    case ChatFormat::Zephyr:   // these end a turn with the model's EOS
    case ChatFormat::Unknown: break;
    }
    return {};
}

} // namespace cwb
