#include "app/cli/commands.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include "app/cli/arguments.h"

#include "core/analysis/importance.h"
#include "core/compress/pipeline.h"
#include "core/eval/perplexity.h"
#include "core/model/model.h"
#include "core/project/project.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "core/util/scratch_file.h"

namespace cwb::cli {

const std::vector<Command>& commands() {
    static const std::vector<Command> list = {
        {"info", "cwb info MODEL [--tokenizer FILE] [--json]", "architecture, parameter count and every tensor of a model", runInfo},
        {"generate", "cwb generate MODEL [--prompt TEXT [--special] | --chat TEXT [--system TEXT] [--chat-format F]] [--tokens N] [--temperature T] [--top-k K] [--seed S] [--threads N] [--device D] [--dtype T] [--no-stop] [--tokenizer FILE] [--json]",
         "generate text (greedy unless --temperature is set); it ends at end of text or turn, or at a generated BOS (a new "
         "document), unless --no-stop", runGenerate},
        {"tokenize", "cwb tokenize MODEL --text TEXT|--file FILE [--no-bos] [--special] [--tokenizer FILE] [--json]",
         "the ids and pieces the model's own tokenizer gives a text (a file: its token count)", runTokenize},
        {"eval", "cwb eval MODEL --text FILE [--ctx N] [--chunks K] [--threads N] [--device cpu|cuda[:N]] [--dtype f32|f16|bf16] [--tokenizer FILE] [--json] [--quiet]",
         "perplexity by llama.cpp's method (second half of each ctx chunk scored)", runEval},
        {"compress", "cwb compress MODEL --recipe R.json [--calib FILE] [--samples N] [--seq-len T] [--seed S] [--device auto|cpu|cuda[:N]] [--calib-dtype f32|bf16|f16] [--eval FILE] [--ctx N] [--chunks K] [--out DIR] [--scratch DIR|auto|off] [--threads N] [--tokenizer FILE] [--json] [--quiet]",
         "apply a recipe step by step; each stage compared with the base (size, PPL, KL, top-1, reconstruction error)", runCompress},
        {"importance", "cwb importance MODEL --calib FILE|--text FILE [--kind head|layer|layer-ppl|channel|head-grad|channel-grad] [--step STEP.json] [--samples N] [--seq-len T] [--seed S] [--threads N] [--device auto|cpu|cuda[:N]] [--dtype f32|f16|bf16] [--tokenizer FILE] [--json] [--quiet]",
         "per-head, per-layer or per-channel importance measured on token windows of a text (layer kinds: KL or ΔPPL when only that layer gets --step)", runImportance},
        {"budget", "cwb budget MODEL --text FILE --target-bits B|--target-bytes N [--bits 3,4,8] [--group-size G] [--method quantize.rtn|quantize.gptq|quantize.awq] [--params JSON] [--fused] [--head] [--samples N] [--seq-len T] [--seed S] [--threads N] [--device auto|cpu|cuda[:N]] [--dtype f32|f16|bf16] [--out R.json] [--tokenizer FILE] [--json] [--quiet]",
         "choose per-layer bit widths for a bits-per-weight target from measured sensitivity; writes a recipe", runBudget},
        {"export",
         "cwb export MODEL|PROJECT [--variant V] [--recipe R.json [--calib F] [--samples N] [--seq-len T] [--seed S] [--device auto|cpu|cuda[:N]] [--calib-dtype f32|bf16|f16]] --format hf|gptq|awq|compressed-tensors|gguf [--type T] [--requantize T] [--pack-head] [--shard-size BYTES] [--scratch DIR|auto|off] [--model PATH] [--threads N] [--tokenizer FILE] --out PATH [--json] [--quiet]",
         "write a model or variant as a Hugging Face folder (dense, GPTQ, AWQ, compressed-tensors) or a GGUF file", runExport},
        {"bench",
         "cwb bench MODEL|PROJECT|--synthetic llama-7b|llama-70b|llama3-8b|llama3-70b [--layers N] [--context N] [--recipe R.json [--calib F] [--samples N] [--seq-len T] [--seed S]] [--variant V] [--model M] [--format int|fp8|w8a8|w8a8-folded|sparse24] [--bits 4|8] [--group-size G] [--quantize-head] "
         "[--device cuda] [--dtype f16|bf16] [--batch B] [--prompt-tokens P] [--gen-tokens G] [--repeats N] [--prefill-warmup SECONDS] [--no-native] [--no-graphs] [--no-fused-decode] [--no-fused-attention] [--no-dense-gemv] [--[no-]fused-norm-gemv] [--[no-]fused-swiglu-gemv] [--[no-]fused-int-linear] [--[no-]sparse24-gemv] [--[no-]sparse24-keep-dense] [--[no-]fused-projections] [--[no-]cpu-packed] [--threads N] [--tokenizer FILE] [--json]",
         "prefill tokens/s, decode ms/token (p50, p99; on CUDA with and without CUDA graphs) and peak GPU memory of the base and the variant", runBench},
        {"methods", "cwb methods [--json]", "compression methods with their parameters, ranges and defaults", runMethods},
        {"project",
         "cwb project create OUT.cwbproj --model M [--tokenizer FILE] [--recipe R.json ...] [--calib F] [--eval F] [--ctx N] [--chunks K] [--samples N] [--seq-len T] [--seed S]\n"
         "  cwb project show P [--json]\n  cwb project add-variant P --recipe R.json [--name N] [--from VARIANT]\n"
         "  cwb project add-export P --variant V --format hf|gptq|awq|compressed-tensors|gguf [--type T] [--requantize T] [--pack-head] [--file NAME] [--model PATH] [--tokenizer FILE]\n"
         "  cwb project set P [--calib F|--no-calib] [--eval F] [--samples N] [--seq-len T] [--seed S] [--ctx N] [--chunks K] [--model PATH] [--tokenizer FILE]\n"
         "  cwb project set-tokenizer P --tokenizer FILE|--own [--model PATH]\n"
         "  cwb project run P [--variants a,b|--all] [--threads N] [--model PATH] [--tokenizer FILE] [--scratch DIR|auto|off] [--quiet]\n"
         "  cwb project importance P [--kind head|layer|layer-ppl|channel|head-grad|channel-grad] [--step JSON|FILE] [--samples N] [--seq-len T] [--device auto|cpu|cuda[:N]] [--dtype f32|f16|bf16] [--model PATH] [--tokenizer FILE] [--quiet]",
         "create and inspect project files; `run` evaluates the variants and stores their results", runProjectCommand},
    };
    return list;
}

RuntimeOptions runtimeOptions(const Arguments& args) {
    RuntimeOptions options;
    const std::string device = args.value("device", "cpu");
    if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
        if (!at::hasCUDA())
            throw Error("--device " + device + ": this build of LibTorch has no CUDA, or no GPU is visible");
        options.device = at::Device(device);
        options.dtype = at::kHalf;
    } else if (device != "cpu") {
        throw Error("--device must be cpu or cuda[:N], got '" + device + "'");
    }
    const std::string dtype = args.value("dtype");
    if (dtype == "f32") options.dtype = at::kFloat;
    else if (dtype == "f16") options.dtype = at::kHalf;
    else if (dtype == "bf16") options.dtype = at::kBFloat16;
    else if (!dtype.empty()) throw Error("--dtype must be f32, f16 or bf16, got '" + dtype + "'");
    return options;
}

