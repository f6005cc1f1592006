#pragma once
// Bridge from the runtime to the CUDA kernels of kernels/: a compressed linear layer computed on its stored form,
// integer layers by the W4A16 / W8A16 GEMMs, FP8 layers with dynamic activations and SmoothQuant W8A8 layers by a
// per-token activation quantization kernel, then the small-M FP8 / int8 kernels (decode) or the cuBLASLt FP8 / int8
// GEMMs with a scale epilogue kernel. Plain C++ (no CUDA headers). Compiled against the kernels only when the build has
// CWB_CUDA; otherwise every factory answers "unavailable" and the runtime dequantizes instead.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/compress/quant_math.h"

namespace cwb {

class CompressedLinear;
class Fp8Linear;
class W8A8Linear;

// Device scratch shared by the native layers of one runtime: they run one after another on LibTorch's current
// stream (with a CUDA build of LibTorch; the default stream otherwise), which is where the kernels are launched.
// Integer layers given more than `dequantAboveTokens` token rows dequantize into the workspace's dense scratch and
// call cuBLAS instead of the W4A16 / W8A16 kernels (-1: defaultDequantAboveTokens()).
class NativeWorkspace;
std::shared_ptr<NativeWorkspace> makeNativeWorkspace(int64_t dequantAboveTokens = -1);

// Measured on an H200 (docs/performance.md, "INT4 prefill and fused INT4 projections"): on the 4096/11008 shapes the
// W4A16 kernel wins at 32 rows and dequantize + cuBLAS at 48 (at 128 by 2.5-3.7x); on 8192+ shapes they tie at 64.
constexpr int64_t kDequantAboveTokens = 32;
// kDequantAboveTokens, or CWB_DEQUANT_ABOVE_TOKENS from the environment when it holds a number >= 0.
int64_t defaultDequantAboveTokens();

class NativeIntLinear {
public:
    virtual ~NativeIntLinear() = default;
    // x [..., cols] on the layer's device; returns [..., rows] in the runtime's compute type.
    virtual at::Tensor forward(const at::Tensor& x) const = 0;
    // residual + forward(RMSNorm(x) · γ): normWeight γ fp32 [cols] on the device (undefined: x as it is), residual
    // [..., rows] (undefined: none). The W4A16 / W8A16 layers take both into their kernel launch (the W4A16 stream
    // kernel forms the norm itself, kernels::wxa16FoldsNorm); here, for the others, the fused RMSNorm kernel and an
    // add around forward().
    virtual at::Tensor forwardFused(const at::Tensor& x, const at::Tensor& normWeight, double eps,
                                    const at::Tensor& residual) const;
    // silu(gate) · up of [gate | up] = forward(RMSNorm(x) · γ) for a fused [gate; up] layer (rows = 2F): [..., F].
    // normWeight as in forwardFused. The W4A16 layers write silu(gate) · up from their kernel launch where the stream
    // kernel does (kernels::wxa16FoldsSwiGlu); otherwise, and for the other layers, the fused siluMul kernel runs after.
    virtual at::Tensor forwardGlu(const at::Tensor& x, const at::Tensor& normWeight, double eps) const;
    // True when forwardFused takes the norm and the residual into the layer's own launch (W4A16 / W8A16); the
    // runtime then routes the block through it, and otherwise keeps its fused norm-and-add kernel.
    virtual bool fusesNormAndResidual() const { return false; }
    // "W4A16 (M<=32), dequant + cuBLAS (M>32)" (W8A16 likewise), "FP8 E4M3 GEMM (...)" or "W8A8 int8 GEMM (...)"
    virtual std::string kernelName() const = 0;
    virtual size_t deviceBytes() const = 0;       // packed words, scales and tables on the device
};

// Packs the weight into the kernels' tiled layout once and uploads it. inputScale (AWQ, may be undefined) divides
// the input first, as IntLinear::prepareInput does. Returns nullptr and sets `reason` where no kernel applies.
std::unique_ptr<NativeIntLinear> makeNativeIntLinear(const quant::QuantizedWeight& weight, const at::Tensor& inputScale,
                                                     at::Device device, at::ScalarType dtype,
                                                     std::shared_ptr<NativeWorkspace> workspace, std::string& reason);

// Integer weights that can run as one packed matrix: the same spec (bits, group, symmetry), the same columns and
// column-to-group map (act-order), and the same input scale (both undefined, or equal). Otherwise `reason` says why.
bool canConcatenateRows(const std::vector<const quant::QuantizedWeight*>& parts,
                        const std::vector<at::Tensor>& inputScales, std::string& reason);
// The parts' rows stacked in order: packed words, scales and zeros concatenated; spec and group index shared.
quant::QuantizedWeight concatenateRows(const std::vector<const quant::QuantizedWeight*>& parts);

// Any compressed layer: IntLinear through makeNativeIntLinear; Fp8Linear with dynamic activations through the FP8
// GEMM; W8A8Linear through the int8 GEMM. Activations are quantized per token on the device by one kernel
// (act_quant.h) giving the codes and scales of the CPU path's float32 arithmetic (fp8_math.h, smoothquant_math.h).
// Returns nullptr and sets `reason` where no kernel applies.
std::unique_ptr<NativeIntLinear> makeNativeLinear(const CompressedLinear& layer, at::Device device, at::ScalarType dtype,
                                                  std::shared_ptr<NativeWorkspace> workspace, std::string& reason);

// FP8 layers with dynamic activations that read the same input (q/k/v, gate/up) as one layer of their rows stacked in
// order: one launch, the input quantized once (the codes of x are the same for every part; each row keeps its
// scale). Returns nullptr and sets `reason` where a part has no FP8 kernel or the parts differ in columns.
std::unique_ptr<NativeIntLinear> makeNativeFp8Rows(const std::vector<const Fp8Linear*>& parts, at::Device device,
                                                   at::ScalarType dtype, std::shared_ptr<NativeWorkspace> workspace,
                                                   std::string& reason);

// SmoothQuant W8A8 layers that read the same input likewise, where their divisors are equal (folded SmoothQuant and
// int-quantized checkpoints: all ones), so that one set of codes of x serves every part. Returns nullptr and sets
// `reason` where the divisors or columns differ or the stacked outputs are not a multiple of 4.
std::unique_ptr<NativeIntLinear> makeNativeW8a8Rows(const std::vector<const W8A8Linear*>& parts, at::Device device,
                                                    at::ScalarType dtype, std::shared_ptr<NativeWorkspace> workspace,
                                                    std::string& reason);

// True when CWB_LIBTORCH_ACT_QUANT is set (and not "0"): the native FP8 / W8A8 layers quantize activations (and FP8
// applies its scales) with the earlier LibTorch ops instead of the act_quant kernels; for before/after measurements.
bool libTorchActivationQuantization();
// False when CWB_W8_SMALL_M is "0": FP8 / W8A8 layers then use the cuBLASLt GEMMs at every M instead of the small-M
// kernels (w8_small_m.h: FP8 for 1 token row, W8A8 up to 4); for before/after measurements.
bool smallMActivationKernels();
// False when CWB_W8_DECODE_GEMV is "0": FP8 / W8A8 layers otherwise take the decode GEMV that quantizes its own input
// (w8_small_m.h: fp8DecodeGemv, w8a8DecodeGemv) instead of a quantize kernel and a product, for up to
// decodeGemvRuntimeRows() token rows where k is a multiple of 64.
bool selfQuantizingDecodeGemv();
// CWB_W8_DECODE_GEMV_ROWS (1 to kernels::kDecodeGemvMaxRows; default 1: at 4 and 8 rows the GEMV measured slower
// than the small-M kernel or cuBLASLt GEMM on the H200).
int64_t decodeGemvRuntimeRows();
// Launches of those decode GEMVs in this process (tests check that the runtime took them).
int64_t nativeDecodeGemvCount();

// Launches of the W4A16 / W8A16 kernels in this process that took an RMSNorm inside (the stream kernel formed it)
// and that added a residual (NativeIntLinear::forwardFused); tests check that the folding acted.
int64_t nativeNormFoldCount();
int64_t nativeResidualFoldCount();
// Launches of the W4A16 kernels in this process that wrote silu(gate) · up instead of [gate | up] (forwardGlu). Like
// the norm count, it follows the choice for the first slice of 64 tokens of a call.
int64_t nativeSwiGluFoldCount();

// True when this build carries the CUDA kernels.
bool nativeKernelsBuilt();

// Bytes in use on the current CUDA device (driver's count, LibTorch's cache included); -1 without the kernels.
int64_t deviceMemoryUsedBytes();
// Bytes free on the current CUDA device (the driver's count); -1 without the kernels or a device.
int64_t deviceMemoryFreeBytes();

// The compute capability the kernels dispatch for on the current device (10 x major + minor; lowered by
// CWB_CUDA_CAPABILITY), and the ceiling that variable sets; 0 for either without the kernels or a device.
int kernelDispatchCapability();
int kernelCapabilityCeiling();

} // namespace cwb
