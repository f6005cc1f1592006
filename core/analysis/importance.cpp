#include "core/analysis/importance.h"

#include <algorithm>
#include <cmath>

#include <map>
#include <set>

#include "core/analysis/gradient_importance.h"
#include "core/compress/compressed_layers.h"
#include "core/compress/method.h"
#include "core/compress/pipeline.h"
#include "core/compress/recipe.h"
#include "core/compress/prune_math.h"
#include "core/compress/sequential.h"
#include "core/model/model.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

namespace {

at::Tensor logProbs(const Model& model, const at::Tensor& windows) {
    Transformer runtime(model);
    return at::log_softmax(runtime.forward(windows).to(at::kCPU, at::kDouble), -1);   // [samples, length, vocab]
}

double lossFromLogProbs(const at::Tensor& logProbs, const at::Tensor& windows) {
    const int64_t length = windows.size(1);
    at::Tensor predicted = logProbs.narrow(1, 0, length - 1);
    at::Tensor targets = windows.narrow(1, 1, length - 1).unsqueeze(-1);
    return -predicted.gather(2, targets).mean().item<double>();
}

std::string suffixLabel(const std::string& layer) {
    const auto dot = layer.rfind('.');
    return dot == std::string::npos ? layer : layer.substr(dot + 1);
}

void checkWindows(const at::Tensor& windows) {
    if (!windows.defined() || windows.dim() != 2 || windows.size(0) < 1 || windows.size(1) < 2)
        throw Error("importance needs token windows [samples, length >= 2] (a text file)");
}

ImportanceMap headAblation(const Model& model, const at::Tensor& windows, Feedback* feedback) {
    if (model.spec.family != Family::Llama) throw Error("heads.ablation supports the Llama family only");
    const ArchSpec& s = model.spec;
    const double base = meanLoss(model, windows);
    ImportanceMap map;
    map.kind = "heads.ablation";
    int64_t maxHeads = 0;
    for (int64_t l = 0; l < s.layers; ++l) maxHeads = std::max(maxHeads, s.headsAt(l));
    for (int64_t l = 0; l < s.layers; ++l) map.rowLabels.push_back("block " + std::to_string(l));
    for (int64_t h = 0; h < maxHeads; ++h) map.columnLabels.push_back("head " + std::to_string(h));
    map.values.assign(static_cast<size_t>(s.layers * maxHeads), std::nan(""));
    int64_t done = 0, total = 0;
    for (int64_t l = 0; l < s.layers; ++l) total += s.headsAt(l);
    for (int64_t l = 0; l < s.layers; ++l) {
        const std::string name = names::llamaLayer(l, "self_attn.o_proj.weight");
        const at::Tensor wo = model.floatTensor(name);
        for (int64_t h = 0; h < s.headsAt(l); ++h) {
            if (feedback) {
                feedback->throwIfCancelled();
                feedback->setProgress(double(done++) / double(total));
            }
            auto ablated = model.clone();
            at::Tensor w = wo.clone();
            w.narrow(1, h * s.headDim, s.headDim).zero_();
            ablated->replaceTensor(name, w);
            map.values[static_cast<size_t>(l * maxHeads + h)] = meanLoss(*ablated, windows) - base;
        }
    }
    return map;
}

// ^model\.layers\.0\.self_attn\.q_proj$ : a recipe target naming exactly one layer.
std::string exactPattern(const std::string& layer) {
    std::string pattern = "^";
    for (char c : layer) {
        if (std::string(".[]()*+?^$|\\{}").find(c) != std::string::npos) pattern += '\\';
        pattern += c;
    }
    return pattern + "$";
}

} // namespace

nlohmann::json defaultSensitivityStep() {
    return {{"method", "quantize.rtn"}, {"params", {{"bits", 4}, {"group_size", 32}}}};
}

