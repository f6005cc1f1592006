#include "core/io/model_format.h"

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
    if (!options.tokenizerPath.empty()) {
        auto it = model->metadata.find("tokenizer");
        if (it == model->metadata.end() || it->second != options.tokenizerPath) applyTokenizerFile(*model, options.tokenizerPath);
    }
    return model;
}

namespace {

// The tokenizer file a --tokenizer path names (a folder's tokenizer.json), and whether it is a tokenizer.json.
std::string tokenizerFileOf(const std::string& path, bool& json) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw Error(path, "no such tokenizer file or folder");
    std::string file = path;
    if (S_ISDIR(st.st_mode)) file = path + "/tokenizer.json";
    json = file.size() >= 5 && file.compare(file.size() - 5, 5, ".json") == 0;
    const bool llama2c = file.size() >= 4 && file.compare(file.size() - 4, 4, ".bin") == 0;
    if (!json && !llama2c)
        throw Error(path, "not a tokenizer cwb reads: pass a Hugging Face tokenizer.json (or its folder) or a llama2.c "
                          "tokenizer .bin");
    if (S_ISDIR(st.st_mode) && ::stat(file.c_str(), &st) != 0) throw Error(path, "the folder has no tokenizer.json");
    return file;
}

} // namespace

std::vector<std::string> tokenizerFiles(const std::string& path) {
    bool json = false;
    const std::string file = tokenizerFileOf(path, json);
    return json ? hfTokenizerFilesRead(file) : std::vector<std::string>{file};
}

void applyTokenizerFile(Model& model, const std::string& path) {
    bool json = false;
    const std::string file = tokenizerFileOf(path, json);
    auto tokenizer = json ? loadHfTokenizer(file) : loadLlama2cTokenizer(file, static_cast<int32_t>(model.spec.vocab), true);
    if (tokenizer->vocabSize() > model.spec.vocab)
        throw Error(file, "the tokenizer has " + std::to_string(tokenizer->vocabSize()) + " tokens, the model's " +
                              "embedding only " + std::to_string(model.spec.vocab));
    model.tokenizer = std::move(tokenizer);
    model.metadata.erase("tokenizer_note");   // said something of the tokenizer this one replaces
    model.metadata["tokenizer"] = file;
}

} // namespace cwb
