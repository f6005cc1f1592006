#include "core/runtime/cuda_linear.h"

#include <c10/core/DeviceGuard.h>

#include "core/util/error.h"

#ifdef CWB_HAVE_KERNELS
#include "cwb/kernels/device_info.h"
#include "cwb/kernels/wxa16_gemm.h"
#endif
#ifdef CWB_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace cwb {

#ifdef CWB_HAVE_KERNELS

class NativeWorkspace {
public:
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

private:
    void* mData = nullptr;
    size_t mBytes = 0;
    std::vector<void*> mRetired;
};

namespace {

// LibTorch's current stream, so that the kernels order with its operations and join a CUDA graph capture.
kernels::Stream currentStream() {
#ifdef CWB_TORCH_CUDA
    return c10::cuda::getCurrentCUDAStream().stream();
#else
    return nullptr;
#endif
}

class KernelIntLinear : public NativeIntLinear {
public:
    KernelIntLinear(kernels::DeviceTiledWeight weight, at::Tensor inputScale, at::Device device, at::ScalarType dtype,
                    std::shared_ptr<NativeWorkspace> workspace, size_t bytes)
        : mWeight(std::move(weight)), mInputScale(std::move(inputScale)), mDevice(device), mDtype(dtype),
          mWorkspace(std::move(workspace)), mBytes(bytes) {}

    at::Tensor forward(const at::Tensor& x) const override {
        c10::DeviceGuard guard(mDevice);
        at::Tensor input = x.reshape({-1, mWeight.cols});
        input = mInputScale.defined() ? (input.to(at::kFloat) / mInputScale).to(mDtype) : input.to(mDtype);
        input = input.contiguous();
        if (reinterpret_cast<uintptr_t>(input.data_ptr()) % 16 != 0) input = input.clone();   // the kernel loads 16 bytes
        const int64_t m = input.size(0);
        at::Tensor y = at::empty({m, mWeight.rows}, input.options());
        try {
            void* ws = mWorkspace->reserve(kernels::wxa16WorkspaceBytes(mWeight, m));
            kernels::wxa16Gemm(mWeight, input.data_ptr(), y.data_ptr(), m, ws, mWorkspace->bytes(), currentStream());
        } catch (const kernels::KernelError& e) {
            throw Error(std::string("native ") + kernelName() + " layer: " + e.what());
        }
        std::vector<int64_t> shape = x.sizes().vec();
        shape.back() = mWeight.rows;
        return y.view(shape);
    }
    std::string kernelName() const override { return mWeight.bits == 4 ? "W4A16" : "W8A16"; }
    size_t deviceBytes() const override { return mBytes; }

private:
    kernels::DeviceTiledWeight mWeight;
    at::Tensor mInputScale;   // fp32 on the device, or undefined
    at::Device mDevice;
    at::ScalarType mDtype;
    std::shared_ptr<NativeWorkspace> mWorkspace;
    size_t mBytes;
};

} // namespace

std::shared_ptr<NativeWorkspace> makeNativeWorkspace() { return std::make_shared<NativeWorkspace>(); }

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
        kernels::TiledIntWeight tiled =
            kernels::packTiled(view, dtype == at::kHalf ? kernels::ActType::Float16 : kernels::ActType::BFloat16);
        const size_t bytes = tiled.weightBytes() + tiled.columnOf.size() * 4;
        kernels::DeviceTiledWeight onDevice(tiled);
        at::Tensor scale = inputScale.defined() ? inputScale.to(device, at::kFloat) : at::Tensor();
        return std::make_unique<KernelIntLinear>(std::move(onDevice), scale, device, dtype, std::move(workspace), bytes);
    } catch (const kernels::KernelError& e) {
        reason = std::string("packing failed: ") + e.what();
        return nullptr;
    }
}

bool nativeKernelsBuilt() { return true; }

int64_t deviceMemoryUsedBytes() {
    try {
        return int64_t(kernels::deviceMemory().usedBytes());
    } catch (const kernels::KernelError&) {
        return -1;
    }
}

#else  // no CUDA kernels in this build

class NativeWorkspace {};

std::shared_ptr<NativeWorkspace> makeNativeWorkspace() { return std::make_shared<NativeWorkspace>(); }

std::unique_ptr<NativeIntLinear> makeNativeIntLinear(const quant::QuantizedWeight&, const at::Tensor&, at::Device device,
                                                     at::ScalarType, std::shared_ptr<NativeWorkspace>, std::string& reason) {
    reason = device.is_cuda() ? "this build has no CUDA kernels (CWB_CUDA off)" : "not on CUDA";
    return nullptr;
}

bool nativeKernelsBuilt() { return false; }

int64_t deviceMemoryUsedBytes() { return -1; }

#endif

} // namespace cwb