LayerSensitivity computeLayerSensitivity(const Model& model, const nlohmann::json& step, const at::Tensor& windows,
                                         Feedback* feedback) {
    checkWindows(windows);
    if (!step.is_object() || !step.contains("method")) throw Error("the sensitivity step must be a recipe step {\"method\": ..., \"params\": {...}}");
    const std::string id = step["method"].is_string() ? step["method"].get<std::string>() : "";
    const CompressionMethod* method = MethodRegistry::instance().find(id);
    // Given one linear layer, a structured method removed what that layer alone could not carry (a head's q rows
    // only), and the map showed meaningless numbers; heads.ablation and channels.* measure those structures instead.
    if (method && !method->actsPerLinearLayer())
        throw Error("the sensitivity step " + id + " changes whole heads, channels, blocks or the whole model, not one linear "
                    "layer at a time; per-layer sensitivity takes quantization or unstructured pruning (for heads and "
                    "channels use --kind head or channel)");
    const at::Tensor base = logProbs(model, windows);
    const double baseLoss = lossFromLogProbs(base, windows);
    const std::vector<std::string> layers = model.linearLayers();
    LayerSensitivity result;
    std::vector<std::string> columns;
    for (const auto& layer : layers) {
        const std::string label = suffixLabel(layer);
        if (std::find(columns.begin(), columns.end(), label) == columns.end()) columns.push_back(label);
    }
    for (ImportanceMap* map : {&result.kl, &result.deltaPerplexity}) {
        for (int64_t l = 0; l < model.spec.layers; ++l) map->rowLabels.push_back("block " + std::to_string(l));
        map->columnLabels = columns;
        map->values.assign(static_cast<size_t>(model.spec.layers) * columns.size(), std::nan(""));
    }
    result.kl.kind = "linears.sensitivity";
    result.deltaPerplexity.kind = "linears.delta_ppl";
    for (size_t i = 0; i < layers.size(); ++i) {
        if (feedback) {
            feedback->throwIfCancelled();
            feedback->setProgress(double(i) / double(layers.size()));
        }
        const std::string& layer = layers[i];
        nlohmann::json only = step;
        only["targets"] = exactPattern(layer);
        only.erase("ignore");
        const Recipe recipe = Recipe::fromJson({{"steps", nlohmann::json::array({only})}}, "sensitivity step");
        const std::unique_ptr<Model> variant = compressModel(model, recipe, windows).model;
        const at::Tensor lp = logProbs(*variant, windows);
        const double kl = (base.exp() * (base - lp)).sum(-1).mean().item<double>();
        const int64_t row = std::stoll(layer.substr(layer.find_first_of("0123456789")));
        const size_t column = static_cast<size_t>(std::find(columns.begin(), columns.end(), suffixLabel(layer)) - columns.begin());
        const size_t cell = static_cast<size_t>(row) * columns.size() + column;
        result.kl.values[cell] = std::max(0.0, kl);
        result.deltaPerplexity.values[cell] = std::exp(lossFromLogProbs(lp, windows)) - std::exp(baseLoss);
    }
    return result;
}

namespace {

// Wanda's |W|·‖X‖ summed over the outputs each intermediate MLP channel feeds: blocks × channels.
ImportanceMap channelWanda(const Model& model, const at::Tensor& windows, Feedback* feedback) {
    const bool llama = model.spec.family == Family::Llama;
    const std::string suffix = llama ? "mlp.down_proj" : "mlp.c_proj";
    auto layerName = [&](int64_t l) { return llama ? names::llamaLayer(l, suffix) : names::gpt2Layer(l, suffix); };
    std::map<int64_t, std::unique_ptr<prune::InputNormAccumulator>> norms;
    SequentialPass pass;
    pass.layersOf = [&](int64_t b) { return std::vector<std::string>{layerName(b)}; };
    pass.collect = [&](const std::string& layer, const at::Tensor& x) {
        auto& n = norms[std::stoll(layer.substr(layer.find_first_of("0123456789")))];
        if (!n) n = std::make_unique<prune::InputNormAccumulator>(x.size(1));
        n->add(x);
    };
    runSequential(model, windows, pass, feedback);
    ImportanceMap map;
    map.kind = "channels.wanda";
    int64_t maxFfn = 0;
    for (int64_t l = 0; l < model.spec.layers; ++l) maxFfn = std::max(maxFfn, model.spec.ffnAt(l));
    for (int64_t l = 0; l < model.spec.layers; ++l) map.rowLabels.push_back("block " + std::to_string(l));
    for (int64_t c = 0; c < maxFfn; ++c) map.columnLabels.push_back(std::to_string(c));
    map.values.assign(static_cast<size_t>(model.spec.layers * maxFfn), std::nan(""));
    for (int64_t l = 0; l < model.spec.layers; ++l) {
        at::Tensor scores = prune::wandaScores(model.floatTensor(layerName(l) + ".weight"), norms.at(l)->norms()).sum(0).to(at::kDouble).contiguous();
        for (int64_t c = 0; c < scores.numel(); ++c) map.values[static_cast<size_t>(l * maxFfn + c)] = scores.data_ptr<double>()[c];
    }
    return map;
}

} // namespace

