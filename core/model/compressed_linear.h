#pragma once
// A linear layer held in compressed form (packed integers, FP8 codes, int8 with smoothing). The runtime asks
// it for the weight to multiply (cached per block) and lets it transform the input (smoothing scales, dynamic
// activation quantization); y = linear(prepareInput(x), weight()) + bias.
#include <functional>
#include <memory>
#include <string>

#include <ATen/ATen.h>

namespace cwb {

class CompressedLinear {
public:
    virtual ~CompressedLinear() = default;
    // Short description shown in reports and the model tree: "int4 g32 sym", "fp8 e4m3 per-channel".
    virtual std::string describe() const = 0;
    // Stable id of the storage kind: "int", "fp8", "w8a8".
    virtual std::string kind() const = 0;
    virtual int bits() const = 0;
    // fp32 [out, in]: the matrix the layer multiplies, in its own input space (after prepareInput).
    virtual at::Tensor weight() const = 0;
    // weight() computed on `device`: the same values, but a kind may copy its packed form there and expand it
    // there, instead of expanding it on the CPU and copying the dense matrix.
    virtual at::Tensor weightOn(const at::Device& device) const { return weight().to(device); }
    // Maps the layer's input into that space; identity unless smoothing or activation quantization apply.
    virtual at::Tensor prepareInput(const at::Tensor& x) const { return x; }
    // fp32 [out, in]: what the layer computes with, seen from the original input (for errors and export).
    virtual at::Tensor effectiveWeight() const { return weight(); }
    // effectiveWeight() computed on `device`, with the same values (see weightOn).
    virtual at::Tensor effectiveWeightOn(const at::Device& device) const { return effectiveWeight().to(device); }
    virtual size_t storageBytes() const = 0;
    virtual int64_t rows() const = 0;
    virtual int64_t cols() const = 0;
    // A copy whose tensors went through `relocate` (e.g. into a scratch file); null when the kind keeps its own.
    using Relocator = std::function<at::Tensor(const at::Tensor&)>;
    virtual std::shared_ptr<const CompressedLinear> relocated(const Relocator& /*relocate*/) const { return nullptr; }
    double bitsPerWeight() const { return 8.0 * double(storageBytes()) / double(rows() * cols()); }
};

} // namespace cwb
