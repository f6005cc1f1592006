#include "core/analysis/gradient_importance.h"

#include <c10/core/GradMode.h>   // NoGradGuard: ATen/ATen.h does not bring it in LibTorch 2.x
#include <algorithm>
#include <cmath>
#include <map>

#include "core/model/model.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

namespace {

// Keeps the input of each block's down projection in the graph and remembers it for its gradient.
class DownProjectionInputs : public ActivationObserver {
public:
    explicit DownProjectionInputs(const Model& model) {
        const bool llama = model.spec.family == Family::Llama;
        for (int64_t l = 0; l < model.spec.layers; ++l)
            mLayers[llama ? names::llamaLayer(l, "mlp.down_proj") : names::gpt2Layer(l, "mlp.c_proj")] = l;
    }
    bool wantsLinear(const std::string& layer) const override { return mLayers.count(layer) != 0; }
    void onLinear(const std::string& layer, const at::Tensor& input, const at::Tensor&) override {
        input.retain_grad();
        inputs.emplace_back(mLayers.at(layer), input);
    }
    std::vector<std::pair<int64_t, at::Tensor>> inputs;

private:
    std::map<std::string, int64_t> mLayers;
};

struct GradientPass {
    at::Tensor headGradients;              // [windows, blocks, max heads] double
    std::vector<at::Tensor> absGradientSum, inactiveCount;   // per block [ffn] double
    int64_t positions = 0;
};

void checkWindows(const at::Tensor& windows) {
    if (!windows.defined() || windows.dim() != 2 || windows.size(0) < 1 || windows.size(1) < 2)
        throw Error("importance needs token windows [samples, length >= 2] (a text file)");
}

GradientPass runGradientPass(const Model& model, const at::Tensor& windows, bool channels, double threshold, Feedback* feedback,
                             const CalibrationCompute& compute) {
    checkWindows(windows);
    const ArchSpec& s = model.spec;
    int64_t maxHeads = 0;
    for (int64_t l = 0; l < s.layers; ++l) maxHeads = std::max(maxHeads, s.headsAt(l));
    GradientPass out;
    // Up to 8 windows and 4096 tokens per backward pass: a stop is noticed between passes, and long windows alone.
    const int64_t samples = windows.size(0), batchSize = std::max<int64_t>(1, std::min<int64_t>(8, 4096 / windows.size(1)));
    out.headGradients = at::full({samples, s.layers, maxHeads}, std::nan(""), at::kDouble);
    out.absGradientSum.resize(static_cast<size_t>(s.layers));
    out.inactiveCount.resize(static_cast<size_t>(s.layers));
    c10::AutoGradMode gradients(true);
    // One runtime for every batch (its weights are converted, or uploaded, once); its gates are refilled per batch.
    std::vector<at::Tensor> gates(static_cast<size_t>(s.layers));
    RuntimeOptions options;
    options.device = compute.device;
    options.dtype = compute.forwardType;
    options.headGates = &gates;
    options.nativeKernels = false;   // the integer, FP8 and 2:4 kernels compute outside autograd: no gradient through them
    options.fusedAttentionFloat32 = true;   // no fp32 [heads x T x T] scores kept per block for the backward pass
    Transformer runtime(model, options);
    for (int64_t first = 0; first < samples; first += batchSize) {
        if (feedback) {
            feedback->throwIfCancelled();
            feedback->setProgress(double(first) / double(samples));
        }
        const int64_t n = std::min(batchSize, samples - first);
        const at::Tensor batch = windows.narrow(0, first, n).to(at::kLong);
        for (int64_t l = 0; l < s.layers; ++l)
            gates[size_t(l)] = at::ones({n, s.headsAt(l)}, at::TensorOptions().dtype(at::kFloat).device(compute.device)).set_requires_grad(true);
        DownProjectionInputs observer(model);
        at::Tensor logits = runtime.forward(batch, nullptr, channels ? &observer : nullptr);
        const int64_t length = batch.size(1);
        at::Tensor logProbs = at::log_softmax(logits.narrow(1, 0, length - 1).to(at::kFloat), -1);
        at::Tensor nll = -logProbs.gather(2, batch.narrow(1, 1, length - 1).to(logits.device()).unsqueeze(-1)).squeeze(-1);
        // Σ_w L_w: each window's gradient stays its own (gates are per window).
        nll.mean(1).sum().backward();
        for (int64_t l = 0; l < s.layers; ++l)
            out.headGradients.narrow(0, first, n).select(1, l).narrow(1, 0, s.headsAt(l)).copy_(gates[size_t(l)].grad().to(at::kCPU, at::kDouble));
        for (const auto& [l, x] : observer.inputs) {
            // Summed where the activations live; only the [ffn] sums cross to the CPU.
            at::Tensor g = x.grad().to(at::kDouble).abs().sum(at::IntArrayRef{0, 1}).to(at::kCPU);
            at::Tensor inactive = (x.detach().abs() < threshold).to(at::kDouble).sum(at::IntArrayRef{0, 1}).to(at::kCPU);
            auto& sum = out.absGradientSum[size_t(l)];
            auto& count = out.inactiveCount[size_t(l)];
            sum = sum.defined() ? sum + g : g;
            count = count.defined() ? count + inactive : inactive;
        }
        out.positions += n * length;
    }
    if (feedback) feedback->throwIfCancelled();
    return out;
}

ImportanceMap emptyMap(const std::string& kind, int64_t rows, int64_t columns, const std::string& columnPrefix) {
    ImportanceMap map;
    map.kind = kind;
    for (int64_t l = 0; l < rows; ++l) map.rowLabels.push_back("block " + std::to_string(l));
    for (int64_t c = 0; c < columns; ++c) map.columnLabels.push_back(columnPrefix + std::to_string(c));
    map.values.assign(static_cast<size_t>(rows * columns), std::nan(""));
    return map;
}

} // namespace

