// Writes the "compression" section of docs/results.md: every compression method of the core on one model, evaluated against the base with
// llama.cpp's perplexity method, KL divergence and top-1 agreement. Run by hand:
//   bench_compression_results MODEL STORIES_TEXT OUT.md [--ctx 256] [--calib-docs 30] [--samples 128] [--seq-len 256]
// STORIES_TEXT holds documents separated by <|endoftext|>; the first --calib-docs documents calibrate, the rest
// evaluate, so calibration and evaluation text are disjoint.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/compress/pipeline.h"
#include "core/eval/divergence.h"
#include "core/io/model_format.h"
#include "core/model/compressed_linear.h"
#include "core/model/model_info.h"
#include "core/runtime/transformer.h"
#include "core/version.h"
#include "results_document.h"
#include "stories_split.h"

using namespace cwb;

namespace {

struct Row {
    const char* label;
    const char* recipe;
};

// The rows the compression issue asks for, in its order.
const Row kRows[] = {
    {"rtn w8 per-channel", R"({"steps":[{"method":"quantize.rtn","params":{"bits":8,"granularity":"channel"}}]})"},
    {"rtn w4 g32 sym", R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32}}]})"},
    {"rtn w4 g32 asym", R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32,"scheme":"asym"}}]})"},
    {"awq w4 g32", R"({"steps":[{"method":"quantize.awq","params":{"bits":4,"group_size":32}}]})"},
    {"gptq w4 g32", R"({"steps":[{"method":"quantize.gptq","params":{"bits":4,"group_size":32}}]})"},
    {"gptq w4 g32 act_order", R"({"steps":[{"method":"quantize.gptq","params":{"bits":4,"group_size":32,"act_order":true}}]})"},
    {"rtn w3 g32 sym", R"({"steps":[{"method":"quantize.rtn","params":{"bits":3,"group_size":32}}]})"},
    {"rtn w3 g32 asym", R"({"steps":[{"method":"quantize.rtn","params":{"bits":3,"group_size":32,"scheme":"asym"}}]})"},
    {"awq w3 g32", R"({"steps":[{"method":"quantize.awq","params":{"bits":3,"group_size":32}}]})"},
    {"gptq w3 g32", R"({"steps":[{"method":"quantize.gptq","params":{"bits":3,"group_size":32}}]})"},
    {"smoothquant w8a8 (alpha 0.5)", R"({"steps":[{"method":"quantize.smoothquant","params":{"alpha":0.5}}]})"},
    {"fp8 e4m3 per-channel", R"({"steps":[{"method":"quantize.fp8"}]})"},
    {"fp8 e4m3 + dynamic fp8 activations", R"({"steps":[{"method":"quantize.fp8","params":{"activations":"dynamic"}}]})"},
    {"magnitude 50%", R"({"steps":[{"method":"prune.magnitude","params":{"sparsity":0.5}}]})"},
    {"wanda 50%", R"({"steps":[{"method":"prune.wanda","params":{"sparsity":0.5}}]})"},
    {"sparsegpt 50%", R"({"steps":[{"method":"prune.sparsegpt","params":{"sparsity":0.5}}]})"},
    {"2:4 magnitude", R"({"steps":[{"method":"prune.nm","params":{"score":"magnitude"}}]})"},
    {"2:4 wanda", R"({"steps":[{"method":"prune.nm","params":{"score":"wanda"}}]})"},
    {"2:4 sparsegpt", R"({"steps":[{"method":"prune.nm","params":{"score":"sparsegpt"}}]})"},
    {"heads 25% (whole kv groups)", R"({"steps":[{"method":"prune.heads","params":{"ratio":0.25,"unit":"kv_group"}}]})"},
    {"channels 25%", R"({"steps":[{"method":"prune.channels","params":{"ratio":0.25}}]})"},
    {"layers: drop 1 block", R"({"steps":[{"method":"prune.layers","params":{"count":1}}]})"},
};

