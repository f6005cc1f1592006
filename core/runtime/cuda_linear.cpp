#include "core/runtime/cuda_linear.h"

#include <atomic>
#include <cstdlib>
#include <limits>

#include <c10/core/DeviceGuard.h>

#include "core/compress/compressed_layers.h"
#include "core/runtime/fused_decode.h"
#include "core/util/error.h"
#include "kernels/include/cwb/kernels/env_setting.h"   // CUDA-free: read here with or without the kernels
#include "cwb/kernels/w8_small_m.h"                     // its row limit, with or without the kernels (-DCWB_CUDA=OFF)

#ifdef CWB_HAVE_KERNELS
#include "cwb/kernels/act_quant.h"
#include "cwb/kernels/dequant_tiled.h"
#include "cwb/kernels/device_info.h"
#include "cwb/kernels/fp8_gemm.h"
#include "cwb/kernels/w8a8_gemm.h"
#include "cwb/kernels/wxa16_gemm.h"
#include "core/util/torch_stream.h"
#endif

namespace cwb {

namespace {
std::atomic<int64_t> normFolds{0}, residualFolds{0}, swigluFolds{0};

// silu(gate) · up of a fused [..., 2F] input, in one kernel.
at::Tensor swigluOf(const at::Tensor& gateUp) {
    if (gateUp.size(-1) % 2 != 0)
        throw Error("SwiGLU: a fused gate/up output of " + std::to_string(gateUp.size(-1)) +
                    " columns does not split into gate and up halves");
    const int64_t ffn = gateUp.size(-1) / 2;
    return fusedSiluMul(gateUp.narrow(-1, 0, ffn), gateUp.narrow(-1, ffn, ffn));
}
} // namespace

int64_t nativeNormFoldCount() { return normFolds.load(); }
int64_t nativeResidualFoldCount() { return residualFolds.load(); }
int64_t nativeSwiGluFoldCount() { return swigluFolds.load(); }

at::Tensor NativeIntLinear::forwardFused(const at::Tensor& x, const at::Tensor& normWeight, double eps,
                                         const at::Tensor& residual) const {
    at::Tensor y = forward(normWeight.defined() ? fusedRmsNorm(x, normWeight, eps) : x);
    return residual.defined() ? residual + y.to(residual.scalar_type()) : y;
}

at::Tensor NativeIntLinear::forwardGlu(const at::Tensor& x, const at::Tensor& normWeight, double eps) const {
    return swigluOf(forwardFused(x, normWeight, eps, at::Tensor()));
}

bool libTorchActivationQuantization() {
    static const bool value = env::envSwitch("CWB_LIBTORCH_ACT_QUANT", false);
    return value;
}

bool smallMActivationKernels() {
    static const bool value = env::envSwitch("CWB_W8_SMALL_M", true);
    return value;
}

bool selfQuantizingDecodeGemv() {
    // On by default since session 37 measured it on the H200 (docs/performance.md, "FP8 / W8A8 decode: ...").
    static const bool value = env::envSwitch("CWB_W8_DECODE_GEMV", true);
    return value;
}

int64_t decodeGemvRuntimeRows() {
    // One token row: per 7B layer the GEMV beat a quantize launch + small-M kernel there (FP8 18.1 against 19.8 us at
    // 4096x11008), but lost at 4 and 8 rows to the small-M kernel / cuBLASLt GEMM (FP8 25.3 against 20.2 us at 4).
    static const int64_t value = env::envInteger("CWB_W8_DECODE_GEMV_ROWS", 1, kernels::kDecodeGemvMaxRows, 1);
    return value;
}

namespace {
std::atomic<int64_t> gDecodeGemvLaunches{0};
}

int64_t nativeDecodeGemvCount() { return gDecodeGemvLaunches.load(); }

int64_t defaultDequantAboveTokens() {
    static const int64_t value =
        env::envInteger("CWB_DEQUANT_ABOVE_TOKENS", 0, std::numeric_limits<int32_t>::max(), kDequantAboveTokens);
    return value;
}

bool canConcatenateRows(const std::vector<const quant::QuantizedWeight*>& parts,
                        const std::vector<at::Tensor>& inputScales, std::string& reason) {
    if (parts.size() < 2 || inputScales.size() != parts.size()) {
        reason = "fewer than two parts";
        return false;
    }
    const quant::QuantizedWeight& first = *parts.front();
    for (size_t i = 1; i < parts.size(); ++i) {
        const quant::QuantizedWeight& w = *parts[i];
        if (w.spec.bits != first.spec.bits || w.spec.groupSize != first.spec.groupSize ||
            w.spec.symmetric != first.spec.symmetric) {
            reason = "bits, group size or symmetry differ";
            return false;
        }
        if (w.cols != first.cols || w.scales.size(1) != first.scales.size(1)) {
            reason = "input width or group count differ";
            return false;
        }
        if (!at::equal(w.groupIndex.to(at::kInt), first.groupIndex.to(at::kInt))) {
            reason = "the column order (act-order group index) differs";
            return false;
        }
        const at::Tensor& a = inputScales.front();
        const at::Tensor& b = inputScales[i];
        if (a.defined() != b.defined() || (a.defined() && !at::equal(a.to(at::kFloat).cpu(), b.to(at::kFloat).cpu()))) {
            reason = "the input scales differ";
            return false;
        }
    }
    return true;
}

quant::QuantizedWeight concatenateRows(const std::vector<const quant::QuantizedWeight*>& parts) {
    quant::QuantizedWeight whole;
    whole.spec = parts.front()->spec;
    whole.cols = parts.front()->cols;
    whole.groupIndex = parts.front()->groupIndex;
    std::vector<at::Tensor> packed, scales, zeros;
    for (const quant::QuantizedWeight* w : parts) {
        whole.rows += w->rows;
        packed.push_back(w->packed);
        scales.push_back(w->scales);
        zeros.push_back(w->zeros);
    }
    whole.packed = at::cat(packed, 0);
    whole.scales = at::cat(scales, 0);
    whole.zeros = at::cat(zeros, 0);
    return whole;
}

#ifdef CWB_HAVE_KERNELS

class NativeWorkspace {
public:
    explicit NativeWorkspace(int64_t dequantAboveTokens)
        : mDequantAboveTokens(dequantAboveTokens >= 0 ? dequantAboveTokens : defaultDequantAboveTokens()) {}
    ~NativeWorkspace() {
        for (void* p : mRetired) kernels::freeWorkspace(p);
        kernels::freeWorkspace(mData);
    }
    // Zero-filled memory of at least `bytes`; a larger request replaces the buffer. The old one is kept until the
    // end: a captured decode graph may still use it.
    void* reserve(size_t bytes) {
        if (bytes > mBytes) {
            void* larger = kernels::allocateWorkspace(bytes);
            if (mData) mRetired.push_back(mData);
            mData = larger;
            mBytes = bytes;
        }
        return mData;
    }
    size_t bytes() const { return mBytes; }
    int64_t dequantAboveTokens() const { return mDequantAboveTokens; }
    // A dense [rows, cols] matrix of `options` for a dequantized weight, shared by the layers (they run one after
    // another on one stream). Outgrown buffers are kept: a captured graph may still read one.
    at::Tensor denseScratch(int64_t rows, int64_t cols, const at::TensorOptions& options) {
        if (!mDense.defined() || mDense.numel() < rows * cols || mDense.scalar_type() != options.dtype().toScalarType()) {
            if (mDense.defined()) mRetiredDense.push_back(mDense);
            mDense = at::empty({rows * cols}, options);
        }
        return mDense.narrow(0, 0, rows * cols).view({rows, cols});
    }
    // cuBLASLt handles (and their workspaces), made on first use and shared by the layers of the runtime.
    kernels::Fp8Gemm& fp8() {
        if (!mFp8) mFp8 = std::make_unique<kernels::Fp8Gemm>();
        return *mFp8;
    }
    kernels::W8a8Gemm& w8a8() {
        if (!mW8a8) mW8a8 = std::make_unique<kernels::W8a8Gemm>();
        return *mW8a8;
    }

private:
    void* mData = nullptr;
    size_t mBytes = 0;
    std::vector<void*> mRetired;
    std::unique_ptr<kernels::Fp8Gemm> mFp8;
    std::unique_ptr<kernels::W8a8Gemm> mW8a8;
    int64_t mDequantAboveTokens;
    at::Tensor mDense;
    std::vector<at::Tensor> mRetiredDense;
};

namespace {

class KernelIntLinear : public NativeIntLinear {
public:
    KernelIntLinear(kernels::DeviceTiledWeight weight, at::Tensor inputScale, at::Device device, at::ScalarType dtype,
                    std::shared_ptr<NativeWorkspace> workspace, size_t bytes)
        : mWeight(std::move(weight)), mInputScale(std::move(inputScale)), mDevice(device), mDtype(dtype),
          mWorkspace(std::move(workspace)), mBytes(bytes) {}

