#include "app/batch/batch_runner.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "app/batch/batch_charts.h"
#include "core/io/model_format.h"
#include "core/project/file_hash.h"
#include "core/project/project.h"
#include "core/export/export_format.h"
#include "core/eval/perplexity.h"
#include "core/export/export_plan.h"
#include "core/project/project_runner.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/scratch_file.h"
#include "core/util/feedback.h"
#include "core/version.h"
#include "core/util/json_text.h"

namespace cwb {

namespace {

// An export whose perplexity read back differs more than this from the variant's is warned of (not a failed replay:
// the format, not the replay, is what differs). f16 rounding of embeddings moves stories260K's by ~1e-4.
constexpr double kReadBackWarning = 0.01;

bool onCuda(const std::string& device) { return device.rfind("cuda", 0) == 0; }

// A project's export entry (exportEntriesProblem checked its fields) as the exporter's options.
ExportOptions exportOptionsOf(const nlohmann::json& entry) {
    ExportOptions options;
    options.tensorType = entry.value("type", "");
    options.requantizeType = entry.value("requantize", "");
    options.packHead = entry.value("pack_head", false);
    return options;
}

// The largest |reproduced - stored| accepted for a metric stored as `stored`. On the same device, build and thread
// count nothing may differ. On the same kind of device with other threads or another build only the order of sums
// changes, so KL and the rate of top-1 disagreement (1 - top1) must hold to a few percent of their own size: an
// 8-bit variant's KL is under 1e-3 nats, and a fixed 1e-3 let any replay of it pass. Between the CPU (f32) and CUDA
// (f16) the floors are wider, for f16 rounding.
double allowedDifference(const std::string& metric, double stored, bool sameEnvironment, bool sameDeviceKind) {
    if (metric == "bytes" || metric == "bits_per_weight") return 0.0;   // sizes: no arithmetic that could round
    if (sameEnvironment) return 0.0;
    if (metric == "perplexity") return 1e-3 * std::abs(stored);
    if (isPerLayerMetric(metric)) return 1e-2 * std::abs(stored);       // a layer's reconstruction error
    if (metric == "top1") return std::max(0.05 * std::abs(1.0 - stored), sameDeviceKind ? 1e-3 : 1e-2);
    if (metric == "kl_mean" || metric == "kl_p99") return std::max(1e-2 * std::abs(stored), sameDeviceKind ? 1e-6 : 1e-3);
    return 1e-3;
}

bool within(double stored, double reproduced, double allowed) {
    return allowed == 0 ? stored == reproduced : std::abs(stored - reproduced) <= allowed;
}

// Why the report and exports cannot go to `out` ("" when they can), checked before anything is replayed: a report
// path taken by a folder, an exports path taken by a file.
std::string outputFolderProblem(const std::string& out, bool hasExports) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::exists(out, ec) && !fs::is_directory(out, ec)) return "exists and is not a folder";
    for (const char* name : {"report.json", "report.md"})
        if (fs::is_directory(fs::path(out) / name, ec)) return std::string(name) + " there is a folder; the report cannot be written";
    if (hasExports && fs::exists(fs::path(out) / "exports", ec) && !fs::is_directory(fs::path(out) / "exports", ec))
        return "exports there is not a folder; the exports cannot be written";
    return "";
}

std::string currentHash(const std::string& path) {
    return std::filesystem::is_directory(path) ? hashFolder(path) : hashFile(path);
}

} // namespace

void BatchRunner::progress(const std::string& line) const {
    if (!mQuiet && !mJson) std::fprintf(stderr, "batch: %s\n", line.c_str());
}

