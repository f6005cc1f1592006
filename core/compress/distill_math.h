#pragma once
// Knowledge distillation as pure tensor functions (no models, no I/O): the loss terms, the learning-rate
// schedule, AdamW, gradient clipping, the teacher→student layer map and fake quantization with a
// straight-through estimator. The trainer (distill_trainer.h) builds on these; tests check each alone.
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/compress/fp8_math.h"
#include "core/compress/quant_math.h"
#include "core/compress/smoothquant_math.h"

namespace cwb::distill {

struct LossWeights {
    double alpha = 0.7;         // weight of the cross-entropy on the labels; 1 − alpha goes to the KD term
    double temperature = 4.0;   // T: both distributions are softened by z / T
    double hidden = 0.0;        // γ: Σ MSE of hidden states of mapped layers
    double attention = 0.0;     // δ: Σ MSE of attention maps of mapped layers
};

// Scalar terms of one batch (0-dim fp32 tensors; hidden/attention are zero tensors when not computed).
struct LossTerms {
    at::Tensor total, ce, kd, hidden, attention;
};

// Mean cross-entropy of logits [N, V] against labels [N] (int64).
at::Tensor crossEntropy(const at::Tensor& logits, const at::Tensor& labels);

// T² · mean over rows of KL(softmax(teacher / T) ‖ softmax(student / T)); logits [N, V] fp32.
// The T² keeps the gradient scale independent of T (Hinton et al. 2015).
at::Tensor kdLoss(const at::Tensor& student, const at::Tensor& teacher, double temperature);

// total = α·ce + (1 − α)·kd + γ·hidden + δ·attention, with kd already including T².
LossTerms combine(const at::Tensor& ce, const at::Tensor& kd, const at::Tensor& hidden, const at::Tensor& attention,
                  const LossWeights& weights);

// Attention maps [B, H, T, T] compared as MSE; when the head counts differ, the maps averaged over heads.
at::Tensor attentionMse(const at::Tensor& student, const at::Tensor& teacher);

// For each student layer the teacher layer it imitates: student layer i of S takes teacher layer
// ⌊(i + 1)·T / S⌋ − 1, so the last layers always meet.
std::vector<int64_t> uniformLayerMap(int64_t studentLayers, int64_t teacherLayers);
// "0:0,1:2,3:4" (student:teacher); students layers not named get −1 (no hidden/attention term). Throws cwb::Error.
std::vector<int64_t> parseLayerMap(const std::string& text, int64_t studentLayers, int64_t teacherLayers);

// Linear warmup over `warmup` steps, then constant or cosine decay to minRatio·base at `steps`. Step counts from 0.
double learningRate(int64_t step, int64_t steps, int64_t warmup, double base, bool cosine, double minRatio = 0.1);

// Adam with decoupled weight decay (Loshchilov & Hutter 2019), in place; `step` counts from 1.
struct AdamSettings {
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.0;
};
void adamwUpdate(at::Tensor& param, const at::Tensor& grad, at::Tensor& m, at::Tensor& v, int64_t step, double lr,
                 const AdamSettings& settings);

// Scales the gradients so their global L2 norm is at most maxNorm (<= 0: no clipping); returns the norm before.
double clipGradNorm(std::vector<at::Tensor>& grads, double maxNorm);

// Dequantized weight on the fixed grid of `grid` (its scales, zeros and group index), with a straight-through
// estimator: the forward value is Q(w), the gradient passes to w unchanged.
at::Tensor fakeQuantize(const at::Tensor& w, const quant::QuantizedWeight& grid);
// w quantized onto the grid of `grid` (same spec, scales, zeros, group index): its levels packed anew.
quant::QuantizedWeight requantize(const at::Tensor& w, const quant::QuantizedWeight& grid);

// The same for an FP8 E4M3 layer with fixed scales ([out] per channel or [1] per tensor): forward
// roundToE4m3(w / s) · s (saturating at ±448 · s), gradient identity; and w encoded on that grid.
at::Tensor fakeQuantizeFp8(const at::Tensor& w, const at::Tensor& scales);
quant::Fp8Weight requantizeFp8(const at::Tensor& w, const at::Tensor& scales);
// And for SmoothQuant's int8 weights with fixed per-channel scales [out]: forward clamp(round(w / s), ±127) · s.
at::Tensor fakeQuantizeInt8(const at::Tensor& w, const at::Tensor& scales);
quant::Int8Weight requantizeInt8(const at::Tensor& w, const at::Tensor& scales);

// Fake quantization whose scales train too (LSQ, Esser et al. 2020), the scales held as their logarithms (so they
// stay positive and Adam moves them by relative steps). Forward: the same grid value as with fixed scales exp(log).
// Gradients: to w, 1 where w / s lies inside the grid and 0 where the grid clips it; to s, Q(w / s) − w / s inside
// and Q(w / s) where it clips (Q: the grid value in units of s, zero point removed). Zero points stay fixed.
// Integer grids: logScales [out, groups] in place of grid.scales ([1, 1] for a per-tensor grid).
at::Tensor fakeQuantizeLearnedScales(const at::Tensor& w, const quant::QuantizedWeight& grid, const at::Tensor& logScales);
// FP8 E4M3 ([out] or [1]) and SmoothQuant int8 ([out]) scales.
at::Tensor fakeQuantizeFp8LearnedScales(const at::Tensor& w, const at::Tensor& logScales);
at::Tensor fakeQuantizeInt8LearnedScales(const at::Tensor& w, const at::Tensor& logScales);
// `grid` with its scales replaced by exp(logScales), in the grid's scale dtype.
quant::QuantizedWeight withScales(const quant::QuantizedWeight& grid, const at::Tensor& logScales);

} // namespace cwb::distill
