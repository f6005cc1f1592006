#pragma once
// The forward pass of the supported families (Llama: RMSNorm, RoPE, GQA, SwiGLU; GPT-2: LayerNorm,
// learned positions, GELU) on LibTorch tensors, with an optional KV cache and activation observers.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/model/model.h"

namespace cwb {

class NativeWorkspace;
class NativeIntLinear;
class CompressedLinear;
class DecodeGraph;

// How a decode step (one token per sequence, with a KV cache) runs.
enum class DecodeMode {
    Eager,        // operation by operation, attention over the cache's filled part
    FixedShape,   // the same operations whatever the position: attention over the whole capacity, masked on the
                  // device from a position held in a device tensor (what a CUDA graph captures), run eagerly
    CudaGraph,    // FixedShape captured as a CUDA graph on the cache's first step and replayed; Eager where this
                  // build's LibTorch has no CUDA or the step cannot be captured (observers, head gates, training)
};

// How integer layers run on the CPU (with nativeKernels).
enum class CpuPackedInt {
    Off,    // dequantized into a float copy: faster prefill and evaluation on the 2-core development machine
    On,     // from their packed levels (core/runtime/cpu_int_linear.h): no float copy
    Auto,   // On where the model's float copies would not fit in 60% of the available memory, else Off
};
const char* cpuPackedIntName(CpuPackedInt mode);   // "off", "on", "auto"

// CWB_CPU_PACKED (0/off/false/no, 1/on/true/yes or auto; unset: auto), read once; a value it does not take is an
// env::SettingError.
CpuPackedInt cpuPackedIntDefault();

// Throws cwb::Error when this LibTorch cannot compute in `type` on `device` (f16 on the CPU in LibTorch 1.13).
void requireComputeType(const at::Device& device, at::ScalarType type);

struct RuntimeOptions {
    at::Device device = at::kCPU;
    at::ScalarType dtype = at::kFloat;   // compute type of the matrices; norms and softmax run in fp32
    // Keep converted weights between calls. Off: each forward converts one block at a time from the
    // storage type, so a model larger than RAM in fp32 still runs.
    bool cacheWeights = true;
    // Tensors used as given in place of the model's of the same name (training): no copy and no conversion,
    // so autograd flows into them. For a compressed layer, "<layer>.weight" replaces the matrix it multiplies
    // (its own input space, after prepareInput). The map must outlive the Transformer.
    const std::map<std::string, at::Tensor>* parameters = nullptr;
    // Per block, a gate multiplying each query head's attention output: [heads] or [batch, heads]; an undefined
    // tensor or a missing entry means no gate. Its gradient is the head importance of Michel et al. (2019).
    const std::vector<at::Tensor>* headGates = nullptr;
    // On CUDA, run 4- and 8-bit integer layers through the W4A16 / W8A16 kernels on their packed weights, FP8 layers
    // with dynamic activations and SmoothQuant W8A8 layers through the cuBLASLt FP8 / int8 GEMMs.
    // Off, or where no kernel applies, they are dequantized to a dense weight (see Transformer::layerPaths).
    bool nativeKernels = true;
    // With nativeKernels on the CPU: whether integer layers run from their packed levels (core/runtime/cpu_int_linear.h),
    // holding no float copy of their weights. On a 2-core machine an INT4 layer decoded 1.3-1.8x faster this way but
    // prefill and evaluation ran 1.2-2x slower (README, "CPU inference"), so Auto keeps the float copy where it fits.
    // The default is CWB_CPU_PACKED (cpuPackedIntDefault); `cwb bench --[no-]cpu-packed` sets On / Off.
    CpuPackedInt cpuPackedInt = cpuPackedIntDefault();
    // Bytes of memory the CPU weight plan may count on (60% of it is used); 0: MemAvailable of /proc/meminfo.
    uint64_t availableMemory = 0;
    // Native W4A16 / W8A16 layers given more token rows than this (prefill) dequantize their packed weight into a
    // shared device scratch and multiply with cuBLAS; up to it they run the kernels. -1: kDequantAboveTokens
    // (core/runtime/cuda_linear.h), or CWB_DEQUANT_ABOVE_TOKENS from the environment (benchmarking).
    int64_t dequantAboveTokens = -1;
    // Native integer q/k/v (and gate/up) with the same bits, group, input scale and column order run as one packed
    // matrix (one kernel launch instead of three, no concatenation).
    bool fuseNativeProjections = true;
    // With nativeKernels on CUDA in fp16 / bf16: a dense weight with the 2:4 pattern in every row runs through
    // cuSPARSELt (when it can be loaded) for inputs of at least this many rows; fewer rows stay on the dense weight.
    // 0: never; kSparse24Automatic (-1): 2048 rows where the kernel configuration search is known to be safe, e.g.
    // the H200, elsewhere never (core/runtime/sparse24_linear.h); -2: take CWB_SPARSE24_MIN_ROWS from the
    // environment (a row count, 0, or "auto"), else kSparse24Automatic.
    int64_t sparseMinRows = -2;
    DecodeMode decode = DecodeMode::CudaGraph;
    // On CUDA in fp16 / bf16 with LibTorch 2.x: attention over more than one query (prefill, evaluation) runs
    // through at::scaled_dot_product_attention (flash / memory-efficient kernels: no [tokens x keys] score matrix
    // in fp32); off, with LibTorch 1.13, on the CPU, in fp32, for one query, or when an observer wants the
    // probabilities, the reference path (fp32 scores, mask, softmax). fusedAttentionAvailable() says whether this
    // build has it. On the H200 it made 7B fp16 prefill of 2048 tokens 2.5x faster (docs/performance.md).
    bool fusedAttention = true;
    // With fusedAttention: on CUDA in fp32 too (SDPA's memory-efficient kernel). Backward passes over long windows
    // (gradient importance) otherwise keep a [heads x tokens x tokens] fp32 score matrix per block for autograd.
    bool fusedAttentionFloat32 = false;
    // On CUDA in fp16 / bf16, the fixed-shape decode step runs the fused kernels of kernels/decode_ops.h (RMSNorm,
    // RoPE + cache write + attention in one, SiLU * up: 8-9 launches per dense block, 5-6 with fusedNormGemv and
    // fusedSwiGluGemv); off, or elsewhere, LibTorch operations. Whether they use programmatic dependent launch is
    // process-wide (CWB_PDL, setDecodeDependentLaunch in core/runtime/fused_decode.h).
    bool fusedDecode = true;
    // On CUDA in fp16 / bf16, dense linear layers (and the output head) given at most kDenseGemvRuntimeRows rows of
    // input (decode at batch 1) run the GEMV kernel of kernels/dense_gemv.h, the residual add of o_proj / down_proj
    // included; off, or for more rows, cuBLAS (at::linear / at::addmm).
    bool denseGemv = true;
    // With fusedDecode and denseGemv both active: the fixed-shape decode step folds each RMSNorm into the dense GEMV
    // that reads its output (q/k/v, gate/up, the output head; kernels::denseGemvRmsNorm), one launch fewer per norm.
    // Each warp sums x² beside its product and scales its sum at the end, so the normalised x is never rounded to
    // the activation type. Norms before compressed or cuBLAS layers keep their own kernel. On the H200 (session 6,
    // docs/performance.md) 7B fp16 decode took 4.08 ms per token with it against 4.47 without.
    bool fusedNormGemv = true;
    // With fusedDecode and denseGemv both active: a dense fused gate/up projection computes silu(gate) * up in its
    // GEMV (kernels::denseGemvSwiGlu; with fusedNormGemv also the RMSNorm before it), one launch instead of two or
    // three, and gate and up are never rounded before the product. With both switches 7B fp16 decode took 4.01 ms.
    bool fusedSwiGluGemv = true;
    // With denseGemv and nativeKernels on CUDA in fp16 / bf16: a dense weight with the 2:4 pattern in every row
    // (K a multiple of 16) is also packed into the GEMV's 2:4 rows (core/runtime/dense_gemv.h), and the rows the
    // GEMV takes (decode at batch 1) read only its kept values and their positions: 1.125 K bytes per row instead of
    // 2 K.
    bool sparse24Gemv = true;
    // With sparse24Gemv: keep the dense copy of a packed 2:4 weight (the default). Off, only the packed rows (and
    // cuSPARSELt's compressed copy where it runs) stay on the device, so a 2:4 layer holds 9/16 of its dense bytes
    // (twice that with cuSPARSELt), but every input of more rows than the GEMV takes that cuSPARSELt does not take
    // (batched decode, short prefills, evaluation chunks; every multi-row input without cuSPARSELt) unpacks the rows
    // into a temporary dense weight for cuBLAS at each call (kernels::sparse24UnpackRows): 7B prefill of 128 tokens
    // measured 2x slower on the H200.
    bool sparse24KeepDense = true;
    // With fusedDecode active: native integer layers (W4A16 / W8A16 kernels; not FP8 or W8A8) take the RMSNorm before
    // them (q/k/v, gate/up) and the residual add after them (o_proj, down_proj) into their own launch
    // (NativeIntLinear::forwardFused), and a fused gate/up writes silu(gate) · up instead of [gate | up]
    // (NativeIntLinear::forwardGlu): 5 launches per INT4 block instead of 9 (+ attention's merge) where the W4A16
    // stream kernel forms the norm and SiLU · up itself (kernels::wxa16FoldsNorm, wxa16FoldsSwiGlu), else those stay
    // separate kernels.
    bool fusedIntLinear = true;
    // The reference attention on the CPU computes its fp32 scores for blocks of queries of at most this many bytes
    // ([batch, heads, rows, keys]); 0: all queries at once (so too under autograd). Fresh score matrices of a long
    // window cost page faults on each forward; blocks of this size are reused by the allocator. Head ablation of
    // stories260K over 2048 tokens on 2 cores: 122 s (123 s of it system time) before, 37 s with 8 MiB blocks.
    // Results do not depend on it beyond float rounding.
    int64_t cpuAttentionBlockBytes = int64_t(8) << 20;
};

// `options` for one of `runtimes` runtimes alive at once (base and variant of a comparison): each plans its CPU
// weights against an equal share of the available memory instead of all of it.
RuntimeOptions sharingMemory(RuntimeOptions options, int runtimes);

// How one compressed linear layer computes on this runtime.
struct LayerPath {
    bool native = false;   // true: a kernel on the packed weights; false: dequantized to a dense weight
    std::string how;       // the kernel ("W4A16") or why there was none
    bool twoFour = false;  // a pruned dense layer with the 2:4 pattern (cuSPARSELt or, failing that, dense cuBLAS)
    bool twoFourGemv = false;   // 2:4 and packed for the GEMV (RuntimeOptions::sparse24Gemv): decode reads the packed rows
    bool denseDropped = false;  // ... and its dense copy was dropped (RuntimeOptions::sparse24KeepDense off)
};

// Receives activations during a forward pass; the calibration of compression methods builds on it.
class ActivationObserver {
public:
    virtual ~ActivationObserver() = default;
    // layerName is the canonical weight name without ".weight", e.g. "model.layers.0.mlp.down_proj".
    virtual bool wantsLinear(const std::string& /*layerName*/) const { return false; }
    virtual void onLinear(const std::string& /*layerName*/, const at::Tensor& /*input*/, const at::Tensor& /*output*/) {}
    virtual bool wantsHeads() const { return false; }
    // Per-head attention output before the output projection: [batch, tokens, heads, headDim].
    virtual void onAttentionHeads(int64_t /*layer*/, const at::Tensor& /*headOutputs*/) {}
    virtual bool wantsAttentionProbs() const { return false; }
    // Attention probabilities after softmax, fp32 [batch, heads, queries, keys] (distillation of attention maps).
    virtual void onAttentionProbs(int64_t /*layer*/, const at::Tensor& /*probs*/) {}
};

// Keys and values of earlier positions, preallocated for `capacity` tokens.
class KvCache {
public:
    KvCache(const ArchSpec& spec, int64_t batch, int64_t capacity, const RuntimeOptions& options);
    ~KvCache();
    int64_t length() const { return mLength; }
    int64_t capacity() const { return mCapacity; }
    int64_t batch() const { return mKeys.empty() ? 0 : mKeys.front().size(0); }
    void reset() { mLength = 0; }
    // Decode steps replayed from a CUDA graph bound to this cache, and why none could be captured ("" if none failed).
    int64_t graphReplays() const;
    std::string graphFailure() const;

private:
    friend class Transformer;
    std::vector<at::Tensor> mKeys;     // per layer [batch, kvHeads, capacity, headDim]
    std::vector<at::Tensor> mValues;
    // Per layer: fused decode attention's workspace where the chunks merge inside its launch (fusedDecodeAttention),
    // whose counters must persist across steps; one per layer, since a layer's counters follow its own partials and
    // layers may differ in head counts.
    std::vector<at::Tensor> mAttentionWorkspaces;
    int64_t mLength = 0;
    int64_t mCapacity = 0;
    std::unique_ptr<DecodeGraph> mGraph;   // captured against these tensors and one runtime's weights
    std::string mGraphFailure;
};

struct SavedTransformerBlock;   // Transformer::setBlockAside

class Transformer {
public:
    explicit Transformer(const Model& model, RuntimeOptions options = {});
    ~Transformer();

