#pragma once
// Internal to cwb_kernels: the part of the cuSPARSELt C API that the 2:4 GEMM calls, declared here from the
// documented API (docs.nvidia.com/cuda/cusparselt: "cuSPARSELt Data Types" and "cuSPARSELt Functions", v0.6 and
// later) so that the build needs no cusparseLt.h, and resolved at run time with dlopen / dlsym.
#include <cstddef>
#include <cstdint>
#include <string>

namespace cwb::kernels::lt {

using Status = int;   // cusparseStatus_t; CUSPARSE_STATUS_SUCCESS is 0
constexpr Status kSuccess = 0;

// The opaque structures are plain byte arrays the caller allocates; their documented size changed between releases
// (512, 1024, then 11024 bytes), so ours are larger than any of them and 16-byte aligned. The library only writes
// within its own size.
struct alignas(16) Opaque {
    uint8_t data[16384];
};
using Handle = Opaque;             // cusparseLtHandle_t
using MatDescriptor = Opaque;      // cusparseLtMatDescriptor_t
using MatmulDescriptor = Opaque;   // cusparseLtMatmulDescriptor_t
using AlgSelection = Opaque;       // cusparseLtMatmulAlgSelection_t
using Plan = Opaque;               // cusparseLtMatmulPlan_t

// Enumerators, passed as int (C enums).
constexpr int kOrderColumn = 1;          // cusparseOrder_t CUSPARSE_ORDER_COL
constexpr int kOrderRow = 2;             // CUSPARSE_ORDER_ROW
constexpr int kOpNonTranspose = 0;       // cusparseOperation_t CUSPARSE_OPERATION_NON_TRANSPOSE
constexpr int kOpTranspose = 1;          // CUSPARSE_OPERATION_TRANSPOSE
constexpr int kSparsity50Percent = 0;    // cusparseLtSparsity_t CUSPARSELT_SPARSITY_50_PERCENT (2:4 for 16-bit)
constexpr int kCompute32F = 2;           // cusparseComputeType CUSPARSE_COMPUTE_32F (0.6+: 32I = 0, 16F = 1, 32F = 2)
constexpr int kMatmulAlgDefault = 0;     // cusparseLtMatmulAlg_t CUSPARSELT_MATMUL_ALG_DEFAULT
// cusparseLtMatmulAlgAttribute_t (int32 values): the kernel configuration id, its largest valid value (read only),
// and the split-K factor.
constexpr int kAlgConfigId = 0;          // CUSPARSELT_MATMUL_ALG_CONFIG_ID
constexpr int kAlgConfigMaxId = 1;       // CUSPARSELT_MATMUL_ALG_CONFIG_MAX_ID
constexpr int kAlgSplitK = 3;            // CUSPARSELT_MATMUL_SPLIT_K
// cusparseLtGetVersion reports major * 1000 + minor * 100 + patch; the enumerators above hold from 0.6.0 on.
constexpr int kMinimumVersion = 600;

struct Api {
    std::string path;   // what dlopen loaded
    int version = 0;

    Status (*init)(Handle*) = nullptr;
    Status (*getVersion)(const Handle*, int*) = nullptr;
    const char* (*errorString)(Status) = nullptr;   // optional (cusparseLtGetErrorString)
    Status (*denseDescriptorInit)(const Handle*, MatDescriptor*, int64_t rows, int64_t cols, int64_t ld,
                                  uint32_t alignment, int valueType, int order) = nullptr;
    Status (*structuredDescriptorInit)(const Handle*, MatDescriptor*, int64_t rows, int64_t cols, int64_t ld,
                                       uint32_t alignment, int valueType, int order, int sparsity) = nullptr;
    Status (*matDescriptorDestroy)(const MatDescriptor*) = nullptr;
    Status (*matmulDescriptorInit)(const Handle*, MatmulDescriptor*, int opA, int opB, const MatDescriptor* a,
                                   const MatDescriptor* b, const MatDescriptor* c, const MatDescriptor* d,
                                   int computeType) = nullptr;
    Status (*algSelectionInit)(const Handle*, AlgSelection*, const MatmulDescriptor*, int alg) = nullptr;
    Status (*algSetAttribute)(const Handle*, AlgSelection*, int attribute, const void* data, size_t bytes) = nullptr;
    Status (*algGetAttribute)(const Handle*, const AlgSelection*, int attribute, void* data, size_t bytes) = nullptr;
    Status (*planInit)(const Handle*, Plan*, const MatmulDescriptor*, const AlgSelection*) = nullptr;
    Status (*planDestroy)(const Plan*) = nullptr;
    Status (*getWorkspace)(const Handle*, const Plan*, size_t*) = nullptr;
    Status (*compressedSize2)(const Handle*, const MatDescriptor* sparse, size_t* compressedBytes,
                              size_t* compressBufferBytes) = nullptr;
    Status (*compress2)(const Handle*, const MatDescriptor* sparse, int isSparseA, int op, const void* dense,
                        void* compressed, void* compressBuffer, void* stream) = nullptr;
    Status (*matmul)(const Handle*, const Plan*, const void* alpha, const void* a, const void* b, const void* beta,
                     const void* c, void* d, void* workspace, void** streams, int32_t streamCount) = nullptr;
};

// The loaded library, or nullptr with `reason` set; tried once per process. `reason` is also set (to what was
// loaded) on success.
const Api* api(std::string& reason);

// One handle per CUDA device, made on first use and kept for the life of the process.
const Handle* handleForCurrentDevice(const Api& api);

// "CUSPARSE_STATUS_INVALID_VALUE (3)" where the library names its codes, else "status 3".
std::string statusText(const Api& api, Status s);

} // namespace cwb::kernels::lt
