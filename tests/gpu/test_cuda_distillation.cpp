// GPU test (plain executable, CTest label `gpu`): distill.kd trains on CUDA as it does on the CPU. On stories260K
// pruned 50%: the first step's loss terms agree with the CPU's, the loss falls, pruned zeros stay zero; a 4-bit
// student stays on its grid. Exits 77 (skipped) without a GPU or without the fixtures.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "tests/gpu/gpu_check.h"
#include "core/compress/compressed_layers.h"
#include "core/compress/distill_trainer.h"
#include "core/compress/pipeline.h"
#include "core/eval/perplexity.h"
#include "core/io/model_format.h"
#include "core/model/model.h"
#include "core/runtime/transformer.h"

namespace {
using cwb::testing::check;
cwb::Recipe recipe(const char* text) { return cwb::Recipe::fromJson(nlohmann::json::parse(text), "gpu test"); }
} // namespace

int main() {
    if (!at::hasCUDA()) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    const std::string model = std::string(CWB_FIXTURES_DIR) + "/models/stories260K.gguf";
    const std::string text = std::string(CWB_FIXTURES_DIR) + "/text/tinystories_v2_valid_first100.txt";
    if (!std::ifstream(model) || !std::ifstream(text)) {
        return cwb::testing::missingFixtures(CWB_FIXTURES_DIR);
    }
    try {
        auto base = cwb::loadModel(model);
        std::vector<cwb::TokenId> tokens = base->tokenizer->encode(cwb::readTextFile(text), true);
        cwb::CalibrationSpec spec;
        spec.samples = 64;
        spec.seqLen = 128;
        cwb::DistillData data;
        data.train = cwb::drawCalibration(tokens, base->tokenizer->bos(), spec, base->spec.context);
        spec.seed = 1;
        spec.samples = 8;
        data.eval = cwb::drawCalibration(tokens, base->tokenizer->bos(), spec, base->spec.context);
        auto pruned = cwb::compressModel(*base, recipe(R"({"steps":[{"method":"prune.magnitude"}]})"), at::Tensor()).model;
        cwb::DistillConfig config;
        config.steps = 40;
        config.lr = 2e-3;
        auto onCpu = pruned->clone(), onGpu = pruned->clone();
        cwb::DistillResult cpu = cwb::distillModel(*base, *onCpu, data, config);
        config.device = at::Device(at::kCUDA);
        cwb::DistillResult gpu = cwb::distillModel(*base, *onGpu, data, config);
        std::printf("  step 1 loss CPU %.6f CUDA %.6f; step 40 CPU %.6f CUDA %.6f; eval PPL %.4f -> %.4f (CUDA), %.0f tok/s\n",
                    cpu.history.front().loss, gpu.history.front().loss, cpu.history.back().loss, gpu.history.back().loss,
                    gpu.evalPerplexityBefore, gpu.evalPerplexityAfter, gpu.tokensPerSecond);
        check(std::abs(cpu.history.front().loss - gpu.history.front().loss) < 1e-3 * cpu.history.front().loss,
              "the first step's loss on CUDA matches the CPU's");
        check(std::abs(cpu.history.back().loss - gpu.history.back().loss) < 0.05 * cpu.history.back().loss,
              "after 40 steps the CUDA loss is within 5% of the CPU's");
        check(gpu.evalPerplexityAfter < gpu.evalPerplexityBefore, "training on CUDA lowers the held-out perplexity");
        bool zerosKept = true;
        for (const auto& layer : pruned->linearLayers()) {
            at::Tensor before = pruned->floatTensor(layer + ".weight"), after = onGpu->floatTensor(layer + ".weight");
            zerosKept &= (after.masked_select(before == 0) == 0).all().item<bool>();
        }
        check(zerosKept, "pruned zeros stay zero on CUDA");
        // The weights trained on the GPU are the model's now: surviving weights moved, and the model evaluated afresh
        // (on the CPU) gives the perplexity the trainer measured on its own tensors at the end.
        int64_t moved = 0;
        for (const auto& layer : pruned->linearLayers())
            moved += (pruned->floatTensor(layer + ".weight") != onGpu->floatTensor(layer + ".weight")).sum().item<int64_t>();
        cwb::Transformer trainedModel(*onGpu);
        const double stored = cwb::windowPerplexity(trainedModel, data.eval.to(at::kLong), config.batchSize);
        std::printf("  %lld weights moved; the stored model's eval PPL %.4f, the trainer's %.4f\n", static_cast<long long>(moved),
                    stored, gpu.evalPerplexityAfter);
        check(moved > 0 && std::abs(stored - gpu.evalPerplexityAfter) < 1e-3 * gpu.evalPerplexityAfter,
              "the weights trained on CUDA are stored into the model");
        auto quantized = cwb::compressModel(*base, recipe(R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32}}]})"), at::Tensor()).model;
        const auto untrained = quantized->clone();
        config.steps = 10;
        cwb::distillModel(*base, *quantized, data, config);
        bool onGrid = true;
        int64_t movedLevels = 0;
        for (const auto& layer : quantized->linearLayers()) {
            auto q = std::dynamic_pointer_cast<const cwb::IntLinear>(quantized->compressed(layer));
            auto before = std::dynamic_pointer_cast<const cwb::IntLinear>(untrained->compressed(layer));
            onGrid &= q && before && q->quantized().levels().max().item<int>() <= 15 && q->quantized().levels().min().item<int>() >= 0;
            if (q && before) movedLevels += (q->quantized().levels() != before->quantized().levels()).sum().item<int64_t>();
        }
        std::printf("  4-bit student: %lld levels moved\n", static_cast<long long>(movedLevels));
        check(onGrid && movedLevels > 0, "a 4-bit student trained on CUDA is stored as packed 4-bit levels, some moved");
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return cwb::testing::finishChecks();
}
