#include "wxa16_instances.cuh"

namespace cwb::kernels::detail {
template void launchWxa16<__nv_bfloat16>(const Wxa16Params&, int, dim3, cudaStream_t);
template void launchW4Small<__nv_bfloat16>(const Wxa16Params&, cudaStream_t);
template int w4SmallBlocksPerSm<__nv_bfloat16>(int, int);
template void launchW4Tma<__nv_bfloat16>(const Wxa16Params&, cudaStream_t);
template int w4TmaBlocksPerSm<__nv_bfloat16>(int, int);
template void launchW4Stream<__nv_bfloat16>(const Wxa16Params&, int, int, cudaStream_t);
template void launchW8Stream<__nv_bfloat16>(const Wxa16Params&, int, cudaStream_t);
template void launchGather<__nv_bfloat16>(const void*, int64_t, const int32_t*, int64_t, int, void*, cudaStream_t);
} // namespace cwb::kernels::detail
