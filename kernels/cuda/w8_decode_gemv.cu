// Decode GEMVs of 8-bit weights that quantize their own input (w8_small_m.h). One persistent block per
// multiprocessor, 16 warps: the block loads its first weights, waits for the kernel before it, forms every token
// row's scale (a pass over x) and the codes of its warps' columns into shared memory, then streams 16-row tiles.
// A warp owns a fixed range of 64-column chunks of every tile; per chunk a lane loads 16 bytes of row g and of row
// g + 8 (g = lane / 4) and the 16 codes of x at the same columns, and feeds both halves to two mma m16n8k32. Which
// column of the mma a byte sits in does not matter, only that weight and x agree: a lane's 16 bytes are the
// columns 64c + 16·(lane % 4) ... + 15 of both. The tile's sums are added across the warps in shared memory while
// the next tile's first weights are in flight.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <type_traits>

#include "act_quant_codes.cuh"
#include "cuda_check.h"
#include "cwb/kernels/device_info.h"
#include "cwb/kernels/env_setting.h"
#include "cwb/kernels/fp8_gemm.h"
#include "cwb/kernels/w8_small_m.h"
#include "dependent_launch.cuh"
#include "element_cast.cuh"

namespace cwb::kernels {

namespace {

using detail::encodeE4m3;
using detail::encodeInt8;
using detail::fromFloat;
using detail::nanMax;
using detail::tokenScaleOf;
using detail::toFloat;

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 64;                      // columns per chunk: 16 bytes per lane and row, two k = 32 products
constexpr int64_t kMaxCodeBytes = 96 * 1024;    // dynamic shared memory for the codes of x (all token rows), at most
// The kernel's static shared memory: two reduction buffers of 16 warps x 32 lanes x 4 sums, the warps' maxima, the scales.
constexpr int64_t kStaticSharedBytes = 2 * kWarps * 32 * 4 * 4 + (kWarps + 1) * kDecodeGemvMaxRows * 4;

struct Params {
    const void* x;
    const float* divisor;   // int8 only; nullptr: none
    const uint8_t* w;
    const float* wScale;
    void* y;
    int m, n, k, chunks, tiles, codeStride;
};

// Bytes between two token rows of codes: k, or k + 64 where k is a multiple of 128, so that the 16-byte loads of
// token rows g and g + 1 (lanes 4g.. and 4g + 4..) fall in different halves of the banks.
__host__ __device__ inline int codeStrideOf(int k) { return k % 128 == 0 ? k + 64 : k; }

// Weights are read once per token: bypass L1.
__device__ __forceinline__ uint4 streamLoad(const uint8_t* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ void mmaInt8(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mmaE4m3(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    __trap();   // never launched: the host refuses FP8 below compute capability 8.9
#endif
}

// The eight fp16 / bf16 elements of a 16-byte piece of x as floats.
template <typename T>
__device__ __forceinline__ void unpackEight(const uint4& raw, float (&f)[8]) {
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = toFloat(e[j]);
}

template <typename T, bool Fp8, int B>
__global__ void __launch_bounds__(kThreads, 1) w8DecodeGemvKernel(const Params p) {
    using Acc = typename std::conditional<Fp8, float, int>::type;
    extern __shared__ __align__(16) unsigned char codes[];   // [m][codeStride]
    __shared__ __align__(16) Acc red[2][kWarps][32][4];
    __shared__ float warpMax[kWarps][kDecodeGemvMaxRows];
    __shared__ float tokenScale[kDecodeGemvMaxRows];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const int cBegin = warp * p.chunks / kWarps, cEnd = (warp + 1) * p.chunks / kWarps;
    const T* x = static_cast<const T*>(p.x);

    int tile = blockIdx.x;
    // Rows past n re-read the last row (their sums are never stored).
    auto rowOf = [&](int t, int r) { return p.w + int64_t(min(t * 16 + r, p.n - 1)) * p.k + tig * 16; };
    const uint8_t* r0 = rowOf(tile, g);
    const uint8_t* r1 = rowOf(tile, g + 8);
    uint4 wv[B][2];
    auto loadBatch = [&](int c) {
#pragma unroll
        for (int i = 0; i < B; ++i)
            if (c + i < cEnd) {
                wv[i][0] = streamLoad(r0 + int64_t(c + i) * kChunk);
                wv[i][1] = streamLoad(r1 + int64_t(c + i) * kChunk);
            }
    };
    loadBatch(cBegin);   // the weights never change: in flight before the wait
    waitForPredecessor();

    // Each token row's scale: the amax of x (or of x / divisor) over the whole row, in every block.
    auto valueAt = [&](float v, int col) { return p.divisor ? __fdiv_rn(v, p.divisor[col]) : v; };
    for (int tok = 0; tok < p.m; ++tok) {
        float amax = 0.0f;
        for (int piece = threadIdx.x; piece < p.k / 8; piece += kThreads) {
            float f[8];
            unpackEight<T>(__ldg(reinterpret_cast<const uint4*>(x + int64_t(tok) * p.k) + piece), f);
#pragma unroll
            for (int j = 0; j < 8; ++j) amax = nanMax(fabsf(valueAt(f[j], piece * 8 + j)), amax);
        }
        for (int o = 16; o > 0; o /= 2) amax = nanMax(__shfl_xor_sync(0xffffffffu, amax, o), amax);
        if (lane == 0) warpMax[warp][tok] = amax;
    }
    __syncthreads();
    if (threadIdx.x < p.m) {
        float amax = warpMax[0][threadIdx.x];
        for (int w = 1; w < kWarps; ++w) amax = nanMax(warpMax[w][threadIdx.x], amax);
        tokenScale[threadIdx.x] = tokenScaleOf(amax, Fp8 ? 448.0f : 127.0f);
    }
    __syncthreads();
    // The codes of the warp's own columns (only this warp reads them).
    for (int tok = 0; tok < p.m; ++tok) {
        const float scale = tokenScale[tok];
        for (int col = cBegin * kChunk + lane * 8; col < cEnd * kChunk; col += 256) {
            float f[8];
            unpackEight<T>(__ldg(reinterpret_cast<const uint4*>(x + int64_t(tok) * p.k + col)), f);
            uint32_t word[2] = {0u, 0u};
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float v = valueAt(f[j], col + j);
                const uint32_t code = Fp8 ? uint32_t(encodeE4m3(__fdiv_rn(v, scale))) : uint32_t(uint8_t(encodeInt8(v, scale)));
                word[j / 4] |= code << (8 * (j % 4));
            }
            *reinterpret_cast<uint2*>(codes + tok * p.codeStride + col) = make_uint2(word[0], word[1]);
        }
    }
    __syncwarp();

    // Lanes of token columns past m read the last row's codes (their sums are never stored).
    const unsigned char* xCodes = codes + min(g, p.m - 1) * p.codeStride + tig * 16;
    for (int parity = 0;; parity ^= 1) {
        Acc acc[4] = {Acc(0), Acc(0), Acc(0), Acc(0)};
        for (int c = cBegin; c < cEnd; c += B) {
            if (c != cBegin) loadBatch(c);
#pragma unroll
            for (int i = 0; i < B; ++i) {
                if (c + i >= cEnd) break;
                const uint4 xv = *reinterpret_cast<const uint4*>(xCodes + (c + i) * kChunk);
                const uint32_t a0[4] = {wv[i][0].x, wv[i][1].x, wv[i][0].y, wv[i][1].y};
                const uint32_t a1[4] = {wv[i][0].z, wv[i][1].z, wv[i][0].w, wv[i][1].w};
                const uint32_t b0[2] = {xv.x, xv.y}, b1[2] = {xv.z, xv.w};
                if constexpr (Fp8) {
                    // Each chunk summed afresh and added in fp32: the tensor cores' FP8 sums are not kept to fp32
                    // precision over long runs.
                    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    mmaE4m3(part, a0, b0);
                    mmaE4m3(part, a1, b1);
#pragma unroll
                    for (int j = 0; j < 4; ++j) acc[j] += part[j];
                } else {
                    mmaInt8(acc, a0, b0);
                    mmaInt8(acc, a1, b1);
                }
            }
        }
        const int next = tile + int(gridDim.x);
        if (next < p.tiles) {   // the next tile's first weights in flight through the reduction
            r0 = rowOf(next, g);
            r1 = rowOf(next, g + 8);
            loadBatch(cBegin);
        }
        *reinterpret_cast<typename std::conditional<Fp8, float4, int4>::type*>(red[parity][warp][lane]) = {acc[0], acc[1], acc[2], acc[3]};
        __syncthreads();
        if (threadIdx.x < 128) {   // output (row, token) of fragment element j of lane l
            const int l = threadIdx.x / 4, j = threadIdx.x % 4;
            Acc sum = red[parity][0][l][j];
            for (int w = 1; w < kWarps; ++w) sum += red[parity][w][l][j];
            const int row = tile * 16 + l / 4 + (j / 2) * 8, tok = (l % 4) * 2 + j % 2;
            if (tok < p.m && row < p.n)
                static_cast<T*>(p.y)[int64_t(tok) * p.n + row] =
                    fromFloat<T>(__fmul_rn(__fmul_rn(float(sum), tokenScale[tok]), p.wScale[row]));
        }
        if (next >= p.tiles) break;
        tile = next;
    }
}

// A device attribute of the current device, cached per device (asked at every launch).
template <cudaDeviceAttr Attribute>
int currentDeviceAttribute() {
    static std::atomic<int> values[64] = {};
    int device = 0, value = 0;
    CWB_CUDA_CHECK(cudaGetDevice(&device));
    if (device < 64 && values[device].load() > 0) return values[device].load();
    CWB_CUDA_CHECK(cudaDeviceGetAttribute(&value, Attribute, device));
    if (device < 64) values[device].store(value);
    return value;
}

// The codes' shared memory on this device: kMaxCodeBytes, or less where a block may not have that much beside the
// static part (GPUs of compute capability 8.6 / 8.9 allow 99 KB per block, an A100 163 KB, an H100 227 KB).
int64_t codeBytesLimit() {
    const int64_t optIn = currentDeviceAttribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>();
    return std::min<int64_t>(kMaxCodeBytes, optIn - kStaticSharedBytes - 1024);
}

std::atomic<int> gBatch{0};   // 0: not chosen yet

int batchChunks() {
    int b = gBatch.load();
    if (b == 0) {
        // 8 by default: at one token row it measured 0-24% faster per 7B layer than 4 on the H200 (session 37).
        b = env::envChoice("CWB_W8_DECODE_BATCH", {"4", "8"}, 1) == 1 ? 8 : 4;
        gBatch.store(b);
    }
    return b;
}

template <typename T, bool Fp8, int B>
void launchWith(const Params& p, cudaStream_t s) {
    const size_t shared = size_t(p.m) * size_t(p.codeStride);
    auto kernel = w8DecodeGemvKernel<T, Fp8, B>;
    // Once per device (not a stream operation, but kept out of graph captures after the first eager call anyway).
    static std::atomic<uint64_t> devicesSet{0};
    int device = 0;
    CWB_CUDA_CHECK(cudaGetDevice(&device));
    const uint64_t bit = uint64_t(1) << (device % 64);
    if (!(devicesSet.load() & bit)) {
        CWB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(codeBytesLimit())));
        devicesSet.fetch_or(bit);
    }
    const unsigned grid = unsigned(std::min<int64_t>(p.tiles, currentDeviceAttribute<cudaDevAttrMultiProcessorCount>()));
    CWB_CUDA_CHECK(launchDependent(kernel, dim3(grid), dim3(kThreads), shared, s, p));
}

template <bool Fp8>
void launch(const char* what, const void* x, ActType type, const float* divisor, const uint8_t* w, const float* wScale,
            void* y, int64_t m, int64_t n, int64_t k, Stream stream) {
    if (!decodeGemvTakes(x, w, m, k))
        throw KernelError(std::string(what) + ": needs 1 <= m <= " + std::to_string(kDecodeGemvMaxRows) +
                          ", k a positive multiple of 64 (m rows of codes in at most " +
                          std::to_string(kMaxCodeBytes) + " bytes of shared memory), 16-byte aligned x and w; got m = " +
                          std::to_string(m) +
                          ", k = " + std::to_string(k));
    if (n <= 0 || n > 0x7FFFFFF0 || int64_t(n) * k > (int64_t(1) << 40))
        throw KernelError(std::string(what) + ": n must be from 1 to 2^31 - 16 rows (and n·k at most 2^40), got " +
                          std::to_string(n));
    if (Fp8 && !fp8GemmSupported())
        throw KernelError(std::string(what) + ": the device has no FP8 tensor cores (needs compute capability 8.9+)");
    Params p{x, divisor, w, wScale, y, int(m), int(n), int(k), int(k / kChunk), int((n + 15) / 16), codeStrideOf(int(k))};
    const cudaStream_t s = detail::toStream(stream);
    const bool eight = batchChunks() == 8;
    if (type == ActType::Float16) {
        if (eight) launchWith<__half, Fp8, 8>(p, s);
        else launchWith<__half, Fp8, 4>(p, s);
    } else {
        if (eight) launchWith<__nv_bfloat16, Fp8, 8>(p, s);
        else launchWith<__nv_bfloat16, Fp8, 4>(p, s);
    }
}

} // namespace

