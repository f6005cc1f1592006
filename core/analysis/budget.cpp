#include "core/analysis/budget.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <limits>
#include <map>

#include "core/analysis/importance.h"
#include "core/compress/compressed_layers.h"
#include "core/compress/method.h"
#include "core/compress/pipeline.h"
#include "core/compress/quant_math.h"
#include "core/model/model.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

// Bits per weight as people write them: "4.5", "4.667" ("4.500000" read badly, GUI probe).
static std::string bitsText(double bits) {
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", bits);
    return text;
}

std::vector<size_t> chooseBits(const std::vector<BudgetLayer>& layers, double target) {
    std::vector<size_t> choice(layers.size());
    double parameters = 0, bits = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
        const auto& o = layers[i].options;
        if (o.empty()) throw Error("budget: layer " + layers[i].name + " has no options");
        choice[i] = static_cast<size_t>(std::min_element(o.begin(), o.end(), [](auto& a, auto& b) { return a.bitsPerWeight < b.bitsPerWeight; }) - o.begin());
        parameters += double(layers[i].parameters);
        bits += double(layers[i].parameters) * o[choice[i]].bitsPerWeight;
    }
    if (parameters == 0) return choice;
    if (bits / parameters > target + 1e-12)
        throw Error("budget: the target of " + bitsText(target) + " bits per weight is below the smallest plan (" +
                    bitsText(bits / parameters) + ")");
    for (;;) {
        double bestRatio = 0;
        size_t bestLayer = layers.size(), bestOption = 0;
        for (size_t i = 0; i < layers.size(); ++i) {
            const BudgetOption& current = layers[i].options[choice[i]];
            for (size_t k = 0; k < layers[i].options.size(); ++k) {
                const BudgetOption& next = layers[i].options[k];
                const double extra = double(layers[i].parameters) * (next.bitsPerWeight - current.bitsPerWeight);
                const double saved = current.cost - next.cost;
                if (extra <= 0 || saved <= 0 || (bits + extra) / parameters > target + 1e-12) continue;
                if (saved / extra > bestRatio) {
                    bestRatio = saved / extra;
                    bestLayer = i;
                    bestOption = k;
                }
            }
        }
        if (bestLayer == layers.size()) break;
        bits += double(layers[bestLayer].parameters) *
                (layers[bestLayer].options[bestOption].bitsPerWeight - layers[bestLayer].options[choice[bestLayer]].bitsPerWeight);
        choice[bestLayer] = bestOption;
    }
    return choice;
}

namespace {

std::string exactPattern(const std::string& layer) {
    std::string p = "^";
    for (char c : layer) {
        if (c == '.') p += "\\.";
        else p += c;
    }
    return p + "$";
}

// chooseBits over units: q/k/v and gate/up of each block are one unit each (every other layer its own), with the
// summed parameters, storage and cost of their members at each width; the unit's choice goes to all its members.
std::vector<size_t> chooseFusedBits(const Model& model, const std::vector<BudgetLayer>& layers, double target) {
    if (model.spec.family != Family::Llama)
        throw Error("budget: planning q/k/v and gate/up together is implemented for the Llama family only");
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < layers.size(); ++i) index[layers[i].name] = i;
    std::vector<std::vector<size_t>> units;
    std::vector<bool> placed(layers.size(), false);
    for (int64_t b = 0; b < model.spec.layers; ++b)
        for (const auto& sharing : {std::vector<const char*>{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
                                    std::vector<const char*>{"mlp.gate_proj", "mlp.up_proj"}}) {
            std::vector<size_t> unit;
            for (const char* n : sharing) {
                auto it = index.find(names::llamaLayer(b, n));
                if (it != index.end()) unit.push_back(it->second);
            }
            if (unit.empty()) continue;
            for (size_t i : unit) placed[i] = true;
            units.push_back(unit);
        }
    for (size_t i = 0; i < layers.size(); ++i)
        if (!placed[i]) units.push_back({i});
    std::vector<BudgetLayer> merged;
    for (const auto& unit : units) {
        BudgetLayer m;
        m.name = layers[unit.front()].name;
        for (size_t i : unit) m.parameters += layers[i].parameters;
        for (const BudgetOption& o : layers[unit.front()].options) {
            BudgetOption sum{o.bits, 0, 0};
            for (size_t i : unit) {
                const auto& options = layers[i].options;
                const auto same = std::find_if(options.begin(), options.end(), [&](const BudgetOption& x) { return x.bits == o.bits; });
                if (same == options.end()) throw Error("budget: layer " + layers[i].name + " has no " + std::to_string(o.bits) + "-bit option");
                sum.bitsPerWeight += same->bitsPerWeight * double(layers[i].parameters);
                sum.cost += same->cost;
            }
            sum.bitsPerWeight /= double(std::max<int64_t>(1, m.parameters));
            m.options.push_back(sum);
        }
        merged.push_back(std::move(m));
    }
    const std::vector<size_t> unitChoice = chooseBits(merged, target);
    std::vector<size_t> choice(layers.size());
    for (size_t u = 0; u < units.size(); ++u) {
        const int bits = merged[u].options[unitChoice[u]].bits;
        for (size_t i : units[u]) {
            const auto& options = layers[i].options;
            choice[i] = size_t(std::find_if(options.begin(), options.end(), [&](const BudgetOption& x) { return x.bits == bits; }) - options.begin());
        }
    }
    return choice;
}

} // namespace

