// Writes the "export" section of docs/results.md: stories260K and a synthetic Llama whose every dimension is a
// multiple of 256 exported in each GGUF type and (where the shapes allow) the GPTQ and AWQ layouts, each file
// read back by cwb's own loaders and evaluated with llama.cpp's perplexity method. Run by hand:
//   bench_export_results MODEL STORIES_TEXT OUT.md [--files DIR] [--ctx 256] [--calib-docs 30]
// --files keeps every exported file (for checking them with llama.cpp and transformers).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/compress/pipeline.h"
#include "core/eval/perplexity.h"
#include "core/export/export_format.h"
#include "core/io/model_format.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/version.h"
#include "results_document.h"
#include "stories_split.h"

using namespace cwb;

namespace {

const char* kGgufTypes[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_K", "q5_K", "q6_K"};

// Random weights of Llama shapes with every row length a multiple of 256, and the base model's vocabulary.
std::unique_ptr<Model> syntheticLlama(const Model& base) {
    auto m = base.clone();
    for (const auto& name : std::vector<std::string>(m->tensorNames())) m->removeTensor(name);
    ArchSpec& s = m->spec;
    s.layers = 2;
    s.hidden = 256;
    s.heads = 4;
    s.kvHeads = 2;
    s.headDim = 64;
    s.ffn = 768;
    s.tiedEmbeddings = false;
    s.layerShapes.clear();
    at::manual_seed(1234);
    auto add = [&](const std::string& name, std::vector<int64_t> shape) {
        at::Tensor t = shape.size() == 1 ? at::ones(shape) + 0.1 * at::randn(shape) : at::randn(shape) / std::sqrt(double(shape[1]));
        m->replaceTensor(name, t);
    };
    add("model.embed_tokens.weight", {s.vocab, s.hidden});
    for (int64_t l = 0; l < s.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {s.hidden});
        add(p + "self_attn.q_proj.weight", {s.heads * s.headDim, s.hidden});
        add(p + "self_attn.k_proj.weight", {s.kvHeads * s.headDim, s.hidden});
        add(p + "self_attn.v_proj.weight", {s.kvHeads * s.headDim, s.hidden});
        add(p + "self_attn.o_proj.weight", {s.hidden, s.heads * s.headDim});
        add(p + "post_attention_layernorm.weight", {s.hidden});
        add(p + "mlp.gate_proj.weight", {s.ffn, s.hidden});
        add(p + "mlp.up_proj.weight", {s.ffn, s.hidden});
        add(p + "mlp.down_proj.weight", {s.hidden, s.ffn});
    }
    add("model.norm.weight", {s.hidden});
    add("lm_head.weight", {s.vocab, s.hidden});
    m->validateTensors();
    m->metadata["name"] = "cwb synthetic llama 256";
    return m;
}

struct Row {
    std::string what, file, notes;
    uint64_t bytes = 0;
    PerplexityResult ppl;
    bool refused = false;
};

std::string fmt(const char* f, double a, double b = 0) {
    char buf[128];
    std::snprintf(buf, sizeof buf, f, a, b);
    return buf;
}

class Runner {
public:
    Runner(std::string dir, const std::vector<TokenId>& tokens, PerplexityParams pp) : mDir(std::move(dir)), mTokens(tokens), mParams(pp) {}