std::vector<std::string> importanceKinds() {
    return {"heads.ablation", "linears.sensitivity", "linears.delta_ppl", "channels.wanda", "heads.gradient", "channels.gradient"};
}

double meanLoss(const Model& model, const at::Tensor& windows) {
    checkWindows(windows);
    return lossFromLogProbs(logProbs(model, windows), windows);
}

void checkImportanceKind(const std::string& kind) {
    static const std::set<std::string> known = {"heads.ablation", "head", "linears.sensitivity", "layer", "linears.delta_ppl",
                                                "layer-ppl", "channels.wanda", "channel", "heads.gradient", "head-grad",
                                                "channels.gradient", "channel-grad"};
    if (!known.count(kind))
        throw Error("unknown importance kind '" + kind + "' (known: heads.ablation or head, linears.sensitivity or layer, "
                    "linears.delta_ppl or layer-ppl, channels.wanda or channel, heads.gradient or head-grad, "
                    "channels.gradient or channel-grad)");
}

ImportanceMap computeImportance(const Model& model, const std::string& kind, const at::Tensor& windows, Feedback* feedback) {
    checkImportanceKind(kind);
    checkWindows(windows);
    ImportanceMap map;
    // "head", "layer" and "channel" are the short names the CLI documents.
    if (kind == "heads.ablation" || kind == "head") map = headAblation(model, windows, feedback);
    else if (kind == "linears.sensitivity" || kind == "layer") map = computeLayerSensitivity(model, defaultSensitivityStep(), windows, feedback).kl;
    else if (kind == "linears.delta_ppl" || kind == "layer-ppl") map = computeLayerSensitivity(model, defaultSensitivityStep(), windows, feedback).deltaPerplexity;
    else if (kind == "channels.wanda" || kind == "channel") map = channelWanda(model, windows, feedback);
    else if (kind == "heads.gradient" || kind == "head-grad") map = headGradientImportance(model, windows, feedback);
    else if (kind == "channels.gradient" || kind == "channel-grad") map = channelGradientImportance(model, windows, feedback);
    if (feedback) feedback->setProgress(1.0);
    return map;
}

nlohmann::json importanceMeasurement(const std::string& textPath, const std::string& textHash, const at::Tensor& windows,
                                     uint64_t seed, const std::string& device) {
    return {{"text", textPath}, {"text_hash", textHash}, {"windows", windows.size(0)}, {"tokens", windows.size(1)},
            {"seed", seed}, {"device", device}};
}

std::string describeImportanceMeasurement(const nlohmann::json& m) {
    if (!m.is_object() || !m.contains("windows")) return "";
    const std::string text = m.value("text", "");
    const std::string name = text.substr(text.find_last_of('/') == std::string::npos ? 0 : text.find_last_of('/') + 1);
    return std::to_string(m.value("windows", int64_t(0))) + " windows of " + std::to_string(m.value("tokens", int64_t(0))) +
           " tokens of " + name + " (seed " + std::to_string(m.value("seed", uint64_t(0))) + "), " + m.value("device", "cpu");
}

} // namespace cwb