at::Tensor headGateGradients(const Model& model, const at::Tensor& windows, Feedback* feedback, const CalibrationCompute& compute) {
    return runGradientPass(model, windows, false, 0.0, feedback, compute).headGradients;
}

ChannelGradientStats channelGradientStats(const Model& model, const at::Tensor& windows, double threshold, Feedback* feedback,
                                          const CalibrationCompute& compute) {
    GradientPass pass = runGradientPass(model, windows, true, threshold, feedback, compute);
    int64_t maxFfn = 0;
    for (int64_t l = 0; l < model.spec.layers; ++l) maxFfn = std::max(maxFfn, model.spec.ffnAt(l));
    ChannelGradientStats stats{at::full({model.spec.layers, maxFfn}, std::nan(""), at::kDouble),
                               at::full({model.spec.layers, maxFfn}, std::nan(""), at::kDouble)};
    for (int64_t l = 0; l < model.spec.layers; ++l) {
        const at::Tensor& sum = pass.absGradientSum[size_t(l)];
        if (!sum.defined()) throw Error("channel importance: block " + std::to_string(l) + " reported no MLP activations");
        stats.meanAbsGradient[l].narrow(0, 0, sum.numel()).copy_(sum / double(pass.positions));
        stats.sparsity[l].narrow(0, 0, sum.numel()).copy_(pass.inactiveCount[size_t(l)] / double(pass.positions));
    }
    return stats;
}

ImportanceMap headGradientImportance(const Model& model, const at::Tensor& windows, Feedback* feedback,
                                     const CalibrationCompute& compute) {
    at::Tensor mean = headGateGradients(model, windows, feedback, compute).abs().mean(0).contiguous();   // NaN stays NaN
    ImportanceMap map = emptyMap("heads.gradient", mean.size(0), mean.size(1), "head ");
    std::copy(mean.data_ptr<double>(), mean.data_ptr<double>() + mean.numel(), map.values.begin());
    return map;
}

ImportanceMap channelGradientImportance(const Model& model, const at::Tensor& windows, Feedback* feedback, const ChannelScoreWeights& w,
                                        const CalibrationCompute& compute) {
    ChannelGradientStats stats = channelGradientStats(model, windows, w.sparsityThreshold, feedback, compute);
    at::Tensor g = stats.meanAbsGradient;
    at::Tensor peak = at::nan_to_num(g, 0.0).amax(1, /*keepdim=*/true).clamp_min(1e-30);
    at::Tensor score = (w.alpha * g / peak + w.beta * (1.0 - stats.sparsity)).contiguous();
    ImportanceMap map = emptyMap("channels.gradient", score.size(0), score.size(1), "");
    std::copy(score.data_ptr<double>(), score.data_ptr<double>() + score.numel(), map.values.begin());
    return map;
}

} // namespace cwb
