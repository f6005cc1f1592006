// Hugging Face folders: dense safetensors ("hf"), the GPTQ and AWQ packed layouts ("gptq", "awq") and
// compressed-tensors ("compressed-tensors": llm-compressor's format, which vLLM loads), with
// config.json (+ quantization_config), generation_config.json, tokenizer files (a Hugging Face source's own,
// else written from the vocabulary), and shards with an index above ExportOptions::shardBytes. The folder is written beside the target and renamed into place.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/compress/compressed_layers.h"
#include "core/export/export_format.h"
#include "core/export/export_support.h"
#include "core/export/hf_config.h"
#include "core/export/ct_layout.h"
#include "core/export/quant_layouts.h"
#include "core/io/safetensors.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"

namespace cwb {

namespace {

using exporting::plainBytes;

struct Entry {
    std::string name;
    ggml::Type type;
    std::vector<int64_t> shape;
    size_t bytes;
    std::function<std::vector<uint8_t>()> produce;
    std::string dtypeName;   // safetensors dtype when it is not the type's own ("F8_E4M3")
};

bool isConv1d(const std::string& name) {
    for (const char* s : {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"}) {
        const std::string suffix = s;
        if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
    }
    return false;
}

size_t elementBytes(ggml::Type t) { return ggml::traits(t)->typeSize; }

// The tensor as a Hugging Face checkpoint holds it: q/k rows in the halves order, GPT-2 Conv1D transposed.
at::Tensor hfLayout(const Model& model, const std::string& name, at::Tensor t) {
    const int64_t heads = exporting::ropeHeadsOf(model, name);
    if (heads > 0 && model.spec.ropeStyle == RopeStyle::AdjacentPairs) t = exporting::adjacentToHalves(t, heads, model.spec.headDim);
    if (model.spec.family == Family::Gpt2 && isConv1d(name)) t = t.t().contiguous();
    return t;
}

quant::QuantizedWeight hfRows(const Model& model, const std::string& layer, quant::QuantizedWeight w) {
    const int64_t heads = exporting::ropeHeadsOf(model, layer + ".weight");
    if (heads > 0 && model.spec.ropeStyle == RopeStyle::AdjacentPairs) {
        w.packed = exporting::adjacentToHalves(w.packed, heads, model.spec.headDim);
        w.scales = exporting::adjacentToHalves(w.scales, heads, model.spec.headDim);
        w.zeros = exporting::adjacentToHalves(w.zeros, heads, model.spec.headDim);
    }
    return w;
}

Entry denseEntry(const Model& model, const std::string& name, ggml::Type type) {
    std::vector<int64_t> shape = model.tensor(name).shape;
    if (model.spec.family == Family::Gpt2 && isConv1d(name) && shape.size() == 2) std::swap(shape[0], shape[1]);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return {name, type, shape, size_t(n) * elementBytes(type),
            [&model, name, type] { return plainBytes(hfLayout(model, name, model.floatTensor(name)), type, name); }, ""};
}

const char* torchDtype(ggml::Type t) {
    return t == ggml::Type::F32 ? "float32" : t == ggml::Type::BF16 ? "bfloat16" : "float16";
}

class HfFolderExport : public ExportFormat {
public:
    std::string refusal(const Model& model, const ExportOptions& options) const override {
        std::string why = exporting::nonUniformLayers(model.spec);
        if (!why.empty()) return why;
        // llama.cpp files keep Llama 3 scaling only as per-frequency divisors; config.json takes its parameters, which
        // such a file does not give, and dropping the divisors would export the unscaled model.
        if (model.has("rope_freqs.weight") && model.spec.ropeScaling.type == "none")
            return "its RoPE frequencies are scaled by per-frequency divisors (rope_freqs.weight, as llama.cpp keeps Llama 3 "
                   "scaling) without the scaling parameters config.json needs; export it as gguf";
        return quantRefusal(model, options);
    }

    std::string optionsProblem(const ExportOptions& options) const override {
        try {
            denseType(options);
            return "";
        } catch (const Error& e) {
            return std::string("--type: ") + e.what();
        }
    }

    ExportReport write(const Model& model, const std::string& folder, const ExportOptions& options,
                       Feedback* feedback) const override {
        namespace fs = std::filesystem;
        ExportReport report;
        report.format = id();
        report.path = folder;
        const ggml::Type dense = options.tensorType.empty() && followsSourceFloat() ? exporting::sourceFloatType(model) : denseType(options);
        std::vector<Entry> entries = plan(model, dense, options, report);
        if (options.tensorType.empty()) {
            std::vector<std::string> rounded;
            for (const Entry& e : entries) {
                const std::string layer = e.name.size() > 7 && e.name.compare(e.name.size() - 7, 7, ".weight") == 0
                                              ? e.name.substr(0, e.name.size() - 7) : "";
                if (e.type == dense && model.has(e.name) && model.tensor(e.name).type == ggml::Type::F32 &&
                    (layer.empty() || !model.compressed(layer)) && exporting::roundsValues(model.floatTensor(e.name), dense))
                    rounded.push_back(e.name);
            }
            const std::string note = exporting::roundedFloatsNote(rounded, dense);
            if (!note.empty()) report.notes.push_back(note);
        }

        // A staging folder of its own (created new, never one of the user's that happens to have the name).
        exporting::ParentFolders parents(folder);
        exporting::removeKilledExportLeftovers(folder, {".tmp-export-", ".old-"}, report.notes);
        const std::string staging = createSiblingFolder(folder, ".tmp-export-");
        exporting::TemporaryPath cleanup(staging);
        std::error_code ec;

        // Shards: consecutive entries until the next would pass shardBytes.
        std::vector<std::vector<const Entry*>> shards(1);
        uint64_t inShard = 0, total = 0;
        for (const auto& e : entries) {
            if (inShard > 0 && inShard + e.bytes > options.shardBytes) {
                shards.emplace_back();
                inShard = 0;
            }
            shards.back().push_back(&e);
            inShard += e.bytes;
            total += e.bytes;
        }
        nlohmann::json weightMap = nlohmann::json::object();
        size_t done = 0;
        for (size_t s = 0; s < shards.size(); ++s) {
            char name[64];
            std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
            const std::string file = shards.size() == 1 ? "model.safetensors" : name;
            SafetensorsWriter writer;
            writer.setMetadata("format", "pt");
            for (const Entry* e : shards[s]) {
                writer.add(e->name, e->type, e->shape, e->bytes, e->produce, e->dtypeName);
                weightMap[e->name] = file;
            }
            writer.write(staging + "/" + file, [&](size_t, size_t) {
                ++done;
                if (feedback) {
                    feedback->setProgress(double(done) / double(entries.size()));
                    feedback->throwIfCancelled();
                }
            });
            report.files.push_back(file);
        }
        if (shards.size() > 1) {
            exporting::writeJsonFile(staging + "/model.safetensors.index.json",
                      {{"metadata", {{"total_size", total}}}, {"weight_map", weightMap}});
            report.files.push_back("model.safetensors.index.json");
        }
        nlohmann::json config = exporting::hfConfig(model, torchDtype(dense));
        addQuantizationConfig(model, options, config);
        exporting::writeJsonFile(staging + "/config.json", config);
        report.files.push_back("config.json");
        for (const auto& f : exporting::writeHfTokenizerFiles(model, staging, report.notes)) report.files.push_back(f);
        if (!fs::exists(staging + "/generation_config.json")) {
            exporting::writeJsonFile(staging + "/generation_config.json", exporting::hfGenerationConfig(model));
            report.files.push_back("generation_config.json");
        }
        report.bytes = total;
        exporting::replacePath(staging, folder);
        cleanup.commit();
        parents.commit();
        return report;
    }

protected:
    // The float type of dense tensors that --type asks for; without it f16 (sourceFloatType where followsSourceFloat).
    static ggml::Type denseType(const ExportOptions& options) {
        return options.tensorType.empty() ? ggml::Type::F16
                                          : exporting::parseGgmlType(options.tensorType, {ggml::Type::F32, ggml::Type::F16, ggml::Type::BF16});
    }
    // Whether, without --type, dense tensors keep a bf16 source's type (exporting::sourceFloatType).
    virtual bool followsSourceFloat() const { return true; }
    virtual std::string quantRefusal(const Model&, const ExportOptions&) const { return ""; }
    virtual std::vector<Entry> plan(const Model& model, ggml::Type dense, const ExportOptions& options, ExportReport& report) const = 0;
    virtual void addQuantizationConfig(const Model&, const ExportOptions&, nlohmann::json&) const {}

    // Every tensor except those `skip` names, dense in `type`; embeddings, norms and the head too.
    // A compressed output head ("head" of quantize.rtn / fp8 / gptq / awq) that a layout cannot pack goes out dense; `why`
    // says what stops it.
    static void noteDenseHead(const Model& model, ggml::Type dense, const std::string& why, ExportReport& report) {
        if (auto head = model.compressed(names::kHead))
            report.notes.push_back("lm_head (" + head->describe() + ") is written dequantized, as " +
                                   exporting::ggmlTypeName(dense) + ": " + why + " (gguf keeps the head quantized)");
    }

    static std::vector<Entry> denseEntries(const Model& model, ggml::Type type, ExportReport& report,
                                           const std::function<bool(const std::string&)>& skip) {
        std::vector<Entry> entries;
        for (const auto& name : model.tensorNames()) {
            if (name == "rope_freqs.weight") continue;   // GGUF-only; the scaling is in config.json
            if (skip && skip(name)) continue;
            entries.push_back(denseEntry(model, name, type));
            report.tensors.push_back({name, exporting::ggmlTypeName(type), 0, ""});
        }
        return entries;
    }
};

// "1 layer", "14 layers".
std::string layerCount(const std::vector<std::string>& layers) {
    return std::to_string(layers.size()) + (layers.size() == 1 ? " layer" : " layers");
}

// The first three names, and how many more.
std::string someOf(const std::vector<std::string>& layers) {
    std::string text;
    for (size_t i = 0; i < layers.size() && i < 3; ++i) text += (i ? ", " : "") + layers[i];
    if (layers.size() > 3) text += " and " + std::to_string(layers.size() - 3) + " more";
    return text;
}

class HfExport : public HfFolderExport {
public:
    std::string id() const override { return "hf"; }
    std::string displayName() const override { return "Hugging Face folder (dense safetensors)"; }

protected:
    std::vector<Entry> plan(const Model& model, ggml::Type dense, const ExportOptions& options, ExportReport& report) const override {
        std::vector<Entry> entries = denseEntries(model, dense, report, {});
        // One line per kind of layer, not one per layer (a 7B model gave 224 lines, user probe).
        std::map<std::string, std::vector<std::string>> byKind;
        std::vector<std::string> activations;
        for (const auto& [layer, linear] : model.compressedLayers()) {
            byKind[linear->describe()].push_back(layer);
            if (linear->kind() != "int") activations.push_back(layer);
        }
        for (const auto& [kind, layers] : byKind)
            report.notes.push_back(layerCount(layers) + " (" + kind + ") written dequantized: " + someOf(layers));
        if (!activations.empty())
            report.notes.push_back("the activation quantization of " + layerCount(activations) +
                                   " is not part of a dense checkpoint: " + someOf(activations));
        return entries;
    }
};

// GPTQ and AWQ: every block linear layer must be an integer layer of one bit width and group size.
class PackedExport : public HfFolderExport {
protected:
    virtual std::string layerRefusal(const quant::QuantizedWeight& w) const = 0;
    virtual const char* layoutName() const = 0;

    // Embeddings, norms and the head: f16 unless asked otherwise, whatever the source (GPTQ and AWQ kernels such as
    // exllama take f16 activations; transformers casts the tensors to torch_dtype).
    bool followsSourceFloat() const override { return false; }

    std::string quantRefusal(const Model& model, const ExportOptions&) const override {
        if (model.spec.family != Family::Llama) return std::string(layoutName()) + " export supports the Llama family";
        const quant::QuantizedWeight* first = nullptr;
        for (const auto& layer : model.linearLayers()) {
            auto linear = std::dynamic_pointer_cast<const IntLinear>(model.compressed(layer));
            if (!linear) return layer + " is not integer-quantized (run quantize.rtn, quantize.gptq or quantize.awq on every layer)";
            if (linear->inputScale().defined())
                return layer + " carries AWQ input scales that cwb keeps beside the layer; the " + std::string(layoutName()) +
                       " layout has no place for them (quantize.awq with \"fold\": true folds them into the norms, or "
                       "export as gguf or hf, which apply them)";
            const auto& w = linear->quantized();
            std::string why = layerRefusal(w);
            if (!why.empty()) return layer + ": " + why;
            if (!first) first = &w;
            if (w.spec.bits != first->spec.bits || groupOf(w) != groupOf(*first))
                return layer + " has " + std::to_string(w.spec.bits) + " bits / group " + std::to_string(groupOf(w)) +
                       " but other layers have " + std::to_string(first->spec.bits) + " / " + std::to_string(groupOf(*first)) +
                       "; one quantization_config covers every layer (mixed precision: export as gguf)";
        }
        if (!first) return "the model has no linear layers";
        return "";
    }

    static int64_t groupOf(const quant::QuantizedWeight& w) { return w.spec.groupSize > 0 ? w.spec.groupSize : -1; }
    static bool symmetricLevels(const quant::QuantizedWeight& w) { return at::all(w.zeros == (1 << (w.spec.bits - 1))).item<bool>(); }

    // Why a compressed head is not packed with the block layers ("" when it is): only GPTQ's quantization_config has a
    // place for it ("lm_head": true, which GPTQModel and vLLM read), and only when asked (ExportOptions::packHead:
    // transformers' GPTQ loader converts the block layers only); then as an integer layer on the blocks' grid, since
    // one config describes every packed layer.
    std::string headPackRefusal(const Model& model, const ExportOptions& options) const {
        auto head = model.compressed(names::kHead);
        if (!head) return "the head is not compressed";
        if (!isGptq()) return std::string("cwb's ") + layoutName() + " layout packs the block layers only";
        if (!options.packHead)
            return "transformers' GPTQ loader converts the block layers only (--pack-head packs it for GPTQModel and vLLM "
                   "where it is on the blocks' grid)";
        auto linear = std::dynamic_pointer_cast<const IntLinear>(head);
        if (!linear) return "it is not integer-quantized, and gptq packs integer layers only";
        if (linear->inputScale().defined()) return "it carries input scales, which the gptq layout has no place for";
        const auto& w = linear->quantized();
        const std::string why = layerRefusal(w);
        if (!why.empty()) return why;
        const auto& first = firstWeight(model);
        bool blocksSymmetric = true;
        for (const auto& layer : model.linearLayers())
            blocksSymmetric = blocksSymmetric && symmetricLevels(std::dynamic_pointer_cast<const IntLinear>(model.compressed(layer))->quantized());
        // An asymmetric head among symmetric blocks would make the whole config "sym": false (slower kernels in vLLM).
        if (w.spec.bits != first.spec.bits || groupOf(w) != groupOf(first) || (blocksSymmetric && !symmetricLevels(w)))
            return "the block layers are " + std::to_string(first.spec.bits) + " bits, group " + std::to_string(groupOf(first)) +
                   (blocksSymmetric ? ", sym" : "") + " and one quantization_config covers every packed layer";
        return "";
    }

    // The layers written packed: every block linear, and the head where headPackRefusal allows.
    std::vector<std::string> packedLayers(const Model& model, const ExportOptions& options) const {
        std::vector<std::string> layers = model.linearLayers();
        if (model.compressed(names::kHead) && headPackRefusal(model, options).empty()) layers.push_back(names::kHead);
        return layers;
    }

    std::vector<Entry> plan(const Model& model, ggml::Type dense, const ExportOptions& options, ExportReport& report) const override {
        const std::vector<std::string> layers = packedLayers(model, options);
        std::set<std::string> quantized;
        for (const auto& layer : layers) quantized.insert(layer + ".weight");
        std::vector<Entry> entries =
            denseEntries(model, dense, report, [&](const std::string& n) { return quantized.count(n) != 0; });
        for (const auto& layer : layers) {
            auto linear = std::dynamic_pointer_cast<const IntLinear>(model.compressed(layer));
            const auto& w = linear->quantized();
            const int64_t groups = w.scales.size(1);
            // Each tensor is packed when the writer reaches it and dropped once written, so no packed copy of the
            // model builds up (a 70B int4 model would hold ~35 GB of them until the last shard).
            using Part = at::Tensor (*)(const quant::QuantizedWeight&);
            auto add = [&](const std::string& suffix, ggml::Type type, std::vector<int64_t> shape, Part part) {
                int64_t n = 1;
                for (int64_t d : shape) n *= d;
                entries.push_back({layer + suffix, type, shape, size_t(n) * elementBytes(type),
                                   [part, linear, &model, layer, type, name = layer + suffix] {
                                       return plainBytes(part(hfRows(model, layer, linear->quantized())), type, name);
                                   },
                                   ""});
            };
            if (isGptq()) {
                const int bits = w.spec.bits;
                add(".qweight", ggml::Type::I32, {layouts::gptqWords(w.cols, bits), w.rows}, layouts::packGptqWeight);
                add(".qzeros", ggml::Type::I32, {groups, layouts::gptqWords(w.rows, bits)}, layouts::packGptqZeros);
                add(".scales", ggml::Type::F16, {groups, w.rows}, layouts::packedScales);
                add(".g_idx", ggml::Type::I32, {w.cols},
                    [](const quant::QuantizedWeight& q) { return q.groupIndex.to(at::kInt).contiguous(); });
            } else {
                add(".qweight", ggml::Type::I32, {w.cols, w.rows / 8}, layouts::packAwqWeight);
                add(".qzeros", ggml::Type::I32, {groups, w.rows / 8}, layouts::packAwqZeros);
                add(".scales", ggml::Type::F16, {groups, w.rows}, layouts::packedScales);
            }
            report.tensors.push_back({layer, "int" + std::to_string(w.spec.bits) + " " + layoutName(), 0, ""});
        }
        if (model.compressed(names::kHead) && !quantized.count(std::string(names::kHead) + ".weight"))
            noteDenseHead(model, dense, headPackRefusal(model, options), report);
        if (options.packHead && !model.compressed(names::kHead))   // asked for and silently not done (user probe)
            report.notes.push_back("--pack-head: the output head is not compressed (quantize it with \"head\": \"also\" in the "
                                   "recipe's step), so it is written dense");
        return entries;
    }

    virtual bool isGptq() const = 0;

    const quant::QuantizedWeight& firstWeight(const Model& model) const {
        return std::dynamic_pointer_cast<const IntLinear>(model.compressed(model.linearLayers().front()))->quantized();
    }
};

class GptqExport : public PackedExport {
public:
    std::string id() const override { return "gptq"; }
    std::string displayName() const override { return "GPTQ checkpoint (Hugging Face folder)"; }

protected:
    const char* layoutName() const override { return "gptq"; }
    bool isGptq() const override { return true; }
    std::string layerRefusal(const quant::QuantizedWeight& w) const override { return layouts::gptqRefusal(w); }
    void addQuantizationConfig(const Model& model, const ExportOptions& options, nlohmann::json& config) const override {
        bool sym = true, actOrder = false;
        const std::vector<std::string> layers = packedLayers(model, options);
        for (const auto& layer : layers) {
            const auto& w = std::dynamic_pointer_cast<const IntLinear>(model.compressed(layer))->quantized();
            sym = sym && symmetricLevels(w);
            actOrder = actOrder || !at::equal(w.groupIndex.to(at::kInt), quant::defaultGroupIndex(w.cols, w.spec.groupSize));
        }
        const bool packedHead = std::find(layers.begin(), layers.end(), names::kHead) != layers.end();
        const auto& w = firstWeight(model);
        // Only what the layers show. damp_percent, static_groups and true_sequential say how a checkpoint was made,
        // which the layers do not record (RTN layers had none); they were written as 0.01 / false / true whatever the
        // recipe set (user probe). Loaders (transformers, GPTQModel, vLLM) do not read them.
        config["quantization_config"] = {{"quant_method", "gptq"}, {"bits", w.spec.bits}, {"group_size", groupOf(w)},
                                         {"desc_act", actOrder},   {"sym", sym},
                                         {"checkpoint_format", "gptq"}, {"lm_head", packedHead}};
    }
};

class AwqExport : public PackedExport {
public:
    std::string id() const override { return "awq"; }
    std::string displayName() const override { return "AWQ checkpoint (Hugging Face folder, GEMM layout)"; }

protected:
    const char* layoutName() const override { return "awq"; }
    bool isGptq() const override { return false; }
    std::string layerRefusal(const quant::QuantizedWeight& w) const override { return layouts::awqRefusal(w); }
    void addQuantizationConfig(const Model& model, const ExportOptions& options, nlohmann::json& config) const override {
        const auto& w = firstWeight(model);
        config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4},        {"group_size", w.spec.groupSize},
                                         {"zero_point", true},    {"version", "gemm"}, {"modules_to_not_convert", nullptr}};
    }
};

// compressed-tensors: integer layers pack-quantized, FP8 float- or naive-quantized, W8A8 int-quantized; layers
// of one scheme share a config group (per layer, so mixed precision and dense layers are kept as they are).
class CompressedTensorsExport : public HfFolderExport {
public:
    std::string id() const override { return "compressed-tensors"; }
    std::string displayName() const override { return "compressed-tensors checkpoint (Hugging Face folder; vLLM, llm-compressor)"; }

protected:
    std::string quantRefusal(const Model& model, const ExportOptions&) const override {
        if (model.spec.family != Family::Llama) return "compressed-tensors export supports the Llama family";
        bool any = false;
        for (const auto& layer : model.linearLayers()) {
            auto linear = model.compressed(layer);
            if (!linear) continue;
            const ct::Scheme scheme = ct::schemeOf(*linear);
            if (!scheme.refusal.empty()) return layer + ": " + scheme.refusal;
            any = true;
        }
        if (!any) return "no layer is quantized (a dense model is written by the hf format)";
        for (int64_t b = 0; b < model.spec.layers; ++b)
            for (const auto& sharing : {std::vector<const char*>{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
                                        std::vector<const char*>{"mlp.gate_proj", "mlp.up_proj"}}) {
                std::vector<std::pair<std::string, const CompressedLinear*>> fused;
                for (const char* n : sharing) {
                    const std::string layer = names::llamaLayer(b, n);
                    fused.emplace_back(layer, model.compressed(layer).get());
                }
                const std::string why = ct::fusedRefusal(fused);
                if (!why.empty()) return why;
            }
        return "";
    }

    std::vector<Entry> plan(const Model& model, ggml::Type dense, const ExportOptions& options, ExportReport& report) const override {
        std::set<std::string> quantized;
        for (const auto& layer : model.linearLayers())
            if (model.compressed(layer)) quantized.insert(layer + ".weight");
        std::vector<Entry> entries =
            denseEntries(model, dense, report, [&](const std::string& n) { return quantized.count(n) != 0; });
        bool twoBit = false;
        for (const auto& layer : model.linearLayers()) {
            auto linear = model.compressed(layer);
            if (!linear) continue;
            const ct::Scheme scheme = ct::schemeOf(*linear);
            for (const ct::Part& part : ct::partsOf(linear)) {
                int64_t n = 1;
                for (int64_t d : part.shape) n *= d;
                // Produced when the writer reaches it, so no packed copy of the model builds up.
                auto make = part.make;
                const int64_t heads = exporting::ropeHeadsOf(model, layer + ".weight");
                const bool reorder = heads > 0 && model.spec.ropeStyle == RopeStyle::AdjacentPairs;
                const int64_t headDim = model.spec.headDim;
                const ggml::Type type = part.type;
                entries.push_back({layer + "." + part.suffix, type, part.shape, size_t(n) * elementBytes(type),
                                   [make, reorder, heads, headDim, type, name = layer + "." + part.suffix] {
                                       at::Tensor t = make(reorder ? ct::RowOrder{heads, headDim} : ct::RowOrder{});
                                       return plainBytes(t, type, name);
                                   },
                                   part.dtypeName});
            }
            report.tensors.push_back({layer, scheme.label, 0, ""});
            if (linear->bits() == 2 && linear->kind() == "int") twoBit = true;
        }
        if (twoBit) report.notes.push_back("2-bit layers: transformers reads them; vLLM's integer kernels take 4 and 8 bits only");
        noteDenseHead(model, dense, "cwb's compressed-tensors layout packs the block layers only", report);
        return entries;
    }

    void addQuantizationConfig(const Model& model, const ExportOptions& options, nlohmann::json& config) const override {
        std::vector<std::pair<std::string, const CompressedLinear*>> layers;
        bool allCompressed = true;
        for (const auto& layer : model.linearLayers()) {
            auto linear = model.compressed(layer);
            if (linear) layers.emplace_back(layer, linear.get());
            else allCompressed = false;
        }
        config["quantization_config"] = ct::quantizationConfig(layers, allCompressed);
    }
};

} // namespace

std::unique_ptr<ExportFormat> makeHfExport() { return std::make_unique<HfExport>(); }
std::unique_ptr<ExportFormat> makeGptqExport() { return std::make_unique<GptqExport>(); }
std::unique_ptr<ExportFormat> makeAwqExport() { return std::make_unique<AwqExport>(); }
std::unique_ptr<ExportFormat> makeCompressedTensorsExport() { return std::make_unique<CompressedTensorsExport>(); }

} // namespace cwb
