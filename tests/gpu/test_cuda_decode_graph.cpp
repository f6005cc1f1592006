// GPU test (plain executable, CTest label `gpu`): decode steps replayed from a CUDA graph give the logits and greedy
// ids of eager decode on the GPU and of the CPU path, for dense fp16 and INT4 (W4A16 kernels) GQA models; a full
// cache is refused, a reset cache replays correctly over stale slots, and changed weights re-capture. The graph runs
// the fused decode kernels (RMSNorm, RoPE + cache write, attention, SiLU * up) where the build has them, and is
// checked the same way with them turned off; both RoPE layouts, q/k/v biases, GQA ratios 2 and 4, head dims 64 and
// 128, and bf16; FP8 (dynamic activations) and SmoothQuant W8A8 layers too. Dense linears run the GEMV kernel
// (dense_gemv.h) by default; it is compared with cuBLAS. RMSNorms are folded into the GEMV that follows them, and
// SiLU * up into the dense gate/up GEMV, by default; each and both are compared with separate kernels on dense models
// and on models whose attention or MLP layers alone are INT4 (where only some can be folded); INT4 layers take the
// norm before them and the residual after them into their launch, compared with separate kernels. Programmatic
// dependent launch of the decode kernels
// (CWB_PDL) is compared with plain launches, in the graph and without it. A compressed output head (INT4, INT8, FP8;
// tied or not) runs through its kernel.
// Exits 77 without a GPU or without a CUDA build of LibTorch.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <cstdio>
#include <string>
#include <tuple>

#include "tests/gpu/gpu_check.h"
#include "core/compress/compressed_layers.h"
#include "core/compress/pipeline.h"
#include "core/model/model.h"
#include "tests/gpu/random_llama.h"
#include "core/runtime/cuda_linear.h"
#include "core/runtime/decode_graph.h"
#include "core/runtime/dense_gemv.h"
#include "core/runtime/fused_decode.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"

using cwb::testing::normalisedError;

