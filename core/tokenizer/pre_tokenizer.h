#pragma once
// Hand-written equivalents of the byte-level BPE pre-tokenizer regexes (GPT-2, Llama 3, Qwen2): they cut
// text into words that BPE merges never cross.
#include <string>
#include <vector>

namespace cwb {

enum class PreTokenizerKind {
    Gpt2,   // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    Llama3, // (?i:'s|..)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    Qwen2,  // as Llama3 with \p{N} (single digits)
};

// GGUF tokenizer.ggml.pre names: "gpt2"/"gpt-2"/"default"/"" → Gpt2, "llama-bpe"/"llama3" (and a few
// models sharing its regex) → Llama3, "qwen2" → Qwen2. Unknown names fall back to Gpt2 (the most common
// regex); *known == false then tells the caller.
PreTokenizerKind preTokenizerFromName(const std::string& name, bool* known = nullptr);

// The regex a kind stands for, as a Hugging Face tokenizer.json writes it in its Split pre-tokenizer.
const char* preTokenizerRegex(PreTokenizerKind kind);

// Splits UTF-8 text into pre-token pieces; concatenating the pieces gives back the text byte for byte.
std::vector<std::string> preTokenize(const std::string& text, PreTokenizerKind kind);

} // namespace cwb
