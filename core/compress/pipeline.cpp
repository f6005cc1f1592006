#include "core/compress/pipeline.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <regex>

#include <ATen/detail/CUDAHooksInterface.h>

#include "core/compress/gptq_math.h"
#include "core/compress/method.h"
#include "core/compress/methods/calibration_stats.h"
#include "core/compress/sequential.h"
#include "core/eval/perplexity.h"
#include "core/io/gguf_names.h"
#include "core/model/model.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

at::Tensor drawCalibration(const std::vector<TokenId>& tokens, TokenId bos, const CalibrationSpec& spec, int64_t context,
                           std::string* note) {
    if (spec.samples < 1 || spec.seqLen < 2) throw Error("calibration needs at least 1 sample of 2 tokens");
    const int64_t available = static_cast<int64_t>(tokens.size());
    if (available < 2) throw Error(spec.textPath, "calibration text is empty");
    int64_t seqLen = std::min({spec.seqLen, context, available});
    std::string clipped;
    if (seqLen < spec.seqLen)
        clipped = "calibration windows clipped from " + std::to_string(spec.seqLen) + " to " + std::to_string(seqLen) +
                  " tokens (" + (seqLen == context ? "model context" : "text length") + ")";
    if (spec.samples * seqLen > available)
        clipped += std::string(clipped.empty() ? "" : "; ") + "the text holds " + std::to_string(available) +
                   " tokens, so the " + std::to_string(spec.samples) + " windows overlap";
    if (note) *note = clipped;
    std::mt19937_64 rng(spec.seed);
    std::uniform_int_distribution<int64_t> offset(0, available - seqLen);
    at::Tensor out = at::empty({spec.samples, seqLen}, at::kLong);
    auto a = out.accessor<int64_t, 2>();
    for (int64_t s = 0; s < spec.samples; ++s) {
        const int64_t start = offset(rng);
        for (int64_t i = 0; i < seqLen; ++i) a[s][i] = tokens[static_cast<size_t>(start + i)];
        if (bos >= 0) a[s][0] = bos;
    }
    return out;
}

std::string headTargeting(const RecipeStep& step) {
    if (!step.params.is_object()) return "none";
    auto it = step.params.find("head");
    return it != step.params.end() && it->is_string() ? it->get<std::string>() : "none";
}

std::vector<std::string> targetLayers(const Model& model, const RecipeStep& step) {
    const std::string head = headTargeting(step);
    if (head == "only") return {names::kHead};
    std::vector<std::string> out;
    const std::regex targets(step.targets.empty() ? std::string(".*") : step.targets);
    std::vector<std::regex> ignores;
    for (const auto& i : step.ignore) ignores.emplace_back(i);
    for (const auto& layer : model.linearLayers()) {
        if (!std::regex_search(layer, targets)) continue;
        bool ignored = false;
        for (const auto& r : ignores) ignored |= std::regex_search(layer, r);
        if (!ignored) out.push_back(layer);
    }
    if (head == "also" && std::none_of(ignores.begin(), ignores.end(), [](const std::regex& r) { return std::regex_search(names::kHead, r); }))
        out.push_back(names::kHead);
    return out;
}

std::string targetWeightName(const Model& model, const std::string& layer) {
    const std::string name = layer + ".weight";
    return layer == names::kHead && !model.has(name) ? names::embedding(model.spec.family) : name;
}

at::Tensor targetWeight(const Model& model, const std::string& layer) { return model.floatTensor(targetWeightName(model, layer)); }

void storeCompressedLayer(Model& model, const std::string& layer, std::shared_ptr<const CompressedLinear> linear) {
    if (layer == names::kHead && !model.has(layer + ".weight")) {
        model.addPackedLayer(layer, std::move(linear), model.tensor(names::embedding(model.spec.family)).file);
        model.spec.tiedEmbeddings = false;
        return;
    }
    model.setCompressed(layer, std::move(linear));
}

static std::string stepWhere(const RecipeStep& step, size_t index) {
    return "step " + std::to_string(index) + " (" + step.method + "): ";
}