namespace {

constexpr double kFp16Tolerance = 1e-3;   // normalised logit error; fp16 activations carry ~11 bits
constexpr double kBf16Tolerance = 1e-2;   // bf16 carries 8 bits: about 64 times fp16's squared rounding error
// FP8 / W8A8 layers quantize activations per token: fp16 rounding moves some across a boundary of the coarse grid
// (see test_cuda_native_linear's kQuantizedActivationTolerance), so their logits against the CPU get this bound.
constexpr double kQuantizedActivationTolerance = 3e-2;
constexpr int64_t kPrompt = 8, kSteps = 20;

using cwb::testing::check;

struct Shape {
    int64_t heads = 4, kvHeads = 2, headDim = 64;
};

// Llama-shaped GQA model (by default 4 query heads of 64 over 2 kv heads), optionally with q/k/v biases.
std::unique_ptr<cwb::Model> makeModel(bool bias, cwb::RopeStyle style = cwb::RopeStyle::Halves, Shape shape = {}) {
    auto m = std::make_unique<cwb::Model>();
    cwb::ArchSpec& s = m->spec;
    s = cwb::testing::smallLlamaSpec();
    s.modelType = bias ? "qwen2" : "llama";
    s.layers = 3;
    s.heads = shape.heads;
    s.kvHeads = shape.kvHeads;
    s.headDim = shape.headDim;
    s.ropeStyle = style;
    s.attentionBias = bias;
    m->path = "test:decode-graph";
    cwb::testing::fillRandomLlama(*m, bias ? 21 : 12);
    return m;
}

std::unique_ptr<cwb::Model> intVariant(const cwb::Model& base, int bits) {
    auto variant = base.clone();
    for (const std::string& layer : base.linearLayers())
        variant->setCompressed(layer, std::make_shared<cwb::IntLinear>(
                                          cwb::quant::quantizeRtn(base.floatTensor(layer + ".weight"), {bits, true, 128}),
                                          at::Tensor(), "rtn"));
    return variant;
}
std::unique_ptr<cwb::Model> int4Variant(const cwb::Model& base) { return intVariant(base, 4); }

// FP8 E4M3 per-channel weights with dynamic per-token FP8 activations, or SmoothQuant W8A8 with smoothing scales
// in [0.5, 2]: both run through the act_quant kernels and cuBLASLt inside the graph.
std::unique_ptr<cwb::Model> activationQuantizedVariant(const cwb::Model& base, bool fp8) {
    auto variant = base.clone();
    for (const std::string& layer : base.linearLayers()) {
        const at::Tensor w = base.floatTensor(layer + ".weight");
        if (fp8) {
            variant->setCompressed(layer, std::make_shared<cwb::Fp8Linear>(cwb::quant::quantizeFp8(w, true), true));
        } else {
            const at::Tensor s = at::rand({w.size(1)}) * 1.5 + 0.5;
            variant->setCompressed(layer, std::make_shared<cwb::W8A8Linear>(
                                              cwb::quant::quantizeInt8PerChannel(w * s.unsqueeze(0)), s));
        }
    }
    return variant;
}

// INT4 (RTN g128) for the linear layers whose name contains `part` ("self_attn", "mlp"); the rest stay dense.
std::unique_ptr<cwb::Model> int4Only(const cwb::Model& base, const std::string& part) {
    auto variant = base.clone();
    for (const std::string& layer : base.linearLayers())
        if (layer.find(part) != std::string::npos)
            variant->setCompressed(layer, std::make_shared<cwb::IntLinear>(
                                              cwb::quant::quantizeRtn(base.floatTensor(layer + ".weight"), {4, true, 128}),
                                              at::Tensor(), "rtn"));
    return variant;
}

// `variant` with its output head compressed as quantize.rtn / quantize.fp8 with "head" store it (bits 0: FP8 E4M3 with
// dynamic activations); `tied`: the head is first tied to the embedding, so the head stored is a copy of that.
std::unique_ptr<cwb::Model> withCompressedHead(std::unique_ptr<cwb::Model> variant, int bits, bool tied = false) {
    if (tied) {
        variant->removeTensor("lm_head.weight");
        variant->spec.tiedEmbeddings = true;
    }
    const at::Tensor w = cwb::targetWeight(*variant, cwb::names::kHead);
    std::shared_ptr<const cwb::CompressedLinear> head;
    if (bits > 0) head = std::make_shared<cwb::IntLinear>(cwb::quant::quantizeRtn(w, {bits, true, 128}), at::Tensor(), "rtn");
    else head = std::make_shared<cwb::Fp8Linear>(cwb::quant::quantizeFp8(w, true), true);
    cwb::storeCompressedLayer(*variant, cwb::names::kHead, head);
    return variant;
}

cwb::RuntimeOptions gpuOptions(cwb::DecodeMode mode, at::ScalarType dtype, bool fusedDecode = true) {
    cwb::RuntimeOptions o;
    o.device = at::Device(at::kCUDA);
    o.dtype = dtype;
    o.decode = mode;
    o.fusedDecode = fusedDecode;
    return o;
}

// Greedy decode: the prompt, then kSteps tokens, each the argmax of the previous step. Returns the logits of every
// decode step [kSteps, vocab] and fills `ids` with the chosen tokens.
at::Tensor greedy(cwb::Transformer& runtime, cwb::KvCache& cache, const at::Tensor& prompt, std::vector<int64_t>& ids) {
    cache.reset();
    at::Tensor logits = runtime.forward(prompt, &cache);
    std::vector<at::Tensor> steps;
    ids.clear();
    for (int64_t i = 0; i < kSteps; ++i) {
        const int64_t next = logits[0][logits.size(1) - 1].argmax().item<int64_t>();
        ids.push_back(next);
        logits = runtime.forward(at::full({1, 1}, next, at::kLong), &cache);
        steps.push_back(logits[0][0].to(at::kCPU));
    }
    return at::stack(steps);
}

// Logits of the same sequence by one full pass on the CPU (fp32): rows of the kSteps decode steps.
at::Tensor cpuReference(const cwb::Model& model, const at::Tensor& prompt, const std::vector<int64_t>& ids) {
    at::Tensor sequence = at::cat({prompt, at::tensor(ids, at::kLong).unsqueeze(0)}, 1);
    return cwb::Transformer(model).forward(sequence)[0].narrow(0, kPrompt, kSteps);
}

// Gap between two logits, in standard deviations of their row, under which rounding alone may swap them: 1e-2 for
// fp16, 8 times that for bf16 (3 fewer mantissa bits).
double tieMargin(at::ScalarType dtype) { return dtype == at::kBFloat16 ? 8e-2 : 1e-2; }

// Ids equal, or where they first differ the two choices were a near tie (a gap below `margin`, see tieMargin) in the
// reference logits they were chosen from; the sequences may diverge there, so comparison stops at the first
// difference. greedy() picks ids[i] from the logits of the step before, row i - 1; the prompt's logits, which pick
// ids[0], are not kept, so a difference there fails. (Until session 6 row i was read, the logits after the differing
// id, whose gap says nothing about the tie.)
bool sameGreedyIds(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const at::Tensor& referenceLogits,
                   double margin, int64_t& equalSteps) {
    equalSteps = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (a[i] == b[i]) {
            ++equalSteps;
            continue;
        }
        if (i == 0) {
            std::printf("  step 0: ids %lld vs %lld, chosen from the prompt's logits\n", (long long)a[0], (long long)b[0]);
            return false;
        }
        at::Tensor row = referenceLogits[int64_t(i) - 1];
        const double gap = std::abs(row[a[i]].item<double>() - row[b[i]].item<double>());
        std::printf("  step %zu: ids %lld vs %lld, the reference logits they were chosen from differ by %.4g (%.3g of"
                    " their spread)\n", i, (long long)a[i], (long long)b[i], gap, gap / row.std().item<double>());
        return gap < margin * row.std().item<double>();
    }
    return true;
}

// Two runtimes' greedy decodes of one prompt, `on` with a switch on and `off` with it off (`what`: the switch): both
// replayed the graph at every step, their ids agree up to a near tie, and where every id agrees so do the logits,
// within `tolerance`. Returns how many steps' ids were equal (kSteps: the logits were compared).
int64_t compareSwitchedDecodes(const std::string& what, const cwb::KvCache& onCache, const cwb::KvCache& offCache,
                               const std::vector<int64_t>& onIds, const std::vector<int64_t>& offIds,
                               const at::Tensor& onLogits, const at::Tensor& offLogits, double tolerance,
                               at::ScalarType dtype) {
    check(onCache.graphReplays() == kSteps && offCache.graphReplays() == kSteps,
          "both runtimes replayed the graph at every step" +
              (onCache.graphFailure().empty() ? std::string() : " (" + what + ": " + onCache.graphFailure() + ")"));
    int64_t equal = 0;
    const bool idsAgree = sameGreedyIds(onIds, offIds, offLogits, tieMargin(dtype), equal);
    check(idsAgree, "greedy ids with and without " + what + " agree (" + std::to_string(equal) + " of " +
                        std::to_string(kSteps) + " equal)");
    if (equal == kSteps) {
        const double error = normalisedError(offLogits, onLogits);
        std::printf("  %s on vs off: normalised logit error %.3g%s\n", what.c_str(), error,
                    at::equal(offLogits, onLogits) ? " (bit-identical)" : "");
        check(error <= tolerance, "decode logits with " + what + " match those without");
    }
    return equal;
}