void applyScratch(const Arguments& args, Model& model, bool quiet) {
    std::string note;
    model.setScratch(chooseScratch(args.value("scratch", "auto"), model.storageBytes(), &note));
    if (!quiet && !note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
}

LoadOptions projectLoadOptions(const Project& project, const Arguments& args) {
    LoadOptions options = project.model().loadOptions();
    if (args.has("tokenizer")) options.tokenizerPath = args.value("tokenizer");
    return options;
}

void requireTokenizer(const Model& model, const std::string& path) {
    if (model.tokenizer) {
        static bool said = false;   // once: a command that loads the model twice (a base and a variant) says it once
        if (!said)
            for (const auto& w : model.tokenizer->warnings()) std::fprintf(stderr, "warning: %s\n", w.c_str());
        said = true;
        return;
    }
    const auto note = model.metadata.find("tokenizer_note");
    const std::string why = note != model.metadata.end() && note->second.rfind("no tokenizer: ", 0) == 0
                                ? " (" + note->second.substr(std::string("no tokenizer: ").size()) + ")"
                                : "";
    throw Error(path, "has no tokenizer" + why + "; pass --tokenizer FILE");
}

at::Tensor windowsFromText(const Arguments& args, const std::string& textPath, const Model& model, int64_t samples,
                           std::string* noteOut) {
    requireTokenizer(model, model.path);
    CalibrationSpec spec;
    spec.textPath = textPath;
    spec.samples = args.integer("samples", samples);
    spec.seqLen = args.integer("seq-len", 256);
    spec.seed = args.unsignedInteger("seed", 0);
    std::string note;   // windows clipped to the context or the text, overlapping: said, as compress says it
    at::Tensor windows = drawCalibration(model.tokenizer->encode(readTextFile(textPath), model.tokenizer->addBosByDefault()), model.tokenizer->textBos(), spec,
                                         model.spec.context, &note);
    if (!note.empty() && !args.flag("quiet") && !args.flag("json")) std::fprintf(stderr, "note: %s\n", note.c_str());
    if (noteOut) *noteOut = note;
    return windows;
}

CalibrationCompute autoFittedCompute(const Arguments& args, const Model& model, const CalibrationCompute& compute) {
    if (args.value("device", "auto") != "auto") return compute;
    std::string note;
    const CalibrationCompute fitted = fitAutoDevice(model, compute, &note);
    if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
    return fitted;
}

void showProgress(CallbackFeedback& feedback, const std::string& label) {
    // One feedback may report several runs in turn (each evaluation of a compress): a fraction lower than the last
    // starts the clock again.
    feedback.progressCallback = [label, start = std::chrono::steady_clock::now(), last = -1, previous = 0.0](double f) mutable {
        if (f < previous) {
            start = std::chrono::steady_clock::now();
            last = -1;
        }
        previous = f;
        const int percent = std::clamp(int(f * 100), 0, 100);
        if (percent / 10 == last / 10 && !(percent == 100 && last != 100)) return;
        last = percent;
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const auto duration = [](double t) {
            char text[32];
            std::snprintf(text, sizeof text, t < 10 ? "%.1f s" : "%.0f s", t);
            return std::string(text);
        };
        if (percent < 10 || percent == 100) {
            std::fprintf(stderr, "%s: %d%% (%s)\n", label.c_str(), percent, duration(seconds).c_str());
            return;
        }
        std::fprintf(stderr, "%s: %d%% (%s, about %s left)\n", label.c_str(), percent, duration(seconds).c_str(),
                     duration(seconds * (1.0 - f) / f).c_str());
    };
}

int64_t chunksOption(const Arguments& args) {
    if (!args.has("chunks")) return -1;
    const int64_t chunks = args.integer("chunks", -1);
    if (chunks < 1) throw Error("--chunks must be at least 1 (leave it out to score the whole text), got " + std::to_string(chunks));
    return chunks;
}

namespace {

// The folder `path` is or would be made in: itself when it exists, else the nearest folder above it that exists.
std::filesystem::path nearestExisting(const std::filesystem::path& path) {
    std::error_code ec;
    std::filesystem::path at = path;
    while (!std::filesystem::exists(at, ec)) {
        const std::filesystem::path up = at.parent_path();
        if (up.empty()) return ".";
        if (up == at) break;
        at = up;
    }
    return at;
}

} // namespace

void checkOutputFolder(const std::string& dir) {
    if (dir.empty()) throw Error("--out needs a folder");
    std::error_code ec;
    const std::filesystem::path existing = nearestExisting(dir);
    if (!std::filesystem::is_directory(existing, ec))
        throw Error(dir, existing.string() == dir ? "exists and is not a folder (--out is a folder)"
                                                  : existing.string() + " is not a folder, so the output folder cannot be made");
    if (::access(existing.c_str(), W_OK | X_OK) != 0)
        throw Error(dir, "cannot write into " + existing.string() + ": " + std::strerror(errno));
}

void makeOutputFolder(const std::string& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error(dir, "cannot create the output folder: " + ec.message());
    if (!std::filesystem::is_directory(dir, ec)) throw Error(dir, "exists and is not a folder (--out is a folder)");
}

void checkOutputFile(const std::string& path) {
    if (path.empty()) throw Error("--out needs a file name");
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw Error(path, "is a folder; --out names the file to write");
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    const std::filesystem::path existing = nearestExisting(parent.empty() ? "." : parent);
    if (!std::filesystem::is_directory(existing, ec)) throw Error(path, existing.string() + " is not a folder");
    if (::access(existing.c_str(), W_OK | X_OK) != 0)
        throw Error(path, "cannot write into " + existing.string() + ": " + std::strerror(errno));
    // An existing file is replaced only when it is a recipe (an earlier plan) or empty: a typo must not turn the model,
    // a project or a text into a recipe.
    const std::filesystem::file_status status = std::filesystem::status(path, ec);
    if (!std::filesystem::exists(status)) return;
    if (!std::filesystem::is_regular_file(status)) throw Error(path, "exists and is not a regular file; choose another name");
    if (std::filesystem::file_size(path, ec) == 0 && !ec) return;
    std::ifstream in(path, std::ios::binary);
    std::string head(4096, '\0');
    in.read(head.data(), std::streamsize(head.size()));
    head.resize(size_t(in.gcount()));
    const size_t first = head.find_first_not_of(" \t\r\n");
    bool recipe = false;
    if (first != std::string::npos && head[first] == '{' && std::filesystem::file_size(path, ec) < (64u << 20)) {
        const nlohmann::json j = nlohmann::json::parse(readTextFile(path), nullptr, false);
        recipe = !j.is_discarded() && j.is_object() && j.contains("steps") && j["steps"].is_array();
    }
    if (!recipe)
        throw Error(path, "exists and is not a recipe (a JSON object with \"steps\"); --out would replace it: remove it or "
                          "choose another name");
}

int threadCount(int64_t threads) {
    // 4096 is far past any CPU's cores; the cap keeps the count an int (4294967297 would have run as 1 thread).
    if (threads < 0 || threads > 4096) throw Error("--threads must be 0..4096, got " + std::to_string(threads));
    return static_cast<int>(threads);
}

void applyThreads(int64_t threads) {
    const int count = threadCount(threads);
    // More threads than the machine runs at once wait on each other: --threads 1000 on 2 cores ran 60x slower (user probe).
    const unsigned cores = std::thread::hardware_concurrency();
    if (cores > 0 && count > int(cores))
        std::fprintf(stderr, "warning: --threads %d is more than this machine's %u hardware threads; they wait on each other "
                             "(0, the default, takes what the machine has)\n", count, cores);
    if (count > 0) at::set_num_threads(count);
}

bool isProjectPath(const std::string& path) {
    const std::string ext = ".cwbproj";
    return path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

} // namespace cwb::cli
