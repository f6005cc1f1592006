// GPU test (plain executable, CTest label `gpu`): integer layers run on CUDA through the W4A16 / W8A16 kernels on
// their packed weights, FP8 (dynamic activations) and SmoothQuant W8A8 layers through the cuBLASLt FP8 / int8 GEMMs
// (Transformer with RuntimeOptions::nativeKernels), and give the logits of the CPU path, which dequantizes and
// fake-quantizes activations. Exits 77 without a GPU or without the kernels in the build.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "tests/gpu/gpu_check.h"
#include "core/compress/compressed_layers.h"
#include "core/model/model.h"
#include "tests/gpu/random_llama.h"
#include "core/runtime/cuda_linear.h"
#include "core/runtime/transformer.h"

using cwb::testing::normalisedError;

namespace {

// Normalised error ‖a − b‖² / ‖a‖² of logits against the fp32 CPU path. fp16 activations carry ~11 bits, bf16 ~8.
constexpr double kFp16Tolerance = 1e-3;
constexpr double kBf16Tolerance = 1e-2;
// Layers that quantize their activations per token (FP8 E4M3: 3 mantissa bits; int8) amplify those rounding
// differences: an activation that fp16 / bf16 rounding moves across a rounding boundary of the coarse grid lands
// one code away (6-12% of its value for E4M3), and that spreads through the next layers. The CUDA path with the
// kernels off (the same fake quantization as the CPU) shows the same size of difference (0.3-1% on this model), so
// whole-model logits get this looser bound; the kernels themselves are checked one layer at a time below, from
// identical inputs, where only the output rounding differs.
constexpr double kQuantizedActivationTolerance = 3e-2;
constexpr double kSingleLayerTolerance = 1e-4;   // fp16 / bf16 output rounding of one product
// Fused against separate projections: the same kernel and weights; only the split of the input dimension (chosen
// from the row count) and so the fp32 summation order may differ, i.e. a last-bit rounding of some outputs
// (bf16's last bit is 8x fp16's, so its squared error bound is larger).
constexpr double kFusionToleranceFp16 = 1e-5;
constexpr double kFusionToleranceBf16 = 1e-4;

using cwb::testing::check;

// Llama-shaped model with q/k/v biases; ffn 688 leaves a partial group at g128 and g32 (kernel padding path).
std::unique_ptr<cwb::Model> makeBase() {
    auto m = std::make_unique<cwb::Model>();
    m->spec = cwb::testing::smallLlamaSpec();
    m->spec.modelType = "qwen2";
    m->spec.attentionBias = true;
    m->path = "test:native-linear";
    cwb::testing::fillRandomLlama(*m, 7);
    return m;
}

// GPTQ's act-order form: groups formed over a random column order, groupIndex mapping each column to its group.
cwb::quant::QuantizedWeight actOrderRtn(const at::Tensor& w, const cwb::quant::QuantSpec& spec) {
    at::Tensor order = at::randperm(w.size(1), at::kLong);
    cwb::quant::QuantizedWeight q = cwb::quant::quantizeRtn(w.index_select(1, order), spec);
    at::Tensor permuted = cwb::quant::unpackLevels(q.packed, spec.bits, q.cols);
    at::Tensor levels = at::empty_like(permuted), groups = at::empty_like(q.groupIndex);
    levels.index_copy_(1, order, permuted);
    groups.index_copy_(0, order, q.groupIndex);
    q.packed = cwb::quant::packLevels(levels, spec.bits);
    q.groupIndex = groups;
    return q;
}

struct Case {
    const char* name;
    std::function<std::shared_ptr<cwb::CompressedLinear>(const std::string& layer, const at::Tensor& w)> make;
    int64_t expectedNative;   // of the 14 block linears
    std::string kernel;       // what the native layers' reported path starts with ("" when none run natively)
    bool quantizesActivations = false;
    int64_t expectedFused = 0;   // of the 10 q/k/v and gate/up layers: run as one packed matrix per projection
};

std::shared_ptr<cwb::CompressedLinear> fp8(const at::Tensor& w, bool perChannel, bool dynamicActivations) {
    return std::make_shared<cwb::Fp8Linear>(cwb::quant::quantizeFp8(w, perChannel), dynamicActivations);
}

// SmoothQuant's form with made-up smoothing scales in [0.5, 2] (the runtime does not care where they came from).
std::shared_ptr<cwb::CompressedLinear> w8a8(const at::Tensor& w) {
    at::Tensor s = at::rand({w.size(1)}) * 1.5 + 0.5;
    return std::make_shared<cwb::W8A8Linear>(cwb::quant::quantizeInt8PerChannel(w * s.unsqueeze(0)), s);
}

// Folded SmoothQuant (fold=true) and int-quantized checkpoints: no divisor beside the layer (all ones), so q/k/v and
// gate/up can run stacked on one set of codes of x.
std::shared_ptr<cwb::CompressedLinear> w8a8Folded(const at::Tensor& w) {
    return std::make_shared<cwb::W8A8Linear>(cwb::quant::quantizeInt8PerChannel(w), at::ones({w.size(1)}));
}

std::shared_ptr<cwb::IntLinear> rtn(const at::Tensor& w, int bits, int64_t group, bool symmetric) {
    return std::make_shared<cwb::IntLinear>(cwb::quant::quantizeRtn(w, {bits, symmetric, group}), at::Tensor(), "rtn");
}

} // namespace

