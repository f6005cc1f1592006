#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/cli/arguments.h"
#include "app/cli/commands.h"
#include "core/compress/method.h"
#include "core/compress/pipeline.h"
#include "core/eval/divergence.h"
#include "core/eval/perplexity.h"
#include "core/io/model_format.h"
#include "core/model/compressed_linear.h"
#include "core/model/model_info.h"
#include "core/project/file_hash.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "core/util/json_text.h"

namespace cwb::cli {

namespace {

// Progress lines on stderr, one per 10 % and one per log line.
void reportToStderr(CallbackFeedback& f, bool quiet, const char* what) {
    if (quiet) return;
    showProgress(f, what);
    f.logCallback = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
}

} // namespace

int runMethods(const std::vector<std::string>& args) {
    Arguments a(args, {}, {"json"});
    if (!a.positional().empty()) throw Error("methods takes no arguments, got '" + a.positional().front() + "'");
    nlohmann::json out = nlohmann::json::array();
    for (const auto* m : MethodRegistry::instance().methods()) {
        if (a.flag("json")) {
            out.push_back({{"id", m->id()}, {"version", m->version()}, {"name", m->displayName()},
                           {"summary", m->summary()}, {"params", describeParams(m->params())}});
            continue;
        }
        std::printf("%-22s v%d  %s: %s\n", m->id().c_str(), m->version(), m->displayName().c_str(), m->summary().c_str());
        for (const auto& p : m->params()) {
            std::string range = rangeText(p);
            if (p.type == ParamType::Choice)
                for (const auto& c : p.choices) range += (range.empty() ? " {" : "|") + c;
            if (p.type == ParamType::Choice) range += "}";
            std::printf("    %-16s %s%s = %s  %s\n", p.name.c_str(), paramTypeName(p.type), range.c_str(),
                        p.defaultValue.dump().c_str(), p.help.c_str());
        }
    }
    if (a.flag("json")) std::cout << jsonText(out) << "\n";
    return 0;
}

// The metrics of one stage: size always; PPL, KL and top-1 against the base when an evaluation text is given.
nlohmann::json stageMetrics(const Model& base, const Model& model, const std::vector<TokenId>* tokens, const PerplexityParams& p,
                            Feedback* feedback) {
    nlohmann::json m = {{"bytes", model.storageBytes()}, {"parameters", model.parameterCount()}};
    if (!tokens) return m;
    Transformer baseRuntime(base, sharingMemory(RuntimeOptions{}, 2)), runtime(model, sharingMemory(RuntimeOptions{}, 2));
    DivergenceResult d = compareModels(baseRuntime, runtime, *tokens, base.tokenizer->textBos(), p, feedback);
    m["ppl"] = d.variant.perplexity;
    m["ppl_err"] = d.variant.error;
    m["kl"] = d.klMean;
    m["kl_p99"] = d.klP99;
    m["top1"] = d.top1Agreement;
    m["tokens_scored"] = d.variant.tokensScored;
    const std::string warning = perplexityWarning(d.variant, model.spec.vocab);   // worse than chance: broken weights
    m["warnings"] = warning.empty() ? std::vector<std::string>{} : std::vector<std::string>{warning};
    return m;
}

std::string cell(const nlohmann::json& m, const char* key, const char* format) {
    if (!m.contains(key)) return "-";
    char buf[64];
    std::snprintf(buf, sizeof buf, format, m[key].get<double>());
    return buf;
}

int runCompress(const std::vector<std::string>& args) {
    Arguments a(args, {"recipe", "calib", "samples", "seq-len", "seed", "eval", "ctx", "chunks", "threads", "tokenizer", "out", "device", "calib-dtype", "scratch"},
                {"json", "quiet"});
    applyThreads(a.integer("threads", 0));
    const std::string path = a.requirePositional("MODEL");
    if (!a.has("recipe")) throw Error("compress needs --recipe FILE (see `cwb methods` for the method ids)");
    Recipe recipe = Recipe::load(a.value("recipe"));
    const std::string badParams = recipeParamsProblem(recipe);   // a distillation's missing data file: before any work
    if (!badParams.empty()) throw Error(a.value("recipe"), badParams);
    if (a.has("out")) checkOutputFolder(a.value("out"));   // before the work; made only when its files are written
    if (std::none_of(recipe.steps.begin(), recipe.steps.end(), [](const RecipeStep& s) { return s.enabled; }))
        std::fprintf(stderr, "warning: %s has no enabled step: the output is the base model\n", a.value("recipe").c_str());
    if (!a.has("eval") && (a.has("ctx") || a.has("chunks")))
        std::fprintf(stderr, "warning: --ctx and --chunks set the evaluation of --eval FILE; without it they do nothing\n");
    if (!a.has("calib") && (a.has("samples") || a.has("seq-len") || a.has("seed")))
        std::fprintf(stderr, "warning: --samples, --seq-len and --seed draw the windows of --calib FILE; without it they do nothing\n");
    LoadOptions options;
    options.tokenizerPath = a.value("tokenizer");
    auto base = loadModel(path, options);
    applyScratch(a, *base, a.flag("quiet") || a.flag("json"));
    CalibrationSpec calib;
    calib.textPath = a.value("calib");
    calib.samples = a.integer("samples", 128);
    calib.seqLen = a.integer("seq-len", 512);
    calib.seed = a.unsignedInteger("seed", 0);
    calib.device = a.value("device", "auto");
    calib.forwardType = a.value("calib-dtype", "f32");
    resolveCalibrationCompute(calib);   // a bad --device or --calib-dtype fails before the model is evaluated
    // What would stop the compression fails now, not after the base's evaluation.
    if (recipeNeedsCalibration(recipe) && calib.textPath.empty())
        throw Error(a.value("recipe"), "a step needs calibration text; pass --calib FILE");
    if (!calib.textPath.empty() && recipeNeedsCalibration(recipe)) {   // missing, unreadable or empty: named now
        const std::string text = readTextFile(calib.textPath);
        if (text.find_first_not_of(" \t\r\n") == std::string::npos) throw Error(calib.textPath, "calibration text is empty");
    } else if (!calib.textPath.empty()) {
        readTextFile(calib.textPath);
    }
    const std::string noLayer = recipeLayersProblem(*base, recipe);
    if (!noLayer.empty()) throw Error(a.value("recipe"), noLayer);
    const bool quiet = a.flag("quiet") || a.flag("json");

    std::vector<TokenId> evalTokens;
    PerplexityParams p;
    if (a.has("eval")) {
        requireTokenizer(*base, path);
        evalTokens = base->tokenizer->encode(readTextFile(a.value("eval")), base->tokenizer->addBosByDefault());
        p.ctx = a.integer("ctx", std::min<int64_t>(512, base->spec.context));
        p.maxChunks = chunksOption(a);
        p.textPath = a.value("eval");
    }
    const std::vector<TokenId>* tokens = a.has("eval") ? &evalTokens : nullptr;
    CallbackFeedback evalFeedback;
    reportToStderr(evalFeedback, quiet, "  evaluate");
    if (!quiet && tokens) std::fprintf(stderr, "evaluating the base on %s\n", a.value("eval").c_str());
    nlohmann::json report = {{"model", std::filesystem::absolute(path).string()}, {"recipe", recipe.toJson()},
                             {"base", stageMetrics(*base, *base, tokens, p, &evalFeedback)}};
    if (tokens) report["evaluation"] = {{"text", a.value("eval")}, {"ctx", p.ctx}, {"chunks", chunkCount(int64_t(evalTokens.size()), p)}};
    nlohmann::json steps = nlohmann::json::array();
    CallbackFeedback feedback;
    reportToStderr(feedback, quiet, "  compress");
    CompressionResult result = compressModel(*base, recipe, calib, &feedback, [&](const StepReport& s, const Model& variant) {
        nlohmann::json step = {{"method", s.method}, {"version", s.version}, {"params", s.params}, {"layers", s.layers},
                               {"seconds", s.seconds}, {"notes", s.notes}};
        if (!s.reconstructionError.empty()) {
            double sum = 0, worst = 0;
            for (const auto& [layer, e] : s.reconstructionError) {
                sum += e;
                worst = std::max(worst, e);
            }
            step["reconstruction_error"] = {{"mean", sum / double(s.reconstructionError.size())}, {"max", worst},
                                            {"layers", s.reconstructionError}};
        }
        if (!quiet && tokens) std::fprintf(stderr, "evaluating after %s\n", s.method.c_str());
        step.update(stageMetrics(*base, variant, tokens, p, &evalFeedback));
        steps.push_back(step);
    });
    report["steps"] = steps;
    report["final"] = steps.empty() ? report["base"] : steps.back();
    for (const char* key : {"method", "version", "params", "layers", "seconds", "notes", "reconstruction_error"}) report["final"].erase(key);
    // Absolute paths, the text's hash, what was asked and where it ran: `cwb export --recipe` repeats the calibration
    // from this, from any folder, and says when it cannot.
    if (result.calibrationSamples)
        report["calibration"] = {{"file", std::filesystem::absolute(calib.textPath).string()}, {"text_hash", hashFile(calib.textPath)},
                                 {"samples", result.calibrationSamples}, {"samples_requested", calib.samples},
                                 {"seq_len", result.calibrationSeqLen}, {"seq_len_requested", calib.seqLen}, {"seed", calib.seed},
                                 {"device", resolveCalibrationCompute(calib).device.str()}, {"dtype", calib.forwardType},
                                 {"note", result.calibrationNote}};
    nlohmann::json layers = nlohmann::json::object();
    for (const auto& [name, linear] : result.model->compressedLayers())
        layers[name] = {{"form", linear->describe()}, {"bits_per_weight", linear->bitsPerWeight()}};
    report["compressed_layers"] = layers;

    if (a.has("out")) {
        const std::string dir = a.value("out");
        makeOutputFolder(dir);
        // The two belong together: when either cannot be written (a full disk), neither is left, not even an earlier run's.
        const std::string recipePath = dir + "/recipe.json", reportPath = dir + "/report.json";
        try {
            recipe.save(recipePath);
            writeFileAtomically(reportPath, jsonText(report) + "\n");
        } catch (const Error&) {
            std::error_code ec;
            std::filesystem::remove(recipePath, ec);
            std::filesystem::remove(reportPath, ec);
            throw;
        }
    }
    if (a.flag("json")) {
        std::cout << jsonText(report) << "\n";
        return 0;
    }
    std::printf("%-26s %12s %16s %9s %9s %8s %10s %8s\n", "stage", "size", "PPL", "+/-", "KL", "top-1", "recon err", "time");
    auto row = [&](const std::string& name, const nlohmann::json& m, const std::string& recon, const std::string& time) {
        std::printf("%-26s %12s %16s %9s %9s %8s %10s %8s\n", name.c_str(), humanBytes(m["bytes"].get<double>()).c_str(),
                    cell(m, "ppl", "%.4f").c_str(), cell(m, "ppl_err", "%.4f").c_str(), cell(m, "kl", "%.5f").c_str(),
                    cell(m, "top1", "%.4f").c_str(), recon.c_str(), time.c_str());
    };
    row("base", report["base"], "-", "-");
    for (const auto& w : report["base"].value("warnings", nlohmann::json::array())) std::printf("    warning: %s\n", w.get<std::string>().c_str());
    for (const auto& st : steps) {
        char time[32];
        std::snprintf(time, sizeof time, "%.2fs", st["seconds"].get<double>());
        row(st["method"].get<std::string>(), st, st.contains("reconstruction_error") ? cell(st["reconstruction_error"], "mean", "%.2e") : "-", time);
        for (const auto& n : st["notes"]) std::printf("    %s\n", n.get<std::string>().c_str());
        for (const auto& w : st.value("warnings", nlohmann::json::array())) std::printf("    warning: %s\n", w.get<std::string>().c_str());
    }
    if (!tokens) std::printf("(no --eval FILE: sizes only)\n");
    return 0;
}

} // namespace cwb::cli
