#include "core/project/project_runner.h"

#include <ATen/Parallel.h>

#include <chrono>
#include <ctime>
#include <filesystem>

#include "core/compress/pipeline.h"
#include "core/eval/divergence.h"
#include "core/model/compressed_linear.h"
#include "core/model/model.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "core/version.h"

namespace cwb {

namespace {

std::string nowUtc() {
    std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

double linearBitsPerWeight(const Model& m, const Model& base) {
    double bytes = 0, params = 0;
    for (const auto& layer : m.linearLayers()) {
        auto c = m.compressed(layer);
        bytes += c ? double(c->storageBytes()) : double(m.tensor(layer + ".weight").storedBytes());
    }
    for (const auto& layer : base.linearLayers()) params += double(base.tensor(layer + ".weight").elementCount());
    return params > 0 ? 8.0 * bytes / params : 0.0;
}

} // namespace

const char* const kReconstructionErrorPrefix = "reconstruction_error/";

bool isPerLayerMetric(const std::string& metric) { return metric.find('/') != std::string::npos; }

std::string layerOfMetric(const std::string& metric) {
    const size_t slash = metric.find('/');
    return slash == std::string::npos ? std::string() : metric.substr(slash + 1);
}

bool isTimingMetric(const std::string& metric) {
    return metric == "compress_seconds" || metric == "eval_tokens_per_second" || metric == "decode_ms_p50" ||
           metric == "prefill_tokens_per_second";
}

bool isLatencyMetric(const std::string& metric) { return metric == "decode_ms_p50" || metric == "prefill_tokens_per_second"; }

std::vector<ResultRow> keepingLatency(const Project& project, const std::string& variant, std::vector<ResultRow> measured,
                                      const nlohmann::json& basis) {
    const nlohmann::json& before = project.resultBasis(variant);
    if (before.is_null() || !basis.is_object()) return measured;
    for (const char* part : {"steps", "model"})
        if (before.value(part, nlohmann::json()) != basis.value(part, nlohmann::json())) return measured;
    for (const ResultRow& r : project.results(variant))
        if (isLatencyMetric(r.metric)) measured.push_back(r);
    return measured;
}

ProjectRunner::ProjectRunner(const Project& project, const Model& base, RuntimeOptions options)
    : mProject(project), mBase(base), mOptions(options) {}

ProjectRunner::~ProjectRunner() = default;

Recipe ProjectRunner::fullRecipe(const std::string& variant) const {
    Recipe full;
    for (const auto& name : mProject.lineage(variant)) {
        Recipe r = Recipe::fromJson(mProject.variant(name).recipe, mProject.path() + " (variant " + name + ")");
        full.steps.insert(full.steps.end(), r.steps.begin(), r.steps.end());
    }
    return full;
}

Recipe ProjectRunner::runnableRecipe(const std::string& variant) const {
    const std::string& file = mProject.path();
    return withPathsFrom(fullRecipe(variant), file.empty() ? "" : std::filesystem::absolute(file).parent_path().string());
}

std::string ProjectRunner::buildProblem(const std::string& variant) const {
    if (variant == Project::kBaseName) return "";
    const Recipe recipe = runnableRecipe(variant);
    const std::string layers = recipeLayersProblem(mBase, recipe);
    if (!layers.empty()) return layers;
    const std::string params = recipeParamsProblem(recipe);
    if (!params.empty()) return params;
    if (recipeNeedsCalibration(recipe) && mProject.settings().calibration.path.empty())
        return "a step needs calibration text, and the project has none (cwb project set " + mProject.path() + " --calib FILE)";
    return "";
}

const std::vector<TokenId>& ProjectRunner::evaluationTokens() {
    checkStoredSettings(mProject.settings(), mProject.path());
    if (mEvalTokens.empty()) {
        const std::string& path = mProject.settings().evaluation.path;
        if (path.empty()) throw Error(mProject.path(), "the project has no evaluation text (project create --eval FILE)");
        if (!mBase.tokenizer)
            throw Error(mBase.path, "has no tokenizer to evaluate with (give it one: --tokenizer FILE, or Project ▸ Use "
                                    "Tokenizer File in the GUI)");
        mEvalTokens = mBase.tokenizer->encode(readTextFile(path), mBase.tokenizer->addBosByDefault());
    }
    return mEvalTokens;
}

const at::Tensor& ProjectRunner::calibrationWindows(Feedback* feedback) {
    checkStoredSettings(mProject.settings(), mProject.path());
    if (mCalibrationDrawn) return mCalibration;
    const ProjectSettings& s = mProject.settings();
    if (!s.calibration.path.empty()) {
        if (!mBase.tokenizer)
            throw Error(mBase.path, "calibration needs the model's tokenizer, and it has none (give it one: --tokenizer "
                                    "FILE, or Project ▸ Use Tokenizer File in the GUI)");
        CalibrationSpec spec{s.calibration.path, s.calibrationSamples, s.calibrationSeqLen, s.calibrationSeed};
        std::string note;
        mCalibration = drawCalibration(mBase.tokenizer->encode(readTextFile(spec.textPath), mBase.tokenizer->addBosByDefault()), mBase.tokenizer->textBos(),
                                       spec, mBase.spec.context, &note);
        if (!note.empty()) {
            mNotes.push_back(note);
            if (feedback) feedback->log(note);
        }
    }
    mCalibrationDrawn = true;
    return mCalibration;
}

std::unique_ptr<Model> ProjectRunner::build(const std::string& variant, Feedback* feedback, ErrorPass errors) {
    mNotes.clear();
    mLastErrors.clear();
    Recipe recipe = runnableRecipe(variant);
    // Windows given at all also measure each step's reconstruction error, in a pass over every block: a variant built
    // to generate text, time or export with was paying it (12 s for RTN of stories260K against 0.5 s, GUI probe).
    const bool windows = errors == ErrorPass::Measure || recipeNeedsCalibration(recipe);
    // With several steps, a step's error is against the weights and inputs as the steps before it left them: a
    // quantize-then-prune variant's prune error said nothing of its quantization, and could not be set beside a
    // one-step variant's. One more pass measures each layer against the base's weights in the finished variant.
    size_t enabledSteps = 0;
    for (const auto& step : recipe.steps) enabledSteps += step.enabled ? 1 : 0;
    const bool againstBase = errors == ErrorPass::Measure && enabledSteps > 1;
    SubFeedback steps(feedback, 0.0, againstBase ? 0.85 : 1.0), finalPass(feedback, 0.85, 1.0);
    const at::Tensor calibration = windows ? calibrationWindows(feedback) : at::Tensor();
    CompressionResult result = compressModel(mBase, recipe, calibration, feedback ? &steps : nullptr);
    for (const auto& step : result.steps) {
        for (const auto& n : step.notes) mNotes.push_back(step.method + ": " + n);
        for (const auto& [layer, error] : step.reconstructionError) mLastErrors[layer] = error;
    }
    if (againstBase && calibration.defined() && !mLastErrors.empty()) {
        std::vector<std::string> layers;
        for (const auto& entry : mLastErrors) layers.push_back(entry.first);
        if (feedback) feedback->log("reconstruction errors of the finished variant against the base's weights");
        std::map<std::string, double> fromBase = reconstructionErrors(mBase, *result.model, layers, calibration, feedback ? &finalPass : nullptr);
        // A layer whose shape a step changed, or every layer once dropped blocks renumbered the rest, has no error
        // against the base; its last step's alone (an int8 rounding after 50% of the channels went) was drawn beside
        // the others as if the layer were barely changed (GUI probe). Such layers are left out, and said.
        if (fromBase.size() < mLastErrors.size()) {
            const std::string note = std::to_string(mLastErrors.size() - fromBase.size()) + " of " + std::to_string(mLastErrors.size()) +
                                     " changed layers have no reconstruction error against the base (" +
                                     (result.model->spec.layers != mBase.spec.layers ? "blocks were dropped, so block numbers differ"
                                                                                      : "a step changed their shape") + ")";
            mNotes.push_back(note);
            if (feedback) feedback->log(note);
        }
        mLastErrors = std::move(fromBase);
    }
    if (feedback) feedback->setProgress(1.0);
    return std::move(result.model);
}

PerplexityResult ProjectRunner::evaluateOther(const Model& model, Feedback* feedback) {
    const ProjectSettings& s = mProject.settings();
    if (s.evaluation.path.empty()) throw Error(mProject.path(), "has no evaluation text");
    PerplexityParams params;
    params.ctx = s.evalCtx;
    params.maxChunks = s.evalChunks;
    params.textPath = s.evaluation.path;
    const std::vector<TokenId>& tokens = evaluationTokens();   // names a missing tokenizer before bos() is asked
    Transformer runtime(model, mOptions);
    return evaluatePerplexity(runtime, tokens, mBase.tokenizer->textBos(), params, feedback);
}

std::vector<ResultRow> ProjectRunner::evaluate(const std::string& variant, Feedback* feedback) {
    const ProjectSettings& s = mProject.settings();
    PerplexityParams params;
    params.ctx = s.evalCtx;
    params.maxChunks = s.evalChunks;
    params.textPath = s.evaluation.path;
    const std::string device = mOptions.device.str();
    const int threads = at::get_num_threads();
    std::vector<ResultRow> rows;
    auto row = [&](const std::string& metric, double value, double error, double seconds) {
        rows.push_back({variant, metric, value, error, device, threads, seconds, nowUtc(),
                        std::string(versionString()) + " / LibTorch " + torchVersionString()});
    };
    const std::vector<TokenId>& tokens = evaluationTokens();
    if (variant == "base") {
        Transformer runtime(mBase, mOptions);
        PerplexityResult r = evaluatePerplexity(runtime, tokens, mBase.tokenizer->textBos(), params, feedback);
        row("perplexity", r.perplexity, r.error, r.seconds);
        row("bytes", double(mBase.storageBytes()), 0, 0);
        row("bits_per_weight", linearBitsPerWeight(mBase, mBase), 0, 0);
        row("eval_tokens_per_second", r.tokensPerSecond, 0, r.seconds);
        return rows;
    }
    SubFeedback buildFeedback(feedback, 0.0, 0.5), evalFeedback(feedback, 0.5, 1.0);
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Model> model = build(variant, &buildFeedback, ErrorPass::Measure);
    const double buildSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Transformer base(mBase, sharingMemory(mOptions, 2)), compressed(*model, sharingMemory(mOptions, 2));
    DivergenceResult d = compareModels(base, compressed, tokens, mBase.tokenizer->textBos(), params, &evalFeedback);
    row("perplexity", d.variant.perplexity, d.variant.error, d.variant.seconds);
    row("kl_mean", d.klMean, 0, 0);
    row("kl_p99", d.klP99, 0, 0);
    row("top1", d.top1Agreement, 0, 0);
    row("bytes", double(model->storageBytes()), 0, 0);
    row("bits_per_weight", linearBitsPerWeight(*model, mBase), 0, 0);
    row("compress_seconds", buildSeconds, 0, buildSeconds);
    for (const auto& [layer, error] : mLastErrors) row(kReconstructionErrorPrefix + layer, error, 0, 0);
    mLastBuilt = std::move(model);
    return rows;
}

} // namespace cwb
