// Dequantizes a tiled16x64 weight into a dense row-major matrix (dequant_tiled.h). One thread per lane slot of a
// 16x64 chunk: it reads the lane's 16 (int4) or 32 (int8) bytes with vector loads and writes the 16 consecutive
// columns it holds of rows g and g + 8; four neighbouring lanes cover 64 columns of a row (128-byte stores).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_check.h"
#include "cwb/kernels/dequant_tiled.h"

namespace cwb::kernels {

namespace {

template <typename T>
__device__ __forceinline__ float bitsToFloat(uint32_t bits16);
template <>
__device__ __forceinline__ float bitsToFloat<__half>(uint32_t b) { return __half2float(__ushort_as_half(uint16_t(b))); }
template <>
__device__ __forceinline__ float bitsToFloat<__nv_bfloat16>(uint32_t b) {
    return __bfloat162float(__ushort_as_bfloat16(uint16_t(b)));
}

template <typename T>
__device__ __forceinline__ uint16_t floatToBits(float v);
template <>
__device__ __forceinline__ uint16_t floatToBits<__half>(float v) { return __half_as_ushort(__float2half_rn(v)); }
template <>
__device__ __forceinline__ uint16_t floatToBits<__nv_bfloat16>(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// Value i (0..7) of k-step s sits at row offset 8·(i / 2 % 2) and column 4·s + 2·(i / 4) + i % 2 of the lane's
// 16 columns (packed_weight.h).
template <typename T, int BITS>
__global__ void dequantTiledKernel(const uint32_t* __restrict__ words, const uint32_t* __restrict__ scaleZero,
                                   const int32_t* __restrict__ chunkGroup, const int32_t* __restrict__ columnOf,
                                   int64_t slots, int64_t chunks, int64_t groups, int64_t rows, int64_t cols,
                                   uint16_t* __restrict__ out) {
    const int64_t slot = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (slot >= slots) return;
    const int64_t tileChunk = slot / 32, tile = tileChunk / chunks, chunk = tileChunk % chunks;
    const int lane = int(slot % 32), g = lane / 4, tig = lane % 4;
    uint32_t q[BITS == 4 ? 4 : 8];
    const uint4* vec = reinterpret_cast<const uint4*>(words);
    if constexpr (BITS == 4) {
        const uint4 v = __ldg(vec + tileChunk * 32 + lane);
        q[0] = v.x; q[1] = v.y; q[2] = v.z; q[3] = v.w;
    } else {
        const uint4 v0 = __ldg(vec + (tileChunk * 2) * 32 + lane), v1 = __ldg(vec + (tileChunk * 2 + 1) * 32 + lane);
        q[0] = v0.x; q[1] = v0.y; q[2] = v0.z; q[3] = v0.w;
        q[4] = v1.x; q[5] = v1.y; q[6] = v1.z; q[7] = v1.w;
    }
    const int64_t group = __ldg(chunkGroup + chunk);
    float scale[2], zero[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const uint32_t sz = __ldg(scaleZero + (tile * groups + group) * 16 + g + 8 * h);
        scale[h] = bitsToFloat<T>(sz & 0xffffu);
        zero[h] = bitsToFloat<T>(sz >> 16);
    }
    uint16_t vals[2][16];
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            uint32_t level;
            if constexpr (BITS == 4)
                level = (q[s] >> ((i % 2 == 0) ? 4 * (i / 2) : 16 + 4 * (i / 2))) & 0xfu;
            else
                level = (q[2 * s + i / 4] >> (8 * (i % 4))) & 0xffu;
            const int h = (i / 2) % 2, col = 4 * s + 2 * (i / 4) + i % 2;
            vals[h][col] = floatToBits<T>((float(level) - zero[h]) * scale[h]);   // as dequantizeTiledRef
        }
    const int64_t p0 = chunk * 64 + 16 * tig;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int64_t r = tile * 16 + g + 8 * h;
        if (r >= rows) continue;
        uint16_t* dst = out + r * cols;
        if (!columnOf) {  // identity: cols == paddedCols, a multiple of 64, so the 32 bytes are aligned
            uint32_t packed[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) packed[j] = uint32_t(vals[h][2 * j]) | (uint32_t(vals[h][2 * j + 1]) << 16);
            uint4* d = reinterpret_cast<uint4*>(dst + p0);
            d[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
            d[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
        } else {
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                const int32_t col = __ldg(columnOf + p0 + j);
                if (col >= 0) dst[col] = vals[h][j];
            }
        }
    }
}

template <typename T>
void launch(const DeviceTiledWeight& w, void* out, cudaStream_t stream) {
    const int64_t chunks = w.paddedCols / kChunkCols, slots = (w.paddedRows / kTileRows) * chunks * 32;
    const unsigned blocks = unsigned((slots + 255) / 256);
    auto* dst = static_cast<uint16_t*>(out);
    if (w.bits == 4)
        dequantTiledKernel<T, 4><<<blocks, 256, 0, stream>>>(w.words, w.scaleZero, w.chunkGroup, w.columnOf, slots,
                                                             chunks, w.groups, w.rows, w.cols, dst);
    else
        dequantTiledKernel<T, 8><<<blocks, 256, 0, stream>>>(w.words, w.scaleZero, w.chunkGroup, w.columnOf, slots,
                                                             chunks, w.groups, w.rows, w.cols, dst);
}

} // namespace

void dequantizeTiled(const DeviceTiledWeight& w, void* out, Stream stream) {
    if (!out) throw KernelError("dequantizeTiled: the output must be a device pointer");
    if (reinterpret_cast<uintptr_t>(out) % 16) throw KernelError("dequantizeTiled: the output must be 16-byte aligned");
    if (w.bits != 4 && w.bits != 8) throw KernelError("dequantizeTiled: bits must be 4 or 8");
    if (w.act == ActType::Float16)
        launch<__half>(w, out, detail::toStream(stream));
    else
        launch<__nv_bfloat16>(w, out, detail::toStream(stream));
    CWB_CUDA_CHECK_LAUNCH("dequantizeTiled");
}

} // namespace cwb::kernels