int main() {
    if (!at::hasCUDA()) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    if (!cwb::nativeKernelsBuilt()) {
        std::printf("SKIP: this build has no CUDA kernels (CWB_CUDA off)\n");
        return 77;
    }
    // The decode GEMVs that quantize their own input (on by default; CTest also runs this test with
    // CWB_W8_DECODE_GEMV=0, the two-launch path) take one token row by default: the checks below at 8 rows ask for 8.
    setenv("CWB_W8_DECODE_GEMV", "1", 0);
    setenv("CWB_W8_DECODE_GEMV_ROWS", "8", 0);
    std::printf("CWB_W8_DECODE_GEMV: decode GEMVs %s\n", cwb::selfQuantizingDecodeGemv() ? "on" : "off");
    try {
        auto base = makeBase();
        const std::vector<Case> cases = {
            {"int4 g32 sym", [](const std::string&, const at::Tensor& w) { return rtn(w, 4, 32, true); }, 14, "W4A16", false, 10},
            {"int8 per-channel asym", [](const std::string&, const at::Tensor& w) { return rtn(w, 8, -1, false); }, 14, "W8A16", false, 10},
            {"fp8 per-channel, dynamic fp8 activations",
             [](const std::string&, const at::Tensor& w) { return fp8(w, true, true); }, 14, "FP8 E4M3 GEMM", true, 10},
            {"fp8 per-tensor, dynamic fp8 activations",
             [](const std::string&, const at::Tensor& w) { return fp8(w, false, true); }, 14, "FP8 E4M3 GEMM", true, 10},
            {"fp8 weight-only (no kernel: dequantized)",
             [](const std::string&, const at::Tensor& w) { return fp8(w, true, false); }, 0, ""},
            {"smoothquant w8a8 (a divisor per layer: not stacked)",
             [](const std::string&, const at::Tensor& w) { return w8a8(w); }, 14, "W8A8 int8 GEMM", true},
            {"w8a8, smoothing folded (unit divisors: stacked)",
             [](const std::string&, const at::Tensor& w) { return w8a8Folded(w); }, 14, "W8A8 int8 GEMM", true, 10},
            {"int4 g128 asym + AWQ input scales",
             [](const std::string&, const at::Tensor& w) {
                 at::Tensor s = at::rand({w.size(1)}) * 1.5 + 0.5;
                 return std::make_shared<cwb::IntLinear>(cwb::quant::quantizeRtn(w * s.unsqueeze(0), {4, false, 128}), s, "awq");
             },
             14, "W4A16"},
            {"int4 g64 act-order",
             [](const std::string&, const at::Tensor& w) {
                 return std::make_shared<cwb::IntLinear>(actOrderRtn(w, {4, true, 64}), at::Tensor(), "gptq");
             },
             14, "W4A16"},
            {"int4 g128 with one 3-bit layer (dequantized fallback)",
             [](const std::string& layer, const at::Tensor& w) {
                 return rtn(w, layer == "model.layers.1.mlp.down_proj" ? 3 : 4, 128, true);
             },
             13, "W4A16", false, 10},
        };
        at::Tensor prompt = at::randint(0, base->spec.vocab, {2, 40}, at::kLong);   // 80 rows: slices of 64 + 16
        // Below compute capability 8.9 (an A100, or CWB_CUDA_CAPABILITY=80 on a newer GPU) FP8 layers have no kernel:
        // every one must run dequantized, saying why, and still match the CPU.
        const bool fp8Kernels = cwb::kernelDispatchCapability() >= 89;
        std::printf("kernels dispatch for compute capability %d.%d%s\n", cwb::kernelDispatchCapability() / 10,
                    cwb::kernelDispatchCapability() % 10, fp8Kernels ? "" : ": FP8 layers expected dequantized");
        for (Case c : cases) {
            const bool fp8Fallback = !fp8Kernels && c.kernel == "FP8 E4M3 GEMM";
            if (fp8Fallback) c.expectedNative = c.expectedFused = 0;
            std::printf("== %s\n", c.name);
            auto variant = base->clone();
            for (const std::string& layer : base->linearLayers())
                variant->setCompressed(layer, c.make(layer, base->floatTensor(layer + ".weight")));
            cwb::Transformer cpu(*variant);
            const at::Tensor reference = cpu.forward(prompt);
            for (auto dtype : {at::kHalf, at::kBFloat16}) {
                const double tolerance = c.quantizesActivations ? kQuantizedActivationTolerance
                                         : dtype == at::kHalf ? kFp16Tolerance
                                                              : kBf16Tolerance;
                cwb::RuntimeOptions o;
                o.device = at::Device(at::kCUDA);
                o.dtype = dtype;
                o.dequantAboveTokens = 32;   // the 80-row prompt: dequantize + cuBLAS; decode steps: the kernels
                cwb::Transformer gpu(*variant, o);
                const at::Tensor logits = gpu.forward(prompt);
                const double error = normalisedError(reference, logits);
                int64_t native = 0, fused = 0;
                bool namedRight = true;
                for (const auto& [name, path] : gpu.layerPaths()) {
                    native += path.native ? 1 : 0;
                    namedRight = namedRight && (!path.native || path.how.rfind(c.kernel, 0) == 0) && !path.how.empty() &&
                                 (!fp8Fallback || path.how.find("compute capability 8.9") != std::string::npos);
                    fused += path.how.find(", fused ") != std::string::npos ? 1 : 0;
                }
                std::printf("  %s: normalised logit error %.3g (tolerance %.0e); %s\n", c10::toString(dtype), error,
                            tolerance, gpu.layerPathSummary().c_str());
                check(error <= tolerance, std::string(c10::toString(dtype)) + " logits through the kernels match the CPU");
                check(native == c.expectedNative && int64_t(gpu.layerPaths().size()) == 14 && namedRight,
                      "the expected layers ran natively (" + (c.kernel.empty() ? std::string("none") : c.kernel) +
                          "), the others are listed as dequantized with a reason");
                check(fused == c.expectedFused, std::to_string(fused) + " q/k/v and gate/up layers ran fused, expected " +
                                                    std::to_string(c.expectedFused));
                if (c.kernel == "W8A8 int8 GEMM" && c.expectedFused == 0) {   // per-layer divisors: the paths say why
                    int64_t saidWhy = 0;
                    for (const auto& [name, path] : gpu.layerPaths())
                        saidWhy += path.how.find("not stacked: the layers have different SmoothQuant divisors") !=
                                   std::string::npos;
                    check(saidWhy == 10, std::to_string(saidWhy) + " of the 10 q/k/v and gate/up paths say why they are "
                                                                   "not stacked");
                }
                if (c.kernel == "W4A16" || c.kernel == "W8A16") {
                    // The prompt's 80 rows took dequantize + cuBLAS above; the same prefill through the kernels
                    // alone (slices of 64 + 16) must agree with the CPU as well.
                    cwb::RuntimeOptions kernelsOnly = o;
                    kernelsOnly.dequantAboveTokens = int64_t(1) << 40;
                    cwb::Transformer viaKernels(*variant, kernelsOnly);
                    const at::Tensor kernelLogits = viaKernels.forward(prompt);
                    const double kernelError = normalisedError(reference, kernelLogits);
                    std::printf("  prefill through the kernels only: normalised logit error %.3g\n", kernelError);
                    check(error <= tolerance && kernelError <= tolerance &&
                              gpu.layerPathSummary().find("dequant + cuBLAS (M>32)") != std::string::npos,
                          "prefill by dequantize + cuBLAS (80 rows > 32) and by the kernels both match the CPU");
                    if (c.expectedFused > 0) {   // one packed matrix per projection against one per layer
                        kernelsOnly.fuseNativeProjections = false;
                        cwb::Transformer separate(*variant, kernelsOnly);
                        const double fusionError = normalisedError(separate.forward(prompt), kernelLogits);
                        bool noneFused = true;
                        for (const auto& [name, path] : separate.layerPaths())
                            noneFused = noneFused && path.how.find(", fused ") == std::string::npos;
                        std::printf("  fused against separate projections: normalised logit difference %.3g\n", fusionError);
                        check(fusionError <= (dtype == at::kHalf ? kFusionToleranceFp16 : kFusionToleranceBf16) && noneFused,
                              "fused q/k/v and gate/up give the logits of separate layers");
                    }
                }

                if (c.quantizesActivations && c.expectedFused > 0 && !fp8Fallback) {
                    // q/k/v and gate/up as one FP8 / W8A8 layer each (x quantized once) against one layer per
                    // projection, on 8 token rows: there the decode GEMV (and at one row the small-M kernel) forms
                    // each output row by the same operations whatever the layer's rows, so the logits must be equal.
                    // W8A8's int32 sums are exact on every path, so its logits must be equal with the GEMV off too.
                    // (FP8 through cuBLASLt may choose another algorithm per shape, and a last-bit change can move
                    // an E4M3 code of the next layer's input: only the quantized-activation tolerance would hold.)
                    const bool int8 = c.kernel == "W8A8 int8 GEMM";
                    cwb::RuntimeOptions separateOptions = o;
                    separateOptions.fuseNativeProjections = false;
                    cwb::Transformer separate(*variant, separateOptions), stacked(*variant, o);
                    const at::Tensor shortPrompt = prompt.narrow(1, 0, 4);   // 2 x 4 = 8 token rows
                    const at::Tensor a = stacked.forward(shortPrompt), b = separate.forward(shortPrompt);
                    const double fusionDifference = (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
                    std::printf("  %s stacked against separate projections, 8 rows: largest logit difference %.3g\n",
                                int8 ? "W8A8" : "FP8", fusionDifference);
                    if (cwb::selfQuantizingDecodeGemv() || int8)
                        check(fusionDifference == 0.0, "stacked q/k/v and gate/up give the logits of separate layers");
                    else
                        check(normalisedError(b, a) <= kQuantizedActivationTolerance,
                              "stacked FP8 q/k/v and gate/up give the logits of separate layers (within the tolerance)");
                }
                if (c.kernel == "W8A8 int8 GEMM") {
                    // Layers with different divisors quantize different x / s: never stacked, and the reason says so.
                    const at::Tensor wq = base->floatTensor("model.layers.0.self_attn.q_proj.weight");
                    const at::Tensor wk = base->floatTensor("model.layers.0.self_attn.k_proj.weight");
                    auto q = std::dynamic_pointer_cast<cwb::W8A8Linear>(w8a8(wq));
                    auto k = std::dynamic_pointer_cast<cwb::W8A8Linear>(w8a8(wk));
                    auto kFolded = std::dynamic_pointer_cast<cwb::W8A8Linear>(w8a8Folded(wk));
                    auto qFolded = std::dynamic_pointer_cast<cwb::W8A8Linear>(w8a8Folded(wq));
                    std::string reason;
                    auto refused = cwb::makeNativeW8a8Rows({q.get(), k.get()}, o.device, dtype, cwb::makeNativeWorkspace(), reason);
                    check(!refused && reason.find("different SmoothQuant divisors") != std::string::npos,
                          "W8A8 layers with different divisors are not stacked (" + reason + ")");
                    reason.clear();
                    auto stackedLayer = cwb::makeNativeW8a8Rows({qFolded.get(), kFolded.get()}, o.device, dtype,
                                                                cwb::makeNativeWorkspace(), reason);
                    check(stackedLayer != nullptr, "W8A8 layers with unit divisors stack (" + reason + ")");
                    if (stackedLayer) {   // one product of the stacked rows = the two layers' products side by side
                        const at::Tensor x = (at::randn({3, wq.size(1)}) * 2).to(dtype);
                        const at::Tensor expected =
                            at::cat({at::linear(qFolded->prepareInput(x.to(at::kFloat)), qFolded->weight()),
                                     at::linear(kFolded->prepareInput(x.to(at::kFloat)), kFolded->weight())}, 1);
                        check(normalisedError(expected, stackedLayer->forward(x.to(o.device))) <= kSingleLayerTolerance,
                              "the stacked W8A8 layer gives the parts' products side by side");
                    }
                }

                o.nativeKernels = false;
                cwb::Transformer dense(*variant, o);
                const double denseError = normalisedError(reference, dense.forward(prompt));
                std::printf("  kernels off: normalised logit error %.3g\n", denseError);
                check(denseError <= tolerance && !dense.layerPaths().begin()->second.native,
                      "with native kernels off the dequantized path gives the same logits");
                if (!c.kernel.empty()) {   // one layer from identical inputs: only the output rounding differs
                    const std::string layer = "model.layers.0.mlp.up_proj";
                    auto compressed = c.make(layer, base->floatTensor(layer + ".weight"));
                    std::string reason;
                    auto kernel = cwb::makeNativeLinear(*compressed, o.device, dtype, cwb::makeNativeWorkspace(), reason);
                    if (fp8Fallback) {
                        check(kernel == nullptr && reason.find("compute capability 8.9") != std::string::npos,
                              "makeNativeLinear gives no FP8 kernel below compute capability 8.9 and says so (" + reason + ")");
                        continue;
                    }
                    check(kernel != nullptr, "makeNativeLinear gives a kernel for " + c.kernel + " (" + reason + ")");
                    // Kernels up to 32 rows, dequantize + cuBLAS above; FP8 / W8A8 up to 8 rows: the decode GEMV that
                    // quantizes its own input (k = 256 here, a multiple of 64).
                    for (int64_t rows : {1, 8, 16, 37, 80}) {
                        if (!kernel) break;
                        const at::Tensor x = (at::randn({rows, compressed->cols()}) * 2).to(dtype);
                        const at::Tensor expected = at::linear(compressed->prepareInput(x.to(at::kFloat)), compressed->weight());
                        const int64_t gemvBefore = cwb::nativeDecodeGemvCount();
                        const double layerError = normalisedError(expected, kernel->forward(x.to(o.device)));
                        const int64_t gemvLaunches = cwb::nativeDecodeGemvCount() - gemvBefore;
                        std::printf("  one layer, %lld rows: normalised error %.3g%s\n", (long long)rows, layerError,
                                    gemvLaunches ? " (decode GEMV)" : "");
                        check(layerError <= kSingleLayerTolerance, c.kernel + " on one layer matches the CPU product");
                        const bool gemvExpected = c.quantizesActivations && rows <= 8 && cwb::selfQuantizingDecodeGemv();
                        check(gemvLaunches == (gemvExpected ? 1 : 0),
                              std::string(gemvExpected ? "took" : "did not take") + " the decode GEMV at " +
                                  std::to_string(rows) + " rows");
                    }
                }
            }
            // Decode with the KV cache (one token per step: the M = 2 path) against the CPU's full-sequence logits.
            cwb::RuntimeOptions o;
            o.device = at::Device(at::kCUDA);
            o.dtype = at::kHalf;
            cwb::Transformer gpu(*variant, o);
            auto cache = gpu.makeCache(2, 40);
            std::vector<at::Tensor> steps = {gpu.forward(prompt.narrow(1, 0, 36), cache.get())};
            const int64_t gemvBefore = cwb::nativeDecodeGemvCount();
            for (int64_t t = 36; t < 40; ++t) steps.push_back(gpu.forward(prompt.narrow(1, t, 1), cache.get()));
            const int64_t gemvLaunches = cwb::nativeDecodeGemvCount() - gemvBefore;
            const double decodeError = normalisedError(reference, at::cat(steps, 1));
            std::printf("  decode with cache: normalised logit error %.3g; %lld decode GEMV launches\n", decodeError,
                        (long long)gemvLaunches);
            check(decodeError <= (c.quantizesActivations ? kQuantizedActivationTolerance : kFp16Tolerance),
                  "token-by-token decode through the kernels matches the CPU");
            if (c.quantizesActivations && c.expectedNative > 0 && cwb::selfQuantizingDecodeGemv()) {
                // Per step, each of the 2 blocks launches it for every layer with k = 256: q, k, v, o, gate, up (W8A8),
                // or the fused q/k/v, o and the fused gate/up (FP8); down_proj's 688 is not a multiple of 64 and takes
                // the quantize kernel and the product. Replays of a captured CUDA graph do not pass through the host,
                // so later steps may add none.
                const int64_t perStep = 2 * (c.expectedFused > 0 ? 3 : 6);
                check(gemvLaunches >= perStep && gemvLaunches % perStep == 0,
                      "decode steps took the decode GEMV in every layer whose k it takes");
            }
        }
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return cwb::testing::finishChecks();
}
