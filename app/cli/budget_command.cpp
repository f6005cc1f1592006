#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/cli/arguments.h"
#include "app/cli/commands.h"
#include "core/analysis/budget.h"
#include "core/analysis/importance.h"
#include "core/compress/pipeline.h"
#include "core/eval/perplexity.h"
#include "core/io/model_format.h"
#include "core/project/file_hash.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "core/util/json_text.h"

namespace cwb::cli {

int runBudget(const std::vector<std::string>& args) {
    Arguments a(args, {"text", "target-bits", "target-bytes", "bits", "group-size", "method", "params", "samples", "seq-len", "seed", "out", "threads", "tokenizer", "device", "dtype"}, {"json", "quiet", "fused", "head"});
    applyThreads(a.integer("threads", 0));
    const std::string path = a.requirePositional("MODEL");
    if (!a.has("text")) throw Error("budget needs --text FILE (the text whose windows the layers are measured on)");
    if (a.has("target-bits") == a.has("target-bytes"))
        throw Error("budget needs one of --target-bits B or --target-bytes N" +
                    std::string(a.has("target-bits") ? " (both were given)" : ""));
    if (a.has("out")) checkOutputFile(a.value("out"));   // before the measurements, which take long
    BudgetOptions options;
    options.compute = importanceCompute(a.value("device", "auto"), a.value("dtype"), "linears.sensitivity");
    // Every option is checked before the model is read.
    const double targetBytes = a.has("target-bytes") ? a.number("target-bytes", 0) : 0;
    if (a.has("target-bytes") && !(targetBytes > 0)) throw Error("--target-bytes must be a positive number of bytes");
    if (a.has("target-bits")) {
        options.targetBitsPerWeight = a.number("target-bits", 4.5);
        if (!(options.targetBitsPerWeight > 0)) throw Error("--target-bits must be a positive number of bits per weight");
    }
    options.groupSize = a.integer("group-size", 32);
    options.method = a.value("method", "quantize.rtn");
    options.fuseSharedInputs = a.flag("fused");
    options.includeHead = a.flag("head");
    if (a.has("params")) {
        try {
            options.params = parseWrittenJson(a.value("params"));
        } catch (const std::exception& e) {
            throw Error(std::string("--params must be a JSON object: ") + e.what());
        }
        if (!options.params.is_object()) throw Error("--params must be a JSON object, e.g. '{\"act_order\":true}'");
        // The widths and the group size are the plan's own options: given here they were silently replaced.
        for (const char* own : {"bits", "group_size"})
            if (options.params.contains(own))
                throw Error(std::string("--params: \"") + own + "\" is set by " +
                            (std::string(own) == "bits" ? "--bits (the widths to choose from)" : "--group-size"));
    }
    if (a.has("bits")) {
        options.bits.clear();
        std::stringstream list(a.value("bits"));
        for (std::string b; std::getline(list, b, ',');) {
            if (b.empty()) continue;
            const int bits = b.size() == 1 && b[0] >= '2' && b[0] <= '8' ? b[0] - '0' : 0;
            if (bits == 0) throw Error("--bits: each width must be a whole number of bits 2..8, got '" + b + "'");
            if (std::find(options.bits.begin(), options.bits.end(), bits) != options.bits.end())
                throw Error("--bits: " + b + " is listed twice");
            options.bits.push_back(bits);
        }
    }
    {   // with a byte target the target itself is checked once the parameters are counted
        BudgetOptions early = options;
        if (a.has("target-bytes")) early.targetBitsPerWeight = 1e9;
        checkBudgetOptions(early);
    }
    LoadOptions load;
    load.tokenizerPath = a.value("tokenizer");
    auto model = loadModel(path, load);
    requireTokenizer(*model, path);
    options.compute = autoFittedCompute(a, *model, options.compute);
    // The plan covers the block linear layers (and the output head with --head); embeddings and norms keep their bytes.
    const double parameters = plannedParameters(*model, options);
    if (a.has("target-bytes")) {
        // Bytes of the planned layers as stored (levels, scales, zeros) -> the same budget in bits per weight.
        options.targetBitsPerWeight = 8.0 * targetBytes / parameters;
        checkBudgetOptions(options);
    }
    std::string calibrationNote;   // printed now (a long measurement follows); in --json's notes
    const at::Tensor windows = windowsFromText(a, a.value("text"), *model, 8, &calibrationNote);
    const std::string textHash = a.flag("json") ? hashFile(a.value("text")) : "";   // as read, not after a long run
    CallbackFeedback feedback;
    if (!a.flag("quiet") && !a.flag("json")) {
        std::fprintf(stderr, "budget: measuring on %s\n", describeCompute(options.compute).c_str());
        showProgress(feedback, "budget: measuring");
    }
    BudgetPlan plan = solveBitBudget(*model, windows, options, &feedback);
    if (a.has("out")) {
        const std::filesystem::path parent = std::filesystem::path(a.value("out")).parent_path();
        if (!parent.empty()) makeOutputFolder(parent.string());
        plan.recipe.save(a.value("out"));
    }
    // Where the plan can go: a GPTQ or AWQ folder holds one bit width; GGUF holds one per layer; compressed-tensors one
    // per layer of 2, 4 or 8 bits, with q/k/v and gate/up in one scheme (--fused).
    std::set<int> widths;
    for (const auto& [layer, bits] : plan.bits) widths.insert(bits);
    std::vector<std::string> notes;
    if (widths.size() > 1) {
        std::string list;
        for (int w : widths) list += (list.empty() ? "" : ", ") + std::to_string(w);
        const bool ctWidths = std::all_of(widths.begin(), widths.end(), [](int w) { return w == 2 || w == 4 || w == 8; });
        const std::string holders = ctWidths && options.fuseSharedInputs
                                        ? "a GGUF or compressed-tensors export holds it"
                                        : std::string("a GGUF export holds it (compressed-tensors: ") +
                                              (ctWidths ? "only a plan made with --fused, whose q/k/v and gate/up share a width"
                                                        : "2, 4 and 8 bits only") + ")";
        notes.push_back("the plan mixes " + std::to_string(widths.size()) + " bit widths (" + list + "): " + holders +
                        "; a GPTQ or AWQ folder holds one width only");
    }
    for (const auto& n : notes) std::fprintf(stderr, "note: %s\n", n.c_str());
    if (a.flag("json")) {
        nlohmann::json layers = nlohmann::json::array();
        for (const auto& l : plan.layers) {
            nlohmann::json o = nlohmann::json::array();
            for (const auto& opt : l.options) o.push_back({{"bits", opt.bits}, {"bits_per_weight", opt.bitsPerWeight}, {"kl", opt.cost}});
            layers.push_back({{"layer", l.name}, {"parameters", l.parameters}, {"chosen", plan.bits.at(l.name)}, {"options", o}});
        }
        nlohmann::json out = {{"method", options.method}, {"target_bits_per_weight", options.targetBitsPerWeight},
                              {"bits_per_weight", plan.bitsPerWeight}, {"linear_parameters", parameters},
                              {"linear_bytes", plan.bitsPerWeight * parameters / 8.0}, {"predicted_kl_sum", plan.predictedCost},
                              {"computed_on", describeCompute(options.compute)}, {"layers", layers}, {"recipe", plan.recipe.toJson()}};
        if (!calibrationNote.empty()) notes.insert(notes.begin(), calibrationNote);
        out["notes"] = notes;
        if (a.has("target-bytes")) out["target_bytes"] = targetBytes;   // of the planned layers, as linear_bytes
        // What the costs were measured on, as `importance --json` records it.
        out["measured_with"] = importanceMeasurement(a.value("text"), textHash, windows, a.unsignedInteger("seed", 0),
                                                     options.compute);
        std::cout << jsonText(out)
                  << "\n";
        return 0;
    }
    for (const auto& [layer, bits] : plan.bits) std::printf("%-44s %d bits\n", layer.c_str(), bits);
    std::printf("plan: %.3f bits per weight (target %.3f), %.0f bytes of %s, summed single-layer KL %.5f%s\n",
                plan.bitsPerWeight, options.targetBitsPerWeight, plan.bitsPerWeight * parameters / 8.0,
                options.includeHead ? "the block linear layers and the output head (embeddings and norms not counted)"
                                    : "block linear layers (embeddings, output head and norms not counted)",
                plan.predictedCost,
                a.has("out") ? (", recipe written to " + a.value("out")).c_str() : "");
    return 0;
}

} // namespace cwb::cli