    // tokens: [batch, count] int64. With a cache, positions continue after cache->length() and the cache
    // grows by count. Returns fp32 logits [batch, count, vocab]. Throws cwb::Error on bad input.
    at::Tensor forward(const at::Tensor& tokens, KvCache* cache = nullptr, ActivationObserver* observer = nullptr);

    // The same pass in pieces, for calibration that goes block by block: hidden states of the embeddings
    // ([batch, count, hidden]), of one block applied to them, the final norm of the last block's output (the output
    // head's input) and the logits of final hidden states (finalNorm, then the head).
    at::Tensor embed(const at::Tensor& tokens) const;
    at::Tensor runBlock(int64_t layer, const at::Tensor& hidden, ActivationObserver* observer = nullptr);
    at::Tensor finalNorm(const at::Tensor& hidden) const;
    at::Tensor logits(const at::Tensor& hidden) const;
    // Forgets converted weights of one block (or all, layer < 0) after the model's tensors changed.
    void invalidateBlock(int64_t layer);
    // A block's converted (on CUDA: uploaded) weights and layer paths, set aside: setBlockAside forgets them as
    // invalidateBlock does and hands them over (an empty record when the block was not built); restoreBlock puts them
    // back once the model's tensors of that block are again what they were, without converting them again.
    std::shared_ptr<SavedTransformerBlock> setBlockAside(int64_t layer);
    void restoreBlock(int64_t layer, std::shared_ptr<SavedTransformerBlock> saved);

