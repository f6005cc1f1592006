#pragma once
// W8A8 int8 GEMM (SmoothQuant-style): activations quantized per token, weights per output channel, both symmetric
// int8 (scale = max|v| / 127, codes in [-127, 127]). Y[m, n] = (Xq[m, k] · Wq[n, k]^T as exact int32 sums, cuBLASLt
// IMMA) · xScale[m] · wScale[n], rounded once to fp16 / bf16. k must be a multiple of 16 (cuBLASLt int8 rule).
#include <cstdint>
#include <memory>

#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels {

// CPU references. Rows of v [rows, cols] -> codes [rows, cols] and scales [rows]; an all-zero row gets scale 1.
void quantizeRowsInt8Ref(const float* v, int64_t rows, int64_t cols, int8_t* codes, float* scales);
// y[m, n] = float(sum_k x[m, k] · w[n, k]) · xScale[m] · wScale[n] (the same float operations as the GPU epilogue).
void w8a8GemmRef(const int8_t* x, const float* xScale, const int8_t* w, const float* wScale, int64_t m, int64_t n,
                 int64_t k, float* y);

// GPU: per-token quantization of x [rows, cols] (fp16 / bf16) to codes and scales (device pointers).
void quantizeRowsInt8(const void* x, ActType type, int64_t rows, int64_t cols, int8_t* codes, float* scales,
                      Stream stream);

// Holds a cuBLASLt handle, its workspace and an int32 accumulator buffer that grows as needed; one per stream.
class W8a8Gemm {
public:
    W8a8Gemm();
    ~W8a8Gemm();
    W8a8Gemm(const W8a8Gemm&) = delete;
    W8a8Gemm& operator=(const W8a8Gemm&) = delete;

    // Device pointers: x [m, k], w [n, k] int8 codes; xScale [m], wScale [n]; y [m, n] in outType.
    void run(const int8_t* x, const float* xScale, const int8_t* w, const float* wScale, void* y, ActType outType,
             int64_t m, int64_t n, int64_t k, Stream stream);

private:
    struct State;
    std::unique_ptr<State> mState;
};

} // namespace cwb::kernels