    at::Tensor forward(const at::Tensor& x) const override { return run(x, at::Tensor(), 0.0, at::Tensor()); }

    at::Tensor forwardFused(const at::Tensor& x, const at::Tensor& normWeight, double eps,
                            const at::Tensor& residual) const override {
        if (normWeight.defined() && mInputScale.defined())   // AWQ divides the normalised input: the norm comes first
            return run(fusedRmsNorm(x, normWeight, eps), at::Tensor(), 0.0, residual);
        return run(x, normWeight, eps, residual);
    }
    at::Tensor forwardGlu(const at::Tensor& x, const at::Tensor& normWeight, double eps) const override {
        if (normWeight.defined() && mInputScale.defined())   // AWQ divides the normalised input: the norm comes first
            return run(fusedRmsNorm(x, normWeight, eps), at::Tensor(), 0.0, at::Tensor(), true);
        return run(x, normWeight, eps, at::Tensor(), true);
    }
    bool fusesNormAndResidual() const override { return true; }
    std::string kernelName() const override {
        const std::string limit = std::to_string(mWorkspace->dequantAboveTokens());
        return std::string(mWeight.bits == 4 ? "W4A16" : "W8A16") + " (M<=" + limit + "), dequant + cuBLAS (M>" + limit + ")";
    }
    size_t deviceBytes() const override { return mBytes; }

private:
    // residual + linear(norm(x)) with the norm (γ fp32 [cols], or undefined) and the residual (or undefined) inside
    // the kernel launch; mInputScale and normWeight are never both defined here. glu: the rows are [gate; up] and
    // the result silu(gate) · up [..., rows / 2], formed in the launch where the kernel does (kernels::
    // wxa16FoldsSwiGlu), else by siluMul after it; never with a residual.
    at::Tensor run(const at::Tensor& x, const at::Tensor& normWeight, double eps, const at::Tensor& residual,
                   bool glu = false) const {
        c10::DeviceGuard guard(mDevice);
        at::Tensor input = x.reshape({-1, mWeight.cols});
        input = mInputScale.defined() ? (input.to(at::kFloat) / mInputScale).to(mDtype) : input.to(mDtype);
        input = input.contiguous();
        if (reinterpret_cast<uintptr_t>(input.data_ptr()) % 16 != 0) input = input.clone();   // the kernel loads 16 bytes
        const int64_t m = input.size(0);
        const int64_t outRows = glu ? mWeight.rows / 2 : mWeight.rows;
        std::vector<int64_t> shape = x.sizes().vec();
        shape.back() = outRows;
        at::Tensor gamma, add;
        if (normWeight.defined()) {
            gamma = normWeight.to(mDevice, at::kFloat).contiguous();
            if (gamma.numel() != mWeight.cols)
                throw Error("native " + kernelName() + " layer: the norm weight has " + std::to_string(gamma.numel()) +
                            " elements for " + std::to_string(mWeight.cols) + " input columns");
        }
        if (residual.defined()) {
            if (residual.numel() != m * mWeight.rows)
                throw Error("native " + kernelName() + " layer: the residual has " + std::to_string(residual.numel()) +
                            " elements for " + std::to_string(m) + " x " + std::to_string(mWeight.rows) + " outputs");
            add = residual.to(mDtype).contiguous();
        }
        if (m > mWorkspace->dequantAboveTokens()) {   // prefill: dequantize once, then cuBLAS at full tensor-core rate
            if (gamma.defined()) input = fusedRmsNorm(input, gamma, eps);
            at::Tensor dense = mWorkspace->denseScratch(mWeight.rows, mWeight.cols, input.options());
            try {
                kernels::dequantizeTiled(mWeight, dense.data_ptr(), torchCurrentStream());
            } catch (const kernels::KernelError& e) {
                throw Error(std::string("native ") + kernelName() + " layer: " + e.what());
            }
            if (add.defined()) return at::addmm(add.view({m, mWeight.rows}), input, dense.t()).view(shape);
            if (glu) return swigluOf(at::linear(input, dense)).view(shape);
            return at::linear(input, dense).view(shape);
        }
        at::Tensor y = at::empty({m, outRows}, input.options());
        try {
            kernels::Wxa16Fusion fusion;
            fusion.normWeight = gamma.defined() ? gamma.data_ptr<float>() : nullptr;
            fusion.normEps = float(eps);
            fusion.residual = add.defined() ? add.data_ptr() : nullptr;
            fusion.swiglu = glu;
            void* ws = mWorkspace->reserve(kernels::wxa16WorkspaceBytes(mWeight, m, 0, gamma.defined(), glu));
            kernels::wxa16Gemm(mWeight, input.data_ptr(), y.data_ptr(), m, ws, mWorkspace->bytes(), torchCurrentStream(), 0,
                               fusion);
            if (gamma.defined() && kernels::wxa16FoldsNorm(mWeight, m)) ++normFolds;
            if (glu && kernels::wxa16FoldsSwiGlu(mWeight, m)) ++swigluFolds;
            if (add.defined()) ++residualFolds;
        } catch (const kernels::KernelError& e) {
            throw Error(std::string("native ") + kernelName() + " layer: " + e.what());
        }
        return y.view(shape);
    }
    kernels::DeviceTiledWeight mWeight;
    at::Tensor mInputScale;   // fp32 on the device, or undefined
    at::Device mDevice;
    at::ScalarType mDtype;
    std::shared_ptr<NativeWorkspace> mWorkspace;
    size_t mBytes;
};

// Decode-sized inputs take the small-M kernels (w8_small_m.h) unless CWB_W8_SMALL_M=0. Measured on the H200 per
// 7B-shaped layer (docs/performance.md, "Per-token activation quantization"): the int8 kernel beats cuBLASLt's int8
// GEMM up to M = 4; the FP8 one ties cuBLASLt's FP8 GEMM + epilogue at M = 1 (2% less per block) and loses from M = 2
// (its fp32 FMAs grow with M), so FP8 takes it for one token row only.
constexpr int64_t kFp8SmallMMaxRows = 1;
bool useSmallM(int64_t tokenRows, int64_t maxRows) { return tokenRows <= maxRows && smallMActivationKernels(); }

// Decode-sized inputs of FP8 / W8A8 layers take the GEMV that quantizes its own input (one launch instead of a
// quantize kernel and a product) unless CWB_W8_DECODE_GEMV=0.
bool takesDecodeGemv(const at::Tensor& input, const at::Tensor& weightCodes) {
    return selfQuantizingDecodeGemv() && input.size(0) <= decodeGemvRuntimeRows() &&
           kernels::decodeGemvTakes(input.data_ptr(), weightCodes.data_ptr(), input.size(0), input.size(1));
}

// "FP8 E4M3 GEMM (decode GEMV ... for M<=1 where k is a multiple of 64, small-M kernel for M=1, cuBLASLt above)":
// the paths an FP8 / W8A8 layer takes by token rows under the current switches.
std::string activationQuantizedKernelName(const std::string& kind, const std::string& smallMRows) {
    if (libTorchActivationQuantization()) return kind + " (cuBLASLt; LibTorch activation quantization)";
    std::string name = kind + " (";
    if (selfQuantizingDecodeGemv())
        name += "decode GEMV quantizing its input for M<=" + std::to_string(decodeGemvRuntimeRows()) +
                " where k is a multiple of 64, ";
    if (smallMActivationKernels()) name += "small-M kernel for " + smallMRows + ", ";
    return name + "cuBLASLt above)";
}

std::vector<int64_t> outputShape(const at::Tensor& x, int64_t rows) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = rows;
    return shape;
}

// FP8 E4M3 weights with per-token FP8 activations: one kernel quantizes the rows; for one row the small-M kernel
// multiplies and scales, otherwise cuBLASLt writes fp32 sums of the codes that one epilogue kernel scales.
// CWB_LIBTORCH_ACT_QUANT=1 restores the earlier LibTorch ops (for before/after measurements).
class KernelFp8Linear : public NativeIntLinear {
public:
    KernelFp8Linear(at::Tensor codes, at::Tensor scales, at::ScalarType dtype, std::shared_ptr<NativeWorkspace> workspace)
        : mCodes(std::move(codes)), mScales(std::move(scales)), mDtype(dtype), mWorkspace(std::move(workspace)) {
        mUnit = at::ones({4}, mCodes.options().dtype(at::kFloat));
    }

