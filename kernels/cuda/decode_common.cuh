#pragma once
// Internal to the decode kernels: fp16 / bf16 loads and stores as float, warp and block reductions, and the
// dispatch from ActType to the element type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cwb/kernels/kernel_types.h"
#include "element_cast.cuh"

namespace cwb::kernels::decode {

using detail::fromFloat;
using detail::toFloat;

__device__ __forceinline__ float warpSum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warpMax(float v) {
    for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float blockSum(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warpSum(v);
    __syncthreads();   // partial may still be read by an earlier call
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < warps ? partial[lane] : 0.0f;
    return warpSum(v);
}

// Element i of a head rotated by the RoPE table row `cos` (cos [0, headDim), signed sin [headDim, 2 headDim)),
// rounded to the activation type: ropeKvWrite's and ropeDecodeAttention's one formula.
template <typename T>
__device__ __forceinline__ T rotatedElement(const T* head, int64_t i, int64_t headDim, bool adjacentPairs,
                                            const float* cos) {
    const int64_t partner = adjacentPairs ? (i ^ 1) : (i + headDim / 2) % headDim;
    return fromFloat<T>(toFloat(head[i]) * cos[i] + toFloat(head[partner]) * cos[headDim + i]);
}

// Calls f with a null pointer of the element type `type` names (f(static_cast<__half*>(nullptr)) etc.).
template <typename F>
void dispatch(ActType type, F&& f) {
    if (type == ActType::Float16)
        f(static_cast<__half*>(nullptr));
    else
        f(static_cast<__nv_bfloat16*>(nullptr));
}

} // namespace cwb::kernels::decode
