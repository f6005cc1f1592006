// Quantization methods: round-to-nearest, GPTQ, AWQ, SmoothQuant W8A8 and FP8. The math lives in
// core/compress/*_math; this file chooses layers, gathers calibration statistics and stores the results.
#include "core/compress/compressed_layers.h"
#include "core/compress/gptq_math.h"
#include "core/compress/awq_math.h"
#include "core/compress/method.h"
#include "core/compress/pipeline.h"
#include "core/compress/methods/calibration_stats.h"
#include "core/compress/reconstruction_meter.h"
#include "core/compress/sequential.h"
#include "core/model/model.h"
#include "core/util/error.h"

#include <algorithm>

namespace cwb {

namespace {

std::string weightOf(const std::string& layer) { return layer + ".weight"; }

// The storage precision of a tensor as a LibTorch dtype (quantized GGUF types become f32 once changed).
at::ScalarType storageType(const Model& model, const std::string& name) {
    const ggml::Type t = model.tensor(name).type;
    return t == ggml::Type::F16 ? at::kHalf : t == ggml::Type::BF16 ? at::kBFloat16 : at::kFloat;
}

bool hasTensor(const Model& model, const std::string& name) {
    const auto& all = model.tensorNames();
    return std::find(all.begin(), all.end(), name) != all.end();
}

// Zeros that rounding left are not a pruning mask: a layer still in a quantized file's type (Q4_0 puts about 1/16 of
// its weights exactly at zero, Q6_K about 1/64) or compressed by an earlier step (int4 sym: about 1/16 too).
bool zerosFromRounding(const Model& model, const std::string& layer) {
    if (model.compressed(layer)) return true;
    const ggml::Type t = model.tensor(targetWeightName(model, layer)).type;
    return t != ggml::Type::F32 && t != ggml::Type::F16 && t != ggml::Type::BF16;
}

quant::QuantSpec specFrom(const nlohmann::json& p, bool symmetric) {
    quant::QuantSpec spec;
    spec.bits = p["bits"].get<int>();
    spec.symmetric = symmetric;
    spec.groupSize = p["group_size"].get<int64_t>();
    return spec;
}

// The output head too (llama.cpp quantizes output.weight, GPTQModel takes lm_head): RTN, FP8, and GPTQ and AWQ, which
// see the head's input after the last block (SequentialPass); AWQ's fold puts the head's scale into the final norm.
ParamSpec headParam() {
    return choiceParam("head", {"none", "also", "only"}, "none",
                       "the output head (lm_head): none: the block layers only; also: the head too; only: the head alone (no "
                       "targets). A head tied to the embedding gets its own copy; the embedding stays as it is");
}

class RtnMethod : public CompressionMethod {
public:
    std::string id() const override { return "quantize.rtn"; }
    int version() const override { return 2; }   // 2: scales fp16-representable, so exports are exact
    std::string displayName() const override { return "Round to nearest (RTN)"; }
    std::string summary() const override { return "weights rounded to the nearest level of a uniform grid per tensor, channel or group"; }
    std::vector<ParamSpec> params() const override {
        return {intParam("bits", 2, 8, 4, "bits per weight"),
                choiceParam("scheme", {"sym", "asym"}, "sym", "sym: zero point fixed mid-range; asym: min/max range with a zero point"),
                choiceParam("granularity", {"tensor", "channel", "group"}, "group", "one scale per tensor, per output channel, or per group of input columns"),
                intParam("group_size", 1, 1 << 16, 128, "input columns per group (granularity group); the last group of a row may be shorter"),
                headParam()};
    }
    bool needsCalibration(const nlohmann::json&) const override { return false; }
    void apply(StepContext& ctx) const override {
        for (size_t i = 0; i < ctx.layers.size(); ++i) {
            ctx.progress(double(i) / double(ctx.layers.size()));
            const std::string& layer = ctx.layers[i];
            nlohmann::json p = ctx.paramsFor(layer);
            quant::QuantSpec spec = specFrom(p, p["scheme"] == "sym");
            const std::string g = p["granularity"];
            if (g == "tensor") spec.groupSize = 0;
            if (g == "channel") spec.groupSize = -1;
            storeCompressedLayer(ctx.model, layer, std::make_shared<IntLinear>(quant::quantizeRtn(targetWeight(ctx.model, layer), spec)));
        }
    }
};

class GptqMethod : public CompressionMethod {
public:
    std::string id() const override { return "quantize.gptq"; }
    int version() const override { return 2; }   // 2: scales fp16-representable, so exports are exact
    std::string displayName() const override { return "GPTQ"; }
    std::string summary() const override { return "Hessian-aware rounding column by column with error feedback (Frantar et al. 2023)"; }
    std::vector<ParamSpec> params() const override {
        return {intParam("bits", 2, 8, 4, "bits per weight"),
                excluding(intParam("group_size", -1, 1 << 16, 128, "input columns per group; -1: one scale per output channel"), {0}),
                boolParam("sym", true, "symmetric grid (zero point mid-range)"),
                boolParam("act_order", false, "quantize columns in order of decreasing Hessian diagonal"),
                floatParam("damp_percent", 0.0, 1.0, 0.01, "damping added to the Hessian diagonal, as a fraction of its mean"),
                boolParam("static_groups", false, "compute group scales up front from the original weights (with act_order)"),
                intParam("block_size", 1, 4096, 128, "columns updated together (speed only)"),
                boolParam("keep_sparsity", true, "in a layer with 1% or more weights exactly zero (pruned: 2:4, magnitude, "
                                                 "Wanda), they stay zero; off: the error updates fill the pruned places. Zeros "
                                                 "of a layer read quantized (GGUF) or compressed by an earlier step are rounding, "
                                                 "not a mask, and are not kept"),
                headParam()};
    }
    bool needsCalibration(const nlohmann::json&) const override { return true; }
    void apply(StepContext& ctx) const override {
        int64_t masked = 0;
        calibrateLayerByLayer<quant::HessianAccumulator>(ctx, [&](const std::string& layer, quant::HessianAccumulator& hessian) {
            nlohmann::json p = ctx.paramsFor(layer);
            quant::GptqOptions options;
            options.quant = specFrom(p, p["sym"].get<bool>());
            options.dampPercent = p["damp_percent"].get<double>();
            options.actOrder = p["act_order"].get<bool>();
            options.staticGroups = p["static_groups"].get<bool>();
            options.blockSize = p["block_size"].get<int64_t>();
            if (options.quant.groupSize == 0) throw Error("quantize.gptq: group_size 0 is not allowed (use -1 for per channel)");
            const at::Tensor weight = targetWeight(ctx.model, layer);
            options.keepZeros = p["keep_sparsity"].get<bool>() && weight.numel() > 0 && !zerosFromRounding(ctx.model, layer) &&
                                (weight == 0).sum().item<double>() >= 0.01 * double(weight.numel());
            masked += options.keepZeros;
            quant::GptqResult r = quant::gptqQuantize(weight, hessian.hessian(), options);
            storeCompressedLayer(ctx.model, layer, std::make_shared<IntLinear>(std::move(r.weight), at::Tensor(), "gptq"));
        }, /*onDevice=*/true);
        if (masked > 0)
            ctx.note(std::to_string(masked) + " layer" + (masked == 1 ? "" : "s") + " with pruned (zero) weights kept them zero "
                     "(keep_sparsity), so a 2:4 or sparse mask survives the quantization");
    }
};

// The first calibration rows a layer sees, up to a limit, kept where the pass runs (AWQ's search reads them all).
class KeptRows {
public:
    explicit KeptRows(int64_t limit) : mLimit(limit) {}
    void add(const at::Tensor& x) {
        const int64_t keep = std::min(mLimit - mRows, x.size(0));
        if (keep <= 0) return;
        mParts.push_back(x.narrow(0, 0, keep).clone());
        mRows += keep;
    }
    at::Tensor rows() const { return at::cat(mParts, 0); }

private:
    int64_t mLimit;
    int64_t mRows = 0;
    std::vector<at::Tensor> mParts;
};

class AwqMethod : public CompressionMethod {
public:
    std::string id() const override { return "quantize.awq"; }
    int version() const override { return 2; }   // 2: scales fp16-representable, so exports are exact
    std::string displayName() const override { return "AWQ"; }
    std::string summary() const override { return "activation-aware per-channel scaling searched before rounding (Lin et al. 2024)"; }
    std::vector<ParamSpec> params() const override {
        return {intParam("bits", 2, 8, 4, "bits per weight"),
                intParam("group_size", -1, 1 << 16, 128, "input columns per group; -1: per output channel"),
                boolParam("zero_point", true, "asymmetric grid with a zero point (AWQ's default)"),
                intParam("grid", 1, 100, 20, "alpha candidates searched in [0, 1)"),
                intParam("max_rows", 16, 1 << 20, 4096, "calibration rows kept per layer for the search"),
                boolParam("fold", false, "one scale per input shared by its layers, folded into the norm, v_proj or up_proj "
                                         "that produces it (as AutoAWQ; the AWQ checkpoint layout needs it; Llama family)"),
                headParam()};
    }
    bool needsCalibration(const nlohmann::json&) const override { return true; }
    void apply(StepContext& ctx) const override {
        const bool fold = ctx.params.value("fold", false);
        if (fold && ctx.model.spec.family != Family::Llama)
            throw Error("quantize.awq with fold: folding the scales is implemented for the Llama family only");
        // Layers reading one input (q/k/v, gate/up) share its kept rows: as many as the largest max_rows of the step,
        // each layer then reading its own max_rows of them.
        int64_t mostRows = 0;
        for (const auto& layer : ctx.layers) mostRows = std::max(mostRows, ctx.paramsFor(layer)["max_rows"].get<int64_t>());
        const auto keptRows = [mostRows](const std::string&, int64_t) { return std::make_unique<KeptRows>(mostRows); };
        const auto ownRows = [&ctx](const std::string& layer, const at::Tensor& rows) {
            return rows.narrow(0, 0, std::min(rows.size(0), ctx.paramsFor(layer)["max_rows"].get<int64_t>()));
        };
        if (!fold) {
            // The search and the rounding run where the pass runs (a GPU when there is one); the errors are measured
            // in the same pass, on the forward that carries each compressed block on.
            calibrateLayerByLayer<KeptRows>(ctx, [&](const std::string& layer, KeptRows& kept) {
                const quant::AwqOptions options = optionsFor(ctx, layer);
                const at::Tensor x = ownRows(layer, kept.rows());
                const at::Tensor w = targetWeight(ctx.model, layer).to(x.device());
                const quant::AwqResult r = quant::awqSearch(w, x, options);
                storeCompressedLayer(ctx.model, layer, std::make_shared<IntLinear>(
                    quant::quantizeRtn(w * r.inputScales.unsqueeze(0), options.quant), r.inputScales.to(at::kCPU), "awq"));
            }, /*onDevice=*/true, keptRows);
            ctx.note("input scales are kept per layer (x / s before the layer), not folded into the preceding norm");
            return;
        }
        PerLayer<KeptRows> inputs;
        std::map<std::string, std::string> sameInputAs;   // k/v_proj -> q_proj, up_proj -> gate_proj: one copy each
        SequentialPass pass;
        pass.compute = ctx.compute;
        pass.layersOf = [&](int64_t b) { return layersOfBlock(ctx, b); };
        pass.collect = [&](const std::string& layer, const at::Tensor& x) { inputs.at(layer, x.size(1), keptRows).add(x); };
        pass.sharedInput = [&](const std::string& layer, const std::string& first) { sameInputAs[layer] = first; };
        ctx.reconstructionErrors.emplace();   // measured in the pass: the folded inputs are not the base's
        if (ctx.model.spec.kvHeads != ctx.model.spec.heads)
            ctx.note("o_proj gets no scale: with grouped-query attention a v_proj row feeds several heads (as AutoAWQ)");
        pass.compressBlock = [&](int64_t b) {
            const auto rowsOf = [&](const std::string& layer) {
                const auto shared = sameInputAs.find(layer);
                return ownRows(layer, inputs.get(shared == sameInputAs.end() ? layer : shared->second).rows());
            };
            compressBlockFolded(ctx, b, rowsOf);
            for (const auto& layer : layersOfBlock(ctx, b)) {
                inputs.erase(layer);
                sameInputAs.erase(layer);
            }
        };
        runSequential(ctx.model, ctx.calibration, pass, ctx.feedback);
    }

private:
    static quant::AwqOptions optionsFor(const StepContext& ctx, const std::string& layer) {
        const nlohmann::json p = ctx.paramsFor(layer);
        quant::AwqOptions options;
        options.quant = specFrom(p, !p["zero_point"].get<bool>());
        options.grid = p["grid"].get<int>();
        return options;
    }