void runCase(const std::string& caseName, const cwb::Model& model, at::ScalarType dtype, bool fusedDecode,
             double cpuTolerance = 0.0) {
    const std::string name = caseName + (dtype == at::kBFloat16 ? ", bf16" : "") + (fusedDecode ? ", fused decode kernels" : ", LibTorch decode ops");
    const double tolerance = cpuTolerance > 0 ? cpuTolerance : dtype == at::kBFloat16 ? kBf16Tolerance : kFp16Tolerance;
    std::printf("== %s\n", name.c_str());
    at::Tensor prompt = at::randint(0, model.spec.vocab, {1, kPrompt}, at::kLong);
    cwb::Transformer graphs(model, gpuOptions(cwb::DecodeMode::CudaGraph, dtype, fusedDecode));
    cwb::Transformer eager(model, gpuOptions(cwb::DecodeMode::Eager, dtype));
    check(graphs.fusedDecodeActive() == (fusedDecode && cwb::nativeKernelsBuilt()),
          std::string("the graph ") + (graphs.fusedDecodeActive() ? "runs" : "does not run") + " the fused decode kernels");
    auto graphCache = graphs.makeCache(1, kPrompt + kSteps), eagerCache = eager.makeCache(1, kPrompt + kSteps);
    std::vector<int64_t> graphIds, eagerIds;
    const at::Tensor graphLogits = greedy(graphs, *graphCache, prompt, graphIds);
    check(graphCache->graphReplays() == kSteps && graphCache->graphFailure().empty(),
          "every decode step replayed the graph (" + std::to_string(graphCache->graphReplays()) + " replays" +
              (graphCache->graphFailure().empty() ? "" : "; " + graphCache->graphFailure()) + ")");
    const at::Tensor eagerLogits = greedy(eager, *eagerCache, prompt, eagerIds);
    check(eagerCache->graphReplays() == 0, "Eager mode captured no graph");
    int64_t equal = 0;
    const bool idsAgree = sameGreedyIds(graphIds, eagerIds, eagerLogits, tieMargin(dtype), equal);
    if (cpuTolerance > 0 && !idsAgree) {
        // Per-token FP8 / int8 activations turn the last-bit differences between graph and eager decode (1e-4 in
        // the dense cases) into a step of the coarse grid now and then, and greedy decode of a random model may then
        // go another way (seen on the H200: a differing id at step 12-14; the "clear logit gap" noted then was read
        // from the row after the choice, see sameGreedyIds). Each path must then match the CPU along its own tokens.
        const double eagerVsCpu = normalisedError(cpuReference(model, prompt, eagerIds), eagerLogits);
        std::printf("  eager vs CPU along its own ids: normalised logit error %.3g\n", eagerVsCpu);
        check(eagerVsCpu <= tolerance, "graph and eager decode chose different ids from step " + std::to_string(equal) +
                                           "; eager decode matches the CPU path along its own ids");
    } else {
        check(idsAgree, "greedy ids of graph and eager decode agree (" + std::to_string(equal) + " of " +
                            std::to_string(kSteps) + " equal)");
    }
    const at::Tensor reference = cpuReference(model, prompt, graphIds);
    const double versusCpu = normalisedError(reference, graphLogits);
    std::printf("  graph vs CPU: normalised logit error %.3g; %s\n", versusCpu, graphs.layerPathSummary().c_str());
    check(versusCpu <= tolerance, "graph decode logits match the CPU path");
    if (equal == kSteps) {
        const double versusEager = normalisedError(eagerLogits, graphLogits);
        std::printf("  graph vs eager: normalised logit error %.3g\n", versusEager);
        check(versusEager <= tolerance, "graph decode logits match eager decode");
    }
    // The cache is full now: one more step must be refused, and leave the cache as it was.
    bool refused = false;
    try {
        graphs.forward(at::full({1, 1}, 3, at::kLong), graphCache.get());
    } catch (const cwb::Error& e) {
        refused = std::string(e.what()).find("KV cache") != std::string::npos;
        std::printf("  full cache: %s\n", e.what());
    }
    check(refused && graphCache->length() == kPrompt + kSteps, "a step past the cache's capacity is refused clearly");
    // Reset: the same graph replays over slots that still hold the first sequence.
    at::Tensor otherPrompt = at::randint(0, model.spec.vocab, {1, kPrompt}, at::kLong);
    std::vector<int64_t> againIds;
    const int64_t before = graphCache->graphReplays();
    const at::Tensor again = greedy(graphs, *graphCache, otherPrompt, againIds);
    const double afterReset = normalisedError(cpuReference(model, otherPrompt, againIds), again);
    check(afterReset <= tolerance && graphCache->graphReplays() == before + kSteps,
          "after reset the graph replays a new sequence correctly (error " + std::to_string(afterReset) + ")");
    // Changed weights: the runtime forgets its blocks, and the next step captures a new graph.
    graphs.invalidateBlock(-1);
    const at::Tensor recaptured = greedy(graphs, *graphCache, otherPrompt, againIds);
    check(graphCache->graphReplays() == kSteps && normalisedError(again, recaptured) <= 1e-6,
          "after invalidateBlock a new graph is captured and gives the same logits");
}

// A compressed output head runs through its kernel (W4A16 / W8A16 / FP8 GEMM) in prefill, eager and graph decode,
// with the final norm inside the W4A16 / W8A16 launch where fused decode is on; runCase checks the logits.
void compressedHeadCase(const std::string& caseName, const cwb::Model& model, at::ScalarType dtype, double cpuTolerance = 0.0) {
    cwb::Transformer runtime(model, gpuOptions(cwb::DecodeMode::CudaGraph, dtype));
    const auto& paths = runtime.layerPaths();
    const auto head = paths.find("lm_head");
    check(head != paths.end() && head->second.native,
          caseName + ": the compressed head runs through a kernel (" + (head == paths.end() ? "no path" : head->second.how) + ")");
    // A prompt past the integer kernels' 32 rows: the head runs in slices of them (no dense copy of its own size).
    const at::Tensor prompt = at::randint(0, model.spec.vocab, {1, 77}, at::kLong);
    const double prefill = normalisedError(cwb::Transformer(model).forward(prompt), runtime.forward(prompt).to(at::kCPU));
    std::printf("  prefill of 77 tokens against the CPU: normalised logit error %.3g\n", prefill);
    check(prefill <= (cpuTolerance > 0 ? cpuTolerance : dtype == at::kBFloat16 ? kBf16Tolerance : kFp16Tolerance),
          caseName + ": a 77-token prefill matches the CPU path");
    runCase(caseName, model, dtype, true, cpuTolerance);
}

