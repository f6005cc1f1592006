#pragma once
// LibTorch's current CUDA stream as the kernels' plain stream handle, so that cwb's kernels order with LibTorch's
// operations and join a CUDA-graph capture. The default stream (nullptr) when LibTorch has no CUDA. Include only
// where the kernels are built (CWB_HAVE_KERNELS).
#include "cwb/kernels/kernel_types.h"

#ifdef CWB_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace cwb {

inline kernels::Stream torchCurrentStream() {
#ifdef CWB_TORCH_CUDA
    return c10::cuda::getCurrentCUDAStream().stream();
#else
    return nullptr;
#endif
}

} // namespace cwb
