// cwb export: writes a model, a recipe's result or a project variant in a format other engines load.
#include <cstdio>
#include <initializer_list>
#include <filesystem>
#include <type_traits>

#include <ATen/Context.h>
#include <nlohmann/json.hpp>

#include "app/cli/arguments.h"
#include "app/cli/commands.h"
#include "core/compress/pipeline.h"
#include "core/eval/perplexity.h"
#include "core/project/file_hash.h"
#include "core/export/export_format.h"
#include "core/export/export_plan.h"
#include "core/io/model_format.h"
#include "core/project/project.h"
#include "core/project/project_runner.h"
#include "core/util/error.h"
#include "core/util/json_text.h"

namespace cwb::cli {

namespace {

void progressToStderr(CallbackFeedback& feedback, bool quiet, const char* what) {
    if (quiet) return;
    showProgress(feedback, what);
    feedback.logCallback = [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); };
}

// A layout that cannot hold what the recipe makes is said now, not after the calibration and the compression.
void refuseBeforeBuilding(const Model& base, const Recipe& recipe, const std::string& format) {
    const std::string why = exportRecipeProblem(base, recipe, format);
    if (!why.empty()) throw Error("the recipe builds a variant that the " + format + " format cannot hold: " + why);
}

void refuseOverwritingSource(const std::string& out, const Model& base) {
    const std::string why = exportOverwritesSource(out, base.path);
    if (!why.empty()) throw Error(out, why);
}

// `cwb compress --out DIR` writes DIR/recipe.json and DIR/report.json. Exporting that recipe calibrates again; with
// other windows the variant written is not the one compress measured (a user probe found PPL 7.56 exported against
// 7.62 reported, from the default 128 x 512 windows in place of 32 x 256). So what the command line leaves out is
// taken from the report beside the recipe, when the report is of this recipe, and what it sets otherwise is warned of.
void calibrationAsCompressRanIt(const Arguments& a, const std::string& modelPath, const Recipe& recipe, CalibrationSpec& calib) {
    if (!recipeNeedsCalibration(recipe)) return;
    const std::filesystem::path reportPath = std::filesystem::path(a.value("recipe")).parent_path() / "report.json";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(reportPath, ec)) return;
    nlohmann::json report;
    try {
        report = nlohmann::json::parse(readTextFile(reportPath.string()));
    } catch (const std::exception&) {
        return;   // not a report of ours: nothing to take
    }
    if (!report.is_object() || !report.contains("calibration") || !report["calibration"].is_object() ||
        !report.contains("recipe") || report["recipe"] != recipe.toJson())
        return;   // the recipe was edited after compress ran it, or the file is something else
    const nlohmann::json& c = report["calibration"];
    const std::string where = reportPath.string();
    std::vector<std::string> taken, differing, warnings;
    auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    auto samePath = [](const std::string& x, const std::string& y) {
        std::error_code e1, e2;
        const auto cx = std::filesystem::weakly_canonical(x, e1), cy = std::filesystem::weakly_canonical(y, e2);
        return !e1 && !e2 ? cx == cy : x == y;
    };
    // The value compress was asked for (the windows it drew may be fewer or shorter: the same request draws them again).
    auto take = [&](const char* option, std::initializer_list<const char*> keys, auto& field) {
        using Field = std::decay_t<decltype(field)>;
        for (const char* key : keys) {
            if (!c.contains(key)) continue;
            Field recorded;
            try {
                recorded = c[key].get<Field>();
            } catch (const std::exception&) {
                return;
            }
            bool same = field == recorded;
            if constexpr (std::is_same_v<Field, std::string>) same = samePath(field, recorded);
            if (!a.has(option)) {
                field = recorded;
                taken.push_back(std::string("--") + option + " " + text(c[key]));
            } else if (!same) {
                differing.push_back(std::string("--") + option + " " + a.value(option) + " (compress: " + text(c[key]) + ")");
            }
            return;
        }
    };
    take("calib", {"file"}, calib.textPath);
    take("samples", {"samples_requested", "samples"}, calib.samples);
    take("seq-len", {"seq_len_requested", "seq_len"}, calib.seqLen);
    take("seed", {"seed"}, calib.seed);
    take("calib-dtype", {"dtype"}, calib.forwardType);
    if (!a.has("device") && c.contains("device") && c["device"].is_string()) {
        const std::string recorded = c["device"].get<std::string>();
        if (recorded.rfind("cuda", 0) == 0 && !at::hasCUDA()) {
            warnings.push_back("compress calibrated on " + recorded + "; this export calibrates on the CPU, where GPTQ and "
                               "SparseGPT's float64 algebra can choose a few other levels than CUDA's float32");
            calib.device = "cpu";
        } else if (recorded != "auto") {
            calib.device = recorded;
            taken.push_back("--device " + recorded);
        }
    }
    if (c.contains("text_hash") && c["text_hash"].is_string() && samePath(calib.textPath, text(c.value("file", nlohmann::json(""))))) {
        std::error_code e;
        if (std::filesystem::is_regular_file(calib.textPath, e) && hashFile(calib.textPath) != c["text_hash"].get<std::string>())
            warnings.push_back(calib.textPath + " changed since compress read it: the windows drawn from it differ");
    }
    const bool quiet = a.flag("quiet") || a.flag("json");
    if (!taken.empty() && !quiet) {
        std::string line;
        for (const auto& t : taken) line += (line.empty() ? "" : " ") + t;
        std::fprintf(stderr, "calibration as compress ran it (%s): %s\n", where.c_str(), line.c_str());
    }
    if (!differing.empty()) {
        std::string line;
        for (const auto& d : differing) line += (line.empty() ? "" : ", ") + d;
        warnings.push_back(line + " differs from the calibration in " + where);
    }
    if (report.contains("model") && report["model"].is_string() && !samePath(report["model"].get<std::string>(), modelPath))
        warnings.push_back(where + " was made from " + report["model"].get<std::string>() + ", not " + modelPath);
    for (const auto& w : warnings)   // even with --quiet: the variant exported is not the one compress measured
        std::fprintf(stderr, "warning: %s, so the variant exported is not the one compress measured\n", w.c_str());
}

} // namespace

