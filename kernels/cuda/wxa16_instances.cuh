#pragma once
// Instantiates the launchers for one activation type; included by wxa16_gemm_f16.cu and wxa16_gemm_bf16.cu so the
// two types compile in parallel.
#include <string>

#include "cwb/kernels/kernel_types.h"
#include "wxa16_kernel.cuh"

namespace cwb::kernels::detail {

// The shared-memory ring is over the 48 KB default for some variants: raise the limit once per kernel.
template <typename T, int BITS, int NT>
void launchVariant(const Wxa16Params& p, dim3 grid, cudaStream_t stream) {
    constexpr size_t bytes = Ring<BITS>::kBlockBytes;
    static const cudaError_t raised =
        cudaFuncSetAttribute(wxa16Kernel<T, BITS, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
    if (raised != cudaSuccess)
        throw KernelError(std::string("wxa16Gemm: cannot give the kernel ") + std::to_string(bytes) +
                          " bytes of shared memory: " + cudaGetErrorString(raised));
    wxa16Kernel<T, BITS, NT><<<grid, 256, bytes, stream>>>(p);
}

template <typename T, int BITS>
void launchBits(const Wxa16Params& p, dim3 grid, cudaStream_t stream) {
    if (p.m <= 8)
        launchVariant<T, BITS, 1>(p, grid, stream);
    else if (p.m <= 16)
        launchVariant<T, BITS, 2>(p, grid, stream);
    else if (p.m <= 32)
        launchVariant<T, BITS, 4>(p, grid, stream);
    else
        launchVariant<T, BITS, 8>(p, grid, stream);
}

template <typename T>
void launchWxa16(const Wxa16Params& p, int bits, dim3 grid, cudaStream_t stream) {
    if (bits == 4)
        launchBits<T, 4>(p, grid, stream);
    else
        launchBits<T, 8>(p, grid, stream);
}

template <typename T>
void launchGather(const void* x, int64_t ldx, const int32_t* columnOf, int64_t paddedCols, int m, void* xg,
                  cudaStream_t stream) {
    const int64_t n = int64_t(m) * paddedCols;
    gatherColumnsKernel<T><<<unsigned((n + 255) / 256), 256, 0, stream>>>(static_cast<const T*>(x), ldx, columnOf,
                                                                           paddedCols, m, static_cast<T*>(xg));
}

} // namespace cwb::kernels::detail
