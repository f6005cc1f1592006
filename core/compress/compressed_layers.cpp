#include "core/compress/compressed_layers.h"

namespace cwb {

IntLinear::IntLinear(quant::QuantizedWeight weight, at::Tensor inputScale, std::string method)
    : mWeight(std::move(weight)), mInputScale(std::move(inputScale)), mMethod(std::move(method)) {}

std::string IntLinear::describe() const {
    const auto& s = mWeight.spec;
    std::string text = "int" + std::to_string(s.bits) + " ";
    text += s.groupSize > 0 ? "g" + std::to_string(s.groupSize) : s.groupSize == 0 ? "tensor" : "channel";
    text += s.symmetric ? " sym" : " asym";
    if (!mMethod.empty()) text += " " + mMethod;
    return text;
}

at::Tensor IntLinear::weightOn(const at::Device& device) const {
    if (device.is_cpu()) return weight();
    quant::QuantizedWeight w = mWeight;
    w.packed = w.packed.to(device);
    w.scales = w.scales.to(device);
    w.zeros = w.zeros.to(device);
    w.groupIndex = w.groupIndex.to(device);
    return w.dequantize();
}

at::Tensor IntLinear::prepareInput(const at::Tensor& x) const {
    return mInputScale.defined() ? x / mInputScale.to(x.device(), x.scalar_type()) : x;
}

at::Tensor IntLinear::effectiveWeight() const {
    at::Tensor w = mWeight.dequantize();
    return mInputScale.defined() ? w / mInputScale.unsqueeze(0) : w;
}

at::Tensor IntLinear::effectiveWeightOn(const at::Device& device) const {
    return mInputScale.defined() ? effectiveWeight().to(device) : weightOn(device);
}

size_t IntLinear::storageBytes() const {
    return mWeight.storageBytes() + (mInputScale.defined() ? size_t(mInputScale.numel()) * 2 : 0);
}

std::shared_ptr<const CompressedLinear> IntLinear::relocated(const Relocator& relocate) const {
    quant::QuantizedWeight w = mWeight;
    w.packed = relocate(w.packed);
    w.scales = relocate(w.scales);
    w.zeros = relocate(w.zeros);
    w.groupIndex = relocate(w.groupIndex);
    return std::make_shared<IntLinear>(std::move(w), mInputScale.defined() ? relocate(mInputScale) : mInputScale, mMethod);
}

Fp8Linear::Fp8Linear(quant::Fp8Weight weight, bool dynamicActivations)
    : mWeight(std::move(weight)), mDynamicActivations(dynamicActivations) {}

std::string Fp8Linear::describe() const {
    return std::string("fp8 e4m3 ") + (mWeight.scales.numel() == 1 ? "per-tensor" : "per-channel") +
           (mDynamicActivations ? ", dynamic fp8 activations" : "");
}

at::Tensor Fp8Linear::prepareInput(const at::Tensor& x) const {
    if (!mDynamicActivations) return x;
    return quant::fakeQuantizeFp8PerToken(x.reshape({-1, x.size(-1)})).reshape(x.sizes());
}

std::shared_ptr<const CompressedLinear> Fp8Linear::relocated(const Relocator& relocate) const {
    quant::Fp8Weight w = mWeight;
    w.codes = relocate(w.codes);
    w.scales = relocate(w.scales);
    return std::make_shared<Fp8Linear>(std::move(w), mDynamicActivations);
}

W8A8Linear::W8A8Linear(quant::Int8Weight weight, at::Tensor smoothing)
    : mWeight(std::move(weight)), mSmoothing(std::move(smoothing)) {}

at::Tensor W8A8Linear::prepareInput(const at::Tensor& x) const {
    at::Tensor smoothed = x / mSmoothing.to(x.device(), x.scalar_type());
    return quant::fakeQuantizeInt8PerToken(smoothed.reshape({-1, x.size(-1)})).reshape(x.sizes());
}

at::Tensor W8A8Linear::effectiveWeight() const { return mWeight.dequantize() / mSmoothing.unsqueeze(0); }


std::shared_ptr<const CompressedLinear> W8A8Linear::relocated(const Relocator& relocate) const {
    quant::Int8Weight w = mWeight;
    w.q = relocate(w.q);
    w.scales = relocate(w.scales);
    return std::make_shared<W8A8Linear>(std::move(w), relocate(mSmoothing));
}

} // namespace cwb