bool decodeGemvTakes(const void* x, const void* w, int64_t m, int64_t k) {
    if (m < 1 || m > kDecodeGemvMaxRows || k <= 0 || k % kChunk || k > (int64_t(1) << 30)) return false;
    if (reinterpret_cast<uintptr_t>(x) % 16 || reinterpret_cast<uintptr_t>(w) % 16) return false;
    try {
        return m * int64_t(codeStrideOf(int(k))) <= codeBytesLimit();
    } catch (const KernelError&) {   // no device to ask
        cudaGetLastError();             // clear it: the caller takes the other path
        return false;
    }
}

void w8a8DecodeGemv(const void* x, ActType type, const float* divisor, const int8_t* w, const float* wScale, void* y,
                    int64_t m, int64_t n, int64_t k, Stream stream) {
    launch<false>("w8a8DecodeGemv", x, type, divisor, reinterpret_cast<const uint8_t*>(w), wScale, y, m, n, k, stream);
}

void fp8DecodeGemv(const void* x, ActType type, const uint8_t* w, const float* wScale, void* y, int64_t m, int64_t n,
                   int64_t k, Stream stream) {
    launch<true>("fp8DecodeGemv", x, type, nullptr, w, wScale, y, m, n, k, stream);
}

void decodeGemvSetBatch(int chunks) {
    if (chunks != 4 && chunks != 8) throw KernelError("decodeGemvSetBatch: 4 or 8 chunks, got " + std::to_string(chunks));
    gBatch.store(chunks);
}

} // namespace cwb::kernels
