// GPTQ (and optionally SparseGPT) of every linear layer of a Llama-2-7B-shaped model with random weights, through the
// real pipeline (layer-by-layer calibration, Hessians, damped Cholesky inverse, blocked updates) on one device.
// Prints a markdown table: the step's time, compressModel's whole time (with the per-layer reconstruction errors: measured
// inside GPTQ's and SparseGPT's own pass now, by a second pass before), and both scaled linearly to 32 blocks when fewer
// were built. A first table times the GPTQ math alone on the three 7B layer shapes (Hessian from random activations);
// CWB_GPTQ_KERNEL=0 in the environment times the LibTorch column loop instead of the block kernel; a column times GPTQ of
// the weight pruned 2:4 with keepZeros (GPTQ after a pruning step). Speed only: the
// weights are random.
//
//   bench_gptq_cuda [--blocks N] [--samples 128] [--seq-len 2048] [--device cuda] [--forward f32,bf16] [--sparsegpt]
//                   [--awq] [--math-only]
// --awq adds AWQ w4 g128 with fold (AutoAWQ's default grid of 20, 4096 rows a layer) to the timed steps.
// --forward lists the calibration forward types to time (CalibrationSpec::forwardType), one row each.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/compress/gptq_math.h"
#include "core/compress/pipeline.h"
#include "core/compress/recipe.h"
#include "core/compress/sparsegpt_math.h"
#include "core/model/model.h"
#include "core/runtime/latency.h"
#include "core/util/feedback.h"
#include "kernels/include/cwb/kernels/env_setting.h"

namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void synchronize(const at::Device& device) {
    if (device.is_cuda()) at::zeros({1}, at::TensorOptions().device(device)).item<float>();
}

// GPTQ of one [out, in] layer from a Hessian of `rows` random activations, timed after one warm-up call.
void timeMath(const at::Device& device, int64_t out, int64_t in, int64_t rows) {
    cwb::quant::HessianAccumulator h(in);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t done = 0; done < rows; done += 8192)
        h.add(at::randn({8192, in}, at::TensorOptions().device(device)));
    const at::Tensor hessian = h.hessian();
    synchronize(device);
    const double accumulate = secondsSince(t0);
    const at::Tensor w = at::randn({out, in}) * 0.02;
    cwb::quant::GptqOptions options;
    options.quant = {4, true, 128};
    const auto t1 = std::chrono::steady_clock::now();
    cwb::quant::gptqQuantize(w, hessian, options);
    const double quantize = secondsSince(t1);
    cwb::prune::SparseGptOptions pruning;
    pruning.sparsity = 0.5;
    const auto t2 = std::chrono::steady_clock::now();
    cwb::prune::sparseGpt(w, hessian, pruning);
    const double prune = secondsSince(t2);
    // GPTQ keeping a 2:4 mask (a pruned layer): the block kernel with its keep-zero mask.
    at::Tensor pruned = w.clone();
    const at::Tensor quads = pruned.view({out, -1, 4});
    quads.scatter_(-1, std::get<1>(quads.abs().topk(2, -1, /*largest=*/false)), 0.0);
    options.keepZeros = true;
    const auto t3 = std::chrono::steady_clock::now();
    cwb::quant::gptqQuantize(pruned, hessian, options);
    const double keepingZeros = secondsSince(t3);
    std::printf("| %lld x %lld | %lld | %.2f | %.2f | %.2f | %.2f |\n", (long long)out, (long long)in, (long long)rows, accumulate,
                quantize, keepingZeros, prune);
}

} // namespace

