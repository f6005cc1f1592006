#include "cuda_check.h"
#include "cwb/kernels/device_info.h"
#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels {

DeviceMemory deviceMemory() {
    DeviceMemory m;
    CWB_CUDA_CHECK(cudaMemGetInfo(&m.freeBytes, &m.totalBytes));
    return m;
}

} // namespace cwb::kernels
