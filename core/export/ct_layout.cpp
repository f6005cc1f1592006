#include "core/export/ct_layout.h"

#include <algorithm>
#include <limits>
#include <map>
#include <regex>
#include <set>

#include "core/compress/compressed_layers.h"
#include "core/export/export_support.h"
#include "core/util/error.h"

namespace cwb::ct {

namespace {

bool packable(int bits) { return bits == 2 || bits == 4 || bits == 8; }   // whole values per word in every release

nlohmann::json args(int bits, const char* type, bool symmetric, int64_t groupSize, const char* strategy, bool dynamic) {
    return {{"num_bits", bits},
            {"type", type},
            {"symmetric", symmetric},
            {"group_size", groupSize > 0 ? nlohmann::json(groupSize) : nlohmann::json(nullptr)},
            {"strategy", strategy},
            {"dynamic", dynamic}};
}

// Symmetric in the format's terms: a symmetric spec whose zero points all sit mid-range. An asymmetric layer keeps
// its zero points even where they happen to sit there, so that one recipe gives one scheme (vLLM fuses q/k/v and
// gate/up and needs them alike).
bool symmetricZeros(const quant::QuantizedWeight& w) {
    return w.spec.symmetric && at::all(w.zeros == (1 << (w.spec.bits - 1))).item<bool>();
}

// Words in [0, 2^32) as int64 from int32 words with the same bits.
at::Tensor unsignedWords(const at::Tensor& words) {
    const at::Tensor w = words.to(at::kLong);
    return at::where(w < 0, w + (int64_t(1) << 32), w);
}

// `count` values of `bits` each from every row of int32 words read as one little-endian bit stream (value j at
// bit bits·j), as int32 — compressed-tensors' packing for any width.
at::Tensor unpackBitStream(const at::Tensor& words, int bits, int64_t count) {
    const at::Tensor w = at::constant_pad_nd(unsignedWords(words), {0, 1}, 0);   // a zero word for straddling values
    const at::Tensor start = at::arange(count, at::kLong) * bits;
    const at::Tensor word = at::div(start, 32, "floor"), offset = start - word * 32;
    const at::Tensor low = w.index_select(1, word).bitwise_right_shift(offset);
    const at::Tensor high = w.index_select(1, word + 1).bitwise_left_shift(32 - offset);
    return low.bitwise_or(high).bitwise_and((int64_t(1) << bits) - 1).to(at::kInt);
}

std::string shapeText(const at::Tensor& t) {
    std::string s = "[";
    for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
    return s + "]";
}

} // namespace

at::Tensor RowOrder::apply(const at::Tensor& perRow) const {
    return heads > 0 ? exporting::adjacentToHalves(perRow, heads, headDim) : perRow;
}

std::string intSchemeRefusal(int bits, int64_t groupSize, int64_t cols, bool inputScales, bool permutedGroups) {
    if (inputScales)
        return "carries AWQ input scales that cwb keeps beside the layer, which compressed-tensors has no place for "
               "(quantize.awq with \"fold\": true folds them into the norms; gguf and hf apply them)";
    if (!packable(bits))
        return std::to_string(bits) + "-bit levels are not written: compressed-tensors packs 3, 5, 6 and 7 bits "
               "differently across its releases (export 2, 4 or 8 bits, or as gptq or gguf)";
    if (permutedGroups)
        return "has act-order group indices, which compressed-tensors no longer stores (quantize.gptq with act_order "
               "and \"static_groups\": true keeps the groups in column order and exports, as llm-compressor's "
               "actorder \"weight\" does; or export as gptq, which keeps g_idx)";
    if (groupSize > 0 && cols >= 0 && cols % groupSize != 0)
        return "has " + std::to_string(cols) + " inputs, not a multiple of its group size " + std::to_string(groupSize) +
               " (compressed-tensors needs whole groups)";
    return "";
}

Scheme schemeOf(const CompressedLinear& linear) {
    Scheme s;
    if (auto* layer = dynamic_cast<const IntLinear*>(&linear)) {
        const auto& w = layer->quantized();
        const int bits = w.spec.bits;
        s.refusal = intSchemeRefusal(bits, w.spec.groupSize, w.cols, layer->inputScale().defined(),
                                     !at::equal(w.groupIndex.to(at::kInt), quant::defaultGroupIndex(w.cols, w.spec.groupSize)));
        if (!s.refusal.empty()) return s;
        const bool sym = symmetricZeros(w);
        const bool grouped = w.spec.groupSize > 0;
        s.format = "pack-quantized";
        s.weights = args(bits, "int", sym, grouped ? w.spec.groupSize : 0, grouped ? "group" : "channel", false);
        s.label = "int" + std::to_string(bits) + (grouped ? " g" + std::to_string(w.spec.groupSize) : " per-channel") +
                  (sym ? " sym" : " asym") + " pack-quantized";
        return s;
    }
    if (auto* layer = dynamic_cast<const Fp8Linear*>(&linear)) {
        const bool perTensor = layer->fp8Weight().scales.numel() == 1;
        s.weights = args(8, "float", true, 0, perTensor ? "tensor" : "channel", false);
        if (layer->dynamicActivations()) s.inputActivations = args(8, "float", true, 0, "token", true);
        // compressed-tensors files weight-only FP8 under naive-quantized (float-quantized needs activations).
        s.format = layer->dynamicActivations() ? "float-quantized" : "naive-quantized";
        s.label = std::string("fp8 e4m3 ") + (perTensor ? "per-tensor" : "per-channel") +
                  (layer->dynamicActivations() ? " dynamic-activations" : " weight-only") + " " + s.format;
        return s;
    }
    if (auto* layer = dynamic_cast<const W8A8Linear*>(&linear)) {
        if (!at::all(layer->smoothing() == 1).item<bool>()) {
            s.refusal = "carries SmoothQuant smoothing scales kept beside the layer (x / s before it), which compressed-tensors "
                        "has no place for (quantize.smoothquant with \"fold\": true folds them into the norms; gguf and hf apply them)";
            return s;
        }
        s.weights = args(8, "int", true, 0, "channel", false);
        s.inputActivations = args(8, "int", true, 0, "token", true);
        s.format = "int-quantized";
        s.label = "int8 w8a8 int-quantized";
        return s;
    }
    s.refusal = "a " + linear.kind() + " layer (" + linear.describe() + ") has no compressed-tensors form";
    return s;
}

std::vector<Part> partsOf(const std::shared_ptr<const CompressedLinear>& linear) {
    std::vector<Part> parts;
    const int64_t rows = linear->rows(), cols = linear->cols();
    if (auto layer = std::dynamic_pointer_cast<const IntLinear>(linear)) {
        const auto& w = layer->quantized();
        const int bits = w.spec.bits;
        const int64_t groups = w.scales.size(1);
        // cwb's packed words hold whole levels, low bits first: for 2, 4 and 8 bits that is the format's bit stream.
        parts.push_back({"weight_packed", ggml::Type::I32, {rows, (cols * bits + 31) / 32}, "",
                         [layer](const RowOrder& order) { return order.apply(layer->quantized().packed); }});
        parts.push_back({"weight_scale", ggml::Type::F16, {rows, groups}, "",
                         [layer](const RowOrder& order) { return order.apply(layer->quantized().scales); }});
        if (!symmetricZeros(w))
            parts.push_back({"weight_zero_point", ggml::Type::I32, {(rows * bits + 31) / 32, groups}, "",
                             [layer, bits](const RowOrder& order) {
                                 const at::Tensor zeros = order.apply(layer->quantized().zeros);
                                 return quant::packLevels(zeros.t().contiguous(), bits).t().contiguous();
                             }});
        parts.push_back({"weight_shape", ggml::Type::I64, {2}, "",
                         [rows, cols](const RowOrder&) { return at::tensor(std::vector<int64_t>{rows, cols}, at::kLong); }});
        return parts;
    }
    if (auto layer = std::dynamic_pointer_cast<const Fp8Linear>(linear)) {
        const bool perTensor = layer->fp8Weight().scales.numel() == 1;
        parts.push_back({"weight", ggml::Type::I8, {rows, cols}, "F8_E4M3", [layer](const RowOrder& order) {
                             return order.apply(layer->fp8Weight().codes).contiguous().view(at::kChar);
                         }});
        parts.push_back({"weight_scale", ggml::Type::F32, perTensor ? std::vector<int64_t>{1} : std::vector<int64_t>{rows, 1}, "",
                         [layer, perTensor, rows](const RowOrder& order) {
                             const at::Tensor& scales = layer->fp8Weight().scales;
                             return perTensor ? scales.reshape({1}) : order.apply(scales.reshape({rows, 1}));
                         }});
        return parts;
    }
    if (auto layer = std::dynamic_pointer_cast<const W8A8Linear>(linear)) {
        parts.push_back({"weight", ggml::Type::I8, {rows, cols}, "",
                         [layer](const RowOrder& order) { return order.apply(layer->int8Weight().q); }});
        parts.push_back({"weight_scale", ggml::Type::F32, {rows, 1}, "", [layer, rows](const RowOrder& order) {
                             return order.apply(layer->int8Weight().scales.reshape({rows, 1}));
                         }});
        return parts;
    }
    throw Error("internal: compressed-tensors has no parts for a " + linear->kind() + " layer");
}

nlohmann::json quantizationConfig(const std::vector<std::pair<std::string, const CompressedLinear*>>& layers,
                                  bool everyLinearLayer) {
    std::map<std::string, std::vector<std::string>> members;   // scheme (as JSON text) -> layer names, in order met
    std::vector<std::string> order;
    std::map<std::string, Scheme> schemes;
    for (const auto& [name, linear] : layers) {
        Scheme s = schemeOf(*linear);
        if (!s.refusal.empty()) throw Error("internal: compressed-tensors config for a refused layer " + name);
        const std::string key = schemeKey(linear);
        if (!members.count(key)) {
            order.push_back(key);
            schemes[key] = s;
        }
        members[key].push_back(name);
    }
    std::set<std::string> formats;
    for (const auto& key : order) formats.insert(schemes[key].format);
    const bool mixed = formats.size() > 1;
    nlohmann::json groups = nlohmann::json::object();
    for (size_t i = 0; i < order.size(); ++i) {
        const Scheme& s = schemes[order[i]];
        const nlohmann::json targets = everyLinearLayer && order.size() == 1 ? nlohmann::json::array({"Linear"})
                                                                            : nlohmann::json(members[order[i]]);
        groups["group_" + std::to_string(i)] = {{"targets", targets},
                                                {"weights", s.weights},
                                                {"input_activations", s.inputActivations},
                                                {"output_activations", nullptr},
                                                {"format", mixed ? nlohmann::json(s.format) : nlohmann::json(nullptr)}};
    }
    return {{"quant_method", "compressed-tensors"},
            {"format", mixed ? std::string("mixed-precision") : *formats.begin()},
            {"quantization_status", "compressed"},
            {"config_groups", groups},
            {"ignore", {"lm_head"}},
            {"kv_cache_scheme", nullptr},
            {"global_compression_ratio", nullptr}};
}

// ---- reading

namespace {

bool isEmbedding(const std::string& layer) {
    for (const char* suffix : {"embed_tokens", "wte", "wpe"}) {
        const std::string e = suffix;
        if (layer.size() >= e.size() && layer.compare(layer.size() - e.size(), e.size(), e) == 0) return true;
    }
    return false;
}

// How specifically `target` names `layer`, as compressed-tensors and vLLM rank matches: 3 the whole name, 2 a "re:"
// pattern (matched from the start of the name, as Python's re.match), 1 the module class, 0 no match.
int matchRank(const std::string& target, const std::string& layer, const std::string& file) {
    if (target == "Linear") return isEmbedding(layer) ? 0 : 1;
    if (target == "Embedding") return isEmbedding(layer) ? 1 : 0;
    if (target.rfind("re:", 0) == 0) {
        try {
            return std::regex_search(layer, std::regex(target.substr(3)), std::regex_constants::match_continuous) ? 2 : 0;
        } catch (const std::regex_error& e) {
            throw Error(file, "quantization_config target '" + target + "' is not a valid regular expression");
        }
    }
    return target == layer ? 3 : 0;
}

int bestRank(const nlohmann::json& list, const std::string& layer, const std::string& file, const char* what) {
    if (list.is_null()) return 0;
    if (!list.is_array()) throw Error(file, std::string("quantization_config ") + what + " must be a list");
    int best = 0;
    for (const auto& t : list) {
        if (!t.is_string()) throw Error(file, std::string("quantization_config ") + what + " must hold strings");
        best = std::max(best, matchRank(t.get<std::string>(), layer, file));
    }
    return best;
}

// Groups in the order they were written: "group_N" by N (the JSON object holds its keys sorted as text).
int64_t groupOrder(const std::string& name) {
    if (name.rfind("group_", 0) == 0 && name.size() > 6 && name.size() < 16 &&
        name.find_first_not_of("0123456789", 6) == std::string::npos)
        return std::stoll(name.substr(6));
    return std::numeric_limits<int64_t>::max();
}

int intArg(const nlohmann::json& a, const char* key, int fallback) {
    return a.contains(key) && a[key].is_number_integer() ? a[key].get<int>() : fallback;
}
std::string textArg(const nlohmann::json& a, const char* key) {
    return a.contains(key) && a[key].is_string() ? a[key].get<std::string>() : "";
}

} // namespace

const nlohmann::json* groupFor(const nlohmann::json& qc, const std::string& layer, const std::string& file) {
    if (qc.contains("ignore") && bestRank(qc["ignore"], layer, file, "ignore") > 0) return nullptr;
    if (!qc.contains("config_groups") || !qc["config_groups"].is_object()) return nullptr;
    const nlohmann::json* chosen = nullptr;
    int chosenRank = 0;
    int64_t chosenOrder = 0;
    for (const auto& [name, group] : qc["config_groups"].items()) {
        if (!group.is_object() || !group.contains("targets"))
            throw Error(file, "quantization_config group '" + name + "' has no targets");
        const int rank = bestRank(group["targets"], layer, file, "targets");
        const int64_t order = groupOrder(name);
        if (rank > chosenRank || (rank > 0 && rank == chosenRank && order < chosenOrder)) {
            chosen = &group;
            chosenRank = rank;
            chosenOrder = order;
        }
    }
    return chosen;
}

bool isCompressedPart(const std::string& name) {
    static const char* kSuffixes[] = {".weight_packed", ".weight_scale", ".weight_zero_point", ".weight_shape",
                                      ".weight_g_idx", ".weight_global_scale", ".input_scale", ".input_zero_point",
                                      ".input_global_scale", ".output_scale", ".output_zero_point"};
    for (const char* s : kSuffixes) {
        const std::string suffix = s;
        if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
    }
    return false;
}

namespace {

std::shared_ptr<CompressedLinear> readLayerChecked(const nlohmann::json& group, const std::string& layer,
                                                   const std::map<std::string, std::pair<at::Tensor, std::string>>& parts,
                                                   const std::string& file) {
    const std::string where = "compressed-tensors layer '" + layer + "'";
    auto fail = [&](const std::string& why) { return Error(file, where + ": " + why); };
    auto has = [&](const char* suffix) { return parts.count(suffix) != 0; };
    auto part = [&](const char* suffix) -> const at::Tensor& {
        auto it = parts.find(suffix);
        if (it == parts.end()) throw fail(std::string("has no '") + suffix + "' tensor");
        return it->second.first;
    };
    for (const auto& [suffix, value] : parts) {
        static const std::set<std::string> known = {"weight", "weight_packed", "weight_scale", "weight_zero_point",
                                                    "weight_shape", "weight_g_idx"};
        if (!known.count(suffix))
            throw fail("has '" + suffix + "', which cwb does not support (" +
                       (suffix.rfind("input", 0) == 0 ? std::string("static activation quantization: cwb quantizes activations per token at run time")
                                                      : std::string("global scales or output quantization")) + ")");
    }
    const nlohmann::json& weights = group.contains("weights") ? group["weights"] : nlohmann::json();
    if (!weights.is_object()) throw fail("its config group has no weight quantization");
    const nlohmann::json& inputs = group.contains("input_activations") ? group["input_activations"] : nlohmann::json();
    if (group.contains("output_activations") && !group["output_activations"].is_null())
        throw fail("output activation quantization is not supported");
    const int bits = intArg(weights, "num_bits", 8);
    const std::string type = textArg(weights, "type");
    // compressed-tensors infers a missing strategy from group_size: > 0 groups, -1 channels, none the whole tensor.
    std::string strategy = textArg(weights, "strategy");
    if (strategy.empty()) {
        const int g = intArg(weights, "group_size", 0);
        strategy = g > 0 ? "group" : g == -1 ? "channel" : "tensor";
    }
    if (weights.contains("symmetric") && !weights["symmetric"].is_null() && !weights["symmetric"].is_boolean())
        throw fail("weights.symmetric must be true or false");
    const bool symmetric = !weights.contains("symmetric") || weights["symmetric"].is_null() || weights["symmetric"].get<bool>();
    if (weights.contains("dynamic") && weights["dynamic"].is_boolean() && weights["dynamic"].get<bool>())
        throw fail("dynamic weight quantization is not supported");
    if (strategy != "group" && strategy != "channel" && strategy != "tensor")
        throw fail("weight strategy '" + strategy + "' is not supported (group, channel, tensor)");
    const bool dynamicInputs = inputs.is_object() && inputs.contains("dynamic") && inputs["dynamic"] == true;
    const bool symmetricInputs = !inputs.is_object() || !inputs.contains("symmetric") || inputs["symmetric"] != false;
    if (inputs.is_object() && (!dynamicInputs || textArg(inputs, "strategy") != "token" || intArg(inputs, "num_bits", 0) != 8 ||
                               textArg(inputs, "type") != type || !symmetricInputs))
        throw fail("activation quantization other than dynamic symmetric 8-bit per token (" + inputs.dump() +
                   ") is not supported");

    // Older writers stored an all-zero zero point beside symmetric weights; any other value contradicts them.
    auto checkZeroZeroPoint = [&] {
        if (!has("weight_zero_point")) return;
        const at::Tensor& zp = part("weight_zero_point");
        if (at::isFloatingType(zp.scalar_type()) || (zp.numel() && at::any(zp != 0).item<bool>()))
            throw fail("symmetric weights with a nonzero weight_zero_point");
    };
    const at::Tensor& scaleIn = part("weight_scale");
    if (!at::isFloatingType(scaleIn.scalar_type())) throw fail("weight_scale must be F16, BF16 or F32");
    const at::Tensor scale = scaleIn.to(at::kFloat);
    if (!at::all(at::isfinite(scale)).item<bool>()) throw fail("weight_scale holds a non-finite value");

    if (has("weight_packed")) {
        if (type != "int" || bits < 2 || bits > 8) throw fail("packed weights must be int of 2 to 8 bits");
        if (inputs.is_object()) throw fail("packed weights with quantized activations are not supported (weight-only only)");
        const at::Tensor& packed = part("weight_packed");
        const at::Tensor& shape = part("weight_shape");
        if (packed.scalar_type() != at::kInt || packed.dim() != 2) throw fail("weight_packed must be a 2-D I32 tensor");
        if (at::isFloatingType(shape.scalar_type()) || shape.numel() != 2) throw fail("weight_shape must hold two integers");
        const at::Tensor dims = shape.reshape({2}).to(at::kLong);
        const int64_t rows = dims[0].item<int64_t>(), cols = dims[1].item<int64_t>();
        const int64_t limit = int64_t(1) << 40;   // before any product, so a hostile shape cannot overflow it
        if (rows <= 0 || cols <= 0 || rows > limit || cols > limit)
            throw fail("weight_shape [" + std::to_string(rows) + ", " + std::to_string(cols) + "] is not a valid matrix size");
        if (packed.size(0) != rows || packed.size(1) != (cols * bits + 31) / 32)
            throw fail("weight_packed is " + shapeText(packed) + ", but weight_shape [" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "] at " + std::to_string(bits) + " bits needs [" + std::to_string(rows) +
                       ", " + std::to_string((cols * bits + 31) / 32) + "]");
        quant::QuantizedWeight w;
        w.spec.bits = bits;
        w.spec.symmetric = symmetric;
        w.rows = rows;
        w.cols = cols;
        int64_t groups = 1;
        if (strategy == "group") {
            const int g = intArg(weights, "group_size", 0);
            if (g <= 0) throw fail("group strategy without a positive group_size");
            w.spec.groupSize = g;
            groups = (cols + g - 1) / g;
        } else {
            w.spec.groupSize = strategy == "channel" ? -1 : 0;
        }
        if (has("weight_g_idx")) {
            const at::Tensor& gIdx = part("weight_g_idx");
            if (at::isFloatingType(gIdx.scalar_type()) || gIdx.numel() != cols) throw fail("weight_g_idx must hold one integer per input");
            w.groupIndex = gIdx.reshape({cols}).to(at::kInt);
            if (cols && (w.groupIndex.min().item<int>() < 0 || w.groupIndex.max().item<int>() >= groups))
                throw fail("weight_g_idx names a group outside [0, " + std::to_string(groups) + ")");
        } else {
            w.groupIndex = quant::defaultGroupIndex(cols, w.spec.groupSize);
        }
        if (strategy == "tensor") {
            if (scale.numel() != 1) throw fail("a per-tensor weight_scale must hold one value, not " + shapeText(scale));
            w.scales = scale.reshape({1, 1}).expand({rows, 1}).contiguous();
        } else {
            if (scale.numel() != rows * groups) throw fail("weight_scale is " + shapeText(scale) + ", expected [" + std::to_string(rows) +
                                                          ", " + std::to_string(groups) + "]");
            w.scales = scale.reshape({rows, groups}).contiguous();
        }
        const int offset = 1 << (bits - 1);
        if (symmetric) {
            checkZeroZeroPoint();
            w.zeros = at::full({rows, groups}, offset, at::kInt);
        } else {
            const at::Tensor& zp = part("weight_zero_point");
            if (strategy == "tensor") {
                if (zp.numel() != 1 || at::isFloatingType(zp.scalar_type())) throw fail("a per-tensor weight_zero_point must be one integer");
                w.zeros = at::full({rows, 1}, int(zp.reshape({1}).to(at::kInt)[0].item<int>() + offset), at::kInt);
            } else {
                if (zp.scalar_type() != at::kInt || zp.dim() != 2 || zp.size(0) != (rows * bits + 31) / 32 || zp.size(1) != groups)
                    throw fail("weight_zero_point is " + shapeText(zp) + ", expected I32 [" + std::to_string((rows * bits + 31) / 32) +
                               ", " + std::to_string(groups) + "]");
                w.zeros = unpackBitStream(zp.t().contiguous(), bits, rows).t().contiguous();   // packed along the rows
            }
        }
        // 2, 4, 8 bits: the format's words are cwb's (cleared past the last input); other widths are re-packed.
        w.packed = packable(bits) ? quant::adoptPackedWords(packed, bits, cols)
                                  : quant::packLevels(unpackBitStream(packed, bits, cols), bits);
        return std::make_shared<IntLinear>(std::move(w), at::Tensor(), "compressed-tensors");
    }

    const auto weightIt = parts.find("weight");
    if (weightIt == parts.end()) throw fail("has neither 'weight_packed' nor a quantized 'weight'");
    const at::Tensor& weight = weightIt->second.first;
    const std::string& dtype = weightIt->second.second;
    if (weight.dim() != 2 || weight.size(0) == 0 || weight.size(1) == 0) throw fail("weight must be a non-empty 2-D tensor");
    const int64_t rows = weight.size(0), cols = weight.size(1);
    if (bits != 8) throw fail("a " + std::to_string(bits) + "-bit weight stored as " + dtype + " is not supported");
    if (!symmetric) throw fail("asymmetric 8-bit weights are not supported");
    checkZeroZeroPoint();
    if (strategy == "group") throw fail("8-bit weights in groups are not supported (per channel or per tensor)");
    at::Tensor perRow;
    if (strategy == "tensor") {
        if (scale.numel() != 1) throw fail("a per-tensor weight_scale must hold one value, not " + shapeText(scale));
        perRow = scale.reshape({1});
    } else {
        if (scale.numel() != rows) throw fail("weight_scale is " + shapeText(scale) + ", expected [" + std::to_string(rows) + ", 1]");
        perRow = scale.reshape({rows}).contiguous();
    }
    if (type == "float") {
        if (dtype != "F8_E4M3") throw fail("float weights must be F8_E4M3, not " + dtype);
        if (at::any(weight.bitwise_and(0x7F) == 0x7F).item<bool>()) throw fail("weight holds FP8 NaN codes");
        return std::make_shared<Fp8Linear>(quant::Fp8Weight{weight.contiguous(), perRow}, dynamicInputs);
    }
    if (type != "int" || dtype != "I8") throw fail("8-bit " + type + " weights stored as " + dtype + " are not supported");
    const at::Tensor channelScales = perRow.numel() == rows ? perRow : perRow.expand({rows}).contiguous();
    if (dynamicInputs)
        return std::make_shared<W8A8Linear>(quant::Int8Weight{weight.contiguous(), channelScales}, at::ones({cols}, at::kFloat));
    // Weight-only int8: cwb's integer layer, per channel, symmetric (level = q + 128).
    quant::QuantizedWeight w;
    w.spec = {8, true, -1};
    w.rows = rows;
    w.cols = cols;
    w.scales = channelScales.reshape({rows, 1});
    w.zeros = at::full({rows, 1}, 128, at::kInt);
    w.groupIndex = quant::defaultGroupIndex(cols, -1);
    w.packed = quant::packLevels(weight.to(at::kInt) + 128, 8);
    return std::make_shared<IntLinear>(std::move(w), at::Tensor(), "compressed-tensors");
}

} // namespace

std::shared_ptr<CompressedLinear> readLayer(const nlohmann::json& group, const std::string& layer,
                                            const std::map<std::string, std::pair<at::Tensor, std::string>>& parts,
                                            const std::string& file) {
    try {
        return readLayerChecked(group, layer, parts, file);
    } catch (const nlohmann::json::exception& e) {   // a field of the wrong JSON type
        throw Error(file, "compressed-tensors layer '" + layer + "': malformed config group (" + e.what() + ")");
    }
}

std::string schemeKey(const CompressedLinear* linear) {
    if (!linear) return "dense";
    const Scheme s = schemeOf(*linear);
    return nlohmann::json{{"f", s.format}, {"w", s.weights}, {"a", s.inputActivations}}.dump();
}

std::string fusedRefusal(const std::vector<std::pair<std::string, const CompressedLinear*>>& fused) {
    for (size_t i = 1; i < fused.size(); ++i)
        if (schemeKey(fused[i].second) != schemeKey(fused[0].second)) {
            auto label = [](const CompressedLinear* l) { return l ? schemeOf(*l).label : std::string("dense"); };
            return fused[i].first + " is " + label(fused[i].second) + " but " + fused[0].first + " is " + label(fused[0].second) +
                   ": vLLM runs the layers that share an input (q/k/v, gate/up) as one and needs one scheme for them";
        }
    return "";
}

} // namespace cwb::ct
