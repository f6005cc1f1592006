#pragma once
// Internal to cwb_kernels: launching a kernel with programmatic dependent launch (dependent_launch.h) and the wait
// every such kernel runs first.
#include <cuda_runtime.h>

#include <utility>

#include "cwb/kernels/dependent_launch.h"

namespace cwb::kernels {

namespace detail {
// The current device is at compute capability 9.0 or more (PDL, thread-block clusters); cached per device.
bool hopperOrLater();
// The setting, and hopperOrLater(). Counts the launch when true.
bool useDependentLaunch();
} // namespace detail

// First statement of a kernel launched by launchDependent: no block reads or writes memory before the kernel before
// it has finished (so a buffer it still reads is never overwritten, and every kernel after waits, transitively, for
// all before). The one exception: weights (the W4A16 stream kernel's, the 8-bit decode GEMVs') may be loaded before
// the wait, since nothing writes them between launches (a kernel that did would have to come two launches earlier). Then the kernel after it may launch as soon as every block of this one got here: its blocks take the
// free slots and wait in turn, one kernel ahead at most. A no-op when the launch had no PDL attribute, and below sm_90.
__device__ __forceinline__ void waitForPredecessor() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// kernel<<<grid, block, shared, stream>>>(args...), with the PDL attribute where detail::useDependentLaunch(), and
// with clusterWidth > 0 as thread-block clusters of clusterWidth x 1 x 1 blocks (compute capability 9.0+; grid.x a
// multiple of it). The kernel must begin with waitForPredecessor(). Returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t launchDependentInClusters(unsigned clusterWidth, void (*kernel)(Params...), dim3 grid, dim3 block,
                                      size_t shared, cudaStream_t stream, Args&&... args) {
    cudaLaunchAttribute attributes[2] = {};
    unsigned count = 0;
    if (detail::useDependentLaunch()) {
        attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attributes[count].val.programmaticStreamSerializationAllowed = 1;
        ++count;
    }
    if (clusterWidth > 0) {
        attributes[count].id = cudaLaunchAttributeClusterDimension;
        attributes[count].val.clusterDim.x = clusterWidth;
        attributes[count].val.clusterDim.y = 1;
        attributes[count].val.clusterDim.z = 1;
        ++count;
    }
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared;
    config.stream = stream;
    config.attrs = attributes;
    config.numAttrs = count;
    return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
cudaError_t launchDependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                            Args&&... args) {
    return launchDependentInClusters(0, kernel, grid, block, shared, stream, std::forward<Args>(args)...);
}

} // namespace cwb::kernels
