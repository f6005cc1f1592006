// Unstructured and N:M pruning: magnitude, Wanda, SparseGPT. Pruned weights are stored dense with exact
// zeros (the sparse formats that save memory and time belong to the CUDA engine and the exporters).
#include <algorithm>

#include "core/compress/gptq_math.h"
#include "core/compress/method.h"
#include "core/compress/methods/calibration_stats.h"
#include "core/compress/prune_math.h"
#include "core/compress/sequential.h"
#include "core/compress/sparsegpt_math.h"
#include "core/model/model.h"
#include "core/util/error.h"

namespace cwb {

namespace {

std::string weightOf(const std::string& layer) { return layer + ".weight"; }

void storePruned(StepContext& ctx, const std::string& layer, const at::Tensor& pruned) {
    const TensorRecord& r = ctx.model.tensor(weightOf(layer));
    at::ScalarType type = r.type == ggml::Type::F16 ? at::kHalf : r.type == ggml::Type::BF16 ? at::kBFloat16 : at::kFloat;
    ctx.model.replaceTensor(weightOf(layer), pruned.to(type));   // keep the storage precision of the layer
}

class MagnitudeMethod : public CompressionMethod {
public:
    std::string id() const override { return "prune.magnitude"; }
    int version() const override { return 1; }
    std::string displayName() const override { return "Magnitude pruning"; }
    std::string summary() const override { return "zeroes the weights of smallest magnitude, per layer or over all targeted layers"; }
    std::vector<ParamSpec> params() const override {
        return {floatParam("sparsity", 0.0, 0.99, 0.5, "fraction of weights set to zero"),
                choiceParam("scope", {"layer", "global"}, "layer", "layer: each layer loses the same fraction; global: one threshold for all")};
    }
    bool needsCalibration(const nlohmann::json&) const override { return false; }
    void apply(StepContext& ctx) const override {
        if (ctx.params["scope"] == "global") {
            // Two streaming passes for the threshold (one layer in memory at a time), a third to prune.
            int64_t total = 0;
            for (const auto& layer : ctx.layers) total += ctx.model.tensor(weightOf(layer)).elementCount();
            const int64_t k = static_cast<int64_t>(std::llround(ctx.params["sparsity"].get<double>() * double(total)));
            if (k == 0) return;
            const size_t n = ctx.layers.size();
            size_t read = 0;
            auto layerAt = [&](size_t i) {
                ctx.progress(0.5 * double(read++) / double(2 * n));
                return ctx.model.floatTensor(weightOf(ctx.layers[i]));
            };
            const double threshold = prune::kthSmallestMagnitude(layerAt, n, k);
            for (size_t i = 0; i < n; ++i) {
                ctx.progress(0.5 + 0.5 * double(i) / double(n));
                at::Tensor w = ctx.model.floatTensor(weightOf(ctx.layers[i]));
                storePruned(ctx, ctx.layers[i], w * (w.abs() > threshold));
            }
            ctx.note("global threshold |w| <= " + std::to_string(threshold));
            return;
        }
        for (size_t i = 0; i < ctx.layers.size(); ++i) {
            ctx.progress(double(i) / double(ctx.layers.size()));
            const std::string& layer = ctx.layers[i];
            at::Tensor w = ctx.model.floatTensor(weightOf(layer));
            storePruned(ctx, layer, w * prune::magnitudeMask(w, ctx.paramsFor(layer)["sparsity"].get<double>()));
        }
    }
};

class WandaMethod : public CompressionMethod {
public:
    std::string id() const override { return "prune.wanda"; }
    int version() const override { return 1; }
    std::string displayName() const override { return "Wanda"; }
    std::string summary() const override { return "prunes by |W|·‖X‖ within each output row, no weight update (Sun et al. 2023)"; }
    std::vector<ParamSpec> params() const override { return {floatParam("sparsity", 0.0, 0.99, 0.5, "fraction of weights set to zero in each row")}; }
    bool needsCalibration(const nlohmann::json&) const override { return true; }
    void apply(StepContext& ctx) const override {
        calibrateLayerByLayer<prune::InputNormAccumulator>(ctx, [&](const std::string& layer, prune::InputNormAccumulator& norms) {
            at::Tensor w = ctx.model.floatTensor(weightOf(layer));
            at::Tensor scores = prune::wandaScores(w, norms.norms());
            storePruned(ctx, layer, w * prune::rowwiseMask(scores, ctx.paramsFor(layer)["sparsity"].get<double>()));
        });
    }
};

class SparseGptMethod : public CompressionMethod {
public:
    std::string id() const override { return "prune.sparsegpt"; }
    int version() const override { return 1; }
    std::string displayName() const override { return "SparseGPT"; }
    std::string summary() const override { return "OBS-based pruning with a weight update of the remaining columns (Frantar & Alistarh 2023)"; }
    std::vector<ParamSpec> params() const override {
        return {floatParam("sparsity", 0.0, 0.99, 0.5, "fraction of weights set to zero"),
                intParam("block_size", 1, 4096, 128, "columns whose mask is chosen together"),
                floatParam("damp_percent", 0.0, 1.0, 0.01, "damping added to the Hessian diagonal, as a fraction of its mean")};
    }
    bool needsCalibration(const nlohmann::json&) const override { return true; }
    void apply(StepContext& ctx) const override { run(ctx, 0, 0); }

