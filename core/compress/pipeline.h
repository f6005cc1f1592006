#pragma once
// Building a variant: draw calibration windows, then run the recipe's steps in order on a copy of the base.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/compress/recipe.h"
#include "core/compress/sequential.h"
#include "core/model/model.h"
#include "core/tokenizer/tokenizer.h"

namespace cwb {

class Model;
class Feedback;
class CompressedLinear;

struct CalibrationSpec {
    std::string textPath;       // empty: no calibration (methods that need it refuse)
    int64_t samples = 128;
    int64_t seqLen = 512;
    uint64_t seed = 0;
    // Where GPTQ and SparseGPT calibrate and compute: "auto" (CUDA when a GPU is visible, else the CPU), "cpu",
    // "cuda" or "cuda:N". On CUDA the Hessian algebra runs in float32 instead of the CPU's float64, so a few
    // levels can differ (docs/performance.md); results always land in the CPU model.
    std::string device = "auto";
    // Type of the calibration forward's matrices: "f32" (the same arithmetic on every device), "bf16" or "f16".
    std::string forwardType = "f32";
};

// "auto" -> CUDA when available, else CPU; "cpu"; "cuda[:N]". Throws cwb::Error for an unknown name or for
// CUDA asked for where there is none.
at::Device resolveCompressionDevice(const std::string& name);
// Device and forward type of a CalibrationSpec; throws cwb::Error naming a bad value.
CalibrationCompute resolveCalibrationCompute(const CalibrationSpec& spec);

// Fills StepReport::reconstructionError for the layers whose weights differ between `before` and `after`.
// The calibration pass runs where `compute` says.
std::map<std::string, double> reconstructionErrors(const Model& before, Model& after, const std::vector<std::string>& layers,
                                                   const at::Tensor& windows, Feedback* feedback,
                                                   const CalibrationCompute& compute = {});

// `samples` windows of `seqLen` tokens at seeded random offsets of the tokenized text, BOS first; seqLen is
// clipped to the model's context and the text. `note` says what was clipped.
at::Tensor drawCalibration(const std::vector<TokenId>& tokens, TokenId bos, const CalibrationSpec& spec,
                           int64_t context, std::string* note = nullptr);

struct StepReport {
    std::string method;
    int version = 0;
    nlohmann::json params;
    int64_t layers = 0;             // layers it touched
    double seconds = 0;
    std::vector<std::string> notes;
    // ‖WX − ŴX‖² / ‖WX‖² per layer the step changed (same shape before and after), X the layer's inputs on the
    // calibration windows; empty without calibration data or for steps that change shapes.
    std::map<std::string, double> reconstructionError;
};

struct CompressionResult {
    std::unique_ptr<Model> model;
    std::vector<StepReport> steps;
    std::string calibrationNote;
    int64_t calibrationSamples = 0, calibrationSeqLen = 0;
};

// Called after each step with its report and the variant as it stands (e.g. to evaluate every stage).
using StepObserver = std::function<void(const StepReport& step, const Model& variant)>;

// Throws cwb::Error (bad recipe, no calibration for a method that needs it) or Cancelled.
CompressionResult compressModel(const Model& base, const Recipe& recipe, const CalibrationSpec& calibration,
                                Feedback* feedback = nullptr, const StepObserver& onStep = {});

// The same with calibration windows already drawn ([samples, seqLen] int64; undefined when none); GPTQ, SparseGPT
// and the reconstruction errors calibrate where `compute` says (the CPU in float32 by default).
CompressionResult compressModel(const Model& base, const Recipe& recipe, const at::Tensor& calibration,
                                Feedback* feedback = nullptr, const StepObserver& onStep = {},
                                const CalibrationCompute& compute = {});

// Whether an enabled step of the recipe needs calibration windows.
bool recipeNeedsCalibration(const Recipe& recipe);
// What in an enabled step's parameters would fail it once it runs (CompressionMethod::paramsProblem: a data file that
// is not there, say), "" when nothing: asked before any model work.
std::string recipeParamsProblem(const Recipe& recipe);
// Why the recipe's "targets" or override patterns name no layer of `base` ("" when they all do), judged for the
// steps before any that renames layers; compressModel checks every step as it reaches it.
std::string recipeLayersProblem(const Model& base, const Recipe& recipe);
// The same for one step whose layer names are `model`'s: why its patterns name no layer ("" when they do).
std::string stepPatternsProblem(const Model& model, const RecipeStep& step);

// Linear layers a step targets: its regex (default all block linears) minus its ignore list, and the output head
// (names::kHead) where the step's "head" parameter (quantize.rtn, quantize.fp8, quantize.gptq) says so: "also" after
// the block layers, "only" alone.
std::vector<std::string> targetLayers(const Model& model, const RecipeStep& step);

// The output head is the layer names::kHead. A model whose head is tied to the embedding has no "lm_head.weight": a
// step that compresses the head gives it its own compressed copy (targetWeight reads the embedding;
// storeCompressedLayer unties).
// The step's "head" parameter as given ("none" when absent).
std::string headTargeting(const RecipeStep& step);
// The tensor a targeted layer's weight is read from: layer + ".weight", or the embedding for a head tied to it (no
// weight of its own).
std::string targetWeightName(const Model& model, const std::string& layer);
// A targeted layer's weight in fp32 (Model::floatTensor), the tied embedding for a head that has no weight of its own.
at::Tensor targetWeight(const Model& model, const std::string& layer);
// Model::setCompressed, or for a tied head: a packed head of its own (Model::addPackedLayer) and the spec untied,
// the embedding left as it is.
void storeCompressedLayer(Model& model, const std::string& layer, std::shared_ptr<const CompressedLinear> linear);

} // namespace cwb
