#pragma once
// Bridge from the runtime to the CUDA kernels of kernels/: a compressed linear layer computed on its stored form,
// integer layers by the W4A16 / W8A16 GEMMs, FP8 layers with dynamic activations by the cuBLASLt FP8 GEMM and
// SmoothQuant W8A8 layers by the cuBLASLt int8 GEMM. Plain C++ (no CUDA headers). Compiled against the kernels only when the build has
// CWB_CUDA; otherwise every factory answers "unavailable" and the runtime dequantizes instead.
#include <cstddef>
#include <memory>
#include <string>

#include <ATen/ATen.h>

#include "core/compress/quant_math.h"

namespace cwb {

class CompressedLinear;

// Device scratch shared by the native layers of one runtime: they run one after another on LibTorch's current
// stream (with a CUDA build of LibTorch; the default stream otherwise), which is where the kernels are launched.
class NativeWorkspace;
std::shared_ptr<NativeWorkspace> makeNativeWorkspace();

class NativeIntLinear {
public:
    virtual ~NativeIntLinear() = default;
    // x [..., cols] on the layer's device; returns [..., rows] in the runtime's compute type.
    virtual at::Tensor forward(const at::Tensor& x) const = 0;
    virtual std::string kernelName() const = 0;   // "W4A16", "W8A16", "FP8 E4M3 GEMM" or "W8A8 int8 GEMM"
    virtual size_t deviceBytes() const = 0;       // packed words, scales and tables on the device
};

// Packs the weight into the kernels' tiled layout once and uploads it. inputScale (AWQ, may be undefined) divides
// the input first, as IntLinear::prepareInput does. Returns nullptr and sets `reason` where no kernel applies.
std::unique_ptr<NativeIntLinear> makeNativeIntLinear(const quant::QuantizedWeight& weight, const at::Tensor& inputScale,
                                                     at::Device device, at::ScalarType dtype,
                                                     std::shared_ptr<NativeWorkspace> workspace, std::string& reason);

// Any compressed layer: IntLinear through makeNativeIntLinear; Fp8Linear with dynamic activations through the FP8
// GEMM; W8A8Linear through the int8 GEMM. Activations are quantized per token on the device with the CPU path's
// float32 arithmetic (fp8_math.h, smoothquant_math.h). Returns nullptr and sets `reason` where no kernel applies.
std::unique_ptr<NativeIntLinear> makeNativeLinear(const CompressedLinear& layer, at::Device device, at::ScalarType dtype,
                                                  std::shared_ptr<NativeWorkspace> workspace, std::string& reason);

// True when this build carries the CUDA kernels.
bool nativeKernelsBuilt();

// Bytes in use on the current CUDA device (driver's count, LibTorch's cache included); -1 without the kernels.
int64_t deviceMemoryUsedBytes();

} // namespace cwb