    const ArchSpec& spec() const { return mModel.spec; }
    const Model& model() const { return mModel; }
    const RuntimeOptions& options() const { return mOptions; }
    std::unique_ptr<KvCache> makeCache(int64_t batch, int64_t capacity) const;
    // Switches how later decode steps run (the bench times both ways on one loaded model).
    void setDecodeMode(DecodeMode mode) { mOptions.decode = mode; }
    // True when fixed-shape (CUDA graph) decode steps run the fused kernels: RuntimeOptions::fusedDecode where they apply.
    bool fusedDecodeActive() const;
    // Whether this build's LibTorch has scaled_dot_product_attention (2.x), which RuntimeOptions::fusedAttention uses.
    static bool fusedAttentionAvailable();
    // Whether prefill attention (more than one query, no observer asking for the probabilities) runs through it
    // with these options: fusedAttention on, available, on CUDA in fp16 / bf16 (or fp32 with fusedAttentionFloat32).
    static bool fusedAttentionFor(const RuntimeOptions& options);

    // The path of each compressed layer of the blocks loaded so far (all of them after one forward), and of a
    // compressed output head ("lm_head"), by layer name.
    const std::map<std::string, LayerPath>& layerPaths() const { return mLayerPaths; }
    // "native: n W4A16 (M<=32), dequant + cuBLAS (M>32); m ... | dequantized: k reason; ..." (entries of a kind
    // split by "; ", the two kinds by " | "), or "" when there are no compressed layers.
    std::string layerPathSummary() const;
    // On the CPU, what the weight plan chose for lack of memory (integer layers from their packed levels, or blocks
    // converted one at a time), with the bytes that decided it; "" when the float copies fit or the device is not the CPU.
    const std::string& cpuWeightPlan() const { return mCpuWeightPlan; }
    // Bytes a decode step does not read because 2:4 layers read packed rows instead of their dense weight (dense
    // bytes minus packed bytes, over the blocks packed so far).
    size_t decodeBytesSavedByPacking() const;

private:
    struct Block;
    struct Globals;
    friend struct SavedTransformerBlock;
    const Block& block(int64_t layer);
    // On the CPU: resolves CpuPackedInt::Auto and turns cacheWeights off where the float weights would not fit.
    void planCpuWeights();
    std::shared_ptr<const NativeIntLinear> nativeLinear(const std::string& name, const CompressedLinear& layer);
    // The output head: the embedding when tied; a compressed head through its kernel where one applies.
    void loadHead();
    // Native integer parts of one projection (q/k/v, gate/up) packed as one matrix under `fused` in `native`;
    // false (nothing added) when they differ in format or any part has no kernel.
    bool fuseNativeProjection(std::map<std::string, std::shared_ptr<const NativeIntLinear>>& native,
                              const std::string& prefix, const std::vector<std::string>& parts, const std::string& fused);
    void attachSparse24(Block& block, const std::string& prefix);   // 2:4 dense weights -> cuSPARSELt
    void dropPackedDenseWeights(Block& block);   // RuntimeOptions::sparse24KeepDense off: packed 2:4 rows only
    at::Tensor weight(const std::string& name) const;
    const at::Tensor* parameter(const std::string& name) const;   // from options.parameters, or null
    at::Tensor attention(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         KvCache* cache, int64_t start, ActivationObserver* observer) const;
    // fp32 scores, causal mask from `start`, softmax, values: [B, H, T, hd] in q's type (keys / values already
    // repeated to q's heads).
    at::Tensor referenceAttention(int64_t layer, const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                                  int64_t start, ActivationObserver* observer) const;
    at::Tensor embedAt(const at::Tensor& tokens, int64_t start) const;
    at::Tensor applyRope(const at::Tensor& x, int64_t start);
    at::Tensor llamaBlock(int64_t layer, const at::Tensor& x, KvCache* cache, int64_t start, ActivationObserver* observer);
    at::Tensor gpt2Block(int64_t layer, const at::Tensor& x, KvCache* cache, int64_t start, ActivationObserver* observer);
    bool fixedShapeDecodeApplies(const ActivationObserver* observer) const;
    at::Tensor decodeFixedShape(const at::Tensor& ids, KvCache& cache);
    // One token per sequence at the device position `position` ([1] int64): no shape depends on the position.
    at::Tensor fixedShapeStep(const at::Tensor& tokens, const at::Tensor& position, KvCache& cache);
    at::Tensor fixedShapeBlock(int64_t layer, const at::Tensor& x, const at::Tensor& rope, const at::Tensor& mask,
                               const at::Tensor& position, KvCache& cache);
    // The output head on (normed) hidden states, in the compute type: the dense GEMV kernel for decode, else cuBLAS.
    at::Tensor headLinear(const at::Tensor& x) const;
    // True when fixed-shape steps fold RMSNorms into the dense GEMV (RuntimeOptions::fusedNormGemv where it can act).
    bool foldNormsIntoGemv() const;
    // True when fixed-shape steps give native integer layers the norm before and the residual after them
    // (RuntimeOptions::fusedIntLinear).
    bool intLinearFused() const;
    // True when fixed-shape steps compute SiLU * up inside the dense gate/up GEMV (RuntimeOptions::fusedSwiGluGemv).
    bool swiGluIntoGemv() const;

