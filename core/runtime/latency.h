#pragma once
// Speed of the runtime on one model: prefill tokens/s, decode ms per token (p50, p99), device memory.
// Used by `cwb bench`; models with random weights of a real model's shapes make the speed of large shapes
// measurable without downloading them.
#include <cstdint>
#include <memory>
#include <string>

#include "core/model/model.h"
#include "core/runtime/transformer.h"

namespace cwb {

class Feedback;

struct LatencyParams {
    int64_t batch = 1;
    int64_t promptTokens = 128;
    int64_t genTokens = 64;
    int64_t prefillRepeats = 3;   // prefill timed this many times (median); one untimed pass loads the weights first
    // On CUDA, untimed prefills after that pass until this many seconds have gone by (at most 100 passes): loading
    // keeps the GPU idle for seconds, and prefills timed while its clocks climb back measured 4391-10488 tok/s for
    // one 7B INT4 model (docs/performance.md, session 13). 0: none. Not on CPU, where one prefill may take seconds.
    double prefillWarmupSeconds = 0.5;
    uint64_t seed = 0;            // prompt token ids are drawn from it
    // Device bytes in use before any model was loaded (deviceMemoryUsedBytes()); -1: sampled when the call starts.
    // Measuring several models in one process, pass one baseline: LibTorch keeps freed blocks cached, so a model
    // measured after another reuses its memory and a per-call baseline would hide that part of its peak.
    int64_t deviceMemoryBaseline = -1;
};

struct LatencyResult {
    double loadSeconds = 0;              // first forward: weights converted, packed, uploaded
    double prefillSeconds = 0;           // median
    double prefillTokensPerSecond = 0;   // batch * promptTokens / prefillSeconds
    double decodeP50Ms = 0, decodeP99Ms = 0, decodeMeanMs = 0;   // one step of `batch` tokens, synchronised
    int64_t peakDeviceBytes = -1;        // driver's count sampled after each phase, minus the baseline; -1: CPU
    std::string layerPaths;              // Transformer::layerPathSummary()
    std::string cpuWeightPlan;           // Transformer::cpuWeightPlan(): "" unless memory decided it
    bool cpuPackedInt = false;           // on the CPU, integer layers ran from their packed levels (Auto resolved)
    size_t decodeBytesSavedByPacking = 0;   // Transformer::decodeBytesSavedByPacking(): 2:4 layers on packed rows
    bool decodeGraphs = false;           // decode steps were replayed from a CUDA graph
    std::string decodeGraphFailure;      // why a graph was wanted but not captured, else ""
    std::string decodeAttentionPlan;     // lastFusedAttentionPlan() after the timed decode; "" where it did not run
    double firstDecodeMs = 0;            // the untimed first decode step (it captures the graph)
    int64_t prefillWarmupRuns = 0;       // untimed prefills between the load pass and the timed ones
    // With graphs: the same decode without them (DecodeMode::Eager) on the same loaded model; -1: not measured.
    double eagerDecodeP50Ms = -1, eagerDecodeP99Ms = -1;
};

// Greedy decoding from random prompt ids; every step waits for the device (the next ids are read back). The first
// decode step is not timed. With options.decode = CudaGraph on CUDA, decode is timed both with and without graphs.
LatencyResult measureLatency(const Model& model, const RuntimeOptions& options, const LatencyParams& params,
                             Feedback* feedback = nullptr);

// Device-to-device copy bandwidth (bytes read + written per second) of `bytes`-sized buffers, median of 5 timings.
double measureCopyBandwidth(const at::Device& device, int64_t bytes = int64_t(1) << 30);

// Shapes of the synthetic models `cwb bench --synthetic NAME` builds: llama-7b (hidden 4096, 32 heads, ffn 11008),
// llama-70b (hidden 8192, 64 heads, 8 kv heads, ffn 28672), vocabulary 32000; llama3-8b and llama3-70b (Llama-3's
// vocabulary of 128256, context 8192, RoPE theta 500000).
struct SyntheticShape {
    std::string name;
    int64_t hidden, heads, kvHeads, headDim, ffn, vocab, context;
    int64_t totalLayers;     // of the real model
    int64_t defaultLayers;   // what `cwb bench` builds without --layers (70B's 80 blocks would not fit one GPU)
    std::string model;       // the model whose shapes these are, for the report
    double ropeTheta = 10000.0;
};
// Throws cwb::Error naming the known shapes for any other name.
const SyntheticShape& syntheticShape(const std::string& name);

// A model of those shapes with `layers` blocks (1..totalLayers) of random fp16 weights (std 0.02; norms 1), generated
// on `device`. Speed measurements only. `context` > 0 replaces the shape's context (1..kMaxSyntheticContext): with
// random weights a longer one is meaningful for speed (the attention over a long cache), not for text. Both counts are
// checked before any weight is made.
constexpr int64_t kMaxSyntheticContext = int64_t(1) << 20;
// The context such a model gets: the shape's own for 0, else `context`, refused (cwb::Error) outside 1..kMax.
int64_t syntheticContext(const SyntheticShape& shape, int64_t context);
std::unique_ptr<Model> syntheticLlama(const std::string& name, int64_t layers, const at::Device& device, uint64_t seed = 0,
                                      int64_t context = 0);
std::unique_ptr<Model> syntheticLlama7b(int64_t layers, const at::Device& device, uint64_t seed = 0);

// The variant a speed measurement needs without the cost of quantizing: every block linear becomes an IntLinear
// with random levels in the layout RTN gives (`bits`, symmetric, `groupSize`); values are meaningless. With `head`,
// the output head too (lm_head, as quantize.rtn's "head"; the synthetic models' head is untied).
std::unique_ptr<Model> randomIntVariant(const Model& base, int bits, int64_t groupSize, const at::Device& device,
                                        uint64_t seed = 0, bool head = false);

// The same for the 8-bit float and integer formats: FP8 E4M3 codes with per-channel scales and dynamic activations
// (what quantize.fp8 gives), or SmoothQuant W8A8 int8 codes with per-channel scales and a random smoothing vector per
// layer (quantize.smoothquant's default) or, with foldedSmoothing, none (all ones: the divisor folded into the
// RMSNorms, what fold=true and int-quantized checkpoints give, so q/k/v and gate/up can run stacked).
// Codes are random finite values (never the E4M3 NaN codes); values are meaningless.
std::unique_ptr<Model> randomFp8Variant(const Model& base, const at::Device& device, uint64_t seed = 0);
std::unique_ptr<Model> randomW8a8Variant(const Model& base, const at::Device& device, uint64_t seed = 0,
                                         bool foldedSmoothing = false);

// Every block linear of `base` pruned 2:4 by magnitude (2 largest |w| of each group of 4 kept), still dense fp16:
// what the runtime runs through cuSPARSELt for long inputs. The mask is computed on `device`.
std::unique_ptr<Model> sparse24Variant(const Model& base, const at::Device& device);

// Bytes of the matrices one decode step reads: block linears (compressed: their storage) and the output head.
size_t decodeWeightBytes(const Model& model, at::ScalarType dtype);

} // namespace cwb
