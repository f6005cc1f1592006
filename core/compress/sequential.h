#pragma once
// Layer-by-layer calibration: the calibration windows run through the variant one block at a time; for each
// block the method collects what it needs from the block's linear inputs, compresses the block, and the
// block's *compressed* output becomes the next block's input. Only one block's activations are alive at once.
#include <functional>
#include <string>

#include <ATen/ATen.h>

namespace cwb {

class Model;
class Feedback;

// Called with the 2-D inputs ([rows, in]) of every linear layer of the current block the method asked for.
using InputSink = std::function<void(const std::string& layer, const at::Tensor& inputs)>;

// Where a calibration pass runs its forward, and in which type (the inputs reach the statistics as float32).
// float32 on CUDA computes what the CPU computes; bf16 / fp16 forwards are faster (the GPTQ references run their
// models in fp16) and move the collected inputs by about their rounding.
struct CalibrationCompute {
    at::Device device = at::kCPU;
    at::ScalarType forwardType = at::kFloat;
};

struct SequentialPass {
    // Which layers of block `layer` to observe (full names, e.g. "model.layers.3.mlp.down_proj"). Asked once more
    // with block = model.spec.layers, one past the last block: {names::kHead} there makes the output head a last
    // stage, whose input (the final norm of the last block's output) goes to collect as "lm_head" and, since it does
    // not depend on the head, to collectCompressed in the same loop, before compressBlock(model.spec.layers) and
    // compressedBlockDone(model.spec.layers).
    std::function<std::vector<std::string>(int64_t block)> layersOf;
    InputSink collect;
    // Compresses block `block` of the model after its inputs were collected.
    std::function<void(int64_t block)> compressBlock;
    // Optional: per-head attention outputs [rows, heads, headDim] of each block (head importance).
    std::function<void(int64_t block, const at::Tensor& heads)> collectHeads;
    // Optional: the block's input and output hidden states [rows, hidden] (layer importance).
    std::function<void(int64_t block, const at::Tensor& input, const at::Tensor& output)> collectBlockIO;
    // Optional: a wanted layer reads the very tensor an earlier one read (q/k/v, gate/up): told once per block
    // (layer, the layer first given that input), after which collect is called for the first layer only.
    std::function<void(const std::string& layer, const std::string& sameInputAs)> sharedInput;
    // Optional: observe the forward that carries the *compressed* block on to the next one (then also run after
    // the last block): the inputs of the same layers, as the variant now computes them (sharedInput is told again),
    // then compressedBlockDone(block). What a whole second pass over the variant would see, without that pass.
    InputSink collectCompressed;
    std::function<void(int64_t block)> compressedBlockDone;
    int64_t microBatch = 8;   // calibration windows run together
    // Where the forward pass runs (dequantized layers, no native kernels, so every device computes the same thing).
    // The tensors given to collect/collectHeads/collectBlockIO live on that device.
    CalibrationCompute compute;
};

// Runs the pass over all blocks; progress goes to `feedback` in [begin, end]. Throws Cancelled.
// The model may change between blocks (compressBlock does that through its own reference); blocks are reloaded.
void runSequential(const Model& model, const at::Tensor& calibration, const SequentialPass& pass, Feedback* feedback);

} // namespace cwb
