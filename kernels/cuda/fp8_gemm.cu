// FP8 E4M3 GEMM through cuBLASLt: the "TN" layout FP8 needs (W as the transposed A operand, X as B, column major),
// per-tensor scales passed as device pointers, fp32 accumulation with the default (non-fast) accumulation.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "cuda_check.h"
#include "cwb/kernels/fp8_gemm.h"

namespace cwb::kernels {

namespace {
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

void checkLt(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw KernelError(std::string("Fp8Gemm: ") + what + " failed with cuBLAS status " + std::to_string(int(s)));
}
} // namespace

bool fp8GemmSupported() {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    return major > 8 || (major == 8 && minor >= 9);
}

struct Fp8Gemm::State {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
};

Fp8Gemm::Fp8Gemm() : mState(std::make_unique<State>()) {
    checkLt(cublasLtCreate(&mState->handle), "cublasLtCreate");
    CWB_CUDA_CHECK(cudaMalloc(&mState->workspace, kWorkspaceBytes));
}

Fp8Gemm::~Fp8Gemm() {
    cudaFree(mState->workspace);
    cublasLtDestroy(mState->handle);
}

void Fp8Gemm::run(const uint8_t* x, const float* xScale, const uint8_t* w, const float* wScale, void* y,
                  ActType outType, int64_t m, int64_t n, int64_t k, Stream stream) {
    if (m <= 0 || n <= 0 || k <= 0) throw KernelError("Fp8Gemm: m, n and k must be positive");
    if (k % 16) throw KernelError("Fp8Gemm: k must be a multiple of 16 for FP8 in cuBLASLt, got " + std::to_string(k));
    if (reinterpret_cast<uintptr_t>(xScale) % 16 || reinterpret_cast<uintptr_t>(wScale) % 16)
        throw KernelError("Fp8Gemm: the scale pointers must be 16-byte aligned");
    if (!fp8GemmSupported()) throw KernelError("Fp8Gemm: the device has no FP8 tensor cores (needs compute capability 8.9+)");
    const cudaDataType_t outDt = outType == ActType::Float16 ? CUDA_R_16F : CUDA_R_16BF;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    auto release = [&] {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    };
    try {
        checkLt(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
        const cublasOperation_t transA = CUBLAS_OP_T, transB = CUBLAS_OP_N;
        checkLt(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transA, sizeof transA), "TRANSA");
        checkLt(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &transB, sizeof transB), "TRANSB");
        // Column major: D^T [n, m] = (W [k, n] col-major)^T · (X [k, m] col-major); A scale is W's, B scale is X's.
        checkLt(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &wScale, sizeof wScale), "A scale");
        checkLt(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xScale, sizeof xScale), "B scale");
        checkLt(cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(n), k), "A layout");
        checkLt(cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(m), k), "B layout");
        checkLt(cublasLtMatrixLayoutCreate(&c, outDt, uint64_t(n), uint64_t(m), n), "C layout");
        checkLt(cublasLtMatmulPreferenceCreate(&pref), "preference");
        checkLt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes,
                                                     sizeof kWorkspaceBytes), "workspace preference");
        cublasLtMatmulHeuristicResult_t heuristic{};
        int found = 0;
        checkLt(cublasLtMatmulAlgoGetHeuristic(mState->handle, op, a, b, c, c, pref, 1, &heuristic, &found), "heuristic");
        if (found == 0) throw KernelError("Fp8Gemm: cuBLASLt has no FP8 algorithm for this shape");
        const float alpha = 1.0f, beta = 0.0f;
        checkLt(cublasLtMatmul(mState->handle, op, &alpha, w, a, x, b, &beta, y, c, y, c, &heuristic.algo,
                               mState->workspace, kWorkspaceBytes, static_cast<cudaStream_t>(stream)),
                ("cublasLtMatmul " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k)).c_str());
    } catch (...) {
        release();
        throw;
    }
    release();
}

} // namespace cwb::kernels
