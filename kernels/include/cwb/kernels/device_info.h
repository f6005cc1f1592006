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

// The compute capability the kernels dispatch for, as 10 x major + minor (90 on an H200): the current device's,
// lowered to the ceiling CWB_CUDA_CAPABILITY sets (e.g. 80: no TMA, clusters, PDL or FP8 GEMM, as on an A100), so a
// build for compute_80 can run its sm_80 paths on a newer GPU. A ceiling above the device's changes nothing. 0 when
// there is no device. Every choice of a Hopper-only path asks this.
int deviceCapability();
// The ceiling CWB_CUDA_CAPABILITY sets, read at the first call: 0 when unset. A value that is not a capability from
// 80 (what the kernels need) to 150 is an env::SettingError (never ignored: a check meant for sm_80 would otherwise run the sm_90 paths).
int deviceCapabilityCeiling();

} // namespace cwb::kernels