// Graph decode with the dense GEMV kernel (the default) against the same with cuBLAS (RuntimeOptions::denseGemv
// off): the same greedy ids and logits within the tolerance, both matching the CPU, and not bit-identical (so the
// switch did change the kernel that ran).
void denseGemvCase(const std::string& caseName, const cwb::Model& model, at::ScalarType dtype) {
    const std::string name = caseName + (dtype == at::kBFloat16 ? ", bf16" : ", fp16") + ": dense GEMV on vs off";
    const double tolerance = dtype == at::kBFloat16 ? kBf16Tolerance : kFp16Tolerance;
    std::printf("== %s\n", name.c_str());
    at::Tensor prompt = at::randint(0, model.spec.vocab, {1, kPrompt}, at::kLong);
    cwb::RuntimeOptions withCublas = gpuOptions(cwb::DecodeMode::CudaGraph, dtype);
    withCublas.denseGemv = false;
    cwb::Transformer gemv(model, gpuOptions(cwb::DecodeMode::CudaGraph, dtype)), cublas(model, withCublas);
    auto gemvCache = gemv.makeCache(1, kPrompt + kSteps), cublasCache = cublas.makeCache(1, kPrompt + kSteps);
    std::vector<int64_t> gemvIds, cublasIds;
    const at::Tensor gemvLogits = greedy(gemv, *gemvCache, prompt, gemvIds);
    const at::Tensor cublasLogits = greedy(cublas, *cublasCache, prompt, cublasIds);
    const int64_t equal = compareSwitchedDecodes("the GEMV", *gemvCache, *cublasCache, gemvIds, cublasIds, gemvLogits,
                                                 cublasLogits, tolerance, dtype);
    if (equal == kSteps)
        check(!at::equal(cublasLogits, gemvLogits), "the GEMV switch changes the kernel (logits not bit-identical)");
    const double versusCpu = normalisedError(cpuReference(model, prompt, gemvIds), gemvLogits);
    std::printf("  GEMV vs CPU: normalised logit error %.3g\n", versusCpu);
    check(versusCpu <= tolerance, "decode logits with the GEMV match the CPU path");
}

// What one folding case turns on, and how many launches of each folded GEMV one decode step makes with it.
struct Folding {
    bool norms = false, swiGlu = false;   // RuntimeOptions::fusedNormGemv, fusedSwiGluGemv
    int64_t normGemvsPerStep = 0;         // denseGemvRmsNorm launches (norms before q/k/v, gate/up without SwiGLU, head)
    int64_t swiGluGemvsPerStep = 0;       // denseGemvSwiGlu launches (dense gate/up)
};

// `launches` of a folded GEMV over the whole run: a whole number of steps' worth when the step makes any, else none.
bool wholeSteps(int64_t launches, int64_t perStep) {
    return perStep > 0 ? launches > 0 && launches % perStep == 0 : launches == 0;
}

