// Knowledge distillation (distill.kd): the variant, or a shallower student cut from it, trained against a
// teacher. The training loop lives in core/compress/distill_trainer; this file turns the step's params into
// its config, prepares the data (a text file, the calibration windows, or teacher samples) and the student.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <unistd.h>

#include "core/compress/distill_student.h"
#include "core/compress/distill_trainer.h"
#include "core/compress/method.h"
#include "core/compress/sequential.h"
#include "core/eval/perplexity.h"
#include "core/model/model.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

namespace {

// Passes over the training windows past which a note warns of overfitting.
constexpr double kManyPasses = 10.0;

// Consecutive windows of `length` tokens covering the text, each starting with BOS where the vocabulary starts texts
// with one (Tokenizer::textBos; id 0 was put first for Qwen2 and GPT-2, which have none).
at::Tensor textWindows(const Model& model, const std::string& path, int64_t length) {
    if (!model.tokenizer) throw Error(model.path, "distill.kd needs the model's tokenizer to read " + path);
    std::vector<TokenId> tokens = model.tokenizer->encode(readTextFile(path), false);
    const TokenId bos = model.tokenizer->textBos();
    const int64_t lead = bos >= 0 ? 1 : 0, body = length - lead, count = static_cast<int64_t>(tokens.size()) / body;
    if (count < 2) throw Error(path, "the text holds " + std::to_string(tokens.size()) + " tokens, fewer than two windows of " + std::to_string(length));
    at::Tensor out = at::empty({count, length}, at::kLong);
    auto a = out.accessor<int64_t, 2>();
    for (int64_t w = 0; w < count; ++w) {
        if (lead) a[w][0] = bos;
        for (int64_t i = 0; i < body; ++i) a[w][i + lead] = tokens[static_cast<size_t>(w * body + i)];
    }
    return out;
}

// The last tenth of the windows (at least one) is held out for the running evaluation.
DistillData splitWindows(const at::Tensor& windows) {
    DistillData d;
    const int64_t n = windows.size(0), held = std::max<int64_t>(1, n / 10);
    d.train = n > 1 ? windows.narrow(0, 0, n - held) : windows;
    if (n > 1) d.eval = windows.narrow(0, n - held, held);
    return d;
}

// 1 − cos(input, output) of each block on the windows: the blocks that change their input least matter least.
std::vector<double> blockInfluence(const Model& model, const at::Tensor& windows, Feedback* feedback) {
    const int64_t L = model.spec.layers;
    std::vector<double> sum(static_cast<size_t>(L), 0.0), rows(static_cast<size_t>(L), 0.0);
    SequentialPass pass;
    pass.collectBlockIO = [&](int64_t b, const at::Tensor& in, const at::Tensor& out) {
        sum[size_t(b)] += (1.0 - at::cosine_similarity(in, out, 1)).sum().item<double>();
        rows[size_t(b)] += double(in.size(0));
    };
    runSequential(model, windows, pass, feedback);
    for (int64_t b = 0; b < L; ++b) sum[size_t(b)] /= std::max(1.0, rows[size_t(b)]);
    return sum;
}

// Blocks of the teacher the student keeps: evenly spaced (first and last always) or the most influential.
std::vector<int64_t> keptBlocks(const Model& model, int64_t keep, const std::string& choice, const at::Tensor& windows, Feedback* feedback) {
    const int64_t L = model.spec.layers;
    std::vector<int64_t> kept;
    if (choice == "uniform") {
        for (int64_t i = 0; i < keep; ++i) kept.push_back(keep == 1 ? L - 1 : std::llround(double(i) * double(L - 1) / double(keep - 1)));
    } else {
        std::vector<double> influence = blockInfluence(model, windows, feedback);
        std::vector<int64_t> order(static_cast<size_t>(L));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return influence[size_t(a)] > influence[size_t(b)]; });
        kept.assign(order.begin(), order.begin() + keep);
    }
    std::sort(kept.begin(), kept.end());
    kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
    return kept;
}

void dropBlocks(StepContext& ctx, const std::vector<int64_t>& kept) {
    std::string drop;
    for (int64_t b = 0; b < ctx.model.spec.layers; ++b)
        if (!std::binary_search(kept.begin(), kept.end(), b)) drop += (drop.empty() ? "" : ",") + std::to_string(b);
    RecipeStep step;
    step.method = "prune.layers";
    const CompressionMethod* layers = MethodRegistry::instance().find(step.method);
    StepContext inner{ctx.model, step, resolveParams(step.method, layers->params(), {{"layers", drop}}), {}, {}, ctx.feedback, {}, ctx.base, {}, {}};
    layers->apply(inner);
    ctx.note("student: removed blocks " + drop + " (" + std::to_string(ctx.model.spec.layers) + " blocks left)");
}

