#pragma once
// Internal to cwb_kernels: launching a kernel with programmatic dependent launch (dependent_launch.h) and the wait
// every such kernel runs first.
#include <cuda_runtime.h>

#include <utility>

#include "cwb/kernels/dependent_launch.h"

namespace cwb::kernels {

namespace detail {
// The setting, and the current device at compute capability 9.0 or more. Counts the launch when true.
bool useDependentLaunch();
} // namespace detail

// First statement of a kernel launched by launchDependent: no block reads or writes memory before the kernel before
// it has finished (so a buffer it still reads is never overwritten, and every kernel after waits, transitively, for
// all before). Then the kernel after it may launch as soon as every block of this one got here: its blocks take the
// free slots and wait in turn, one kernel ahead at most. A no-op when the launch had no PDL attribute, and below sm_90.
__device__ __forceinline__ void waitForPredecessor() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// kernel<<<grid, block, shared, stream>>>(args...), with the PDL attribute where detail::useDependentLaunch().
// The kernel must begin with waitForPredecessor(). Returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t launchDependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                            Args&&... args) {
    cudaLaunchAttribute attribute[1] = {};
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared;
    config.stream = stream;
    config.attrs = attribute;
    config.numAttrs = detail::useDependentLaunch() ? 1 : 0;
    return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

} // namespace cwb::kernels
