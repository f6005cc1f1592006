#pragma once
// Model file formats are interfaces in a registry (after Tiled's MapFormat): the CLI, batch runner and GUI
// ask the registry which format reads a path instead of choosing with an if/else chain.
#include <memory>
#include <string>
#include <vector>

#include "core/model/model.h"

namespace cwb {

struct LoadOptions {
    // A tokenizer to use in place of the model's own: a Hugging Face tokenizer.json (or a folder holding one), a
    // SentencePiece tokenizer.model, a GGUF file's tokenizer or a llama2.c tokenizer .bin. Without it, llama2.c checkpoints take tokenizer.bin or tok<vocab>.bin beside them.
    std::string tokenizerPath;
};

class ModelFormat {
public:
    virtual ~ModelFormat() = default;
    virtual std::string id() const = 0;            // stable: "gguf", "hf", "llama2c"
    virtual std::string displayName() const = 0;
    // Cheap sniff of the path (magic bytes, folder contents); never throws.
    virtual bool canRead(const std::string& path) const = 0;
    // Throws cwb::Error naming the file and the problem.
    virtual std::unique_ptr<Model> read(const std::string& path, const LoadOptions& options) const = 0;
};

class ModelFormatRegistry {
public:
    static ModelFormatRegistry& instance();
    void add(std::unique_ptr<ModelFormat> format);
    const ModelFormat* formatFor(const std::string& path) const;   // nullptr when none reads it
    const ModelFormat* byId(const std::string& id) const;
    std::vector<const ModelFormat*> formats() const;

private:
    ModelFormatRegistry();
    std::vector<std::unique_ptr<ModelFormat>> mFormats;
};

// Finds the format and reads the model, then validates tensor shapes against the architecture, and takes
// options.tokenizerPath where the format's reader did not.
std::unique_ptr<Model> loadModel(const std::string& path, const LoadOptions& options = {});

// Gives the model the tokenizer of `path` (see LoadOptions::tokenizerPath); throws cwb::Error naming the file when it
// is missing, of another kind, malformed, or does not fit the model's embedding (fitTokenizerToEmbedding).
void applyTokenizerFile(Model& model, const std::string& path);
// Where the model's tokenizer has ids past its embedding: added tokens there (control or user-defined, such as a <pad>
// a fine-tune added without resizing the embedding) are dropped, with a tokenizer_note; a piece of the vocabulary
// itself, or a BOS/EOS/unknown token, there throws cwb::Error naming `file`.
void fitTokenizerToEmbedding(Model& model, const std::string& file);
// The files applyTokenizerFile reads for `path`: the tokenizer file (a folder's tokenizer.json) and, for a
// tokenizer.json, the files beside it that it takes when present. Throws cwb::Error as applyTokenizerFile does when
// there is no such file or folder or it is of another kind.
std::vector<std::string> tokenizerFiles(const std::string& path);

// The tokenizer a GGUF file holds (tokenizer.ggml.*), without its tensors; throws cwb::Error naming the file.
std::unique_ptr<Tokenizer> loadGgufTokenizer(const std::string& path);

// Factories of the built-in formats (each defined beside its reader).
std::unique_ptr<ModelFormat> makeGgufFormat();
std::unique_ptr<ModelFormat> makeHfFormat();
std::unique_ptr<ModelFormat> makeLlama2cFormat();

} // namespace cwb