    // Shared with prune.nm: n:m when m > 0.
    static void run(StepContext& ctx, int n, int m) {
        calibrateLayerByLayer<quant::HessianAccumulator>(ctx, [&](const std::string& layer, quant::HessianAccumulator& hessian) {
            nlohmann::json p = ctx.paramsFor(layer);
            prune::SparseGptOptions options;
            options.sparsity = p.contains("sparsity") ? p["sparsity"].get<double>() : 0.0;
            options.n = n;
            options.m = m;
            options.blockSize = p.contains("block_size") ? p["block_size"].get<int64_t>() : 128;
            options.dampPercent = p.contains("damp_percent") ? p["damp_percent"].get<double>() : 0.01;
            prune::SparseGptResult r = prune::sparseGpt(ctx.model.floatTensor(weightOf(layer)), hessian.hessian(), options);
            storePruned(ctx, layer, r.weight);
        }, /*onDevice=*/true);
    }
};

class NmMethod : public CompressionMethod {
public:
    std::string id() const override { return "prune.nm"; }
    int version() const override { return 1; }
    std::string displayName() const override { return "N:M semi-structured"; }
    std::string summary() const override { return "keeps n of every m consecutive input weights (2:4 runs on sparse tensor cores)"; }
    std::vector<ParamSpec> params() const override {
        return {intParam("n", 1, 15, 2, "weights kept in each group"), intParam("m", 2, 16, 4, "group length"),
                choiceParam("score", {"magnitude", "wanda", "sparsegpt"}, "magnitude", "how the kept weights are chosen")};
    }
    bool needsCalibration(const nlohmann::json& p) const override { return p["score"] != "magnitude"; }
    std::string paramsProblem(const nlohmann::json& p) const override {   // before any step runs, not when this one does
        const int n = p["n"].get<int>(), m = p["m"].get<int>();
        return n >= m ? "prune.nm: n = " + std::to_string(n) + " must be less than m = " + std::to_string(m) : "";
    }
    void apply(StepContext& ctx) const override {
        const int n = ctx.params["n"].get<int>(), m = ctx.params["m"].get<int>();
        if (n >= m) throw Error("prune.nm: n = " + std::to_string(n) + " must be less than m = " + std::to_string(m));
        for (const auto& layer : ctx.layers)
            if (ctx.model.tensor(weightOf(layer)).shape[1] % m != 0)
                throw Error("prune.nm: layer " + layer + " has " + std::to_string(ctx.model.tensor(weightOf(layer)).shape[1]) +
                            " input columns, not a multiple of m = " + std::to_string(m) + "; exclude it with \"ignore\"");
        const std::string score = ctx.params["score"];
        if (score == "sparsegpt") {
            SparseGptMethod::run(ctx, n, m);
            return;
        }
        if (score == "magnitude") {
            for (size_t i = 0; i < ctx.layers.size(); ++i) {
                ctx.progress(double(i) / double(ctx.layers.size()));
                at::Tensor w = ctx.model.floatTensor(weightOf(ctx.layers[i]));
                storePruned(ctx, ctx.layers[i], w * prune::nmMask(w.abs(), n, m));
            }
            return;
        }
        calibrateLayerByLayer<prune::InputNormAccumulator>(ctx, [&](const std::string& layer, prune::InputNormAccumulator& norms) {
            at::Tensor w = ctx.model.floatTensor(weightOf(layer));
            storePruned(ctx, layer, w * prune::nmMask(prune::wandaScores(w, norms.norms()), n, m));
        });
    }
};

} // namespace

void registerPruningMethods(MethodRegistry& registry) {
    registry.add(std::make_unique<MagnitudeMethod>());
    registry.add(std::make_unique<WandaMethod>());
    registry.add(std::make_unique<SparseGptMethod>());
    registry.add(std::make_unique<NmMethod>());
}

} // namespace cwb
