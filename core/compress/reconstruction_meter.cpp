#include "core/compress/reconstruction_meter.h"

#include "core/model/compressed_linear.h"
#include "core/model/model.h"

namespace cwb {

// With H ∝ XᵀX, ‖ΔW Xᵀ‖² / ‖W Xᵀ‖² = tr(ΔW H ΔWᵀ) / tr(W H Wᵀ): the scale of H cancels.
double reconstructionError(const at::Tensor& before, const at::Tensor& after, const at::Tensor& hessian) {
    const at::Tensor w = before.to(hessian.device(), hessian.scalar_type());
    const at::Tensor d = w - after.to(hessian.device(), hessian.scalar_type());
    const double reference = (at::matmul(w, hessian) * w).sum().item<double>();
    return reference > 0 ? (at::matmul(d, hessian) * d).sum().item<double>() / reference : 0.0;
}

void ReconstructionMeter::rememberBefore(const std::string& layer, at::Tensor weight) { mBefore[layer] = std::move(weight); }

void ReconstructionMeter::add(const std::string& layer, const at::Tensor& inputs) {
    auto& h = mHessians[layer];
    if (!h) h = std::make_unique<quant::HessianAccumulator>(inputs.size(1));
    h->add(inputs);
}

void ReconstructionMeter::finishBlock(const Model& after, const std::vector<std::string>& layers) {
    for (const auto& layer : layers) {
        auto before = mBefore.find(layer);
        if (before == mBefore.end()) continue;
        auto shared = mSameInputAs.find(layer);
        auto h = mHessians.find(shared == mSameInputAs.end() ? layer : shared->second);
        if (h == mHessians.end()) continue;
        const at::Tensor hessian = h->second->hessian();
        // The compressed weight expanded where the Hessian is (the values of after.floatTensor, without the CPU pass).
        const auto compressed = after.compressed(layer);
        const at::Tensor now = compressed ? compressed->effectiveWeightOn(hessian.device()) : after.floatTensor(layer + ".weight");
        mErrors[layer] = reconstructionError(before->second, now, hessian);
    }
    for (const auto& layer : layers) {
        mBefore.erase(layer);
        mHessians.erase(layer);
        mSameInputAs.erase(layer);
    }
}

} // namespace cwb