namespace {
RecipeStep budgetStep(const BudgetOptions& options, int bits) {
    RecipeStep step;
    step.method = options.method;
    step.params = options.params.is_object() ? options.params : nlohmann::json::object();
    step.params["bits"] = bits;
    step.params["group_size"] = options.groupSize;
    if (options.includeHead) step.params["head"] = "also";
    return step;
}

int64_t parametersOf(const Model& model, const std::string& layer) {
    return model.tensor(targetWeightName(model, layer)).elementCount();
}
} // namespace

std::vector<std::string> plannedLayers(const Model& model, const BudgetOptions& options) {
    std::vector<std::string> layers = model.linearLayers();
    if (options.includeHead) layers.push_back(names::kHead);
    return layers;
}

double plannedParameters(const Model& model, const BudgetOptions& options) {
    double parameters = 0;
    for (const auto& layer : plannedLayers(model, options)) parameters += double(parametersOf(model, layer));
    return parameters;
}

void checkBudgetOptions(const BudgetOptions& options) {
    if (options.bits.empty()) throw Error("budget: no candidate bit widths");
    const CompressionMethod* method = MethodRegistry::instance().find(options.method);
    if (!method) throw Error("budget: unknown method '" + options.method + "' (quantize.rtn, quantize.gptq or quantize.awq)");
    const auto specs = method->params();
    if (std::none_of(specs.begin(), specs.end(), [](const ParamSpec& p) { return p.name == "bits"; }))
        throw Error("budget: " + options.method + " has no \"bits\" parameter; use quantize.rtn, quantize.gptq or quantize.awq");
    // What even the narrowest width stores, known from the sizes alone, is checked before the measurements (hours with
    // GPTQ on a large model): its levels packed 32 / levelsPerWord to a 32-bit word, and an fp16 scale per group.
    const int narrowest = *std::min_element(options.bits.begin(), options.bits.end());
    if (narrowest < 2 || narrowest > 8) throw Error("budget: bit widths must be 2..8, got " + std::to_string(narrowest));
    const double floorBits = 32.0 / double(quant::levelsPerWord(narrowest)) + (options.groupSize > 0 ? 16.0 / double(options.groupSize) : 0.0);
    if (!(options.targetBitsPerWeight >= floorBits))
        throw Error("budget: the target of " + bitsText(options.targetBitsPerWeight) + " bits per weight is below what " +
                    std::to_string(narrowest) + "-bit layers store (at least " + bitsText(floorBits) +
                    ": levels packed into 32-bit words and an fp16 scale per group of " + std::to_string(options.groupSize) +
                    "); raise the target or add a narrower width");
    if (options.params.is_object() && options.params.value("fold", false))
        throw Error("budget: quantize.awq's \"fold\" moves scales into norms that several layers share, so one layer "
                    "cannot be measured alone; plan without it (the plan's recipe may then add it)");
    if (options.params.is_object() && options.params.value("head", std::string("none")) != "none")
        throw Error("budget: \"head\" quantizes the output head beside every layer measured; leave it out of the "
                    "parameters and plan the head as one more layer instead (--head)");
    for (int bits : options.bits) {   // the method's own checks of its parameters (group size, ...)
        Recipe recipe;
        recipe.steps.push_back(budgetStep(options, bits));
        Recipe::fromJson(recipe.toJson(), "budget");
    }
}

