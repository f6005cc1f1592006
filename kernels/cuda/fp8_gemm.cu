// FP8 E4M3 GEMM through cuBLASLt: the "TN" layout FP8 needs (W as the transposed A operand, X as B, column major),
// per-tensor scales passed as device pointers, fp32 accumulation with the default (non-fast) accumulation.
// Per-token x per-channel scales: cuBLASLt's outer-vector scale mode where it runs, else fp32 sums + epilogue.
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_runtime.h>

#include <string>

#include "cublaslt_objects.h"
#include "cuda_check.h"
#include "cwb/kernels/act_quant.h"
#include "cwb/kernels/device_info.h"
#include "cwb/kernels/fp8_gemm.h"

namespace cwb::kernels {

namespace {
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

void checkLt(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw KernelError(std::string("Fp8Gemm: ") + what + " failed with cuBLAS status " + std::to_string(int(s)));
}

enum class Scales { PerTensor, OuterVector };

// One cuBLASLt FP8 product D^T [n, m] = (W [k, n] col-major)^T · (X [k, m] col-major), A scale W's, B scale X's.
// Returns false, having launched nothing, when cuBLASLt offers no algorithm (or, for outer-vector scales, does not
// know the mode); throws on other failures.
bool launchFp8(cublasLtHandle_t handle, void* workspace, const uint8_t* x, const float* xScale, const uint8_t* w,
               const float* wScale, void* y, cudaDataType_t outDt, Scales scales, int64_t m, int64_t n, int64_t k,
               cudaStream_t stream) {
    detail::LtMatmulObjects lt;
    bool launched = false;
    checkLt(cublasLtMatmulDescCreate(&lt.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
    const cublasOperation_t transA = CUBLAS_OP_T, transB = CUBLAS_OP_N;
    checkLt(cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_TRANSA, &transA, sizeof transA), "TRANSA");
    checkLt(cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_TRANSB, &transB, sizeof transB), "TRANSB");
    checkLt(cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &wScale, sizeof wScale), "A scale");
    checkLt(cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xScale, sizeof xScale), "B scale");
    bool modeKnown = scales == Scales::PerTensor;
#if CUBLAS_VERSION >= 120900
    if (scales == Scales::OuterVector) {   // A's vector runs along D's rows (n), B's along its columns (m)
        const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        modeKnown = cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode) ==
                        CUBLAS_STATUS_SUCCESS &&
                    cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode) ==
                        CUBLAS_STATUS_SUCCESS;
    }
#endif
    if (modeKnown) {
        checkLt(cublasLtMatrixLayoutCreate(&lt.a, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(n), k), "A layout");
        checkLt(cublasLtMatrixLayoutCreate(&lt.b, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(m), k), "B layout");
        checkLt(cublasLtMatrixLayoutCreate(&lt.c, outDt, uint64_t(n), uint64_t(m), n), "C layout");
        checkLt(cublasLtMatmulPreferenceCreate(&lt.pref), "preference");
        checkLt(cublasLtMatmulPreferenceSetAttribute(lt.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes,
                                                     sizeof kWorkspaceBytes), "workspace preference");
        cublasLtMatmulHeuristicResult_t heuristic{};
        int found = 0;
        const cublasStatus_t h =
            cublasLtMatmulAlgoGetHeuristic(handle, lt.op, lt.a, lt.b, lt.c, lt.c, lt.pref, 1, &heuristic, &found);
        if (h == CUBLAS_STATUS_SUCCESS && found > 0) {
            const float alpha = 1.0f, beta = 0.0f;
            const cublasStatus_t s = cublasLtMatmul(handle, lt.op, &alpha, w, lt.a, x, lt.b, &beta, y, lt.c, y, lt.c,
                                                    &heuristic.algo, workspace, kWorkspaceBytes, stream);
            if (s == CUBLAS_STATUS_SUCCESS) launched = true;
            else if (scales == Scales::PerTensor || s != CUBLAS_STATUS_NOT_SUPPORTED)
                checkLt(s, ("cublasLtMatmul " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k)).c_str());
        } else if (scales == Scales::PerTensor && h != CUBLAS_STATUS_SUCCESS) {
            checkLt(h, "heuristic");
        }
    }
    return launched;
}

