#pragma once
// compressed-tensors, the checkpoint format of llm-compressor that vLLM and transformers load
// (config.json: quantization_config.quant_method = "compressed-tensors"), for the layer kinds cwb has:
//
//   pack-quantized (integer weights, 2/4/8 bits, per group or per channel, weight only):
//     weight_packed      int32 [out, ⌈in · bits / 32⌉]  cwb's level (0 … 2^bits − 1) of input i at bit bits·i
//                        of its row: a little-endian bit stream, the last word zero-filled
//     weight_scale       fp16  [out, groups] (per channel: [out, 1])
//     weight_zero_point  int32 [⌈out · bits / 32⌉, groups]  asymmetric only; zero points packed along OUTPUT rows
//     weight_shape       int64 [2] = {out, in}
//     W = (q − zp) · scale with q = level − 2^(bits-1), zp = zero − 2^(bits-1) (signed in the format's terms).
//   float-quantized (FP8 E4M3 weights, dynamic per-token FP8 activations) and naive-quantized (FP8 weight only):
//     weight F8_E4M3 [out, in], weight_scale f32 [out, 1] (per channel) or [1] (per tensor).
//   int-quantized (W8A8: int8 weights per channel, dynamic per-token int8 activations):
//     weight I8 [out, in], weight_scale f32 [out, 1].
//
// Facts from compressed-tensors 0.20.1 (compressors/pack_quantized, naive_quantized; quantization/lifecycle).
// 3, 5, 6 and 7 bits are not written: their packing changed between releases (whole values per word, then one
// bit stream). Act-order group indices (weight_g_idx) are read but not written: the format dropped them in 2026.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/io/ggml_types.h"
#include "core/model/compressed_linear.h"

namespace cwb::ct {

// The q/k rows of models whose RoPE pairs adjacent dimensions are reordered to the halves order on the way out.
struct RowOrder {
    int64_t heads = 0, headDim = 0;   // 0: rows as they are
    at::Tensor apply(const at::Tensor& perRow) const;
};

struct Scheme {
    std::string refusal;               // why the layer has no compressed-tensors form; empty when it has one
    std::string format;                // "pack-quantized", "float-quantized", "naive-quantized", "int-quantized"
    nlohmann::json weights;            // QuantizationArgs of the weight
    nlohmann::json inputActivations;   // QuantizationArgs of the input, or null
    std::string label;                 // for the export report: "int4 g128 sym pack-quantized"
};
Scheme schemeOf(const CompressedLinear& linear);
// Why an integer layer of this form has no compressed-tensors form ("" when it has one); cols < 0: not known yet.
std::string intSchemeRefusal(int bits, int64_t groupSize, int64_t cols, bool inputScales, bool permutedGroups);

// Equal for layers of one scheme ("dense" for none).
std::string schemeKey(const CompressedLinear* linear);
// Empty when the layers (name, layer or null when dense) share one scheme, else why that stops vLLM.
std::string fusedRefusal(const std::vector<std::pair<std::string, const CompressedLinear*>>& fused);

struct Part {
    std::string suffix;                // "weight_packed", "weight_scale", ...
    ggml::Type type;
    std::vector<int64_t> shape;
    std::string dtypeName;             // safetensors dtype when it is not the type's own ("F8_E4M3")
    std::function<at::Tensor(const RowOrder&)> make;
};
// The tensors a layer (of a kind schemeOf accepts) is written as, each made when asked for.
std::vector<Part> partsOf(const std::shared_ptr<const CompressedLinear>& linear);

// quantization_config for these layers: one config group per scheme; targets ["Linear"] when every linear layer
// of the model is among `layers` with one scheme, else the layers' names. lm_head is ignored.
nlohmann::json quantizationConfig(const std::vector<std::pair<std::string, const CompressedLinear*>>& layers,
                                  bool everyLinearLayer);

// ---- reading

// The config group whose targets match `layer` (a module name such as "model.layers.0.mlp.up_proj"; "Linear"
// matches every linear layer, "re:" patterns match from the start of the name, others the whole name) and that
// `ignore` does not exclude; nullptr when none. Throws cwb::Error(file, ...) for a malformed config.
const nlohmann::json* groupFor(const nlohmann::json& quantizationConfig, const std::string& layer, const std::string& file);

// Whether a tensor name is part of a compressed layer ("….weight_packed", "….weight_scale", ...) rather than a
// plain tensor of the model; the quantized "….weight" itself is told by its dtype (F8_E4M3 or I8).
bool isCompressedPart(const std::string& name);

// The layer from its tensors (by suffix: "weight", "weight_packed", ...) under `group`'s scheme; throws
// cwb::Error(file, ...) naming the layer and what is wrong (shapes, dtypes, schemes cwb cannot run).
std::shared_ptr<CompressedLinear> readLayer(const nlohmann::json& group, const std::string& layer,
                                            const std::map<std::string, std::pair<at::Tensor, std::string>>& parts,
                                            const std::string& file);

} // namespace cwb::ct
