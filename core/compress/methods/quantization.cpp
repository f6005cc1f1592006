// Quantization methods: round-to-nearest, GPTQ, AWQ, SmoothQuant W8A8 and FP8. The math lives in
// core/compress/*_math; this file chooses layers, gathers calibration statistics and stores the results.
#include "core/compress/compressed_layers.h"
#include "core/compress/gptq_math.h"
#include "core/compress/awq_math.h"
#include "core/compress/method.h"
#include "core/compress/methods/calibration_stats.h"
#include "core/compress/sequential.h"
#include "core/model/model.h"
#include "core/util/error.h"

namespace cwb {

namespace {

std::string weightOf(const std::string& layer) { return layer + ".weight"; }

quant::QuantSpec specFrom(const nlohmann::json& p, bool symmetric) {
    quant::QuantSpec spec;
    spec.bits = p["bits"].get<int>();
    spec.symmetric = symmetric;
    spec.groupSize = p["group_size"].get<int64_t>();
    return spec;
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
                intParam("group_size", 1, 1 << 16, 128, "input columns per group (granularity group); the last group of a row may be shorter")};
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
            ctx.model.setCompressed(layer, std::make_shared<IntLinear>(quant::quantizeRtn(ctx.model.floatTensor(weightOf(layer)), spec)));
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
                intParam("group_size", -1, 1 << 16, 128, "input columns per group; -1: one scale per output channel"),
                boolParam("sym", true, "symmetric grid (zero point mid-range)"),
                boolParam("act_order", false, "quantize columns in order of decreasing Hessian diagonal"),
                floatParam("damp_percent", 0.0, 1.0, 0.01, "damping added to the Hessian diagonal, as a fraction of its mean"),
                boolParam("static_groups", false, "compute group scales up front from the original weights (with act_order)"),
                intParam("block_size", 1, 4096, 128, "columns updated together (speed only)")};
    }
    bool needsCalibration(const nlohmann::json&) const override { return true; }
    void apply(StepContext& ctx) const override {
        calibrateLayerByLayer<quant::HessianAccumulator>(ctx, [&](const std::string& layer, quant::HessianAccumulator& hessian) {
            nlohmann::json p = ctx.paramsFor(layer);
            quant::GptqOptions options;
            options.quant = specFrom(p, p["sym"].get<bool>());
            options.dampPercent = p["damp_percent"].get<double>();
            options.actOrder = p["act_order"].get<bool>();
            options.staticGroups = p["static_groups"].get<bool>();
            options.blockSize = p["block_size"].get<int64_t>();
            if (options.quant.groupSize == 0) throw Error("quantize.gptq: group_size 0 is not allowed (use -1 for per channel)");
            quant::GptqResult r = quant::gptqQuantize(ctx.model.floatTensor(weightOf(layer)), hessian.hessian(), options);
            ctx.model.setCompressed(layer, std::make_shared<IntLinear>(std::move(r.weight), at::Tensor(), "gptq"));
        }, /*onDevice=*/true);
    }
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
                intParam("max_rows", 16, 1 << 20, 4096, "calibration rows kept per layer for the search")};
    }
    bool needsCalibration(const nlohmann::json&) const override { return true; }
    void apply(StepContext& ctx) const override {
        std::map<std::string, std::vector<at::Tensor>> inputs;
        std::map<std::string, int64_t> rows;
        SequentialPass pass;
        pass.layersOf = [&](int64_t b) { return layersOfBlock(ctx, b); };
        pass.collect = [&](const std::string& layer, const at::Tensor& x) {
            const int64_t keep = ctx.paramsFor(layer)["max_rows"].get<int64_t>() - rows[layer];
            if (keep <= 0) return;
            inputs[layer].push_back(x.narrow(0, 0, std::min(keep, x.size(0))).clone());
            rows[layer] += std::min(keep, x.size(0));
        };
        pass.compressBlock = [&](int64_t b) {
            for (const auto& layer : layersOfBlock(ctx, b)) {
                nlohmann::json p = ctx.paramsFor(layer);
                quant::AwqOptions options;
                options.quant = specFrom(p, !p["zero_point"].get<bool>());
                options.grid = p["grid"].get<int>();
                at::Tensor w = ctx.model.floatTensor(weightOf(layer));
                quant::AwqResult r = quant::awqSearch(w, at::cat(inputs.at(layer), 0), options);
                at::Tensor scaled = w * r.inputScales.unsqueeze(0);
                ctx.model.setCompressed(layer, std::make_shared<IntLinear>(quant::quantizeRtn(scaled, options.quant),
                                                                           r.inputScales, "awq"));
                inputs.erase(layer);
            }
        };
        runSequential(ctx.model, ctx.calibration, pass, ctx.feedback);
        ctx.note("input scales are kept per layer (x / s before the layer), not folded into the preceding norm");
    }
};

class SmoothQuantMethod : public CompressionMethod {
public:
    std::string id() const override { return "quantize.smoothquant"; }
    int version() const override { return 1; }
    std::string displayName() const override { return "SmoothQuant W8A8"; }
    std::string summary() const override { return "activation outliers migrated into the weights, then int8 weights and per-token int8 activations (Xiao et al. 2023)"; }
    std::vector<ParamSpec> params() const override {
        return {floatParam("alpha", 0.0, 1.0, 0.5, "migration strength: s = max|X|^alpha / max|W|^(1-alpha); 0.5-0.85 typical")};
    }
    bool needsCalibration(const nlohmann::json&) const override { return true; }
    void apply(StepContext& ctx) const override {
        calibrateLayerByLayer<quant::AbsMaxAccumulator>(ctx, [&](const std::string& layer, quant::AbsMaxAccumulator& absMax) {
            at::Tensor w = ctx.model.floatTensor(weightOf(layer));
            at::Tensor s = quant::smoothingScales(absMax.absMax(), w, ctx.paramsFor(layer)["alpha"].get<double>());
            ctx.model.setCompressed(layer, std::make_shared<W8A8Linear>(quant::quantizeInt8PerChannel(w * s.unsqueeze(0)), s));
        });
        ctx.note("activations are quantized to int8 per token dynamically (simulated on the CPU)");
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
                choiceParam("activations", {"none", "dynamic"}, "none", "dynamic: activations quantized to FP8 per token at run time")};
    }
    bool needsCalibration(const nlohmann::json&) const override { return false; }
    void apply(StepContext& ctx) const override {
        for (size_t i = 0; i < ctx.layers.size(); ++i) {
            ctx.progress(double(i) / double(ctx.layers.size()));
            const std::string& layer = ctx.layers[i];
            nlohmann::json p = ctx.paramsFor(layer);
            ctx.model.setCompressed(layer, std::make_shared<Fp8Linear>(
                quant::quantizeFp8(ctx.model.floatTensor(weightOf(layer)), p["scale"] == "channel"), p["activations"] == "dynamic"));
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
