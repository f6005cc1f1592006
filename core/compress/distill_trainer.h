#pragma once
// Training a student model against a teacher with LibTorch autograd (CPU or CUDA), through the same
// Transformer as inference: the student's tensors are handed to the runtime as trainable parameters.
// Pruned zeros stay zero (masks), integer, FP8 and W8A8 layers train on their grid with a straight-through
// estimator (scales fixed, or trained too with trainScales) and are stored on it again; shapes never change.
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/compress/distill_math.h"
#include "core/tokenizer/tokenizer.h"

namespace cwb {

class Model;
class Feedback;
class Transformer;

struct DistillConfig {
    int64_t steps = 200;
    double lr = 1e-3;
    int64_t warmup = 10;
    bool cosine = true;              // false: constant after warmup
    double weightDecay = 0.0;
    int64_t batchSize = 8;           // sequences per micro-batch
    int64_t gradAccum = 1;           // micro-batches per optimizer step
    double gradClip = 1.0;           // global L2 norm; <= 0: none
    uint64_t seed = 0;               // which windows each step draws
    int64_t evalEvery = 50;          // 0: only before and after
    distill::LossWeights loss;
    std::vector<int64_t> layerMap;   // per student layer the teacher layer (−1: none); empty: uniform
    bool keepSparsity = true;        // weights that are exactly zero stay zero
    bool trainEmbeddings = false;    // also embeddings, final norm and output head (otherwise the blocks only)
    bool trainScales = false;        // quantized layers also train their scales (LSQ, as log-scales)
    std::string checkpointPath;      // empty: none
    int64_t checkpointEvery = 0;     // steps between checkpoints (0: only at the end or when stopped)
    bool resume = false;             // continue from checkpointPath when it exists
    bool resumeOtherStart = false;   // ... even when it was trained from other starting weights (all else the same)
    at::Device device = at::kCPU;
};

// One optimizer step, for live loss curves.
struct DistillEvent {
    int64_t step = 0, steps = 0;     // step counts from 1
    double loss = 0, ce = 0, kd = 0, hidden = 0, attention = 0;
    double lr = 0, gradNorm = 0;
    double evalPerplexity = std::numeric_limits<double>::quiet_NaN();   // latest evaluation (NaN before the first)
    bool evaluatedNow = false;       // evalPerplexity was measured at this step
    double tokensPerSecond = 0;      // training tokens per second so far
};

class DistillObserver {
public:
    virtual ~DistillObserver() = default;
    virtual void onStep(const DistillEvent& event) = 0;
};

struct DistillData {
    at::Tensor train;   // [windows, tokens] int64; each step draws batchSize rows
    at::Tensor eval;    // [windows, tokens] int64, held out; undefined: no running evaluation
};

struct DistillResult {
    int64_t startStep = 0;           // > 0 when resumed
    int64_t stepsDone = 0;           // the student holds the weights after this step
    double evalPerplexityBefore = std::numeric_limits<double>::quiet_NaN();
    double evalPerplexityAfter = std::numeric_limits<double>::quiet_NaN();
    double tokensPerSecond = 0;
    double seconds = 0;
    std::vector<DistillEvent> history;
    std::vector<std::string> notes;  // frozen layers, resume, ...
};

// Trains `student` in place. Throws cwb::Error for bad data or a non-finite loss (the student then holds the
// weights of the last good step) and Cancelled (the student holds the weights of the last finished step,
// written to the checkpoint too when one is configured).
DistillResult distillModel(const Model& teacher, Model& student, const DistillData& data, const DistillConfig& config,
                           Feedback* feedback = nullptr, DistillObserver* observer = nullptr);

// `count` sequences of `length` tokens sampled from the model (BOS first, temperature 1, seeded): the
// data-free route when the user has no corpus.
at::Tensor sampleSequences(Transformer& model, TokenId bos, int64_t count, int64_t length, uint64_t seed,
                           Feedback* feedback = nullptr);

// Mean next-token cross-entropy of the model over windows [N, T], as a perplexity.
double windowPerplexity(Transformer& model, const at::Tensor& windows, int64_t batchSize = 8);

// The warning for a distillation whose held-out perplexity rose from `before` to `after` by more than 0.1%; "" when it
// did not (or either is unknown). A rise went by unremarked in the summary line (GUI probe: 8.42 -> 10.06).
std::string perplexityRiseWarning(double before, double after);

} // namespace cwb
