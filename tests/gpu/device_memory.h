// Helpers shared by the kernel tests: copies between host vectors and device buffers, and the skip rule.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels::testing {

template <typename V>
V* toDevice(const std::vector<V>& h) {
    V* d = nullptr;
    if (cudaMalloc(&d, h.size() * sizeof(V)) != cudaSuccess) throw KernelError("cudaMalloc failed");
    if (cudaMemcpy(d, h.data(), h.size() * sizeof(V), cudaMemcpyHostToDevice) != cudaSuccess) throw KernelError("copy to the device failed");
    return d;
}

template <typename V>
std::vector<V> toHost(const V* d, size_t n) {
    std::vector<V> h(n);
    if (cudaMemcpy(h.data(), d, n * sizeof(V), cudaMemcpyDeviceToHost) != cudaSuccess) throw KernelError("copy back failed");
    return h;
}

// True (after saying so) when no CUDA device is visible: the test then exits 77, which CTest counts as skipped.
inline bool noCudaDevice() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) return false;
    std::printf("SKIP: no CUDA device\n");
    return true;
}

} // namespace cwb::kernels::testing
