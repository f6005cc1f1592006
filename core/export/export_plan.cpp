#include "core/export/export_plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "core/compress/compressed_layers.h"
#include "core/compress/method.h"
#include "core/compress/pipeline.h"
#include "core/export/ct_layout.h"
#include "core/export/export_format.h"
#include "core/export/export_support.h"
#include "core/export/quant_layouts.h"
#include "core/model/model.h"
#include "core/util/error.h"

namespace cwb {

namespace {

// The form a linear layer will have once the recipe has run, as far as the recipe decides it.
struct PlannedLayer {
    enum class Kind { Dense, Int, Fp8, W8A8, Unknown } kind = Kind::Dense;
    std::string by;                      // what gave it this form: "step 2 (quantize.gptq)", kBase, "the checkpoint"
    int64_t rows = -1, cols = -1;        // -1: not known (after structured pruning)
    // Int
    int bits = 0;
    int64_t groupSize = 0;               // > 0: groups of inputs; <= 0: per channel or per tensor
    bool permutedGroups = false;         // act-order group indices
    bool inputScales = false;            // unfolded AWQ scales kept beside the layer
    // Fp8
    bool fp8PerTensor = false, fp8Dynamic = false;
    // W8A8
    bool smoothing = false;              // unfolded SmoothQuant scales kept beside the layer
};

using Kind = PlannedLayer::Kind;
const char* const kBase = "the base model";

PlannedLayer fromBase(const Model& base, const std::string& layer) {
    PlannedLayer p;
    p.by = kBase;
    const auto& shape = base.tensor(layer + ".weight").shape;
    if (shape.size() == 2 && base.spec.family == Family::Llama) {
        p.rows = shape[0];
        p.cols = shape[1];
    }
    const auto linear = base.compressed(layer);
    if (!linear) return p;
    p.by = "the checkpoint";
    if (auto* i = dynamic_cast<const IntLinear*>(linear.get())) {
        const auto& w = i->quantized();
        p.kind = Kind::Int;
        p.bits = w.spec.bits;
        p.groupSize = w.spec.groupSize;
        p.permutedGroups = !at::equal(w.groupIndex.to(at::kInt), quant::defaultGroupIndex(w.cols, w.spec.groupSize));
        p.inputScales = i->inputScale().defined();
    } else if (auto* f = dynamic_cast<const Fp8Linear*>(linear.get())) {
        p.kind = Kind::Fp8;
        p.fp8PerTensor = f->fp8Weight().scales.numel() == 1;
        p.fp8Dynamic = f->dynamicActivations();
    } else if (auto* s = dynamic_cast<const W8A8Linear*>(linear.get())) {
        p.kind = Kind::W8A8;
        p.smoothing = !at::all(s->smoothing() == 1).item<bool>();
    } else {
        p.kind = Kind::Unknown;
    }
    return p;
}

// Block sizes as the recipe leaves them (heads, kv heads, MLP channels per block); `known` false once a step makes
// them depend on more than the recipe (an explicit head list).
struct PlannedShapes {
    ArchSpec spec;
    bool known = true;
};

// A layer whose rows or columns a structured step removed: dense (the slices are copied out as floats), new shape.
void sliced(PlannedLayer& p, const std::string& by, int64_t rows, int64_t cols) {
    PlannedLayer next;
    next.kind = Kind::Dense;
    next.by = by;
    next.rows = p.rows < 0 ? -1 : rows;
    next.cols = p.cols < 0 ? -1 : cols;
    p = next;
}

// prune.channels and prune.heads (core/compress/methods/structured.cpp) remove counts that the ratio decides alone:
// round(ratio x size), at most all but one; which ones is the data's business, how many is not.
void applyStructured(const Model& base, const RecipeStep& step, const nlohmann::json& params, const std::string& by,
                     std::map<std::string, PlannedLayer>& plan, PlannedShapes& shapes) {
    const bool llama = base.spec.family == Family::Llama;
    ArchSpec& spec = shapes.spec;
    const std::vector<std::string> targeted = targetLayers(base, step);
    auto targets = [&](const std::string& layer) { return std::find(targeted.begin(), targeted.end(), layer) != targeted.end(); };
    if (step.method == "prune.channels") {
        for (int64_t l = 0; l < spec.layers; ++l) {
            const std::string down = llama ? names::llamaLayer(l, "mlp.down_proj") : names::gpt2Layer(l, "mlp.c_proj");
            if (!targets(down)) continue;
            const int64_t F = spec.ffnAt(l);
            const double ratio = paramsForLayer(step, params, down)["ratio"].get<double>();
            const int64_t kept = F - std::min<int64_t>(F - 1, std::llround(ratio * double(F)));
            spec.layerShapes.at(size_t(l)).ffn = kept;
            if (!llama) continue;
            for (const char* up : {"mlp.gate_proj", "mlp.up_proj"}) {
                PlannedLayer& p = plan.at(names::llamaLayer(l, up));
                sliced(p, by, kept, p.cols);
            }
            PlannedLayer& d = plan.at(down);
            sliced(d, by, d.rows, kept);
        }
        return;
    }
    // prune.heads (Llama only: the build refuses other families).
    if (!llama || !params["heads"].get<std::string>().empty()) {   // an explicit list: shapes are the list's business
        shapes.known = false;
        for (auto& [name, p] : plan)
            if (name.find("self_attn.") != std::string::npos) {
                p.kind = Kind::Unknown;
                p.rows = p.cols = -1;
                p.by = by;
            }
        return;
    }
    const int64_t hd = spec.headDim;
    for (int64_t l = 0; l < spec.layers; ++l) {
        const std::string q = names::llamaLayer(l, "self_attn.q_proj");
        if (!targets(q)) continue;
        const int64_t H = spec.headsAt(l), G = spec.kvHeadsAt(l), group = H / G;
        const double ratio = paramsForLayer(step, params, q)["ratio"].get<double>();
        int64_t keptHeads = H, keptGroups = G;
        if (params["unit"] == "kv_group") {
            keptGroups = G - std::min<int64_t>(G - 1, std::llround(ratio * double(G)));
            keptHeads = keptGroups * group;
        } else if (group == 1) {   // MHA: each head is its own kv group
            keptHeads = keptGroups = H - std::min<int64_t>(H - 1, std::llround(ratio * double(H)));
        } else {
            keptHeads = H - G * std::min<int64_t>(group - 1, std::llround(ratio * double(group)));
        }
        if (keptHeads == H) continue;   // nothing removed: the block is left as it was
        spec.layerShapes.at(size_t(l)).heads = keptHeads;
        spec.layerShapes.at(size_t(l)).kvHeads = keptGroups;
        PlannedLayer& qp = plan.at(q);
        sliced(qp, by, keptHeads * hd, qp.cols);
        PlannedLayer& op = plan.at(names::llamaLayer(l, "self_attn.o_proj"));
        sliced(op, by, op.rows, keptHeads * hd);
        if (keptGroups != G)
            for (const char* kv : {"self_attn.k_proj", "self_attn.v_proj"}) {
                PlannedLayer& p = plan.at(names::llamaLayer(l, kv));
                sliced(p, by, keptGroups * hd, p.cols);
            }
    }
}

// Applies one step to the plan; false when layer names change from here on (nothing more can be judged).
bool applyStep(const Model& base, const RecipeStep& step, size_t index, std::map<std::string, PlannedLayer>& plan,
               PlannedShapes& shapes) {
    const CompressionMethod* method = MethodRegistry::instance().find(step.method);
    const nlohmann::json params = resolveParams(step.method, method->params(), step.params);
    const std::string by = "step " + std::to_string(index) + " (" + step.method + ")";
    const std::string& id = step.method;
    if (id == "prune.layers" || (id == "distill.kd" && params["student_layers"].get<int64_t>() > 0)) return false;
    if (id == "distill.kd") return true;   // trains the layers in the form it finds them
    if (id == "prune.heads" || id == "prune.channels") {
        applyStructured(base, step, params, by, plan, shapes);
        return true;
    }
    for (const auto& layer : targetLayers(base, step)) {
        if (!plan.count(layer)) continue;   // the output head: every format writes it, dense or as the step left it
        PlannedLayer& p = plan.at(layer);
        const nlohmann::json q = paramsForLayer(step, params, layer);
        PlannedLayer next;
        next.rows = p.rows;
        next.cols = p.cols;
        next.by = by;
        if (id == "quantize.rtn" || id == "quantize.gptq" || id == "quantize.awq") {
            next.kind = Kind::Int;
            next.bits = q["bits"].get<int>();
            next.groupSize = q["group_size"].get<int64_t>();
            if (id == "quantize.rtn" && q["granularity"] != "group") next.groupSize = q["granularity"] == "tensor" ? 0 : -1;
            if (id == "quantize.gptq")
                // Only where the width is known to span several groups: one group (or an unknown width) may be default.
                next.permutedGroups = q["act_order"].get<bool>() && !q["static_groups"].get<bool>() && next.groupSize > 0 &&
                                      next.cols > next.groupSize;
            if (id == "quantize.awq") next.inputScales = !params["fold"].get<bool>();
        } else if (id == "quantize.fp8") {
            next.kind = Kind::Fp8;
            next.fp8PerTensor = q["scale"] == "tensor";
            next.fp8Dynamic = q["activations"] == "dynamic";
        } else if (id == "quantize.smoothquant") {
            next.kind = Kind::W8A8;
            next.smoothing = !params["fold"].get<bool>();
        } else if (id == "prune.magnitude" && q.value("scope", "") == "global") {
            next = p;                  // a global threshold may leave a layer untouched, in the form it had
            next.kind = Kind::Unknown;
            next.by = by;
        } else if (id.rfind("prune.", 0) == 0) {
            next.kind = Kind::Dense;   // unstructured and N:M pruning store the pruned weight dense
        } else {
            next.kind = Kind::Unknown;
        }
        p = next;
    }
    return true;
}

std::string formName(const PlannedLayer& p) {
    switch (p.kind) {
    case Kind::Dense: return "dense";
    case Kind::Int: return "int" + std::to_string(p.bits) + (p.groupSize > 0 ? " g" + std::to_string(p.groupSize) : " per-channel");
    case Kind::Fp8: return "FP8";
    case Kind::W8A8: return "W8A8";
    case Kind::Unknown: break;
    }
    return "unknown";
}

std::string layerFact(const std::string& layer, const PlannedLayer& p) {
    return layer + " (" + formName(p) + " after " + p.by + ")";
}

std::string packedProblem(const std::string& formatId, const Model& base, const std::map<std::string, PlannedLayer>& plan) {
    const char* layout = formatId == "gptq" ? "GPTQ" : "AWQ";
    if (base.spec.family != Family::Llama) return std::string(layout) + " export supports the Llama family";
    const PlannedLayer* first = nullptr;
    std::string firstName;
    for (const auto& layer : base.linearLayers()) {
        const PlannedLayer& p = plan.at(layer);
        if (p.kind == Kind::Unknown) continue;
        if (p.kind != Kind::Int)
            return layer + " will not be integer-quantized: " +
                   (p.by == kBase ? std::string("no quantize.rtn, quantize.gptq or quantize.awq step targets it")
                                  : "it is " + formName(p) + " after " + p.by) +
                   " (the layout needs every block linear layer integer-quantized)";
        if (p.inputScales)
            return layerFact(layer, p) + " will carry AWQ input scales beside the layer, which the " + std::string(layout) +
                   " layout has no place for (quantize.awq with \"fold\": true folds them into the norms; or export as gguf or hf)";
        const std::string why = formatId == "gptq" ? layouts::gptqSpecRefusal(p.bits, p.rows, p.cols)
                                                   : layouts::awqSpecRefusal(p.bits, p.groupSize, p.rows, p.cols, p.permutedGroups);
        if (!why.empty()) return layerFact(layer, p) + ": " + why;
        auto group = [](const PlannedLayer& l) { return l.groupSize > 0 ? l.groupSize : -1; };
        if (!first) {
            first = &p;
            firstName = layer;
        } else if (p.bits != first->bits || group(p) != group(*first)) {
            return layerFact(layer, p) + " and " + layerFact(firstName, *first) +
                   " differ; one quantization_config covers every layer (mixed precision: export as gguf)";
        }
    }
    return "";
}

// Settings that certainly give two layers different compressed-tensors schemes ("" when none is certain).
std::string schemeDifference(const PlannedLayer& a, const PlannedLayer& b) {
    if (a.kind == Kind::Unknown || b.kind == Kind::Unknown) return "";
    if (a.kind != b.kind) return "one is " + formName(a) + ", the other " + formName(b);
    if (a.kind == Kind::Int && (a.bits != b.bits || (a.groupSize > 0 ? a.groupSize : 0) != (b.groupSize > 0 ? b.groupSize : 0)))
        return "one is " + formName(a) + ", the other " + formName(b);
    if (a.kind == Kind::Fp8 && (a.fp8PerTensor != b.fp8PerTensor || a.fp8Dynamic != b.fp8Dynamic))
        return "their FP8 scales or activations differ";
    return "";
}

std::string compressedTensorsProblem(const Model& base, const std::map<std::string, PlannedLayer>& plan) {
    if (base.spec.family != Family::Llama) return "compressed-tensors export supports the Llama family";
    bool anyQuantized = false, anyUnknown = false;
    for (const auto& layer : base.linearLayers()) {
        const PlannedLayer& p = plan.at(layer);
        anyUnknown |= p.kind == Kind::Unknown;
        anyQuantized |= p.kind != Kind::Dense && p.kind != Kind::Unknown;
        if (p.kind == Kind::Int) {
            const std::string why = ct::intSchemeRefusal(p.bits, p.groupSize, p.cols, p.inputScales, p.permutedGroups);
            if (!why.empty()) return layerFact(layer, p) + ": " + why;
        }
        if (p.kind == Kind::W8A8 && p.smoothing)
            return layerFact(layer, p) + " will carry SmoothQuant smoothing scales beside the layer, which compressed-tensors "
                                         "has no place for (quantize.smoothquant with \"fold\": true folds them into the norms)";
    }
    if (!anyQuantized && !anyUnknown) return "no layer will be quantized (a dense model is written by the hf format)";
    for (int64_t b = 0; b < base.spec.layers; ++b)
        for (const auto& sharing : {std::vector<const char*>{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
                                    std::vector<const char*>{"mlp.gate_proj", "mlp.up_proj"}}) {
            const std::string first = names::llamaLayer(b, sharing[0]);
            for (size_t i = 1; i < sharing.size(); ++i) {
                const std::string other = names::llamaLayer(b, sharing[i]);
                if (!plan.count(first) || !plan.count(other)) continue;
                const std::string why = schemeDifference(plan.at(other), plan.at(first));
                if (!why.empty())
                    return layerFact(other, plan.at(other)) + " and " + layerFact(first, plan.at(first)) +
                           " will differ (" + why + "): vLLM runs the layers that share an input (q/k/v, gate/up) as one "
                           "and needs one scheme for them";
            }
        }
    return "";
}

} // namespace

std::string exportRecipeProblem(const Model& base, const Recipe& recipe, const std::string& formatId) {
    if (!ExportFormatRegistry::instance().byId(formatId))
        throw Error("unknown export format '" + formatId + "' (hf, gptq, awq, compressed-tensors, gguf)");
    if (formatId == "gguf")
        return base.tokenizer && base.tokenizer->vocabulary() ? "" : "the model has no tokenizer vocabulary to write (llama.cpp needs one)";
    recipe.validate("recipe");
    std::map<std::string, PlannedLayer> plan;
    for (const auto& layer : base.linearLayers()) plan.emplace(layer, fromBase(base, layer));
    PlannedShapes shapes{base.spec};
    shapes.spec.makeLayerShapesExplicit();
    for (size_t i = 0; i < recipe.steps.size(); ++i) {
        if (!recipe.steps[i].enabled) continue;
        if (!applyStep(base, recipe.steps[i], i + 1, plan, shapes)) return "";
    }
    // Hugging Face folders (hf, gptq, awq, compressed-tensors) describe one block size in config.json.
    if (shapes.known) {
        const std::string sizes = exporting::nonUniformLayers(shapes.spec);
        if (!sizes.empty()) return sizes;
    }
    if (formatId == "hf") return "";   // every layer form is written dense (dequantized)
    return formatId == "compressed-tensors" ? compressedTensorsProblem(base, plan) : packedProblem(formatId, base, plan);
}

} // namespace cwb
