#pragma once
// The budget solver: given a target of bits per weight, choose per-layer bit widths that minimise the summed
// measured sensitivity (KL against the base when only that layer is quantized at that width, by the method the
// recipe will use: RTN, GPTQ or AWQ) and write the choice as a recipe with per-layer overrides.
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/compress/recipe.h"
#include "core/compress/sequential.h"

namespace cwb {

class Model;
class Feedback;

struct BudgetOption {
    int bits = 4;
    double bitsPerWeight = 4;   // as stored, scales and zeros included
    double cost = 0;            // sensitivity (KL) of the layer alone at this width
};

struct BudgetLayer {
    std::string name;
    int64_t parameters = 0;
    std::vector<BudgetOption> options;   // any order
};

// Greedy multiple-choice knapsack: every layer starts at its smallest option; the upgrade with the best cost
// saved per extra bit is taken while the average stays within `targetBitsPerWeight`. Returns the chosen option
// index per layer; throws cwb::Error when even the smallest options exceed the target.
std::vector<size_t> chooseBits(const std::vector<BudgetLayer>& layers, double targetBitsPerWeight);

struct BudgetOptions {
    double targetBitsPerWeight = 4.5;
    std::vector<int> bits = {3, 4, 8};
    int64_t groupSize = 32;
    // An integer quantization method with a "bits" parameter, and its other parameters (bits and group_size are
    // set by the solver).
    std::string method = "quantize.rtn";
    nlohmann::json params = nlohmann::json::object();
    // One width for the layers that read the same input in a block (q/k/v; gate/up; Llama family), planned as one
    // unit whose cost is the sum of theirs: vLLM runs each set as one fused layer with one scheme, so a
    // compressed-tensors export needs it.
    bool fuseSharedInputs = false;
    // The output head (lm_head) as one more layer of the plan, measured alone as the block layers are; the recipe's
    // step then has "head": "also" (and an override when the head's width is not the step's). A tied head is planned
    // as its own quantized copy; the embedding stays.
    bool includeHead = false;
    // Where the layers are measured and in which type (see importanceCompute); calibrated methods calibrate on the
    // same device in fp32.
    CalibrationCompute compute;
};

struct BudgetPlan {
    std::vector<BudgetLayer> layers;     // measured options
    std::map<std::string, int> bits;     // chosen width per layer
    double bitsPerWeight = 0;            // of the chosen plan, over the targeted layers
    double predictedCost = 0;            // sum of the chosen options' costs
    Recipe recipe;                       // the method at the most common width, overrides for the rest
};

// The layers a plan covers (every linear layer of the blocks, then names::kHead with includeHead) and their weights
// count (a tied head counts its embedding's, which its own copy will have).
std::vector<std::string> plannedLayers(const Model& model, const BudgetOptions& options);
double plannedParameters(const Model& model, const BudgetOptions& options);

// Throws cwb::Error for options no model can satisfy: no widths, a method without "bits", bad parameters, or a
// target below what the narrowest width stores (known from the sizes alone). solveBitBudget checks this first.
void checkBudgetOptions(const BudgetOptions& options);

// Quantizes the model once per width with the method (calibrated methods use the windows, block by block as in
// a recipe), measures every (layer, width) alone against the base on the windows, and solves for the target.
// Throws cwb::Error (not an integer method, bad parameters) or Cancelled.
BudgetPlan solveBitBudget(const Model& model, const at::Tensor& windows, const BudgetOptions& options, Feedback* feedback);

} // namespace cwb