BudgetPlan solveBitBudget(const Model& model, const at::Tensor& windows, const BudgetOptions& options, Feedback* feedback) {
    if (!windows.defined() || windows.dim() != 2) throw Error("budget: needs token windows (a text file)");
    checkBudgetOptions(options);
    checkBaseLogProbMemory(windows, model.spec.vocab);   // before phase 1, which may calibrate for long
    auto stepAt = [&](int bits) { return budgetStep(options, bits); };
    // Phase 1 (half the progress): every layer at every width, as the method computes it inside a recipe.
    std::map<int, std::unique_ptr<Model>> quantized;
    for (size_t i = 0; i < options.bits.size(); ++i) {
        SubFeedback sub(feedback, 0.5 * double(i) / double(options.bits.size()), 0.5 * double(i + 1) / double(options.bits.size()));
        Recipe recipe;
        recipe.steps.push_back(stepAt(options.bits[i]));
        // Windows only where the method calibrates (RTN does not): given them, compressModel also measures
        // reconstruction errors, a pass over every block the plan does not use.
        quantized[options.bits[i]] = compressModel(model, recipe, recipeNeedsCalibration(recipe) ? windows : at::Tensor(),
                                                   feedback ? &sub : nullptr, {}, {options.compute.device, at::kFloat}).model;
    }
    // The smallest plan is known from the stored bits alone: a target below it fails now, not after the measurements.
    {
        double parameters = 0, bits = 0;
        for (const auto& layer : plannedLayers(model, options)) {
            double narrowest = std::numeric_limits<double>::infinity();
            for (const auto& [width, variant] : quantized)
                if (auto linear = variant->compressed(layer)) narrowest = std::min(narrowest, linear->bitsPerWeight());
            if (!std::isfinite(narrowest)) continue;   // reported with its layer below
            const double n = double(parametersOf(model, layer));
            parameters += n;
            bits += n * narrowest;
        }
        if (parameters > 0 && bits / parameters > options.targetBitsPerWeight + 1e-12)
            throw Error("budget: the target of " + std::to_string(options.targetBitsPerWeight) +
                        " bits per weight is below the smallest plan (" + std::to_string(bits / parameters) +
                        ", every layer at its narrowest width); nothing was measured");
    }
    // One runtime for every measurement: each (layer, width) swaps one layer into a working copy of the base.
    VariantRunner runner(model, options.compute);
    SubFeedback basePass(feedback, 0.5, 0.5);   // cancels; its share of the time is not counted apart
    const std::vector<at::Tensor> base = runner.logProbs(windows, nullptr, feedback ? &basePass : nullptr);
    BudgetPlan plan;
    const std::vector<std::string> layers = plannedLayers(model, options);
    const size_t total = layers.size() * options.bits.size();
    size_t done = 0;
    for (const auto& layer : layers) {
        BudgetLayer entry;
        entry.name = layer;
        entry.parameters = parametersOf(model, layer);
        for (int bits : options.bits) {
            if (feedback) {
                feedback->throwIfCancelled();
                feedback->setProgress(0.5 + 0.5 * double(done++) / double(total));
            }
            auto linear = quantized.at(bits)->compressed(layer);
            if (!linear || linear->kind() != "int")
                throw Error("budget: " + options.method + " did not quantize layer " + layer + " to integers");
            double kl = 0;
            try {
                if (layer == names::kHead) {   // outside the blocks: the runner's blocks, then this head
                    kl = std::max(0.0, runner.compareWithHead(windows, base, *linear).meanKl);
                } else {
                    auto variant = model.clone();
                    variant->setCompressed(layer, linear);
                    if (!runner.apply(*variant)) throw Error("internal: budget: layer " + layer + " is not inside a block");
                    kl = std::max(0.0, runner.compare(windows, base).meanKl);   // >= 0 but for rounding
                }
            } catch (const Cancelled&) {
                throw;
            } catch (const Error& e) {
                throw Error("budget: layer " + layer + " at " + std::to_string(bits) + " bits: " + e.what());
            }
            runner.reset();
            entry.options.push_back({bits, linear->bitsPerWeight(), kl});
        }
        plan.layers.push_back(std::move(entry));
    }
    const std::vector<size_t> choice = options.fuseSharedInputs ? chooseFusedBits(model, plan.layers, options.targetBitsPerWeight)
                                                                : chooseBits(plan.layers, options.targetBitsPerWeight);
    double parameters = 0, bits = 0;
    std::map<int, int64_t> parametersPerWidth;
    for (size_t i = 0; i < plan.layers.size(); ++i) {
        const BudgetOption& o = plan.layers[i].options[choice[i]];
        plan.bits[plan.layers[i].name] = o.bits;
        plan.predictedCost += o.cost;
        parameters += double(plan.layers[i].parameters);
        bits += double(plan.layers[i].parameters) * o.bitsPerWeight;
        parametersPerWidth[o.bits] += plan.layers[i].parameters;
    }
    plan.bitsPerWeight = parameters > 0 ? bits / parameters : 0;
    int common = parametersPerWidth.begin()->first;
    for (const auto& [width, count] : parametersPerWidth)
        if (count > parametersPerWidth[common]) common = width;
    RecipeStep step = stepAt(common);
    for (const auto& [layer, width] : plan.bits)
        if (width != common) step.overrides.push_back({exactPattern(layer), {{"bits", width}}});
    plan.recipe.steps.push_back(step);
    if (feedback) feedback->setProgress(1.0);
    return plan;
}

} // namespace cwb
