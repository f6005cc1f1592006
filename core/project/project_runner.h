#pragma once
// Rebuilds and evaluates a project's variants: each variant's recipe is the concatenation of the recipes along
// its lineage (base → … → variant), calibrated with the project's calibration spec and evaluated on its
// evaluation text against the base (perplexity, KL, top-1, size). The CLI, the batch runner and the GUI share it.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/compress/recipe.h"
#include "core/project/project.h"
#include "core/eval/perplexity.h"
#include "core/runtime/transformer.h"

namespace cwb {

class Model;
class Feedback;

// Metrics whose values depend on the machine's speed; reported, never compared.
bool isTimingMetric(const std::string& metric);
// Decode latency and prefill speed, which the GUI's Measure Latency stores beside a run's results.
bool isLatencyMetric(const std::string& metric);
// The rows to store for `variant` after a new evaluation (`measured`, measured from `basis`): those, and the latency
// rows stored before when they were measured from the same recipe and model (a run measures quality, not speed, and
// texts, windows and tokenizer do not change a latency). A re-run once dropped them without a word (GUI probe).
std::vector<ResultRow> keepingLatency(const Project& project, const std::string& variant, std::vector<ResultRow> measured,
                                      const nlohmann::json& basis);

// Per-layer metrics are stored as "<metric>/<layer>": "reconstruction_error/model.layers.0.mlp.up_proj" holds
// ‖WX − ŴX‖² / ‖WX‖² of the last step that changed that layer (rows exist when the project has calibration text).
extern const char* const kReconstructionErrorPrefix;   // "reconstruction_error/"
bool isPerLayerMetric(const std::string& metric);
std::string layerOfMetric(const std::string& metric);   // the part after the first '/', or ""

class ProjectRunner {
public:
    // `base` must be the project's model (the caller loads it, possibly from a moved path).
    ProjectRunner(const Project& project, const Model& base, RuntimeOptions options = {});
    ~ProjectRunner();

    Recipe fullRecipe(const std::string& variant) const;
    // fullRecipe with relative file parameters (distill.kd's data and checkpoint) made absolute against the project
    // file's folder (withPathsFrom; the working folder for a project not saved yet): what build() runs.
    Recipe runnableRecipe(const std::string& variant) const;
    // Why building `variant` would fail before it starts ("" when it would not): a pattern naming no layer of the
    // base, or a calibrated step in a project without calibration text. Callers ask for every variant up front, so
    // a replay does not fail on its last variant after hours of the others. Throws as fullRecipe does.
    std::string buildProblem(const std::string& variant) const;
    // Whether a build measures each step's reconstruction error on the calibration windows (lastReconstructionErrors):
    // a pass over every block, most of the time of a step that does not calibrate.
    enum class ErrorPass { Skip, Measure };
    // Builds the variant from the base; throws cwb::Error or Cancelled.
    std::unique_ptr<Model> build(const std::string& variant, Feedback* feedback, ErrorPass errors = ErrorPass::Skip);
    // "base" or a variant name: the rows to store (device, threads, build and time filled in).
    std::vector<ResultRow> evaluate(const std::string& variant, Feedback* feedback);
    // Perplexity of another model (an export read back) on the project's evaluation, as evaluate() measures the
    // variants: same tokens, windows and runtime options. Throws cwb::Error when the project has no evaluation text.
    PerplexityResult evaluateOther(const Model& model, Feedback* feedback);
    // The variant the last evaluate() built (nullptr after evaluating the base), for exporting it without a rebuild.
    const Model* lastBuilt() const { return mLastBuilt.get(); }
    // Notes of the last build (calibration clipping, method notes).
    const std::vector<std::string>& notes() const { return mNotes; }
    // Per-layer reconstruction error of the last build (ErrorPass::Measure, or steps that calibrate): ‖W₀X − ŴX‖² / ‖W₀X‖²
    // with W₀ the base's weight, Ŵ the variant's and X the layer's inputs in the finished variant, for every layer a step
    // changed. A variant of several steps leaves out layers with no such error (shape changed, blocks dropped).
    const std::map<std::string, double>& lastReconstructionErrors() const { return mLastErrors; }

private:
    const std::vector<TokenId>& evaluationTokens();
    const at::Tensor& calibrationWindows(Feedback* feedback);

    const Project& mProject;
    const Model& mBase;
    RuntimeOptions mOptions;
    std::vector<TokenId> mEvalTokens;
    at::Tensor mCalibration;
    bool mCalibrationDrawn = false;
    std::vector<std::string> mNotes;
    std::map<std::string, double> mLastErrors;
    std::unique_ptr<Model> mLastBuilt;
};

} // namespace cwb