int main(int argc, char** argv) {
    int64_t blocks = 2, samples = 128, seqLen = 2048;
    std::string deviceName = "cuda", forwards = "f32";
    bool sparsegpt = false, awq = false, mathOnly = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--blocks") blocks = std::atoll(next().c_str());
        else if (a == "--samples") samples = std::atoll(next().c_str());
        else if (a == "--seq-len") seqLen = std::atoll(next().c_str());
        else if (a == "--device") deviceName = next();
        else if (a == "--forward") forwards = next();
        else if (a == "--sparsegpt") sparsegpt = true;
        else if (a == "--awq") awq = true;
        else if (a == "--math-only") mathOnly = true;
        else {
            std::fprintf(stderr, "usage: bench_gptq_cuda [--blocks N] [--samples S] [--seq-len T] [--device cpu|cuda] [--forward f32,bf16] [--sparsegpt] [--awq] [--math-only]\n");
            return 2;
        }
    }
    try {
        const at::Device device = cwb::resolveCompressionDevice(deviceName);
        std::printf("device %s, %lld of 32 blocks, %lld x %lld calibration tokens\n\n", device.str().c_str(),
                    (long long)blocks, (long long)samples, (long long)seqLen);
        std::printf("column loop: %s\n\n", cwb::env::envSwitch("CWB_GPTQ_KERNEL", true) ? "block kernel on CUDA"
                                                                                     : "LibTorch (CWB_GPTQ_KERNEL off)");
        std::printf("GPTQ math alone (w4 g128 sym, block 128; SparseGPT 50%%), seconds:\n\n| layer (out x in) | Hessian rows | accumulate H | GPTQ | GPTQ of a 2:4 weight, keeping its zeros | SparseGPT |\n| --- | ---: | ---: | ---: | ---: | ---: |\n");
        timeMath(device, 4096, 4096, samples * seqLen / 4);   // warm-up shapes first, then the three 7B shapes
        timeMath(device, 4096, 4096, samples * seqLen);
        timeMath(device, 11008, 4096, samples * seqLen);
        timeMath(device, 4096, 11008, samples * seqLen);
        std::printf("\n(first row: warm-up)\n\n");
        if (mathOnly) return 0;

        auto t0 = std::chrono::steady_clock::now();
        auto base = cwb::syntheticLlama7b(blocks, device.is_cuda() ? device : at::Device(at::kCPU), 0);
        const at::Tensor windows = at::randint(0, base->spec.vocab, {samples, seqLen}, at::kLong);
        std::printf("model built in %.1f s\n\n", secondsSince(t0));
        std::vector<std::pair<std::string, std::string>> steps = {
            {"GPTQ w4 g128 sym", R"({"method":"quantize.gptq","params":{"bits":4,"group_size":128}})"}};
        if (sparsegpt) steps.push_back({"SparseGPT 50%", R"({"method":"prune.sparsegpt","params":{"sparsity":0.5}})"});
        if (awq) steps.push_back({"AWQ w4 g128 fold", R"({"method":"quantize.awq","params":{"bits":4,"group_size":128,"fold":true}})"});
        std::printf("| method | forward | blocks | step (s) | compressModel with errors (s) | step, 32 blocks (scaled) | compressModel, 32 blocks (scaled) |\n"
                    "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
        for (size_t start = 0; start <= forwards.size();) {
            size_t end = forwards.find(',', start);
            if (end == std::string::npos) end = forwards.size();
            cwb::CalibrationSpec spec;
            spec.device = deviceName;
            spec.forwardType = forwards.substr(start, end - start);
            start = end + 1;
            const cwb::CalibrationCompute compute = cwb::resolveCalibrationCompute(spec);
            for (const auto& [label, step] : steps) {
                const cwb::Recipe recipe =
                    cwb::Recipe::fromJson(nlohmann::json::parse(std::string(R"({"steps":[)") + step + "]}"), label);
                cwb::CallbackFeedback feedback;
                std::string marks;   // elapsed seconds at each progress report (one per block and pass)
                const auto started = std::chrono::steady_clock::now();
                feedback.progressCallback = [&](double fraction) {
                    char buf[48];
                    std::snprintf(buf, sizeof buf, " %.0f%%@%.1fs", 100 * fraction, secondsSince(started));
                    marks += buf;
                };
                t0 = std::chrono::steady_clock::now();
                const cwb::CompressionResult r = cwb::compressModel(*base, recipe, windows, &feedback, {}, compute);
                const double total = secondsSince(t0), stepSeconds = r.steps.at(0).seconds;
                const double scale = 32.0 / double(blocks);
                double meanError = 0;
                for (const auto& [layer, e] : r.steps.at(0).reconstructionError) meanError += e;
                meanError /= double(std::max<size_t>(1, r.steps.at(0).reconstructionError.size()));
                std::printf("| %s | %s | %lld | %.1f | %.1f | %.0f | %.0f |   (mean reconstruction error %.4g)\n",
                            label.c_str(), spec.forwardType.c_str(), (long long)blocks, stepSeconds, total,
                            stepSeconds * scale, total * scale, meanError);
                std::printf("    progress:%s\n", marks.c_str());
                std::fflush(stdout);
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_gptq_cuda: %s\n", e.what());
        return 1;
    }
    return 0;
}