    at::Tensor forward(const at::Tensor& x) const override {
        c10::DeviceGuard guard(mCodes.device());
        const int64_t n = mCodes.size(0), k = mCodes.size(1);
        if (libTorchActivationQuantization()) return forwardLibTorch(x).view(outputShape(x, n));
        const at::Tensor input = x.reshape({-1, k}).to(mDtype).contiguous();
        const int64_t m = input.size(0);
        const kernels::ActType act = mDtype == at::kHalf ? kernels::ActType::Float16 : kernels::ActType::BFloat16;
        at::Tensor y = at::empty({m, n}, input.options());
        if (takesDecodeGemv(input, mCodes)) {
            try {
                kernels::fp8DecodeGemv(input.data_ptr(), act, mCodes.data_ptr<uint8_t>(), mScales.data_ptr<float>(),
                                       y.data_ptr(), m, n, k, torchCurrentStream());
            } catch (const kernels::KernelError& e) {
                throw Error(std::string("native FP8 layer: ") + e.what());
            }
            ++gDecodeGemvLaunches;
            return y.view(outputShape(x, n));
        }
        at::Tensor codes = at::empty({m, k}, mCodes.options());
        at::Tensor tokenScales = at::empty({m}, mScales.options());
        try {
            kernels::quantizeRowsFp8(input.data_ptr(), act, m, k, codes.data_ptr<uint8_t>(), tokenScales.data_ptr<float>(),
                                     torchCurrentStream());
            if (useSmallM(m, kFp8SmallMMaxRows)) {
                kernels::fp8SmallM(codes.data_ptr<uint8_t>(), tokenScales.data_ptr<float>(), mCodes.data_ptr<uint8_t>(),
                                   mScales.data_ptr<float>(), y.data_ptr(), act, m, n, k, torchCurrentStream());
                return y.view(outputShape(x, n));
            }
            at::Tensor sums = at::empty({m, n}, mScales.options());   // fp32 products for the scale epilogue
            mWorkspace->fp8().runRowwise(codes.data_ptr<uint8_t>(), tokenScales.data_ptr<float>(), mCodes.data_ptr<uint8_t>(),
                                         mScales.data_ptr<float>(), y.data_ptr(), sums.data_ptr<float>(), act, m, n, k,
                                         torchCurrentStream());
        } catch (const kernels::KernelError& e) {
            throw Error(std::string("native FP8 layer: ") + e.what());
        }
        return y.view(outputShape(x, n));
    }
    std::string kernelName() const override {
        return activationQuantizedKernelName("FP8 E4M3 GEMM", "M=1");
    }
    size_t deviceBytes() const override { return size_t(mCodes.numel()) + size_t(mScales.numel()) * 4; }

private:
    // Codes x codes with unit per-tensor scales into bf16 (the raw sums reach 448^2 k, past fp16's range), then the
    // per-token and per-channel scales in float32 by LibTorch ops.
    at::Tensor forwardLibTorch(const at::Tensor& x) const {
        const int64_t n = mCodes.size(0), k = mCodes.size(1);
        at::Tensor codes, tokenScales;
        quant::quantizeFp8PerToken(x.reshape({-1, k}), codes, tokenScales);
        const int64_t m = codes.size(0);
        at::Tensor sums = at::empty({m, n}, mCodes.options().dtype(at::kBFloat16));
        try {
            mWorkspace->fp8().run(codes.data_ptr<uint8_t>(), mUnit.data_ptr<float>(), mCodes.data_ptr<uint8_t>(),
                                  mUnit.data_ptr<float>(), sums.data_ptr(), kernels::ActType::BFloat16, m, n, k,
                                  torchCurrentStream());
        } catch (const kernels::KernelError& e) {
            throw Error(std::string("native FP8 layer: ") + e.what());
        }
        return sums.to(at::kFloat).mul_(tokenScales.unsqueeze(1)).mul_(mScales.unsqueeze(0)).to(mDtype);
    }