void checkArguments(const float* xScale, const float* wScale, int64_t m, int64_t n, int64_t k) {
    if (m <= 0 || n <= 0 || k <= 0) throw KernelError("Fp8Gemm: m, n and k must be positive");
    if (k % 16) throw KernelError("Fp8Gemm: k must be a multiple of 16 for FP8 in cuBLASLt, got " + std::to_string(k));
    if (reinterpret_cast<uintptr_t>(xScale) % 16 || reinterpret_cast<uintptr_t>(wScale) % 16)
        throw KernelError("Fp8Gemm: the scale pointers must be 16-byte aligned");
    if (!fp8GemmSupported()) throw KernelError("Fp8Gemm: the device has no FP8 tensor cores (needs compute capability 8.9+)");
}

} // namespace

bool fp8GemmSupported() { return deviceCapability() >= 89; }

struct Fp8Gemm::State {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    float* ones = nullptr;   // unit per-tensor scales for the fp32 product (device, 16-byte aligned)
    // Off by default: on the H200 (CUDA 13.0) the outer-vector algorithms took 21-41 us per 7B-shaped layer at M = 1..16
    // against 12-24 us for the fp32 product + epilogue (docs/performance.md, "Per-token activation quantization").
    bool outerVectorAllowed = false;
    int outerVector[2] = {0, 0};   // per output type (fp16, bf16): 0 not tried, 1 runs, -1 not offered
};

Fp8Gemm::Fp8Gemm() : mState(std::make_unique<State>()) {
    checkLt(cublasLtCreate(&mState->handle), "cublasLtCreate");
    CWB_CUDA_CHECK(cudaMalloc(&mState->workspace, kWorkspaceBytes));
    const float ones[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    CWB_CUDA_CHECK(cudaMalloc(&mState->ones, sizeof ones));
    CWB_CUDA_CHECK(cudaMemcpy(mState->ones, ones, sizeof ones, cudaMemcpyHostToDevice));
}

Fp8Gemm::~Fp8Gemm() {
    cudaFree(mState->ones);
    cudaFree(mState->workspace);
    cublasLtDestroy(mState->handle);
}

void Fp8Gemm::run(const uint8_t* x, const float* xScale, const uint8_t* w, const float* wScale, void* y,
                  ActType outType, int64_t m, int64_t n, int64_t k, Stream stream) {
    checkArguments(xScale, wScale, m, n, k);
    const cudaDataType_t outDt = outType == ActType::Float16 ? CUDA_R_16F : CUDA_R_16BF;
    if (!launchFp8(mState->handle, mState->workspace, x, xScale, w, wScale, y, outDt, Scales::PerTensor, m, n, k,
                   detail::toStream(stream)))
        throw KernelError("Fp8Gemm: cuBLASLt has no FP8 algorithm for this shape");
}

void Fp8Gemm::runRowwise(const uint8_t* x, const float* xScale, const uint8_t* w, const float* wScale, void* y,
                         float* sums, ActType outType, int64_t m, int64_t n, int64_t k, Stream stream) {
    checkArguments(xScale, wScale, m, n, k);
    const cudaStream_t s = detail::toStream(stream);
    int& outer = mState->outerVector[outType == ActType::Float16 ? 0 : 1];
    if (mState->outerVectorAllowed && outer >= 0) {
        const cudaDataType_t outDt = outType == ActType::Float16 ? CUDA_R_16F : CUDA_R_16BF;
        if (launchFp8(mState->handle, mState->workspace, x, xScale, w, wScale, y, outDt, Scales::OuterVector, m, n, k, s)) {
            outer = 1;
            return;
        }
        outer = -1;
    }
    if (!sums) throw KernelError("Fp8Gemm: the scale epilogue needs an fp32 buffer for the sums");
    if (!launchFp8(mState->handle, mState->workspace, x, mState->ones, w, mState->ones, sums, CUDA_R_32F,
                   Scales::PerTensor, m, n, k, s))
        throw KernelError("Fp8Gemm: cuBLASLt has no FP8 algorithm with fp32 output for this shape");
    scaleRowsCols(sums, xScale, wScale, m, n, outType, y, stream);
}

void Fp8Gemm::setOuterVectorAllowed(bool allowed) { mState->outerVectorAllowed = allowed; }

const char* Fp8Gemm::rowwisePath(ActType outType) const {
    const int outer = mState->outerVector[outType == ActType::Float16 ? 0 : 1];
    if (mState->outerVectorAllowed && outer > 0) return "cuBLASLt outer-vector scales";
    if (!mState->outerVectorAllowed || outer < 0) return "fp32 product + scale epilogue";
    return "not run yet";
}

} // namespace cwb::kernels
