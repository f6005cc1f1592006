// `cwb project create|show|add-variant|run`: build and inspect project files from the command line.
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <sys/stat.h>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

#include "app/cli/arguments.h"
#include "app/cli/commands.h"
#include "core/analysis/importance.h"
#include "core/compress/pipeline.h"
#include "core/compress/recipe.h"
#include "core/eval/perplexity.h"
#include "core/export/export_format.h"
#include "core/export/export_plan.h"
#include "core/io/model_format.h"
#include "core/model/model_info.h"
#include "core/project/file_hash.h"
#include "core/project/project.h"
#include "core/project/project_runner.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "core/version.h"
#include "core/util/json_text.h"

namespace cwb::cli {

namespace {


std::string absolute(const std::string& path) { return std::filesystem::absolute(path).lexically_normal().string(); }

// The calibration and evaluation texts as they are on disk now (textHashesOnDisk): a text edited in place keeps the
// hash the project recorded. `project run` measures from and stamps with these; `project show` says which changed.
struct TextsNow {
    struct Text {
        const char* role;
        std::string path, recorded, now;
        bool changed() const { return now != recorded; }
    };
    TextHashes hashes;
    std::vector<Text> texts;   // evaluation, calibration

    explicit TextsNow(const Project& project) : hashes(textHashesOnDisk(project.settings())) {
        const ProjectSettings& s = project.settings();
        texts.push_back({"evaluation", s.evaluation.path, s.evaluation.hash, hashes.evaluation});
        texts.push_back({"calibration", s.calibration.path, s.calibration.hash, hashes.calibration});
    }
    // What measuring `name` now would be measured from (Project::measurementBasis), with the texts as they are.
    nlohmann::json basis(const Project& project, const std::string& name, const std::string& modelHash,
                         const std::string& tokenizerHash) const {
        return withTextHashes(project.measurementBasis(name, modelHash, tokenizerHash), hashes);
    }
    // How to record a changed text in the project.
    static std::string recordCommand(const Project& project, const Text& t) {
        return "cwb project set " + project.path() + (std::string(t.role) == "evaluation" ? " --eval " : " --calib ") + t.path;
    }
};

FileReference fileReference(const std::string& path) {
    // An empty text would fail every run that reads it; said now (user probe: `project set --calib empty.txt` was taken).
    return path.empty() ? FileReference{} : textFileReference(path);
}

// The files a project names that are not where it says (a model moved, a text deleted), with the option that points a
// run at where they are now: role, path, option.
std::vector<std::array<std::string, 3>> missingFiles(const Project& project) {
    std::vector<std::array<std::string, 3>> missing;
    const auto check = [&](const char* role, const std::string& path, const char* option) {
        std::error_code ec;
        if (!path.empty() && !std::filesystem::exists(path, ec)) missing.push_back({role, path, option});
    };
    check("model", project.model().path, "--model PATH");
    check("tokenizer", project.model().tokenizer, "--tokenizer PATH");
    check("calibration text", project.settings().calibration.path, "--calib PATH");
    check("evaluation text", project.settings().evaluation.path, "--eval PATH");
    return missing;
}

std::string stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

std::string joined(const std::vector<std::string>& parts, const std::string& separator) {
    std::string text;
    for (const auto& part : parts) text += (text.empty() ? "" : separator) + part;
    return text;
}

void addRecipeVariant(Project& project, const std::string& recipePath, const std::string& name, const std::string& parent) {
    Recipe recipe = Recipe::load(recipePath);
    Variant v;
    v.name = name.empty() ? stem(recipePath) : name;
    const std::string problem = Project::newNameProblem(v.name);
    if (!problem.empty()) throw Error(problem + (name.empty() ? " (from the recipe's file name; give --name)" : ""));
    v.parent = parent;
    v.recipe = recipe.toJson();
    project.addVariant(v);
    project.record("add-variant", {{"name", v.name}, {"parent", parent}, {"recipe", recipePath}});
    const std::string badParams = recipeParamsProblem(recipe);   // stored all the same: the file may come before the run
    if (!badParams.empty()) std::fprintf(stderr, "warning: variant %s: %s\n", v.name.c_str(), badParams.c_str());
    if (recipeNeedsCalibration(recipe) && project.settings().calibration.path.empty())
        std::fprintf(stderr, "warning: variant %s has a step that needs calibration text, and the project has none; "
                             "give it one before running: cwb project set %s --calib FILE\n", v.name.c_str(), project.path().c_str());
}

// Whether the model's bytes were written after the project recorded their hash (its "create" journal entry): a file's
// modification time, or the newest of a folder's files. False when the time cannot be told.
bool modifiedSinceRecorded(const Project& project, const std::string& modelPath) {
    std::string recordedAt;
    for (const auto& e : project.journal())
        if (e.action == "create") recordedAt = e.time;
    std::tm tm{};
    if (recordedAt.empty() || !strptime(recordedAt.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm)) return false;
    const std::time_t recorded = timegm(&tm);
    namespace fs = std::filesystem;
    std::error_code ec;
    std::time_t newest = 0;
    auto consider = [&](const std::string& file) {
        struct stat st {};
        if (::stat(file.c_str(), &st) == 0) newest = std::max(newest, st.st_mtime);
    };
    if (fs::is_directory(modelPath, ec)) {
        for (const auto& entry : fs::directory_iterator(modelPath, ec))
            if (entry.is_regular_file(ec)) consider(entry.path().string());
    } else {
        consider(modelPath);
    }
    return newest > recorded;
}

// Long commands store what they measured into the project as it is on disk when they finish, not as they read it:
// a save from the old copy would drop what another command saved meanwhile (the file's revision refuses it, so
// this reads it again and retries).
void storeInLatest(const std::string& path, const std::function<bool(Project&)>& change) {
    for (int attempt = 0;; ++attempt) {
        Project latest = Project::open(path);
        if (!change(latest)) return;
        try {
            latest.save();
            return;
        } catch (const ChangedOnDisk&) {
            if (attempt == 4) throw;
        }
    }
}

// Why these settings cannot run on a model of `context` tokens ("" when they can; context 0: not known).
std::string settingsProblem(const ProjectSettings& s, int64_t context) {
    const int64_t limit = context > 0 ? context : std::numeric_limits<int64_t>::max();
    if (s.calibrationSamples < kLeastCalibrationSamples || s.calibrationSamples > kMostCalibrationSamples)
        return "--samples must be between " + std::to_string(kLeastCalibrationSamples) + " and " +
               std::to_string(kMostCalibrationSamples) + ", got " + std::to_string(s.calibrationSamples);
    if (s.calibrationSeqLen < kLeastCalibrationSeqLen || s.calibrationSeqLen > limit)
        return "--seq-len must be between " + std::to_string(kLeastCalibrationSeqLen) + " and the model's context" + (context > 0 ? " of " + std::to_string(context) : std::string()) +
               ", got " + std::to_string(s.calibrationSeqLen);
    if (s.evalCtx < kLeastEvalCtx || s.evalCtx > limit)
        return "--ctx must be between " + std::to_string(kLeastEvalCtx) + " and the model's context" + (context > 0 ? " of " + std::to_string(context) : std::string()) +
               ", got " + std::to_string(s.evalCtx);
    return "";
}

uint64_t seedOption(const Arguments& a, uint64_t fallback) {
    return a.unsignedInteger("seed", fallback);
}

// The model's hash as a project records it. Hashing reads every byte (seconds per GB): progress on stderr every 10%
// for models past 256 MiB.
std::string hashModel(const std::string& modelPath, bool quiet = false) {
    CallbackFeedback hashing;
    if (!quiet && fileBytes(modelPath) > (uint64_t(256) << 20)) {
        auto shown = std::make_shared<int>(-1);
        hashing.progressCallback = [shown](double f) {
            const int tenth = int(f * 10);
            if (tenth != *shown) std::fprintf(stderr, "hashing the model: %d%%\n", tenth * 10);
            *shown = tenth;
        };
    }
    return hashPath(modelPath, &hashing);
}

int create(const std::vector<std::string>& args) {
    Arguments a(args, {"model", "recipe", "calib", "eval", "ctx", "chunks", "samples", "seq-len", "seed", "tokenizer"}, {});
    const std::string out = a.requirePositional("OUT.cwbproj");
    if (!a.has("model")) throw Error("project create needs --model PATH");
    const std::string modelPath = absolute(a.value("model"));
    ModelReference ref;
    ref.path = modelPath;
    if (a.has("tokenizer")) ref.tokenizer = absolute(a.value("tokenizer"));
    auto model = loadModel(modelPath, ref.loadOptions());   // refuses what cwb cannot read before a project points at it
    ref.tokenizerHash = tokenizerHashToRecord(*model, ref.tokenizer);
    ref.format = model->format;
    ref.hash = hashModel(modelPath);
    ref.bytes = std::filesystem::is_directory(modelPath) ? 0 : fileBytes(modelPath);
    ProjectSettings s;
    s.calibration = fileReference(a.value("calib"));
    s.evaluation = fileReference(a.value("eval"));
    s.calibrationSamples = a.integer("samples", 128);
    s.calibrationSeqLen = a.integer("seq-len", 512);
    s.calibrationSeqLen = a.has("seq-len") ? s.calibrationSeqLen : std::min<int64_t>(s.calibrationSeqLen, model->spec.context);
    s.calibrationSeed = seedOption(a, 0);
    s.evalCtx = a.integer("ctx", std::min<int64_t>(512, model->spec.context));
    s.evalChunks = chunksOption(a);
    const std::string bad = settingsProblem(s, model->spec.context);
    if (!bad.empty()) throw Error(bad);
    // A create that fails (a recipe missing or invalid) leaves no project behind to block the next try.
    std::error_code ec;
    const bool existed = std::filesystem::exists(out, ec);
    size_t variants = 0;
    try {
        Project project = Project::create(out, ref, s);
        project.record("create", {{"model", modelPath}});
        for (const auto& r : a.values("recipe")) addRecipeVariant(project, r, "", "");
        project.save();
        variants = project.variants().size();
    } catch (...) {
        if (!existed)
            for (const char* suffix : {"", "-journal", "-wal", "-shm"}) std::filesystem::remove(out + suffix, ec);
        throw;
    }
    std::printf("created %s with %zu variants\n", out.c_str(), variants);
    return 0;
}

// One line of a journal entry: an export's variant, format, path and size; otherwise its detail's JSON, shortened.
std::string historySummary(const JournalEntry& entry) {
    const nlohmann::json& d = entry.detail;
    if (entry.action == "export" && d.is_object() && d.contains("path")) {
        const size_t files = d.value("files", nlohmann::json::array()).size();
        return d.value("variant", "?") + " as " + d.value("format", "?") + (d.contains("type") ? " " + d.value("type", "") : "") +
               " to " + d.value("path", "") + " (" + std::to_string(files) + (files == 1 ? " file, " : " files, ") +
               humanBytes(d.value("bytes", 0.0)) + " of tensors)";
    }
    if (d.is_null()) return "";
    std::string text = d.dump();
    constexpr size_t kLongest = 160;
    if (text.size() > kLongest) {
        size_t cut = kLongest;
        while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;   // not inside a UTF-8 character
        text = text.substr(0, cut) + "…";
    }
    return text;
}

int show(const std::vector<std::string>& args) {
    Arguments a(args, {}, {"json"});
    Project project = Project::open(a.requirePositional("PROJECT"), Project::Access::ReadOnly);
    if (a.flag("json")) {
        nlohmann::json j = project.toJson();
        j["stale_results"] = nlohmann::json::object();   // variant -> why its results are out of date
        for (const auto& name : j["result_basis"].items()) {
            const std::vector<std::string> why = project.resultsOutdatedBy(name.key());
            if (!why.empty()) j["stale_results"][name.key()] = why;
        }
        const TextsNow texts(project);
        j["changed_texts"] = nlohmann::json::object();   // role -> a text edited since the project recorded it
        for (const auto& t : texts.texts)
            if (t.changed()) j["changed_texts"][t.role] = {{"path", t.path}, {"recorded_hash", t.recorded}, {"hash", t.now}};
        j["missing_files"] = nlohmann::json::object();   // role -> a path the project names that is not there
        for (const auto& [role, path, option] : missingFiles(project)) j["missing_files"][role] = path;
        std::cout << jsonText(j) << "\n";
        return 0;
    }
    std::printf("project    %s (schema %d, written by cwb %s)\n", project.path().c_str(), project.writtenBy().schema,
                project.writtenBy().app.c_str());
    std::printf("model      %s (%s, %s)\n", project.model().path.c_str(), project.model().format.c_str(), project.model().hash.c_str());
    if (!project.model().tokenizer.empty())
        std::printf("tokenizer  %s%s%s%s\n", project.model().tokenizer.c_str(), project.model().tokenizerHash.empty() ? "" : " (",
                    project.model().tokenizerHash.c_str(), project.model().tokenizerHash.empty() ? "" : ")");
    const ProjectSettings& s = project.settings();
    std::printf("calibrate  %s: %lld x %lld tokens, seed %llu\n", s.calibration.path.empty() ? "(none)" : s.calibration.path.c_str(),
                static_cast<long long>(s.calibrationSamples), static_cast<long long>(s.calibrationSeqLen),
                static_cast<unsigned long long>(s.calibrationSeed));
    std::printf("evaluate   %s: ctx %lld, %s\n", s.evaluation.path.empty() ? "(none)" : s.evaluation.path.c_str(),
                static_cast<long long>(s.evalCtx),
                s.evalChunks < 0 ? "every chunk" : (std::to_string(s.evalChunks) + (s.evalChunks == 1 ? " chunk" : " chunks")).c_str());
    for (const auto& v : project.variants()) {
        std::printf("variant    %-24s from %-12s %s\n", v.name.c_str(), v.parent.empty() ? "base" : v.parent.c_str(), v.recipe.dump().c_str());
        for (const auto& e : v.exports)
            std::printf("export     %-24s %s as %s%s%s%s\n", v.name.c_str(), e.value("file", "").c_str(), e.value("format", "").c_str(),
                        e.contains("type") ? (" (" + e.value("type", "") + ")").c_str() : "",
                        e.contains("requantize") ? (", re-quantized layers as " + e.value("requantize", "")).c_str() : "",
                        e.value("pack_head", false) ? ", head packed" : "");
    }
    std::map<std::string, int> perLayer;   // variant -> layers with a reconstruction error, shown as a count
    for (const auto& r : project.results()) {
        if (isPerLayerMetric(r.metric)) {
            ++perLayer[r.variant];
            continue;
        }
        std::printf("result     %-24s %-22s %s%s (%s, %d thread%s)\n", r.variant.c_str(), r.metric.c_str(), resultText(r.value).c_str(),
                    r.error > 0 ? (" +/- " + std::to_string(r.error)).c_str() : "", r.device.c_str(), r.threads,
                    r.threads == 1 ? "" : "s");
    }
    for (const auto& [variant, count] : perLayer)
        std::printf("result     %-24s reconstruction error of %d layers (project show --json lists them)\n", variant.c_str(), count);
    std::vector<std::string> measured{Project::kBaseName};
    for (const auto& v : project.variants()) measured.push_back(v.name);
    for (const auto& m : project.importance()) {
        const std::string on = describeImportanceMeasurement(m.measuredWith);
        std::printf("importance %-24s %zu x %zu, %s\n", m.kind.c_str(), m.rowLabels.size(), m.columnLabels.size(),
                    on.empty() ? "measured on what was not recorded" : ("measured on " + on).c_str());
    }
    // The latest history entries, one line each (a GUI export or save was visible only in --json).
    const auto& journal = project.journal();
    constexpr size_t kShownHistory = 12;
    if (journal.size() > kShownHistory)
        std::printf("history    %zu earlier entries (project show --json lists every one)\n", journal.size() - kShownHistory);
    for (size_t i = journal.size() > kShownHistory ? journal.size() - kShownHistory : 0; i < journal.size(); ++i)
        std::printf("history    %s %-12s %s\n", journal[i].time.c_str(), journal[i].action.c_str(), historySummary(journal[i]).c_str());
    // Results are judged by what the project recorded, as --batch and the GUI judge them; a text edited in place since
    // is said here (user probe: nothing said so until `project run`).
    const TextsNow texts(project);
    for (const auto& t : texts.texts)
        if (t.changed())
            std::printf("changed    %s text %s since the project recorded it (hash %s, recorded %s): results measured "
                        "before may be of its earlier content; `%s` records it\n", t.role, t.path.c_str(), t.now.c_str(),
                        t.recorded.c_str(), TextsNow::recordCommand(project, t).c_str());
    for (const auto& [role, path, option] : missingFiles(project))
        std::printf("missing    %s %s is not there; runs and replays need %s where it is now\n", role.c_str(), path.c_str(),
                    option.c_str());
    for (const auto& name : measured) {
        if (project.results(name).empty()) continue;
        const std::vector<std::string> why = project.resultsOutdatedBy(name);
        if (!why.empty())
            std::printf("stale      %-24s %s; measure it again (cwb project run %s --variants %s)\n", name.c_str(),
                        joined(why, "; ").c_str(), project.path().c_str(), name.c_str());
        else if (project.resultBasis(name).is_null())
            std::printf("unknown    %-24s results stored by a build that did not record what they were measured from\n",
                        name.c_str());
    }
    return 0;
}

int addVariant(const std::vector<std::string>& args) {
    Arguments a(args, {"recipe", "name", "from"}, {});
    Project project = Project::open(a.requirePositional("PROJECT"));
    if (!a.has("recipe")) throw Error("project add-variant needs --recipe FILE");
    if (a.has("name") && a.value("name").empty()) throw Error("--name is empty (leave it out to name the variant after its recipe file)");
    addRecipeVariant(project, a.value("recipe"), a.value("name"), a.value("from"));
    project.save();
    return 0;
}

// Results stored with another tokenizer than the project's are said so on stderr (even with --quiet); returns the hash
// of the tokenizer used ("" for the model's own), for the journal.
std::string warnOfTokenizerChange(const Project& project, const LoadOptions& load, const Model& model) {
    std::string hash;
    const std::string warning = tokenizerChangeWarning(project.model(), load.tokenizerPath, model, &hash);
    if (!warning.empty()) std::fprintf(stderr, "warning: %s\n", warning.c_str());
    return hash;
}

// What is stored under the project's model is of `modelPath`: say so when its bytes are not the ones the project
// recorded. Another path (--model) is hashed; the recorded one is checked by size only (and hashed again when it was
// written after the project hashed it), since hashing reads every byte on every run (--batch hashes it: replaying is
// where the full check belongs). Returns the hash the stored `what` are of.
std::string checkedModelHash(const Project& project, const std::string& modelPath, const Arguments& a, const char* what) {
    std::string modelHash = project.model().hash;
    const ModelReference& recorded = project.model();
    if (a.has("model") && absolute(modelPath) != recorded.path) {
        modelHash = hashModel(modelPath, a.flag("quiet"));
        if (!recorded.hash.empty() && modelHash != recorded.hash)
            std::fprintf(stderr, "warning: %s is not the model the project recorded (%s; hash %s, recorded %s): the %s "
                                 "stored now are this model's\n", modelPath.c_str(), recorded.path.c_str(),
                         modelHash.c_str(), recorded.hash.c_str(), what);
    } else if (recorded.bytes > 0 && !std::filesystem::is_directory(modelPath) && fileBytes(modelPath) != recorded.bytes) {
        modelHash = hashModel(modelPath, a.flag("quiet"));
        std::fprintf(stderr, "warning: %s changed since the project recorded it (%llu bytes, recorded %llu): the %s "
                             "stored now are of its present content\n", modelPath.c_str(),
                     static_cast<unsigned long long>(fileBytes(modelPath)), static_cast<unsigned long long>(recorded.bytes), what);
    } else if (modifiedSinceRecorded(project, modelPath)) {
        modelHash = hashModel(modelPath, a.flag("quiet"));
        if (!recorded.hash.empty() && modelHash != recorded.hash)
            std::fprintf(stderr, "warning: %s changed since the project recorded it (hash %s, recorded %s): the %s "
                                 "stored now are of its present content\n", modelPath.c_str(), modelHash.c_str(),
                         recorded.hash.c_str(), what);
    }
    return modelHash;
}

int runProject(const std::vector<std::string>& args) {
    Arguments a(args, {"variants", "threads", "model", "scratch", "tokenizer"}, {"quiet", "all"});
    applyThreads(a.integer("threads", 0));
    if (a.flag("all") && a.has("variants")) throw Error("--all measures every variant; --variants names some: give one of them");
    Project project = Project::open(a.requirePositional("PROJECT"));
    const std::string modelPath = a.value("model", project.model().path);
    const LoadOptions load = projectLoadOptions(project, a);
    std::vector<std::string> names = {"base"};
    std::stringstream list(a.value("variants"));
    bool listed = false;   // "--variants base" measures the base alone (it was refused as no variant named 'base')
    for (std::string n; std::getline(list, n, ',');) {
        listed = listed || !n.empty();
        if (!n.empty() && n != Project::kBaseName && std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
    for (size_t i = 1; i < names.size(); ++i) project.variant(names[i]);   // an unknown name fails before any work
    if (!listed)
        for (const auto& v : project.variants()) names.push_back(v.name);
    auto base = loadModel(modelPath, load);
    const std::string tokenizerHash = warnOfTokenizerChange(project, load, *base);
    const std::string modelHash = checkedModelHash(project, modelPath, a, "results");
    // What the stored results are measured from: another model or tokenizer than the project's marks them out of date
    // (cwb project show). The model's own tokenizer, where the project recorded none, is the project's.
    const std::string basisTokenizer = !a.has("tokenizer") && project.model().tokenizerHash.empty() ? "" : tokenizerHash;
    // Results are stamped with the texts as they are read now: a text edited in place keeps the hash the project
    // recorded, and results measured on its new content stamped with the old hash looked current once it was put back
    // (user probe).
    const TextsNow texts(project);
    for (const auto& t : texts.texts)
        if (t.changed())
            std::fprintf(stderr, "warning: %s changed since the project recorded it (hash %s, recorded %s): results are measured "
                                 "on its present content, and `cwb project show` lists them as out of date until `%s` records "
                                 "it\n", t.path.c_str(), t.now.c_str(), t.recorded.c_str(), TextsNow::recordCommand(project, t).c_str());
    auto basisNow = [&](const std::string& name) { return texts.basis(project, name, modelHash, basisTokenizer); };
    if (!a.flag("all")) {
        // Results measured from what this run would measure (recipe, model, tokenizer, texts and windows) are kept: after
        // adding one variant to a 7B project, a run measured the base and every other variant again (hours on a CPU).
        // Variants named with --variants are measured whatever they hold; the base only when out of date.
        std::vector<std::string> current, stale;
        for (const auto& name : names) {
            if (a.has("variants") && name != Project::kBaseName) {
                stale.push_back(name);
                continue;
            }
            const nlohmann::json& stored = project.resultBasis(name);
            // Latency rows alone (the GUI's Measure Latency) are not an evaluation (review: such a variant was called
            // up to date and never measured).
            const auto& rows = project.results(name);
            const bool evaluated = std::any_of(rows.begin(), rows.end(), [](const ResultRow& r) { return r.metric == "perplexity"; });
            const bool upToDate = evaluated && !stored.is_null() && Project::basisDifferences(stored, basisNow(name)).empty();
            (upToDate ? current : stale).push_back(name);
        }
        if (!current.empty() && !a.flag("quiet")) {
            std::string list;
            for (const auto& n : current) list += (list.empty() ? "" : ", ") + n;
            std::fprintf(stderr, "run: up to date, not measured again: %s (--all measures them again)\n", list.c_str());
        }
        names = stale;
        if (names.empty()) return 0;
    }
    applyScratch(a, *base, a.flag("quiet"));
    ProjectRunner runner(project, *base);
    for (const auto& name : names) {   // a stored recipe this build cannot run fails before any variant is measured
        const std::string cannot = runner.buildProblem(name);
        if (!cannot.empty()) throw Error(project.path(), "variant '" + name + "': " + cannot);
    }
    for (const auto& name : names) {
        if (!a.flag("quiet")) std::fprintf(stderr, "run: %s\n", name.c_str());
        CallbackFeedback feedback;
        feedback.logCallback = [&](const std::string& line) {
            if (!a.flag("quiet")) std::fprintf(stderr, "  %s\n", line.c_str());
        };
        std::vector<ResultRow> rows = runner.evaluate(name, &feedback);
        double worstLayer = 0;
        int layers = 0;
        for (const auto& r : rows) {
            if (isPerLayerMetric(r.metric)) {   // one line for all layers, below
                worstLayer = std::max(worstLayer, r.value);
                ++layers;
                continue;
            }
            std::printf("%-24s %-24s %s%s\n", name.c_str(), r.metric.c_str(), resultText(r.value).c_str(),
                        r.error > 0 ? (" +/- " + std::to_string(r.error)).c_str() : "");
        }
        if (layers > 0)
            std::printf("%-24s %-24s %d layers, worst %.6g\n", name.c_str(), "reconstruction_error", layers, worstLayer);
        for (const auto& r : rows) {   // worse than chance: broken weights, said even with --quiet
            const std::string warning = r.metric == "perplexity" ? perplexityWarning(r.value, base->spec.vocab) : "";
            if (!warning.empty()) std::fprintf(stderr, "warning: variant %s: %s\n", name.c_str(), warning.c_str());
        }
        nlohmann::json entry = {{"variant", name}, {"threads", at::get_num_threads()}};
        if (!tokenizerHash.empty()) entry["tokenizer_hash"] = tokenizerHash;
        if (modelHash != project.model().hash) entry["model"] = {{"path", modelPath}, {"hash", modelHash}};
        // After every variant, so an interrupted run keeps what finished. Onto the file as it is now: what another
        // command changed during the run (a variant added, an export recorded) stays.
        storeInLatest(project.path(), [&](Project& latest) {
            if (name != Project::kBaseName && !latest.hasVariant(name)) {
                std::fprintf(stderr, "warning: variant %s was removed from the project during the run; its results are "
                                     "not stored\n", name.c_str());
                return false;
            }
            if (name != Project::kBaseName && latest.variant(name).recipe != project.variant(name).recipe) {
                std::fprintf(stderr, "warning: the recipe of %s changed during the run; its results are not stored\n", name.c_str());
                return false;
            }
            const nlohmann::json basis = basisNow(name);
            latest.setResults(name, keepingLatency(latest, name, rows, basis), basis);
            latest.record("run", entry);
            return true;
        });
    }
    return 0;
}

int importance(const std::vector<std::string>& args) {
    Arguments a(args, {"kind", "samples", "seq-len", "model", "tokenizer", "device", "dtype", "step"}, {"quiet"});
    const std::string kind = a.value("kind", "heads.ablation");
    checkImportanceKind(kind);
    const nlohmann::json step = sensitivityStepOption(a, kind);
    CalibrationCompute compute = importanceCompute(a.value("device", "auto"), a.value("dtype"), kind);
    Project project = Project::open(a.requirePositional("PROJECT"));
    const ProjectSettings& s = project.settings();
    const std::string text = measurementText(s).path;
    if (text.empty()) throw Error(project.path(), "has neither calibration nor evaluation text to measure importance on");
    if (const std::string warning = evaluationStandInWarning(s); !warning.empty())
        std::fprintf(stderr, "warning: importance %s\n", warning.c_str());
    const LoadOptions load = projectLoadOptions(project, a);
    const std::string modelPath = a.value("model", project.model().path);
    auto model = loadModel(modelPath, load);
    requireTokenizer(*model, model->path);
    compute = autoFittedCompute(a, *model, compute);
    const std::string modelHash = checkedModelHash(project, modelPath, a, "importance map");
    const std::string tokenizerHash = warnOfTokenizerChange(project, load, *model);
    CalibrationSpec spec{text, a.integer("samples", 16), a.integer("seq-len", std::min<int64_t>(256, s.calibrationSeqLen)),
                         s.calibrationSeed};
    at::Tensor windows = drawCalibration(model->tokenizer->encode(readTextFile(text), model->tokenizer->addBosByDefault()), model->tokenizer->textBos(), spec,
                                         model->spec.context);
    CallbackFeedback feedback;
    if (!a.flag("quiet")) {
        std::fprintf(stderr, "importance %s on %s\n", kind.c_str(), describeCompute(compute).c_str());
        showProgress(feedback, "importance");
    }
    // The text as read now, not the hash the project recorded: it may have changed since.
    const std::string recordedTextHash = measurementText(s).hash;
    const std::string textHash = hashFile(text);
    if (!recordedTextHash.empty() && textHash != recordedTextHash)
        std::fprintf(stderr, "warning: %s changed since the project recorded it (hash %s, recorded %s): the map is of its "
                             "present content\n", text.c_str(), textHash.c_str(), recordedTextHash.c_str());
    ImportanceMap map;
    if (step.is_null()) {
        map = computeImportance(*model, kind, windows, &feedback, compute);
    } else {
        LayerSensitivity sensitivity = computeLayerSensitivity(*model, step, windows, &feedback, compute);
        map = kind == "layer" || kind == "linears.sensitivity" ? sensitivity.kl : sensitivity.deltaPerplexity;
    }
    map.measuredWith = importanceMeasurement(text, textHash, windows, spec.seed, compute, map.kind, step);
    if (modelHash != project.model().hash) map.measuredWith["model"] = {{"path", modelPath}, {"hash", modelHash}};
    nlohmann::json entry = {{"kind", map.kind}, {"samples", windows.size(0)}, {"seq_len", windows.size(1)}};
    if (!tokenizerHash.empty()) entry["tokenizer_hash"] = tokenizerHash;
    storeInLatest(project.path(), [&](Project& latest) {
        latest.setImportance(map);
        latest.record("importance", entry);
        return true;
    });
    if (!a.flag("quiet")) std::printf("stored %s (%zu x %zu) in %s\n", map.kind.c_str(), map.rowLabels.size(),
                                      map.columnLabels.size(), project.path().c_str());
    return 0;
}

} // namespace

// Changes a project's calibration and evaluation settings: other text files (e.g. after moving the project to another
// machine), window counts and sizes, context and chunks. Checked as create checks them; the stored results stay, with
// a warning when what they were measured with changed.
int setSettings(const std::vector<std::string>& args) {
    Arguments a(args, {"calib", "eval", "samples", "seq-len", "seed", "ctx", "chunks", "model", "tokenizer"}, {"no-calib"});
    Project project = Project::open(a.requirePositional("PROJECT"));
    // --model and --tokenizer say how to read the model that the settings are checked against; alone they set nothing
    // (the tokenizer was taken as a setting and "settings unchanged" followed, user probe).
    bool setsSomething = a.flag("no-calib");
    for (const char* option : {"calib", "eval", "samples", "seq-len", "seed", "ctx", "chunks"}) setsSomething = setsSomething || a.has(option);
    if (!setsSomething)
        throw Error(std::string("project set needs a setting to change (--calib, --eval, --samples, --seq-len, --seed, --ctx, --chunks)") +
                    (a.has("tokenizer") ? "; --tokenizer here only reads the model; to give the project a tokenizer: cwb project "
                                          "set-tokenizer PROJECT --tokenizer FILE" : ""));
    const ProjectSettings before = project.settings();
    ProjectSettings s = before;
    if (a.has("calib") && a.flag("no-calib")) throw Error("give --calib FILE or --no-calib, not both");
    if (a.has("calib")) s.calibration = fileReference(a.value("calib"));
    if (a.flag("no-calib")) s.calibration = {};
    if (a.has("eval")) s.evaluation = fileReference(a.value("eval"));
    s.calibrationSamples = a.integer("samples", s.calibrationSamples);
    s.calibrationSeqLen = a.integer("seq-len", s.calibrationSeqLen);
    s.calibrationSeed = seedOption(a, s.calibrationSeed);
    s.evalCtx = a.integer("ctx", s.evalCtx);
    if (a.has("chunks")) s.evalChunks = chunksOption(a);
    int64_t context = 0;
    // Another model read for its context: said when it is plainly not the recorded one (by size; hashing it is the
    // commands' that store results).
    const ModelReference& recorded = project.model();
    if (a.has("model") && absolute(a.value("model")) != recorded.path && recorded.bytes > 0 &&
        std::filesystem::is_regular_file(a.value("model")) && fileBytes(a.value("model")) != recorded.bytes)
        std::fprintf(stderr, "warning: %s is not the model the project recorded (it has %llu bytes; the recorded %s had %llu); "
                             "the settings are checked against its context, and the project still points at %s\n",
                     a.value("model").c_str(), static_cast<unsigned long long>(fileBytes(a.value("model"))), recorded.path.c_str(),
                     static_cast<unsigned long long>(recorded.bytes), recorded.path.c_str());
    try {
        context = loadModel(a.value("model", project.model().path), projectLoadOptions(project, a))->spec.context;
    } catch (const Error& e) {
        std::fprintf(stderr, "warning: the model could not be read, so sizes are not checked against its context (%s)\n",
                     errorText(e).c_str());
    }
    // A window size stored before create checked it (longer than the context) is clipped as drawing clips it,
    // not refused when the user did not give it.
    if (!a.has("seq-len") && context > 0 && s.calibrationSeqLen > context) {
        std::fprintf(stderr, "note: the stored calibration window of %lld tokens is clipped to the model's context of %lld\n",
                     static_cast<long long>(s.calibrationSeqLen), static_cast<long long>(context));
        s.calibrationSeqLen = context;
    }
    const std::string bad = settingsProblem(s, context);
    if (!bad.empty()) throw Error(bad);
    if (s == before) {
        std::printf("%s: settings unchanged\n", project.path().c_str());
        return 0;
    }
    project.setSettings(s);
    project.record("settings", {{"calibration", s.calibration.path}, {"evaluation", s.evaluation.path},
                                {"samples", s.calibrationSamples}, {"seq_len", s.calibrationSeqLen}, {"seed", s.calibrationSeed},
                                {"ctx", s.evalCtx}, {"chunks", s.evalChunks}});
    project.save();
    const bool evaluationChanged = s.evaluation.hash != before.evaluation.hash || s.evalCtx != before.evalCtx ||
                                   s.evalChunks != before.evalChunks;
    const bool calibrationChanged = s.calibration.hash != before.calibration.hash || s.calibrationSamples != before.calibrationSamples ||
                                    s.calibrationSeqLen != before.calibrationSeqLen || s.calibrationSeed != before.calibrationSeed;
    std::printf("%s: settings changed\n", project.path().c_str());
    if (!project.results().empty() && (evaluationChanged || calibrationChanged)) {
        // Judged by what each result was measured from: after `project run` measured a text edited in place, recording
        // that text leaves its results current (user probe: this warned that they were of the earlier text).
        std::vector<std::string> names = {Project::kBaseName};
        for (const auto& v : project.variants()) names.push_back(v.name);
        std::string outdated, unknown;   // results of a build before schema 3 carry no basis to judge by
        for (const auto& name : names) {
            if (project.results(name).empty()) continue;
            if (project.resultBasis(name).is_null()) unknown += (unknown.empty() ? "" : ", ") + name;
            else if (!project.resultsOutdatedBy(name).empty()) outdated += (outdated.empty() ? "" : ", ") + name;
        }
        const std::string unrecorded = " carry no record of what they were measured from and may be of the earlier settings";
        if (!outdated.empty())
            std::fprintf(stderr, "warning: the stored results of %s are out of date with these settings%s; `cwb project run` "
                                 "measures them again\n", outdated.c_str(),
                         unknown.empty() ? "" : ("; those of " + unknown + unrecorded).c_str());
        else if (!unknown.empty())
            std::fprintf(stderr, "warning: the stored results of %s%s; `cwb project run` measures them again\n", unknown.c_str(),
                         unrecorded.c_str());
    }
    return 0;
}

// Records that `cwb --batch` should write this variant in a format (the file lands in the batch's --out folder).
int addExport(const std::vector<std::string>& args) {
    Arguments a(args, {"variant", "format", "type", "requantize", "file", "model", "tokenizer"}, {"pack-head"});
    Project project = Project::open(a.requirePositional("PROJECT"));
    if (!a.has("variant") || !a.has("format")) throw Error("project add-export needs --variant V and --format hf|gptq|awq|compressed-tensors|gguf");
    const std::string name = a.value("variant"), format = a.value("format");
    if (name == Project::kBaseName)   // exports are kept per variant; the base has no recipe to keep one with
        throw Error("project add-export records exports of variants; write the base with `cwb export " + project.path() +
                    " --format " + format + " --out PATH` (or add a variant with an empty recipe)");
    const Variant& v = project.variant(name);
    if (!ExportFormatRegistry::instance().byId(format)) throw Error("unknown export format '" + format + "' (hf, gptq, awq, compressed-tensors, gguf)");
    std::string file = a.value("file", name + (format == "gguf" ? ".gguf" : "-" + format));
    if (!exportEntriesProblem(nlohmann::json::array({{{"format", format}, {"file", file}}})).empty() || file.find("..") != std::string::npos)
        throw Error("--file must be a plain file or folder name, got '" + file + "'");
    nlohmann::json exports = v.exports;
    for (const auto& e : exports)
        if (e.value("file", "") == file) throw Error("variant " + name + " already exports to '" + file + "'");
    for (const auto& other : project.variants())   // --batch writes every export into one folder
        for (const auto& e : other.exports)
            if (e.value("file", "") == file)
                throw Error("variant " + other.name + " already exports to '" + file + "'; give this one another --file");
    ExportOptions options;
    options.tensorType = a.value("type");
    options.requantizeType = a.value("requantize");
    options.packHead = a.flag("pack-head");
    const std::string problem = exportOptionsProblem(format, options);   // now, not when --batch writes it
    if (!problem.empty()) throw Error("export as " + format + ": " + problem);
    // What the variant's recipe makes, judged now against the model's layers: a layout that cannot hold it would
    // otherwise fail only when --batch reaches the export, after building and measuring the variant.
    std::unique_ptr<Model> base;
    try {
        base = loadModel(a.value("model", project.model().path), projectLoadOptions(project, a));
    } catch (const Error& e) {
        std::fprintf(stderr, "warning: the export is recorded unchecked: the model could not be read (%s)\n", errorText(e).c_str());
    }
    if (base) {
        const std::string why = exportRecipeProblem(*base, ProjectRunner(project, *base).fullRecipe(name), format);
        if (!why.empty()) throw Error("variant " + name + " cannot be exported as " + format + ": " + why);
    }
    nlohmann::json entry = {{"format", format}, {"file", file}};
    if (a.has("type")) entry["type"] = a.value("type");
    if (a.has("requantize")) entry["requantize"] = a.value("requantize");
    if (options.packHead) entry["pack_head"] = true;
    exports.push_back(entry);
    project.setExports(name, exports);
    project.record("add-export", {{"variant", name}, {"export", entry}});
    project.save();
    return 0;
}

// Gives the project's model the tokenizer of FILE in place of its own (or, with --own, its own again), as the GUI's
// Project > Use Tokenizer File does: the model is read with it first, so a tokenizer it cannot use is refused.
int setTokenizer(const std::vector<std::string>& args) {
    Arguments a(args, {"tokenizer", "model"}, {"own"});
    Project project = Project::open(a.requirePositional("PROJECT"));
    if (a.has("tokenizer") && a.flag("own"))
        throw Error("project set-tokenizer takes --tokenizer FILE or --own, not both");
    if (!a.has("tokenizer") && !a.flag("own"))
        throw Error("project set-tokenizer needs --tokenizer FILE (a tokenizer.json, its folder or a llama2.c .bin) or --own");
    ModelReference ref = project.model();
    ref.tokenizer = a.flag("own") ? std::string() : absolute(a.value("tokenizer"));
    auto model = loadModel(a.value("model", ref.path), ref.loadOptions());
    ref.tokenizerHash = tokenizerHashToRecord(*model, ref.tokenizer);
    if (ref == project.model()) {
        std::printf("%s already uses %s\n", project.path().c_str(), ref.tokenizer.empty() ? "the model's own tokenizer" : ref.tokenizer.c_str());
        return 0;
    }
    project.setModel(ref);
    project.record("tokenizer", {{"path", ref.tokenizer}, {"hash", ref.tokenizerHash}});
    project.save();
    std::printf("%s: tokenizer %s%s\n", project.path().c_str(), ref.tokenizer.empty() ? "of the model" : ref.tokenizer.c_str(),
                ref.tokenizerHash.empty() ? "" : (" (" + ref.tokenizerHash + ")").c_str());
    // Only results the change leaves out of date are said (user probe: back to the tokenizer they were measured with,
    // the warning still said they were of the earlier one, while show and --batch found them current).
    std::vector<std::string> outdated;
    std::vector<std::string> names{Project::kBaseName};
    for (const auto& v : project.variants()) names.push_back(v.name);
    for (const auto& name : names)
        if (!project.results(name).empty() && !project.resultsOutdatedBy(name).empty()) outdated.push_back(name);
    if (!outdated.empty())
        std::fprintf(stderr, "warning: the stored results of %s were measured with another tokenizer; `cwb project run` "
                             "measures them again\n", joined(outdated, ", ").c_str());
    return 0;
}

int runProjectCommand(const std::vector<std::string>& args) {
    if (args.empty()) throw Error("project needs a subcommand: create, show, add-variant, add-export, set, set-tokenizer, run, importance");
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    if (args[0] == "create") return create(rest);
    if (args[0] == "show") return show(rest);
    if (args[0] == "add-variant") return addVariant(rest);
    if (args[0] == "run") return runProject(rest);
    if (args[0] == "importance") return importance(rest);
    if (args[0] == "add-export") return addExport(rest);
    if (args[0] == "set-tokenizer") return setTokenizer(rest);
    if (args[0] == "set") return setSettings(rest);
    throw Error("unknown project subcommand '" + args[0] +
                "' (create, show, add-variant, add-export, set, set-tokenizer, run, importance)");
}

} // namespace cwb::cli
