// Writes the "distillation" section of docs/results.md: compressed stories260K students before and after
// distill.kd against the base model (CPU, fixed step budget), with text data and with teacher-generated data,
// evaluated on held-out documents by perplexity, KL(base ‖ student) and top-1 agreement. Run by hand:
//   bench_distillation MODEL STORIES_TEXT OUT.md [--train-docs 70] [--steps 150] [--lr 0.002] [--ctx 256]
// STORIES_TEXT holds documents separated by <|endoftext|>; the first --train-docs documents train (and calibrate),
// the rest evaluate, so training and evaluation text are disjoint.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/compress/pipeline.h"
#include "core/eval/divergence.h"
#include "core/io/model_format.h"
#include "core/model/model.h"
#include "core/runtime/transformer.h"
#include "core/util/feedback.h"
#include "core/version.h"
#include "results_document.h"

using namespace cwb;

namespace {

struct Student {
    const char* label;
    const char* compress;   // the recipe steps that make the student (JSON objects, comma separated)
    const char* kdParams = "";   // more distill.kd parameters (",\"name\":value")
};

const Student kStudents[] = {
    {"magnitude 50%", R"({"method":"prune.magnitude","params":{"sparsity":0.5}})"},
    {"2:4 magnitude", R"({"method":"prune.nm","params":{"score":"magnitude"}})"},
    {"4-layer student (5 → 4 blocks)", R"({"method":"prune.layers","params":{"count":1}})"},
    {"RTN int3 g32 asym, QAT", R"({"method":"quantize.rtn","params":{"bits":3,"group_size":32,"scheme":"asym"}})"},
    {"RTN int3 g32 asym, QAT with trained scales", R"({"method":"quantize.rtn","params":{"bits":3,"group_size":32,"scheme":"asym"}})",
     R"(,"train_scales":true)"},
};

struct Measured {
    std::string student, data;
    DivergenceResult before, after;
    double seconds = 0, tokensPerSecond = 0;
    std::vector<std::string> notes;
};

void split(const std::string& text, int trainDocs, const std::string& trainPath, const std::string& evalPath) {
    const std::string sep = "<|endoftext|>";
    std::ostringstream train, eval;
    size_t start = 0;
    for (int doc = 0; start < text.size(); ++doc) {
        size_t end = text.find(sep, start);
        (doc < trainDocs ? train : eval) << text.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (end == std::string::npos) break;
        start = end + sep.size();
    }
    std::ofstream(trainPath) << train.str();
    std::ofstream(evalPath) << eval.str();
}

double gapClosed(const Measured& m) {
    const double before = m.before.variant.perplexity - m.before.base.perplexity;
    const double after = m.after.variant.perplexity - m.after.base.perplexity;
    return before > 0 ? 1.0 - after / before : 0.0;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s MODEL STORIES_TEXT OUT.md [--train-docs N] [--steps N] [--lr X] [--ctx N]\n", argv[0]);
        return 2;
    }
    int64_t ctx = 256, steps = 150;
    int trainDocs = 70;
    double lr = 0.002;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--ctx")) ctx = std::atoll(argv[i + 1]);
        if (!std::strcmp(argv[i], "--train-docs")) trainDocs = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--steps")) steps = std::atoll(argv[i + 1]);
        if (!std::strcmp(argv[i], "--lr")) lr = std::atof(argv[i + 1]);
    }
    try {
        const std::string trainPath = "/tmp/cwb-distill-train.txt", evalPath = "/tmp/cwb-distill-eval.txt";
        split(readTextFile(argv[2]), trainDocs, trainPath, evalPath);
        auto base = loadModel(argv[1]);
        std::vector<TokenId> evalTokens = base->tokenizer->encode(readTextFile(evalPath), true);
        PerplexityParams pp;
        pp.ctx = ctx;
        CalibrationSpec calib;   // only prune.layers' block influence uses it
        calib.textPath = trainPath;
        calib.samples = 64;
        calib.seqLen = 128;
        char kd[512];
        std::snprintf(kd, sizeof kd,
                      R"({"method":"distill.kd","params":{"steps":%lld,"lr":%g,"warmup":20,"batch_size":8,"seq_len":128,"seed":0,"eval_every":0,"device":"cpu",%s}})",
                      static_cast<long long>(steps), lr, "%s");
        const std::pair<const char*, std::string> sources[] = {
            {"text", "\"data\":\"" + trainPath + "\""},
            {"teacher-generated", R"("source":"teacher","generated":256)"},
        };
        Transformer baseRuntime(*base);
        std::vector<Measured> rows;
        for (const Student& s : kStudents) {
            CompressionResult before = compressModel(*base, Recipe::fromJson(nlohmann::json::parse(std::string(R"({"steps":[)") + s.compress + "]}"), s.label), calib);
            Transformer beforeRuntime(*before.model);
            DivergenceResult beforeD = compareModels(baseRuntime, beforeRuntime, evalTokens, base->tokenizer->bos(), pp);
            for (const auto& [dataLabel, dataParams] : sources) {
                std::fprintf(stderr, "%s, %s data\n", s.label, dataLabel);
                char step[1024];
                std::snprintf(step, sizeof step, kd, (dataParams + s.kdParams).c_str());
                const std::string recipe = std::string(R"({"steps":[)") + s.compress + "," + step + "]}";
                Measured m;
                m.student = s.label;
                m.data = dataLabel;
                m.before = beforeD;
                CallbackFeedback feedback;
                feedback.metricsCallback = [&](const std::string&, const std::map<std::string, double>& v) { m.tokensPerSecond = v.at("tokens_per_second"); };
                auto t0 = std::chrono::steady_clock::now();
                CompressionResult after = compressModel(*base, Recipe::fromJson(nlohmann::json::parse(recipe), s.label), calib, &feedback);
                m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                for (const auto& step : after.steps)
                    for (const auto& n : step.notes) m.notes.push_back(step.method + ": " + n);
                Transformer afterRuntime(*after.model);
                m.after = compareModels(baseRuntime, afterRuntime, evalTokens, base->tokenizer->bos(), pp);
                rows.push_back(std::move(m));
            }
        }
        std::ostringstream out;
        const DivergenceResult& any = rows.front().before;
        out << "## Knowledge distillation\n\n"
            << "Generated by `bench/bench_distillation` (cwb " << versionString() << ", LibTorch " << torchVersionString() << ", CPU) — do not edit by hand; rerun it:\n\n```\n"
            << "bench_distillation " << argv[1] << " " << argv[2] << " " << argv[3] << " --train-docs " << trainDocs << " --steps " << steps
            << " --lr " << lr << " --ctx " << ctx << "\n```\n\n"
            << "- Teacher: the base model `" << argv[1] << "` (" << base->spec.layers << " blocks, " << base->parameterCount() << " parameters).\n"
            << "- Students: the compressed variant made by the first recipe step; `distill.kd` then trains it for " << steps
            << " AdamW steps (lr " << lr << ", 20 warmup, cosine, batch 8 × 128 tokens, T = 4, α = 0.7, seed 0) on the CPU. "
            << "Pruned zeros stay zero; the 4-layer student drops the block of least influence (1 − cos(in, out)); the int3 "
               "students train on their grid (QAT; weights rounded to zero stay there), with the RTN scales fixed or trained "
               "too (`train_scales`, LSQ).\n"
            << "- Text data: the first " << trainDocs << " documents of the TinyStories sample. Teacher-generated data: 256 sequences of 128 tokens "
            << "sampled from the teacher (temperature 1, seed 0), no text at all.\n"
            << "- Evaluation: the remaining documents (disjoint from the training text), llama.cpp's perplexity method with ctx " << ctx << ": "
            << any.base.chunks << " chunks, " << any.base.tokensScored << " tokens scored. Base PPL " << any.base.perplexity << " ± " << any.base.error
            << ". KL is KL(base ‖ student) per scored token in nats; top-1 how often both argmaxes agree.\n"
            << "- Gap closed = 1 − (PPL after − base PPL) / (PPL before − base PPL). Train tok/s counts training tokens per second of optimizer steps "
            << "(teacher and student forward, backward, update); KL closed = 1 − KL after / KL before; time is the whole recipe (data, pruning, training).\n\n"
            << "| student | data | PPL before | PPL after | gap closed | KL before | KL after | KL closed | top-1 before | top-1 after | train tok/s | time |\n"
            << "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        char line[512];
        for (const auto& m : rows) {
            std::snprintf(line, sizeof line, "| %s | %s | %.4f | %.4f | %.0f%% | %.4f | %.4f | %.0f%% | %.2f%% | %.2f%% | %.0f | %.1f s |\n", m.student.c_str(),
                          m.data.c_str(), m.before.variant.perplexity, m.after.variant.perplexity, 100 * gapClosed(m), m.before.klMean,
                          m.after.klMean, 100 * (1 - m.after.klMean / m.before.klMean), 100 * m.before.top1Agreement, 100 * m.after.top1Agreement, m.tokensPerSecond, m.seconds);
            out << line;
        }
        out << "\n### Notes the steps reported\n\n";
        for (const auto& m : rows)
            for (const auto& n : m.notes) out << "- " << m.student << ", " << m.data << ": " << n << "\n";
        bench::writeResultsSection(argv[3], "distillation", out.str());
        std::fprintf(stderr, "wrote the distillation section of %s\n", argv[3]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    return 0;
}
