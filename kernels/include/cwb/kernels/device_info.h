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
// lowered to what this build's code for it was compiled for (a compute_80-only build JIT-compiled on an H200 holds no
// sm_90 code: its TMA kernel would trap and its cluster merge lose its barriers), and to the ceiling
// CWB_CUDA_CAPABILITY sets (e.g. 80: no TMA, clusters, PDL or FP8 GEMM, as on an A100). A ceiling above the device's
// changes nothing. 0 when there is no device. Every choice of a Hopper-only path asks this.
int deviceCapability();
// What the code this build runs on the current device was compiled for: the lower of the PTX version and the
// binary's (cudaFuncGetAttributes of a kernel of this library); 0 when there is no device.
int compiledCapability();
// The ceiling CWB_CUDA_CAPABILITY sets, read at the first call: 0 when unset. A value that is not a capability from
// 80 (what the kernels need) to 150 is an env::SettingError (never ignored: a check meant for sm_80 would otherwise run the sm_90 paths).
int deviceCapabilityCeiling();

} // namespace cwb::kernels