struct Measured {
    std::string label, recipe;
    double linearBytes = 0, bitsPerWeight = 0, seconds = 0, reconstruction = -1;
    DivergenceResult d;
    std::vector<std::string> notes;
};

double linearBytes(const Model& m, double* parameters) {
    double bytes = 0;
    *parameters = 0;
    for (const auto& layer : m.linearLayers()) {
        const TensorRecord& r = m.tensor(layer + ".weight");
        auto c = m.compressed(layer);
        bytes += c ? double(c->storageBytes()) : double(r.bytes);
        *parameters += double(r.elementCount());
    }
    return bytes;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s MODEL STORIES_TEXT OUT.md [--ctx N] [--calib-docs N] [--samples N] [--seq-len N]\n", argv[0]);
        return 2;
    }
    int64_t ctx = 256, samples = 128, seqLen = 256;
    int calibDocs = 30;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--ctx")) ctx = std::atoll(argv[i + 1]);
        if (!std::strcmp(argv[i], "--calib-docs")) calibDocs = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--samples")) samples = std::atoll(argv[i + 1]);
        if (!std::strcmp(argv[i], "--seq-len")) seqLen = std::atoll(argv[i + 1]);
    }
    try {
        const std::string calibPath = "/tmp/cwb-results-calib.txt", evalPath = "/tmp/cwb-results-eval.txt";
        const auto [calibText, evalText] = bench::splitStories(readTextFile(argv[2]), calibDocs);
        std::ofstream(calibPath) << calibText;
        std::ofstream(evalPath) << evalText;
        auto base = loadModel(argv[1]);
        std::vector<TokenId> evalTokens = base->tokenizer->encode(readTextFile(evalPath), true);
        PerplexityParams pp;
        pp.ctx = ctx;
        CalibrationSpec calib;
        calib.textPath = calibPath;
        calib.samples = samples;
        calib.seqLen = seqLen;
        std::vector<Measured> rows;
        double baseParams = 0;
        const double baseLinear = linearBytes(*base, &baseParams);
        for (const Row& row : kRows) {
            std::fprintf(stderr, "%s\n", row.label);
            Measured m;
            m.label = row.label;
            m.recipe = row.recipe;
            auto t0 = std::chrono::steady_clock::now();
            CompressionResult r = compressModel(*base, Recipe::fromJson(nlohmann::json::parse(row.recipe), row.label), calib);
            m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            double params = 0;
            m.linearBytes = linearBytes(*r.model, &params);
            m.bitsPerWeight = 8.0 * m.linearBytes / baseParams;
            for (const auto& s : r.steps) m.notes.insert(m.notes.end(), s.notes.begin(), s.notes.end());
            if (!r.steps.empty() && !r.steps.back().reconstructionError.empty()) {
                double sum = 0;
                for (const auto& [layer, e] : r.steps.back().reconstructionError) sum += e;
                m.reconstruction = sum / double(r.steps.back().reconstructionError.size());
            }
            Transformer a(*base), b(*r.model);
            m.d = compareModels(a, b, evalTokens, base->tokenizer->bos(), pp);
            rows.push_back(std::move(m));
        }
        std::ostringstream out;
        const DivergenceResult& any = rows.front().d;
        out << "## Compression methods\n\n"
            << "Generated by `bench/bench_compression_results` (cwb " << versionString() << ", LibTorch " << torchVersionString()
            << ", CPU) — do not edit by hand; rerun it:\n\n```\nbench_compression_results " << argv[1] << " " << argv[2] << " " << argv[3]
            << " --ctx " << ctx << " --calib-docs " << calibDocs << " --samples " << samples << " --seq-len " << seqLen << "\n```\n\n"
            << "- Model: `" << argv[1] << "` (" << base->parameterCount() << " parameters; its " << base->linearLayers().size()
            << " block linear layers hold " << static_cast<long long>(baseParams) << " of them).\n"
            << "- Calibration: the first " << calibDocs << " documents of the TinyStories sample, " << samples << " windows of up to "
            << seqLen << " tokens drawn with seed 0.\n"
            << "- Evaluation: the remaining documents (disjoint from calibration), llama.cpp's perplexity method with ctx " << ctx
            << ": " << any.base.chunks << " chunks, " << any.base.tokensScored << " tokens scored. Base PPL "
            << any.base.perplexity << " ± " << any.base.error << ".\n"
            << "- KL is KL(base ‖ variant) per scored token in nats; top-1 is how often both models' most likely next token agree.\n"
            << "- Linear size counts the block linear layers as stored (packed integers and their scales/zeros; pruned layers stay dense f32 "
            << "with zeros, so pruning shows no size gain here); bits/weight = 8 × that size / their parameter count of the base.\n"
            << "- Recon err is the mean over layers of ‖WX − ŴX‖² / ‖WX‖², X each layer's inputs on the calibration windows "
            << "(structured pruning changes shapes and has none).\n\n"
            << "| variant | linear size | bits/weight | PPL ± err | ΔPPL | KL mean | KL p99 | top-1 | recon err | time |\n"
            << "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        char line[512];
        std::snprintf(line, sizeof line, "| base (f32) | %s | %.2f | %.4f ± %.4f | — | — | — | — | — | — |\n",
                      humanBytes(baseLinear).c_str(), 8 * baseLinear / baseParams, any.base.perplexity, any.base.error);
        out << line;
        for (const auto& m : rows) {
            char recon[32] = "—";
            if (m.reconstruction >= 0) std::snprintf(recon, sizeof recon, "%.2e", m.reconstruction);
            std::snprintf(line, sizeof line, "| %s | %s | %.2f | %.4f ± %.4f | %+.4f | %.5f | %.5f | %.2f%% | %s | %.1f s |\n", m.label.c_str(),
                          humanBytes(m.linearBytes).c_str(), m.bitsPerWeight, m.d.variant.perplexity, m.d.variant.error,
                          m.d.variant.perplexity - m.d.base.perplexity, m.d.klMean, m.d.klP99, 100 * m.d.top1Agreement, recon, m.seconds);
            out << line;
        }
        auto ppl = [&](const char* label) {
            for (const auto& m : rows)
                if (m.label == label) return m.d.variant.perplexity;
            return 0.0;
        };
        struct Check { const char* better; const char* worse; };
        const Check checks[] = {{"gptq w4 g32", "rtn w4 g32 sym"}, {"awq w4 g32", "rtn w4 g32 asym"},
                                {"gptq w3 g32", "rtn w3 g32 sym"}, {"awq w3 g32", "rtn w3 g32 asym"},
                                {"wanda 50%", "magnitude 50%"},    {"sparsegpt 50%", "magnitude 50%"},
                                {"2:4 wanda", "2:4 magnitude"},    {"2:4 sparsegpt", "2:4 magnitude"}};
        out << "\n### The literature's ordering\n\n| expected | PPL | holds here |\n| --- | --- | --- |\n";
        for (const auto& c : checks) {
            std::snprintf(line, sizeof line, "| %s beats %s | %.4f vs %.4f | %s |\n", c.better, c.worse, ppl(c.better), ppl(c.worse),
                          ppl(c.better) < ppl(c.worse) ? "yes" : "**no**");
            out << line;
        }
        out << "\n### Notes the methods reported\n\n";
        for (const auto& m : rows)
            for (const auto& n : m.notes) out << "- " << m.label << ": " << n << "\n";
        out << "\nAWQ and AWQ-style asymmetric grids are compared with the asymmetric RTN row, GPTQ (symmetric by default) with the symmetric one.\n";
        bench::writeResultsSection(argv[3], "compression", out.str());
        std::fprintf(stderr, "wrote the compression section of %s\n", argv[3]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    return 0;
}
