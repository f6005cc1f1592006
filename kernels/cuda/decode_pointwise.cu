// The decode step's small fused kernels: RMSNorm (with the residual add), RoPE plus the KV-cache write, and
// SiLU(gate) * up. Each is one launch whose math is fp32; see decode_ops.h.
#include <algorithm>
#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "cwb/kernels/decode_ops.h"
#include "decode_common.cuh"
#include "dependent_launch.cuh"

namespace cwb::kernels {

namespace {

using namespace decode;

constexpr int kNormThreads = 512;

// One block per row. Pass 1 forms the (rounded) input and its sum of squares; pass 2 reads it back and scales.
template <typename T>
__global__ void rmsNormKernel(const T* x, const T* residual, T* sum,   // sum may alias x or residual
                              const float* __restrict__ weight, T* __restrict__ y, int64_t dim, float eps) {
    waitForPredecessor();
    const int64_t row = blockIdx.x;
    const T* in = x + row * dim;
    float squares = 0.0f;
    if (residual) {
        T* out = sum + row * dim;
        for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
            const float v = toFloat(fromFloat<T>(toFloat(in[i]) + toFloat(residual[row * dim + i])));
            out[i] = fromFloat<T>(v);
            squares += v * v;
        }
        in = out;   // each thread reads back only what it wrote
    } else {
        for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
            const float v = toFloat(in[i]);
            squares += v * v;
        }
    }
    const float inverse = rsqrtf(blockSum(squares) / float(dim) + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
        y[row * dim + i] = fromFloat<T>(toFloat(in[i]) * inverse * weight[i]);
}

// One thread per element of [q heads | k heads | v heads] of one sequence (blockIdx.y).
template <typename T>
__global__ void ropeKvWriteKernel(const T* __restrict__ q, int64_t qStride, const T* __restrict__ k, int64_t kStride,
                                  const T* __restrict__ v, int64_t vStride, const float* __restrict__ table,
                                  int64_t tablePositions, bool adjacentPairs, const int64_t* __restrict__ position,
                                  T* __restrict__ qOut, T* __restrict__ keys, T* __restrict__ values, int64_t heads,
                                  int64_t kvHeads, int64_t headDim, int64_t capacity) {
    waitForPredecessor();
    const int64_t b = blockIdx.y;
    const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t qElems = heads * headDim, kElems = kvHeads * headDim;
    if (e >= qElems + 2 * kElems) return;
    const int64_t p = *position;
    if (p < 0 || p >= capacity || p >= tablePositions) return;
    if (e >= qElems + kElems) {   // value: copied into the cache
        const int64_t j = e - qElems - kElems, h = j / headDim, i = j % headDim;
        values[((b * kvHeads + h) * capacity + p) * headDim + i] = v[b * vStride + j];
        return;
    }
    const bool isQuery = e < qElems;
    const int64_t j = isQuery ? e : e - qElems, i = j % headDim;
    const T* row = isQuery ? q + b * qStride : k + b * kStride;
    const T rotated = rotatedElement(row + (j - i), i, headDim, adjacentPairs, table + p * 2 * headDim);
    if (isQuery) {
        qOut[b * qElems + j] = rotated;
    } else {
        const int64_t h = j / headDim;
        keys[((b * kvHeads + h) * capacity + p) * headDim + i] = rotated;
    }
}

template <typename T>
__global__ void siluMulKernel(const T* __restrict__ gate, int64_t gateStride, const T* __restrict__ up,
                              int64_t upStride, T* __restrict__ out, int64_t width) {
    waitForPredecessor();
    const int64_t r = blockIdx.y;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < width; i += int64_t(gridDim.x) * blockDim.x) {
        const float g = toFloat(gate[r * gateStride + i]);
        out[r * width + i] = fromFloat<T>(g / (1.0f + __expf(-g)) * toFloat(up[r * upStride + i]));
    }
}

void require(bool ok, const char* function, const std::string& what) {
    if (!ok) throw KernelError(std::string(function) + ": " + what);
}

} // namespace

void rmsNorm(const void* x, const void* residual, void* sum, const float* weight, void* y, int64_t rows, int64_t dim,
             float eps, ActType type, Stream stream) {
    require(rows > 0 && dim > 0 && x && weight && y, "rmsNorm", "empty input or null pointer");
    require(!residual || sum, "rmsNorm", "a residual needs a sum output");
    dispatch(type, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        CWB_CUDA_CHECK(launchDependent(rmsNormKernel<T>, dim3(unsigned(rows)), dim3(kNormThreads), 0,
                                       detail::toStream(stream), static_cast<const T*>(x), static_cast<const T*>(residual),
                                       static_cast<T*>(sum), weight, static_cast<T*>(y), dim, eps));
    });
    CWB_CUDA_CHECK_LAUNCH("rmsNorm");
}

void ropeKvWrite(const void* q, int64_t qStride, const void* k, int64_t kStride, const void* v, int64_t vStride,
                 const float* ropeTable, int64_t tablePositions, RopeLayout layout, const int64_t* position,
                 void* qOut, void* keyCache, void* valueCache, const DecodeAttentionShape& s, ActType type,
                 Stream stream) {
    require(s.batch > 0 && s.heads > 0 && s.kvHeads > 0 && s.headDim > 0 && s.headDim % 2 == 0 && s.capacity > 0,
            "ropeKvWrite", "bad shape (head dimension must be even)");
    require(q && k && v && ropeTable && position && qOut && keyCache && valueCache, "ropeKvWrite", "null pointer");
    const int64_t elements = (s.heads + 2 * s.kvHeads) * s.headDim;
    const dim3 grid(unsigned((elements + 255) / 256), unsigned(s.batch));
    dispatch(type, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        CWB_CUDA_CHECK(launchDependent(
            ropeKvWriteKernel<T>, grid, dim3(256), 0, detail::toStream(stream), static_cast<const T*>(q), qStride,
            static_cast<const T*>(k), kStride, static_cast<const T*>(v), vStride, ropeTable, tablePositions,
            layout == RopeLayout::AdjacentPairs, position, static_cast<T*>(qOut), static_cast<T*>(keyCache),
            static_cast<T*>(valueCache), s.heads, s.kvHeads, s.headDim, s.capacity));
    });
    CWB_CUDA_CHECK_LAUNCH("ropeKvWrite");
}

void siluMul(const void* gate, int64_t gateStride, const void* up, int64_t upStride, void* out, int64_t rows,
             int64_t width, ActType type, Stream stream) {
    require(rows > 0 && width > 0 && gate && up && out, "siluMul", "empty input or null pointer");
    const dim3 grid(unsigned(std::min<int64_t>((width + 255) / 256, 1024)), unsigned(rows));
    dispatch(type, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        CWB_CUDA_CHECK(launchDependent(siluMulKernel<T>, grid, dim3(256), 0, detail::toStream(stream),
                                       static_cast<const T*>(gate), gateStride, static_cast<const T*>(up), upStride,
                                       static_cast<T*>(out), width));
    });
    CWB_CUDA_CHECK_LAUNCH("siluMul");
}

} // namespace cwb::kernels