// Forwards training steps to the feedback as metrics (live loss curves) and a log line now and then.
class FeedbackObserver : public DistillObserver {
public:
    explicit FeedbackObserver(Feedback* feedback) : mFeedback(feedback) {}
    void onStep(const DistillEvent& e) override {
        if (!mFeedback) return;
        mFeedback->metrics("distill.kd", {{"step", double(e.step)}, {"loss", e.loss}, {"ce", e.ce}, {"kd", e.kd}, {"hidden", e.hidden},
                                          {"attention", e.attention}, {"lr", e.lr}, {"grad_norm", e.gradNorm},
                                          {"eval_ppl", e.evalPerplexity}, {"tokens_per_second", e.tokensPerSecond}});
        if (e.evaluatedNow)
            mFeedback->log("distill.kd: step " + std::to_string(e.step) + "/" + std::to_string(e.steps) + " loss " + std::to_string(e.loss) +
                           " (ce " + std::to_string(e.ce) + ", kd " + std::to_string(e.kd) + "), eval PPL " + std::to_string(e.evalPerplexity));
    }

private:
    Feedback* mFeedback;
};

class KnowledgeDistillation : public CompressionMethod {
public:
    std::string id() const override { return "distill.kd"; }
    bool actsPerLinearLayer() const override { return false; }
    bool readsLayerPatterns() const override { return false; }
    int version() const override { return 1; }
    std::string displayName() const override { return "Knowledge distillation"; }
    std::string summary() const override {
        return "trains the variant (or a shallower student) to match a teacher: α·CE + (1−α)·T²·KL + γ·hidden MSE + δ·attention MSE";
    }
    std::vector<ParamSpec> params() const override {
        return {choiceParam("teacher", {"base", "input"}, "base", "base: the model the recipe started from; input: the variant as this step finds it"),
                intParam("student_layers", 0, 1024, 0, "0: train the variant as it is; N: first cut it to N blocks"),
                choiceParam("layer_choice", {"importance", "uniform"}, "importance",
                            "which blocks a shallower student keeps: the most influential (1 − cos(in, out)) or evenly spaced"),
                textParam("layer_map", "", "student:teacher pairs for the hidden/attention terms, e.g. '0:0,1:2'; empty: the kept blocks, else uniform"),
                choiceParam("source", {"text", "teacher"}, "text", "text: windows of `data`; teacher: sequences sampled from the teacher (data-free)"),
                pathParam("data", "training text file (relative: to the project's or recipe's folder); empty: the calibration text"),
                intParam("generated", 1, 1 << 20, 256, "sequences the teacher generates (source teacher)"),
                floatParam("temperature", 0.1, 100.0, 4.0, "T: softmax temperature of the KD term"),
                floatParam("alpha", 0.0, 1.0, 0.7, "weight of the cross-entropy on the labels; 1 − alpha weights T²·KL"),
                floatParam("hidden_weight", 0.0, 1e6, 0.0, "γ: weight of Σ MSE of hidden states of mapped layers"),
                floatParam("attention_weight", 0.0, 1e6, 0.0, "δ: weight of Σ MSE of attention maps of mapped layers"),
                intParam("steps", 1, 1 << 24, 200, "optimizer steps"),
                floatParam("lr", 0.0, 1.0, 1e-3, "peak learning rate (AdamW)"),
                intParam("warmup", 0, 1 << 24, 10, "steps of linear warmup"),
                choiceParam("schedule", {"cosine", "constant"}, "cosine", "after warmup: cosine decay to 0.1·lr, or constant"),
                floatParam("weight_decay", 0.0, 1.0, 0.0, "decoupled weight decay (AdamW)"),
                intParam("batch_size", 1, 4096, 8, "sequences per micro-batch"),
                intParam("seq_len", 2, 1 << 20, 128, "tokens per sequence (clipped to the model's context)"),
                floatParam("grad_clip", 0.0, 1e6, 1.0, "maximum global gradient norm; 0: no clipping"),
                intParam("grad_accum", 1, 4096, 1, "micro-batches per optimizer step"),
                intParam("seed", 0, 1LL << 62, 0, "seeds the batches and the teacher's samples"),
                intParam("eval_every", 0, 1 << 24, 50, "evaluate the held-out perplexity every K steps (0: before and after only)"),
                boolParam("keep_sparsity", true, "weights that are exactly zero stay zero (pruning masks; in quantized layers also the weights rounded to zero)"),
                boolParam("train_embeddings", false, "also train embeddings, final norm and output head"),
                boolParam("train_scales", false,
                          "quantized layers (int, FP8, W8A8) also train their scales (LSQ, as log-scales); zero points stay"),
                pathParam("checkpoint", "checkpoint file, relative: to the project's or recipe's folder (written at the end, when "
                                        "stopped, and every checkpoint_every steps)"),
                intParam("checkpoint_every", 0, 1 << 24, 0, "steps between checkpoints; 0: only at the end or when stopped"),
                boolParam("resume", false, "continue from the checkpoint file when it exists"),
                boolParam("resume_other_start", false,
                          "with resume: continue from a checkpoint trained from other starting weights (all else the same), "
                          "e.g. when a GPU step before the distillation was recomputed not bit for bit; how far the start "
                          "differs is not checked"),
                choiceParam("device", {"auto", "cpu", "cuda"}, "auto", "where to train; auto: CUDA when available")};
    }
    bool needsCalibration(const nlohmann::json& p) const override {
        return p["source"] == "text" && p["data"].get<std::string>().empty();
    }
    std::string paramsProblem(const nlohmann::json& p) const override {
        const std::string data = p["data"];
        std::error_code ec;
        // Read only with source text; a pipe (<(zcat …)) reads as well as a file.
        if (p["source"] == "text" && !data.empty() &&
            (!std::filesystem::exists(data, ec) || std::filesystem::is_directory(data, ec)))
            return "distill.kd: its data file " + data + " is not there (or is a folder)";
        const std::string checkpoint = p["checkpoint"];
        if (!checkpoint.empty()) {   // written at the end of training: a folder it cannot go in would fail only then
            const std::filesystem::path folder = std::filesystem::path(checkpoint).parent_path();
            const std::string where = folder.empty() ? "." : folder.string();
            if (!std::filesystem::is_directory(where, ec))
                return "distill.kd: the folder of its checkpoint " + checkpoint + " is not there";
            if (::access(where.c_str(), W_OK | X_OK) != 0)
                return "distill.kd: its checkpoint " + checkpoint + " cannot be written (" + where + " is not writable)";
            const std::string taken = checkpointPathProblem(checkpoint);
            if (!taken.empty()) return "distill.kd: checkpoint: " + taken;
        }
        if (p["resume_other_start"].get<bool>() && !p["resume"].get<bool>())
            return "distill.kd: resume_other_start applies to a resumed run; set \"resume\": true as well";
        return "";
    }
    void apply(StepContext& ctx) const override {
        const nlohmann::json& p = ctx.params;
        std::unique_ptr<Model> input = ctx.model.clone();
        const Model& teacher = p["teacher"] == "input" || !ctx.base ? *input : *ctx.base;
        const std::string device = p["device"];
        if (device == "cuda" && !at::hasCUDA()) throw Error("distill.kd: device cuda asked for, but no CUDA device is available");
        DistillConfig config;
        config.device = device == "cuda" || (device == "auto" && at::hasCUDA()) ? at::Device(at::kCUDA) : at::Device(at::kCPU);
        const int64_t seqLen = std::min<int64_t>(p["seq_len"].get<int64_t>(), ctx.model.spec.context);

        DistillData data;
        if (p["source"] == "teacher") {
            RuntimeOptions options;
            options.device = config.device;
            Transformer model(teacher, options);
            const TokenId bos = teacher.tokenizer ? teacher.tokenizer->bos() : -1;
            const int64_t count = p["generated"].get<int64_t>();
            data.train = sampleSequences(model, bos, count, seqLen, p["seed"].get<uint64_t>());
            data.eval = sampleSequences(model, bos, std::max<int64_t>(1, count / 10), seqLen, p["seed"].get<uint64_t>() + 1);
            ctx.note("data: " + std::to_string(count) + " sequences of " + std::to_string(seqLen) + " tokens sampled from the teacher");
        } else if (!p["data"].get<std::string>().empty()) {
            data = splitWindows(textWindows(ctx.model, p["data"], seqLen));
            ctx.note("data: " + std::to_string(data.train.size(0)) + " windows of " + p["data"].get<std::string>() + ", " +
                     std::to_string(data.eval.size(0)) + " held out");
        } else {
            if (!ctx.calibration.defined()) throw Error("distill.kd: no training data; give `data`, a calibration text, or source teacher");
            at::Tensor windows = ctx.calibration.narrow(1, 0, std::min(seqLen, ctx.calibration.size(1)));
            data = splitWindows(windows);
            ctx.note("data: " + std::to_string(data.train.size(0)) + " calibration windows, " + std::to_string(data.eval.defined() ? data.eval.size(0) : 0) +
                     " held out (calibration windows may overlap, so the held-out ones are not strictly unseen text)");
        }

        std::vector<int64_t> kept;
        const int64_t studentLayers = p["student_layers"].get<int64_t>();
        if (studentLayers > 0 && studentLayers < ctx.model.spec.layers) {
            kept = keptBlocks(ctx.model, studentLayers, p["layer_choice"], data.train, ctx.feedback);
            dropBlocks(ctx, kept);
        } else if (studentLayers >= ctx.model.spec.layers) {
            ctx.note("student_layers " + std::to_string(studentLayers) + " is not below the variant's " + std::to_string(ctx.model.spec.layers) + " blocks: kept all");
        }

        config.steps = p["steps"];
        config.lr = p["lr"];
        config.warmup = p["warmup"];
        config.cosine = p["schedule"] == "cosine";
        config.weightDecay = p["weight_decay"];
        config.batchSize = p["batch_size"];
        config.gradAccum = p["grad_accum"];
        config.gradClip = p["grad_clip"];
        config.seed = p["seed"].get<uint64_t>();
        config.evalEvery = p["eval_every"];
        config.loss.alpha = p["alpha"];
        config.loss.temperature = p["temperature"];
        config.loss.hidden = p["hidden_weight"];
        config.loss.attention = p["attention_weight"];
        config.keepSparsity = p["keep_sparsity"];
        config.trainEmbeddings = p["train_embeddings"];
        config.trainScales = p["train_scales"];
        config.checkpointPath = p["checkpoint"];
        config.checkpointEvery = p["checkpoint_every"];
        config.resume = p["resume"];
        config.resumeOtherStart = p["resume_other_start"];
        if (config.resumeOtherStart && !config.resume)
            throw Error("distill.kd: resume_other_start applies to a resumed run; set \"resume\": true as well");
        const std::string explicitMap = p["layer_map"];
        if (!explicitMap.empty()) {
            config.layerMap = distill::parseLayerMap(explicitMap, ctx.model.spec.layers, teacher.spec.layers);
        } else if (!kept.empty() && teacher.spec.layers == input->spec.layers) {
            config.layerMap = kept;   // each student block imitates the block it was cut from
        }

        // Many passes over few windows fit them rather than the teacher (user probe: 200 steps on 12 windows, said nothing).
        const int64_t trainWindows = data.train.size(0);
        const int64_t sequences = config.steps * config.batchSize * config.gradAccum;
        if (trainWindows > 0 && double(sequences) > kManyPasses * double(trainWindows)) {
            char text[400];
            const std::string more = p["source"] == "teacher"        ? "a larger `generated`"
                                     : !p["data"].get<std::string>().empty() ? "a longer `data` text"
                                                                             : "more calibration windows (--samples)";
            std::snprintf(text, sizeof text, "%lld steps of %lld sequences pass over the %lld training %s %.1f times: the student "
                          "may learn them by heart (the held-out perplexity shows whether it does); %s or fewer steps avoid it",
                          (long long)config.steps, (long long)(config.batchSize * config.gradAccum), (long long)trainWindows,
                          p["source"] == "teacher" ? "sequences" : "windows", double(sequences) / double(trainWindows), more.c_str());
            ctx.note(text);
        }
        FeedbackObserver observer(ctx.feedback);
        DistillResult r = distillModel(teacher, ctx.model, data, config, ctx.feedback, &observer);
        for (const auto& n : r.notes) ctx.note(n);
        char line[256];
        std::snprintf(line, sizeof line, "steps %lld-%lld on %s: held-out PPL %.4f -> %.4f, %.0f tokens/s", (long long)r.startStep,
                      (long long)r.stepsDone, config.device.is_cuda() ? "CUDA" : "CPU", r.evalPerplexityBefore, r.evalPerplexityAfter,
                      r.tokensPerSecond);
        ctx.note(line);
        const std::string rise = perplexityRiseWarning(r.evalPerplexityBefore, r.evalPerplexityAfter);
        if (!rise.empty()) ctx.note(rise);
    }
};

} // namespace

void registerDistillationMethods(MethodRegistry& registry) { registry.add(std::make_unique<KnowledgeDistillation>()); }

} // namespace cwb
