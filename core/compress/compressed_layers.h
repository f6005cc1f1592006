#pragma once
// The compressed forms a linear layer can take. Each keeps its packed representation (integers, FP8 codes)
// and computes on the CPU by dequantizing; the CUDA engine will run the same data through its kernels.
#include "core/compress/fp8_math.h"
#include "core/compress/quant_math.h"
#include "core/compress/smoothquant_math.h"
#include "core/model/compressed_linear.h"

namespace cwb {

// Integer weights (RTN, GPTQ, AWQ): packed levels, scales and zeros per group. AWQ adds per-input-channel
// scales s: the stored weight is Q(W·diag(s)) and the input is divided by s.
class IntLinear : public CompressedLinear {
public:
    explicit IntLinear(quant::QuantizedWeight weight, at::Tensor inputScale = {}, std::string method = "");
    std::string describe() const override;
    std::string kind() const override { return "int"; }
    int bits() const override { return mWeight.spec.bits; }
    at::Tensor weight() const override { return mWeight.dequantize(); }
    // Unpacked and scaled on the device (integer ops and one float32 product: the CPU's values bit for bit).
    at::Tensor weightOn(const at::Device& device) const override;
    at::Tensor prepareInput(const at::Tensor& x) const override;
    at::Tensor effectiveWeight() const override;
    at::Tensor effectiveWeightOn(const at::Device& device) const override;
    size_t storageBytes() const override;
    int64_t rows() const override { return mWeight.rows; }
    int64_t cols() const override { return mWeight.cols; }
    const quant::QuantizedWeight& quantized() const { return mWeight; }
    const at::Tensor& inputScale() const { return mInputScale; }
    const std::string& method() const { return mMethod; }
    std::shared_ptr<const CompressedLinear> relocated(const Relocator& relocate) const override;

private:
    quant::QuantizedWeight mWeight;
    at::Tensor mInputScale;
    std::string mMethod;
};

// FP8 E4M3 weights with per-tensor or per-channel scales; optionally dynamic FP8 activations per token.
class Fp8Linear : public CompressedLinear {
public:
    Fp8Linear(quant::Fp8Weight weight, bool dynamicActivations);
    std::string describe() const override;
    std::string kind() const override { return "fp8"; }
    int bits() const override { return 8; }
    at::Tensor weight() const override { return mWeight.dequantize(); }
    at::Tensor prepareInput(const at::Tensor& x) const override;
    size_t storageBytes() const override { return mWeight.storageBytes(); }
    int64_t rows() const override { return mWeight.codes.size(0); }
    int64_t cols() const override { return mWeight.codes.size(1); }
    const quant::Fp8Weight& fp8Weight() const { return mWeight; }
    bool dynamicActivations() const { return mDynamicActivations; }
    std::shared_ptr<const CompressedLinear> relocated(const Relocator& relocate) const override;

private:
    quant::Fp8Weight mWeight;
    bool mDynamicActivations;
};

// SmoothQuant W8A8: int8 per-channel weights of W·diag(s); inputs divided by s, then int8 per token.
class W8A8Linear : public CompressedLinear {
public:
    W8A8Linear(quant::Int8Weight weight, at::Tensor smoothing);
    // "w8a8" for a layer read without smoothing (s = 1, as int-quantized checkpoints hold it).
    std::string describe() const override { return at::all(mSmoothing == 1).item<bool>() ? "w8a8" : "w8a8 smoothquant"; }
    std::string kind() const override { return "w8a8"; }
    int bits() const override { return 8; }
    at::Tensor weight() const override { return mWeight.dequantize(); }
    at::Tensor prepareInput(const at::Tensor& x) const override;
    at::Tensor effectiveWeight() const override;
    size_t storageBytes() const override { return mWeight.storageBytes() + size_t(mSmoothing.numel()) * 2; }
    int64_t rows() const override { return mWeight.q.size(0); }
    int64_t cols() const override { return mWeight.q.size(1); }
    const quant::Int8Weight& int8Weight() const { return mWeight; }
    const at::Tensor& smoothing() const { return mSmoothing; }
    std::shared_ptr<const CompressedLinear> relocated(const Relocator& relocate) const override;

private:
    quant::Int8Weight mWeight;
    at::Tensor mSmoothing;
};

} // namespace cwb