// Graph decode with RMSNorms and / or SiLU * up folded into the dense GEMV (RuntimeOptions::fusedNormGemv,
// fusedSwiGluGemv) against separate norm and SiLU kernels: the folded GEMVs launched a whole number of times their
// count per decode step (the host runs a step three times to capture it) with the switches on and never with them
// off; same greedy ids, logits within the tolerance of each other and of the CPU path. The folded forms do not round
// the normalised x (nor gate and up) to the activation type, so the logits are not bit-identical to separate kernels.
void foldingCase(const std::string& caseName, const cwb::Model& model, at::ScalarType dtype, const Folding& folding) {
    const std::string what = folding.norms && folding.swiGlu ? "RMSNorm and SiLU * up" : folding.norms ? "RMSNorm" : "SiLU * up";
    const std::string name = caseName + (dtype == at::kBFloat16 ? ", bf16" : ", fp16") + ": " + what + " in the GEMV on vs off";
    const double tolerance = dtype == at::kBFloat16 ? kBf16Tolerance : kFp16Tolerance;
    std::printf("== %s\n", name.c_str());
    at::Tensor prompt = at::randint(0, model.spec.vocab, {1, kPrompt}, at::kLong);
    cwb::RuntimeOptions separate = gpuOptions(cwb::DecodeMode::CudaGraph, dtype);
    separate.fusedNormGemv = separate.fusedSwiGluGemv = false;
    cwb::RuntimeOptions withFolding = gpuOptions(cwb::DecodeMode::CudaGraph, dtype);
    withFolding.fusedNormGemv = folding.norms;
    withFolding.fusedSwiGluGemv = folding.swiGlu;
    cwb::Transformer folded(model, withFolding), unfolded(model, separate);
    auto foldedCache = folded.makeCache(1, kPrompt + kSteps), unfoldedCache = unfolded.makeCache(1, kPrompt + kSteps);
    std::vector<int64_t> foldedIds, unfoldedIds;
    const int64_t normBefore = cwb::denseGemvRmsNormLaunchCount(), swiGluBefore = cwb::denseGemvSwiGluLaunchCount();
    const at::Tensor foldedLogits = greedy(folded, *foldedCache, prompt, foldedIds);
    const int64_t normOn = cwb::denseGemvRmsNormLaunchCount() - normBefore;
    const int64_t swiGluOn = cwb::denseGemvSwiGluLaunchCount() - swiGluBefore;
    const at::Tensor unfoldedLogits = greedy(unfolded, *unfoldedCache, prompt, unfoldedIds);
    const int64_t normOff = cwb::denseGemvRmsNormLaunchCount() - normBefore - normOn;
    const int64_t swiGluOff = cwb::denseGemvSwiGluLaunchCount() - swiGluBefore - swiGluOn;
    std::printf("  GEMV-with-RMSNorm launches: %lld on, %lld off (%lld per step); GEMV-with-SwiGLU: %lld on, %lld off"
                " (%lld per step)\n", (long long)normOn, (long long)normOff, (long long)folding.normGemvsPerStep,
                (long long)swiGluOn, (long long)swiGluOff, (long long)folding.swiGluGemvsPerStep);
    check(wholeSteps(normOn, folding.normGemvsPerStep) && normOff == 0,
          "the switches fold " + std::to_string(folding.normGemvsPerStep) + " norms into a GEMV per step on and none off (" +
              std::to_string(normOn) + " and " + std::to_string(normOff) + " launches)");
    check(wholeSteps(swiGluOn, folding.swiGluGemvsPerStep) && swiGluOff == 0,
          "the switches run " + std::to_string(folding.swiGluGemvsPerStep) + " SwiGLU GEMVs per step on and none off (" +
              std::to_string(swiGluOn) + " and " + std::to_string(swiGluOff) + " launches)");
    const int64_t equal = compareSwitchedDecodes("folding into the GEMV", *foldedCache, *unfoldedCache, foldedIds,
                                                 unfoldedIds, foldedLogits, unfoldedLogits, tolerance, dtype);
    if (equal != kSteps) {   // diverged at a near tie: each side must still follow the CPU path along its own ids
        for (const auto& [side, ids, logits] : {std::tuple<const char*, const std::vector<int64_t>&, const at::Tensor&>{
                                                    "folded", foldedIds, foldedLogits},
                                                {"separate", unfoldedIds, unfoldedLogits}}) {
            const at::Tensor cpu = cpuReference(model, prompt, ids);
            const at::Tensor perStep = (logits - cpu).abs().amax(-1);
            const double error = normalisedError(cpu, logits);
            std::printf("  %s vs CPU along its own ids: normalised logit error %.3g, largest |difference| %.4g at step"
                        " %lld\n", side, error, perStep.max().item<double>(), (long long)perStep.argmax().item<int64_t>());
            check(error <= tolerance, std::string(side) + " decode matches the CPU path along its own ids");
        }
    }
    const double versusCpu = normalisedError(cpuReference(model, prompt, foldedIds), foldedLogits);
    std::printf("  folded vs CPU: normalised logit error %.3g\n", versusCpu);
    check(versusCpu <= tolerance, "decode logits with folding match the CPU path");
}

// Native integer layers with the block's norms and residual adds inside their launches (RuntimeOptions::
// fusedIntLinear, the default) against separate kernels: per decode step `normsPerStep` norms formed inside the W4A16
// stream kernel, `residualsPerStep` residuals added by the W4A16 / W8A16 kernels and `swiGlusPerStep` gate/up launches
// writing silu(gate) · up, none with the switch off; same greedy ids (or each side on the CPU path along
// its own), logits within tolerance of each other and of the CPU.
void intLinearCase(const std::string& caseName, const cwb::Model& model, at::ScalarType dtype, int64_t normsPerStep,
                   int64_t residualsPerStep, int64_t swiGlusPerStep) {
    const std::string name = caseName + (dtype == at::kBFloat16 ? ", bf16" : ", fp16") + ": norms and residuals in the integer kernels on vs off";
    const double tolerance = dtype == at::kBFloat16 ? kBf16Tolerance : kFp16Tolerance;
    std::printf("== %s\n", name.c_str());
    at::Tensor prompt = at::randint(0, model.spec.vocab, {1, kPrompt}, at::kLong);
    cwb::RuntimeOptions onOptions = gpuOptions(cwb::DecodeMode::CudaGraph, dtype), offOptions = onOptions;
    onOptions.fusedIntLinear = true;
    offOptions.fusedIntLinear = false;
    cwb::Transformer on(model, onOptions), off(model, offOptions);
    auto onCache = on.makeCache(1, kPrompt + kSteps), offCache = off.makeCache(1, kPrompt + kSteps);
    std::vector<int64_t> onIds, offIds;
    const int64_t norms0 = cwb::nativeNormFoldCount(), residuals0 = cwb::nativeResidualFoldCount();
    const int64_t swiGlus0 = cwb::nativeSwiGluFoldCount();
    const at::Tensor onLogits = greedy(on, *onCache, prompt, onIds);
    const int64_t normsOn = cwb::nativeNormFoldCount() - norms0, residualsOn = cwb::nativeResidualFoldCount() - residuals0;
    const int64_t swiGlusOn = cwb::nativeSwiGluFoldCount() - swiGlus0;
    const at::Tensor offLogits = greedy(off, *offCache, prompt, offIds);
    const int64_t normsOff = cwb::nativeNormFoldCount() - norms0 - normsOn;
    const int64_t residualsOff = cwb::nativeResidualFoldCount() - residuals0 - residualsOn;
    const int64_t swiGlusOff = cwb::nativeSwiGluFoldCount() - swiGlus0 - swiGlusOn;
    std::printf("  silu(gate) * up written by gate/up's kernel: %lld on, %lld off (%lld per step)\n", (long long)swiGlusOn,
                (long long)swiGlusOff, (long long)swiGlusPerStep);
    check(wholeSteps(swiGlusOn, swiGlusPerStep) && swiGlusOff == 0,
          "the switch writes " + std::to_string(swiGlusPerStep) + " silu(gate) * up per step from gate/up's kernel on and none off");
    std::printf("  norms formed in the kernel: %lld on, %lld off (%lld per step); residuals added: %lld on, %lld off (%lld"
                " per step)\n", (long long)normsOn, (long long)normsOff, (long long)normsPerStep, (long long)residualsOn,
                (long long)residualsOff, (long long)residualsPerStep);
    check(wholeSteps(normsOn, normsPerStep) && normsOff == 0,
          "the switch folds " + std::to_string(normsPerStep) + " norms per step into integer kernels on and none off");
    check(wholeSteps(residualsOn, residualsPerStep) && residualsOff == 0,
          "the switch adds " + std::to_string(residualsPerStep) + " residuals per step in integer kernels on and none off");
    compareSwitchedDecodes("norms and residuals in the integer kernels", *onCache, *offCache, onIds, offIds, onLogits,
                           offLogits, tolerance, dtype);
    for (const auto& [side, ids, logits] : {std::tuple<const char*, const std::vector<int64_t>&, const at::Tensor&>{
                                                "folded", onIds, onLogits},
                                            {"separate", offIds, offLogits}}) {
        const double error = normalisedError(cpuReference(model, prompt, ids), logits);
        std::printf("  %s vs CPU along its own ids: normalised logit error %.3g\n", side, error);
        check(error <= tolerance, std::string(side) + " decode matches the CPU path");
    }
}

