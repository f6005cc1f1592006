#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "app/cli/arguments.h"
#include "app/cli/commands.h"
#include "core/analysis/importance.h"
#include "core/compress/pipeline.h"
#include "core/eval/perplexity.h"
#include "core/io/model_format.h"
#include "core/project/file_hash.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "core/util/json_text.h"

namespace cwb::cli {

namespace {
constexpr size_t kWidestTable = 64;   // columns printed as a table; wider maps get a line of spread per row
constexpr size_t kLowestShown = 8;
} // namespace

nlohmann::json sensitivityStepOption(const Arguments& a, const std::string& kind) {
    if (!a.has("step")) return nullptr;
    // --step '{"method": ..., "params": {...}}' or a file holding it: per-layer sensitivity to that step.
    const bool layerKind = kind == "layer" || kind == "linears.sensitivity" || kind == "layer-ppl" || kind == "linears.delta_ppl";
    if (!layerKind) throw Error("--step applies to --kind layer or layer-ppl");
    const std::string text = a.value("step");
    const size_t first = text.find_first_not_of(" \t\r\n");
    const bool inline_ = first != std::string::npos && (text[first] == '{' || text[first] == '[');
    std::error_code ec;
    if (!inline_ && !std::filesystem::is_regular_file(text, ec))   // it said "cannot open the text file" (user probe)
        throw Error(text, "no such step file (--step takes a recipe step as JSON, or a file holding one)");
    nlohmann::json step;
    try {
        step = parseWrittenJson(inline_ ? text : readTextFile(text));
    } catch (const std::exception& e) {
        throw Error(inline_ ? "--step" : text, std::string("--step is not valid JSON: ") + e.what());
    }
    if (step.is_object() && (step.contains("targets") || step.contains("ignore")))
        throw Error("--step: \"targets\" and \"ignore\" do not apply (every linear layer is measured, one at a time)");
    checkSensitivityStep(step);   // a bad method or parameter fails now, not after the model is read
    return step;
}

int runImportance(const std::vector<std::string>& args) {
    Arguments a(args, {"kind", "text", "calib", "samples", "seq-len", "seed", "threads", "step", "tokenizer", "device", "dtype"},
                {"json", "quiet"});
    applyThreads(a.integer("threads", 0));
    const std::string path = a.requirePositional("MODEL");
    // --calib (the spelling, as in compress) and --text name the same thing.
    if (a.has("calib") && a.has("text")) throw Error("--calib and --text name the same thing; give one");
    const std::string calibText = a.value("calib", a.value("text"));
    if (calibText.empty()) throw Error("importance needs --calib FILE (the text whose token windows it measures on)");
    const std::string kind = a.value("kind", "heads.ablation");
    checkImportanceKind(kind);   // before the model is read
    CalibrationCompute compute = importanceCompute(a.value("device", "auto"), a.value("dtype"), kind);
    const nlohmann::json step = sensitivityStepOption(a, kind);
    LoadOptions load;
    load.tokenizerPath = a.value("tokenizer");
    auto model = loadModel(path, load);
    compute = autoFittedCompute(a, *model, compute);
    std::string calibrationNote;
    const at::Tensor windows = windowsFromText(a, calibText, *model, 16, &calibrationNote);
    const std::string textHash = a.flag("json") ? hashFile(calibText) : "";   // as read, not after a long run
    CallbackFeedback feedback;
    if (!a.flag("quiet") && !a.flag("json")) {
        std::fprintf(stderr, "importance %s on %s\n", a.has("step") ? (kind + " (per-layer sensitivity to --step)").c_str() : kind.c_str(),
                     describeCompute(compute).c_str());
        showProgress(feedback, "importance");
    }
    ImportanceMap map;
    if (a.has("step")) {
        LayerSensitivity s = computeLayerSensitivity(*model, step, windows, &feedback, compute);
        map = kind == "layer" || kind == "linears.sensitivity" ? s.kl : s.deltaPerplexity;
    } else {
        map = computeImportance(*model, kind, windows, &feedback, compute);
    }
    if (a.flag("json")) {
        const nlohmann::json measured = importanceMeasurement(calibText, textHash, windows,
                                                              a.unsignedInteger("seed", 0), compute, map.kind, step);
        std::cout << jsonText({{"kind", map.kind}, {"computed_on", describeCompute(compute)}, {"measured_with", measured},
                               {"rows", map.rowLabels}, {"columns", map.columnLabels}, {"values", map.values},
                               {"notes", calibrationNote.empty() ? std::vector<std::string>{} : std::vector<std::string>{calibrationNote}}})
                  << "\n";
        return 0;
    }
    const size_t columns = map.columnLabels.size();
    if (columns > kWidestTable) {
        // A channel map of a 7B model has 11008 columns a row: a line per row of its spread and least important
        // columns (what pruning would take first); --json has every value.
        std::printf("%s: %zu rows x %zu columns; per row the spread and the %zu lowest (--json gives every value)\n",
                    map.kind.c_str(), map.rowLabels.size(), columns, kLowestShown);
        std::printf("%-10s %10s %10s %10s  lowest (column value)\n", "", "min", "median", "max");
        for (size_t r = 0; r < map.rowLabels.size(); ++r) {
            const double* row = map.values.data() + r * columns;
            std::vector<size_t> order(columns);
            std::iota(order.begin(), order.end(), size_t(0));
            // NaN last (a strict weak order; `<` alone is not one with NaN in the row).
            std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
                const bool nx = std::isnan(row[x]), ny = std::isnan(row[y]);
                if (nx != ny) return ny;
                return (!nx && row[x] < row[y]) || ((nx || row[x] == row[y]) && x < y);
            });
            const double median = columns % 2 ? row[order[columns / 2]] : 0.5 * (row[order[columns / 2 - 1]] + row[order[columns / 2]]);
            std::printf("%-10s %10.5f %10.5f %10.5f ", map.rowLabels[r].c_str(), row[order.front()], median, row[order.back()]);
            for (size_t k = 0; k < std::min(kLowestShown, columns); ++k)
                std::printf(" %s %.5g", map.columnLabels[order[k]].c_str(), row[order[k]]);
            std::printf("\n");
        }
        return 0;
    }
    std::printf("%-10s", map.kind.c_str());
    for (const auto& c : map.columnLabels) std::printf(" %10s", c.c_str());
    std::printf("\n");
    for (size_t r = 0; r < map.rowLabels.size(); ++r) {
        std::printf("%-10s", map.rowLabels[r].c_str());
        for (size_t c = 0; c < map.columnLabels.size(); ++c) std::printf(" %10.5f", map.values[r * map.columnLabels.size() + c]);
        std::printf("\n");
    }
    return 0;
}

} // namespace cwb::cli
