#pragma once
// Internal to cwb_kernels: turn CUDA errors into KernelError naming the call and the place.
#include <cuda_runtime.h>

#include <string>

#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels::detail {

inline void check(cudaError_t e, const char* what, const char* file, int line) {
    if (e != cudaSuccess)
        throw KernelError(std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " +
                          cudaGetErrorString(e));
}

inline cudaStream_t toStream(Stream s) { return static_cast<cudaStream_t>(s); }

} // namespace cwb::kernels::detail

#define CWB_CUDA_CHECK(call) ::cwb::kernels::detail::check((call), #call, __FILE__, __LINE__)
#define CWB_CUDA_CHECK_LAUNCH(name) ::cwb::kernels::detail::check(cudaGetLastError(), name, __FILE__, __LINE__)
