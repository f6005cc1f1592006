#include "core/analysis/importance.h"

#include <algorithm>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>

#include <c10/core/DeviceGuard.h>

#include "core/analysis/gradient_importance.h"
#include "core/compress/compressed_layers.h"
#include "core/compress/method.h"
#include "core/compress/pipeline.h"
#include "core/compress/recipe.h"
#include "core/compress/prune_math.h"
#include "core/compress/sequential.h"
#include "core/model/model.h"
#include "core/runtime/cuda_linear.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

namespace {

RuntimeOptions runtimeOptionsFor(const CalibrationCompute& compute) {
    RuntimeOptions options;
    options.device = compute.device;
    options.dtype = compute.forwardType;
    return options;
}

// Block of a tensor name ("model.layers.3.mlp.up_proj.weight", "transformer.h.3.attn.c_attn.weight"); -1 for the
// embeddings, the output head and the final norm.
int64_t blockOfTensor(const std::string& name) {
    for (const std::string prefix : {"model.layers.", "transformer.h."}) {
        if (name.compare(0, prefix.size(), prefix) != 0) continue;
        const size_t end = name.find('.', prefix.size());
        if (end == std::string::npos) return -1;
        const std::string digits = name.substr(prefix.size(), end - prefix.size());
        if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
        return std::stoll(digits);
    }
    return -1;
}

// Logits of one forward pass (f32: 256 MiB), unless one window alone has more: a 128k vocabulary at 1024 tokens is 131M
// logits per window, so a batch of 8 such windows would take 4 GiB before any fp64 copy.
int64_t kBatchLogits = int64_t(1) << 26;
// fp64 log-probabilities are made and compared this many logits at a time (32 MiB each), not a whole batch at once.
int64_t kChunkLogits = int64_t(1) << 22;

void requireFinite(const at::Tensor& logits, const Transformer& runtime) {
    if (at::isfinite(logits).all().item<bool>()) return;
    const at::ScalarType t = logits.scalar_type();
    throw Error(std::string("the forward pass gave non-finite logits") +
                (t == at::kHalf || t == at::kBFloat16 ? " (an overflow in " + std::string(t == at::kHalf ? "f16" : "bf16") +
                                                            "?): compute in f32 (--dtype f32)"
                                                      : ": the model or this variant of it computes inf or NaN") +
                " on " + runtime.options().device.str());
}

// The forward pass of each batch of windows, in fp64 log-probabilities a chunk of positions at a time:
// visit(first window of the batch, batch size, first row of the chunk in the batch's [n·T] rows, log-probs [rows, V]).
// `logitsOf`, when given, computes a batch's logits in place of runtime.forward (e.g. with another output head).
// `feedback`, when given, is checked for a cancel before each batch and told the fraction of windows done after it.
template <typename Visit>
void forEachLogProbChunk(Transformer& runtime, const at::Tensor& windows, Visit visit, Feedback* feedback,
                         const std::function<at::Tensor(const at::Tensor& tokens)>& logitsOf = {}) {
    const int64_t length = windows.size(1), vocab = std::max<int64_t>(1, runtime.model().spec.vocab);
    const int64_t perBatch = VariantRunner::windowsPerBatch(length, vocab);
    const int64_t rowsPerChunk = std::max<int64_t>(1, kChunkLogits / vocab);
    for (int64_t first = 0; first < windows.size(0); first += perBatch) {
        if (feedback) feedback->throwIfCancelled();
        const int64_t n = std::min(perBatch, windows.size(0) - first);
        const at::Tensor tokens = windows.narrow(0, first, n).to(at::kLong);
        const at::Tensor logits = logitsOf ? logitsOf(tokens) : runtime.forward(tokens);
        requireFinite(logits, runtime);
        const at::Tensor rows = logits.reshape({n * length, logits.size(-1)});
        for (int64_t row = 0; row < rows.size(0); row += rowsPerChunk) {
            const int64_t count = std::min(rowsPerChunk, rows.size(0) - row);
            visit(first, n, row, at::log_softmax(rows.narrow(0, row, count).to(at::kDouble), -1));
        }
        if (feedback) feedback->setProgress(double(first + n) / double(windows.size(0)));
    }
}

// Summed next-token NLL of the log-probabilities of `count` rows from `row` of the [n·T] rows of windows first.. .
double summedLoss(const at::Tensor& logProbs, const at::Tensor& windows, int64_t first, int64_t n, int64_t row) {
    const int64_t length = windows.size(1), count = logProbs.size(0);
    // Row r is position r % T of window r / T; it predicts the next token, the last position none.
    const at::Tensor next = at::cat({windows.narrow(0, first, n).narrow(1, 1, length - 1).to(at::kLong),
                                     at::zeros({n, 1}, at::kLong)}, 1).reshape({n * length}).narrow(0, row, count);
    const at::Tensor predicts = (at::arange(row, row + count, at::kLong) % length != length - 1).to(at::kDouble);
    const at::Tensor picked = logProbs.gather(1, next.to(logProbs.device()).unsqueeze(1)).squeeze(1);
    return -(picked * predicts.to(logProbs.device())).sum().item<double>();
}

std::vector<at::Tensor> logProbsOf(Transformer& runtime, const at::Tensor& windows, double* meanLoss, Feedback* feedback) {
    const int64_t length = windows.size(1), vocab = runtime.model().spec.vocab;
    checkBaseLogProbMemory(windows, vocab);
    std::vector<at::Tensor> out;
    double loss = 0;
    forEachLogProbChunk(runtime, windows, [&](int64_t first, int64_t n, int64_t row, const at::Tensor& lp) {
        if (row == 0) out.push_back(at::empty({n * length, lp.size(1)}, at::kDouble));
        out.back().narrow(0, row, lp.size(0)).copy_(lp);
        loss += summedLoss(lp, windows, first, n, row);
    }, feedback);
    for (at::Tensor& batch : out) batch = batch.view({-1, length, batch.size(1)});
    if (meanLoss) *meanLoss = loss / double(windows.size(0) * (length - 1));
    return out;
}

// The mean NLL without keeping the log-probabilities (head ablation runs this once per head).
double meanLossOn(Transformer& runtime, const at::Tensor& windows) {
    double sum = 0;
    forEachLogProbChunk(runtime, windows, [&](int64_t first, int64_t n, int64_t row, const at::Tensor& lp) {
        sum += summedLoss(lp, windows, first, n, row);
    }, nullptr);
    return sum / double(windows.size(0) * (windows.size(1) - 1));
}

std::string suffixLabel(const std::string& layer) {
    const auto dot = layer.rfind('.');
    return dot == std::string::npos ? layer : layer.substr(dot + 1);
}

void checkWindows(const at::Tensor& windows) {
    if (!windows.defined() || windows.dim() != 2 || windows.size(0) < 1 || windows.size(1) < 2)
        throw Error("importance needs token windows [samples, length >= 2] (a text file)");
}

// Zeroing a head's gate removes its output as zeroing its columns of o_proj would, on one runtime for every head
// (no copy of the model per head, and on CUDA no upload per head).
ImportanceMap headAblation(const Model& model, const at::Tensor& windows, Feedback* feedback, const CalibrationCompute& compute) {
    if (model.spec.family != Family::Llama) throw Error("heads.ablation supports the Llama family only");
    const ArchSpec& s = model.spec;
    std::vector<at::Tensor> gates;
    for (int64_t l = 0; l < s.layers; ++l)
        gates.push_back(at::ones({s.headsAt(l)}, at::TensorOptions().dtype(at::kFloat).device(compute.device)));
    RuntimeOptions options = runtimeOptionsFor(compute);
    options.headGates = &gates;
    Transformer runtime(model, options);
    const double base = meanLossOn(runtime, windows);
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
        for (int64_t h = 0; h < s.headsAt(l); ++h) {
            if (feedback) {
                feedback->throwIfCancelled();
                feedback->setProgress(double(done++) / double(total));
            }
            at::Tensor gate = gates[size_t(l)].select(0, h);
            gate.fill_(0.0);
            map.values[static_cast<size_t>(l * maxHeads + h)] = meanLossOn(runtime, windows) - base;
            gate.fill_(1.0);
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

namespace {
// A step's progress and cancel, without its log lines ("step 1/1: ...", once per layer measured).
class ProgressOnly : public SubFeedback {
public:
    using SubFeedback::SubFeedback;

protected:
    void onLog(const std::string&) override {}
};
} // namespace

void checkSensitivityStep(const nlohmann::json& step) {
    if (!step.is_object() || !step.contains("method")) throw Error("the sensitivity step must be a recipe step {\"method\": ..., \"params\": {...}}");
    const std::string id = step["method"].is_string() ? step["method"].get<std::string>() : "";
    const CompressionMethod* method = MethodRegistry::instance().find(id);
    // Given one linear layer, a structured method removed what that layer alone could not carry (a head's q rows
    // only), and the map showed meaningless numbers; heads.ablation and channels.* measure those structures instead.
    if (method && !method->actsPerLinearLayer())
        throw Error("the sensitivity step " + id + " changes whole heads, channels, blocks or the whole model, not one linear "
                    "layer at a time; per-layer sensitivity takes quantization or unstructured pruning (for heads and "
                    "channels use --kind head or channel)");
    Recipe::fromJson({{"steps", nlohmann::json::array({step})}}, "sensitivity step");   // unknown methods, bad parameters
    // The head would be quantized beside every layer measured (or, "only", instead of it).
    const nlohmann::json params = step.value("params", nlohmann::json::object());
    if (params.is_object() && params.value("head", std::string("none")) != "none")
        throw Error("the sensitivity step quantizes the output head (\"head\": \"" + params["head"].get<std::string>() +
                    "\"); per-layer sensitivity measures one block layer at a time, so leave \"head\" out");
}

nlohmann::json defaultSensitivityStep() {
    return {{"method", "quantize.rtn"}, {"params", {{"bits", 4}, {"group_size", 32}}}};
}

nlohmann::json sensitivityProbe(const nlohmann::json& recipeStep, std::vector<std::string>* leftOut) {
    if (!recipeStep.is_object() || !recipeStep.value("enabled", true) || !recipeStep.contains("method")) return nullptr;
    nlohmann::json probe = {{"method", recipeStep["method"]},
                            {"params", recipeStep.value("params", nlohmann::json::object())}};
    std::vector<std::string> left;
    for (const char* field : {"targets", "ignore", "overrides"})
        if (recipeStep.contains(field) && !recipeStep[field].empty()) left.push_back(field);
    if (probe["params"].is_object() && probe["params"].contains("head")) {
        if (probe["params"]["head"] != "none") left.push_back("head");
        probe["params"].erase("head");
    }
    try {
        checkSensitivityStep(probe);
    } catch (const Error&) {
        return nullptr;
    }
    if (leftOut) *leftOut = left;
    return probe;
}

LayerSensitivity computeLayerSensitivity(const Model& model, const nlohmann::json& step, const at::Tensor& windows,
                                         Feedback* feedback, const CalibrationCompute& compute) {
    checkWindows(windows);
    checkSensitivityStep(step);
    VariantRunner runner(model, compute);
    const std::vector<std::string> layers = model.linearLayers();
    // The base's pass, then each layer's compression and pass, in equal shares of the progress: the base pass alone
    // takes minutes on a 7B model, and each step's compression (GPTQ, say) as long again.
    const double share = 1.0 / double(layers.size() + 1);
    double baseLoss = 0;
    SubFeedback basePass(feedback, 0, share);
    const std::vector<at::Tensor> base = runner.logProbs(windows, &baseLoss, feedback ? &basePass : nullptr);
    const CalibrationCompute calibrate{compute.device, at::kFloat};
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
        const double begin = double(i + 1) * share;
        ProgressOnly compressing(feedback, begin, begin + share / 2);
        SubFeedback measuring(feedback, begin + share / 2, begin + share);
        if (feedback) {
            feedback->throwIfCancelled();
            feedback->setProgress(begin);
        }
        const std::string& layer = layers[i];
        nlohmann::json only = step;
        only["targets"] = exactPattern(layer);
        only.erase("ignore");
        const Recipe recipe = Recipe::fromJson({{"steps", nlohmann::json::array({only})}}, "sensitivity step");
        const bool calibrates = recipeNeedsCalibration(recipe);
        // Windows only for a step that calibrates: given them, compressModel also measures reconstruction errors,
        // a pass over every block that this map would throw away.
        const std::unique_ptr<Model> variant =
            compressModel(model, recipe, calibrates ? windows : at::Tensor(), feedback ? &compressing : nullptr, {}, calibrate).model;
        WindowComparison measured;
        try {
            if (runner.apply(*variant)) {
                measured = runner.compare(windows, base, feedback ? &measuring : nullptr);
                runner.reset();
            } else {
                Transformer own(*variant, sharingMemory(runtimeOptionsFor(compute), 2));
                measured = compareWindows(own, windows, base, feedback ? &measuring : nullptr);
            }
        } catch (const Cancelled&) {
            throw;
        } catch (const Error& e) {
            throw Error("layer " + layer + " compressed: " + e.what());
        }
        const double kl = measured.meanKl;
        const int64_t row = std::stoll(layer.substr(layer.find_first_of("0123456789")));
        const size_t column = static_cast<size_t>(std::find(columns.begin(), columns.end(), suffixLabel(layer)) - columns.begin());
        const size_t cell = static_cast<size_t>(row) * columns.size() + column;
        result.kl.values[cell] = std::max(0.0, kl);
        result.deltaPerplexity.values[cell] = std::exp(measured.meanLoss) - std::exp(baseLoss);
    }
    return result;
}

namespace {

// Wanda's |W|·‖X‖ summed over the outputs each intermediate MLP channel feeds: blocks × channels.
ImportanceMap channelWanda(const Model& model, const at::Tensor& windows, Feedback* feedback, const CalibrationCompute& compute) {
    const bool llama = model.spec.family == Family::Llama;
    const std::string suffix = llama ? "mlp.down_proj" : "mlp.c_proj";
    auto layerName = [&](int64_t l) { return llama ? names::llamaLayer(l, suffix) : names::gpt2Layer(l, suffix); };
    std::map<int64_t, std::unique_ptr<prune::InputNormAccumulator>> norms;
    SequentialPass pass;
    pass.compute = compute;
    pass.layersOf = [&](int64_t b) { return b < model.spec.layers ? std::vector<std::string>{layerName(b)} : std::vector<std::string>{}; };
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

double meanLoss(const Model& model, const at::Tensor& windows, const CalibrationCompute& compute) {
    checkWindows(windows);
    Transformer runtime(model, runtimeOptionsFor(compute));
    return meanLossOn(runtime, windows);
}

namespace {

WindowComparison compareChunks(Transformer& runtime, const at::Tensor& windows, const std::vector<at::Tensor>& base,
                               Feedback* feedback, const std::function<at::Tensor(const at::Tensor&)>& logitsOf) {
    checkWindows(windows);
    const int64_t length = windows.size(1);
    double loss = 0, kl = 0;
    size_t batch = 0;
    forEachLogProbChunk(runtime, windows, [&](int64_t first, int64_t n, int64_t row, const at::Tensor& lp) {
        if (row == 0 && first > 0) ++batch;
        if (batch >= base.size() || base[batch].size(0) != n || base[batch].size(1) != length || base[batch].size(2) != lp.size(1))
            throw Error("internal: the base's log-probabilities are not of these windows");
        const at::Tensor reference = base[batch].view({n * length, lp.size(1)}).narrow(0, row, lp.size(0)).to(lp.device());
        loss += summedLoss(lp, windows, first, n, row);
        kl += (reference.exp() * (reference - lp)).sum().item<double>();
    }, feedback, logitsOf);
    const double meanKl = kl / double(windows.size(0) * length), meanLoss = loss / double(windows.size(0) * (length - 1));
    if (!std::isfinite(meanKl) || !std::isfinite(meanLoss))
        throw Error("the KL against the base is not finite (a probability the base gives is zero here)");
    return {meanLoss, meanKl};
}

} // namespace

WindowComparison compareWindows(Transformer& runtime, const at::Tensor& windows, const std::vector<at::Tensor>& base,
                                Feedback* feedback) {
    return compareChunks(runtime, windows, base, feedback, {});
}

WindowComparison VariantRunner::compareWithHead(const at::Tensor& windows, const std::vector<at::Tensor>& base,
                                                const CompressedLinear& head, Feedback* feedback) {
    reset();
    Transformer& runtime = *mRuntime;
    const RuntimeOptions& options = runtime.options();
    const at::Tensor weight = head.weightOn(options.device).to(options.dtype);   // once, not per batch
    return compareChunks(runtime, windows, base, feedback, [&](const at::Tensor& tokens) {
        at::Tensor hidden = runtime.embed(tokens);
        for (int64_t b = 0; b < runtime.model().spec.layers; ++b) hidden = runtime.runBlock(b, hidden);
        const at::Tensor x = runtime.finalNorm(hidden);
        return at::linear(head.prepareInput(x.to(at::kFloat)).to(x.scalar_type()), weight).to(at::kFloat);
    });
}

void VariantRunner::setLogitLimitsForTesting(int64_t batchLogits, int64_t chunkLogits) {
    kBatchLogits = batchLogits > 0 ? batchLogits : int64_t(1) << 26;
    kChunkLogits = chunkLogits > 0 ? chunkLogits : int64_t(1) << 22;
}

void checkBaseLogProbMemory(const at::Tensor& windows, int64_t vocab) {
    // Kept in fp64 (the KL of an insensitive layer is ~1e-6 of a 7B model's; fp32 would round it).
    const int64_t length = windows.size(1);
    const double bytes = double(windows.size(0)) * double(length) * double(std::max<int64_t>(1, vocab)) * 8.0;
    const double physical = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
    if (physical > 0 && bytes > physical / 2) {
        char text[256];
        std::snprintf(text, sizeof text, "%.1f GiB, more than half of this machine's memory (%.1f GiB)", bytes / double(1 << 30),
                      physical / double(1 << 30));
        throw Error("the base model's log-probabilities over " + std::to_string(windows.size(0)) + " windows of " +
                    std::to_string(length) + " tokens (a vocabulary of " + std::to_string(vocab) + ") take " + text +
                    ": use fewer or shorter windows");
    }
}

std::string autoDeviceFitProblem(const Model& model, at::ScalarType type, int64_t freeBytes) {
    if (freeBytes < 0) return "";
    const double need = double(model.parameterCount()) * double(c10::elementSize(type)) * 1.25;
    if (need <= double(freeBytes)) return "";
    char text[200];
    std::snprintf(text, sizeof text, "its weights in %s with room to work take about %.1f GiB, more than the GPU's %.1f GiB free",
                  type == at::kFloat ? "f32" : type == at::kHalf ? "f16" : "bf16", need / double(1 << 30),
                  double(freeBytes) / double(1 << 30));
    return text;
}

CalibrationCompute fitAutoDevice(const Model& model, const CalibrationCompute& compute, std::string* note) {
    if (!compute.device.is_cuda()) return compute;
    int64_t freeBytes = -1;
    {
        const c10::DeviceGuard onDevice(compute.device);   // the free memory of the GPU asked for
        freeBytes = deviceMemoryFreeBytes();
    }
    const std::string why = autoDeviceFitProblem(model, compute.forwardType, freeBytes);
    if (why.empty()) return compute;
    if (note)
        *note = "--device auto: " + why + "; computing on the CPU in f32 (--device cuda tries the GPU anyway" +
                (compute.forwardType == at::kFloat ? ", --dtype bf16 halves the weights)" : ")");
    return {at::Device(at::kCPU), at::kFloat};
}

int64_t VariantRunner::windowsPerBatch(int64_t length, int64_t vocab) {
    return std::max<int64_t>(1, std::min<int64_t>(8, kBatchLogits / std::max<int64_t>(1, length * vocab)));
}

VariantRunner::VariantRunner(const Model& base, const CalibrationCompute& compute)
    : mBase(base), mWork(base.clone()), mRuntime(std::make_unique<Transformer>(*mWork, runtimeOptionsFor(compute))) {}

VariantRunner::~VariantRunner() = default;

std::vector<at::Tensor> VariantRunner::logProbs(const at::Tensor& windows, double* meanLoss, Feedback* feedback) {
    checkWindows(windows);
    return logProbsOf(*mRuntime, windows, meanLoss, feedback);
}

WindowComparison VariantRunner::compare(const at::Tensor& windows, const std::vector<at::Tensor>& base, Feedback* feedback) {
    return compareWindows(*mRuntime, windows, base, feedback);
}

bool VariantRunner::apply(const Model& variant) {
    reset();
    if (nlohmann::json(mBase.spec) != nlohmann::json(variant.spec)) return false;
    const std::vector<std::string> differing = mBase.differingTensors(variant);
    for (const std::string& name : differing) {
        // Outside the blocks, or a changed shape (the architecture changed): a runtime of the variant's own.
        if (blockOfTensor(name) < 0 || !mBase.has(name) || !variant.has(name) ||
            mBase.tensor(name).shape != variant.tensor(name).shape)
            return false;
    }
    for (const std::string& name : differing) {
        const int64_t block = blockOfTensor(name);
        // The base's block is kept as built, so reset() puts it back instead of converting (uploading) it again.
        if (!mSetAside.count(block)) mSetAside[block] = mRuntime->setBlockAside(block);
        mAdopted.push_back(name);   // before adopting: a throw midway leaves reset() knowing what to put back
        mWork->adoptTensor(variant, name);
    }
    return true;
}

void VariantRunner::reset() {
    for (const std::string& name : mAdopted) mWork->adoptTensor(mBase, name);
    for (auto& [block, saved] : mSetAside) mRuntime->restoreBlock(block, std::move(saved));
    mAdopted.clear();
    mSetAside.clear();
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

ImportanceMap computeImportance(const Model& model, const std::string& kind, const at::Tensor& windows, Feedback* feedback,
                                const CalibrationCompute& compute) {
    checkImportanceKind(kind);
    checkWindows(windows);
    ImportanceMap map;
    // "head", "layer" and "channel" are the short names the CLI documents.
    if (kind == "heads.ablation" || kind == "head") map = headAblation(model, windows, feedback, compute);
    else if (kind == "linears.sensitivity" || kind == "layer") map = computeLayerSensitivity(model, defaultSensitivityStep(), windows, feedback, compute).kl;
    else if (kind == "linears.delta_ppl" || kind == "layer-ppl") map = computeLayerSensitivity(model, defaultSensitivityStep(), windows, feedback, compute).deltaPerplexity;
    else if (kind == "channels.wanda" || kind == "channel") map = channelWanda(model, windows, feedback, compute);
    else if (kind == "heads.gradient" || kind == "head-grad") map = headGradientImportance(model, windows, feedback, compute);
    else if (kind == "channels.gradient" || kind == "channel-grad") map = channelGradientImportance(model, windows, feedback, {}, compute);
    // A stop asked for during the last (uninterruptible) pass still stops: the map is not reported as complete.
    if (feedback) {
        feedback->throwIfCancelled();
        feedback->setProgress(1.0);
    }
    return map;
}

CalibrationCompute importanceCompute(const std::string& device, const std::string& dtype, const std::string& kind) {
    CalibrationCompute compute;
    compute.device = resolveCompressionDevice(device);
    checkImportanceKind(kind);
    // f32 by default on every device: a layer's KL against the base can be ~1e-4 on a 7B model, the size of what
    // half-precision rounding adds to it, and backward passes in half precision underflow.
    if (dtype.empty() || dtype == "f32") compute.forwardType = at::kFloat;
    else if (dtype == "f16") compute.forwardType = at::kHalf;
    else if (dtype == "bf16") compute.forwardType = at::kBFloat16;
    else throw Error("--dtype must be f32, f16 or bf16, got '" + dtype + "'");
    // Per-position gradients (~p/T) fall below f16's smallest numbers; bf16 has fp32's range.
    if (compute.forwardType == at::kHalf && (kind == "heads.gradient" || kind == "head-grad" || kind == "channels.gradient" ||
                                             kind == "channel-grad"))
        throw Error("importance kind " + kind + " computes gradients, which underflow in f16: use --dtype f32 or bf16");
    requireComputeType(compute.device, compute.forwardType);
    return compute;
}

std::string describeCompute(const CalibrationCompute& compute) {
    const at::ScalarType t = compute.forwardType;
    return compute.device.str() + " " + (t == at::kHalf ? "f16" : t == at::kBFloat16 ? "bf16" : t == at::kFloat ? "f32" : c10::toString(t));
}

nlohmann::json importanceMeasurement(const std::string& textPath, const std::string& textHash, const at::Tensor& windows,
                                     uint64_t seed, const CalibrationCompute& compute, const std::string& mapKind,
                                     const nlohmann::json& step) {
    const std::string described = describeCompute(compute);
    nlohmann::json m = {{"text", textPath}, {"text_hash", textHash}, {"windows", windows.size(0)}, {"tokens", windows.size(1)},
                        {"seed", seed}, {"device", compute.device.str()}, {"dtype", described.substr(described.find(' ') + 1)}};
    if (mapKind == "linears.sensitivity" || mapKind == "linears.delta_ppl") m["step"] = step.is_null() ? defaultSensitivityStep() : step;
    return m;
}

std::string describeImportanceMeasurement(const nlohmann::json& m) {
    if (!m.is_object() || !m.contains("windows")) return "";
    const std::string text = m.value("text", "");
    const std::string name = text.substr(text.find_last_of('/') == std::string::npos ? 0 : text.find_last_of('/') + 1);
    const bool stepGiven = m.contains("step") && m["step"].is_object() && m["step"].contains("method");
    return std::to_string(m.value("windows", int64_t(0))) + " windows of " + std::to_string(m.value("tokens", int64_t(0))) +
           " tokens of " + name + " (seed " + std::to_string(m.value("seed", uint64_t(0))) + "), " + m.value("device", "cpu") +
           (m.contains("dtype") ? " " + m.value("dtype", "") : "") +
           (stepGiven ? ", each layer " + m["step"].value("method", std::string()) + " " +
                            (m["step"].contains("params") ? m["step"]["params"].dump() : std::string("{}"))
                      : std::string()) +
           (m.contains("model") && m["model"].is_object() ? ", model " + m["model"].value("path", std::string("?")) : "");
}

} // namespace cwb