    Row exportAndEvaluate(const Model& model, const std::string& label, const std::string& format, const std::string& type,
                          const std::string& fileName, bool packHead = false) {
        Row row;
        row.what = label;
        row.file = mDir + "/" + fileName;
        ExportOptions options;
        options.tensorType = type;
        options.packHead = packHead;
        try {
            const ExportReport report = exportModel(model, format, row.file, options);
            row.bytes = report.bytes;
            int fallbacks = 0, requantized = 0;
            for (const auto& n : report.notes) {
                fallbacks += n.find("do not fit") != std::string::npos;
                requantized += n.find("re-quantized") != std::string::npos;
            }
            if (fallbacks) row.notes += std::to_string(fallbacks) + " tensors fell back to a type that fits their rows; ";
            if (requantized) row.notes += std::to_string(requantized) + " quantized layers re-quantized; ";
            auto back = loadModel(row.file);
            if (!back->tokenizer) back->tokenizer = model.tokenizer;   // HF folders from a GGUF source carry none
            Transformer runtime(*back);
            if (format != "gguf") {
                // Logits of ids 1..32 as cwb computes them from the export, for comparison with transformers.
                const at::Tensor ids = at::arange(1, 33, at::kLong).unsqueeze(0);
                const at::Tensor logits = runtime.forward(ids).to(at::kFloat).contiguous();
                std::ofstream(row.file + ".logits.f32", std::ios::binary)
                    .write(reinterpret_cast<const char*>(logits.data_ptr<float>()), std::streamsize(logits.numel() * 4));
            }
            row.ppl = evaluatePerplexity(runtime, mTokens, model.tokenizer->bos(), mParams);
        } catch (const Error& e) {
            row.refused = true;
            row.notes = e.what();
            const auto colon = row.notes.find(": cannot export");
            if (colon != std::string::npos) row.notes = row.notes.substr(colon + 2);
        }
        std::fprintf(stderr, "%-40s %s\n", label.c_str(), row.refused ? "refused" : fmt("%.4f", row.ppl.perplexity).c_str());
        return row;
    }

