#pragma once
// Exporters are formats in a registry (STYLE.md §5), like the loaders: the CLI, the batch runner and the GUI
// ask it for "hf", "gptq", "awq", "compressed-tensors" or "gguf". Each writes to temporary files and renames them into place, and
// refuses, with a sentence saying why, a model its format cannot hold.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model/model.h"
#include "core/util/feedback.h"

namespace cwb {

struct ExportOptions {
    // hf, compressed-tensors: f32 | f16 | bf16 (default f16, bf16 for a model read as bf16). gguf: the type of tensors
    // that are not already quantized by the recipe (default as hf; any of f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_K q5_K q6_K). gptq/awq: the type of
    // the tensors left unquantized (embeddings, norms, head): f16 (default), bf16 or f32.
    std::string tensorType;
    // gguf only: the type of compressed layers that cannot be written level for level (act-order, input scales, groups
    // that are not whole 32-blocks, other bit widths); default: the ggml type nearest each layer's format. f32 writes
    // the variant's exact weights (at the size of a dense model); f16 rounds them.
    std::string requantizeType;
    // hf/gptq/awq: a model whose tensors take more bytes than this is written as shards with an index.
    uint64_t shardBytes = uint64_t(4) << 30;
    // gptq only: a quantized output head on the block layers' grid is packed beside them ("lm_head": true in
    // quantization_config, as GPTQModel writes it; GPTQModel and vLLM read it) instead of written dequantized.
    // Off by default: transformers' GPTQ loader (optimum) converts the block layers only.
    bool packHead = false;
};

struct ExportedTensor {
    std::string name;          // as written in the file
    std::string type;          // "f16", "q4_0", "int4 gptq", ...
    double addedError = 0;     // ‖written − model‖² / ‖model‖² of the weight the variant computes with
    std::string note;          // why the type differs from what was asked, when it does
};

struct ExportReport {
    std::string format;
    std::string path;
    std::vector<std::string> files;        // every file written, by name: in the folder `path`, or (GGUF) the file itself
    std::vector<ExportedTensor> tensors;
    std::vector<std::string> notes;        // fallbacks, re-quantizations, what the format drops
    // What changes what the exported model computes against the variant (layers re-quantized): shown even with
    // --quiet, and in batch reports.
    std::vector<std::string> warnings;
    uint64_t bytes = 0;                    // tensor data bytes written (headers and padding not counted)
};

class ExportFormat {
public:
    virtual ~ExportFormat() = default;
    virtual std::string id() const = 0;             // stable: "hf", "gptq", "awq", "compressed-tensors", "gguf"
    virtual std::string displayName() const = 0;
    // Empty when the format can hold the model with these options, else the reason it cannot.
    virtual std::string refusal(const Model& model, const ExportOptions& options) const = 0;
    // Empty when the options suit the format whatever the model (e.g. a --type it writes), else the reason.
    virtual std::string optionsProblem(const ExportOptions& options) const { return ""; }
    // A folder of files (Hugging Face layouts) or one file (GGUF).
    virtual bool writesFolder() const { return true; }
    // Writes the model; throws cwb::Error (the refusal among others) or Cancelled. Nothing is left half-written.
    virtual ExportReport write(const Model& model, const std::string& path, const ExportOptions& options,
                               Feedback* feedback) const = 0;
};

class ExportFormatRegistry {
public:
    static ExportFormatRegistry& instance();
    void add(std::unique_ptr<ExportFormat> format);
    const ExportFormat* byId(const std::string& id) const;   // nullptr when unknown
    std::vector<const ExportFormat*> formats() const;

private:
    ExportFormatRegistry();
    std::vector<std::unique_ptr<ExportFormat>> mFormats;
};

// Looks the format up and writes; throws cwb::Error naming the format or the path on failure.
ExportReport exportModel(const Model& model, const std::string& formatId, const std::string& path,
                         const ExportOptions& options = {}, Feedback* feedback = nullptr);

// Why `path` cannot take an export in `formatId` ("" when it can): an unknown format, an empty path, a parent folder
// that does not exist or cannot be written, a folder where a file goes or the reverse, or a folder holding files an
// export does not write (an export replaces the whole folder, so they would be lost). Cheap: callers ask before the
// variant is built; exportModel asks again.
std::string exportDestinationProblem(const std::string& formatId, const std::string& path);
// Why an export written at `path` would destroy the model read from `source` ("" when it would not): the same file,
// or a folder holding it (an export replaces the whole folder). exportModel asks with the model's own path.
std::string exportOverwritesSource(const std::string& path, const std::string& source);
// Why `options` do not suit `formatId` whatever the model ("" when they do); throws for an unknown format.
std::string exportOptionsProblem(const std::string& formatId, const ExportOptions& options);

std::unique_ptr<ExportFormat> makeHfExport();
std::unique_ptr<ExportFormat> makeGptqExport();
std::unique_ptr<ExportFormat> makeAwqExport();
std::unique_ptr<ExportFormat> makeCompressedTensorsExport();
std::unique_ptr<ExportFormat> makeGgufExport();

} // namespace cwb
