#pragma once
// Gradient-based importance: one forward and backward pass per batch of windows instead of one pass per
// ablated part. Heads: |∂L/∂g_h| of a gate g_h = 1 on each query head's attention output (Michel et al. 2019,
// "Are Sixteen Heads Really Better than One?"). MLP channels: α·mean|∂L/∂a_c| + β·(1 − sparsity(a_c)).
#include <ATen/ATen.h>

#include "core/compress/sequential.h"
#include "core/project/project.h"

namespace cwb {

class Model;
class Feedback;

struct ChannelScoreWeights {
    double alpha = 0.7;                 // weight of the gradient term
    double beta = 0.3;                  // weight of the density term
    double sparsityThreshold = 0.01;    // |a_c| below this counts as inactive
};

// Signed ∂L_w/∂g for every window w, block and query head: [windows, blocks, max heads] (NaN past a block's
// heads), L_w the mean next-token NLL of window w, all gates at 1. `compute`: where the passes run (see importance.h).
at::Tensor headGateGradients(const Model& model, const at::Tensor& windows, Feedback* feedback = nullptr,
                             const CalibrationCompute& compute = {});

struct ChannelGradientStats {
    at::Tensor meanAbsGradient;   // [blocks, max ffn] mean over windows and positions of |∂L_w/∂a_c|, NaN past a block's channels
    at::Tensor sparsity;          // [blocks, max ffn] fraction of positions with |a_c| < threshold
};
// a_c: the input of the MLP's down projection (the intermediate activation).
ChannelGradientStats channelGradientStats(const Model& model, const at::Tensor& windows, double sparsityThreshold,
                                          Feedback* feedback = nullptr, const CalibrationCompute& compute = {});

// "heads.gradient": blocks × heads, the mean over windows of |∂L_w/∂g_h|.
ImportanceMap headGradientImportance(const Model& model, const at::Tensor& windows, Feedback* feedback,
                                     const CalibrationCompute& compute = {});
// "channels.gradient": blocks × channels, α·G_c + β·(1 − sparsity(a_c)), where G_c is mean|∂L/∂a_c| divided by its
// maximum within the block, so both terms lie in [0, 1] and α, β weigh comparable quantities.
ImportanceMap channelGradientImportance(const Model& model, const at::Tensor& windows, Feedback* feedback,
                                        const ChannelScoreWeights& weights = {}, const CalibrationCompute& compute = {});

} // namespace cwb