int runExport(const std::vector<std::string>& args) {
    Arguments a(args, {"variant", "format", "type", "requantize", "out", "recipe", "calib", "samples", "seq-len", "seed", "model",
                       "shard-size", "threads", "tokenizer", "scratch", "device", "calib-dtype"},
                {"json", "quiet", "pack-head"});
    applyThreads(a.integer("threads", 0));
    const std::string input = a.requirePositional("MODEL or PROJECT");
    if (!a.has("format")) throw Error("export needs --format hf|gptq|awq|compressed-tensors|gguf");
    if (!a.has("out")) throw Error("export needs --out PATH (a folder for hf/gptq/awq/compressed-tensors, a .gguf file for gguf)");
    // Before the variant is built: a destination it cannot go to fails now, not after the calibration.
    const std::string where = exportDestinationProblem(a.value("format"), a.value("out"));
    if (!where.empty()) throw Error(a.value("out"), where);
    if (a.has("shard-size") && !ExportFormatRegistry::instance().byId(a.value("format"))->writesFolder())
        throw Error("--shard-size applies to the safetensors formats; a " + a.value("format") + " export is one file");
    const bool quiet = a.flag("quiet") || a.flag("json");
    ExportOptions options;
    options.tensorType = a.value("type");
    options.requantizeType = a.value("requantize");
    options.packHead = a.flag("pack-head");
    const std::string problem = exportOptionsProblem(a.value("format"), options);
    if (!problem.empty()) throw Error("export as " + a.value("format") + ": " + problem);
    if (a.has("shard-size")) {
        const int64_t bytes = a.integer("shard-size", 0);
        if (bytes <= 0) throw Error("--shard-size must be a positive number of bytes");
        options.shardBytes = uint64_t(bytes);
    }

    std::unique_ptr<Model> base, variant;
    CallbackFeedback build;
    progressToStderr(build, quiet, "build");
    std::string source = input;
    if (isProjectPath(input)) {
        if (a.has("recipe")) throw Error("--recipe applies to a model; a project's variants carry their own recipes");
        Project project = Project::open(input, Project::Access::ReadOnly);
        base = loadModel(a.value("model", project.model().path), projectLoadOptions(project, a));
        refuseOverwritingSource(a.value("out"), *base);
        applyScratch(a, *base, a.flag("quiet") || a.flag("json"));
        const std::string name = a.value("variant", "base");
        source = input + " (variant " + name + ")";
        if (name == "base") {
            variant = base->clone();
        } else {
            ProjectRunner runner(project, *base);
            refuseBeforeBuilding(*base, runner.fullRecipe(name), a.value("format"));
            variant = runner.build(name, &build);
        }
    } else {
        if (a.has("variant")) throw Error("--variant needs a project (.cwbproj); for a model use --recipe");
        // Options that would do nothing here are refused, not ignored (user probe: --model and --calib were dropped).
        if (a.has("model")) throw Error("--model applies to a project (the model its variants are built from); a model to export is MODEL itself");
        if (!a.has("recipe"))
            for (const char* option : {"calib", "samples", "seq-len", "seed", "device", "calib-dtype"})
                if (a.has(option))
                    throw Error(std::string("--") + option + " sets the calibration of --recipe's steps; without a recipe the model is "
                                "written as it is");
        LoadOptions load;
        load.tokenizerPath = a.value("tokenizer");
        base = loadModel(input, load);
        refuseOverwritingSource(a.value("out"), *base);
        applyScratch(a, *base, a.flag("quiet") || a.flag("json"));
        if (a.has("recipe")) {
            CalibrationSpec calib;
            calib.textPath = a.value("calib");
            calib.samples = a.integer("samples", 128);
            calib.seqLen = a.integer("seq-len", 512);
            calib.seed = a.unsignedInteger("seed", 0);
            calib.device = a.value("device", "auto");
            calib.forwardType = a.value("calib-dtype", "f32");
            const Recipe recipe = Recipe::load(a.value("recipe"));
            for (const std::string& why : {recipeParamsProblem(recipe), recipeLayersProblem(*base, recipe)})
                if (!why.empty()) throw Error(a.value("recipe"), why);
            calibrationAsCompressRanIt(a, input, recipe, calib);
            resolveCalibrationCompute(calib);   // a bad --device or --calib-dtype fails before the calibration
            refuseBeforeBuilding(*base, recipe, a.value("format"));
            variant = std::move(compressModel(*base, recipe, calib, &build).model);
        } else {
            variant = base->clone();
        }
    }

    CallbackFeedback writing;
    progressToStderr(writing, quiet, "export");
    const ExportReport report = exportModel(*variant, a.value("format"), a.value("out"), options, &writing);
    for (const auto& w : report.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());   // even with --quiet or --json
    if (a.flag("json")) {
        nlohmann::json tensors = nlohmann::json::array();
        for (const auto& t : report.tensors)
            tensors.push_back({{"name", t.name}, {"type", t.type}, {"added_error", t.addedError}, {"note", t.note}});
        nlohmann::json out = {{"source", source}, {"format", report.format}, {"path", report.path},
                              {"files", report.files}, {"bytes", report.bytes}, {"notes", report.notes}, {"warnings", report.warnings},
                              {"tensors", tensors}};
        std::printf("%s\n", jsonText(out).c_str());
        return 0;
    }
    std::printf("exported %s as %s to %s (%llu tensor bytes, %zu file%s)\n", source.c_str(), report.format.c_str(),
                report.path.c_str(), static_cast<unsigned long long>(report.bytes), report.files.size(),
                report.files.size() == 1 ? "" : "s");
    std::map<std::string, int> types;
    for (const auto& t : report.tensors) ++types[t.type];
    std::string summary;
    for (const auto& [type, n] : types) summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + type;
    std::printf("tensors: %s\n", summary.c_str());
    for (const auto& n : report.notes) std::printf("note: %s\n", n.c_str());
    return 0;
}

} // namespace cwb::cli