nlohmann::json BatchRunner::writeExports(const Variant& variant, const Model& model, ProjectRunner& runner,
                                         double variantPerplexity, std::vector<std::string>& warnings, bool* failed) const {
    nlohmann::json written = nlohmann::json::array();
    const std::string bad = exportEntriesProblem(variant.exports);   // Project::open checked; never write outside --out
    if (!bad.empty()) throw Error(mProjectPath, "variant '" + variant.name + "': exports: " + bad);
    for (const auto& e : variant.exports) {
        const std::string format = e.value("format", ""), file = e.value("file", "");
        const std::string path = mOutputDir + "/exports/" + file;
        nlohmann::json entry = {{"format", format}, {"file", file}, {"path", path}};
        try {
            std::filesystem::create_directories(mOutputDir + "/exports");
            const ExportOptions options = exportOptionsOf(e);
            progress("  export " + variant.name + " as " + format + " to " + path);
            CallbackFeedback writing; // so that an interrupt stops the export and removes its temporary output
            const ExportReport r = exportModel(model, format, path, options, &writing);
            entry["bytes"] = r.bytes;
            entry["files"] = r.files;
            entry["notes"] = r.notes;
            entry["warnings"] = r.warnings;
            for (const auto& w : r.warnings) progress("  warning: " + w);
            if (mCheckExports && variantPerplexity > 0) {
                // What an engine will load, measured: re-quantized layers, dropped scales or a layout slip show here,
                // not in the variant's numbers.
                progress("  reading back " + path);
                CallbackFeedback reading;
                reading.logCallback = [&](const std::string& line) { progress("    " + line); };
                // The file is written whatever happens here: a read-back that fails (memory, a loader's refusal) is a
                // warning beside the export, not a failed export.
                try {
                    auto back = loadModel(path);
                    const PerplexityResult measured = runner.evaluateOther(*back, &reading);
                    const double relative = measured.perplexity / variantPerplexity - 1.0;
                    entry["read_back"] = {{"perplexity", measured.perplexity}, {"error", measured.error},
                                          {"variant_perplexity", variantPerplexity}, {"relative_difference", relative}};
                    if (std::abs(relative) > kReadBackWarning) {
                        char line[256];
                        std::snprintf(line, sizeof line, "the %s export of %s reads back at PPL %.4f, %+.2f%% from the variant's %.4f",
                                      format.c_str(), variant.name.c_str(), measured.perplexity, 100.0 * relative, variantPerplexity);
                        warnings.push_back(line);
                        std::fprintf(stderr, "cwb --batch: %s\n", line);   // even with --quiet: the file is not the variant
                    }
                } catch (const Cancelled&) {
                    throw;
                } catch (const std::exception& e) {
                    entry["read_back"] = {{"error", errorText(e)}};
                    warnings.push_back("the " + format + " export of " + variant.name + " was written but could not be read back: " +
                                       errorText(e));
                    std::fprintf(stderr, "cwb --batch: %s\n", warnings.back().c_str());
                }
            }
        } catch (const Cancelled&) {
            throw;
        } catch (const Error& error) {
            entry["error"] = error.what();
            warnings.push_back("export of " + variant.name + " as " + format + " failed: " + error.what());
            std::fprintf(stderr, "cwb --batch: %s\n", warnings.back().c_str());   // even with --quiet: the run is incomplete
            *failed = true;
        }
        written.push_back(entry);
    }
    return written;
}