// Split decode attention with its chunks merged inside the attention launch against the merge kernel: by the last
// block (setDecodeAttentionMergeInKernel; the counters live in the KV cache across steps and graph replays, one
// workspace per layer), or in thread-block clusters through shared memory (setDecodeAttentionClusterMerge, compute
// capability 9.0+). A 128-slot cache splits into 4 chunks of 32 on any GPU of 4+ multiprocessors, and an 80-token
// prompt puts the 20 decoded positions (80..99) across the third and fourth chunks, so 3, then 4 chunks are merged.
// Same greedy ids, logits within tolerance; the merged launches counted on and none off.
enum class InLaunchMerge { LastBlock, Cluster };
void attentionMergeCase(const std::string& caseName, const cwb::Model& model, at::ScalarType dtype, InLaunchMerge how) {
    const bool cluster = how == InLaunchMerge::Cluster;
    const std::string name = caseName + (dtype == at::kBFloat16 ? ", bf16" : ", fp16") + ": attention chunks merged " +
                             (cluster ? "in clusters" : "inside the launch") + " vs by the merge kernel";
    const double tolerance = dtype == at::kBFloat16 ? kBf16Tolerance : kFp16Tolerance;
    std::printf("== %s\n", name.c_str());
    // The other in-launch merge off for the case (clusters win over the last block's merge where both are on).
    const bool previousCluster = cwb::decodeAttentionClusterMerge(), previousLastBlock = cwb::decodeAttentionMergeInKernel();
    auto set = [&](bool on) {
        cwb::setDecodeAttentionClusterMerge(cluster && on);
        cwb::setDecodeAttentionMergeInKernel(!cluster && on);
    };
    auto restore = [&] {
        cwb::setDecodeAttentionClusterMerge(previousCluster);
        cwb::setDecodeAttentionMergeInKernel(previousLastBlock);
    };
    auto launches = [&] { return cluster ? cwb::fusedAttentionClusterLaunches() : cwb::fusedAttentionMergedLaunches(); };
    at::Tensor prompt = at::randint(0, model.spec.vocab, {1, 80}, at::kLong);
    auto decode = [&](bool inLaunch, std::vector<int64_t>& ids, std::unique_ptr<cwb::KvCache>& cache) {
        set(inLaunch);
        cwb::Transformer runtime(model, gpuOptions(cwb::DecodeMode::CudaGraph, dtype));
        cache = runtime.makeCache(1, model.spec.context);
        return greedy(runtime, *cache, prompt, ids);
    };
    std::vector<int64_t> onIds, offIds;
    std::unique_ptr<cwb::KvCache> onCache, offCache;
    at::Tensor onLogits, offLogits;
    const int64_t merged0 = launches();
    int64_t mergedOn = 0, mergedOff = 0;
    std::string planOn, planOff;   // what `cwb bench` reports as the decode's attention plan
    try {
        onLogits = decode(true, onIds, onCache);
        mergedOn = launches() - merged0;
        planOn = cwb::lastFusedAttentionPlan();
        offLogits = decode(false, offIds, offCache);
        mergedOff = launches() - merged0 - mergedOn;
        planOff = cwb::lastFusedAttentionPlan();
    } catch (...) {
        restore();
        throw;
    }
    restore();
    std::printf("  attention launches that merged %s: %lld on, %lld off\n", cluster ? "in clusters" : "inside",
                (long long)mergedOn, (long long)mergedOff);
    // Host-side counts: a graph's launches are counted when the host runs a step to capture it, not at replays.
    check(wholeSteps(mergedOn, model.spec.layers) && mergedOn > 0 && mergedOff == 0,
          std::string("the switch merges ") + (cluster ? "in clusters" : "inside the attention launch") +
              " in every layer on, never off");
    std::printf("  plans: on \"%s\", off \"%s\"\n", planOn.c_str(), planOff.c_str());
    check(planOn.find(cluster ? "chunks merged in a cluster" : "chunks merged by the last block of each head") !=
                  std::string::npos &&
              planOff.find("chunks merged by a second launch") != std::string::npos &&
              planOff.find("at capacity " + std::to_string(model.spec.context)) != std::string::npos,
          "the recorded plan of the latest attention launch names its merge and the cache's capacity");
    compareSwitchedDecodes(cluster ? "attention merged in clusters" : "attention merged in its launch", *onCache,
                           *offCache, onIds, offIds, onLogits, offLogits, tolerance, dtype);
}

