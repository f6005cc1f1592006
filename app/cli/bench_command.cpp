#include <c10/core/DeviceGuard.h>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "app/cli/arguments.h"
#include "app/cli/commands.h"
#include "core/compress/pipeline.h"
#include "core/io/model_format.h"
#include "core/project/project.h"
#include "core/project/project_runner.h"
#include "core/runtime/cuda_linear.h"
#include "core/runtime/fused_decode.h"
#include "core/runtime/latency.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "core/util/json_text.h"

namespace cwb::cli {

namespace {

nlohmann::json toJson(const LatencyResult& r, size_t weightBytes, double copyBandwidth) {
    nlohmann::json j = {{"load_seconds", r.loadSeconds},       {"prefill_seconds", r.prefillSeconds},
                        {"prefill_tokens_per_second", r.prefillTokensPerSecond},
                        {"decode_ms_p50", r.decodeP50Ms},      {"decode_ms_p99", r.decodeP99Ms},
                        {"decode_ms_mean", r.decodeMeanMs},    {"decode_weight_bytes", weightBytes},
                        {"peak_device_bytes", r.peakDeviceBytes}, {"compressed_layers", r.layerPaths},
                        {"decode_graphs", r.decodeGraphs}, {"first_decode_step_ms", r.firstDecodeMs},
                        {"prefill_warmup_runs", r.prefillWarmupRuns}};
    if (!r.decodeGraphFailure.empty()) j["decode_graph_failure"] = r.decodeGraphFailure;
    if (!r.decodeAttentionPlan.empty()) j["decode_attention"] = r.decodeAttentionPlan;
    if (!r.cpuWeightPlan.empty()) j["cpu_weight_plan"] = r.cpuWeightPlan;
    if (r.peakDeviceBytes < 0) j["cpu_packed_int"] = r.cpuPackedInt;   // what options.cpu_packed_int resolved to
    if (r.eagerDecodeP50Ms >= 0) {
        j["decode_eager_ms_p50"] = r.eagerDecodeP50Ms;
        j["decode_eager_ms_p99"] = r.eagerDecodeP99Ms;
    }
    if (copyBandwidth > 0) {
        const double floorMs = double(weightBytes) / copyBandwidth * 1e3;
        j["weight_read_floor_ms"] = floorMs;
        j["decode_p50_over_floor"] = r.decodeP50Ms / floorMs;
        if (r.eagerDecodeP50Ms >= 0) j["decode_eager_p50_over_floor"] = r.eagerDecodeP50Ms / floorMs;
    }
    return j;
}

void printRow(const char* name, const nlohmann::json& j) {
    std::printf("%-8s prefill %9.0f tok/s   decode p50 %8.3f ms  p99 %8.3f ms", name,
                j["prefill_tokens_per_second"].get<double>(), j["decode_ms_p50"].get<double>(), j["decode_ms_p99"].get<double>());
    std::printf("   load %.1f s", j["load_seconds"].get<double>());
    if (j.contains("weight_read_floor_ms"))
        std::printf("   floor %7.3f ms (x%.2f)", j["weight_read_floor_ms"].get<double>(), j["decode_p50_over_floor"].get<double>());
    if (j["peak_device_bytes"].get<int64_t>() >= 0)
        std::printf("   peak %.2f GiB", double(j["peak_device_bytes"].get<int64_t>()) / double(1 << 30));
    std::printf("\n");
    if (!j["compressed_layers"].get<std::string>().empty())
        std::printf("         compressed layers: %s\n", j["compressed_layers"].get<std::string>().c_str());
    if (j.contains("cpu_weight_plan"))
        std::printf("         weights: %s\n", j["cpu_weight_plan"].get<std::string>().c_str());
    if (j.contains("decode_eager_ms_p50")) {
        std::printf("         decode with CUDA graphs; without (--no-graphs): p50 %8.3f ms  p99 %8.3f ms",
                    j["decode_eager_ms_p50"].get<double>(), j["decode_eager_ms_p99"].get<double>());
        if (j.contains("decode_eager_p50_over_floor"))
            std::printf(" (x%.2f floor)", j["decode_eager_p50_over_floor"].get<double>());
        std::printf("; graphs %.2fx faster\n", j["decode_eager_ms_p50"].get<double>() / j["decode_ms_p50"].get<double>());
    }
    if (j.contains("decode_graph_failure"))
        std::printf("         decode without CUDA graphs: %s\n", j["decode_graph_failure"].get<std::string>().c_str());
    if (j.contains("decode_attention"))
        std::printf("         decode attention: %s\n", j["decode_attention"].get<std::string>().c_str());
}

// prompt + generated as one number where the sum fits, else as "P + G".
std::string tokenCount(int64_t prompt, int64_t generated) {
    const bool fits = prompt >= 0 && generated >= 0 && prompt <= std::numeric_limits<int64_t>::max() - generated;
    return fits ? std::to_string(prompt + generated) : std::to_string(prompt) + " + " + std::to_string(generated);
}

// An on/off switch given as --NAME or --no-NAME (not both); neither: `fallback`.
bool onOffFlag(const Arguments& a, const std::string& name, bool fallback) {
    if (a.flag(name) && a.flag("no-" + name)) throw Error("--" + name + " and --no-" + name + " contradict each other");
    return a.flag(name) ? true : a.flag("no-" + name) ? false : fallback;
}

} // namespace

int runBench(const std::vector<std::string>& args) {
    Arguments a(args,
                {"recipe", "variant", "model", "calib", "samples", "seq-len", "synthetic", "layers", "context", "format",
                 "bits", "group-size", "batch",
                 "prompt-tokens", "gen-tokens", "repeats", "prefill-warmup", "seed", "threads", "tokenizer", "device", "dtype"},
                {"json", "no-native", "no-graphs", "no-fused-decode", "no-dense-gemv", "no-fused-attention",
                 "fused-norm-gemv", "no-fused-norm-gemv", "fused-swiglu-gemv", "no-fused-swiglu-gemv",
                 "fused-int-linear", "no-fused-int-linear", "sparse24-gemv", "no-sparse24-gemv", "sparse24-keep-dense",
                 "no-sparse24-keep-dense", "fused-projections", "no-fused-projections", "cpu-packed", "no-cpu-packed",
                 "quantize-head"});
    applyThreads(a.integer("threads", 0));
    RuntimeOptions options = runtimeOptions(a);
    options.nativeKernels = !a.flag("no-native");
    if (a.flag("no-graphs")) options.decode = DecodeMode::Eager;
    options.fusedDecode = !a.flag("no-fused-decode");
    options.fusedAttention = !a.flag("no-fused-attention");
    options.denseGemv = !a.flag("no-dense-gemv");
    options.fusedNormGemv = onOffFlag(a, "fused-norm-gemv", options.fusedNormGemv);
    options.fusedSwiGluGemv = onOffFlag(a, "fused-swiglu-gemv", options.fusedSwiGluGemv);
    options.fusedIntLinear = onOffFlag(a, "fused-int-linear", options.fusedIntLinear);
    options.fuseNativeProjections = onOffFlag(a, "fused-projections", options.fuseNativeProjections);
    if (a.flag("cpu-packed") || a.flag("no-cpu-packed"))
        options.cpuPackedInt = onOffFlag(a, "cpu-packed", false) ? CpuPackedInt::On : CpuPackedInt::Off;
    options.sparse24Gemv = onOffFlag(a, "sparse24-gemv", options.sparse24Gemv);
    options.sparse24KeepDense = onOffFlag(a, "sparse24-keep-dense", options.sparse24KeepDense);
    LatencyParams p;
    p.batch = a.integer("batch", 1);
    p.promptTokens = a.integer("prompt-tokens", 128);
    p.genTokens = a.integer("gen-tokens", 64);
    p.prefillRepeats = a.integer("repeats", 3);
    p.prefillWarmupSeconds = a.number("prefill-warmup", p.prefillWarmupSeconds);
    p.seed = a.unsignedInteger("seed", 0);
    const bool json = a.flag("json");

    // Base and variant: a model file with --recipe, or --synthetic shapes with random INT levels.
    std::unique_ptr<Model> base, variant;
    std::string variantName;
    const std::string synthetic = a.value("synthetic");
    if (a.has("context") && synthetic.empty())
        throw Error("--context applies to --synthetic shapes only (a model's context is its own)");
    // Options of the other ways to make a variant are refused where they would be ignored.
    if (a.flag("quantize-head") && (synthetic.empty() || a.value("format", "int") != "int"))
        throw Error("--quantize-head applies to the int format of --synthetic shapes (for a model, quantize.rtn's \"head\" "
                    "parameter in the recipe)");
    for (const char* option : {"layers", "format", "bits", "group-size"})
        if (a.has(option) && synthetic.empty())
            throw Error(std::string("--") + option + " applies to --synthetic shapes only (for a model, --recipe FILE makes the variant)");
    // --synthetic makes its variant from --format and --bits: a recipe or project variant given too was ignored (the
    // user took the figures for the recipe's, user probe).
    for (const char* option : {"recipe", "variant", "model", "tokenizer"})
        if (a.has(option) && !synthetic.empty())
            throw Error(std::string("--") + option + " does not apply to --synthetic shapes (their variant is made by --format, "
                        "--bits and --group-size; for a recipe, bench a model file)");
    for (const char* option : {"calib", "samples", "seq-len"})
        if (a.has(option) && !a.has("recipe"))
            throw Error(std::string("--") + option + " calibrates the variant --recipe FILE makes; without --recipe there is none");
    if (!synthetic.empty()) {
        const SyntheticShape& shape = syntheticShape(synthetic);
        const std::string format = a.value("format", "int");
        if (format != "int" && format != "fp8" && format != "w8a8" && format != "w8a8-folded" && format != "sparse24")
            throw Error("--format is int, fp8, w8a8, w8a8-folded or sparse24, got '" + format + "'");
        const int64_t context = a.has("context") ? a.integer("context", 0) : 0;
        if (a.has("context") && context < 1) throw Error("--context must be at least 1, got " + std::to_string(context));
        const int64_t positions = syntheticContext(shape, context);   // at most kMaxSyntheticContext
        // Refused before the weights are made; each count is compared first, so that the sum cannot overflow.
        if (p.promptTokens > positions || p.genTokens > positions || p.promptTokens + p.genTokens > positions)
            throw Error("bench: " + tokenCount(p.promptTokens, p.genTokens) + " tokens exceed the context of " +
                        std::to_string(positions) + " of --synthetic " + synthetic +
                        (context > 0 ? "" : " (--context N gives a synthetic model a longer one)"));
        // The INT variant's bits checked before the weights are made, and before the narrowing to int (4294967300 ran
        // as 4 bits).
        const int64_t bits = a.integer("bits", 4);
        if (format == "int" && (bits < 2 || bits > 8))
            throw Error("--bits must be between 2 and 8, got " + std::to_string(bits));
        const at::Device device = options.device.is_cuda() ? options.device : at::Device(at::kCPU);
        base = syntheticLlama(synthetic, a.integer("layers", shape.defaultLayers), device, p.seed, context);
        if (format == "int") {
            const int64_t group = a.integer("group-size", 128);
            const bool head = a.flag("quantize-head");
            variant = randomIntVariant(*base, static_cast<int>(bits), group, device, p.seed, head);
            variantName = "int" + std::to_string(bits) + " g" + std::to_string(group) + (head ? ", head too" : "") + " (random levels)";
        } else if (format == "sparse24") {
            variant = sparse24Variant(*base, device);
            variantName = "2:4 magnitude-pruned fp16";
        } else if (format == "fp8") {
            variant = randomFp8Variant(*base, device, p.seed);
            variantName = "fp8 e4m3, dynamic activations (random codes)";
        } else {
            const bool folded = format == "w8a8-folded";
            variant = randomW8a8Variant(*base, device, p.seed, folded);
            variantName = folded ? "w8a8, smoothing folded into the norms (random codes)" : "w8a8 smoothquant (random codes)";
        }
    } else if (isProjectPath(a.positional().empty() ? "" : a.positional().front())) {
        // A project: its model, and with --variant one of its variants built by its pipeline.
        if (a.has("recipe")) throw Error("--recipe applies to a model; a project's variants carry their own recipes");
        const std::string path = a.positional().front();
        Project project = Project::open(path, Project::Access::ReadOnly);
        base = loadModel(a.value("model", project.model().path), projectLoadOptions(project, a));
        const std::string name = a.value("variant", "base");
        if (name != "base") {
            CallbackFeedback build;
            build.logCallback = [json](const std::string& line) {
                if (!json) std::fprintf(stderr, "  %s\n", line.c_str());
            };
            ProjectRunner runner(project, *base);
            variant = runner.build(name, &build);
            variantName = path + " variant " + name;
        }
    } else {
        if (a.has("variant")) throw Error("--variant needs a project (.cwbproj); for a model use --recipe");
        LoadOptions load;
        load.tokenizerPath = a.value("tokenizer");
        const std::string path = a.requirePositional("MODEL (or PROJECT, or --synthetic llama-7b|llama-70b|llama3-8b|llama3-70b)");
        base = loadModel(path, load);
        if (a.has("recipe")) {
            CalibrationSpec calib;
            calib.textPath = a.value("calib");
            calib.samples = a.integer("samples", 128);
            calib.seqLen = a.integer("seq-len", 512);
            calib.seed = p.seed;
            variant = std::move(compressModel(*base, Recipe::load(a.value("recipe")), calib).model);
            variantName = a.value("recipe");
        }
    }

    // One memory baseline for both models, the variant first: LibTorch keeps freed blocks cached, so the smaller
    // model measured second would show the larger one's memory. The copy bandwidth is measured last for the same reason.
    if (options.device.is_cuda()) {
        at::empty({1}, at::TensorOptions().device(options.device)).zero_();   // creates the CUDA context
        p.deviceMemoryBaseline = deviceMemoryUsedBytes();
    }
    const bool fusedAttention = Transformer::fusedAttentionFor(options);
    nlohmann::json report = {{"device", options.device.str()}, {"dtype", c10::toString(options.dtype)},
                             {"batch", p.batch}, {"prompt_tokens", p.promptTokens}, {"gen_tokens", p.genTokens},
                             {"model", base->path}, {"layers", base->spec.layers},
                             {"options", {{"native_kernels", options.nativeKernels}, {"fused_decode", options.fusedDecode},
                                          {"dense_gemv", options.denseGemv}, {"fused_norm_gemv", options.fusedNormGemv},
                                          {"fused_swiglu_gemv", options.fusedSwiGluGemv},
                                          {"fused_int_linear", options.fusedIntLinear},
                                          {"sparse24_gemv", options.sparse24Gemv},
                                          {"sparse24_keep_dense", options.sparse24KeepDense},
                                          {"fused_projections", options.fuseNativeProjections},
                                          {"cpu_packed_int", cpuPackedIntName(options.cpuPackedInt)},
                                          {"dependent_launch", decodeDependentLaunch()},
                                          {"fused_attention", options.fusedAttention}}},
                             {"prefill_attention", fusedAttention ? "scaled_dot_product_attention" : "reference"}};
    std::optional<LatencyResult> variantResult;
    if (variant) {
        if (!json) std::fprintf(stderr, "bench: variant %s\n", variantName.c_str());
        variantResult = measureLatency(*variant, options, p);
    }
    if (!json) std::fprintf(stderr, "bench: base\n");
    const LatencyResult baseResult = measureLatency(*base, options, p);
    const double copyBandwidth = options.device.is_cuda() ? measureCopyBandwidth(options.device) : 0;
    if (copyBandwidth > 0) report["copy_bandwidth_gbs"] = copyBandwidth / 1e9;
    if (options.device.is_cuda() && nativeKernelsBuilt()) {
        // Below the GPU's own under CWB_CUDA_CAPABILITY or a build without code for it: the paths of a lower GPU.
        c10::DeviceGuard onBenchDevice(options.device);
        report["kernel_capability"] = kernelDispatchCapability();
    }
    if (variantResult) {
        // 2:4 layers on packed rows read 9/16 of their dense bytes at one-row decode (batch 1).
        report["variant"] = toJson(*variantResult,
                                   decodeWeightBytes(*variant, options.dtype) -
                                       (p.batch == 1 ? variantResult->decodeBytesSavedByPacking : 0),
                                   copyBandwidth);
        report["variant"]["name"] = variantName;
    }
    report["base"] = toJson(baseResult,
                            decodeWeightBytes(*base, options.dtype) - (p.batch == 1 ? baseResult.decodeBytesSavedByPacking : 0),
                            copyBandwidth);
    if (report.contains("variant"))
        report["decode_speedup_p50"] = report["base"]["decode_ms_p50"].get<double>() / report["variant"]["decode_ms_p50"].get<double>();

    if (json) {
        std::cout << jsonText(report) << "\n";
        return 0;
    }
    std::printf("%s, %lld layers, %s %s, batch %lld, prompt %lld, generate %lld\n", base->path.c_str(),
                static_cast<long long>(base->spec.layers), options.device.str().c_str(), c10::toString(options.dtype),
                static_cast<long long>(p.batch), static_cast<long long>(p.promptTokens), static_cast<long long>(p.genTokens));
    if (copyBandwidth > 0) std::printf("device copy bandwidth %.0f GB/s (read + write)\n", copyBandwidth / 1e9);
    if (report.contains("kernel_capability"))
        std::printf("kernels dispatch for compute capability %d.%d\n",
                    report["kernel_capability"].get<int>() / 10, report["kernel_capability"].get<int>() % 10);
    if (options.device.is_cuda())
        std::printf("prefill attention: %s\n", fusedAttention ? "scaled_dot_product_attention"
                                                              : "reference (fp32 scores and softmax)");
    printRow("base", report["base"]);
    if (report.contains("variant")) {
        printRow("variant", report["variant"]);
        std::printf("decode speed-up (p50): %.2fx\n", report["decode_speedup_p50"].get<double>());
    }
    return 0;
}

} // namespace cwb::cli