    at::Tensor mCodes;    // uint8 [n, k] on the device
    at::Tensor mScales;   // float32 [n] (a per-tensor scale repeated)
    at::Tensor mUnit;     // float32 ones: the LibTorch path's per-tensor GEMM scales (16-byte aligned)
    at::ScalarType mDtype;
    std::shared_ptr<NativeWorkspace> mWorkspace;
};

// SmoothQuant W8A8: x / s quantized to int8 per token by one kernel, exact int32 products (the small-M dp4a kernel
// up to 4 rows, cuBLASLt IMMA above), scales fused or in the GEMM's epilogue kernel. CWB_LIBTORCH_ACT_QUANT=1
// quantizes with the earlier LibTorch ops and uses cuBLASLt at every M.
class KernelW8a8Linear : public NativeIntLinear {
public:
    // smoothing: float32 [k] on the device, or undefined for none (a folded or int-quantized layer: x / 1 is x, so
    // the kernels skip the division and its loads).
    KernelW8a8Linear(at::Tensor codes, at::Tensor scales, at::Tensor smoothing, at::ScalarType dtype,
                     std::shared_ptr<NativeWorkspace> workspace)
        : mCodes(std::move(codes)), mScales(std::move(scales)), mSmoothing(std::move(smoothing)), mDtype(dtype),
          mWorkspace(std::move(workspace)) {}