// A "targets" or override pattern that names no layer is a mistake (a misspelt name), not a step to skip quietly.
// `where` starts each message ("step 2 (quantize.rtn): ").
static void checkPatternsMatch(const Model& model, const RecipeStep& step, const std::vector<std::string>& targeted,
                               const std::string& where) {
    std::vector<std::string> layers = model.linearLayers();
    const std::string example = layers.empty() ? std::string() : " (layer names look like " + layers.front() + ")";
    const std::string head = headTargeting(step);
    if (head == "only" && (!step.targets.empty() || !step.ignore.empty()))
        throw Error(where + "\"head\": \"only\" compresses the output head alone, so \"targets\" and \"ignore\" would be "
                    "unused; leave them out, or use \"head\": \"also\"");
    if (head == "only") layers = {names::kHead};
    else if (head == "also") layers.push_back(names::kHead);
    const auto blockLayers = std::count_if(targeted.begin(), targeted.end(), [](const std::string& l) { return l != names::kHead; });
    if (head != "only" && !step.targets.empty() && blockLayers == 0)
        throw Error(where + "\"targets\" '" + step.targets + "' leaves no layer of the model" +
                    (step.ignore.empty() ? "" : " after \"ignore\"") + example);
    for (const auto& o : step.overrides) {
        const std::regex pattern(o.pattern);
        if (std::none_of(layers.begin(), layers.end(), [&](const std::string& l) { return std::regex_search(l, pattern); }))
            throw Error(where + "the override pattern '" + o.pattern + "' matches no layer of the model" + example);
    }
}

at::Device resolveCompressionDevice(const std::string& name) {
    if (name == "auto") return at::hasCUDA() ? at::Device(at::kCUDA) : at::Device(at::kCPU);
    if (name == "cpu") return at::kCPU;
    if (name == "cuda" || name.rfind("cuda:", 0) == 0) {
        if (!at::hasCUDA()) throw Error("device " + name + ": no CUDA in this build or no GPU visible");
        at::Device device = at::kCPU;
        try {
            device = at::Device(name);
        } catch (const std::exception&) {
            throw Error("device '" + name + "' is not a device name (cpu, cuda, cuda:N or auto)");
        }
        const int gpus = at::detail::getCUDAHooks().getNumGPUs();
        if (device.has_index() && device.index() >= gpus)
            throw Error("device " + name + ": there " + (gpus == 1 ? "is 1 GPU" : "are " + std::to_string(gpus) + " GPUs") +
                        " (cuda:0" + (gpus > 1 ? " to cuda:" + std::to_string(gpus - 1) : "") + ")");
        return device;
    }
    throw Error("device '" + name + "' is not a device name (cpu, cuda, cuda:N or auto)");
}

CalibrationCompute resolveCalibrationCompute(const CalibrationSpec& spec) {
    CalibrationCompute compute;
    compute.device = resolveCompressionDevice(spec.device);
    if (spec.forwardType == "f32") compute.forwardType = at::kFloat;
    else if (spec.forwardType == "bf16") compute.forwardType = at::kBFloat16;
    else if (spec.forwardType == "f16") compute.forwardType = at::kHalf;
    else throw Error("calibration forward type '" + spec.forwardType + "' is not f32, bf16 or f16");
    requireComputeType(compute.device, compute.forwardType);
    return compute;
}

// The layers whose reconstruction error a step report holds: changed by the step, same shape before and after.
static std::vector<std::string> measurableLayers(const Model& before, const Model& after, const std::vector<std::string>& layers) {
    std::vector<std::string> out;
    // Dropped blocks renumber the rest: the same name no longer means the same layer, so nothing compares.
    if (before.spec.layers != after.spec.layers) return out;
    for (const auto& layer : layers) {
        const std::string source = targetWeightName(before, layer);   // a tied head: the embedding it was
        if (!before.has(source) || !after.has(layer + ".weight")) continue;
        if (before.tensor(source).shape != after.tensor(layer + ".weight").shape) continue;
        const bool unchanged = before.compressed(layer) == after.compressed(layer) &&
                               before.tensor(layer + ".weight").data == after.tensor(layer + ".weight").data;
        if (unchanged) continue;   // the step left this layer alone
        out.push_back(layer);
    }
    return out;
}

