// GPU test (plain executable, CTest label `gpu`): importance maps and the budget solver on CUDA against the CPU, on
// stories260K. In f32 (the default) the maps agree with the CPU's cell for cell; asked for f16 they keep the CPU's
// ranking (the gap is printed; the gradient kinds in bf16, f16 being refused for them). VariantRunner on int4 layers
// that run natively. Exits 77 (skipped) without a GPU or without the fixtures.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "tests/gpu/gpu_check.h"
#include "tests/gpu/random_llama.h"
#include "core/analysis/budget.h"
#include "core/analysis/importance.h"
#include "core/compress/compressed_layers.h"
#include "core/compress/pipeline.h"
#include "core/compress/quant_math.h"
#include "core/eval/perplexity.h"
#include "core/io/model_format.h"
#include "core/model/model.h"
#include "core/runtime/cuda_linear.h"
#include "core/runtime/transformer.h"

namespace {
using cwb::testing::check;

// Largest |a - b| over the cells, relative to the largest |a|.
double relativeGap(const cwb::ImportanceMap& a, const cwb::ImportanceMap& b) {
    if (a.values.size() != b.values.size()) return INFINITY;
    double gap = 0, scale = 1e-30;
    for (size_t i = 0; i < a.values.size(); ++i) {
        if (std::isnan(a.values[i]) != std::isnan(b.values[i])) return INFINITY;
        if (std::isnan(a.values[i])) continue;
        gap = std::max(gap, std::abs(a.values[i] - b.values[i]));
        scale = std::max(scale, std::abs(a.values[i]));
    }
    return gap / scale;
}

// Pearson correlation of the ranks of the finite cells (Spearman's rho).
double rankCorrelation(const cwb::ImportanceMap& a, const cwb::ImportanceMap& b) {
    std::vector<double> x, y;
    for (size_t i = 0; i < a.values.size() && i < b.values.size(); ++i)
        if (std::isfinite(a.values[i]) && std::isfinite(b.values[i])) {
            x.push_back(a.values[i]);
            y.push_back(b.values[i]);
        }
    auto ranks = [](const std::vector<double>& v) {
        at::Tensor t = at::tensor(v, at::kDouble);
        return t.argsort().argsort().to(at::kDouble);
    };
    at::Tensor rx = ranks(x), ry = ranks(y);
    rx = rx - rx.mean();
    ry = ry - ry.mean();
    return (rx * ry).sum().item<double>() / std::sqrt((rx * rx).sum().item<double>() * (ry * ry).sum().item<double>());
}

int64_t finiteCells(const cwb::ImportanceMap& m) {
    return std::count_if(m.values.begin(), m.values.end(), [](double v) { return std::isfinite(v); });
}

std::map<std::string, std::string> pathsOf(const cwb::Transformer& runtime) {
    std::map<std::string, std::string> out;
    for (const auto& [name, path] : runtime.layerPaths()) out[name] = (path.native ? "native " : "dense ") + path.how;
    return out;
}

// VariantRunner on CUDA in f16 over a base whose every block linear is int4 (W4A16, q/k/v and gate/up stacked): a
// variant with one k_proj of another form must compute what its own runtime computes, and reset() must rebuild the
// stacked base block (the CPU test cannot reach the kernels, their stacking or their rebuild).
void variantRunnerOnNativeLayers() {
    auto base = std::make_unique<cwb::Model>();
    base->spec = cwb::testing::smallLlamaSpec();
    base->path = "test:importance-runner";
    cwb::testing::fillRandomLlama(*base, 21);
    auto rtn = [](const at::Tensor& w, int bits) {
        return std::make_shared<cwb::IntLinear>(cwb::quant::quantizeRtn(w, {bits, true, 32}), at::Tensor(), "rtn");
    };
    for (const std::string& layer : base->linearLayers()) base->setCompressed(layer, rtn(base->floatTensor(layer + ".weight"), 4));
    const std::string changed = "model.layers.1.self_attn.k_proj";
    auto variant = base->clone();
    // Keys of the other sign at 8 bits: another kernel for this layer, and q/k/v no longer one format.
    variant->setCompressed(changed, rtn(-base->floatTensor(changed + ".weight"), 8));
    const cwb::CalibrationCompute f16{at::Device(at::kCUDA), at::kHalf};
    at::manual_seed(5);
    const at::Tensor windows = at::randint(0, base->spec.vocab, {10, 48}, at::kLong);   // batches of 8 + 2

    cwb::VariantRunner runner(*base, f16);
    double baseLoss = 0;
    const std::vector<at::Tensor> baseLp = runner.logProbs(windows, &baseLoss);
    const std::map<std::string, std::string> basePaths = pathsOf(runner.runtime());
    int64_t stacked = 0;
    for (const auto& [name, how] : basePaths) stacked += how.find("fused") != std::string::npos ? 1 : 0;
    std::printf("  runner: base paths %zu, %lld stacked; %s: %s\n", basePaths.size(), static_cast<long long>(stacked),
                changed.c_str(), basePaths.count(changed) ? basePaths.at(changed).c_str() : "(none)");
    check(std::isfinite(baseLoss) && basePaths.size() == 14 && stacked == 10 && basePaths.at(changed).rfind("native W4A16", 0) == 0,
          "runner: the int4 base runs natively on CUDA, q/k/v and gate/up stacked");

    check(runner.apply(*variant), "runner: takes the one-layer variant");
    const cwb::WindowComparison measured = runner.compare(windows, baseLp);
    const std::map<std::string, std::string> variantPaths = pathsOf(runner.runtime());
    cwb::RuntimeOptions own;
    own.device = f16.device;
    own.dtype = f16.forwardType;
    cwb::Transformer ownRuntime(*variant, own);
    const at::Tensor baseAll = at::cat(baseLp, 0);
    const at::Tensor lp = at::log_softmax(ownRuntime.forward(windows).to(at::kCPU, at::kDouble), -1);
    const double kl = (baseAll.exp() * (baseAll - lp)).sum(-1).mean().item<double>();
    const double loss = -lp.narrow(1, 0, windows.size(1) - 1).gather(2, windows.narrow(1, 1, windows.size(1) - 1).unsqueeze(-1)).mean().item<double>();
    std::printf("  runner: variant KL %.6e (own runtime %.6e), loss %.6f (own %.6f); %s: %s\n", measured.meanKl, kl,
                measured.meanLoss, loss, changed.c_str(), variantPaths.count(changed) ? variantPaths.at(changed).c_str() : "(none)");
    check(kl > 1e-3 && std::abs(measured.meanKl - kl) <= 1e-3 * kl && std::abs(measured.meanLoss - loss) <= 1e-4 * loss,
          "runner: a variant computes on the runner what it computes on its own runtime");
    check(variantPaths == pathsOf(ownRuntime) && variantPaths.at(changed).rfind("native W8A16", 0) == 0 &&
              variantPaths.at(changed).find("fused") == std::string::npos,
          "runner: the variant's layer runs its own kernel, unstacked, as on its own runtime");

    runner.reset();
    const cwb::WindowComparison back = runner.compare(windows, baseLp);
    std::printf("  runner: after reset KL %.3e, loss %.6f (base %.6f)\n", back.meanKl, back.meanLoss, baseLoss);
    check(back.meanKl <= 1e-4 * kl && std::abs(back.meanLoss - baseLoss) <= 1e-6 * baseLoss && pathsOf(runner.runtime()) == basePaths,
          "runner: reset() rebuilds the stacked int4 block of the base");
}
} // namespace

