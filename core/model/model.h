#pragma once
// One canonical in-memory model: architecture, named tensors in their storage type (memory-mapped where
// the format allows), and the tokenizer. Tensor names follow the Hugging Face checkpoints of the family
// (model.layers.N.self_attn.q_proj.weight for Llama, transformer.h.N.attn.c_attn.weight for GPT-2), and every
// matrix has the logical shape [out, in] of a linear layer whatever its layout on disk.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/io/ggml_types.h"
#include "core/model/arch_spec.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/error.h"

namespace cwb {

class MappedFile;
class CompressedLinear;
class ScratchFile;

struct TensorRecord {
    std::string name;
    std::vector<int64_t> shape;      // logical shape, outermost first
    ggml::Type type = ggml::Type::F32;
    const uint8_t* data = nullptr;   // storage bytes (mapped file or a buffer the model owns)
    size_t bytes = 0;
    std::string file;                // where the bytes came from, for messages and info
    bool storedTransposed = false;   // 2-D data holds the transpose of `shape` (GPT-2 Conv1D)
    // The weight of a layer read packed from a checkpoint (GPTQ, AWQ, compressed-tensors): no dense bytes at all
    // (data null, bytes 0); floatTensor dequantizes the compressed layer, which the model always holds with it.
    bool packedOnly = false;
    // The quantized GGUF type (q4_K, ...) the tensor was read in, once a method replaced it with floats: a GGUF export
    // writes it in that type again unless --type says otherwise. Unset while the record holds the type itself.
    std::optional<ggml::Type> quantizedSource;
    // Keeps `data` alive when the model owns it (replaceTensor): shared by the records of clones, released with the
    // last record, so replacing a tensor twice does not hold both copies.
    std::shared_ptr<const void> owner;

    int64_t elementCount() const;
    // What the tensor is counted as (sizes, bits per weight): its own type and bytes, except a tensor of a quantized
    // GGUF source that a step replaced, held as floats while the variant is worked on but counted in the type a GGUF
    // export writes it in by default (the type it was read in, or a type whose blocks
    // fit its rows when they do not).
    ggml::Type storedType() const;
    size_t storedBytes() const;
};

class Model {
public:
    ArchSpec spec;
    std::string path;                // file or folder it was loaded from
    bool derived = false;            // a clone (a variant): a step may have changed what it computes since `path`
    std::string format;              // "gguf", "hf", "llama2c"
    std::shared_ptr<Tokenizer> tokenizer;
    std::map<std::string, std::string> metadata;   // free-form facts shown by `cwb info`

    bool has(const std::string& name) const;
    const TensorRecord& tensor(const std::string& name) const;   // throws cwb::Error when absent
    const std::vector<std::string>& tensorNames() const { return mOrder; }

    // The tensor in fp32 on the CPU, always a fresh contiguous tensor the caller may modify. For the weight of
    // a compressed layer, the weight it effectively computes with (dequantized, in the original input space).
    at::Tensor floatTensor(const std::string& name) const;

    // An error about what the model computes (its output is not finite, ...): named by its file, or as a variant built
    // from it, so that a broken variant is not blamed on its base's file.
    Error computeError(const std::string& message) const;

    // ---- variants: a copy that shares the base's mapped tensors and replaces what a method changes ----
    std::unique_ptr<Model> clone() const;
    // Replaces (or adds) a tensor with an owned copy of `value` (CPU, f32/f16/bf16); its shape may change.
    // With a scratch file the copy lives there (mapped), not in anonymous memory.
    void replaceTensor(const std::string& name, const at::Tensor& value);
    void removeTensor(const std::string& name);
    void renameTensor(const std::string& from, const std::string& to);
    // A compressed linear layer ("model.layers.0.mlp.up_proj"); the runtime computes through it. With a scratch
    // file its packed tensors are moved there.
    void setCompressed(const std::string& layer, std::shared_ptr<const CompressedLinear> linear);
    // A layer a checkpoint holds only packed: its weight is added as a record with no dense bytes (packedOnly), so
    // loading a 70B INT4 checkpoint costs its packed bytes, not a float32 copy. Throws when the weight exists.
    void addPackedLayer(const std::string& layer, std::shared_ptr<const CompressedLinear> linear, const std::string& file);
    std::shared_ptr<const CompressedLinear> compressed(const std::string& layer) const;
    // Tensors whose record (bytes, shape, type) or compressed layer differ between this model and `other`, by
    // name, either side's (a variant against its base: what a recipe changed).
    std::vector<std::string> differingTensors(const Model& other) const;
    // Takes `other`'s tensor `name` as it is there (record and, for a weight, its compressed layer), sharing its
    // bytes; absent there, removed here. Swaps one layer of a variant into a working copy of its base and back.
    void adoptTensor(const Model& other, const std::string& name);
    const std::map<std::string, std::shared_ptr<const CompressedLinear>>& compressedLayers() const { return mCompressed; }
    // Names of the linear layers of the blocks (no embeddings, no output head), in block order.
    std::vector<std::string> linearLayers() const;

    // Where tensors the model comes to own are kept: a scratch file (see core/util/scratch_file.h) or, when
    // null, anonymous memory. Clones share it, so every variant of a large base spills to the same file.
    void setScratch(std::shared_ptr<ScratchFile> scratch) { mScratch = std::move(scratch); }
    const std::shared_ptr<ScratchFile>& scratch() const { return mScratch; }

    // Adds a tensor record after checking that shape × type matches its byte count; throws cwb::Error.
    void addTensor(TensorRecord record);
    // Keeps what record data points into alive for the model's lifetime.
    void keepAlive(std::shared_ptr<const void> owner) { mOwners.push_back(std::move(owner)); }

    int64_t parameterCount() const;
    size_t storageBytes() const;

    // Checks that every tensor the runtime needs is present with the expected shape; throws cwb::Error.
    // `nameInFile` gives a tensor's name as the file spells it ("blk.2.ffn_norm.weight" in a GGUF), for messages.
    void validateTensors(const std::function<std::string(const std::string&)>& nameInFile = {}) const;
    // For a model read from disk: tensors the forward pass would not use (an o_proj or MLP bias, layers past the
    // configured count) are refused, since ignoring them would change what the model computes without a word, except
    // biases that are all zero (older GPTQ exports carry one beside every linear layer): those are dropped, and
    // metadata["dropped_tensors"] says how many.
    void dropOrRefuseUnusedTensors();

private:
    std::map<std::string, TensorRecord> mTensors;
    std::vector<std::string> mOrder;
    std::vector<std::shared_ptr<const void>> mOwners;
    std::map<std::string, std::shared_ptr<const CompressedLinear>> mCompressed;
    std::shared_ptr<ScratchFile> mScratch;
};

// Canonical tensor names.
namespace names {
std::string llamaLayer(int64_t layer, const std::string& suffix);   // "model.layers.L." + suffix
std::string gpt2Layer(int64_t layer, const std::string& suffix);    // "transformer.h.L." + suffix
// The output head as a layer ("lm_head"; its weight "lm_head.weight", absent when tied to the embedding).
inline constexpr const char* kHead = "lm_head";
std::string embedding(Family family);   // "model.embed_tokens.weight" or "transformer.wte.weight"
} // namespace names

} // namespace cwb