std::map<std::string, double> reconstructionErrors(const Model& before, Model& after, const std::vector<std::string>& layers,
                                                   const at::Tensor& windows, Feedback* feedback, const CalibrationCompute& compute) {
    std::map<std::string, double> errors;
    std::map<int64_t, std::vector<std::string>> byBlock;
    for (const auto& layer : measurableLayers(before, after, layers))
        if (layer == names::kHead) byBlock[after.spec.layers].push_back(layer);   // the pass's stage past the last block
        else if (blockOf(layer) >= 0) byBlock[blockOf(layer)].push_back(layer);
    if (!windows.defined() || byBlock.empty()) return errors;
    // A step on the head alone (RTN / FP8 "head": "only"): a forward through every block for one layer's error is not
    // paid here; GPTQ measures its head in its own pass.
    if (byBlock.size() == 1 && byBlock.count(after.spec.layers)) return errors;
    std::map<std::string, std::unique_ptr<quant::HessianAccumulator>> hessians;
    std::map<std::string, std::string> sameInputAs;   // q/k/v and gate/up: one Hessian each
    SequentialPass pass;
    pass.compute = compute;
    pass.sharedInput = [&](const std::string& layer, const std::string& first) { sameInputAs[layer] = first; };
    pass.layersOf = [&](int64_t b) { return byBlock.count(b) ? byBlock[b] : std::vector<std::string>{}; };
    pass.collect = [&](const std::string& layer, const at::Tensor& x) {
        auto& h = hessians[layer];
        if (!h) h = std::make_unique<quant::HessianAccumulator>(x.size(1));
        h->add(x);
    };
    pass.compressBlock = [&](int64_t b) {
        if (!byBlock.count(b)) return;
        for (const auto& layer : byBlock[b]) {
            auto shared = sameInputAs.find(layer);
            at::Tensor h = hessians.at(shared == sameInputAs.end() ? layer : shared->second)->hessian();
            errors[layer] = reconstructionError(targetWeight(before, layer), after.floatTensor(layer + ".weight"), h);
        }
        for (const auto& layer : byBlock[b]) {
            hessians.erase(layer);
            sameInputAs.erase(layer);
        }
    };
    runSequential(after, windows, pass, feedback);
    return errors;
}

// True when the step's own pass measured the errors of exactly the layers the report needs.
static bool measuredInStep(const StepContext& ctx, const Model& before, const Model& after) {
    if (!ctx.reconstructionErrors || !ctx.calibration.defined()) return false;
    const std::vector<std::string> layers = measurableLayers(before, after, ctx.layers);
    if (layers.size() != ctx.reconstructionErrors->size()) return false;
    for (const auto& layer : layers)
        if (!ctx.reconstructionErrors->count(layer)) return false;
    return true;
}

static bool needsCalibration(const Recipe& recipe);

bool recipeNeedsCalibration(const Recipe& recipe) { return needsCalibration(recipe); }

std::string recipeParamsProblem(const Recipe& recipe) {
    for (size_t i = 0; i < recipe.steps.size(); ++i) {
        const RecipeStep& step = recipe.steps[i];
        if (!step.enabled) continue;
        const CompressionMethod* m = MethodRegistry::instance().find(step.method);
        if (!m) continue;   // Recipe refuses unknown methods when it is read
        const std::string why = m->paramsProblem(resolveParams(step.method, m->params(), step.params));
        if (!why.empty()) return "step " + std::to_string(i + 1) + ": " + why;
    }
    return "";
}

