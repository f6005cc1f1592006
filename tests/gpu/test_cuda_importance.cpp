// GPU test (plain executable, CTest label `gpu`): importance maps and the budget solver on CUDA against the CPU, on
// stories260K. In f32 (the default) the maps agree with the CPU's cell for cell; asked for f16 they keep the CPU's
// ranking (the gap is printed). Exits 77 (skipped) without a GPU or without the fixtures.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "tests/gpu/gpu_check.h"
#include "core/analysis/budget.h"
#include "core/analysis/importance.h"
#include "core/compress/pipeline.h"
#include "core/eval/perplexity.h"
#include "core/io/model_format.h"
#include "core/model/model.h"

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
} // namespace

int main() {
    if (!at::hasCUDA()) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    const std::string modelPath = std::string(CWB_FIXTURES_DIR) + "/models/stories260K.gguf";
    const std::string text = std::string(CWB_FIXTURES_DIR) + "/text/tinystories_v2_valid_first100.txt";
    if (!std::ifstream(modelPath) || !std::ifstream(text)) {
        std::printf("SKIP: fixtures not found under %s\n", CWB_FIXTURES_DIR);
        return 77;
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
            std::printf("  %s: CUDA f32 against CPU f32, largest gap %.2e of the largest cell\n", kind, gap);
            check(gap < 2e-3, std::string(kind) + ": CUDA f32 gives the CPU's map");
            check(cwb::importanceCompute("cuda", "", kind).forwardType == at::kFloat, std::string(kind) + ": f32 by default");
            const cwb::CalibrationCompute f16 = cwb::importanceCompute("cuda", "f16", kind);
            const cwb::ImportanceMap half = cwb::computeImportance(*model, kind, windows, nullptr, f16);
            const double rho = rankCorrelation(onCpu, half);
            std::printf("  %s: CUDA f16 rank correlation with the CPU %.4f, largest gap %.2e of the largest cell\n", kind, rho,
                        relativeGap(onCpu, half));
            check(rho > 0.9, std::string(kind) + ": CUDA f16 keeps the CPU's ranking");
        }
        cwb::BudgetOptions options;
        options.targetBitsPerWeight = 5.5;
        options.bits = {4, 8};
        const cwb::BudgetPlan cpuPlan = cwb::solveBitBudget(*model, windows, options, nullptr);
        options.compute = cwb::importanceCompute("cuda", "", "layer");
        const cwb::BudgetPlan gpuPlan = cwb::solveBitBudget(*model, windows, options, nullptr);
        double gap = 0, scale = 1e-30;
        for (size_t l = 0; l < cpuPlan.layers.size(); ++l)
            for (size_t o = 0; o < cpuPlan.layers[l].options.size(); ++o) {
                gap = std::max(gap, std::abs(cpuPlan.layers[l].options[o].cost - gpuPlan.layers[l].options[o].cost));
                scale = std::max(scale, cpuPlan.layers[l].options[o].cost);
            }
        std::printf("  budget: KL per (layer, width) on CUDA f32 against the CPU, largest gap %.2e of the largest\n", gap / scale);
        check(cpuPlan.layers.size() == gpuPlan.layers.size() && gap / scale < 2e-3, "budget: CUDA f32 measures the CPU's costs");
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return cwb::testing::finishChecks();
}
