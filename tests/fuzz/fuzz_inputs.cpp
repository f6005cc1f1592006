// libFuzzer targets for the files a user hands cwb: each input is written where a real file would be and read
// through the public loaders. A cwb::Error is the expected answer to a bad file; anything else (another exception,
// a sanitizer report, a crash, a hang) is a finding. One source, one executable per target (CWB_FUZZ_TARGET).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/compress/recipe.h"
#include "core/io/model_format.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"

namespace fs = std::filesystem;

namespace {

enum class Target { Gguf, Llama2c, Safetensors, HfConfig, TokenizerJson, SentencePiece, Llama2cTokenizer, Recipe };
constexpr Target kTarget = static_cast<Target>(CWB_FUZZ_TARGET);

// A folder of this process's own, so that parallel fuzzing jobs do not share files.
const fs::path& workDir() {
    static const fs::path dir = [] {
        fs::path d = fs::temp_directory_path() / ("cwb-fuzz-" + std::to_string(::getpid()));
        fs::create_directories(d);
        return d;
    }();
    return dir;
}

std::string writeInput(const std::string& name, const uint8_t* data, size_t size) {
    const std::string path = (workDir() / name).string();
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
    return path;
}

// A Hugging Face folder (config.json + model.safetensors, as `cwb export MODEL --format hf` writes it): the safetensors
// target reads its config with the fuzzed weights, the config target its weights with the fuzzed config, and the
// tokenizer targets apply the fuzzed tokenizer to the model it holds.
const fs::path& modelDir() {
    static const fs::path dir = [] {
        const char* d = std::getenv("CWB_FUZZ_MODEL_DIR");
        if (!d || !fs::exists(fs::path(d) / "config.json") || !fs::exists(fs::path(d) / "model.safetensors")) {
            std::fprintf(stderr, "set CWB_FUZZ_MODEL_DIR to a folder with config.json and model.safetensors\n");
            std::abort();
        }
        return fs::path(d);
    }();
    return dir;
}

// Uses what loaded, as a command would: a forward pass over a few tokens, then the tokenizer on text with special
// tokens and bytes of every kind.
void exercise(const cwb::Model& model) {
    const int64_t vocab = model.spec.vocab;
    cwb::Transformer runtime(model);
    runtime.forward(at::tensor(std::vector<int64_t>{1 % vocab, 7 % vocab, (vocab - 1)}, at::kLong).unsqueeze(0));
    if (!model.tokenizer) return;
    const std::string text = "Hello, world! 123 \xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 <s></s><|im_start|> \t\n  x\xff";
    auto ids = model.tokenizer->encode(text, true);
    model.tokenizer->decode(ids);
    ids = model.tokenizer->encodeWithSpecialTokens(text, false);
    model.tokenizer->decode(ids);
    for (int32_t id = 0; id < std::min<int32_t>(model.tokenizer->vocabSize(), 64); ++id) model.tokenizer->tokenText(id);
}

void runOne(const uint8_t* data, size_t size) {
    switch (kTarget) {
    case Target::Gguf:
        exercise(*cwb::loadModel(writeInput("model.gguf", data, size)));
        break;
    case Target::Llama2c: {
        // Without a tokenizer beside it the loader still reads the checkpoint whole.
        exercise(*cwb::loadModel(writeInput("model.bin", data, size)));
        break;
    }
    case Target::Safetensors: {
        fs::copy_file(modelDir() / "config.json", workDir() / "config.json", fs::copy_options::overwrite_existing);
        writeInput("model.safetensors", data, size);
        exercise(*cwb::loadModel(workDir().string()));
        break;
    }
    case Target::HfConfig: {
        fs::copy_file(modelDir() / "model.safetensors", workDir() / "model.safetensors",
                      fs::copy_options::skip_existing);
        writeInput("config.json", data, size);
        exercise(*cwb::loadModel(workDir().string()));
        break;
    }
    case Target::TokenizerJson:
    case Target::SentencePiece:
    case Target::Llama2cTokenizer: {
        static std::unique_ptr<cwb::Model> host = cwb::loadModel(modelDir().string());
        const char* name = kTarget == Target::TokenizerJson ? "tokenizer.json"
                           : kTarget == Target::SentencePiece ? "tokenizer.model" : "tok512.bin";
        cwb::applyTokenizerFile(*host, writeInput(name, data, size));
        exercise(*host);
        break;
    }
    case Target::Recipe: {
        const std::string text(reinterpret_cast<const char*>(data), size);
        nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
        if (j.is_discarded()) return;   // the parser's own errors are nlohmann's concern; Recipe::load words them
        const cwb::Recipe recipe = cwb::Recipe::fromJson(j, "fuzz.json");
        // What toJson writes must read back, whole: a failure here is a finding, not a bad input.
        try {
            const cwb::Recipe again = cwb::Recipe::fromJson(recipe.toJson(), "fuzz-roundtrip.json");
            if (again.toJson() != recipe.toJson()) {
                std::fprintf(stderr, "finding: a recipe read back from its own JSON differs\n");
                std::abort();
            }
        } catch (const std::exception& e) {
            std::fprintf(stderr, "finding: a recipe's own JSON does not read back: %s\n", e.what());
            std::abort();
        }
        break;
    }
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        runOne(data, size);
    } catch (const cwb::Error&) {
        // The expected answer to a bad file.
    } catch (const std::exception& e) {
        std::fprintf(stderr, "finding: an exception other than cwb::Error escaped: %s\n", e.what());
        std::abort();
    }
    return 0;
}