int BatchRunner::run() {
    try {
        if (mProjectPath.empty()) throw Error("--batch needs a project file");
        Project project = Project::open(mProjectPath, Project::Access::ReadOnly);   // a replay never writes the project
        {   // the report's folder: made (or refused) before the replay's work, not after it
            std::error_code ec;
            std::filesystem::create_directories(mOutputDir, ec);
            if (ec) throw Error(mOutputDir, "cannot create the report folder: " + ec.message());
            if (!std::filesystem::is_directory(mOutputDir, ec)) throw Error(mOutputDir, "exists and is not a folder (--out is a folder)");
            if (::access(mOutputDir.c_str(), W_OK | X_OK) != 0)
                throw Error(mOutputDir, std::string("cannot write into the report folder: ") + std::strerror(errno));
            bool exports = false;
            for (const auto& v : project.variants()) exports |= !v.exports.empty();
            const std::string taken = outputFolderProblem(mOutputDir, exports);
            if (!taken.empty()) throw Error(mOutputDir, taken);
        }
        // A stored export this build cannot write at all (an unknown format, a type the format does not take) fails
        // the replay now, before the model is hashed and the variants rebuilt (user probe: it failed after them).
        for (const auto& v : project.variants()) {
            if (!mVariants.empty() && std::find(mVariants.begin(), mVariants.end(), v.name) == mVariants.end()) continue;
            for (const auto& e : v.exports) {
                const std::string format = e.value("format", ""), file = e.value("file", "");
                if (!ExportFormatRegistry::instance().byId(format)) {
                    std::string known;
                    for (const ExportFormat* f : ExportFormatRegistry::instance().formats()) known += (known.empty() ? "" : ", ") + f->id();
                    throw Error(mProjectPath, "variant '" + v.name + "': the export to '" + file + "' has format '" + format +
                                                  "', which this build does not write (it writes " + known + ")");
                }
                const ExportOptions options = exportOptionsOf(e);
                const std::string why = exportOptionsProblem(format, options);
                if (!why.empty()) throw Error(mProjectPath, "variant '" + v.name + "': the export to '" + file + "': " + why);
            }
        }
        nlohmann::json report = {{"project", mProjectPath}, {"schema", "cwb-batch-report/1"},
                                 {"build", std::string(versionString()) + " / LibTorch " + torchVersionString()}};
        std::vector<std::string> warnings;
        // What makes a replay differ before anything is run: on stderr too (even with --quiet), not only in the report.
        const auto warnNow = [&warnings](std::string text) {
            warnings.push_back(std::move(text));
            std::fprintf(stderr, "cwb --batch: warning: %s\n", warnings.back().c_str());
        };

        const std::string modelPath = mModelPath.empty() ? project.model().path : mModelPath;
        if (!std::filesystem::exists(modelPath))
            throw Error(mProjectPath, "its model is not at " + modelPath + " (moved?); pass --model PATH");
        const std::string hash = currentHash(modelPath);
        report["model"] = {{"path", modelPath}, {"stored_hash", project.model().hash}, {"hash", hash}};
        if (!project.model().hash.empty() && hash != project.model().hash)
            warnNow("the model's content changed since the project was saved (hash " + project.model().hash + " -> " + hash +
                    "); results may differ");
        {   // The texts, where the project names them or where --calib/--eval say they are now (a replay on a server
            // whose folders differ). Paths are not part of what results were measured from; the texts' hashes are.
            ProjectSettings settings = project.settings();
            struct Text {
                const char *role, *option;
                FileReference* ref;
                std::string given;
            };
            for (const Text& t : {Text{"calibration", "--calib", &settings.calibration, mCalibrationPath},
                                  Text{"evaluation", "--eval", &settings.evaluation, mEvaluationPath}}) {
                if (!t.given.empty()) {
                    if (t.ref->path.empty())
                        throw Error(mProjectPath, std::string("has no ") + t.role + " text for " + t.option +
                                                      " to stand in for (a replay measures what the project measured)");
                    if (!std::filesystem::is_regular_file(t.given))
                        throw Error(t.given, std::string("is not a file (") + t.option + ")");
                    report["data"][t.role]["stored_path"] = t.ref->path;
                    t.ref->path = std::filesystem::absolute(t.given).lexically_normal().string();
                }
                if (t.ref->path.empty()) continue;
                if (!std::filesystem::exists(t.ref->path))
                    throw Error(mProjectPath, std::string("its ") + t.role + " text is not at " + t.ref->path + " (moved?); pass " +
                                                  t.option + " PATH");
                const std::string now = hashFile(t.ref->path);
                report["data"][t.role]["path"] = t.ref->path;
                report["data"][t.role]["hash"] = now;
                report["data"][t.role]["stored_hash"] = t.ref->hash;
                if (!t.ref->hash.empty() && now != t.ref->hash)
                    warnNow(std::string("the ") + t.role + " text " + t.ref->path +
                            (t.given.empty() ? " changed since the project was saved" : " differs from the one the project recorded") +
                            " (hash " + t.ref->hash + " -> " + now + "); results may differ");
            }
            project.setSettings(settings);   // in memory only: a replay never writes the project
        }

        if (mThreads < 0) throw Error("--threads must be 0 or more");
        if (mThreads > 0) at::set_num_threads(mThreads);
        RuntimeOptions options;
        const bool cudaName = mDevice == "cuda" || (mDevice.rfind("cuda:", 0) == 0 && mDevice.size() > 5 &&
                                                      mDevice.find_first_not_of("0123456789", 5) == std::string::npos);
        if (mDevice != "cpu" && !cudaName) throw Error("--device must be cpu or cuda[:N], got '" + mDevice + "'");
        if (mDevice != "cpu") {
            if (!at::hasCUDA()) throw Error("--device " + mDevice + ": no CUDA in this build or no GPU visible");
            options.device = at::Device(mDevice);
            options.dtype = at::kHalf;
        }
        LoadOptions load = project.model().loadOptions();
        if (!mTokenizerPath.empty()) load.tokenizerPath = mTokenizerPath;
        const std::string& tokenizer = load.tokenizerPath;
        if (!tokenizer.empty() && !std::filesystem::exists(tokenizer))
            throw Error(mProjectPath, "its tokenizer is not at " + tokenizer + " (moved?); pass --tokenizer PATH");
        progress("loading " + modelPath);
        auto base = loadModel(modelPath, load);
        // Checked like the model: a moved tokenizer with the same bytes gives the same tokens; changed bytes may not.
        std::string tokenizerHash;
        const std::string tokenizerWarning = tokenizerChangeWarning(project.model(), tokenizer, *base, &tokenizerHash);
        if (!tokenizerWarning.empty()) warnNow(tokenizerWarning);
        const auto found = base->metadata.find("tokenizer");   // a llama2.c checkpoint's, when none was given
        if (!tokenizer.empty() || found != base->metadata.end()) {
            report["model"]["tokenizer"] = !tokenizer.empty() ? tokenizer : found->second;
            report["model"]["tokenizer_hash"] = tokenizerHash;
            report["model"]["stored_tokenizer_hash"] = project.model().tokenizerHash;
        }
        std::string scratchNote;
        base->setScratch(chooseScratch("auto", base->storageBytes(), &scratchNote));
        if (!scratchNote.empty()) progress(scratchNote);

        std::vector<std::string> names = {"base"};
        if (mVariants.empty()) {
            for (const auto& v : project.variants()) names.push_back(v.name);
        } else {
            for (const auto& v : mVariants) {
                if (std::find(names.begin(), names.end(), v) != names.end()) continue;   // base is always replayed; no twice
                project.variant(v);   // throws with the name when unknown
                names.push_back(v);
            }
        }
        const std::string clash = project.exportClashes(names);   // every export lands in one folder
        if (!clash.empty()) throw Error(mProjectPath, "exports: " + clash);
        ProjectRunner runner(project, *base, options);
        for (const auto& name : names) {   // a stored recipe this build cannot run fails before any variant is replayed
            if (name == "base") continue;
            const Recipe recipe = runner.fullRecipe(name);
            // What would fail this variant's build fails the replay now, before hours of the others' work.
            const std::string cannot = runner.buildProblem(name);
            if (!cannot.empty()) throw Error(mProjectPath, "variant '" + name + "': " + cannot);
            // An export its layout cannot hold still fails where it is written; say so now, not hours later.
            for (const auto& e : project.variant(name).exports) {
                const std::string format = e.value("format", "");   // known: checked before the model was read
                const std::string why = exportRecipeProblem(*base, recipe, format);
                if (!why.empty())
                    std::fprintf(stderr, "cwb --batch: the export of %s as %s will fail: %s\n", name.c_str(), format.c_str(), why.c_str());
            }
        }
        bool allWithin = true, anyCompared = false, missing = false, exportFailed = false;
        nlohmann::json variants = nlohmann::json::array();
        // A replay stopped half way (Ctrl-C, or an error in one variant) still writes its report: what finished, and
        // why it stopped, in place of an older run's report that would otherwise sit beside this run's exports.
        bool cancelled = false;
        std::string failure;
        try {
        for (size_t i = 0; i < names.size(); ++i) {
            const std::string& name = names[i];
            progress("[" + std::to_string(i + 1) + "/" + std::to_string(names.size()) + "] " + name);
            CallbackFeedback feedback;
            int lastDecile = -1;
            feedback.progressCallback = [&](double f) {
                if (int(f * 10) != lastDecile) progress("  " + name + " " + std::to_string(int(f * 100)) + "%");
                lastDecile = int(f * 10);
            };
            feedback.logCallback = [&](const std::string& line) { progress("  " + line); };
            std::vector<ResultRow> rows = runner.evaluate(name, &feedback);
            nlohmann::json metrics = nlohmann::json::array();
            bool variantCompared = false;
            // Results stored before the recipe or the settings changed are of another variant: shown, not judged.
            const std::vector<std::string> stale = project.resultsOutdatedBy(name);
            for (const auto& r : rows) {
                nlohmann::json m = {{"metric", r.metric}, {"reproduced", r.value}, {"error", r.error}, {"timing", isTimingMetric(r.metric)}};
                for (const auto& s : project.results()) {
                    if (s.variant != name || s.metric != r.metric) continue;
                    const bool same = s.device == r.device && s.threads == r.threads && s.build == r.build;
                    const double tol = allowedDifference(r.metric, s.value, same, onCuda(s.device) == onCuda(r.device));
                    m["stored"] = s.value;
                    m["difference"] = r.value - s.value;
                    m["tolerance"] = tol;
                    m["same_environment"] = same;
                    if (!isTimingMetric(r.metric) && stale.empty()) {
                        const bool ok = within(s.value, r.value, tol);
                        m["within_tolerance"] = ok;
                        allWithin &= ok;
                        anyCompared = variantCompared = true;
                    }
                }
                metrics.push_back(m);
            }
            for (const auto& r : rows) {   // worse than chance: broken weights, not a result to compare
                const std::string warning = r.metric == "perplexity" ? perplexityWarning(r.value, base->spec.vocab) : "";
                if (warning.empty()) continue;
                warnings.push_back("variant " + name + ": " + warning);
                std::fprintf(stderr, "cwb --batch: %s\n", warnings.back().c_str());
            }
            if (!stale.empty()) {
                std::string why;
                for (const auto& reason : stale) why += (why.empty() ? "" : "; ") + reason;
                warnings.push_back("the stored results of " + name + " are out of date (" + why +
                                   "), so they were not compared; store new ones with `cwb project run`");
                std::fprintf(stderr, "cwb --batch: %s\n", warnings.back().c_str());
                missing = true;
            } else if (!variantCompared) {
                warnings.push_back("variant " + name + " has no stored results to compare with (run `cwb project run`)");
                std::fprintf(stderr, "cwb --batch: %s\n", warnings.back().c_str());
                missing = true;
            }
            nlohmann::json v = {{"name", name}, {"metrics", metrics}, {"notes", runner.notes()}};
            if (!stale.empty()) v["stored_results_stale"] = stale;
            if (name != "base") {
                v["recipe"] = runner.fullRecipe(name).toJson();
                double perplexity = 0;
                for (const auto& r : rows)
                    if (r.metric == "perplexity") perplexity = r.value;
                v["exports"] = writeExports(project.variant(name), *runner.lastBuilt(), runner, perplexity, warnings, &exportFailed);
            }
            variants.push_back(v);
        }
        } catch (const Cancelled&) {
            cancelled = true;
        } catch (const std::exception& e) {
            failure = errorText(e);
        }
        const bool stopped = cancelled || !failure.empty();
        if (stopped) {
            const std::string done = std::to_string(variants.size()) + " of " + std::to_string(names.size());
            warnings.push_back(cancelled ? "the replay was cancelled after " + done + " variants"
                                         : "the replay stopped with an error after " + done + " variants: " + failure);
        }
        report["device"] = options.device.str();
        report["threads"] = at::get_num_threads();
        report["variants"] = variants;
        report["variants_planned"] = names;
        {   // Exports of an earlier replay into the same --out that this one did not write (stopped before them, failed, or
            // not among --variants): they sat beside the new report as if it had made them (user probe).
            std::set<std::string> written;
            for (const auto& v : variants)
                if (v.contains("exports"))
                    for (const auto& e : v["exports"])
                        if (!e.contains("error")) written.insert(e.value("path", ""));
            std::error_code ec;
            std::vector<std::string> earlier;
            for (const auto& entry : std::filesystem::directory_iterator(mOutputDir + "/exports", ec)) {
                const std::string path = mOutputDir + "/exports/" + entry.path().filename().string();
                if (!written.count(path)) earlier.push_back(path);
            }
            std::sort(earlier.begin(), earlier.end());
            for (const auto& path : earlier) warnings.push_back(path + " is from an earlier run: this replay did not write it");
        }
        report["warnings"] = warnings;
        if (!failure.empty()) report["error"] = failure;
        const int code = anyCompared && allWithin && !missing && !exportFailed && !stopped ? Reproduced : Differs;
        report["status"] = cancelled ? "cancelled" : !failure.empty() ? "failed" : code == Reproduced ? "reproduced"
                                                                                   : !allWithin ? "differs" : "incomplete";

        std::filesystem::create_directories(mOutputDir);
        std::string md = "# Batch replay of " + mProjectPath + "\n\nStatus: **" + report["status"].get<std::string>() +
                         "** — device " + options.device.str() + ", " + std::to_string(at::get_num_threads()) + " threads, " +
                         report["build"].get<std::string>() + ".\n\n";
        md += "Model: " + modelPath;
        for (const char* role : {"evaluation", "calibration"})
            if (report.contains("data") && report["data"].contains(role))
                md += std::string("; ") + role + " text: " + report["data"][role].value("path", "");
        md += ".\n\n";
        for (const auto& w : warnings) md += "> " + w + "\n\n";
        md += "| variant | metric | stored | reproduced | difference | tolerance | ok |\n| --- | --- | ---: | ---: | ---: | ---: | --- |\n";
        char line[512];
        for (const auto& v : variants) {
            // Per-layer rows (reconstruction error of every layer) are summed up in one line per variant.
            int layers = 0, layersOk = 0, layersStored = 0, layersJudged = 0;
            double worst = 0;
            for (const auto& m : v["metrics"]) {
                if (!isPerLayerMetric(m["metric"].get<std::string>())) continue;
                ++layers;
                if (!m.contains("stored")) continue;
                ++layersStored;
                worst = std::max(worst, std::abs(m["difference"].get<double>()));
                if (!m.contains("within_tolerance")) continue;   // stored before the recipe or settings changed
                ++layersJudged;
                layersOk += m["within_tolerance"].get<bool>();
            }
            if (layers > 0) {
                std::snprintf(line, sizeof line, "| %s | reconstruction error, %d layers | %d stored | %d reproduced | max %.3g | 1%% relative | %s |\n",
                              v["name"].get<std::string>().c_str(), layers, layersStored, layers, worst,
                              layersJudged == 0 ? (layersStored > 0 ? "stale" : "—") : layersOk == layersJudged ? "yes" : "**no**");
                md += line;
            }
            for (const auto& m : v["metrics"]) {
                if (isPerLayerMetric(m["metric"].get<std::string>())) continue;
                const bool hasStored = m.contains("stored");
                // Whole numbers (bytes) in full in both columns: "1.1712e+06" stood beside "1171200.000000".
                std::snprintf(line, sizeof line, "| %s | %s | %s | %s | %s | %s | %s |\n", v["name"].get<std::string>().c_str(),
                              m["metric"].get<std::string>().c_str(),
                              hasStored ? resultText(m["stored"].get<double>()).c_str() : "—", resultText(m["reproduced"].get<double>()).c_str(),
                              hasStored ? smallNumberText(m["difference"].get<double>()).c_str() : "—",
                              hasStored ? smallNumberText(m["tolerance"].get<double>()).c_str() : "—",
                              m["timing"].get<bool>() ? "timing" : !hasStored ? "—"
                              : !m.contains("within_tolerance") ? "stale"   // stored before the recipe or settings changed
                              : m["within_tolerance"].get<bool>() ? "yes" : "**no**");
                md += line;
            }
        }
        for (const auto& v : variants) {
            if (!v.contains("exports")) continue;
            for (const auto& e : v["exports"]) {
                if (e.contains("error")) continue;
                md += "\nExported " + v["name"].get<std::string>() + " as " + e["format"].get<std::string>() + " to `" +
                      e["path"].get<std::string>() + "` (" + std::to_string(e["bytes"].get<uint64_t>()) + " tensor bytes).\n";
                if (e.contains("read_back") && e["read_back"].contains("perplexity")) {
                    char line[256];
                    std::snprintf(line, sizeof line, "Read back: PPL %.4f against the variant's %.4f (%+.3f%%).\n",
                                  e["read_back"]["perplexity"].get<double>(), e["read_back"]["variant_perplexity"].get<double>(),
                                  100.0 * e["read_back"]["relative_difference"].get<double>());
                    md += line;
                }
                if (e.contains("warnings"))
                    for (const auto& w : e["warnings"]) md += "\n> Warning: " + w.get<std::string>() + "\n";
            }
        }
        std::string chartNote;
        std::vector<std::string> charts = renderCharts(report, mOutputDir, &chartNote);
        report["charts"] = charts;
        if (charts.empty()) md += "\n" + chartNote + ".\n";
        for (const auto& c : charts) md += "\n![" + c + "](" + c + ")\n";
        writeFileAtomically(mOutputDir + "/report.md", md);
        writeFileAtomically(mOutputDir + "/report.json", jsonText(report) + "\n");
        if (mJson) std::cout << jsonText(report) << "\n";
        if (cancelled) {
            std::fprintf(stderr, "cwb --batch: cancelled; %s/report.json lists the %zu of %zu variants replayed\n",
                         mOutputDir.c_str(), variants.size(), names.size());
            return interruptRequested() ? 128 + interruptSignal() : Failed;   // as the catch below
        }
        if (!failure.empty()) {
            std::fprintf(stderr, "cwb --batch: error: %s (%s/report.json lists the variants replayed before it)\n",
                         failure.c_str(), mOutputDir.c_str());
            return Failed;
        }
        progress(std::string("wrote ") + mOutputDir + "/report.json and report.md: " + report["status"].get<std::string>());
        return code;
    } catch (const Cancelled&) {
        std::fprintf(stderr, "cwb --batch: cancelled\n");
        // Ctrl-C or SIGTERM: 128 + the signal, as every other command exits after an interrupt.
        return interruptRequested() ? 128 + interruptSignal() : Failed;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cwb --batch: error: %s\n", errorText(e).c_str());
        return Failed;
    }
}

} // namespace cwb
