#include "core/io/model_format.h"

#include <cstring>
#include <sys/stat.h>

#include "core/tokenizer/tokenizer.h"
#include "core/util/error.h"

namespace cwb {

ModelFormatRegistry::ModelFormatRegistry() {
    add(makeGgufFormat());
    add(makeHfFormat());
    add(makeLlama2cFormat());
}

ModelFormatRegistry& ModelFormatRegistry::instance() {
    static ModelFormatRegistry registry;
    return registry;
}

void ModelFormatRegistry::add(std::unique_ptr<ModelFormat> format) { mFormats.push_back(std::move(format)); }

const ModelFormat* ModelFormatRegistry::formatFor(const std::string& path) const {
    for (const auto& f : mFormats)
        if (f->canRead(path)) return f.get();
    return nullptr;
}

const ModelFormat* ModelFormatRegistry::byId(const std::string& id) const {
    for (const auto& f : mFormats)
        if (f->id() == id) return f.get();
    return nullptr;
}

std::vector<const ModelFormat*> ModelFormatRegistry::formats() const {
    std::vector<const ModelFormat*> out;
    for (const auto& f : mFormats) out.push_back(f.get());
    return out;
}

std::unique_ptr<Model> loadModel(const std::string& path, const LoadOptions& options) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw Error(path, "no such file or folder");
    const ModelFormat* format = ModelFormatRegistry::instance().formatFor(path);
    if (!format)
        throw Error(path, "not a model cwb can read (expected a GGUF file, a Hugging Face folder with config.json "
                          "and safetensors, or a llama2.c checkpoint)");
    std::unique_ptr<Model> model;
    try {
        model = format->read(path, options);
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        // A metadata value of an unexpected JSON type and the like: still name the file.
        throw Error(path, std::string("cannot read the model: ") + e.what());
    }
    model->path = path;
    model->format = format->id();
    model->spec.validate(path);
    model->validateTensors();
    model->dropOrRefuseUnusedTensors();
    if (!options.tokenizerPath.empty()) {
        auto it = model->metadata.find("tokenizer");
        if (it == model->metadata.end() || it->second != options.tokenizerPath) applyTokenizerFile(*model, options.tokenizerPath);
    } else if (model->tokenizer && model->tokenizer->vocabSize() > model->spec.vocab) {
        // As a --tokenizer file is checked: ids past the embedding would fail only once a text produced one.
        const auto file = model->metadata.find("tokenizer");
        throw Error(file != model->metadata.end() ? file->second : path,
                    "the tokenizer's ids run to " + std::to_string(model->tokenizer->vocabSize() - 1) + ", past the model's embedding of " +
                        std::to_string(model->spec.vocab) + " rows");
    }
    return model;
}

namespace {

enum class TokenizerFileKind { Json, SentencePiece, Gguf, Llama2c };

bool endsWith(const std::string& s, const char* suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The tokenizer file a --tokenizer path names (a folder's tokenizer.json, else its tokenizer.model), and its kind.
std::string tokenizerFileOf(const std::string& path, TokenizerFileKind& kind) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw Error(path, "no such tokenizer file or folder");
    std::string file = path;
    if (S_ISDIR(st.st_mode)) {
        file = path + "/tokenizer.json";
        if (::stat(file.c_str(), &st) != 0) file = path + "/tokenizer.model";
        if (::stat(file.c_str(), &st) != 0) throw Error(path, "the folder has no tokenizer.json or tokenizer.model");
    }
    if (endsWith(file, ".json")) kind = TokenizerFileKind::Json;
    else if (endsWith(file, ".model")) kind = TokenizerFileKind::SentencePiece;
    else if (endsWith(file, ".gguf")) kind = TokenizerFileKind::Gguf;
    else if (endsWith(file, ".bin")) kind = TokenizerFileKind::Llama2c;
    else
        throw Error(path, "not a tokenizer cwb reads: pass a Hugging Face tokenizer.json (or its folder), a SentencePiece "
                          "tokenizer.model, a GGUF file or a llama2.c tokenizer .bin");
    return file;
}

} // namespace

std::vector<std::string> tokenizerFiles(const std::string& path) {
    TokenizerFileKind kind;
    const std::string file = tokenizerFileOf(path, kind);
    return kind == TokenizerFileKind::Json ? hfTokenizerFilesRead(file) : std::vector<std::string>{file};
}

void applyTokenizerFile(Model& model, const std::string& path) {
    TokenizerFileKind kind;
    const std::string file = tokenizerFileOf(path, kind);
    std::unique_ptr<Tokenizer> tokenizer;
    switch (kind) {
    case TokenizerFileKind::Json: tokenizer = loadHfTokenizer(file); break;
    case TokenizerFileKind::SentencePiece: tokenizer = loadSentencePieceTokenizer(file); break;
    case TokenizerFileKind::Gguf: tokenizer = loadGgufTokenizer(file); break;
    case TokenizerFileKind::Llama2c: tokenizer = loadLlama2cTokenizer(file, static_cast<int32_t>(model.spec.vocab), true); break;
    }
    if (tokenizer->vocabSize() > model.spec.vocab)
        throw Error(file, "the tokenizer has " + std::to_string(tokenizer->vocabSize()) + " tokens, the model's " +
                              "embedding only " + std::to_string(model.spec.vocab));
    model.tokenizer = std::move(tokenizer);
    model.metadata.erase("tokenizer_note");   // said something of the tokenizer this one replaces
    model.metadata["tokenizer"] = file;
}

} // namespace cwb
