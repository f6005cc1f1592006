#pragma once
// A compression method: a stable id and version, declared parameters, and an apply function that changes
// a variant model in place. Methods register in MethodRegistry (after torchao/llm-compressor: the config is
// plain data, the code that applies it is registered separately).
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/compress/params.h"
#include "core/compress/recipe.h"
#include "core/compress/sequential.h"
#include "core/model/arch_spec.h"

namespace cwb {

class Model;
class Feedback;

// What a method sees while it runs one step.
struct StepContext {
    Model& model;                       // the variant being built; the method changes it
    const RecipeStep& step;
    nlohmann::json params;              // resolved: defaults filled, validated
    std::vector<std::string> layers;    // linear layers this step targets, in block order
    at::Tensor calibration;             // [samples, seqLen] int64 token windows; undefined when none was given
    Feedback* feedback = nullptr;
    std::vector<std::string> notes;     // what the method wants the report to say
    const Model* base = nullptr;        // the model the recipe started from (a distillation teacher)
    // Where calibrated methods that support it (GPTQ, SparseGPT) run the calibration pass and their math.
    CalibrationCompute compute;
    // Set by a method whose own pass measured StepReport::reconstructionError (same inputs, same formula); the
    // report then takes it when it names exactly the layers the step changed, and skips the second pass.
    std::optional<std::map<std::string, double>> reconstructionErrors;

    // The step's params with the first matching override merged in.
    nlohmann::json paramsFor(const std::string& layer) const;
    void progress(double fraction) const;
    void note(const std::string& line);
};

// `resolved` (a step's parameters, defaults filled) merged with the first of the step's overrides whose pattern
// matches `layer`: the parameters a method applies to that layer.
nlohmann::json paramsForLayer(const RecipeStep& step, const nlohmann::json& resolved, const std::string& layer);

class CompressionMethod {
public:
    virtual ~CompressionMethod() = default;
    virtual std::string id() const = 0;            // stable, stored in recipes: "quantize.gptq"
    virtual int version() const = 0;               // bumped whenever results change
    virtual std::string displayName() const = 0;   // "GPTQ"
    virtual std::string summary() const = 0;
    virtual std::vector<ParamSpec> params() const = 0;
    virtual bool needsCalibration(const nlohmann::json& params) const = 0;
    // What in the step's resolved parameters would fail it once it runs, found before any model work ("" when
    // nothing): a file it reads that is not there, options that contradict each other.
    virtual std::string paramsProblem(const nlohmann::json&) const { return ""; }
    // What in the resolved parameters does not fit `model` (a head or block it does not have), found before any
    // model work; "" when nothing.
    virtual std::string modelProblem(const Model&, const nlohmann::json&) const { return ""; }
    // True when the method changes each targeted linear layer on its own, so that it can be given one layer alone
    // (per-layer sensitivity); false for methods that remove heads, channels or blocks, or train the whole model.
    virtual bool actsPerLinearLayer() const { return true; }
    // False for methods that act on whole blocks or the whole model (prune.layers, distill.kd): a step's targets,
    // ignore patterns and overrides are not read, and past the step the blocks' layer names are not the base model's.
    virtual bool readsLayerPatterns() const { return true; }
    // For methods that remove structures of a block (heads, MLP channels): the suffix of the block's linear layer
    // whose being targeted selects the block, and at which the overrides are read ("self_attn.q_proj"); "" for
    // methods that act on each targeted layer.
    virtual std::string blockSelector(Family) const { return ""; }
    // Throws cwb::Error with what is wrong (e.g. a shape the method cannot handle), or Cancelled.
    virtual void apply(StepContext& context) const = 0;
};

class MethodRegistry {
public:
    static MethodRegistry& instance();
    void add(std::unique_ptr<CompressionMethod> method);
    const CompressionMethod* find(const std::string& id) const;
    std::vector<const CompressionMethod*> methods() const;

private:
    MethodRegistry();
    std::vector<std::unique_ptr<CompressionMethod>> mMethods;
};

// Built-in methods, each defined in core/compress/methods/.
void registerQuantizationMethods(MethodRegistry& registry);
void registerPruningMethods(MethodRegistry& registry);
void registerStructuredMethods(MethodRegistry& registry);
void registerDistillationMethods(MethodRegistry& registry);

} // namespace cwb
