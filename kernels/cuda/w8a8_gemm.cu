// W8A8: per-token int8 quantization kernel, cuBLASLt IMMA (int8 x int8 -> int32, "TN" layout), and an epilogue
// kernel applying the per-token and per-channel scales. Same float operations as cpu/w8a8_ref.cpp.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <string>

#include "cublaslt_objects.h"
#include "cuda_check.h"
#include "element_cast.cuh"
#include "cwb/kernels/w8a8_gemm.h"

namespace cwb::kernels {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

void checkLt(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw KernelError(std::string("W8a8Gemm: ") + what + " failed with cuBLAS status " + std::to_string(int(s)));
}

using detail::fromFloat;
using detail::toFloat;

// One block of 256 threads per row: max |x| by block reduction, then the codes.
template <typename T>
__global__ void quantizeRowsKernel(const T* __restrict__ x, int64_t cols, int8_t* __restrict__ codes,
                                   float* __restrict__ scales) {
    const T* row = x + blockIdx.x * cols;
    float amax = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) amax = fmaxf(amax, fabsf(toFloat(row[c])));
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    __shared__ float warpMax[8];
    if (threadIdx.x % 32 == 0) warpMax[threadIdx.x / 32] = amax;
    __syncthreads();
    amax = 0.0f;
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, warpMax[i]);
    const float scale = amax > 0.0f ? __fdiv_rn(amax, 127.0f) : 1.0f;
    if (threadIdx.x == 0) scales[blockIdx.x] = scale;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        codes[blockIdx.x * cols + c] = int8_t(fminf(fmaxf(rintf(__fdiv_rn(toFloat(row[c]), scale)), -127.0f), 127.0f));
}

template <typename T>
__global__ void scaleEpilogueKernel(const int32_t* __restrict__ acc, const float* __restrict__ xScale,
                                    const float* __restrict__ wScale, int64_t m, int64_t n, T* __restrict__ y) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= m * n) return;
    const int64_t row = i / n, col = i % n;
    y[i] = fromFloat<T>(__fmul_rn(__fmul_rn(float(acc[i]), xScale[row]), wScale[col]));
}

} // namespace

void quantizeRowsInt8(const void* x, ActType type, int64_t rows, int64_t cols, int8_t* codes, float* scales,
                      Stream stream) {
    if (rows <= 0 || cols <= 0) throw KernelError("quantizeRowsInt8: rows and cols must be positive");
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (type == ActType::Float16)
        quantizeRowsKernel<__half><<<unsigned(rows), 256, 0, s>>>(static_cast<const __half*>(x), cols, codes, scales);
    else
        quantizeRowsKernel<__nv_bfloat16><<<unsigned(rows), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(x), cols,
                                                                          codes, scales);
    CWB_CUDA_CHECK_LAUNCH("quantizeRowsInt8");
}

struct W8a8Gemm::State {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    int32_t* accumulators = nullptr;
    size_t accumulatorCount = 0;
};

W8a8Gemm::W8a8Gemm() : mState(std::make_unique<State>()) {
    checkLt(cublasLtCreate(&mState->handle), "cublasLtCreate");
    CWB_CUDA_CHECK(cudaMalloc(&mState->workspace, kWorkspaceBytes));
}

W8a8Gemm::~W8a8Gemm() {
    cudaFree(mState->accumulators);
    cudaFree(mState->workspace);
    cublasLtDestroy(mState->handle);
}

void W8a8Gemm::run(const int8_t* x, const float* xScale, const int8_t* w, const float* wScale, void* y,
                   ActType outType, int64_t m, int64_t n, int64_t k, Stream stream) {
    if (m <= 0 || n <= 0 || k <= 0) throw KernelError("W8a8Gemm: m, n and k must be positive");
    if (k % 16) throw KernelError("W8a8Gemm: k must be a multiple of 16 for int8 in cuBLASLt, got " + std::to_string(k));
    if (n % 4) throw KernelError("W8a8Gemm: n must be a multiple of 4 (int32 output rows), got " + std::to_string(n));
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (size_t(m * n) > mState->accumulatorCount) {
        CWB_CUDA_CHECK(cudaStreamSynchronize(s));  // the old buffer may still be in use on this stream
        cudaFree(mState->accumulators);
        mState->accumulators = nullptr;
        mState->accumulatorCount = 0;
        CWB_CUDA_CHECK(cudaMalloc(&mState->accumulators, size_t(m * n) * sizeof(int32_t)));
        mState->accumulatorCount = size_t(m * n);
    }
    detail::LtMatmulObjects lt;
    checkLt(cublasLtMatmulDescCreate(&lt.op, CUBLAS_COMPUTE_32I, CUDA_R_32I), "matmul descriptor");
    const cublasOperation_t transA = CUBLAS_OP_T, transB = CUBLAS_OP_N;
    checkLt(cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_TRANSA, &transA, sizeof transA), "TRANSA");
    checkLt(cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_TRANSB, &transB, sizeof transB), "TRANSB");
    // Column major: ACC^T [n, m] = (W [k, n])^T · X [k, m].
    checkLt(cublasLtMatrixLayoutCreate(&lt.a, CUDA_R_8I, uint64_t(k), uint64_t(n), k), "A layout");
    checkLt(cublasLtMatrixLayoutCreate(&lt.b, CUDA_R_8I, uint64_t(k), uint64_t(m), k), "B layout");
    checkLt(cublasLtMatrixLayoutCreate(&lt.c, CUDA_R_32I, uint64_t(n), uint64_t(m), n), "C layout");
    checkLt(cublasLtMatmulPreferenceCreate(&lt.pref), "preference");
    checkLt(cublasLtMatmulPreferenceSetAttribute(lt.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes,
                                                 sizeof kWorkspaceBytes), "workspace preference");
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    checkLt(cublasLtMatmulAlgoGetHeuristic(mState->handle, lt.op, lt.a, lt.b, lt.c, lt.c, lt.pref, 1, &heuristic, &found),
            "heuristic");
    if (found == 0) throw KernelError("W8a8Gemm: cuBLASLt has no int8 algorithm for this shape");
    const int32_t alpha = 1, beta = 0;
    checkLt(cublasLtMatmul(mState->handle, lt.op, &alpha, w, lt.a, x, lt.b, &beta, mState->accumulators, lt.c,
                           mState->accumulators, lt.c, &heuristic.algo, mState->workspace, kWorkspaceBytes, s),
            "cublasLtMatmul");
    const unsigned blocks = unsigned((m * n + 255) / 256);
    if (outType == ActType::Float16)
        scaleEpilogueKernel<__half><<<blocks, 256, 0, s>>>(mState->accumulators, xScale, wScale, m, n, static_cast<__half*>(y));
    else
        scaleEpilogueKernel<__nv_bfloat16><<<blocks, 256, 0, s>>>(mState->accumulators, xScale, wScale, m, n,
                                                                  static_cast<__nv_bfloat16*>(y));
    CWB_CUDA_CHECK_LAUNCH("W8a8Gemm (scales)");
}

} // namespace cwb::kernels
