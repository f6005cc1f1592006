// GPU test (plain executable, CTest label `gpu`): a small random Llama whose linear layers are 2:4-pruned (all but
// one, which stays dense) runs its 2:4 layers through cuSPARSELt inside the Transformer, and gives the logits of the
// dense CUDA path and of the fp32 CPU path; Transformer::layerPaths names the kernel of each 2:4 layer, leaves the
// dense layer out, and below RuntimeOptions::sparseMinRows the layers run on their dense weights (the same logits
// as the dense run, bit for bit). Exits 77 without a GPU or the kernels, or when cuSPARSELt cannot be loaded (after
// checking that the layers then say "dense cuBLAS: ..." with the reason). Before that, with or without cuSPARSELt:
// batch-1 decode with the 2:4 GEMV on packed rows (RuntimeOptions::sparse24Gemv) in fixed-shape steps and in a CUDA
// graph, against the dense GEMV and the CPU, and the device packer's round trip.
#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/gpu/gpu_check.h"
#include "core/compress/prune_math.h"
#include "core/model/model.h"
#include "core/runtime/cuda_linear.h"
#include "core/runtime/dense_gemv.h"
#include "core/util/error.h"
#include "core/runtime/sparse24_linear.h"
#include "core/runtime/transformer.h"
#include "tests/gpu/random_llama.h"

using cwb::testing::normalisedError;

