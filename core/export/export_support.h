#pragma once
// Pieces every exporter needs: tensor bytes in a plain dtype, the RoPE row order of q/k, type names.
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/io/ggml_types.h"
#include "core/model/model.h"

namespace cwb::exporting {

// Contiguous little-endian bytes of a tensor converted to F32, F16, BF16, I32, I64 or I8 (one-byte codes such as FP8
// go through as I8 after a bitwise view: `codes.view(at::kChar)`).
// A conversion to F16 that would turn finite values into inf (magnitudes of 65520 and more) throws cwb::Error naming
// `what` (the tensor) and its largest value: a bf16 or f32 source can hold such values, f16 cannot.
std::vector<uint8_t> plainBytes(const at::Tensor& tensor, ggml::Type type, const std::string& what = "");
// The float type dense tensors are written in when --type does not say: bf16 for a model with a bf16 tensor (bf16 ->
// f16 loses range and turns large values into inf), else f16.
ggml::Type sourceFloatType(const Model& model);
// Whether writing `values` (f32) as `type` (f16 or bf16) changes any of them. llama.cpp keeps norms in f32 even in f16
// files, where their values are f16 already: those are not rounded.
bool roundsValues(const at::Tensor& values, ggml::Type type);
// A report note for f32 tensors (`names`, in the file's naming) whose values the default dense type `written` rounds,
// saying how to keep them; "" when there are none. Rounding embeddings and norms to f16 moves a variant's measured
// perplexity (most where activations are quantized per token), so the export says it did so.
std::string roundedFloatsNote(const std::vector<std::string>& names, ggml::Type written);

// Hugging Face Llama checkpoints rotate the two halves of a head; GGUF "llama" rotates adjacent pairs. These
// reorder dim 0 of a q or k weight, bias, or any per-row tensor (packed words, scales) of `heads` heads.
at::Tensor adjacentToHalves(const at::Tensor& rows, int64_t heads, int64_t headDim);
at::Tensor halvesToAdjacent(const at::Tensor& rows, int64_t heads, int64_t headDim);
// Heads of the q or k projection that `tensorName` belongs to, or 0 when it is neither.
int64_t ropeHeadsOf(const Model& model, const std::string& tensorName);

// ggml's type name ("q4_K", "f16"), matched without regard to case; throws cwb::Error listing the choices.
ggml::Type parseGgmlType(const std::string& name, const std::vector<ggml::Type>& allowed);
std::string ggmlTypeName(ggml::Type type);

// ‖a − b‖² / ‖b‖² (0 when b is zero and a equals it).
double relativeError(const at::Tensor& a, const at::Tensor& b);

// Empty when every layer has the model's head, kv-head and MLP sizes; else which layer differs and how.
std::string nonUniformLayers(const ArchSpec& spec);
// The sizes all layers share (spec.heads/kvHeads/ffn after structured pruning changed them uniformly).
LayerShape uniformLayerShape(const ArchSpec& spec);

// Removes a temporary output on scope exit unless committed (folders are removed with their files).
class TemporaryPath {
public:
    explicit TemporaryPath(std::string path) : mPath(std::move(path)) {}
    ~TemporaryPath();
    const std::string& path() const { return mPath; }
    void commit() { mCommitted = true; }

private:
    std::string mPath;
    bool mCommitted = false;
};

// Makes the folders missing on the way to `path` (its parent and above, as `cwb export --out new/sub/x` needs) and,
// unless commit() is called, removes again those it made, deepest first, where they are still empty: a failed or
// cancelled export leaves no folder behind. Throws cwb::Error naming the folder that cannot be made.
class ParentFolders {
public:
    explicit ParentFolders(const std::string& path);
    ~ParentFolders();
    void commit() { mCommitted = true; }

private:
    void removeMade();
    std::vector<std::string> mMade;   // outermost first
    bool mCommitted = false;
};

// See exportDestinationProblem (export_format.h); `folder`: the export is a folder, else one file.
std::string destinationProblem(const std::string& path, bool folder);

// Renames `from` onto `to`; an existing folder at `to` is replaced. Throws cwb::Error.
void replacePath(const std::string& from, const std::string& to);

// Removes what an earlier export to `path` that was killed left beside it (staging files and folders named with one of
// `tags`; abandonedSiblings says which) and adds a note naming each to `notes`.
void removeKilledExportLeftovers(const std::string& path, const std::vector<std::string>& tags, std::vector<std::string>& notes);

} // namespace cwb::exporting