int main() {
    if (!at::hasCUDA()) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    const std::string modelPath = std::string(CWB_FIXTURES_DIR) + "/models/stories260K.gguf";
    const std::string text = std::string(CWB_FIXTURES_DIR) + "/text/tinystories_v2_valid_first100.txt";
    if (!std::ifstream(modelPath) || !std::ifstream(text)) {
        return cwb::testing::missingFixtures(CWB_FIXTURES_DIR);
    }
    try {
        auto model = cwb::loadModel(modelPath);
        cwb::CalibrationSpec spec;
        spec.samples = 12;   // two batches of the runner (8 + 4)
        spec.seqLen = 96;
        const at::Tensor windows = cwb::drawCalibration(model->tokenizer->encode(cwb::readTextFile(text), true),
                                                        model->tokenizer->bos(), spec, model->spec.context);
        const cwb::CalibrationCompute cpu = cwb::importanceCompute("cpu", "", "head");
        for (const char* kind : {"heads.ablation", "linears.sensitivity", "linears.delta_ppl", "channels.wanda",
                                 "heads.gradient", "channels.gradient"}) {
            const cwb::CalibrationCompute f32 = cwb::importanceCompute("cuda", "f32", kind);
            const cwb::ImportanceMap onCpu = cwb::computeImportance(*model, kind, windows, nullptr, cpu);
            const cwb::ImportanceMap onGpu = cwb::computeImportance(*model, kind, windows, nullptr, f32);
            const double gap = relativeGap(onCpu, onGpu);
            std::printf("  %s: CUDA f32 against CPU f32, largest gap %.2e of the largest cell (%lld cells)\n", kind, gap,
                        static_cast<long long>(finiteCells(onCpu)));
            check(finiteCells(onCpu) > 1 && finiteCells(onGpu) == finiteCells(onCpu) && gap < 2e-3,
                  std::string(kind) + ": CUDA f32 gives the CPU's map");
            check(cwb::importanceCompute("cuda", "", kind).forwardType == at::kFloat, std::string(kind) + ": f32 by default");
            // Gradients underflow in f16 (refused); bf16 has fp32's range.
            const bool gradient = std::string(kind).find("gradient") != std::string::npos;
            const char* halfName = gradient ? "bf16" : "f16";
            if (gradient) {
                bool refused = false;
                try {
                    cwb::importanceCompute("cuda", "f16", kind);
                } catch (const cwb::Error&) {
                    refused = true;
                }
                check(refused, std::string(kind) + ": f16 is refused for gradients");
            }
            const cwb::CalibrationCompute half16 = cwb::importanceCompute("cuda", halfName, kind);
            const cwb::ImportanceMap half = cwb::computeImportance(*model, kind, windows, nullptr, half16);
            const double rho = rankCorrelation(onCpu, half);
            std::printf("  %s: CUDA %s rank correlation with the CPU %.4f, largest gap %.2e of the largest cell\n", kind,
                        halfName, rho, relativeGap(onCpu, half));
            check(finiteCells(half) == finiteCells(onCpu) && rho > 0.9,
                  std::string(kind) + ": CUDA " + halfName + " keeps the CPU's ranking");
        }
        if (cwb::nativeKernelsBuilt()) variantRunnerOnNativeLayers();
        else std::printf("  runner on native layers: not run (this build has no CUDA kernels)\n");
        cwb::BudgetOptions options;
        options.targetBitsPerWeight = 5.5;
        options.bits = {4, 8};
        const cwb::BudgetPlan cpuPlan = cwb::solveBitBudget(*model, windows, options, nullptr);
        options.compute = cwb::importanceCompute("cuda", "", "layer");
        const cwb::BudgetPlan gpuPlan = cwb::solveBitBudget(*model, windows, options, nullptr);
        double gap = 0, scale = 1e-30;
        check(!cpuPlan.layers.empty() && cpuPlan.layers.size() == gpuPlan.layers.size(), "budget: a cost for every layer on both");
        for (size_t l = 0; l < cpuPlan.layers.size() && l < gpuPlan.layers.size(); ++l)
            for (size_t o = 0; o < cpuPlan.layers[l].options.size() && o < gpuPlan.layers[l].options.size(); ++o) {
                gap = std::max(gap, std::abs(cpuPlan.layers[l].options[o].cost - gpuPlan.layers[l].options[o].cost));
                scale = std::max(scale, cpuPlan.layers[l].options[o].cost);
            }
        std::printf("  budget: KL per (layer, width) on CUDA f32 against the CPU, largest gap %.2e of the largest\n", gap / scale);
        check(scale > 1e-30 && gap / scale < 2e-3, "budget: CUDA f32 measures the CPU's costs");
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return cwb::testing::finishChecks();
}