namespace {

// Normalised logit error against the fp32 CPU path: fp16 activations carry ~11 bits, bf16 ~8 (as for the other
// runtime kernels); between the sparse and the dense CUDA runs only summation order and rounding differ.
constexpr double kFp16Tolerance = 1e-3;
constexpr double kBf16Tolerance = 1e-2;
const std::string kDenseLayer = "model.layers.1.mlp.down_proj";

using cwb::testing::check;

std::unique_ptr<cwb::Model> makePrunedModel() {
    auto m = std::make_unique<cwb::Model>();
    m->spec = cwb::testing::smallLlamaSpec();
    m->spec.ffn = 512;
    m->path = "test:sparse24-runtime";
    cwb::testing::fillRandomLlama(*m, 11);
    for (const std::string& layer : m->linearLayers()) {
        if (layer == kDenseLayer) continue;
        const at::Tensor w = m->floatTensor(layer + ".weight");
        m->replaceTensor(layer + ".weight", w * cwb::prune::nmMask(w.abs(), 2, 4));
    }
    return m;
}

cwb::RuntimeOptions cudaOptions(at::ScalarType dtype, int64_t sparseMinRows) {
    cwb::RuntimeOptions o;
    o.device = at::Device(at::kCUDA);
    o.dtype = dtype;
    o.sparseMinRows = sparseMinRows;
    o.decode = cwb::DecodeMode::Eager;
    return o;
}

// Teacher-forced batch-1 decode (a prefill of 6 tokens, then one token per step) with the 2:4 GEMV on packed rows
// against the same runtime with the dense GEMV (sparse24Gemv off) and the CPU. cuSPARSELt is off (sparseMinRows 0),
// so this runs wherever the kernels are built.
void packedGemvCase(const cwb::Model& model, at::ScalarType dtype, double tolerance) {
    const std::string type = c10::toString(dtype);
    constexpr int64_t kPrefill = 6, kLength = 14;
    const at::Tensor prompt = at::randint(0, model.spec.vocab, {1, kLength}, at::kLong);
    const at::Tensor reference = cwb::Transformer(model).forward(prompt);
    for (cwb::DecodeMode mode : {cwb::DecodeMode::FixedShape, cwb::DecodeMode::CudaGraph}) {
        const std::string tag = type + (mode == cwb::DecodeMode::FixedShape ? ", fixed-shape steps" : ", CUDA graph");
        auto decode = [&](bool packed, bool keepDense, int64_t& launches) {
            cwb::RuntimeOptions o = cudaOptions(dtype, 0);
            check(o.sparse24Gemv && o.sparse24KeepDense, "the defaults: the 2:4 GEMV on, the dense copy kept");
            o.decode = mode;
            o.sparse24Gemv = packed;
            o.sparse24KeepDense = keepDense;
            cwb::Transformer runtime(model, o);
            auto cache = runtime.makeCache(1, kLength);
            const int64_t before = cwb::sparse24GemvLaunchCount();
            std::vector<at::Tensor> steps = {runtime.forward(prompt.narrow(1, 0, kPrefill), cache.get())};
            for (int64_t t = kPrefill; t < kLength; ++t) steps.push_back(runtime.forward(prompt.narrow(1, t, 1), cache.get()));
            launches = cwb::sparse24GemvLaunchCount() - before;
            int64_t gemvLayers = 0, dropped = 0;
            for (const auto& [name, path] : runtime.layerPaths()) {
                gemvLayers += path.twoFourGemv ? 1 : 0;
                dropped += path.denseDropped ? 1 : 0;
            }
            const std::string summary = runtime.layerPathSummary();
            if (packed) {
                std::printf("  %s%s: %s\n", tag.c_str(), keepDense ? " (dense kept)" : "", summary.c_str());
                check(gemvLayers == 7 && summary.find("2:4 GEMV on packed rows (decode): 7 layers") != std::string::npos,
                      tag + ": the 7 pruned matrices are packed for the GEMV, and the summary says so");
                check(dropped == (keepDense ? 0 : 7) &&
                          (summary.find("no dense copy") != std::string::npos) == !keepDense,
                      tag + (keepDense ? ": sparse24KeepDense keeps the dense copies" : ": with sparse24KeepDense off the dense copies are dropped"));
            } else {
                check(gemvLayers == 0 && summary.find("2:4 GEMV") == std::string::npos,
                      tag + ": with sparse24Gemv off nothing is packed");
            }
            return at::cat(steps, 1);
        };
        int64_t onLaunches = 0, offLaunches = 0, keptLaunches = 0;
        // The prefill (6 rows) unpacks the packed rows for cuBLAS where the dense copy was dropped.
        const at::Tensor on = decode(true, false, onLaunches), off = decode(false, false, offLaunches);
        const at::Tensor kept = decode(true, true, keptLaunches);
        check(at::equal(on, kept) && keptLaunches == onLaunches,
              tag + ": with the dense copy kept the logits and launches are the same (prefill on unpacked rows = dense)");
        const int64_t steps = kLength - kPrefill;
        std::printf("  %s: 2:4 GEMV launches %lld on, %lld off\n", tag.c_str(), (long long)onLaunches, (long long)offLaunches);
        // Host-side counts: fixed-shape steps launch every step; a graph counts the steps the host ran to capture it.
        const bool counted = mode == cwb::DecodeMode::FixedShape ? onLaunches == 7 * steps
                                                                 : onLaunches > 0 && onLaunches % 7 == 0;
        check(counted && offLaunches == 0, tag + ": the 7 packed layers ran the 2:4 GEMV at each step on, never off");
        const double versusCpu = normalisedError(reference, on), versusDense = normalisedError(off, on);
        std::printf("  %s: packed 2:4 decode vs CPU %.3g, vs the dense GEMV %.3g (tolerance %.0e)\n", tag.c_str(),
                    versusCpu, versusDense, tolerance);
        check(versusCpu <= tolerance && versusDense <= tolerance, tag + ": packed 2:4 decode matches the dense GEMV and the CPU");
    }
}

// The device packer (tensor operations) against the weight: the packed rows unpack to it exactly; a weight that is
// not 2:4, or of 24 columns, is refused with the layer's name.
void devicePackerCase(const cwb::Model& model, at::ScalarType dtype) {
    const std::string type = c10::toString(dtype);
    const std::string layer = "model.layers.0.mlp.gate_proj";
    const at::Tensor w = model.floatTensor(layer + ".weight").to(at::Device(at::kCUDA), dtype);
    const cwb::Sparse24Rows packed = cwb::packSparse24Rows(w, layer);
    check(packed.values.sizes() == at::IntArrayRef({w.size(0), w.size(1) / 2}) &&
              packed.meta.sizes() == at::IntArrayRef({w.size(0), w.size(1) / 16}) && packed.bytes() * 16 == size_t(w.nbytes()) * 9,
          type + ": packed rows hold K/2 values and K/16 position words per row (9/16 of the dense bytes)");
    check(at::equal(cwb::unpackSparse24Rows(packed), w), type + ": the device-packed rows unpack to the weight");
    std::string notTwoFour, narrow;
    try {
        at::Tensor dense = w.clone();
        dense[3].fill_(1.0);
        cwb::packSparse24Rows(dense, layer);
    } catch (const cwb::Error& e) {
        notTwoFour = e.what();
    }
    try {
        cwb::packSparse24Rows(w.narrow(1, 0, 24).contiguous(), layer);
    } catch (const cwb::Error& e) {
        narrow = e.what();
    }
    check(notTwoFour.find(layer) != std::string::npos && notTwoFour.find("row 3, columns 0..3") != std::string::npos,
          type + ": a dense row is refused, named: " + notTwoFour);
    check(narrow.find("24 columns") != std::string::npos, type + ": 24 columns are refused: " + narrow);
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
    setenv("CWB_SPARSE24_CACHE", "off", 1);   // the automatic case searches; nothing is written to the home folder
    try {
        auto model = makePrunedModel();
        at::manual_seed(3);
        const at::Tensor prompt = at::randint(0, model->spec.vocab, {2, 40}, at::kLong);   // 80 rows
        cwb::Transformer cpu(*model);
        const at::Tensor reference = cpu.forward(prompt);
        for (auto dtype : {at::kHalf, at::kBFloat16}) {
            devicePackerCase(*model, dtype);
            packedGemvCase(*model, dtype, dtype == at::kHalf ? kFp16Tolerance : kBf16Tolerance);
        }
        for (auto dtype : {at::kHalf, at::kBFloat16}) {
            const double tolerance = dtype == at::kHalf ? kFp16Tolerance : kBf16Tolerance;
            const std::string type = c10::toString(dtype);
            cwb::RuntimeOptions denseOptions = cudaOptions(dtype, 1);
            denseOptions.nativeKernels = false;
            cwb::Transformer dense(*model, denseOptions);
            const at::Tensor denseLogits = dense.forward(prompt);
            check(dense.layerPaths().empty(), type + ": with native kernels off no layer is routed to cuSPARSELt");

            cwb::Transformer sparse(*model, cudaOptions(dtype, 1));
            const at::Tensor sparseLogits = sparse.forward(prompt);
            const auto& paths = sparse.layerPaths();
            std::printf("  %s: %s\n", type.c_str(), sparse.layerPathSummary().c_str());
            // Per block: qkv (fused), o, gate_up (fused), down; block 1's down_proj was left dense.
            bool allTwoFour = paths.size() == 7 && paths.count(kDenseLayer) == 0;
            int64_t onCusparseLt = 0;
            std::string fallback;
            for (const auto& [name, path] : paths) {
                allTwoFour = allTwoFour && path.twoFour;
                if (path.native && path.how == "2:4 cuSPARSELt (M >= 1)") ++onCusparseLt;
                if (!path.native) fallback = path.how;
            }
            check(allTwoFour, type + ": the 7 pruned matrices (fused qkv and gate_up) are listed as 2:4, the dense one is not");
            if (onCusparseLt == 0) {
                check(fallback.rfind("dense cuBLAS: ", 0) == 0, type + ": without cuSPARSELt the layers say why: " + fallback);
                check(normalisedError(denseLogits, sparseLogits) == 0.0, type + ": and they run on the dense weights");
                std::printf("SKIP: cuSPARSELt unavailable (%s)\n", fallback.c_str());
                return cwb::testing::failureCount() ? 1 : 77;
            }
            check(onCusparseLt == 7, type + ": all 7 run through \"2:4 cuSPARSELt (M >= 1)\"");
            const double versusCpu = normalisedError(reference, sparseLogits);
            const double versusDense = normalisedError(denseLogits, sparseLogits);
            std::printf("  %s: sparse vs CPU %.3g, sparse vs dense CUDA %.3g, dense CUDA vs CPU %.3g (tolerance %.0e)\n",
                        type.c_str(), versusCpu, versusDense, normalisedError(reference, denseLogits), tolerance);
            check(versusCpu <= tolerance, type + ": 2:4 logits match the CPU");
            check(versusDense <= tolerance, type + ": 2:4 logits match the dense CUDA path");
            // ... and are cuSPARSELt's own: another kernel rounds differently (the layer paths alone could be mislabelled).
            check(!at::equal(sparseLogits, denseLogits), type + ": 2:4 logits are not the dense path's bits");

            // Below the threshold the same layers run on their dense weights.
            cwb::Transformer high(*model, cudaOptions(dtype, 1 << 30));
            check(at::equal(high.forward(prompt), denseLogits), type + ": below sparseMinRows the logits are the dense path's");

            // The automatic threshold (2048 rows where the configuration search is known to be safe): a 28 x 80
            // batch (2240 rows) runs the searched kernels; a smaller one stays dense.
            cwb::Transformer automatic(*model, cudaOptions(dtype, cwb::kSparse24Automatic));
            const at::Tensor wide = at::randint(0, model->spec.vocab, {28, 80}, at::kLong);
            const at::Tensor wideLogits = automatic.forward(wide);
            const std::string how = automatic.layerPaths().begin()->second.how;
            std::printf("  %s: automatic: %s\n", type.c_str(), automatic.layerPathSummary().c_str());
            if (how == "2:4 cuSPARSELt (M >= 2048)") {
                const double wideError = normalisedError(dense.forward(wide), wideLogits);
                std::printf("  %s: 2240 rows, searched 2:4 vs dense CUDA %.3g\n", type.c_str(), wideError);
                check(wideError <= tolerance, type + ": the automatic threshold's searched kernels match the dense path");
                check(at::equal(automatic.forward(prompt), denseLogits), type + ": below 2048 rows it stays dense");
            } else {
                check(how.rfind("dense cuBLAS: no configuration search known to be safe", 0) == 0,
                      type + ": where no search is known to be safe the automatic threshold keeps 2:4 dense and says so: " + how);
            }

            // Prefill (72 rows) and token-by-token decode (2 rows), both on cuSPARSELt with sparseMinRows 1.
            cwb::Transformer stepwise(*model, cudaOptions(dtype, 1));
            auto cache = stepwise.makeCache(2, 40);
            std::vector<at::Tensor> steps = {stepwise.forward(prompt.narrow(1, 0, 36), cache.get())};
            for (int64_t t = 36; t < 40; ++t) steps.push_back(stepwise.forward(prompt.narrow(1, t, 1), cache.get()));
            const double decodeError = normalisedError(reference, at::cat(steps, 1));
            std::printf("  %s: decode with cache vs CPU %.3g\n", type.c_str(), decodeError);
            check(decodeError <= tolerance, type + ": prefill + decode through cuSPARSELt (m 72 and 2) match the CPU");
        }
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return cwb::testing::finishChecks();
}
