#pragma once
// Device memory as the driver reports it (cudaMemGetInfo on the current device), for reports that must not
// include CUDA headers. Counts every allocation on the device, LibTorch's cached blocks included.
#include <cstddef>

namespace cwb::kernels {

struct DeviceMemory {
    size_t freeBytes = 0;
    size_t totalBytes = 0;
    size_t usedBytes() const { return totalBytes - freeBytes; }
};

// Throws KernelError when the CUDA call fails.
DeviceMemory deviceMemory();

} // namespace cwb::kernels
