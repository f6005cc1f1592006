#pragma once
// Synthetic models for tests: random weights of a chosen shape, written with the project's own writers
// as Hugging Face folders (single file or sharded; f32/f16/bf16) or GGUF files.
#include <map>
#include <memory>
#include <string>

#include <ATen/ATen.h>

#include "core/io/ggml_types.h"
#include "core/model/arch_spec.h"

namespace cwb {
class Model;
class Tokenizer;
}

namespace cwb::test {

using WeightMap = std::map<std::string, at::Tensor>;   // canonical names, fp32, [out, in] matrices

ArchSpec tinyLlamaSpec();   // 2 layers, hidden 32, 4 heads, 2 kv heads (GQA), ffn 48, vocab 64
ArchSpec tinyGpt2Spec();    // 2 layers, hidden 32, 4 heads, ffn 64, vocab 64, 64 positions
// tinyLlamaSpec with every row and column a multiple of 32 (GPTQ's 3-bit runs, AWQ's 8 outputs a word):
// hidden 64, 4 heads of 16, 2 kv heads, ffn 128.
ArchSpec packableLlamaSpec();
// A SentencePiece-style vocabulary of `size` tokens (<unk> <s> </s>, then "▁t3" ...), for synthetic models that are
// exported or tokenized.
std::shared_ptr<Tokenizer> tinyVocabulary(int64_t size);

// Random weights with Hugging Face conventions (RoPE on halves), rounded to `storage` precision so a
// model written in that type holds exactly these values.
WeightMap randomWeights(const ArchSpec& spec, uint64_t seed, ggml::Type storage = ggml::Type::F32);

// The weights as a model stored in `storage` holds them (matrices quantized and dequantized; vectors as given).
WeightMap storedWeights(const WeightMap& weights, ggml::Type storage);

// Writes config.json + model.safetensors (shards == 1) or shards + model.safetensors.index.json.
void writeHfFolder(const std::string& folder, const ArchSpec& spec, const WeightMap& weights, ggml::Type storage,
                   int shards = 1);
// Writes a GGUF v3 file as llama.cpp's converter would: Q/K rows permuted to adjacent-pair RoPE for llama.
// Matrices take `storage` (any GGML type the project can quantize to); norms and biases stay F32.
void writeGguf(const std::string& path, const ArchSpec& spec, const WeightMap& weights, ggml::Type storage);

// ---- variants of such models, for the export and loader tests

// The variant a recipe (JSON text) makes of `base`, calibrated on 4 random windows of 16 tokens (drawn from LibTorch's
// generator: tests seed it).
std::unique_ptr<Model> compressWithRecipe(const Model& base, const std::string& recipe);
// Logits of the ids 1 5 9 17 33 2 40 63 (one sequence), as the runtime computes them on the CPU.
at::Tensor probeLogits(const Model& model);
// max |a − b| / max |b|.
double maxRelativeError(const at::Tensor& a, const at::Tensor& b);

} // namespace cwb::test
