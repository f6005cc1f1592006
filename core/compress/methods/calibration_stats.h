#pragma once
// Shared plumbing of the calibrated methods: which targeted layers belong to a block, and a per-layer map
// of accumulators filled during a sequential pass.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/compress/method.h"
#include "core/compress/pipeline.h"
#include "core/compress/reconstruction_meter.h"
#include "core/compress/sequential.h"
#include "core/model/model.h"

namespace cwb {

// Targeted layers of block `block`, in the step's order; the output head (names::kHead) when targeted is the stage
// one past the last block (block = model.spec.layers), as SequentialPass::layersOf asks for it.
std::vector<std::string> layersOfBlock(const StepContext& ctx, int64_t block);
// "model.layers.12.mlp.up_proj" -> 12; -1 when the name is not a block layer.
int64_t blockOf(const std::string& layer);

template <typename Accumulator>
class PerLayer {
public:
    // A layer's accumulator, made on first use by `make` (given the layer and its input columns) or from (columns).
    using Maker = std::function<std::unique_ptr<Accumulator>(const std::string& layer, int64_t columns)>;
    Accumulator& at(const std::string& layer, int64_t columns, const Maker& make = {}) {
        auto it = mItems.find(layer);
        if (it == mItems.end())
            it = mItems.emplace(layer, make ? make(layer, columns) : std::make_unique<Accumulator>(columns)).first;
        return *it->second;
    }
    Accumulator& get(const std::string& layer) { return *mItems.at(layer); }
    bool has(const std::string& layer) const { return mItems.count(layer) != 0; }
    void erase(const std::string& layer) { mItems.erase(layer); }

private:
    std::map<std::string, std::unique_ptr<Accumulator>> mItems;
};

// The common shape of a calibrated method: run the calibration block by block, accumulate one statistic per
// targeted layer from its inputs (an Accumulator with a (columns) constructor and add(inputs)), then compress
// each layer of the block from its statistic before the next block sees the block's compressed output.
// With onDevice, the pass runs where ctx.compute says and the inputs reach the accumulator there (for accumulators
// that follow their inputs' device, as quant::HessianAccumulator does); otherwise on the CPU in float32.
// Layers that read the same tensor (q/k/v, gate/up) share one accumulator, filled once.
// When the pass runs where the step's reconstruction errors are measured (ctx.compute), it also measures them on
// the forward that carries each compressed block on (ctx.reconstructionErrors), so compressModel needs no second pass.
// `make`, when given, makes a layer's accumulator (e.g. one whose size is a per-layer parameter).
template <typename Accumulator>
void calibrateLayerByLayer(StepContext& ctx, const std::function<void(const std::string& layer, Accumulator& stats)>& compress,
                           bool onDevice = false, const typename PerLayer<Accumulator>::Maker& make = {}) {
    PerLayer<Accumulator> stats;
    std::map<std::string, std::string> sameInputAs;
    SequentialPass pass;
    if (onDevice) pass.compute = ctx.compute;
    pass.layersOf = [&](int64_t block) { return layersOfBlock(ctx, block); };
    pass.collect = [&](const std::string& layer, const at::Tensor& x) { stats.at(layer, x.size(1), make).add(x); };
    const bool measure = pass.compute.device == ctx.compute.device && pass.compute.forwardType == ctx.compute.forwardType;
    ReconstructionMeter meter;
    bool compressing = true;   // which forward sharedInput hears from
    pass.sharedInput = [&](const std::string& layer, const std::string& first) {
        if (compressing) sameInputAs[layer] = first;
        else meter.sharedInput(layer, first);
    };
    pass.compressBlock = [&](int64_t block) {
        const std::vector<std::string> layers = layersOfBlock(ctx, block);
        for (const auto& layer : layers) {
            auto shared = sameInputAs.find(layer);
            if (measure) meter.rememberBefore(layer, targetWeight(ctx.model, layer));   // a tied head: the embedding
            compress(layer, stats.get(shared == sameInputAs.end() ? layer : shared->second));
        }
        for (const auto& layer : layers) {
            stats.erase(layer);
            sameInputAs.erase(layer);
        }
        if (measure) compressing = false;
    };
    if (measure) {
        pass.collectCompressed = [&](const std::string& layer, const at::Tensor& x) { meter.add(layer, x); };
        pass.compressedBlockDone = [&](int64_t block) {
            meter.finishBlock(ctx.model, layersOfBlock(ctx, block));
            compressing = true;
        };
    }
    runSequential(ctx.model, ctx.calibration, pass, ctx.feedback);
    if (measure) ctx.reconstructionErrors = meter.errors();
}

} // namespace cwb