std::string stepPatternsProblem(const Model& model, const RecipeStep& step) {
    try {
        checkPatternsMatch(model, step, targetLayers(model, step), "");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

std::string recipeLayersProblem(const Model& base, const Recipe& recipe) {
    bool shapesChanged = false;
    for (size_t i = 0; i < recipe.steps.size(); ++i) {
        const RecipeStep& step = recipe.steps[i];
        if (!step.enabled) continue;
        const CompressionMethod* m = MethodRegistry::instance().find(step.method);
        if (!m) continue;   // Recipe refuses unknown methods when it is read
        // Heads or blocks a step names that the model lacks: found now, not after the steps before it ran (hours on a
        // 7B model). Past a step that changes heads, channels or blocks, the build checks them.
        if (!shapesChanged) {
            const std::string why = m->modelProblem(base, resolveParams(step.method, m->params(), step.params));
            if (!why.empty()) return "step " + std::to_string(i + 1) + ": " + why;
            shapesChanged = !m->actsPerLinearLayer();
        }
        // Past a step that removes blocks or cuts a student, layer names change: the build checks the rest.
        if (!m->readsLayerPatterns()) break;
        try {
            checkPatternsMatch(base, step, targetLayers(base, step), stepWhere(step, i + 1));
        } catch (const Error& e) {
            return e.what();
        }
    }
    return "";
}

static bool needsCalibration(const Recipe& recipe) {
    bool need = false;
    for (const auto& step : recipe.steps) {
        if (!step.enabled) continue;
        const CompressionMethod* m = MethodRegistry::instance().find(step.method);
        need |= m->needsCalibration(resolveParams(step.method, m->params(), step.params));
    }
    return need;
}

// A step that writes a dense weight over a layer an earlier step quantized (pruning after quantizing) drops the
// quantization: the size grows back and exports hold the layer as floats or re-quantize it. Allowed, but said.
static void noteLayersMadeDense(const Model& before, const Model& after, StepContext& ctx) {
    std::vector<std::string> dense;
    for (const auto& [layer, linear] : before.compressedLayers())
        if (!after.compressed(layer) && after.has(layer + ".weight")) dense.push_back(layer);
    if (dense.empty()) return;
    ctx.note(std::to_string(dense.size()) + " compressed layer" + (dense.size() == 1 ? "" : "s") + " (" + dense.front() +
             (dense.size() > 1 ? ", ..." : "") + ", compressed by an earlier step or in the checkpoint read) now hold dense " +
             "weights: this step replaced them, so their quantization is gone and they count at full size; put this step before " +
             "the quantization, or start from the unquantized model, to keep both");
}

// The error to give when a step failed and one of its layers holds NaN or infinite weights, the likely cause whatever
// the math that failed said (a weight check, a Hessian or inputs made non-finite by it); the tensor is named as its
// file names it, with the file. Empty when every layer is finite.
static std::optional<Error> nonFiniteLayerError(const Model& model, const std::vector<std::string>& layers, size_t stepNumber,
                                                const std::string& method) {
    for (const auto& layer : layers) {
        if (targetWeight(model, layer).isfinite().all().item<bool>()) continue;
        const std::string name = targetWeightName(model, layer);
        const std::string spelt = model.format == "gguf" ? gguf::ggufName(model.spec.family, name) : std::string();
        const std::string tensor = spelt.empty() || spelt == name ? "'" + name + "'" : "'" + spelt + "' ('" + name + "')";
        const std::string& file = model.tensor(name).file;
        return Error(file.empty() ? model.path : file, "step " + std::to_string(stepNumber) + " (" + method + "): tensor " + tensor +
                                                           " has NaN or infinite values; the model file is damaged or was saved "
                                                           "from a diverged run");
    }
    return std::nullopt;
}

CompressionResult compressModel(const Model& base, const Recipe& recipe, const CalibrationSpec& calibration, Feedback* feedback,
                                const StepObserver& onStep) {
    recipe.validate("recipe");
    const std::string badParams = recipeParamsProblem(recipe);   // before the calibration text is read
    if (!badParams.empty()) throw Error(badParams);
    const std::string badLayers = recipeLayersProblem(base, recipe);
    if (!badLayers.empty()) throw Error(badLayers);
    at::Tensor windows;
    std::string note;
    // Windows are drawn whenever a text is given: they also measure each step's reconstruction error.
    if (needsCalibration(recipe) || !calibration.textPath.empty()) {
        if (calibration.textPath.empty())
            throw Error("the recipe has a step that needs calibration data; give a text file (--calib FILE)");
        if (!base.tokenizer) throw Error(base.path, "calibration needs the model's tokenizer, and it has none");
        std::vector<TokenId> tokens = base.tokenizer->encode(readTextFile(calibration.textPath), base.tokenizer->addBosByDefault());
        windows = drawCalibration(tokens, base.tokenizer->textBos(), calibration, base.spec.context, &note);
        if (feedback && !note.empty()) feedback->log(note);
    }
    const CalibrationCompute compute = resolveCalibrationCompute(calibration);
    if (feedback && compute.device.is_cuda() && windows.defined())
        feedback->log("calibration and GPTQ/SparseGPT math on " + compute.device.str());
    CompressionResult result = compressModel(base, recipe, windows, feedback, onStep, compute);
    result.calibrationNote = note;
    return result;
}

CompressionResult compressModel(const Model& base, const Recipe& recipe, const at::Tensor& windows, Feedback* feedback,
                                const StepObserver& onStep, const CalibrationCompute& compute) {
    recipe.validate("recipe");
    // A step's parameters that would fail it (a distillation's data file): before the steps ahead of it run. Every
    // caller (GUI, export, bench, project runs) comes through here.
    const std::string badParams = recipeParamsProblem(recipe);
    if (!badParams.empty()) throw Error(badParams);
    // Heads or blocks the model lacks, patterns that match no layer: before the steps ahead of them run.
    const std::string badLayers = recipeLayersProblem(base, recipe);
    if (!badLayers.empty()) throw Error(badLayers);
    if (needsCalibration(recipe) && !windows.defined())
        throw Error("the recipe has a step that needs calibration data; give a text file (--calib FILE)");
    CompressionResult result;
    result.model = base.clone();
    if (windows.defined()) {
        result.calibrationSamples = windows.size(0);
        result.calibrationSeqLen = windows.size(1);
    }
    const size_t steps = recipe.steps.size();
    for (size_t i = 0; i < steps; ++i) {
        const RecipeStep& step = recipe.steps[i];
        if (!step.enabled) continue;
        const CompressionMethod* method = MethodRegistry::instance().find(step.method);
        nlohmann::json params = resolveParams(step.method, method->params(), step.params);
        // A step that does not calibrate (RTN, magnitude) leaves its reconstruction errors to a pass over every block,
        // which takes most of its time: that pass gets most of the step's progress, and is cancelled as it goes (it
        // ran without either, and the bar stood still while it did).
        const double applyShare = windows.defined() && !method->needsCalibration(params) ? 0.2 : 1.0;
        SubFeedback stepFeedback(feedback, double(i) / double(steps), double(i + 1) / double(steps));
        SubFeedback sub(&stepFeedback, 0.0, applyShare), measuring(&stepFeedback, applyShare, 1.0);
        StepContext ctx{*result.model, step, std::move(params), targetLayers(*result.model, step), windows, &sub, {}, &base, compute, {}};
        checkPatternsMatch(*result.model, step, ctx.layers, stepWhere(step, i + 1));
        // Structural steps (heads, channels, blocks, training) act on the model, not on their target layers one by one:
        // no count of linear layers for them.
        if (feedback) feedback->log("step " + std::to_string(i + 1) + "/" + std::to_string(steps) + ": " + step.method +
                                    (method->actsPerLinearLayer() ? " on " + std::to_string(ctx.layers.size()) + " layers" : ""));
        auto t0 = std::chrono::steady_clock::now();
        std::unique_ptr<Model> before = result.model->clone();
        try {
            method->apply(ctx);
        } catch (const Cancelled&) {
            throw;
        } catch (const Error&) {
            if (std::optional<Error> cause = nonFiniteLayerError(*before, ctx.layers, i + 1, step.method)) throw *cause;
            throw;
        }
        noteLayersMadeDense(*before, *result.model, ctx);
        StepReport report;
        report.method = step.method;
        report.version = method->version();
        report.params = ctx.params;
        report.layers = static_cast<int64_t>(ctx.layers.size());
        report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        report.notes = ctx.notes;
        if (measuredInStep(ctx, *before, *result.model)) {
            report.reconstructionError = *ctx.reconstructionErrors;
            if (feedback) feedback->log("step " + std::to_string(i + 1) + ": reconstruction errors measured in the step's own pass");
        } else {
            report.reconstructionError = reconstructionErrors(*before, *result.model, ctx.layers, windows, feedback ? &measuring : nullptr, compute);
        }
        if (onStep) onStep(report, *result.model);
        result.steps.push_back(std::move(report));
    }
    result.model->spec.validate("compressed model");
    result.model->validateTensors();
    if (feedback) feedback->setProgress(1.0);
    return result;
}

} // namespace cwb
