#pragma once
// FP8 E4M3 GEMM through cuBLASLt (Hopper and newer: compute capability 8.9+): Y[m, n] = (X[m, k] · W[n, k]^T)
// · xScale · wScale, with per-tensor scales, fp32 accumulation and fp16 or bf16 output. Codes are E4M3 bytes
// (bias 7, max ±448, no infinities; 0x7F/0xFF are NaN). k must be a multiple of 16 (a cuBLASLt FP8 rule), m and n
// any size. The CPU side (codes, reference) needs no CUDA.
#include <cstdint>
#include <memory>
#include <vector>

#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels {

uint8_t floatToE4M3(float f);  // round to nearest even, saturating to ±448
float e4m3ToFloat(uint8_t code);

// Per-tensor quantization on the CPU: scale = max|v| / 448 (1 for an all-zero tensor), codes of v / scale.
float quantizeE4M3Ref(const float* v, size_t count, uint8_t* codes);

// y[m, n] = sum_k dec(x[m, k]) · dec(w[n, k]) · xScale · wScale, in double, returned as float.
void fp8GemmRef(const uint8_t* x, float xScale, const uint8_t* w, float wScale, int64_t m, int64_t n, int64_t k,
                float* y);

// True when the current device can run FP8 matrix products (compute capability 8.9 or newer).
bool fp8GemmSupported();

// Holds a cuBLASLt handle and its workspace; one per stream or thread.
class Fp8Gemm {
public:
    Fp8Gemm();
    ~Fp8Gemm();
    Fp8Gemm(const Fp8Gemm&) = delete;
    Fp8Gemm& operator=(const Fp8Gemm&) = delete;

    // Device pointers: x [m, k] and w [n, k] E4M3 codes, xScale and wScale one float each (16-byte aligned),
    // y [m, n] in outType.
    void run(const uint8_t* x, const float* xScale, const uint8_t* w, const float* wScale, void* y, ActType outType,
             int64_t m, int64_t n, int64_t k, Stream stream);

    // Per-token xScale [m] and per-channel wScale [n] (device floats): y[i, j] = (X · W^T)[i, j] · xScale[i] · wScale[j].
    // By default an fp32 product into `sums` [m, n] (device, the caller's) and the scaleRowsCols epilogue (act_quant.h);
    // with setOuterVectorAllowed(true), cuBLASLt's outer-vector scale mode (cuBLAS 12.9+) where the library runs it for
    // this output type (found on the first call and remembered; the epilogue otherwise). No allocation and no
    // synchronisation either way.
    void runRowwise(const uint8_t* x, const float* xScale, const uint8_t* w, const float* wScale, void* y, float* sums,
                    ActType outType, int64_t m, int64_t n, int64_t k, Stream stream);
    // Off by default: slower than the epilogue on the H200 at decode and prefill sizes (measured, see the .cu).
    void setOuterVectorAllowed(bool allowed);
    // "cuBLASLt outer-vector scales", "fp32 product + scale epilogue", or "not run yet" for this output type.
    const char* rowwisePath(ActType outType) const;

private:
    struct State;
    std::unique_ptr<State> mState;
};

} // namespace cwb::kernels
