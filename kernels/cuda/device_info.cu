#include <algorithm>
#include <atomic>

#include "cuda_check.h"
#include "cwb/kernels/device_info.h"
#include "cwb/kernels/env_setting.h"
#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels {

DeviceMemory deviceMemory() {
    DeviceMemory m;
    CWB_CUDA_CHECK(cudaMemGetInfo(&m.freeBytes, &m.totalBytes));
    return m;
}

namespace {

__global__ void capabilityProbe() {}

} // namespace

int compiledCapability() {
    static std::atomic<int> cached[64];   // 0: not asked yet, -1: no answer
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return 0;
    int known = device >= 0 && device < 64 ? cached[device].load() : 0;
    if (known == 0) {
        cudaFuncAttributes attributes{};
        known = cudaFuncGetAttributes(&attributes, capabilityProbe) == cudaSuccess
                    ? std::min(attributes.binaryVersion, attributes.ptxVersion)
                    : -1;
        if (known <= 0) {
            cudaGetLastError();
            known = -1;
        }
        if (device >= 0 && device < 64) cached[device].store(known);
    }
    return known > 0 ? known : 0;
}

int deviceCapabilityCeiling() {
    static const int ceiling = int(env::envInteger("CWB_CUDA_CAPABILITY", 80, 150, 0));
    return ceiling;
}

int deviceCapability() {
    const int ceiling = deviceCapabilityCeiling();
    static std::atomic<int> cached[64];   // the device's own capability; 0: not asked yet, -1: no answer
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return 0;
    int own = device >= 0 && device < 64 ? cached[device].load() : 0;
    if (own == 0) {
        int major = 0, minor = 0;
        own = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess
                  ? 10 * major + minor
                  : -1;
        if (device >= 0 && device < 64) cached[device].store(own);
    }
    if (own < 0) return 0;
    const int compiled = compiledCapability();
    const int capability = compiled > 0 && compiled < own ? compiled : own;
    return ceiling > 0 && ceiling < capability ? ceiling : capability;
}

} // namespace cwb::kernels
