#include "core/compress/distill_trainer.h"

#include <c10/core/GradMode.h>   // NoGradGuard: ATen/ATen.h does not bring it in LibTorch 2.x
#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/compress/distill_student.h"
#include "core/model/model.h"
#include "core/project/file_hash.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

namespace {

class AttentionCollector : public ActivationObserver {
public:
    bool wantsAttentionProbs() const override { return true; }
    void onAttentionProbs(int64_t, const at::Tensor& probs) override { maps.push_back(probs); }
    std::vector<at::Tensor> maps;
};

struct Pass {
    at::Tensor logits;                // [B, T, V]
    std::vector<at::Tensor> hidden;   // output of each block
    std::vector<at::Tensor> attention;
};

Pass run(Transformer& model, const at::Tensor& tokens, bool wantHidden, bool wantAttention) {
    Pass pass;
    AttentionCollector collector;
    at::Tensor x = model.embed(tokens);
    for (int64_t l = 0; l < model.spec().layers; ++l) {
        x = model.runBlock(l, x, wantAttention ? &collector : nullptr);
        if (wantHidden) pass.hidden.push_back(x);
    }
    pass.logits = model.logits(x);
    pass.attention = std::move(collector.maps);
    return pass;
}

// Rows of the training windows for one micro-batch: a function of (seed, step, micro) only, so a resumed run
// draws exactly what the uninterrupted one drew.
at::Tensor drawBatch(const at::Tensor& windows, uint64_t seed, int64_t step, int64_t micro, int64_t batchSize) {
    std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(step), uint32_t(micro)};
    std::mt19937_64 rng(seq);
    std::uniform_int_distribution<int64_t> pick(0, windows.size(0) - 1);
    std::vector<int64_t> rows(static_cast<size_t>(batchSize));
    for (auto& r : rows) r = pick(rng);
    return windows.index_select(0, at::tensor(rows, at::kLong));
}

double value(const at::Tensor& t) { return t.defined() ? t.detach().item<double>() : 0.0; }

std::string stepText(int64_t step) { return "step " + std::to_string(step); }

// The teacher's stored bytes, per tensor the 64-bit sum of its 32-bit words (and the odd bytes), with name and size.
std::string teacherChecksum(const Model& teacher) {
    uint64_t hash = kFnv1a64OffsetBasis;
    for (const auto& name : teacher.tensorNames()) {
        const TensorRecord& r = teacher.tensor(name);
        hash = fnv1a64(name.data(), name.size() + 1, hash);
        hash = fnv1a64(&r.bytes, sizeof r.bytes, hash);
        if (!r.data || r.bytes == 0) continue;   // a layer read packed: its name and size stand for it
        const int64_t words = int64_t(r.bytes / 4);
        int64_t sum = words == 0 ? 0
                                 : at::sum(at::from_blob(const_cast<uint8_t*>(r.data), {words}, at::kInt), at::kLong).item<int64_t>();
        for (size_t i = size_t(words) * 4; i < r.bytes; ++i) sum += r.data[i];
        hash = fnv1a64(&sum, sizeof sum, hash);
    }
    return formatHash(hash);
}

uint64_t hashTokens(const at::Tensor& windows, uint64_t hash) {
    if (!windows.defined()) return fnv1a64("", 1, hash);
    const at::Tensor t = windows.to(at::kCPU, at::kLong).contiguous();
    const std::vector<int64_t> shape = t.sizes().vec();
    hash = fnv1a64(shape.data(), shape.size() * sizeof(int64_t), hash);
    return fnv1a64(t.data_ptr<int64_t>(), size_t(t.numel()) * sizeof(int64_t), hash);
}

// The settings a resumed run must share with the one that wrote its checkpoint; not the device, the evaluation
// interval or the checkpoint's own settings, which change nothing the training computes.
nlohmann::json resumeSettings(const DistillConfig& c, const std::vector<int64_t>& layerMap) {
    return {{"steps", c.steps}, {"lr", c.lr}, {"warmup", c.warmup}, {"cosine", c.cosine}, {"weight_decay", c.weightDecay},
            {"batch_size", c.batchSize}, {"grad_accum", c.gradAccum}, {"grad_clip", c.gradClip}, {"seed", c.seed},
            {"alpha", c.loss.alpha}, {"temperature", c.loss.temperature}, {"hidden_weight", c.loss.hidden},
            {"attention_weight", c.loss.attention}, {"layer_map", layerMap}, {"keep_sparsity", c.keepSparsity},
            {"train_embeddings", c.trainEmbeddings}, {"train_scales", c.trainScales}};
}

} // namespace