    at::Tensor forward(const at::Tensor& x) const override {
        c10::DeviceGuard guard(mCodes.device());
        const int64_t n = mCodes.size(0), k = mCodes.size(1);
        const kernels::ActType act = mDtype == at::kHalf ? kernels::ActType::Float16 : kernels::ActType::BFloat16;
        if (!libTorchActivationQuantization() && selfQuantizingDecodeGemv()) {
            const at::Tensor input = x.reshape({-1, k}).to(mDtype).contiguous();
            if (takesDecodeGemv(input, mCodes)) {
                at::Tensor y = at::empty({input.size(0), n}, input.options());
                try {
                    kernels::w8a8DecodeGemv(input.data_ptr(), act, divisor(), mCodes.data_ptr<int8_t>(),
                                            mScales.data_ptr<float>(), y.data_ptr(), input.size(0), n, k,
                                            torchCurrentStream());
                } catch (const kernels::KernelError& e) {
                    throw Error(std::string("native W8A8 layer: ") + e.what());
                }
                ++gDecodeGemvLaunches;
                return y.view(outputShape(x, n));
            }
        }
        at::Tensor codes, tokenScales;
        if (libTorchActivationQuantization()) {
            const at::Tensor input = x.reshape({-1, k}).to(at::kFloat);
            quant::quantizeInt8PerToken(mSmoothing.defined() ? input / mSmoothing : input, codes, tokenScales);
        } else {
            const at::Tensor input = x.reshape({-1, k}).to(mDtype).contiguous();
            codes = at::empty({input.size(0), k}, mCodes.options());
            tokenScales = at::empty({input.size(0)}, mScales.options());
            try {
                kernels::quantizeRowsInt8Divided(input.data_ptr(), mDtype == at::kHalf ? kernels::ActType::Float16
                                                                                       : kernels::ActType::BFloat16,
                                                 divisor(), input.size(0), k, codes.data_ptr<int8_t>(),
                                                 tokenScales.data_ptr<float>(), torchCurrentStream());
            } catch (const kernels::KernelError& e) {
                throw Error(std::string("native W8A8 layer: ") + e.what());
            }
        }
        const int64_t m = codes.size(0);
        at::Tensor y = at::empty({m, n}, mCodes.options().dtype(mDtype));
        try {
            if (!libTorchActivationQuantization() && useSmallM(m, kernels::kSmallMMaxRows)) {
                kernels::w8a8SmallM(codes.data_ptr<int8_t>(), tokenScales.data_ptr<float>(), mCodes.data_ptr<int8_t>(),
                                    mScales.data_ptr<float>(), y.data_ptr(),
                                    mDtype == at::kHalf ? kernels::ActType::Float16 : kernels::ActType::BFloat16, m, n, k,
                                    torchCurrentStream());
                return y.view(outputShape(x, n));
            }
            mWorkspace->w8a8().run(codes.data_ptr<int8_t>(), tokenScales.data_ptr<float>(), mCodes.data_ptr<int8_t>(),
                                   mScales.data_ptr<float>(), y.data_ptr(),
                                   mDtype == at::kHalf ? kernels::ActType::Float16 : kernels::ActType::BFloat16, m, n, k,
                                   torchCurrentStream());
        } catch (const kernels::KernelError& e) {
            throw Error(std::string("native W8A8 layer: ") + e.what());
        }
        return y.view(outputShape(x, n));
    }
    std::string kernelName() const override {
        return activationQuantizedKernelName("W8A8 int8 GEMM", "M<=4");
    }
    size_t deviceBytes() const override {
        return size_t(mCodes.numel()) + size_t(mScales.numel() + (mSmoothing.defined() ? mSmoothing.numel() : 0)) * 4;
    }

private:
    const float* divisor() const { return mSmoothing.defined() ? mSmoothing.data_ptr<float>() : nullptr; }