    const Model& mModel;
    RuntimeOptions mOptions;
    std::unique_ptr<Globals> mGlobals;
    std::vector<std::unique_ptr<Block>> mBlocks;
    std::unique_ptr<Block> mScratch;   // the block loaded when weights are not cached
    std::string mCpuWeightPlan;
    at::Tensor mInvFreq;               // [headDim / 2], fp32
    const at::Tensor& ropeRows(int64_t positions);   // mRopeTable covering at least `positions` positions
    at::Tensor mRopeTable;             // [positions, 2, headDim] fp32: cos and signed sin per position (ropeTable())
    std::vector<at::Tensor> mRetiredRopeTables;   // outgrown tables, kept: a captured decode graph may read one
    uint64_t mRuntimeId = 0;           // tells decode graphs captured by this runtime from those of another
    uint64_t mWeightsVersion = 0;      // bumped by invalidateBlock: graphs captured before it are stale
    std::shared_ptr<NativeWorkspace> mNativeWorkspace;
    std::map<std::string, LayerPath> mLayerPaths;
    std::map<std::string, std::string> mStackRefusals;   // q/k/v or gate/up parts of one kind run apart: why
};

// Inverse frequencies of RoPE (float32 [headDim / 2]) with the model's scaling and rope_freqs.weight applied.
at::Tensor ropeInverseFrequencies(const ArchSpec& spec, const Model& model);

// RoPE as one multiply-add per position p: rotated = x * table[p][0] + swapPartners(x) * table[p][1], where
// swapPartners exchanges each rotation pair's two elements (halves or adjacent, per style). [positions, 2, headDim].
// `scale` multiplies cos and sin (YaRN's attention factor).
at::Tensor ropeTable(const at::Tensor& inverseFrequencies, int64_t positions, RopeStyle style, double scale = 1.0);
// x [..., headDim] with each rotation pair's elements exchanged.
at::Tensor swapRopePartners(const at::Tensor& x, RopeStyle style);

} // namespace cwb
