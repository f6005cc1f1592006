#include "core/io/model_format.h"

#include <algorithm>
#include <cstring>
#include <sys/stat.h>

#include "core/io/gguf_names.h"
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
    // Messages name a GGUF's tensors as the file does ("blk.2.ffn_norm.weight"), not by the names cwb reads them as.
    if (model->format == "gguf")
        model->validateTensors([family = model->spec.family](const std::string& name) { return gguf::ggufName(family, name); });
    else
        model->validateTensors();
    model->dropOrRefuseUnusedTensors();
    if (!options.tokenizerPath.empty()) {
        auto it = model->metadata.find("tokenizer");
        if (it == model->metadata.end() || it->second != options.tokenizerPath) applyTokenizerFile(*model, options.tokenizerPath);
    } else if (model->tokenizer) {
        const auto file = model->metadata.find("tokenizer");
        fitTokenizerToEmbedding(*model, file != model->metadata.end() ? file->second : path);
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
    std::shared_ptr<Tokenizer> previous = std::move(model.tokenizer);
    model.tokenizer = std::move(tokenizer);
    try {
        model.metadata.erase("tokenizer_note");   // said something of the tokenizer this one replaces
        fitTokenizerToEmbedding(model, file);
    } catch (...) {
        model.tokenizer = std::move(previous);
        throw;
    }
    model.metadata["tokenizer"] = file;
}

void fitTokenizerToEmbedding(Model& model, const std::string& file) {
    const int64_t rows = model.spec.vocab;
    if (!model.tokenizer || model.tokenizer->vocabSize() <= rows) return;
    const auto data = model.tokenizer->vocabulary();
    const std::string past = "past the model's embedding of " + std::to_string(rows) + " rows";
    if (!data) throw Error(file, "the tokenizer has " + std::to_string(model.tokenizer->vocabSize()) + " tokens, " + past);
    // Added tokens past the embedding (a <pad> at 32000 in Llama 2 fine-tunes whose embedding was not resized) are
    // dropped, as transformers runs such models; a piece of the vocabulary itself there means another model's tokenizer.
    std::vector<std::string> dropped;
    for (size_t id = size_t(rows); id < data->tokens.size(); ++id) {
        const auto type = id < data->types.size() ? TokenType(data->types[id]) : TokenType::Normal;
        if (type == TokenType::Unused) continue;   // a hole: no piece
        if (type != TokenType::Control && type != TokenType::UserDefined)
            throw Error(file, "the tokenizer's vocabulary has '" + data->tokens[id] + "' at id " + std::to_string(id) + ", " + past +
                                  " (is it this model's tokenizer?)");
        dropped.push_back("'" + data->tokens[id] + "' (" + std::to_string(id) + ")");
    }
    for (const auto& [name, id] : {std::pair<const char*, TokenId>{"BOS", data->bos}, {"EOS", data->eos}, {"unknown", data->unk}})
        if (id >= rows) throw Error(file, std::string("the tokenizer's ") + name + " token is id " + std::to_string(id) + ", " + past);
    TokenizerData fitted = *data;
    fitted.tokens.resize(size_t(rows));
    if (fitted.types.size() > size_t(rows)) fitted.types.resize(size_t(rows));
    if (fitted.scores.size() > size_t(rows)) fitted.scores.resize(size_t(rows));
    for (TokenId* id : {&fitted.pad, &fitted.sep, &fitted.cls, &fitted.mask})
        if (*id >= rows) *id = -1;
    fitted.stopIds.erase(std::remove_if(fitted.stopIds.begin(), fitted.stopIds.end(), [&](TokenId id) { return id >= rows; }),
                         fitted.stopIds.end());
    model.tokenizer = makeTokenizer(fitted);
    std::string list;
    for (size_t i = 0; i < dropped.size() && i < 4; ++i) list += (i ? ", " : "") + dropped[i];
    if (dropped.size() > 4) list += ", ...";
    const std::string note = std::to_string(dropped.size()) + " added token" + (dropped.size() == 1 ? "" : "s") + " " + past +
                             " dropped from the tokenizer: " + list;
    auto& existing = model.metadata["tokenizer_note"];
    existing = existing.empty() ? note : existing + "; " + note;
}

} // namespace cwb