    at::Tensor mCodes;       // int8 [n, k] on the device
    at::Tensor mScales;      // float32 [n]
    at::Tensor mSmoothing;   // float32 [k]: SmoothQuant's input divisor; undefined where it is all ones
    at::ScalarType mDtype;
    std::shared_ptr<NativeWorkspace> mWorkspace;
};

} // namespace

std::shared_ptr<NativeWorkspace> makeNativeWorkspace(int64_t dequantAboveTokens) {
    return std::make_shared<NativeWorkspace>(dequantAboveTokens);
}

std::unique_ptr<NativeIntLinear> makeNativeIntLinear(const quant::QuantizedWeight& w, const at::Tensor& inputScale,
                                                     at::Device device, at::ScalarType dtype,
                                                     std::shared_ptr<NativeWorkspace> workspace, std::string& reason) {
    if (!device.is_cuda()) {
        reason = "not on CUDA";
        return nullptr;
    }
    if (w.spec.bits != 4 && w.spec.bits != 8) {
        reason = "no kernel for " + std::to_string(w.spec.bits) + "-bit weights (4 and 8 only)";
        return nullptr;
    }
    if (dtype != at::kHalf && dtype != at::kBFloat16) {
        reason = std::string("compute type ") + c10::toString(dtype) + " (the kernels take fp16 or bf16)";
        return nullptr;
    }
    const at::Tensor packed = w.packed.to(at::kInt).contiguous(), scales = w.scales.to(at::kFloat).contiguous();
    const at::Tensor zeros = w.zeros.to(at::kInt).contiguous(), groupIndex = w.groupIndex.to(at::kInt).contiguous();
    kernels::CoreIntWeightView view;
    view.bits = w.spec.bits;
    view.rows = w.rows;
    view.cols = w.cols;
    view.groups = scales.size(1);
    view.packed = packed.data_ptr<int32_t>();
    view.scales = scales.data_ptr<float>();
    view.zeros = zeros.data_ptr<int32_t>();
    view.groupIndex = groupIndex.data_ptr<int32_t>();
    try {
        c10::DeviceGuard guard(device);
        // CWB_PACK_THREADS (benchmarking only) caps the packing threads; default (0): one per hardware thread.
        const int packThreads = int(env::envInteger("CWB_PACK_THREADS", 0, 4096, 0));
        kernels::TiledIntWeight tiled = kernels::packTiled(
            view, dtype == at::kHalf ? kernels::ActType::Float16 : kernels::ActType::BFloat16, packThreads);
        const size_t bytes = tiled.weightBytes() + tiled.columnOf.size() * 4;
        kernels::DeviceTiledWeight onDevice(tiled);
        at::Tensor scale = inputScale.defined() ? inputScale.to(device, at::kFloat) : at::Tensor();
        return std::make_unique<KernelIntLinear>(std::move(onDevice), scale, device, dtype, std::move(workspace), bytes);
    } catch (const kernels::KernelError& e) {
        reason = std::string("packing failed: ") + e.what();
        return nullptr;
    }
}

