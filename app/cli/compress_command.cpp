#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/cli/arguments.h"
#include "app/cli/commands.h"
#include "core/compress/method.h"
#include "core/compress/pipeline.h"
#include "core/eval/divergence.h"
#include "core/io/model_format.h"
#include "core/model/compressed_linear.h"
#include "core/model/model_info.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb::cli {

namespace {

// Progress lines on stderr, one per 10 % and one per log line.
void reportToStderr(CallbackFeedback& f, bool quiet) {
    if (quiet) return;
    auto last = std::make_shared<int>(-1);
    f.progressCallback = [last](double p) {
        int percent = static_cast<int>(p * 100);
        if (percent / 10 != *last / 10) std::fprintf(stderr, "  %d%%\n", percent);
        *last = percent;
    };
    f.logCallback = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
}

} // namespace

int runMethods(const std::vector<std::string>& args) {
    Arguments a(args, {}, {"json"});
    nlohmann::json out = nlohmann::json::array();
    for (const auto* m : MethodRegistry::instance().methods()) {
        if (a.flag("json")) {
            out.push_back({{"id", m->id()}, {"version", m->version()}, {"name", m->displayName()},
                           {"summary", m->summary()}, {"params", describeParams(m->params())}});
            continue;
        }
        std::printf("%-22s v%d  %s: %s\n", m->id().c_str(), m->version(), m->displayName().c_str(), m->summary().c_str());
        for (const auto& p : m->params()) {
            std::string range;
            if (p.type == ParamType::Int || p.type == ParamType::Float)
                range = " [" + nlohmann::json(p.minimum).dump() + ", " + nlohmann::json(p.maximum).dump() + "]";
            if (p.type == ParamType::Choice)
                for (const auto& c : p.choices) range += (range.empty() ? " {" : "|") + c;
            if (p.type == ParamType::Choice) range += "}";
            std::printf("    %-16s %s%s = %s  %s\n", p.name.c_str(), paramTypeName(p.type), range.c_str(),
                        p.defaultValue.dump().c_str(), p.help.c_str());
        }
    }
    if (a.flag("json")) std::cout << out.dump(2) << "\n";
    return 0;
}

int runCompress(const std::vector<std::string>& args) {
    Arguments a(args, {"recipe", "calib", "samples", "seq-len", "seed", "eval", "ctx", "chunks", "threads", "tokenizer"},
                {"json", "quiet"});
    applyThreads(a.integer("threads", 0));
    const std::string path = a.requirePositional("MODEL");
    if (!a.has("recipe")) throw Error("compress needs --recipe FILE (see `cwb methods` for the method ids)");
    Recipe recipe = Recipe::load(a.value("recipe"));
    LoadOptions options;
    options.tokenizerPath = a.value("tokenizer");
    auto base = loadModel(path, options);
    CalibrationSpec calib;
    calib.textPath = a.value("calib");
    calib.samples = a.integer("samples", 128);
    calib.seqLen = a.integer("seq-len", 512);
    calib.seed = static_cast<uint64_t>(a.integer("seed", 0));
    const bool quiet = a.flag("quiet") || a.flag("json");
    CallbackFeedback feedback;
    reportToStderr(feedback, quiet);
    CompressionResult result = compressModel(*base, recipe, calib, &feedback);

    nlohmann::json report = {{"model", path}, {"recipe", recipe.toJson()},
                             {"base_bytes", base->storageBytes()}, {"variant_bytes", result.model->storageBytes()},
                             {"base_parameters", base->parameterCount()}, {"variant_parameters", result.model->parameterCount()}};
    if (result.calibrationSamples)
        report["calibration"] = {{"file", calib.textPath}, {"samples", result.calibrationSamples},
                                 {"seq_len", result.calibrationSeqLen}, {"seed", calib.seed}, {"note", result.calibrationNote}};
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : result.steps)
        steps.push_back({{"method", s.method}, {"version", s.version}, {"params", s.params}, {"layers", s.layers},
                         {"seconds", s.seconds}, {"notes", s.notes}});
    report["steps"] = steps;
    nlohmann::json layers = nlohmann::json::object();
    for (const auto& [name, linear] : result.model->compressedLayers())
        layers[name] = {{"form", linear->describe()}, {"bits_per_weight", linear->bitsPerWeight()}};
    report["compressed_layers"] = layers;

    if (a.has("eval")) {
        if (!base->tokenizer) throw Error(path, "has no tokenizer to evaluate with");
        std::vector<TokenId> tokens = base->tokenizer->encode(readTextFile(a.value("eval")), true);
        PerplexityParams p;
        p.ctx = a.integer("ctx", std::min<int64_t>(512, base->spec.context));
        p.maxChunks = a.integer("chunks", -1);
        Transformer baseRuntime(*base), variantRuntime(*result.model);
        if (!quiet) std::fprintf(stderr, "evaluating base and variant on %s\n", a.value("eval").c_str());
        CallbackFeedback evalFeedback;
        reportToStderr(evalFeedback, quiet);
        DivergenceResult d = compareModels(baseRuntime, variantRuntime, tokens, base->tokenizer->bos(), p, &evalFeedback);
        report["evaluation"] = {{"text", a.value("eval")}, {"ctx", p.ctx}, {"chunks", d.base.chunks},
                                {"tokens_scored", d.base.tokensScored},
                                {"base", {{"perplexity", d.base.perplexity}, {"error", d.base.error}}},
                                {"variant", {{"perplexity", d.variant.perplexity}, {"error", d.variant.error}}},
                                {"kl_mean", d.klMean}, {"kl_p99", d.klP99}, {"top1_agreement", d.top1Agreement}};
    }
    if (a.flag("json")) {
        std::cout << report.dump(2) << "\n";
        return 0;
    }
    for (const auto& s : result.steps) {
        std::printf("%s v%d on %lld layers in %.2f s %s\n", s.method.c_str(), s.version, static_cast<long long>(s.layers),
                    s.seconds, s.params.dump().c_str());
        for (const auto& n : s.notes) std::printf("    %s\n", n.c_str());
    }
    std::printf("size       %s -> %s (%.2fx)\n", humanBytes(double(base->storageBytes())).c_str(),
                humanBytes(double(result.model->storageBytes())).c_str(),
                double(base->storageBytes()) / double(result.model->storageBytes()));
    if (report.contains("evaluation")) {
        const auto& e = report["evaluation"];
        std::printf("PPL        base %.4f +/- %.4f, variant %.4f +/- %.4f  (%lld tokens, ctx %lld)\n",
                    e["base"]["perplexity"].get<double>(), e["base"]["error"].get<double>(),
                    e["variant"]["perplexity"].get<double>(), e["variant"]["error"].get<double>(),
                    e["tokens_scored"].get<long long>(), e["ctx"].get<long long>());
        std::printf("KL         mean %.5f, p99 %.5f; top-1 agreement %.2f%%\n", e["kl_mean"].get<double>(),
                    e["kl_p99"].get<double>(), 100 * e["top1_agreement"].get<double>());
    }
    return 0;
}

} // namespace cwb::cli
