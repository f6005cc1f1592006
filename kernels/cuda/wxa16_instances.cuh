#pragma once
// Instantiates the launchers for one activation type; included by wxa16_gemm_f16.cu and wxa16_gemm_bf16.cu so the
// two types compile in parallel.
#include "wxa16_kernel.cuh"

namespace cwb::kernels::detail {

template <typename T, int BITS>
void launchBits(const Wxa16Params& p, dim3 grid, cudaStream_t stream) {
    if (p.m <= 8)
        wxa16Kernel<T, BITS, 1><<<grid, 256, 0, stream>>>(p);
    else if (p.m <= 16)
        wxa16Kernel<T, BITS, 2><<<grid, 256, 0, stream>>>(p);
    else if (p.m <= 32)
        wxa16Kernel<T, BITS, 4><<<grid, 256, 0, stream>>>(p);
    else
        wxa16Kernel<T, BITS, 8><<<grid, 256, 0, stream>>>(p);
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