double windowPerplexity(Transformer& model, const at::Tensor& windows, int64_t batchSize) {
    c10::NoGradGuard noGrad;
    double sum = 0;
    int64_t count = 0;
    for (int64_t start = 0; start < windows.size(0); start += batchSize) {
        at::Tensor batch = windows.narrow(0, start, std::min(batchSize, windows.size(0) - start));
        at::Tensor logits = model.forward(batch.narrow(1, 0, batch.size(1) - 1));
        at::Tensor labels = batch.narrow(1, 1, batch.size(1) - 1).to(logits.device());
        sum += distill::crossEntropy(logits.reshape({-1, logits.size(-1)}), labels.reshape({-1})).item<double>() * double(labels.numel());
        count += labels.numel();
    }
    return std::exp(sum / double(count));
}

at::Tensor sampleSequences(Transformer& model, TokenId bos, int64_t count, int64_t length, uint64_t seed, Feedback* feedback) {
    if (bos < 0) throw Error("teacher-generated data needs a BOS token, and the tokenizer has none");
    if (length < 2 || length > model.spec().context)
        throw Error("teacher-generated data: sequences of " + std::to_string(length) + " tokens do not fit the context of " +
                    std::to_string(model.spec().context));
    c10::NoGradGuard noGrad;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    at::Tensor out = at::empty({count, length}, at::kLong);
    const int64_t batch = 32;
    for (int64_t first = 0; first < count; first += batch) {
        if (feedback) feedback->throwIfCancelled();
        const int64_t n = std::min(batch, count - first);
        auto cache = model.makeCache(n, length);
        at::Tensor current = at::full({n, 1}, int64_t(bos), at::kLong);
        out.narrow(0, first, n).select(1, 0).fill_(int64_t(bos));
        for (int64_t pos = 1; pos < length; ++pos) {
            at::Tensor probs = at::softmax(model.forward(current, cache.get()).select(1, 0), -1).to(at::kCPU, at::kDouble).cumsum(-1).contiguous();
            const double* p = probs.data_ptr<double>();
            const int64_t vocab = probs.size(1);
            for (int64_t r = 0; r < n; ++r) {
                const double u = uniform(rng) * p[r * vocab + vocab - 1];
                const int64_t token = std::lower_bound(p + r * vocab, p + (r + 1) * vocab, u) - (p + r * vocab);
                out[first + r][pos] = std::min(token, vocab - 1);
            }
            current = out.narrow(0, first, n).narrow(1, pos, 1).clone();
        }
        if (feedback) feedback->setProgress(double(first + n) / double(count));
    }
    return out;
}