// FP8 / W8A8 layers take no norm or residual into their own launch: with fusedIntLinear on (the default) each block
// still runs the fused add-norm kernel after o_proj (a regression test: the first version of the switch routed them
// through forward + add + norm, one launch more) and no integer kernel folds anything.
void activationQuantizedRoutingCase(const std::string& caseName, const cwb::Model& model, at::ScalarType dtype) {
    std::printf("== %s: the fused add-norm kernel after o_proj, nothing folded into the layers\n", caseName.c_str());
    at::Tensor prompt = at::randint(0, model.spec.vocab, {1, kPrompt}, at::kLong);
    cwb::Transformer runtime(model, gpuOptions(cwb::DecodeMode::CudaGraph, dtype));
    auto cache = runtime.makeCache(1, kPrompt + kSteps);
    std::vector<int64_t> ids;
    const int64_t addNorms0 = cwb::fusedAddRmsNormCount(), norms0 = cwb::nativeNormFoldCount();
    const int64_t residuals0 = cwb::nativeResidualFoldCount(), swiGlus0 = cwb::nativeSwiGluFoldCount();
    greedy(runtime, *cache, prompt, ids);
    const int64_t addNorms = cwb::fusedAddRmsNormCount() - addNorms0;
    std::printf("  fused add-norm calls: %lld (%lld per step)\n", (long long)addNorms, (long long)model.spec.layers);
    check(wholeSteps(addNorms, model.spec.layers), "one fused add-norm per block and step");
    check(cwb::nativeNormFoldCount() == norms0 && cwb::nativeResidualFoldCount() == residuals0 &&
              cwb::nativeSwiGluFoldCount() == swiGlus0,
          "no norm, residual or SiLU * up taken into an FP8 / W8A8 launch");
}

// Decode with programmatic dependent launch (setDecodeDependentLaunch) against plain launches: the same kernels, so
// the logits must agree to rounding noise (a kernel reading its predecessor's output too early would not), in a
// captured graph and in fixed-shape steps without one; on a 9.0+ device the launches must have used it.
void dependentLaunchCase(const std::string& caseName, const cwb::Model& model, at::ScalarType dtype) {
    const std::string name = caseName + (dtype == at::kBFloat16 ? ", bf16" : ", fp16") + ": programmatic dependent launch on vs off";
    std::printf("== %s\n", name.c_str());
    const bool previous = cwb::decodeDependentLaunch();
    at::Tensor prompt = at::randint(0, model.spec.vocab, {1, kPrompt}, at::kLong);
    auto decode = [&](cwb::DecodeMode mode, bool dependent, std::vector<int64_t>& ids, int64_t& replays) {
        cwb::setDecodeDependentLaunch(dependent);
        cwb::Transformer runtime(model, gpuOptions(mode, dtype));
        auto cache = runtime.makeCache(1, kPrompt + kSteps);
        at::Tensor logits = greedy(runtime, *cache, prompt, ids);
        replays = cache->graphReplays();
        return logits;
    };
    std::vector<int64_t> offIds, onIds, streamIds;
    int64_t offReplays = 0, onReplays = 0, streamReplays = 0;
    const at::Tensor off = decode(cwb::DecodeMode::CudaGraph, false, offIds, offReplays);
    const int64_t before = cwb::decodeDependentLaunchCount();
    const at::Tensor on = decode(cwb::DecodeMode::CudaGraph, true, onIds, onReplays);
    const at::Tensor stream = decode(cwb::DecodeMode::FixedShape, true, streamIds, streamReplays);
    const int64_t launches = cwb::decodeDependentLaunchCount() - before;
    cwb::setDecodeDependentLaunch(previous);
    const bool supported = cwb::decodeDependentLaunchSupported();
    std::printf("  launches with PDL: %lld (device %s it)\n", (long long)launches, supported ? "supports" : "does not support");
    check(supported ? launches > 0 : launches == 0, "the setting took effect where the device supports it");
    check(offReplays == kSteps && onReplays == kSteps && streamReplays == 0,
          "the graphs replayed every step, fixed-shape steps ran without one");
    const double graphError = normalisedError(off, on), streamError = normalisedError(off, stream);
    std::printf("  PDL graph vs plain graph: normalised logit error %.3g%s; PDL without graph: %.3g\n", graphError,
                at::equal(off, on) ? " (bit-identical)" : "", streamError);
    check(offIds == onIds && offIds == streamIds, "greedy ids with and without PDL are the same");
    check(graphError <= 1e-6 && streamError <= 1e-6, "logits with and without PDL agree to rounding noise");
}

} // namespace

