#pragma once
// Internal: fp16 / bf16 elements to and from float (round to nearest even), shared by the kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace cwb::kernels::detail {

__device__ __forceinline__ float toFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T fromFloat(float v);
template <>
__device__ __forceinline__ __half fromFloat<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

} // namespace cwb::kernels::detail
