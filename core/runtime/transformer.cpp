#include "core/runtime/transformer.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "core/compress/compressed_layers.h"
#include "core/runtime/cpu_int_linear.h"
#include "core/runtime/decode_graph.h"
#include "core/runtime/fused_decode.h"
#include "core/runtime/transformer_parts.h"
#include "core/util/error.h"
#include "kernels/include/cwb/kernels/env_setting.h"   // CUDA-free
#include "core/util/scratch_file.h"

#include <torch/version.h>

namespace cwb {

namespace {

const std::vector<std::string>& llamaSuffixes(bool bias) {
    static const std::vector<std::string> plain = {
        "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
        "mlp.down_proj.weight"};
    static const std::vector<std::string> withBias = [] {
        auto v = plain;
        v.insert(v.end(), {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"});
        return v;
    }();
    return bias ? withBias : plain;
}

const std::vector<std::string>& gpt2Suffixes() {
    static const std::vector<std::string> s = {
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
        "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    return s;
}

std::string layerPrefix(const ArchSpec& spec, int64_t layer) {
    return spec.family == Family::Llama ? names::llamaLayer(layer, "") : names::gpt2Layer(layer, "");
}

uint64_t nextRuntimeId() {
    static std::atomic<uint64_t> next{1};
    return next++;
}

at::Tensor layerNorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
    at::Tensor xf = x.to(at::kFloat);
    return at::layer_norm(xf, {xf.size(-1)}, weight.to(at::kFloat), bias.to(at::kFloat), eps).to(x.scalar_type());
}

} // namespace

at::Tensor runtimeRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
    const int64_t lastDim[] = {-1};
    at::Tensor norm = at::linalg_vector_norm(x, 2, at::IntArrayRef(lastDim), /*keepdim=*/true, at::kFloat);
    at::Tensor inverse = at::addcmul(at::full({1}, eps, norm.options()), norm, norm, 1.0 / double(x.size(-1))).rsqrt_();
    return (x * inverse).mul_(weight.to(at::kFloat)).to(x.scalar_type());
}

// Inverse frequencies of RoPE with the model's scaling applied (Llama 3 rule as in Hugging Face).
at::Tensor ropeInverseFrequencies(const ArchSpec& s, const Model& model) {
    const int64_t half = s.headDim / 2;
    at::Tensor inv = at::empty({half}, at::kDouble);
    auto* p = inv.data_ptr<double>();
    for (int64_t i = 0; i < half; ++i) p[i] = 1.0 / std::pow(s.ropeTheta, double(2 * i) / double(s.headDim));
    const RopeScaling& r = s.ropeScaling;
    if (r.type == "linear") {
        for (int64_t i = 0; i < half; ++i) p[i] /= r.factor;
    } else if (r.type == "llama3") {
        const double lowWavelen = r.originalContext / r.lowFreqFactor;
        const double highWavelen = r.originalContext / r.highFreqFactor;
        for (int64_t i = 0; i < half; ++i) {
            const double wavelen = 2 * M_PI / p[i];
            if (wavelen < highWavelen) continue;
            if (wavelen > lowWavelen) {
                p[i] /= r.factor;
            } else {
                const double smooth = (r.originalContext / wavelen - r.lowFreqFactor) / (r.highFreqFactor - r.lowFreqFactor);
                p[i] = (1 - smooth) * p[i] / r.factor + smooth * p[i];
            }
        }
    } else if (r.type == "yarn") {
        // Pairs rotating fewer than beta_slow times over the original context are interpolated (divided by the
        // factor), those rotating more than beta_fast times kept, and a linear ramp between blends the two.
        const double dims = double(s.headDim), base = s.ropeTheta, context = double(r.originalContext);
        auto correctionDim = [&](double rotations) {
            return dims * std::log(context / (rotations * 2 * M_PI)) / (2 * std::log(base));
        };
        double low = correctionDim(r.betaFast), high = correctionDim(r.betaSlow);
        if (r.truncate) {
            low = std::floor(low);
            high = std::ceil(high);
        }
        low = std::max(low, 0.0);
        high = std::min(high, dims - 1);
        if (low == high) high += 0.001;
        for (int64_t i = 0; i < half; ++i) {
            const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
            const double keep = 1.0 - ramp;   // weight of the unscaled (extrapolated) frequency
            p[i] = p[i] / r.factor * (1 - keep) + p[i] * keep;
        }
    }
    if (model.has("rope_freqs.weight")) {   // GGUF stores Llama 3 scaling as per-frequency divisors
        at::Tensor factors = model.floatTensor("rope_freqs.weight").to(at::kDouble);
        if (factors.numel() != half) throw Error(model.path, "rope_freqs.weight has the wrong length");
        inv = inv / factors;
    }
    return inv.to(at::kFloat);
}

at::Tensor ropeTable(const at::Tensor& inverseFrequencies, int64_t positions, RopeStyle style, double scale) {
    const int64_t half = inverseFrequencies.numel();
    at::Tensor angles = at::outer(at::arange(positions, at::kDouble), inverseFrequencies.to(at::kCPU, at::kDouble));
    at::Tensor cos = angles.cos() * scale, sin = angles.sin() * scale;   // [positions, half]
    at::Tensor cosFull, sinSigned;
    if (style == RopeStyle::AdjacentPairs) {   // pair i is (2i, 2i + 1)
        cosFull = at::stack({cos, cos}, -1).reshape({positions, 2 * half});
        sinSigned = at::stack({-sin, sin}, -1).reshape({positions, 2 * half});
    } else {                                   // pair i is (i, i + half)
        cosFull = at::cat({cos, cos}, -1);
        sinSigned = at::cat({-sin, sin}, -1);
    }
    return at::stack({cosFull, sinSigned}, 1).to(at::kFloat);
}

at::Tensor swapRopePartners(const at::Tensor& x, RopeStyle style) {
    std::vector<int64_t> shape = x.sizes().vec();
    const int64_t headDim = shape.back();
    shape.back() = 2;
    if (style == RopeStyle::AdjacentPairs) {
        shape.insert(shape.end() - 1, headDim / 2);
        return x.reshape(shape).flip({-1}).reshape(x.sizes());
    }
    shape.push_back(headDim / 2);
    return x.reshape(shape).flip({-2}).reshape(x.sizes());
}

KvCache::KvCache(const ArchSpec& spec, int64_t batch, int64_t capacity, const RuntimeOptions& options)
    : mCapacity(capacity) {
    auto opts = at::TensorOptions().dtype(options.dtype).device(options.device);
    for (int64_t l = 0; l < spec.layers; ++l) {
        mKeys.push_back(at::zeros({batch, spec.kvHeadsAt(l), capacity, spec.headDim}, opts));
        mValues.push_back(at::zeros({batch, spec.kvHeadsAt(l), capacity, spec.headDim}, opts));
    }
    mAttentionWorkspaces.resize(static_cast<size_t>(spec.layers));   // made on first use (fusedDecodeAttention)
}

KvCache::~KvCache() = default;

int64_t KvCache::graphReplays() const { return mGraph ? mGraph->replays() : 0; }

std::string KvCache::graphFailure() const { return mGraphFailure; }

// Whether this LibTorch multiplies matrices of `type` on the CPU (1.13 has no f16 addmm there; 2.x has).
static bool cpuMatmulSupports(at::ScalarType type) {
    try {
        const at::Tensor a = at::ones({2, 2}, at::TensorOptions().dtype(type));
        at::addmm(a, a, a);
        return true;
    } catch (const c10::Error&) {
        return false;
    }
}

void requireComputeType(const at::Device& device, at::ScalarType type) {
    if (!device.is_cpu() || type == at::kFloat) return;
    static const bool half = cpuMatmulSupports(at::kHalf), bfloat = cpuMatmulSupports(at::kBFloat16);
    if (!(type == at::kHalf ? half : type == at::kBFloat16 ? bfloat : false))
        throw Error(std::string("computing in ") + (type == at::kHalf ? "f16" : c10::toString(type)) +
                    " on the CPU: this LibTorch (" + TORCH_VERSION + ") cannot multiply such matrices on the CPU; use f32" +
                    (bfloat ? " or bf16" : "") + ", or a CUDA device");
}

Transformer::Transformer(const Model& model, RuntimeOptions options)
    : mModel(model), mOptions(options), mGlobals(std::make_unique<Globals>()), mRuntimeId(nextRuntimeId()) {
    const ArchSpec& s = model.spec;
    requireComputeType(mOptions.device, mOptions.dtype);
    if (mOptions.device.is_cpu()) planCpuWeights();
    auto load = [&](const std::string& name) { return weight(name); };
    if (s.family == Family::Llama) {
        mGlobals->embedding = load("model.embed_tokens.weight");
        mGlobals->finalNormWeight = load("model.norm.weight");
        mGlobals->finalNormInComputeType = mGlobals->finalNormWeight.to(mOptions.dtype);
        loadHead();
        mInvFreq = ropeInverseFrequencies(s, model).to(options.device);
    } else {
        mGlobals->embedding = load("transformer.wte.weight");
        mGlobals->positions = load("transformer.wpe.weight");
        mGlobals->finalNormWeight = load("transformer.ln_f.weight");
        mGlobals->finalNormBias = load("transformer.ln_f.bias");
        loadHead();
    }
    mBlocks.resize(static_cast<size_t>(s.layers));
}

Transformer::~Transformer() = default;

void Transformer::loadHead() {
    const std::string name = "lm_head.weight";
    if (!mModel.has(name)) {   // tied to the embedding
        mGlobals->head = mGlobals->embedding;
        return;
    }
    auto compressed = mModel.compressed(names::kHead);
    if (compressed && parameter(name)) {   // training: the dense parameter, its input prepared as the layer's (FP8)
        mGlobals->headCompressed = compressed;
        mGlobals->head = *parameter(name);
        return;
    }
    if (compressed) {
        mGlobals->headCompressed = compressed;
        mGlobals->headNative = nativeLinear(names::kHead, *compressed);
        if (mGlobals->headNative && compressed->kind() == "int")
            mGlobals->headTokenSlice = mOptions.dequantAboveTokens >= 0 ? mOptions.dequantAboveTokens : defaultDequantAboveTokens();
        if (mGlobals->headNative) return;
        mGlobals->head = compressed->weightOn(mOptions.device).to(mOptions.dtype);
        return;
    }
    mGlobals->head = weight(name);
}

std::unique_ptr<KvCache> Transformer::makeCache(int64_t batch, int64_t capacity) const {
    return std::make_unique<KvCache>(mModel.spec, batch, capacity, mOptions);
}

const at::Tensor* Transformer::parameter(const std::string& name) const {
    if (!mOptions.parameters) return nullptr;
    auto it = mOptions.parameters->find(name);
    return it == mOptions.parameters->end() ? nullptr : &it->second;
}

at::Tensor Transformer::weight(const std::string& name) const {
    if (const at::Tensor* given = parameter(name)) return *given;
    at::Tensor t = mModel.floatTensor(name);
    // Vectors (norms, biases) stay fp32; matrices take the compute type.
    at::ScalarType type = t.dim() >= 2 ? mOptions.dtype : at::kFloat;
    return t.to(mOptions.device, type);
}

const Transformer::Block& Transformer::block(int64_t layer) {
    auto& cached = mBlocks[static_cast<size_t>(layer)];
    if (cached) return *cached;
    auto b = std::make_unique<Block>();
    const ArchSpec& s = mModel.spec;
    const auto& suffixes = s.family == Family::Llama ? llamaSuffixes(s.attentionBias) : gpt2Suffixes();
    const std::string prefix = layerPrefix(s, layer);
    static const std::vector<std::pair<std::vector<std::string>, std::string>> projections = {
        {{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, "self_attn.qkv_proj"},
        {{"mlp.gate_proj", "mlp.up_proj"}, "mlp.gate_up_proj"}};
    std::set<std::string> fusedNatively;   // parts whose weights went into one packed matrix
    if (s.family == Family::Llama && !mOptions.parameters)
        for (const auto& [parts, fused] : projections)
            if (fuseNativeProjection(b->native, prefix, parts, fused)) fusedNatively.insert(parts.begin(), parts.end());
    for (const auto& suffix : suffixes) {
        const std::string layer = suffix.substr(0, suffix.rfind('.'));
        if (fusedNatively.count(layer) && suffix.compare(suffix.size() - 7, 7, ".weight") == 0) {
            b->compressed[layer] = mModel.compressed(prefix + layer);
            continue;
        }
        auto compressed = suffix.compare(suffix.size() - 7, 7, ".weight") == 0 ? mModel.compressed(prefix + layer) : nullptr;
        if (compressed) b->compressed[layer] = compressed;
        if (const at::Tensor* given = parameter(prefix + suffix)) {
            b->tensors[suffix] = *given;   // training: the dense parameter, never a kernel
        } else if (compressed) {
            if (auto kernel = nativeLinear(prefix + layer, *compressed)) {
                b->native[layer] = std::move(kernel);
                continue;
            }
            b->tensors[suffix] = compressed->weightOn(mOptions.device).to(mOptions.dtype);
        } else {
            b->tensors[suffix] = weight(prefix + suffix);
        }
    }
    for (const auto& [parts, fused] : projections) {   // biases of natively fused parts: one vector
        if (!b->native.count(fused) || !b->has(parts.front() + ".bias")) continue;
        std::vector<at::Tensor> biases;
        for (const auto& part : parts) biases.push_back(b->tensors.at(part + ".bias"));
        b->tensors[fused + ".bias"] = at::cat(biases, 0);
    }
    if (s.family == Family::Llama && !mOptions.parameters) {   // given parameters are used as they are
        b->fuse({"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, "self_attn.qkv_proj");
        b->fuse({"mlp.gate_proj", "mlp.up_proj"}, "mlp.gate_up_proj");
    }
    if (mOptions.device.is_cuda() && mOptions.nativeKernels && !mOptions.parameters) {
        attachSparse24(*b, prefix);
        dropPackedDenseWeights(*b);
    }
    if (mOptions.denseGemv && !mOptions.parameters) {
        b->denseGemvRows = kDenseGemvRuntimeRows;
        for (const char* norm : {"input_layernorm.weight", "post_attention_layernorm.weight"})
            if (b->has(norm)) b->computeTypeNorms[norm] = b->tensors.at(norm).to(mOptions.dtype);
    }
    if (mOptions.cacheWeights) {
        cached = std::move(b);
        return *cached;
    }
    mScratch = std::move(b);
    return *mScratch;
}

const char* cpuPackedIntName(CpuPackedInt mode) {
    return mode == CpuPackedInt::On ? "on" : mode == CpuPackedInt::Off ? "off" : "auto";
}

CpuPackedInt cpuPackedIntDefault() {
    static const CpuPackedInt value = [] {
        const auto v = env::environmentValue("CWB_CPU_PACKED");
        if (!v || *v == "auto") return CpuPackedInt::Auto;
        try {
            return env::switchOf("CWB_CPU_PACKED", *v) ? CpuPackedInt::On : CpuPackedInt::Off;
        } catch (const env::SettingError&) {
            throw env::SettingError("CWB_CPU_PACKED='" + *v + "': it takes 0, off, false, no, 1, on, true, yes or auto");
        }
    }();
    return value;
}

namespace {
std::string gibText(double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(1ull << 30));
    return text;
}
} // namespace

RuntimeOptions sharingMemory(RuntimeOptions options, int runtimes) {
    const uint64_t available = options.availableMemory > 0 ? options.availableMemory : availableMemoryBytes();
    if (available > 0 && runtimes > 1) options.availableMemory = std::max<uint64_t>(1, available / uint64_t(runtimes));
    return options;
}

void Transformer::planCpuWeights() {
    // Float copies of every block (and of the globals) at the compute type, and the part of them that integer
    // layers account for: those the packed CPU path can run without a copy.
    const double element = double(at::elementSize(mOptions.dtype));
    double integerBytes = 0;
    std::vector<std::string> layers = mModel.linearLayers();   // the embeddings load as floats; an integer head need not
    if (mModel.compressed(names::kHead)) layers.push_back(names::kHead);
    if (mOptions.nativeKernels && !mOptions.parameters)
        for (const auto& layer : layers) {
            const auto* integer = dynamic_cast<const IntLinear*>(mModel.compressed(layer).get());
            if (integer && integer->bits() >= 2 && integer->bits() <= 8)
                integerBytes += double(mModel.tensor(layer + ".weight").elementCount()) * element;
        }
    const double allBytes = double(mModel.parameterCount()) * element;
    const uint64_t available = mOptions.availableMemory > 0 ? mOptions.availableMemory : availableMemoryBytes();
    const double budget = 0.6 * double(available);
    const bool allFit = available == 0 || allBytes <= budget;
    if (mOptions.cpuPackedInt == CpuPackedInt::Auto) {
        mOptions.cpuPackedInt = !allFit && integerBytes > 0 ? CpuPackedInt::On : CpuPackedInt::Off;
        if (mOptions.cpuPackedInt == CpuPackedInt::On)
            mCpuWeightPlan = "integer layers run from their packed levels: float copies of the model would take " +
                             gibText(allBytes) + " of " + gibText(double(available)) + " available";
    }
    const double heldBytes = allBytes - (mOptions.cpuPackedInt == CpuPackedInt::On ? integerBytes : 0.0);
    // Converted weights of every block would not fit: convert one block per use instead (same results, slower).
    if (mOptions.cacheWeights && available > 0 && heldBytes > budget) {
        mOptions.cacheWeights = false;
        mCpuWeightPlan += std::string(mCpuWeightPlan.empty() ? "" : "; ") + "blocks converted one at a time: " +
                          gibText(heldBytes) + " of float weights against " + gibText(double(available)) + " available";
    }
}

bool Transformer::fuseNativeProjection(std::map<std::string, std::shared_ptr<const NativeIntLinear>>& native,
                                       const std::string& prefix, const std::vector<std::string>& parts,
                                       const std::string& fused) {
    if (!mOptions.fuseNativeProjections || !mOptions.nativeKernels || !mOptions.device.is_cuda() || !nativeKernelsBuilt())
        return false;
    std::vector<std::shared_ptr<const CompressedLinear>> held;   // keeps the parts alive while they are read
    std::vector<const quant::QuantizedWeight*> weights;
    std::vector<at::Tensor> inputScales;
    // FP8 with dynamic activations, and W8A8 with one divisor: the same codes of x for every part.
    std::vector<const Fp8Linear*> fp8Parts;
    std::vector<const W8A8Linear*> w8a8Parts;
    for (const auto& part : parts) {
        auto layer = mModel.compressed(prefix + part);
        held.push_back(layer);
        if (const auto* fp8 = dynamic_cast<const Fp8Linear*>(layer.get())) {
            fp8Parts.push_back(fp8);
            continue;
        }
        if (const auto* w8a8 = dynamic_cast<const W8A8Linear*>(layer.get())) {
            w8a8Parts.push_back(w8a8);
            continue;
        }
        const auto* integer = dynamic_cast<const IntLinear*>(layer.get());
        if (!integer || (integer->bits() != 4 && integer->bits() != 8)) return false;
        weights.push_back(&integer->quantized());
        inputScales.push_back(integer->inputScale());
    }
    if (!fp8Parts.empty() && fp8Parts.size() != parts.size()) return false;
    if (!w8a8Parts.empty() && w8a8Parts.size() != parts.size()) return false;
    std::string reason;
    // Parts of one kind that cannot run as one layer: each runs on its own, and its path says why.
    const auto refuse = [&] {
        for (const auto& part : parts) mStackRefusals[prefix + part] = reason;
        return false;
    };
    const bool integerParts = fp8Parts.empty() && w8a8Parts.empty();
    if (integerParts && !canConcatenateRows(weights, inputScales, reason)) return refuse();
    if (!mNativeWorkspace) mNativeWorkspace = makeNativeWorkspace(mOptions.dequantAboveTokens);
    std::unique_ptr<NativeIntLinear> kernel;
    if (!fp8Parts.empty())
        kernel = makeNativeFp8Rows(fp8Parts, mOptions.device, mOptions.dtype, mNativeWorkspace, reason);
    else if (!w8a8Parts.empty())
        kernel = makeNativeW8a8Rows(w8a8Parts, mOptions.device, mOptions.dtype, mNativeWorkspace, reason);
    else
        kernel = makeNativeIntLinear(concatenateRows(weights), inputScales.front(), mOptions.device, mOptions.dtype,
                                     mNativeWorkspace, reason);
    if (!kernel) return refuse();
    std::string names;
    for (const auto& part : parts) {   // "self_attn.q_proj" -> "q"
        const std::string shortName = part.substr(part.find('.') + 1);
        names += (names.empty() ? "" : "/") + shortName.substr(0, shortName.rfind("_proj"));
    }
    for (const auto& part : parts) mLayerPaths[prefix + part] = {true, kernel->kernelName() + ", fused " + names};
    native[fused] = std::move(kernel);
    return true;
}

std::shared_ptr<const NativeIntLinear> Transformer::nativeLinear(const std::string& name, const CompressedLinear& layer) {
    LayerPath path;
    std::shared_ptr<const NativeIntLinear> kernel;
    if (!mOptions.nativeKernels) {
        path.how = "native kernels turned off";
    } else if (mOptions.device.is_cpu()) {
        // Integer layers from their packed levels where asked; FP8 and W8A8 layers have no CPU kernel.
        const auto* integer = dynamic_cast<const IntLinear*>(&layer);
        if (!integer) path.how = "no CPU kernel for " + layer.kind() + " layers";
        else if (mOptions.cpuPackedInt != CpuPackedInt::On)
            path.how = "on the CPU (CWB_CPU_PACKED=1 runs them from their packed levels)";
        else kernel = makeCpuIntLinear(integer->quantized(), integer->inputScale(), path.how);
        if (kernel) path = {true, kernel->kernelName()};
    } else if (!mOptions.device.is_cuda()) {
        path.how = "not on CUDA or the CPU";
    } else {
        if (!mNativeWorkspace) mNativeWorkspace = makeNativeWorkspace(mOptions.dequantAboveTokens);
        kernel = makeNativeLinear(layer, mOptions.device, mOptions.dtype, mNativeWorkspace, path.how);
        if (kernel) path = {true, kernel->kernelName()};
        const auto refused = mStackRefusals.find(name);
        if (kernel && refused != mStackRefusals.end()) path.how += ", not stacked: " + refused->second;
    }
    mLayerPaths[name] = path;
    return kernel;
}

void Transformer::attachSparse24(Block& b, const std::string& prefix) {
    const int64_t minRows = sparse24MinRows(mOptions.sparseMinRows);
    for (const auto& [suffix, tensor] : b.tensors) {
        const size_t dot = suffix.rfind(".weight");
        if (dot == std::string::npos || dot + 7 != suffix.size() || tensor.dim() != 2) continue;
        const std::string layer = suffix.substr(0, dot);
        // Parts of a fused matrix run as the fused one; compressed layers have their own path.
        const bool fusedPart = (b.has("self_attn.qkv_proj.weight") && layer.rfind("self_attn.", 0) == 0 && layer != "self_attn.qkv_proj" && layer != "self_attn.o_proj") ||
                               (b.has("mlp.gate_up_proj.weight") && (layer == "mlp.gate_proj" || layer == "mlp.up_proj"));
        if (fusedPart || b.compressed.count(layer) || b.native.count(layer)) continue;
        Sparse24Decision d = makeSparse24Linear(tensor, minRows);
        if (!d.twoFour) continue;
        if (d.kernel) b.sparse[layer] = d.kernel;
        LayerPath path{d.kernel != nullptr, d.how, true};
        // Packed once per cached block (a block rebuilt at every forward would pack at every forward).
        if (mOptions.denseGemv && mOptions.sparse24Gemv && mOptions.cacheWeights && tensor.size(1) % 16 == 0) {
            b.packed24[layer] = packSparse24Rows(tensor, prefix + layer);
            b.packedSavedBytes += size_t(tensor.nbytes()) - b.packed24[layer].bytes();
            path.twoFourGemv = true;
            path.denseDropped = !mOptions.sparse24KeepDense;
        }
        mLayerPaths[prefix + layer] = path;
    }
}

void Transformer::dropPackedDenseWeights(Block& b) {
    if (mOptions.sparse24KeepDense) return;
    const std::map<std::string, std::vector<std::string>> fusedParts = {
        {"self_attn.qkv_proj", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
        {"mlp.gate_up_proj", {"mlp.gate_proj", "mlp.up_proj"}}};
    for (const auto& [layer, packed] : b.packed24) {
        b.tensors.erase(layer + ".weight");
        auto parts = fusedParts.find(layer);
        if (parts == fusedParts.end()) continue;
        for (const auto& part : parts->second) {   // views of the fused weight: they would keep its memory
            auto view = b.tensors.find(part + ".weight");
            if (view == b.tensors.end()) continue;
            b.droppedPartRows[part] = view->second.size(0);
            b.tensors.erase(view);
        }
    }
}

size_t Transformer::decodeBytesSavedByPacking() const {
    size_t saved = 0;
    for (const auto& block : mBlocks)
        if (block) saved += block->packedSavedBytes;
    return saved;
}

std::string Transformer::layerPathSummary() const {
    std::map<std::string, int64_t> native, fallback, dense, unpacked;
    int64_t gemv24 = 0, dropped = 0;
    for (const auto& [name, path] : mLayerPaths) {
        ++(path.native ? native : path.denseDropped ? unpacked : path.twoFour ? dense : fallback)[path.how];
        gemv24 += path.twoFourGemv ? 1 : 0;
        dropped += path.denseDropped ? 1 : 0;
    }
    auto list = [](const std::map<std::string, int64_t>& counts) {
        std::string text;
        for (const auto& [how, n] : counts) text += (text.empty() ? "" : "; ") + std::to_string(n) + " " + how;
        return text;
    };
    std::string text;
    if (!native.empty()) text = "native: " + list(native);
    if (!fallback.empty()) text += std::string(text.empty() ? "" : " | ") + "dequantized: " + list(fallback);
    if (!dense.empty()) text += std::string(text.empty() ? "" : " | ") + "2:4 kept dense: " + list(dense);
    if (!unpacked.empty()) text += std::string(text.empty() ? "" : " | ") + "2:4 without cuSPARSELt: " + list(unpacked);
    if (gemv24 > 0)
        text += std::string(text.empty() ? "" : " | ") + "2:4 GEMV on packed rows (decode): " + std::to_string(gemv24) +
                " layers" + (dropped == gemv24 ? ", no dense copy (other row counts cuSPARSELt does not take unpack them per call)"
                                               : dropped > 0 ? ", " + std::to_string(dropped) + " without a dense copy" : "");
    return text;
}

const at::Tensor& Transformer::ropeRows(int64_t positions) {
    if (!mRopeTable.defined() || mRopeTable.size(0) < positions) {
        if (mRopeTable.defined()) mRetiredRopeTables.push_back(mRopeTable);
        const int64_t rows = std::max<int64_t>(positions, mRopeTable.defined() ? 2 * mRopeTable.size(0) : 256);
        const RopeScaling& scaling = mModel.spec.ropeScaling;
        mRopeTable = ropeTable(mInvFreq, rows, mModel.spec.ropeStyle, scaling.type == "yarn" ? scaling.attentionFactor : 1.0)
                         .to(mOptions.device);
    }
    return mRopeTable;
}

at::Tensor Transformer::applyRope(const at::Tensor& x, int64_t start) {
    // x: [batch, heads, tokens, headDim]
    at::Tensor rows = ropeRows(start + x.size(2)).narrow(0, start, x.size(2));   // [tokens, 2, headDim]
    at::Tensor xf = x.to(at::kFloat);
    at::Tensor out = (xf * rows.select(1, 0)).addcmul_(swapRopePartners(xf, mModel.spec.ropeStyle), rows.select(1, 1));
    return out.to(x.scalar_type());
}

at::Tensor Transformer::attention(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  KvCache* cache, int64_t start, ActivationObserver* observer) const {
    // q: [B, H, T, hd]; k, v: [B, Hkv, T, hd]
    const ArchSpec& s = mModel.spec;
    const int64_t tokens = q.size(2);
    at::Tensor keys = k, values = v;
    if (cache) {
        auto& ck = cache->mKeys[static_cast<size_t>(layer)];
        auto& cv = cache->mValues[static_cast<size_t>(layer)];
        ck.narrow(2, start, tokens).copy_(k);
        cv.narrow(2, start, tokens).copy_(v);
        keys = ck.narrow(2, 0, start + tokens);
        values = cv.narrow(2, 0, start + tokens);
    }
    const int64_t heads = q.size(1), groups = heads / k.size(1);
    if (groups > 1) {
        keys = keys.repeat_interleave(groups, 1);
        values = values.repeat_interleave(groups, 1);
    }
    at::Tensor out;   // [B, H, T, hd]
    // One query (eager decode) keeps the reference path: through SDPA it measured ~30 us slower per layer on the
    // H200 (7B eager decode 14.8 against 12.7 ms per token).
    const bool fused = fusedAttentionFor(mOptions) && q.is_cuda() && q.scalar_type() == mOptions.dtype &&
                       tokens > 1 && !(observer && observer->wantsAttentionProbs());
    if (fused) {
#if TORCH_VERSION_MAJOR >= 2
        const int64_t total = keys.size(2);
        // Query i (absolute position start + i) sees keys 0 .. start + i: SDPA's own causal mask when the queries
        // are all the keys, else an explicit one (true: attend).
        if (tokens == total) {
            out = at::scaled_dot_product_attention(q, keys, values, {}, 0.0, /*is_causal=*/true);
        } else {
            const at::Tensor allowed =
                at::ones({tokens, total}, at::TensorOptions().dtype(at::kBool).device(q.device())).tril(start);
            out = at::scaled_dot_product_attention(q, keys, values, allowed);
        }
#endif
    } else {
        out = referenceAttention(layer, q, keys, values, start, observer);
    }
    if (mOptions.headGates && layer < static_cast<int64_t>(mOptions.headGates->size())) {
        const at::Tensor& gate = (*mOptions.headGates)[static_cast<size_t>(layer)];
        if (gate.defined()) out = out * gate.to(out.device(), out.scalar_type()).reshape({gate.dim() == 2 ? gate.size(0) : 1, heads, 1, 1});
    }
    if (observer && observer->wantsHeads()) observer->onAttentionHeads(layer, out.transpose(1, 2));
    return out.transpose(1, 2).reshape({q.size(0), tokens, heads * s.headDim});
}

bool Transformer::fusedAttentionAvailable() { return TORCH_VERSION_MAJOR >= 2; }

bool Transformer::fusedAttentionFor(const RuntimeOptions& options) {
    return options.fusedAttention && fusedAttentionAvailable() && options.device.is_cuda() &&
           (options.dtype == at::kHalf || options.dtype == at::kBFloat16 || (options.fusedAttentionFloat32 && options.dtype == at::kFloat));
}

at::Tensor Transformer::referenceAttention(int64_t layer, const at::Tensor& q, const at::Tensor& keys,
                                           const at::Tensor& values, int64_t start, ActivationObserver* observer) const {
    const int64_t tokens = q.size(2), total = keys.size(2);
    const at::Tensor keysT = keys.to(at::kFloat).transpose(-2, -1), valuesF = values.to(at::kFloat);
    const double scale = 1.0 / std::sqrt(double(q.size(3)));
    // Queries first .. first + rows - 1 (absolute position start + i sees keys 0 .. start + i).
    auto block = [&](int64_t first, int64_t rows) {
        at::Tensor scores = at::matmul(q.narrow(2, first, rows).to(at::kFloat), keysT).mul_(scale);
        const at::Tensor masked =
            at::ones({rows, total}, at::TensorOptions().dtype(at::kBool).device(q.device())).triu(start + first + 1);
        return at::softmax(scores.masked_fill_(masked, -std::numeric_limits<float>::infinity()), -1);
    };
    const bool wantsProbs = observer && observer->wantsAttentionProbs();
    const int64_t rowBytes = q.size(0) * q.size(1) * total * int64_t(sizeof(float));
    // Under autograd every block's probabilities stay alive for the backward pass anyway (gradient importance).
    const bool recording = at::GradMode::is_enabled() && q.requires_grad();
    const int64_t budget = q.is_cuda() || recording ? 0 : mOptions.cpuAttentionBlockBytes;
    const int64_t rowsPerBlock = budget > 0 ? std::max<int64_t>(1, budget / std::max<int64_t>(1, rowBytes)) : tokens;
    if (wantsProbs || rowsPerBlock >= tokens) {
        const at::Tensor probs = block(0, tokens);
        if (wantsProbs) observer->onAttentionProbs(layer, probs);
        return at::matmul(probs, valuesF).to(q.scalar_type());   // [B, H, T, hd]
    }
    std::vector<at::Tensor> parts;
    for (int64_t first = 0; first < tokens; first += rowsPerBlock) {
        const int64_t rows = std::min(rowsPerBlock, tokens - first);
        parts.push_back(at::matmul(block(first, rows), valuesF));
    }
    return at::cat(parts, 2).to(q.scalar_type());
}

at::Tensor Transformer::llamaBlock(int64_t layer, const at::Tensor& x, KvCache* cache, int64_t start,
                                   ActivationObserver* observer) {
    const ArchSpec& s = mModel.spec;
    const Block& b = block(layer);
    const std::string prefix = layerPrefix(s, layer);
    auto lin = [&](const std::string& suffix, const at::Tensor& input) {
        at::Tensor y = b.linear(suffix, input);
        if (observer && observer->wantsLinear(prefix + suffix)) observer->onLinear(prefix + suffix, input, y);
        return y;
    };
    // Dense q/k/v and gate/up run as one matrix each (Block::fuse); observers still see each layer's output.
    auto fused = [&](const std::string& name, const at::Tensor& input, const std::vector<std::string>& parts) {
        std::vector<at::Tensor> outputs;
        if (!b.hasLinear(name)) {
            for (const auto& part : parts) outputs.push_back(lin(part, input));
            return outputs;
        }
        at::Tensor y = b.linear(name, input);
        int64_t offset = 0;
        for (const auto& part : parts) {
            const int64_t n = b.outputRows(part);
            outputs.push_back(y.narrow(-1, offset, n));
            offset += n;
            if (observer && observer->wantsLinear(prefix + part)) observer->onLinear(prefix + part, input, outputs.back());
        }
        return outputs;
    };
    const int64_t B = x.size(0), T = x.size(1), heads = s.headsAt(layer), kvHeads = s.kvHeadsAt(layer);
    at::Tensor h = runtimeRmsNorm(x, b["input_layernorm.weight"], s.normEps);
    auto qkv = fused("self_attn.qkv_proj", h, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"});
    at::Tensor q = qkv[0].reshape({B, T, heads, s.headDim}).transpose(1, 2);
    at::Tensor k = qkv[1].reshape({B, T, kvHeads, s.headDim}).transpose(1, 2);
    at::Tensor v = qkv[2].reshape({B, T, kvHeads, s.headDim}).transpose(1, 2);
    q = applyRope(q, start);
    k = applyRope(k, start);
    at::Tensor attn = attention(layer, q, k, v, cache, start, observer);
    at::Tensor out = x + lin("self_attn.o_proj", attn);
    h = runtimeRmsNorm(out, b["post_attention_layernorm.weight"], s.normEps);
    auto gateUp = fused("mlp.gate_up_proj", h, {"mlp.gate_proj", "mlp.up_proj"});
    return out + lin("mlp.down_proj", at::silu(gateUp[0]) * gateUp[1]);
}

at::Tensor Transformer::gpt2Block(int64_t layer, const at::Tensor& x, KvCache* cache, int64_t start,
                                  ActivationObserver* observer) {
    const ArchSpec& s = mModel.spec;
    const Block& b = block(layer);
    const std::string prefix = layerPrefix(s, layer);
    auto lin = [&](const std::string& suffix, const at::Tensor& input) {
        at::Tensor y = b.linear(suffix, input);
        if (observer && observer->wantsLinear(prefix + suffix)) observer->onLinear(prefix + suffix, input, y);
        return y;
    };
    const int64_t B = x.size(0), T = x.size(1);
    at::Tensor h = layerNorm(x, b["ln_1.weight"], b["ln_1.bias"], s.normEps);
    at::Tensor qkv = lin("attn.c_attn", h);
    auto parts = qkv.split(s.hidden, -1);
    auto heads = [&](const at::Tensor& t) { return t.reshape({B, T, s.heads, s.headDim}).transpose(1, 2); };
    at::Tensor attn = attention(layer, heads(parts[0]), heads(parts[1]), heads(parts[2]), cache, start, observer);
    at::Tensor out = x + lin("attn.c_proj", attn);
    h = layerNorm(out, b["ln_2.weight"], b["ln_2.bias"], s.normEps);
    return out + lin("mlp.c_proj", at::gelu(lin("mlp.c_fc", h), "tanh"));
}

at::Tensor Transformer::forward(const at::Tensor& tokens, KvCache* cache, ActivationObserver* observer) {
    const ArchSpec& s = mModel.spec;
    if (tokens.dim() != 2) throw Error("forward: tokens must be [batch, count], got " + std::to_string(tokens.dim()) + " dimensions");
    const int64_t B = tokens.size(0), T = tokens.size(1);
    if (B == 0 || T == 0) throw Error("forward: no tokens");
    at::Tensor ids = tokens.to(at::kLong);
    const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
    if (lo < 0 || hi >= s.vocab)
        throw Error("forward: token id " + std::to_string(lo < 0 ? lo : hi) + " is outside the vocabulary of " +
                    std::to_string(s.vocab));
    const int64_t start = cache ? cache->length() : 0;
    if (cache && (start + T > cache->capacity() || cache->mKeys.at(0).size(0) != B))
        throw Error("forward: KV cache holds " + std::to_string(cache->capacity()) + " tokens of batch " +
                    std::to_string(cache->mKeys.at(0).size(0)) + "; cannot add " + std::to_string(T) + " at position " +
                    std::to_string(start));
    const bool fixedShape = cache && T == 1 && fixedShapeDecodeApplies(observer) &&
                            (mOptions.decode == DecodeMode::FixedShape ||
                             (mOptions.decode == DecodeMode::CudaGraph && mOptions.device.is_cuda() && DecodeGraph::available()));
    if (fixedShape) {
        at::Tensor out = decodeFixedShape(ids, *cache);
        cache->mLength = start + 1;
        return out;
    }
    at::Tensor x = embedAt(ids, start);
    for (int64_t l = 0; l < s.layers; ++l)
        x = s.family == Family::Llama ? llamaBlock(l, x, cache, start, observer) : gpt2Block(l, x, cache, start, observer);
    mScratch.reset();
    if (cache) cache->mLength = start + T;
    return logits(x);
}

at::Tensor Transformer::embedAt(const at::Tensor& tokens, int64_t start) const {
    const ArchSpec& s = mModel.spec;
    const int64_t T = tokens.size(1);
    at::Tensor x = at::embedding(mGlobals->embedding, tokens.to(at::kLong).to(mOptions.device));   // [B, T, hidden]
    if (s.family == Family::Gpt2) {
        if (start + T > s.context)
            throw Error("forward: GPT-2 has " + std::to_string(s.context) + " learned positions; position " +
                        std::to_string(start + T - 1) + " is past them");
        at::Tensor pos = at::arange(start, start + T, at::TensorOptions().dtype(at::kLong).device(mOptions.device));
        x = x + at::embedding(mGlobals->positions, pos).unsqueeze(0);
    }
    return x;
}

at::Tensor Transformer::embed(const at::Tensor& tokens) const { return embedAt(tokens, 0); }

at::Tensor Transformer::runBlock(int64_t layer, const at::Tensor& x, ActivationObserver* observer) {
    if (layer < 0 || layer >= mModel.spec.layers) throw Error("runBlock: no layer " + std::to_string(layer));
    at::Tensor y = mModel.spec.family == Family::Llama ? llamaBlock(layer, x, nullptr, 0, observer)
                                                       : gpt2Block(layer, x, nullptr, 0, observer);
    mScratch.reset();
    return y;
}

at::Tensor Transformer::finalNorm(const at::Tensor& hidden) const {
    const ArchSpec& s = mModel.spec;
    return s.family == Family::Llama ? runtimeRmsNorm(hidden, mGlobals->finalNormWeight, s.normEps)
                                     : layerNorm(hidden, mGlobals->finalNormWeight, mGlobals->finalNormBias, s.normEps);
}

at::Tensor Transformer::logits(const at::Tensor& hidden) const { return headLinear(finalNorm(hidden)).to(at::kFloat); }

at::Tensor Transformer::headLinear(const at::Tensor& x) const {
    if (mGlobals->headNative) {
        const int64_t slice = mGlobals->headTokenSlice, cols = x.size(-1);
        if (slice <= 0 || x.numel() / cols <= slice) return mGlobals->headNative->forward(x).to(x.scalar_type());
        const at::Tensor rows = x.reshape({-1, cols});
        std::vector<at::Tensor> parts;
        for (int64_t start = 0; start < rows.size(0); start += slice)
            parts.push_back(mGlobals->headNative->forward(rows.narrow(0, start, std::min(slice, rows.size(0) - start))));
        std::vector<int64_t> shape = x.sizes().vec();
        shape.back() = parts.front().size(-1);
        return at::cat(parts, 0).view(shape).to(x.scalar_type());
    }
    const at::Tensor input = mGlobals->headCompressed
                                 ? mGlobals->headCompressed->prepareInput(x.to(at::kFloat)).to(x.scalar_type()) : x;
    if (mOptions.denseGemv && !mOptions.parameters && denseGemvApplies(input, mGlobals->head, kDenseGemvRuntimeRows))
        return denseGemvLinear(input, mGlobals->head, at::Tensor(), at::Tensor());
    return at::linear(input, mGlobals->head);
}

struct SavedTransformerBlock {
    std::unique_ptr<Transformer::Block> block;
    std::map<std::string, LayerPath> paths;
    std::map<std::string, std::string> refusals;
};

std::shared_ptr<SavedTransformerBlock> Transformer::setBlockAside(int64_t layer) {
    auto saved = std::make_shared<SavedTransformerBlock>();
    saved->block = std::move(mBlocks.at(static_cast<size_t>(layer)));
    const std::string prefix = layerPrefix(mModel.spec, layer);
    for (auto it = mLayerPaths.lower_bound(prefix); it != mLayerPaths.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
        saved->paths.insert(*it);
    for (auto it = mStackRefusals.lower_bound(prefix); it != mStackRefusals.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
        saved->refusals.insert(*it);
    invalidateBlock(layer);
    return saved;
}

void Transformer::restoreBlock(int64_t layer, std::shared_ptr<SavedTransformerBlock> saved) {
    invalidateBlock(layer);   // what was built meanwhile goes, with its paths
    if (!saved || !saved->block) return;   // never built: built again on first use
    mBlocks.at(static_cast<size_t>(layer)) = std::move(saved->block);
    mLayerPaths.insert(saved->paths.begin(), saved->paths.end());
    mStackRefusals.insert(saved->refusals.begin(), saved->refusals.end());
}

void Transformer::invalidateBlock(int64_t layer) {
    ++mWeightsVersion;
    if (layer < 0) {
        for (auto& b : mBlocks) b.reset();
        mBlocks.resize(static_cast<size_t>(mModel.spec.layers));
        // The head is loaded once, with the runtime, so its path stays.
        auto head = mLayerPaths.find(names::kHead);
        std::optional<LayerPath> headPath;
        if (head != mLayerPaths.end()) headPath = head->second;
        mLayerPaths.clear();
        if (headPath) mLayerPaths[names::kHead] = *headPath;
        mStackRefusals.clear();
    } else {
        mBlocks.at(static_cast<size_t>(layer)).reset();
        // The block's layer paths are recorded again when it is built; until then they would describe the old layers.
        const std::string prefix = layerPrefix(mModel.spec, layer);
        for (auto it = mLayerPaths.lower_bound(prefix); it != mLayerPaths.end() && it->first.compare(0, prefix.size(), prefix) == 0;)
            it = mLayerPaths.erase(it);
        for (auto it = mStackRefusals.lower_bound(prefix); it != mStackRefusals.end() && it->first.compare(0, prefix.size(), prefix) == 0;)
            it = mStackRefusals.erase(it);
    }
}

} // namespace cwb