namespace {

// Why an FP8 layer gets no kernel on this device ("" when it does); device and dtype checked by the caller.
std::string fp8Refusal(const Fp8Linear& layer) {
    if (!layer.dynamicActivations()) return "fp8 weights with 16-bit activations (the FP8 GEMM needs FP8 activations; no mixed kernel)";
    if (!kernels::fp8GemmSupported()) return "FP8 GEMM needs compute capability 8.9 or newer";
    return "";
}

// Codes [rows, k] (uint8) and one scale per row (float) on the device, of the parts stacked in order.
std::unique_ptr<NativeIntLinear> fp8KernelOfRows(const std::vector<const Fp8Linear*>& parts, at::Device device,
                                                 at::ScalarType dtype, std::shared_ptr<NativeWorkspace> workspace) {
    std::vector<at::Tensor> codes, scales;
    for (const Fp8Linear* part : parts) {
        const quant::Fp8Weight& w = part->fp8Weight();
        codes.push_back(w.codes.to(device, at::kByte));
        scales.push_back(w.scales.to(device, at::kFloat).reshape({-1}).expand({w.codes.size(0)}));
    }
    return std::make_unique<KernelFp8Linear>(at::cat(codes, 0).contiguous(), at::cat(scales, 0).contiguous(), dtype,
                                             std::move(workspace));
}

// Codes [rows, k] (int8) and one scale per row of the parts stacked in order, with the first part's divisor (the
// caller checked that they agree); none where it is all ones.
std::unique_ptr<NativeIntLinear> w8a8KernelOfRows(const std::vector<const W8A8Linear*>& parts, at::Device device,
                                                  at::ScalarType dtype, std::shared_ptr<NativeWorkspace> workspace) {
    std::vector<at::Tensor> codes, scales;
    for (const W8A8Linear* part : parts) {
        codes.push_back(part->int8Weight().q.to(device, at::kChar));
        scales.push_back(part->int8Weight().scales.to(device, at::kFloat).reshape({-1}));
    }
    const at::Tensor smoothing = parts.front()->smoothing().to(at::kFloat);
    at::Tensor divisor;
    if (!at::all(smoothing == 1).item<bool>()) divisor = smoothing.to(device).contiguous();
    return std::make_unique<KernelW8a8Linear>(at::cat(codes, 0).contiguous(), at::cat(scales, 0).contiguous(), divisor,
                                              dtype, std::move(workspace));
}

} // namespace

namespace {

// What both stackers check and catch: parts of one input width (a multiple of 16), on CUDA in fp16 or bf16, none of
// them refused by `refusal` ("" when a part can join); `make` builds the stacked layer (or sets `reason`, nullptr).
template <typename Layer, typename Refusal, typename Make>
std::unique_ptr<NativeIntLinear> stackedLayer(const std::vector<const Layer*>& parts, at::Device device, at::ScalarType dtype,
                                              const char* kind, std::string& reason, Refusal refusal, Make make) {
    if (parts.empty()) {
        reason = "no layers to stack";
        return nullptr;
    }
    if (!device.is_cuda() || (dtype != at::kHalf && dtype != at::kBFloat16)) {
        reason = std::string(kind) + " kernels run on CUDA in fp16 or bf16";
        return nullptr;
    }
    for (const Layer* part : parts) {
        if (part->cols() != parts.front()->cols() || part->cols() % 16 != 0) {
            reason = "the layers differ in input features, or they are not a multiple of 16";
            return nullptr;
        }
        reason = refusal(*part);
        if (!reason.empty()) return nullptr;
    }
    try {
        c10::DeviceGuard guard(device);
        return make();
    } catch (const kernels::KernelError& e) {
        reason = std::string("kernel setup failed: ") + e.what();
        return nullptr;
    } catch (const c10::Error& e) {   // copies to the device: each part then runs on its own, saying why
        reason = std::string("stacking failed: ") + e.what_without_backtrace();
        return nullptr;
    }
}

} // namespace

std::unique_ptr<NativeIntLinear> makeNativeFp8Rows(const std::vector<const Fp8Linear*>& parts, at::Device device,
                                                   at::ScalarType dtype, std::shared_ptr<NativeWorkspace> workspace,
                                                   std::string& reason) {
    return stackedLayer(parts, device, dtype, "FP8", reason, fp8Refusal,
                        [&] { return fp8KernelOfRows(parts, device, dtype, std::move(workspace)); });
}

std::unique_ptr<NativeIntLinear> makeNativeW8a8Rows(const std::vector<const W8A8Linear*>& parts, at::Device device,
                                                    at::ScalarType dtype, std::shared_ptr<NativeWorkspace> workspace,
                                                    std::string& reason) {
    int64_t rows = 0;
    for (const W8A8Linear* part : parts) rows += part->rows();
    if (rows % 4 != 0) {
        reason = "w8a8 with " + std::to_string(rows) + " stacked outputs (the int8 GEMM needs a multiple of 4)";
        return nullptr;
    }
    // Each part quantizes x / its own divisor: one set of codes of x serves them all only if the divisors agree.
    const auto refusal = [&](const W8A8Linear& part) -> std::string {
        return at::equal(part.smoothing().to(at::kFloat).cpu(), parts.front()->smoothing().to(at::kFloat).cpu())
                   ? ""
                   : "the layers have different SmoothQuant divisors (their codes of x differ)";
    };
    return stackedLayer(parts, device, dtype, "W8A8", reason, refusal,
                        [&] { return w8a8KernelOfRows(parts, device, dtype, std::move(workspace)); });
}

