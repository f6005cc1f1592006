// The fixed-shape decode step (Transformer::decodeFixedShape): one token per sequence against a KV cache whose shape
// never changes, so that a CUDA graph can replay it; with the fused decode kernels, norms, RoPE, attention and the
// residual adds run in the runtime's own launches (fused_decode.h), and native integer layers take norms and residuals
// inside theirs.
#include <cmath>
#include <limits>
#include <tuple>

#include "core/runtime/decode_graph.h"
#include "core/runtime/fused_decode.h"
#include "core/runtime/transformer_parts.h"
#include "core/util/error.h"

namespace cwb {

bool Transformer::fixedShapeDecodeApplies(const ActivationObserver* observer) const {
    return mModel.spec.family == Family::Llama && !observer && !mOptions.headGates && !mOptions.parameters &&
           mOptions.cacheWeights;
}

at::Tensor Transformer::decodeFixedShape(const at::Tensor& ids, KvCache& cache) {
    const int64_t start = cache.length();
    ropeRows(cache.capacity());   // the table must not grow (be replaced) while a graph reads it
    at::Tensor tokens = ids.to(mOptions.device);
    auto step = [&](const at::Tensor& t, const at::Tensor& position) { return fixedShapeStep(t, position, cache); };
    if (mOptions.decode == DecodeMode::CudaGraph && cache.mGraphFailure.empty()) {
        if (!cache.mGraph || !cache.mGraph->capturedFor(mRuntimeId, mWeightsVersion, cache.batch()))
            cache.mGraph = std::make_unique<DecodeGraph>(mOptions.device, cache.batch(), mRuntimeId, mWeightsVersion);
        try {
            return cache.mGraph->run(tokens, start, step);
        } catch (const Error& e) {   // this cache decodes without a graph from now on; graphFailure() says why
            cache.mGraphFailure = e.what();
            cache.mGraph.reset();
        }
    }
    return step(tokens, at::full({1}, start, at::TensorOptions().dtype(at::kLong).device(mOptions.device)));
}

bool Transformer::foldNormsIntoGemv() const {
    return mOptions.fusedNormGemv && mOptions.denseGemv && !mOptions.parameters && fusedDecodeActive();
}

bool Transformer::swiGluIntoGemv() const {
    return mOptions.fusedSwiGluGemv && mOptions.denseGemv && !mOptions.parameters && fusedDecodeActive();
}

bool Transformer::intLinearFused() const {
    return mOptions.fusedIntLinear && !mOptions.parameters && fusedDecodeActive();
}

bool Transformer::fusedDecodeActive() const {
    return mOptions.fusedDecode && fusedDecodeAvailable(mOptions.device, mOptions.dtype);
}

at::Tensor Transformer::fixedShapeStep(const at::Tensor& tokens, const at::Tensor& position, KvCache& cache) {
    at::Tensor x = at::embedding(mGlobals->embedding, tokens);   // [batch, 1, hidden]
    if (fusedDecodeActive()) {   // the kernels read the RoPE table and the position themselves
        for (int64_t l = 0; l < mModel.spec.layers; ++l) x = fixedShapeBlock(l, x, at::Tensor(), at::Tensor(), position, cache);
        const int64_t rows = x.numel() / x.size(-1), slice = mGlobals->headTokenSlice;   // past the slice: headLinear slices
        if (mGlobals->headNative && intLinearFused() && mGlobals->headNative->fusesNormAndResidual() && (slice <= 0 || rows <= slice))
            return mGlobals->headNative->forwardFused(x, mGlobals->finalNormWeight, mModel.spec.normEps, at::Tensor())
                .to(at::kFloat);
        if (!mGlobals->headCompressed && foldNormsIntoGemv() && denseGemvApplies(x, mGlobals->head, kDenseGemvRuntimeRows))
            return denseGemvRmsNormLinear(x, mGlobals->finalNormInComputeType, mModel.spec.normEps, mGlobals->head, at::Tensor())
                .to(at::kFloat);
        return headLinear(fusedRmsNorm(x, mGlobals->finalNormWeight, mModel.spec.normEps)).to(at::kFloat);
    }
    // Shared by every block: this position's RoPE row, and the additive mask over the whole cache (0 up to the
    // position, -inf after), both computed on the device from `position`.
    at::Tensor rope = mRopeTable.index_select(0, position);   // [1, 2, headDim]
    at::Tensor slots = at::arange(cache.capacity(), position.options());
    at::Tensor mask = at::zeros({1, 1, cache.capacity()}, x.options())
                          .masked_fill_(slots.gt(position).view({1, 1, -1}), -std::numeric_limits<float>::infinity());
    for (int64_t l = 0; l < mModel.spec.layers; ++l) x = fixedShapeBlock(l, x, rope, mask, position, cache);
    return logits(x);
}

at::Tensor Transformer::fixedShapeBlock(int64_t layer, const at::Tensor& x, const at::Tensor& rope, const at::Tensor& mask,
                                        const at::Tensor& position, KvCache& cache) {
    const ArchSpec& s = mModel.spec;
    const Block& b = block(layer);
    const int64_t B = x.size(0), heads = s.headsAt(layer), kvHeads = s.kvHeadsAt(layer), hd = s.headDim;
    const bool fused = fusedDecodeActive();   // then rope and mask are undefined: the kernels need neither
    const bool foldNorms = foldNormsIntoGemv();   // RMSNorm inside the GEMV of dense q/k/v and gate/up
    const bool foldInputNorm = foldNorms && b.denseGemvFor("self_attn.qkv_proj", x);
    const bool intFused = fused && intLinearFused();   // native integer layers take norms and residuals
    const bool nativeInputNorm = intFused && !foldInputNorm && b.nativeFusingFor("self_attn.qkv_proj", x);
    at::Tensor h;   // the normalised input of q/k/v, then of gate/up, where no GEMV normalises it itself
    if (!foldInputNorm && !nativeInputNorm)
        h = fused ? fusedRmsNorm(x, b["input_layernorm.weight"], s.normEps) : runtimeRmsNorm(x, b["input_layernorm.weight"], s.normEps);
    // residual + linear(input), in one launch where the layer is native and intFused
    auto plus = [&](const std::string& layer, const at::Tensor& input, const at::Tensor& residual) {
        return intFused && b.nativeFusingFor(layer, input) ? b.nativeFused(layer, input, at::Tensor(), 0.0, residual)
                                                     : b.linearPlus(layer, input, residual);
    };
    at::Tensor qk, v;   // [B, 1, (heads + kvHeads) * hd], [B, 1, kvHeads * hd]
    if (foldInputNorm || nativeInputNorm || b.hasLinear("self_attn.qkv_proj")) {
        at::Tensor qkv = foldInputNorm ? b.rmsNormLinear("self_attn.qkv_proj", x, b.computeTypeNorms.at("input_layernorm.weight"), s.normEps)
                         : nativeInputNorm
                             ? b.nativeFused("self_attn.qkv_proj", x, b["input_layernorm.weight"], s.normEps, at::Tensor())
                             : b.linear("self_attn.qkv_proj", h);
        qk = qkv.narrow(-1, 0, (heads + kvHeads) * hd);
        v = qkv.narrow(-1, (heads + kvHeads) * hd, kvHeads * hd);
    } else {
        qk = at::cat({b.linear("self_attn.q_proj", h), b.linear("self_attn.k_proj", h)}, -1);
        v = b.linear("self_attn.v_proj", h);
    }
    at::Tensor& keys = cache.mKeys[static_cast<size_t>(layer)];
    at::Tensor& values = cache.mValues[static_cast<size_t>(layer)];
    at::Tensor out;   // x + attention output
    bool foldPostNorm = false;     // gate/up's dense GEMV normalises `out` itself (h stays undefined)
    bool nativePostNorm = false;   // so does gate/up's native kernel launch
    if (fused) {   // RoPE, cache write and attention in one or two kernels; the residual add joins the norm
        at::Tensor attn = fusedDecodeAttention(qk.narrow(-1, 0, heads * hd), qk.narrow(-1, heads * hd, kvHeads * hd), v,
                                               mRopeTable, s.ropeStyle, position, keys, values, heads,
                                               cache.mAttentionWorkspaces[static_cast<size_t>(layer)]);
        // gate/up's GEMV qualifies by x's shape and type, which `out` shares.
        foldPostNorm = foldNorms && b.denseGemvFor("mlp.gate_up_proj", x);
        nativePostNorm = intFused && !foldPostNorm && b.nativeFusingFor("mlp.gate_up_proj", x);
        if (foldPostNorm || nativePostNorm) {   // x + o_proj(attn), rounded once, as fusedAddRmsNorm's sum
            out = plus("self_attn.o_proj", attn, x);
        } else if (b.plainDense("self_attn.o_proj") || (intFused && b.nativeFusingFor("self_attn.o_proj", attn))) {
            out = plus("self_attn.o_proj", attn, x);
            h = fusedRmsNorm(out, b["post_attention_layernorm.weight"], s.normEps);
        } else {
            std::tie(out, h) = fusedAddRmsNorm(b.linear("self_attn.o_proj", attn), x, b["post_attention_layernorm.weight"], s.normEps);
        }
    } else {
        // RoPE on queries and keys at once, in fp32.
        at::Tensor qkf = qk.reshape({B, heads + kvHeads, hd}).to(at::kFloat);
        at::Tensor rotated = (qkf * rope.select(1, 0)).addcmul_(swapRopePartners(qkf, s.ropeStyle), rope.select(1, 1)).to(x.scalar_type());
        keys.index_copy_(2, position, rotated.narrow(1, heads, kvHeads).unsqueeze(2));
        values.index_copy_(2, position, v.reshape({B, kvHeads, 1, hd}));
        // Attention over the whole capacity; each kv head serves `groups` query heads without repeating the cache.
        const int64_t groups = heads / kvHeads, capacity = keys.size(2);
        at::Tensor q = rotated.narrow(1, 0, heads).reshape({B * kvHeads, groups, hd});
        at::Tensor scores = at::baddbmm(mask, q, keys.view({B * kvHeads, capacity, hd}).transpose(1, 2), 1.0,
                                        1.0 / std::sqrt(double(hd)));
        at::Tensor probs = at::softmax(scores, -1);
        at::Tensor attn = at::bmm(probs, values.view({B * kvHeads, capacity, hd})).view({B, 1, heads * hd});
        out = b.linearPlus("self_attn.o_proj", attn, x);
        h = runtimeRmsNorm(out, b["post_attention_layernorm.weight"], s.normEps);
    }
    auto siluTimes = [&](const at::Tensor& gate, const at::Tensor& up) {
        return fused ? fusedSiluMul(gate, up) : at::silu(gate).mul_(up);
    };
    at::Tensor act;
    // With foldPostNorm gate/up's GEMV reads `out` and normalises it itself, else it reads h.
    const at::Tensor& gateUpInput = foldPostNorm ? out : h;
    const at::Tensor postNorm = foldPostNorm ? b.computeTypeNorms.at("post_attention_layernorm.weight") : at::Tensor();
    if (swiGluIntoGemv() && b.denseGemvFor("mlp.gate_up_proj", x)) {   // gate/up, SiLU and * in one kernel
        act = b.swiGluLinear("mlp.gate_up_proj", gateUpInput, postNorm, s.normEps);
    } else if (nativePostNorm && !b.has("mlp.gate_up_proj.bias")) {   // norm, gate/up, SiLU and * in one launch
        act = b.nativeGlu("mlp.gate_up_proj", out, b["post_attention_layernorm.weight"], s.normEps);
    } else if (nativePostNorm) {
        at::Tensor gateUp = b.nativeFused("mlp.gate_up_proj", out, b["post_attention_layernorm.weight"], s.normEps, at::Tensor());
        const int64_t ffn = gateUp.size(-1) / 2;
        act = siluTimes(gateUp.narrow(-1, 0, ffn), gateUp.narrow(-1, ffn, ffn));
    } else if (foldPostNorm || b.hasLinear("mlp.gate_up_proj")) {
        at::Tensor gateUp = foldPostNorm ? b.rmsNormLinear("mlp.gate_up_proj", out, postNorm, s.normEps)
                                         : b.linear("mlp.gate_up_proj", h);
        const int64_t ffn = gateUp.size(-1) / 2;
        act = siluTimes(gateUp.narrow(-1, 0, ffn), gateUp.narrow(-1, ffn, ffn));
    } else {
        act = siluTimes(b.linear("mlp.gate_proj", h), b.linear("mlp.up_proj", h));
    }
    return plus("mlp.down_proj", act, out);
}

} // namespace cwb
