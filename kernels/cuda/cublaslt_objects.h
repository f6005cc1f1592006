#pragma once
// Internal: the cuBLASLt objects of one matmul call (descriptor, three layouts, preference), destroyed on every way
// out of the call.
#include <cublasLt.h>

namespace cwb::kernels::detail {

struct LtMatmulObjects {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;

    LtMatmulObjects() = default;
    LtMatmulObjects(const LtMatmulObjects&) = delete;
    LtMatmulObjects& operator=(const LtMatmulObjects&) = delete;
    ~LtMatmulObjects() {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

} // namespace cwb::kernels::detail