std::unique_ptr<NativeIntLinear> makeNativeLinear(const CompressedLinear& layer, at::Device device, at::ScalarType dtype,
                                                  std::shared_ptr<NativeWorkspace> workspace, std::string& reason) {
    if (const auto* integer = dynamic_cast<const IntLinear*>(&layer))
        return makeNativeIntLinear(integer->quantized(), integer->inputScale(), device, dtype, std::move(workspace), reason);
    if (!device.is_cuda()) {
        reason = "not on CUDA";
        return nullptr;
    }
    if (dtype != at::kHalf && dtype != at::kBFloat16) {
        reason = std::string("compute type ") + c10::toString(dtype) + " (the native layers run in fp16 or bf16)";
        return nullptr;
    }
    // cuBLASLt's FP8 and int8 products need k (the input features) to be a multiple of 16.
    if (layer.cols() % 16 != 0 && (layer.kind() == "fp8" || layer.kind() == "w8a8")) {
        reason = layer.kind() + " with " + std::to_string(layer.cols()) + " input features (cuBLASLt needs a multiple of 16)";
        return nullptr;
    }
    try {
        c10::DeviceGuard guard(device);
        if (const auto* fp8 = dynamic_cast<const Fp8Linear*>(&layer)) {
            reason = fp8Refusal(*fp8);
            if (!reason.empty()) return nullptr;
            return fp8KernelOfRows({fp8}, device, dtype, std::move(workspace));
        }
        if (const auto* w8a8 = dynamic_cast<const W8A8Linear*>(&layer)) {
            if (layer.rows() % 4 != 0) {
                reason = "w8a8 with " + std::to_string(layer.rows()) + " outputs (the int8 GEMM needs a multiple of 4)";
                return nullptr;
            }
            return w8a8KernelOfRows({w8a8}, device, dtype, std::move(workspace));
        }
    } catch (const kernels::KernelError& e) {
        reason = std::string("kernel setup failed: ") + e.what();
        return nullptr;
    }
    reason = "no kernel wired for " + layer.kind() + " layers";
    return nullptr;
}

bool nativeKernelsBuilt() { return true; }

int64_t deviceMemoryUsedBytes() {
    try {
        return int64_t(kernels::deviceMemory().usedBytes());
    } catch (const kernels::KernelError&) {
        return -1;
    }
}

int64_t deviceMemoryFreeBytes() {
    try {
        return int64_t(kernels::deviceMemory().freeBytes);
    } catch (const kernels::KernelError&) {
        return -1;
    }
}

int kernelDispatchCapability() { return kernels::deviceCapability(); }
int kernelCapabilityCeiling() { return kernels::deviceCapabilityCeiling(); }

#else  // no CUDA kernels in this build

class NativeWorkspace {};

std::shared_ptr<NativeWorkspace> makeNativeWorkspace(int64_t) { return std::make_shared<NativeWorkspace>(); }

std::unique_ptr<NativeIntLinear> makeNativeIntLinear(const quant::QuantizedWeight&, const at::Tensor&, at::Device device,
                                                     at::ScalarType, std::shared_ptr<NativeWorkspace>, std::string& reason) {
    reason = device.is_cuda() ? "this build has no CUDA kernels (CWB_CUDA off)" : "not on CUDA";
    return nullptr;
}

std::unique_ptr<NativeIntLinear> makeNativeLinear(const CompressedLinear&, at::Device device, at::ScalarType,
                                                  std::shared_ptr<NativeWorkspace>, std::string& reason) {
    reason = device.is_cuda() ? "this build has no CUDA kernels (CWB_CUDA off)" : "not on CUDA";
    return nullptr;
}

std::unique_ptr<NativeIntLinear> makeNativeFp8Rows(const std::vector<const Fp8Linear*>&, at::Device device, at::ScalarType,
                                                   std::shared_ptr<NativeWorkspace>, std::string& reason) {
    reason = device.is_cuda() ? "this build has no CUDA kernels (CWB_CUDA off)" : "not on CUDA";
    return nullptr;
}

std::unique_ptr<NativeIntLinear> makeNativeW8a8Rows(const std::vector<const W8A8Linear*>&, at::Device device,
                                                    at::ScalarType, std::shared_ptr<NativeWorkspace>, std::string& reason) {
    reason = device.is_cuda() ? "this build has no CUDA kernels (CWB_CUDA off)" : "not on CUDA";
    return nullptr;
}

bool nativeKernelsBuilt() { return false; }

int64_t deviceMemoryUsedBytes() { return -1; }
int64_t deviceMemoryFreeBytes() { return -1; }
int kernelDispatchCapability() { return 0; }
int kernelCapabilityCeiling() { return 0; }

#endif

} // namespace cwb
