#pragma once
// Internal to the runtime (transformer.cpp and decode_step.cpp): a block's device weights and the layers that run
// them, the model-wide tensors, and the unfused RMSNorm both files use.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/model/compressed_linear.h"
#include "core/runtime/cuda_linear.h"
#include "core/runtime/dense_gemv.h"
#include "core/runtime/sparse24_linear.h"
#include "core/runtime/transformer.h"

namespace cwb {

struct Transformer::Block {
    std::map<std::string, at::Tensor> tensors;   // suffix ("self_attn.q_proj.weight") -> tensor on device
    std::map<std::string, std::shared_ptr<const CompressedLinear>> compressed;   // suffix ("self_attn.q_proj")
    std::map<std::string, std::shared_ptr<const NativeIntLinear>> native;         // layers run by a kernel
    std::map<std::string, std::shared_ptr<const Sparse24Linear>> sparse;          // 2:4 dense layers (cuSPARSELt)
    std::map<std::string, Sparse24Rows> packed24;   // 2:4 dense layers packed for the GEMV (decode reads only these)
    // Output rows of fused parts ("self_attn.q_proj") whose dense views went with their packed whole's dense weight.
    std::map<std::string, int64_t> droppedPartRows;
    size_t packedSavedBytes = 0;   // dense bytes minus packed bytes of packed24 (what one-row decode does not read)
    int64_t denseGemvRows = 0;   // dense layers given at most this many rows of input run the GEMV kernel
    // The RMSNorm weights ("input_layernorm.weight", ...) in the compute type, as the GEMV that folds a norm reads them.
    std::map<std::string, at::Tensor> computeTypeNorms;
    const at::Tensor& operator[](const std::string& suffix) const { return tensors.at(suffix); }
    bool has(const std::string& suffix) const { return tensors.count(suffix) != 0; }
    // A dense weight, packed 2:4 rows or a native kernel under this name (fused projections have one of them).
    bool hasLinear(const std::string& layer) const {
        return has(layer + ".weight") || native.count(layer) != 0 || packed24.count(layer) != 0;
    }
    int64_t outputRows(const std::string& layer) const {
        auto w = tensors.find(layer + ".weight");
        if (w != tensors.end()) return w->second.size(0);
        if (auto packed = packed24.find(layer); packed != packed24.end()) return packed->second.rows();
        if (auto part = droppedPartRows.find(layer); part != droppedPartRows.end()) return part->second;
        return compressed.at(layer)->rows();
    }
    // y = linear(prepareInput(x), W) + b through the layer's compressed form when it has one.
    at::Tensor linear(const std::string& layer, const at::Tensor& x) const {
        auto bias = tensors.find(layer + ".bias");
        auto kernel = native.find(layer);
        auto twoFour = sparse.find(layer);
        if (twoFour != sparse.end() && twoFour->second->applies(x)) {
            at::Tensor y = twoFour->second->forward(x);
            return bias == tensors.end() ? y : y + bias->second.to(x.scalar_type());
        }
        if (kernel != native.end()) {
            at::Tensor y = kernel->second->forward(x).to(x.scalar_type());
            return bias == tensors.end() ? y : y + bias->second.to(x.scalar_type());
        }
        if (!has(layer + ".weight") && packed24.count(layer)) {   // 2:4 kept only as packed rows
            const at::Tensor b = bias == tensors.end() ? at::Tensor() : bias->second;
            if (packedFor(layer, x)) return gemvLinear(layer, x, b, at::Tensor());
            return at::linear(x, unpackSparse24Rows(packed24.at(layer)), b.defined() ? b.to(x.scalar_type()) : b);
        }
        auto it = compressed.find(layer);
        at::Tensor input = it == compressed.end() ? x : it->second->prepareInput(x.to(at::kFloat)).to(x.scalar_type());
        const at::Tensor& w = tensors.at(layer + ".weight");
        if (denseGemvRows > 0 && denseGemvApplies(input, w, denseGemvRows))
            return gemvLinear(layer, input, bias == tensors.end() ? at::Tensor() : bias->second, at::Tensor());
        return at::linear(input, w, bias == tensors.end() ? at::Tensor() : bias->second.to(x.scalar_type()));
    }
    // A dense layer (no kernel, no compressed input transform) that the GEMV kernel computes for this input.
    bool denseGemvFor(const std::string& layer, const at::Tensor& x) const {
        if (denseGemvRows <= 0 || native.count(layer) || compressed.count(layer)) return false;
        if (sparse.count(layer) && sparse.at(layer)->applies(x)) return false;
        if (packedFor(layer, x)) return true;
        return has(layer + ".weight") && denseGemvApplies(x, tensors.at(layer + ".weight"), denseGemvRows);
    }
    // The packed 2:4 rows of a layer when the 2:4 GEMV takes x, else nullptr (the dense GEMV reads the weight).
    const Sparse24Rows* packedFor(const std::string& layer, const at::Tensor& x) const {
        auto packed = packed24.find(layer);
        return packed != packed24.end() && sparse24GemvApplies(x, packed->second, denseGemvRows) ? &packed->second : nullptr;
    }
    // x Wᵀ + bias + residual through the GEMV: the 2:4 one on the packed rows where the layer has them.
    at::Tensor gemvLinear(const std::string& layer, const at::Tensor& x, const at::Tensor& bias,
                          const at::Tensor& residual) const {
        if (const Sparse24Rows* packed = packedFor(layer, x)) return sparse24GemvLinear(x, *packed, bias, residual);
        return denseGemvLinear(x, tensors.at(layer + ".weight"), bias, residual);
    }
    // linear(RMSNorm(x)) in one kernel, x the raw residual stream; call where denseGemvFor(layer, x).
    at::Tensor rmsNormLinear(const std::string& layer, const at::Tensor& x, const at::Tensor& normWeight, double eps) const {
        auto bias = tensors.find(layer + ".bias");
        const at::Tensor b = bias == tensors.end() ? at::Tensor() : bias->second;
        if (const Sparse24Rows* packed = packedFor(layer, x)) return sparse24GemvRmsNormLinear(x, normWeight, eps, *packed, b);
        return denseGemvRmsNormLinear(x, normWeight, eps, tensors.at(layer + ".weight"), b);
    }
    // silu(gate) * up of a fused [gate; up] layer in one kernel, x normalised first with normWeight (undefined: x is
    // already normalised); call where denseGemvFor(layer, x).
    at::Tensor swiGluLinear(const std::string& layer, const at::Tensor& x, const at::Tensor& normWeight, double eps) const {
        auto bias = tensors.find(layer + ".bias");
        const at::Tensor b = bias == tensors.end() ? at::Tensor() : bias->second;
        if (const Sparse24Rows* packed = packedFor(layer, x)) return sparse24GemvSwiGluLinear(x, normWeight, eps, *packed, b);
        return denseGemvSwiGluLinear(x, normWeight, eps, tensors.at(layer + ".weight"), b);
    }
    // A layer run by a kernel on its stored form for this input (not the 2:4 path) that takes the norm before it and
    // the residual after it into its own launch (W4A16 / W8A16; FP8 and W8A8 layers keep the runtime's fused kernels).
    bool nativeFusingFor(const std::string& layer, const at::Tensor& x) const {
        auto kernel = native.find(layer);
        return kernel != native.end() && kernel->second->fusesNormAndResidual() &&
               !(sparse.count(layer) && sparse.at(layer)->applies(x));
    }
    // residual + linear(RMSNorm(x) · γ) through a native layer, norm and residual inside its launch where the kernel
    // takes them (NativeIntLinear::forwardFused); normWeight or residual undefined: without it. The bias comes after.
    at::Tensor nativeFused(const std::string& layer, const at::Tensor& x, const at::Tensor& normWeight, double eps,
                           const at::Tensor& residual) const {
        at::Tensor y = native.at(layer)->forwardFused(x, normWeight, eps, residual).to(x.scalar_type());
        auto bias = tensors.find(layer + ".bias");
        return bias == tensors.end() ? y : y + bias->second.to(y.scalar_type());
    }
    // silu(gate) · up of a fused [gate; up] native layer without bias, RMSNorm(x) · γ before it (normWeight undefined:
    // x as it is); SiLU · up inside the layer's launch where the kernel takes it (NativeIntLinear::forwardGlu).
    at::Tensor nativeGlu(const std::string& layer, const at::Tensor& x, const at::Tensor& normWeight, double eps) const {
        return native.at(layer)->forwardGlu(x, normWeight, eps).to(x.scalar_type());
    }
    // A dense layer without bias, whose product with the residual added is one addmm.
    bool plainDense(const std::string& layer) const {
        return !native.count(layer) && !compressed.count(layer) && !has(layer + ".bias");
    }
    // residual + linear(x): one addmm for a dense layer without bias.
    at::Tensor linearPlus(const std::string& layer, const at::Tensor& x, const at::Tensor& residual) const {
        if (denseGemvFor(layer, x)) {   // product, bias and residual in one kernel
            auto bias = tensors.find(layer + ".bias");
            return gemvLinear(layer, x, bias == tensors.end() ? at::Tensor() : bias->second, residual);
        }
        if (!plainDense(layer) || (sparse.count(layer) && sparse.at(layer)->applies(x)) || !has(layer + ".weight"))
            return residual + linear(layer, x);
        const at::Tensor& w = tensors.at(layer + ".weight");
        return at::addmm(residual.reshape({-1, w.size(0)}), x.reshape({-1, w.size(1)}), w.t()).view(residual.sizes());
    }
    // Dense layers read the same input through one matrix: [q; k; v] and [gate; up]. The parts become views of it.
    void fuse(const std::vector<std::string>& parts, const std::string& fused) {
        const bool bias = has(parts.front() + ".bias");
        for (const auto& part : parts)
            if (!has(part + ".weight") || compressed.count(part) || native.count(part) || has(part + ".bias") != bias) return;
        for (const char* kind : {".weight", ".bias"}) {
            if (!bias && std::string(kind) == ".bias") continue;
            std::vector<at::Tensor> pieces;
            for (const auto& part : parts) pieces.push_back(tensors.at(part + kind));
            at::Tensor whole = at::cat(pieces, 0);
            int64_t offset = 0;
            for (size_t i = 0; i < parts.size(); ++i) {
                tensors[parts[i] + kind] = whole.narrow(0, offset, pieces[i].size(0));
                offset += pieces[i].size(0);
            }
            tensors[fused + kind] = whole;
        }
    }
};

struct Transformer::Globals {
    at::Tensor embedding, positions, finalNormWeight, finalNormBias, head;
    at::Tensor finalNormInComputeType;   // for the head's GEMV when it folds the final norm
    // A compressed output head (lm_head): run by a kernel on its stored form (head then undefined), or dequantized
    // into head with its input prepared as the layer says (FP8 / W8A8 activations).
    std::shared_ptr<const CompressedLinear> headCompressed;
    std::shared_ptr<const NativeIntLinear> headNative;
    // An integer head run by a kernel takes slices of this many token rows (0: whole): past the limit a CUDA layer
    // dequantizes into a dense scratch of its own size, for a 128k-vocabulary head 1 GiB more than any block needs.
    // (The CPU's packed kernels slice the same way, which keeps that path's tests meaningful for CUDA.)
    int64_t headTokenSlice = 0;
};

// In fp32, in few operations (each is a launch in decode): ‖x‖ in one reduction, then rsqrt(‖x‖² / n + eps).
at::Tensor runtimeRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

} // namespace cwb
