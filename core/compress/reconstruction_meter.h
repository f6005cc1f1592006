#pragma once
// StepReport::reconstructionError, ‖WX − ŴX‖² / ‖WX‖² per layer with X the layer's inputs in the variant, measured
// inside a calibrated step's own layer-by-layer pass (SequentialPass::collectCompressed sees exactly those inputs)
// instead of a second pass over the whole variant. Same accumulator and formula as that pass, so the same numbers.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/compress/gptq_math.h"

namespace cwb {

class Model;

// tr(ΔW H ΔWᵀ) / tr(W H Wᵀ) with ΔW = before − after, computed on the Hessian's device and type (0 when W X = 0).
double reconstructionError(const at::Tensor& before, const at::Tensor& after, const at::Tensor& hessian);

class ReconstructionMeter {
public:
    // The layer's weight before the step changes it (float32 [out, in]); only remembered layers are measured.
    void rememberBefore(const std::string& layer, at::Tensor weight);
    bool remembers(const std::string& layer) const { return mBefore.count(layer) != 0; }
    // Inputs of the compressed block's layers (collectCompressed) and which layer reads another's input.
    void add(const std::string& layer, const at::Tensor& inputs);
    void sharedInput(const std::string& layer, const std::string& first) { mSameInputAs[layer] = first; }
    // After the compressed forward through the block: the errors of `layers`, from the variant as it now stands.
    void finishBlock(const Model& after, const std::vector<std::string>& layers);
    const std::map<std::string, double>& errors() const { return mErrors; }

private:
    std::map<std::string, at::Tensor> mBefore;
    std::map<std::string, std::unique_ptr<quant::HessianAccumulator>> mHessians;
    std::map<std::string, std::string> mSameInputAs;
    std::map<std::string, double> mErrors;
};

} // namespace cwb