    double reference(const Model& model) {
        Transformer runtime(model);
        return evaluatePerplexity(runtime, mTokens, model.tokenizer->bos(), mParams).perplexity;
    }

private:
    std::string mDir;
    const std::vector<TokenId>& mTokens;
    PerplexityParams mParams;
};

std::string table(const std::vector<Row>& rows) {
    std::ostringstream out;
    out << "| export | tensor bytes | PPL ± err (read back by cwb) | notes |\n| --- | ---: | ---: | --- |\n";
    for (const auto& r : rows)
        out << "| " << r.what << " | " << (r.refused ? "—" : std::to_string(r.bytes)) << " | "
            << (r.refused ? "refused" : fmt("%.4f ± %.4f", r.ppl.perplexity, r.ppl.error)) << " | " << r.notes << " |\n";
    return out.str();
}

std::unique_ptr<Model> compress(const Model& base, const char* recipe, const at::Tensor& windows) {
    return std::move(compressModel(base, Recipe::fromJson(nlohmann::json::parse(recipe), "bench"), windows).model);
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s MODEL STORIES_TEXT OUT.md [--files DIR] [--ctx N] [--calib-docs N]\n", argv[0]);
        return 2;
    }
    std::string dir = "/tmp/cwb-export-results";
    int64_t ctx = 256;
    int calibDocs = 30;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--files")) dir = argv[i + 1];
        if (!std::strcmp(argv[i], "--ctx")) ctx = std::atoll(argv[i + 1]);
        if (!std::strcmp(argv[i], "--calib-docs")) calibDocs = std::atoi(argv[i + 1]);
    }
    try {
        std::filesystem::create_directories(dir);
        const auto [calibText, evalText] = bench::splitStories(readTextFile(argv[2]), calibDocs);
        auto base = loadModel(argv[1]);
        const std::vector<TokenId> evalTokens = base->tokenizer->encode(evalText, true);
        std::ofstream(dir + "/eval.txt") << evalText;   // the same text for llama.cpp's perplexity tool
        CalibrationSpec calibSpec;
        calibSpec.samples = 64;
        calibSpec.seqLen = 256;
        const at::Tensor calib = drawCalibration(base->tokenizer->encode(calibText, true), base->tokenizer->bos(), calibSpec, base->spec.context);
        PerplexityParams pp;
        pp.ctx = ctx;
        Runner run(dir, evalTokens, pp);

        std::vector<Row> stories;
        const double storiesBase = run.reference(*base);
        for (const char* t : kGgufTypes)
            stories.push_back(run.exportAndEvaluate(*base, std::string("gguf ") + t, "gguf", t, std::string("stories260K-") + t + ".gguf"));
        auto rtn = compress(*base, R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32}}]})", calib);
        const double rtnPpl = run.reference(*rtn);
        stories.push_back(run.exportAndEvaluate(*rtn, "rtn w4 g32 sym → gguf (exact q4_0)", "gguf", "f16", "stories260K-rtn-w4g32.gguf"));
        stories.push_back(run.exportAndEvaluate(*rtn, "rtn w4 g32 sym → gptq", "gptq", "", "stories260K-rtn-w4g32-gptq"));
        exportModel(*rtn, "hf", dir + "/stories260K-rtn-w4g32-gptq-dense", ExportOptions{"f32"});   // for check_exports.py
        stories.push_back(run.exportAndEvaluate(*base, "dense → hf f16", "hf", "f16", "stories260K-hf-f16"));
        // compressed-tensors (llm-compressor's format, which vLLM loads): the MLP's 172 inputs refuse groups of 32.
        stories.push_back(run.exportAndEvaluate(*rtn, "rtn w4 g32 sym → compressed-tensors", "compressed-tensors", "f32", "stories260K-rtn-w4g32-ct"));
        struct CtVariant { const char* label; const char* recipe; const char* file; };
        const CtVariant storiesCt[] = {
            {"rtn w4 g4 asym → compressed-tensors", R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":4,"scheme":"asym"}}]})", "stories260K-rtn-w4g4-asym-ct"},
            {"rtn w8 per channel → compressed-tensors", R"({"steps":[{"method":"quantize.rtn","params":{"bits":8,"granularity":"channel"}}]})", "stories260K-rtn-w8-ct"},
            {"fp8 per channel, dynamic activations → compressed-tensors", R"({"steps":[{"method":"quantize.fp8","params":{"activations":"dynamic"}}]})", "stories260K-fp8-dynamic-ct"},
            {"smoothquant folded (w8a8) → compressed-tensors", R"({"steps":[{"method":"quantize.smoothquant","params":{"fold":true}}]})", "stories260K-smoothquant-folded-ct"},
        };
        for (const auto& v : storiesCt) {
            auto variant = compress(*base, v.recipe, calib);
            stories.push_back(run.exportAndEvaluate(*variant, v.label, "compressed-tensors", "f32", v.file));
            exportModel(*variant, "hf", dir + "/" + v.file + "-dense", ExportOptions{"f32"});   // for check_exports.py
        }

        auto synthetic = syntheticLlama(*base);
        std::vector<Row> synth;
        const double synthBase = run.reference(*synthetic);
        for (const char* t : kGgufTypes)
            synth.push_back(run.exportAndEvaluate(*synthetic, std::string("gguf ") + t, "gguf", t, std::string("synthetic256-") + t + ".gguf"));
        synth.push_back(run.exportAndEvaluate(*synthetic, "dense → hf f32", "hf", "f32", "synthetic256-hf-f32"));
        struct Packed { const char* label; const char* recipe; const char* format; const char* file; bool packHead = false; };
        const Packed packed[] = {
            {"rtn w4 g128 sym → gptq", R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":128}}]})", "gptq", "synthetic256-rtn-w4g128-gptq"},
            {"gptq w4 g128 act_order → gptq", R"({"steps":[{"method":"quantize.gptq","params":{"bits":4,"group_size":128,"act_order":true}}]})", "gptq", "synthetic256-gptq-w4g128-actorder"},
            {"gptq w8 g128 → gptq", R"({"steps":[{"method":"quantize.gptq","params":{"bits":8,"group_size":128}}]})", "gptq", "synthetic256-gptq-w8g128"},
            {"gptq w3 g128 → gptq", R"({"steps":[{"method":"quantize.gptq","params":{"bits":3,"group_size":128}}]})", "gptq", "synthetic256-gptq-w3g128"},
            {"awq w4 g128 folded → awq", R"({"steps":[{"method":"quantize.awq","params":{"bits":4,"group_size":128,"fold":true}}]})", "awq", "synthetic256-awq-w4g128-folded"},
            {"rtn w4 g128 asym → awq", R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":128,"scheme":"asym"}}]})", "awq", "synthetic256-rtn-w4g128-awq"},
            {"rtn w4 g32 sym → gguf (exact q4_0)", R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32}}]})", "gguf", "synthetic256-rtn-w4g32.gguf"},
            {"gptq w4 g128 → compressed-tensors", R"({"steps":[{"method":"quantize.gptq","params":{"bits":4,"group_size":128}}]})", "compressed-tensors", "synthetic256-gptq-w4g128-ct"},
            {"rtn w4 g128 asym → compressed-tensors", R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":128,"scheme":"asym"}}]})", "compressed-tensors", "synthetic256-rtn-w4g128-asym-ct"},
            {"fp8 per tensor, weight only → compressed-tensors", R"({"steps":[{"method":"quantize.fp8","params":{"scale":"tensor"}}]})", "compressed-tensors", "synthetic256-fp8-tensor-ct"},
            {"rtn w4 g128 sym, head too → gptq --pack-head", R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":128,"head":"also"}}]})", "gptq", "synthetic256-rtn-w4g128-head-gptq", true},
        };
        std::vector<std::pair<std::string, double>> variantPpl;
        for (const auto& p : packed) {
            auto variant = compress(*synthetic, p.recipe, calib);
            variantPpl.push_back({p.label, run.reference(*variant)});
            synth.push_back(run.exportAndEvaluate(*variant, p.label, p.format, std::strcmp(p.format, "gguf") ? "f32" : "", p.file, p.packHead));
            // The same variant dense, so check_exports.py can compare its own unpacking of the layout with it.
            if (std::strcmp(p.format, "gguf")) exportModel(*variant, "hf", dir + "/" + p.file + "-dense", ExportOptions{"f32"});
        }

        std::ostringstream out;
        out << "## Export\n\nGenerated by `bench/bench_export_results` (cwb " << versionString() << ", LibTorch " << torchVersionString()
            << ", CPU) — do not edit by hand; rerun it:\n\n```\nbench_export_results " << argv[1] << " " << argv[2] << " " << argv[3]
            << " --files " << dir << " --ctx " << ctx << " --calib-docs " << calibDocs << "\n```\n\n"
            << "Each file is written by `cwb export`'s code, read back by cwb's own loaders and evaluated like `cwb eval` "
            << "(llama.cpp's perplexity method, ctx " << ctx << ", the TinyStories documents after the first " << calibDocs
            << ", " << chunkCount(int64_t(evalTokens.size()), pp) << " chunks). Quantized GGUF types re-quantize dense tensors with "
            << "cwb's ggml encoders; 1-D tensors stay f32.\n\n"
            << "### stories260K (trained; rows of 64 and 172)\n\nIn memory: base PPL " << fmt("%.4f", storiesBase)
            << ", rtn w4 g32 sym variant " << fmt("%.4f", rtnPpl) << ". K-quants need rows that are multiples of 256 and the legacy "
            << "types multiples of 32, so most of this model's tensors fall back (to the smallest type that fits and holds at least as many bits).\n\n"
            << table(stories)
            << "\n### Synthetic Llama, every dimension a multiple of 256 (random weights)\n\n2 layers, hidden 256, 4 heads / 2 kv heads of 64, "
            << "MLP 768, the stories260K vocabulary (512). Random weights make the perplexity itself meaningless (it is near the vocabulary "
            << "size); what matters is how far each export moves it. In memory: base PPL " << fmt("%.4f", synthBase);
        for (const auto& [label, ppl] : variantPpl) out << "; " << label.substr(0, label.find(" →")) << " " << fmt("%.4f", ppl);
        out << ".\n\n" << table(synth)
            << "\nThe GPTQ, AWQ and compressed-tensors rows keep their unquantized tensors (embeddings, norms, head) in f32 here (`--type f32`; the default is "
            << "f16): they reload to exactly the integers, scales and zeros of the variant (tests/core/test_export, test_compressed_tensors), so their perplexity "
            << "equals the in-memory variant's above. The GGUF rows write embeddings and head in f16 (the default), hence their small "
            << "differences from the in-memory figures.\n";
        bench::writeResultsSection(argv[3], "export", out.str());
        std::fprintf(stderr, "wrote the export section of %s; files in %s\n", argv[3], dir.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    return 0;
}
