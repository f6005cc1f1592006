#pragma once
// Building a variant: draw calibration windows, then run the recipe's steps in order on a copy of the base.
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/compress/recipe.h"
#include "core/tokenizer/tokenizer.h"

namespace cwb {

class Model;
class Feedback;

struct CalibrationSpec {
    std::string textPath;       // empty: no calibration (methods that need it refuse)
    int64_t samples = 128;
    int64_t seqLen = 512;
    uint64_t seed = 0;
};

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
};

struct CompressionResult {
    std::unique_ptr<Model> model;
    std::vector<StepReport> steps;
    std::string calibrationNote;
    int64_t calibrationSamples = 0, calibrationSeqLen = 0;
};

// Throws cwb::Error (bad recipe, no calibration for a method that needs it) or Cancelled.
CompressionResult compressModel(const Model& base, const Recipe& recipe, const CalibrationSpec& calibration,
                                Feedback* feedback = nullptr);

// The same with calibration windows already drawn ([samples, seqLen] int64; undefined when none).
CompressionResult compressModel(const Model& base, const Recipe& recipe, const at::Tensor& calibration,
                                Feedback* feedback = nullptr);

// Linear layers a step targets: its regex (default all block linears) minus its ignore list.
std::vector<std::string> targetLayers(const Model& model, const RecipeStep& step);

} // namespace cwb
