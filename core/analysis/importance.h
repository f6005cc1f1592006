#pragma once
// Importance maps: how much each part of a model matters, measured on token windows. They feed the GUI's
// heatmaps and are stored in projects (ImportanceMap: row labels × column labels, row-major values).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/compress/sequential.h"
#include "core/project/project.h"

namespace cwb {

class CompressedLinear;
class Model;
class Feedback;
class Transformer;
struct SavedTransformerBlock;

// Kinds this build computes (stable ids stored in projects).
std::vector<std::string> importanceKinds();

// "heads.ablation": blocks × query heads; the increase of the mean next-token loss when one head's output is
//   removed (its columns of the output projection zeroed). Llama family.
// "linears.sensitivity": blocks × linear layers; the mean KL(base ‖ model) when only that layer is rounded to
//   int4 (RTN, group 32, symmetric), all others kept. "linears.delta_ppl": the same, as the perplexity change on
//   the windows. computeLayerSensitivity applies any recipe step instead and gives both maps from one pass.
// "channels.wanda": blocks × MLP intermediate channels; Wanda's |W|·‖X‖ of the down projection summed over the
//   outputs each channel feeds (X the channel's activations on the windows).
// "heads.gradient": blocks × query heads; mean over windows of |∂L/∂g_h|, g_h a gate on the head's output
//   (Michel et al. 2019); one backward pass per batch instead of one forward per head.
// "channels.gradient": blocks × MLP channels; 0.7·mean|∂L/∂a_c| (scaled to [0, 1] within the block) +
//   0.3·(1 − fraction of positions with |a_c| < 0.01). See gradient_importance.h.
// Short names: "head", "layer", "channel", "head-grad", "channel-grad".
// `windows` are token windows [samples, length] (see drawCalibration); throws cwb::Error or Cancelled.
// `compute` says where the forward passes run and the matrices' type (norms, softmax and losses stay fp32/fp64).
ImportanceMap computeImportance(const Model& model, const std::string& kind, const at::Tensor& windows, Feedback* feedback,
                                const CalibrationCompute& compute = {});
// Throws cwb::Error listing the kinds when `kind` is none of them (computeImportance does this first).
void checkImportanceKind(const std::string& kind);

// Where a kind computes, from a device name ("auto": CUDA when there is a GPU; "cpu", "cuda", "cuda:N") and a type
// ("f32", "f16", "bf16"; "": f32). Throws cwb::Error naming the bad value (or kind), or when the CPU cannot compute
// in the type.
CalibrationCompute importanceCompute(const std::string& device, const std::string& dtype, const std::string& kind);
// "cpu f32", "cuda:0 f16".
std::string describeCompute(const CalibrationCompute& compute);

// What a map records it was measured on (ImportanceMap::measuredWith): the text (path and hash), the windows drawn
// from it ([windows, tokens]) with their seed, and the device and type; for a per-layer sensitivity map (mapKind
// "linears.sensitivity" or "linears.delta_ppl") the step applied to each layer (`step`, or defaultSensitivityStep()
// when null), whose choice changes its values by orders of magnitude.
nlohmann::json importanceMeasurement(const std::string& textPath, const std::string& textHash, const at::Tensor& windows,
                                     uint64_t seed, const CalibrationCompute& compute, const std::string& mapKind = "",
                                     const nlohmann::json& step = nullptr);
// "8 windows of 128 tokens of calib.txt (seed 0), cuda:0 f16"; "" for a map that recorded nothing.
std::string describeImportanceMeasurement(const nlohmann::json& measuredWith);

struct LayerSensitivity {
    ImportanceMap kl;                // "linears.sensitivity"
    ImportanceMap deltaPerplexity;   // "linears.delta_ppl": PPL(model with the layer compressed) − PPL(model)
};
// The step applied to one layer at a time ({"method": ..., "params": {...}}; its targets are replaced by that
// layer); methods that calibrate use `windows`. Throws cwb::Error (bad step) or Cancelled.
// Calibrated steps calibrate on `compute`'s device in fp32. One runtime serves every layer: only the block whose layer
// changed is converted again (uploaded, on CUDA), so a 7B model is not copied to the GPU once per layer.
LayerSensitivity computeLayerSensitivity(const Model& model, const nlohmann::json& step, const at::Tensor& windows,
                                         Feedback* feedback, const CalibrationCompute& compute = {});
// Throws cwb::Error when `step` is not one recipe step that acts on one linear layer at a time (or names an unknown
// method or bad parameters); computeLayerSensitivity does this first.
void checkSensitivityStep(const nlohmann::json& step);
// RTN int4, group 32, symmetric: the step behind "linears.sensitivity" and "linears.delta_ppl".
nlohmann::json defaultSensitivityStep();
// A recipe step as a sensitivity step: its method and parameters, without what does not apply to one layer at a time
// (targets, ignore, overrides, "head"), named in `leftOut` when given. Null where the step cannot be one (a
// structured method, a disabled step, bad parameters).
nlohmann::json sensitivityProbe(const nlohmann::json& recipeStep, std::vector<std::string>* leftOut = nullptr);

// Mean next-token negative log-likelihood of the windows (every position but the last predicts the next).
double meanLoss(const Model& model, const at::Tensor& windows, const CalibrationCompute& compute = {});

// The mean next-token NLL of a model on token windows, and its mean KL(base ‖ model) per position.
struct WindowComparison {
    double meanLoss = 0;
    double meanKl = 0;
};

// Forward passes of a base model and of variants that differ from it in a few block tensors, on one runtime: a
// working copy of the base takes the variant's differing tensors, and only their blocks are converted again.
class VariantRunner {
public:
    VariantRunner(const Model& base, const CalibrationCompute& compute);
    ~VariantRunner();
    // Log-probabilities (fp64, on the CPU) of the windows, one tensor per batch of windowsPerBatch() windows, and
    // (when asked) their mean next-token NLL. Refused when they would take more than half of this machine's memory,
    // or when the forward pass gives non-finite logits (an f16 overflow, say).
    // `feedback` (optional) is checked for a cancel before each batch and told the fraction of windows done.
    std::vector<at::Tensor> logProbs(const at::Tensor& windows, double* meanLoss = nullptr, Feedback* feedback = nullptr);
    // Runs the windows a batch at a time and compares each batch with `base` (logProbs() of the same windows) as it
    // goes, so the device holds one batch of log-probabilities at a time.
    WindowComparison compare(const at::Tensor& windows, const std::vector<at::Tensor>& base, Feedback* feedback = nullptr);
    // Computes as `variant` until reset(). False (nothing changed) when they differ outside the blocks (embeddings,
    // output head, final norm) or in their architecture: the caller then runs the variant on a runtime of its own.
    bool apply(const Model& variant);
    void reset();
    // compare() with `head` (dequantized, its input prepared as the layer's) in place of the base's output head, the
    // blocks the base's: a quantized head measured without a second runtime of the whole model.
    WindowComparison compareWithHead(const at::Tensor& windows, const std::vector<at::Tensor>& base, const CompressedLinear& head,
                                     Feedback* feedback = nullptr);
    const Transformer& runtime() const { return *mRuntime; }   // its layer paths, for reports and tests
    // Windows per forward pass: up to 8, fewer where their logits would pass 2^26 (a large vocabulary, long windows).
    static int64_t windowsPerBatch(int64_t length, int64_t vocab);
    // Tests: smaller limits (logits per forward pass, fp64 logits per chunk), so that small models cross batch and
    // chunk boundaries; 0 restores the defaults. Not thread-safe: set before any run.
    static void setLogitLimitsForTesting(int64_t batchLogits, int64_t chunkLogits);

private:
    const Model& mBase;
    std::unique_ptr<Model> mWork;
    std::unique_ptr<Transformer> mRuntime;
    std::vector<std::string> mAdopted;
    std::map<int64_t, std::shared_ptr<SavedTransformerBlock>> mSetAside;   // the base's blocks while a variant runs
};

// Throws when the base's fp64 log-probabilities over `windows` at `vocab` would take more than half of this machine's
// memory (VariantRunner::logProbs keeps them on the host); called before any pass, and before a budget's quantization.
void checkBaseLogProbMemory(const at::Tensor& windows, int64_t vocab);

// --device auto picked CUDA: why the model would not fit the GPU ("" when it fits or memory is unknown). Its weights in
// the compute type, plus a quarter for activations and a working copy's swapped block, against `freeBytes`.
std::string autoDeviceFitProblem(const Model& model, at::ScalarType type, int64_t freeBytes);
// For --device auto: the CPU in place of a GPU the model does not fit, with the reason in `note` (else unchanged).
CalibrationCompute fitAutoDevice(const Model& model, const CalibrationCompute& compute, std::string* note);

// compare() on a runtime of the variant's own (a variant VariantRunner::apply refuses).
WindowComparison compareWindows(Transformer& runtime, const at::Tensor& windows, const std::vector<at::Tensor>& base,
                                Feedback* feedback = nullptr);

} // namespace cwb