    // AutoAWQ's order in a block: one scale per input, searched over the layers that read it on the block's
    // calibration inputs and folded into what produces the input (W·diag(s) in the readers, the producer divided
    // by s: exact before rounding); then every layer is rounded, with no input scale left beside it. The scaled
    // weights stay local (only the norms and biases are replaced in the model), so no dense copy builds up.
    // Past the last block the head reads the final norm, which takes its scale (a tied head gets its own copy first).
    static void compressBlockFolded(StepContext& ctx, int64_t b, const std::function<at::Tensor(const std::string&)>& rowsOf) {
        const auto named = [b](const char* suffix) { return names::llamaLayer(b, suffix); };
        struct Group {
            std::vector<std::string> readers;
            std::string producer;   // a norm weight [in], or a linear layer whose output rows make the input
            bool producerIsLinear;
        };
        std::vector<Group> groups;
        if (b == ctx.model.spec.layers) {
            groups.push_back({{names::kHead}, "model.norm.weight", false});
        } else {
            groups.push_back({{named("self_attn.q_proj"), named("self_attn.k_proj"), named("self_attn.v_proj")},
                              named("input_layernorm.weight"), false});
            groups.push_back({{named("self_attn.o_proj")}, named("self_attn.v_proj"), true});
            groups.push_back({{named("mlp.gate_proj"), named("mlp.up_proj")}, named("post_attention_layernorm.weight"), false});
            groups.push_back({{named("mlp.down_proj")}, named("mlp.up_proj"), true});
        }
        const std::vector<std::string> targeted = layersOfBlock(ctx, b);
        const auto isTargeted = [&](const std::string& l) {
            return std::find(targeted.begin(), targeted.end(), l) != targeted.end();
        };
        const at::Device device = ctx.compute.device;
        std::map<std::string, at::Tensor> scaled;       // weights with the folded scales, rounded below
        std::map<std::string, at::Tensor> inputScales;  // s of a reader's input: it reads x / s once folded
        const auto weight = [&](const std::string& layer) {
            const auto it = scaled.find(layer);
            return it != scaled.end() ? it->second : targetWeight(ctx.model, layer).to(device);
        };
        for (const Group& g : groups) {
            const size_t count = size_t(std::count_if(g.readers.begin(), g.readers.end(), isTargeted));
            if (count == 0) continue;
            // v_proj's rows feed o_proj one to one only without GQA (AutoAWQ skips this pair otherwise).
            if (g.producerIsLinear && g.producer == named("self_attn.v_proj") &&
                ctx.model.spec.kvHeadsAt(b) != ctx.model.spec.headsAt(b))
                continue;
            if (count != g.readers.size() || (g.producerIsLinear && !isTargeted(g.producer)))
                throw Error("quantize.awq with fold: " + g.readers.front() + ", the layers sharing its input and the one "
                            "producing it must all be in the step's targets (a folded scale changes all of them)");
            const quant::AwqOptions options = optionsFor(ctx, g.readers.front());
            for (const auto& l : g.readers) {
                const quant::QuantSpec other = optionsFor(ctx, l).quant;
                if (other.bits != options.quant.bits || other.groupSize != options.quant.groupSize ||
                    other.symmetric != options.quant.symmetric)
                    throw Error("quantize.awq with fold: " + l + " is quantized differently from " + g.readers.front() +
                                ", with which it shares one input scale; give them the same bits, group size and zero point");
            }
            std::vector<at::Tensor> weights;
            for (const auto& l : g.readers) weights.push_back(weight(l));
            const at::Tensor s = quant::awqSearch(at::cat(weights, 0), rowsOf(g.readers.front()), options).inputScales.to(device);
            const at::Tensor sCpu = s.to(at::kCPU);
            for (size_t i = 0; i < g.readers.size(); ++i) {
                scaled[g.readers[i]] = weights[i] * s.unsqueeze(0);
                inputScales[g.readers[i]] = s;
            }
            if (g.producerIsLinear) {
                scaled[g.producer] = weight(g.producer) / s.unsqueeze(1);
                const std::string bias = g.producer + ".bias";
                if (hasTensor(ctx.model, bias))
                    ctx.model.replaceTensor(bias, (ctx.model.floatTensor(bias) / sCpu).to(storageType(ctx.model, bias)));
            } else {
                ctx.model.replaceTensor(g.producer, (ctx.model.floatTensor(g.producer) / sCpu).to(storageType(ctx.model, g.producer)));
            }
        }
        for (const auto& layer : targeted) {
            const at::Tensor w = weight(layer);
            quant::QuantizedWeight q = quant::quantizeRtn(w, optionsFor(ctx, layer).quant);
            // The error of what the layer now computes: Q(W·s) against W·s on its folded input x / s.
            at::Tensor x = rowsOf(layer).to(at::kFloat);
            const auto s = inputScales.find(layer);
            if (s != inputScales.end()) x = x / s->second;
            quant::HessianAccumulator h(x.size(1));
            h.add(x);
            (*ctx.reconstructionErrors)[layer] = reconstructionError(w, q.dequantize(), h.hessian());
            storeCompressedLayer(ctx.model, layer, std::make_shared<IntLinear>(std::move(q), at::Tensor(), "awq"));
        }
    }
};

class SmoothQuantMethod : public CompressionMethod {
public:
    std::string id() const override { return "quantize.smoothquant"; }
    int version() const override { return 1; }
    std::string displayName() const override { return "SmoothQuant W8A8"; }
    std::string summary() const override { return "activation outliers migrated into the weights, then int8 weights and per-token int8 activations (Xiao et al. 2023)"; }
    std::vector<ParamSpec> params() const override {
        return {floatParam("alpha", 0.0, 1.0, 0.5, "migration strength: s = max|X|^alpha / max|W|^(1-alpha); 0.5-0.85 typical"),
                boolParam("fold", false, "one scale per normed input shared by q/k/v and by gate/up, folded into the RMSNorm "
                                         "(as llm-compressor; o_proj and down_proj unsmoothed; compressed-tensors export needs it; Llama family)")};
    }
    bool needsCalibration(const nlohmann::json&) const override { return true; }
    void apply(StepContext& ctx) const override {
        if (ctx.params.value("fold", false)) {
            applyFolded(ctx);
            return;
        }
        calibrateLayerByLayer<quant::AbsMaxAccumulator>(ctx, [&](const std::string& layer, quant::AbsMaxAccumulator& absMax) {
            at::Tensor w = ctx.model.floatTensor(weightOf(layer));
            at::Tensor s = quant::smoothingScales(absMax.absMax(), w, ctx.paramsFor(layer)["alpha"].get<double>());
            ctx.model.setCompressed(layer, std::make_shared<W8A8Linear>(quant::quantizeInt8PerChannel(w * s.unsqueeze(0)), s));
        });
        ctx.note("activations are quantized to int8 per token dynamically (simulated on the CPU); one smoothing scale per "
                 "layer: on CUDA q/k/v and gate/up then run apart (fold=true stacks them, and compressed-tensors "
                 "export needs it)");
    }

private:
    // llm-compressor's mappings for Llama: the input of q/k/v is input_layernorm's output, that of gate/up
    // post_attention_layernorm's. One s per mapping from the readers' stacked weights, the norm divided by s and the
    // readers' W·diag(s) rounded (exact before rounding); o_proj and down_proj are rounded unsmoothed. No scale
    // stays beside a layer, so the variant is what a compressed-tensors int-quantized checkpoint holds.
    void applyFolded(StepContext& ctx) const {
        if (ctx.model.spec.family != Family::Llama)
            throw Error("quantize.smoothquant with fold: folding the scales is implemented for the Llama family only");
        PerLayer<quant::AbsMaxAccumulator> stats;
        std::map<std::string, std::string> sameInputAs;
        ReconstructionMeter meter;
        bool compressing = true;
        SequentialPass pass;
        pass.layersOf = [&](int64_t block) { return layersOfBlock(ctx, block); };
        pass.collect = [&](const std::string& layer, const at::Tensor& x) { stats.at(layer, x.size(1)).add(x); };
        pass.sharedInput = [&](const std::string& layer, const std::string& first) {
            if (compressing) sameInputAs[layer] = first;
            else meter.sharedInput(layer, first);
        };
        pass.compressBlock = [&](int64_t b) {
            const auto named = [b](const char* suffix) { return names::llamaLayer(b, suffix); };
            const std::vector<std::string> targeted = layersOfBlock(ctx, b);
            const auto isTargeted = [&](const std::string& l) { return std::find(targeted.begin(), targeted.end(), l) != targeted.end(); };
            const auto statsOf = [&](const std::string& l) -> quant::AbsMaxAccumulator& {
                auto shared = sameInputAs.find(l);
                return stats.get(shared == sameInputAs.end() ? l : shared->second);
            };
            struct Mapping {
                std::vector<std::string> readers;
                std::string norm;
            };
            const Mapping mappings[] = {
                {{named("self_attn.q_proj"), named("self_attn.k_proj"), named("self_attn.v_proj")}, named("input_layernorm.weight")},
                {{named("mlp.gate_proj"), named("mlp.up_proj")}, named("post_attention_layernorm.weight")},
            };
            std::map<std::string, at::Tensor> scaled;
            for (const Mapping& m : mappings) {
                const size_t count = size_t(std::count_if(m.readers.begin(), m.readers.end(), isTargeted));
                if (count == 0) continue;
                if (count != m.readers.size())
                    throw Error("quantize.smoothquant with fold: " + m.readers.front() + " and the layers sharing its input must "
                                "all be in the step's targets (a folded scale changes all of them)");
                const double alpha = ctx.paramsFor(m.readers.front())["alpha"].get<double>();
                std::vector<at::Tensor> weights;
                for (const auto& l : m.readers) {
                    if (ctx.paramsFor(l)["alpha"].get<double>() != alpha)
                        throw Error("quantize.smoothquant with fold: " + l + " has another alpha than " + m.readers.front() +
                                    ", with which it shares one smoothing scale");
                    weights.push_back(ctx.model.floatTensor(weightOf(l)));
                }
                const at::Tensor smoothing = quant::smoothingScales(statsOf(m.readers.front()).absMax(), at::cat(weights, 0), alpha);
                // The norm is stored in its own precision (f16/bf16 rounds γ / s): the readers take the s that the
                // stored norm really applies, so the product stays exact before the int8 rounding.
                const at::Tensor gamma = ctx.model.floatTensor(m.norm);
                const at::Tensor stored = (gamma / smoothing).to(storageType(ctx.model, m.norm));
                if (!at::all(at::isfinite(stored.to(at::kFloat))).item<bool>())
                    throw Error("quantize.smoothquant with fold: " + m.norm + " divided by its smoothing scale overflows its " +
                                "storage type (lower alpha, or keep the scales per layer without fold)");
                const at::Tensor applied = at::where(stored.to(at::kFloat) != 0, gamma / stored.to(at::kFloat), smoothing);
                for (size_t i = 0; i < m.readers.size(); ++i) scaled[m.readers[i]] = weights[i] * applied.unsqueeze(0);
                ctx.model.replaceTensor(m.norm, stored);
            }
            for (const auto& layer : targeted) {
                const auto it = scaled.find(layer);
                const at::Tensor w = it != scaled.end() ? it->second : ctx.model.floatTensor(weightOf(layer));
                // Measured against W·s on the folded input x / s: the error of what the layer now computes.
                meter.rememberBefore(layer, w);
                ctx.model.setCompressed(layer, std::make_shared<W8A8Linear>(quant::quantizeInt8PerChannel(w), at::ones({w.size(1)})));
            }
            for (const auto& layer : targeted) {
                stats.erase(layer);
                sameInputAs.erase(layer);
            }
            compressing = false;
        };
        pass.collectCompressed = [&](const std::string& layer, const at::Tensor& x) { meter.add(layer, x); };
        pass.compressedBlockDone = [&](int64_t block) {
            meter.finishBlock(ctx.model, layersOfBlock(ctx, block));
            compressing = true;
        };
        runSequential(ctx.model, ctx.calibration, pass, ctx.feedback);
        ctx.reconstructionErrors = meter.errors();
        ctx.note("smoothing scales folded into input_layernorm (q/k/v) and post_attention_layernorm (gate/up); o_proj and "
                 "down_proj unsmoothed; activations quantized to int8 per token dynamically (simulated on the CPU)");
    }
};

class Fp8Method : public CompressionMethod {
public:
    std::string id() const override { return "quantize.fp8"; }
    int version() const override { return 1; }
    std::string displayName() const override { return "FP8 E4M3"; }
    std::string summary() const override { return "weights in FP8 E4M3 with a per-tensor or per-channel scale; optional dynamic FP8 activations"; }
    std::vector<ParamSpec> params() const override {
        return {choiceParam("scale", {"tensor", "channel"}, "channel", "one scale per tensor or per output channel"),
                choiceParam("activations", {"none", "dynamic"}, "none", "dynamic: activations quantized to FP8 per token at run time"),
                headParam()};
    }
    bool needsCalibration(const nlohmann::json&) const override { return false; }
    void apply(StepContext& ctx) const override {
        for (size_t i = 0; i < ctx.layers.size(); ++i) {
            ctx.progress(double(i) / double(ctx.layers.size()));
            const std::string& layer = ctx.layers[i];
            nlohmann::json p = ctx.paramsFor(layer);
            storeCompressedLayer(ctx.model, layer, std::make_shared<Fp8Linear>(
                quant::quantizeFp8(targetWeight(ctx.model, layer), p["scale"] == "channel"), p["activations"] == "dynamic"));
        }
    }
};

} // namespace

void registerQuantizationMethods(MethodRegistry& registry) {
    registry.add(std::make_unique<RtnMethod>());
    registry.add(std::make_unique<GptqMethod>());
    registry.add(std::make_unique<AwqMethod>());
    registry.add(std::make_unique<SmoothQuantMethod>());
    registry.add(std::make_unique<Fp8Method>());
}

} // namespace cwb