int main() {
    if (!at::hasCUDA()) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    if (!cwb::DecodeGraph::available()) {
        std::printf("SKIP: LibTorch in this build has no CUDA graphs (CWB_TORCH_CUDA off)\n");
        return 77;
    }
    try {
        at::manual_seed(1);
        const bool kernels = cwb::nativeKernelsBuilt();
        if (!kernels) std::printf("(no INT4 or fused-kernel cases: this build has no CUDA kernels)\n");
        for (cwb::RopeStyle style : {cwb::RopeStyle::Halves, cwb::RopeStyle::AdjacentPairs}) {
            const std::string rope = style == cwb::RopeStyle::Halves ? ", half-split RoPE" : ", adjacent-pair RoPE";
            for (bool bias : {false, true}) {
                auto dense = makeModel(bias, style);
                const std::string what = std::string("GQA 4/2") + rope + (bias ? ", q/k/v biases" : "");
                for (bool fused : {true, false}) {   // LibTorch's ops (checked before the kernels) once per layout
                    if ((fused && !kernels) || (!fused && kernels && !bias)) continue;
                    runCase("dense fp16, " + what, *dense, at::kHalf, fused);
                    if (kernels) runCase("INT4 g128 (W4A16), " + what, *int4Variant(*dense), at::kHalf, fused);
                }
            }
        }
        // GQA ratio 4 with head dim 128, and bf16 activations.
        auto wide = makeModel(true, cwb::RopeStyle::Halves, Shape{4, 1, 128});
        runCase("dense fp16, GQA 4/1, head dim 128, q/k/v biases", *wide, at::kHalf, kernels);
        runCase("dense, GQA 4/2", *makeModel(false), at::kBFloat16, kernels);
        if (kernels) {
            denseGemvCase("GQA 4/2", *makeModel(false), at::kHalf);
            denseGemvCase("GQA 4/1, head dim 128, q/k/v biases", *wide, at::kBFloat16);
            // per-token activation quantization (act_quant kernels) captured in the graph
            auto base = makeModel(true);
            runCase("FP8 E4M3 dynamic activations, GQA 4/2", *activationQuantizedVariant(*base, true), at::kHalf, true,
                    kQuantizedActivationTolerance);
            runCase("SmoothQuant W8A8, GQA 4/2", *activationQuantizedVariant(*base, false), at::kBFloat16, true,
                    kQuantizedActivationTolerance);
            activationQuantizedRoutingCase("FP8 E4M3 dynamic activations, GQA 4/2", *activationQuantizedVariant(*base, true),
                                           at::kHalf);
            // Folded per step, with the norms alone: both norms of every block and the final norm; with INT4 attention
            // only the MLP's norm and the final one (the norm before INT4 q/k/v keeps its kernel), with INT4 MLP the
            // reverse. With SwiGLU too, every dense gate/up runs the SwiGLU GEMV, its norm inside it.
            auto gqa = makeModel(false);
            const int64_t layers = gqa->spec.layers;
            auto int4Attention = int4Only(*wide, "self_attn");
            auto int4Mlp = int4Only(*gqa, "mlp");
            foldingCase("dense, GQA 4/2", *gqa, at::kHalf, {true, false, 2 * layers + 1, 0});
            foldingCase("dense, GQA 4/2", *gqa, at::kHalf, {false, true, 0, layers});
            foldingCase("dense, GQA 4/2", *gqa, at::kHalf, {true, true, layers + 1, layers});
            foldingCase("dense, GQA 4/1, head dim 128, q/k/v biases", *wide, at::kBFloat16, {true, false, 2 * layers + 1, 0});
            foldingCase("dense, GQA 4/1, head dim 128, q/k/v biases", *wide, at::kBFloat16, {true, true, layers + 1, layers});
            foldingCase("INT4 attention, dense MLP, q/k/v biases", *int4Attention, at::kHalf, {true, false, layers + 1, 0});
            foldingCase("INT4 attention, dense MLP, q/k/v biases", *int4Attention, at::kHalf, {true, true, 1, layers});
            foldingCase("dense attention, INT4 MLP", *int4Mlp, at::kHalf, {true, true, layers + 1, 0});
            // Every linear INT4 (q/k/v and gate/up fused natively): both norms and both residuals of every block, and
            // silu(gate) · up written by every gate/up launch.
            intLinearCase("INT4 g128, GQA 4/2", *int4Variant(*gqa), at::kHalf, 2 * layers, 2 * layers, layers);
            intLinearCase("INT4 g128, GQA 4/1, head dim 128, q/k/v biases", *int4Variant(*wide), at::kBFloat16,
                          2 * layers, 2 * layers, layers);
            // INT4 attention only: the input norm and o_proj's residual; INT4 MLP only: the post-attention norm,
            // SiLU · up and down_proj's residual.
            intLinearCase("INT4 attention, dense MLP, q/k/v biases", *int4Attention, at::kHalf, layers, layers, 0);
            intLinearCase("dense attention, INT4 MLP", *int4Mlp, at::kHalf, layers, layers, layers);
            // INT8: the W8A16 kernels add both residuals; the norms and SiLU · up stay separate kernels (run inside
            // wxa16Gemm's launch sequence, siluMul after gate/up's product).
            intLinearCase("INT8 g128, GQA 4/2", *intVariant(*gqa, 8), at::kHalf, 0, 2 * layers, 0);
            attentionMergeCase("dense, GQA 4/2", *gqa, at::kHalf, InLaunchMerge::LastBlock);
            attentionMergeCase("INT4 g128, GQA 4/1, head dim 128, q/k/v biases", *int4Variant(*wide), at::kBFloat16,
                               InLaunchMerge::LastBlock);
            if (cwb::decodeAttentionClustersSupported()) {
                attentionMergeCase("dense, GQA 4/2", *gqa, at::kHalf, InLaunchMerge::Cluster);
                attentionMergeCase("INT4 g128, GQA 4/1, head dim 128, q/k/v biases", *int4Variant(*wide),
                                   at::kBFloat16, InLaunchMerge::Cluster);
            } else {
                std::printf("  cluster merge not run: this device is below compute capability 9.0\n");
            }
            // The output head compressed too (quantize.rtn / quantize.fp8 "head"), tied to the embedding or not.
            compressedHeadCase("INT4 g128, head INT4 too", *withCompressedHead(int4Variant(*gqa), 4), at::kHalf);
            compressedHeadCase("INT4 g128, tied head INT4 too", *withCompressedHead(int4Variant(*gqa), 4, true), at::kBFloat16);
            compressedHeadCase("dense, head INT8", *withCompressedHead(gqa->clone(), 8), at::kHalf);
            compressedHeadCase("FP8 E4M3 dynamic activations, head FP8 too",
                               *withCompressedHead(activationQuantizedVariant(*base, true), 0), at::kHalf,
                               kQuantizedActivationTolerance);
            dependentLaunchCase("dense, GQA 4/2", *gqa, at::kHalf);
            dependentLaunchCase("INT4 attention (W4A16 between the decode kernels), q/k/v biases",
                                *int4Only(*wide, "self_attn"), at::kHalf);
            dependentLaunchCase("dense, GQA 4/1, head dim 128, q/k/v biases", *wide, at::kBFloat16);
        }
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return cwb::testing::finishChecks();
}
