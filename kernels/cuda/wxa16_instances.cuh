#pragma once
// Instantiates the launchers for one activation type; included by wxa16_gemm_f16.cu and wxa16_gemm_bf16.cu so the
// two types compile in parallel.
#include "w4_small_m_kernel.cuh"
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

template <typename T, int NT>
void launchSmallTokens(const Wxa16Params& p, cudaStream_t stream) {
    constexpr int R = smallRowTiles(NT * 8);
    const dim3 grid(unsigned((p.tiles + R - 1) / R), unsigned(p.splitK));
    if (p.groupShift >= 1)
        w4SmallKernel<T, NT, R, 2><<<grid, kSmallWarps * 32, 0, stream>>>(p);
    else
        w4SmallKernel<T, NT, R, 1><<<grid, kSmallWarps * 32, 0, stream>>>(p);
}

template <typename T>
void launchW4Small(const Wxa16Params& p, cudaStream_t stream) {
    if (p.m <= 8)
        launchSmallTokens<T, 1>(p, stream);
    else
        launchSmallTokens<T, 2>(p, stream);
}

template <typename T>
void launchGather(const void* x, int64_t ldx, const int32_t* columnOf, int64_t paddedCols, int m, void* xg,
                  cudaStream_t stream) {
    const int64_t n = int64_t(m) * paddedCols;
    gatherColumnsKernel<T><<<unsigned((n + 255) / 256), 256, 0, stream>>>(static_cast<const T*>(x), ldx, columnOf,
                                                                           paddedCols, m, static_cast<T*>(xg));
}

} // namespace cwb::kernels::detail