DistillResult distillModel(const Model& teacher, Model& student, const DistillData& data, const DistillConfig& c,
                           Feedback* feedback, DistillObserver* observer) {
    if (!data.train.defined() || data.train.dim() != 2 || data.train.size(0) == 0 || data.train.size(1) < 2)
        throw Error("distillation: no training windows (need at least one window of 2 tokens)");
    if (teacher.spec.vocab != student.spec.vocab)
        throw Error("distillation: the teacher's vocabulary (" + std::to_string(teacher.spec.vocab) + ") differs from the student's (" +
                    std::to_string(student.spec.vocab) + ")");
    if (c.steps < 1 || c.batchSize < 1 || c.gradAccum < 1) throw Error("distillation: steps, batch size and accumulation must be positive");
    const bool wantHidden = c.loss.hidden != 0, wantAttention = c.loss.attention != 0;
    if (wantHidden && teacher.spec.hidden != student.spec.hidden)
        throw Error("distillation: hidden-state loss needs the same hidden size in teacher and student");
    std::vector<int64_t> layerMap = c.layerMap.empty() ? distill::uniformLayerMap(student.spec.layers, teacher.spec.layers) : c.layerMap;
    if (static_cast<int64_t>(layerMap.size()) != student.spec.layers) throw Error("distillation: the layer map must name every student layer");

    DistillResult result;
    RuntimeOptions teacherOptions;
    teacherOptions.device = c.device;
    Transformer teacherModel(teacher, teacherOptions);
    StudentTensors tensors(student, c.device, c.keepSparsity, c.trainEmbeddings, c.trainScales);
    if (!c.checkpointPath.empty())   // what a checkpoint must match to be resumed (costs a read of both models)
        tensors.setRun({{"settings", resumeSettings(c, layerMap)}, {"student", tensors.weightsChecksum()},
                        {"teacher", teacherChecksum(teacher)},
                        {"data", formatHash(hashTokens(data.eval, hashTokens(data.train, kFnv1a64OffsetBasis)))}});
    const bool resuming = c.resume && !c.checkpointPath.empty() && std::ifstream(c.checkpointPath).good();
    if (resuming) tensors.load(c.checkpointPath, c.resumeOtherStart);   // refuses another run's checkpoint
    result.notes = tensors.notes();
    if (resuming) {
        result.startStep = tensors.step();
        result.notes.push_back("resumed from " + c.checkpointPath + " at step " + std::to_string(tensors.step()));
    } else if (c.resume && !c.checkpointPath.empty()) {   // said: a run that restarts unasked looks like a resumed one
        result.notes.push_back("resume: no checkpoint at " + std::filesystem::absolute(c.checkpointPath).string() +
                               " yet; training starts at step 0");
    }
    RuntimeOptions studentOptions;
    studentOptions.device = c.device;
    auto evaluate = [&]() {
        c10::NoGradGuard noGrad;
        studentOptions.parameters = &tensors.effective();
        Transformer model(student, studentOptions);
        return windowPerplexity(model, data.eval.to(at::kLong), c.batchSize);
    };
    auto stop = [&](bool writeCheckpoint) {   // leaves the last good weights in the model
        tensors.storeInto(student);
        if (writeCheckpoint && !c.checkpointPath.empty()) tensors.save(c.checkpointPath);
    };
    if (data.eval.defined()) {
        result.evalPerplexityBefore = evaluate();
        // The per-step lines start at the first eval_every step: without this one a rise was easy to miss (GUI probe).
        if (feedback) {
            char line[96];
            std::snprintf(line, sizeof line, "held-out PPL before training (step %lld): %.4f", (long long)tensors.step(),
                          result.evalPerplexityBefore);
            feedback->log(line);
        }
    }

    distill::AdamSettings adam;
    adam.weightDecay = c.weightDecay;
    distill::AdamSettings scaleAdam = adam;
    scaleAdam.weightDecay = 0;
    double lastEval = result.evalPerplexityBefore, trainSeconds = 0;
    int64_t tokensSeen = 0;
    const auto begin = std::chrono::steady_clock::now();
    for (int64_t step = tensors.step(); step < c.steps; ++step) {
        if (feedback && feedback->isCancelled()) {
            stop(true);
            throw Cancelled();
        }
        const auto t0 = std::chrono::steady_clock::now();
        const double lr = distill::learningRate(step, c.steps, c.warmup, c.lr, c.cosine);
        DistillEvent event;
        event.step = step + 1;
        event.steps = c.steps;
        event.lr = lr;
        for (auto& t : tensors.trained()) {
            if (t.latent.grad().defined()) t.latent.grad().zero_();
            if (t.logScales.defined() && t.logScales.grad().defined()) t.logScales.grad().zero_();
        }
        for (int64_t micro = 0; micro < c.gradAccum; ++micro) {
            at::Tensor batch = drawBatch(data.train, c.seed, step, micro, c.batchSize).to(c.device);
            at::Tensor inputs = batch.narrow(1, 0, batch.size(1) - 1), labels = batch.narrow(1, 1, batch.size(1) - 1);
            Pass teacherPass;
            {
                c10::NoGradGuard noGrad;
                teacherPass = run(teacherModel, inputs, wantHidden, wantAttention);
            }
            studentOptions.parameters = &tensors.effective();
            Transformer studentModel(student, studentOptions);
            Pass studentPass = run(studentModel, inputs, wantHidden, wantAttention);
            const int64_t vocab = studentPass.logits.size(-1);
            at::Tensor s = studentPass.logits.reshape({-1, vocab}), t = teacherPass.logits.reshape({-1, vocab});
            at::Tensor ce = distill::crossEntropy(s, labels.reshape({-1}));
            at::Tensor kd = distill::kdLoss(s, t, c.loss.temperature);
            at::Tensor hidden = at::zeros({}, s.options()), attention = at::zeros({}, s.options());
            for (size_t l = 0; l < layerMap.size(); ++l) {
                const int64_t tl = layerMap[l];
                if (tl < 0) continue;
                if (wantHidden) hidden = hidden + (studentPass.hidden[l] - teacherPass.hidden[size_t(tl)]).pow(2).mean();
                if (wantAttention) attention = attention + distill::attentionMse(studentPass.attention[l], teacherPass.attention[size_t(tl)]);
            }
            distill::LossTerms terms = distill::combine(ce, kd, hidden, attention, c.loss);
            const double total = value(terms.total);
            if (!std::isfinite(total)) {
                stop(false);
                throw Error("distillation stopped at " + stepText(step + 1) + ": the loss is " + std::to_string(total) + " (ce " +
                            std::to_string(value(ce)) + ", kd " + std::to_string(value(kd)) + "); the student keeps the weights of " +
                            stepText(step) + ". Lower the learning rate or check the data.");
            }
            (terms.total / double(c.gradAccum)).backward();
            const double share = 1.0 / double(c.gradAccum);
            event.loss += total * share;
            event.ce += value(ce) * share;
            event.kd += value(kd) * share;
            event.hidden += value(hidden) * share;
            event.attention += value(attention) * share;
            tokensSeen += labels.numel();
        }
        std::vector<at::Tensor> grads;
        for (auto& t : tensors.trained()) {
            grads.push_back(t.latent.grad());
            if (t.logScales.defined()) grads.push_back(t.logScales.grad());
        }
        event.gradNorm = distill::clipGradNorm(grads, c.gradClip);
        if (!std::isfinite(event.gradNorm)) {
            stop(false);
            throw Error("distillation stopped at " + stepText(step + 1) + ": the gradient norm is " + std::to_string(event.gradNorm) +
                        "; the student keeps the weights of " + stepText(step) + ". Lower the learning rate.");
        }
        {
            c10::NoGradGuard noGrad;
            for (auto& t : tensors.trained()) {
                if (!t.latent.grad().defined()) continue;
                at::Tensor param = t.latent;   // shares storage with the leaf: in-place updates keep it a leaf
                distill::adamwUpdate(param, t.latent.grad(), t.m, t.v, step + 1, lr, adam);
                if (t.mask.defined()) param.mul_(t.mask);
                if (t.logScales.defined() && t.logScales.grad().defined()) {
                    at::Tensor logScales = t.logScales;   // no weight decay: it would pull every scale towards 1
                    distill::adamwUpdate(logScales, t.logScales.grad(), t.scaleM, t.scaleV, step + 1, lr, scaleAdam);
                }
            }
        }
        tensors.setStep(step + 1);
        trainSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        event.tokensPerSecond = trainSeconds > 0 ? double(tokensSeen) / trainSeconds : 0;
        const bool last = step + 1 == c.steps;
        if (data.eval.defined() && (last || (c.evalEvery > 0 && (step + 1) % c.evalEvery == 0))) {
            lastEval = evaluate();
            event.evaluatedNow = true;
        }
        event.evalPerplexity = lastEval;
        if (!c.checkpointPath.empty() && c.checkpointEvery > 0 && (step + 1) % c.checkpointEvery == 0) tensors.save(c.checkpointPath);
        result.history.push_back(event);
        if (observer) observer->onStep(event);
        if (feedback) feedback->setProgress(double(step + 1) / double(c.steps));
    }
    stop(true);
    if (!c.checkpointPath.empty()) result.notes.push_back("checkpoint written to " + std::filesystem::absolute(c.checkpointPath).string());
    result.stepsDone = tensors.step();
    result.evalPerplexityAfter = lastEval;
    result.tokensPerSecond = trainSeconds > 0 ? double(tokensSeen) / trainSeconds : 0;
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    return result;
}

std::string perplexityRiseWarning(double before, double after) {
    if (!std::isfinite(before) || !std::isfinite(after) || !(after > before * 1.001)) return "";
    char warning[400];
    std::snprintf(warning, sizeof warning, "warning: distillation made the held-out perplexity worse (%.4f -> %.4f); the step "
                  "keeps the trained weights. A lower lr, fewer steps or more training text usually help; disable the step "
                  "to compare without it", before, after);
    return warning;
}

} // namespace cwb
