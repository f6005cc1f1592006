#pragma once
// Round-to-nearest integer quantization of a [rows, cols] float32 weight, with the same rule as
// core/compress/quant_math.h (min/max per group, round half to even, levels in [0, 2^bits - 1]):
//   sym:  scale = 2·max|x| / (2^bits - 1), zero = 2^(bits-1)
//   asym: range [min(x,0), max(x,0)], scale = range / (2^bits - 1), zero = round(-min / scale)
//   an all-zero group gets the range [-1, 1]; level = clamp(round(x / scale) + zero, 0, 2^bits - 1).
// Levels are stored one per byte; packing into the GEMM layout is packed_weight.h's job.
#include <cstdint>

#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels {

struct RtnSpec {
    int bits = 4;             // 4 or 8 on the GPU; 2..8 on the CPU
    bool symmetric = true;
    int64_t groupSize = 128;  // > 0: groups of that many input columns (the last may be shorter); -1: per row
};

int64_t rtnGroupCount(int64_t cols, const RtnSpec& spec);

// CPU references. scales/zeros are [rows, groups].
void rtnQuantizeRef(const float* w, int64_t rows, int64_t cols, const RtnSpec& spec, uint8_t* levels, float* scales,
                    int32_t* zeros);
void rtnDequantizeRef(const uint8_t* levels, const float* scales, const int32_t* zeros, int64_t rows, int64_t cols,
                      const RtnSpec& spec, float* out);

// CUDA launchers; every pointer is device memory. Throw KernelError on bad arguments or a CUDA error.
void rtnQuantize(const float* w, int64_t rows, int64_t cols, const RtnSpec& spec, uint8_t* levels, float* scales,
                 int32_t* zeros, Stream stream);
// out: [rows, cols] in `outType` (fp16 or bf16 bits), (level - zero) · scale rounded once.
void rtnDequantize(const uint8_t* levels, const float* scales, const int32_t* zeros, int64_t rows, int64_t cols,
                   const RtnSpec& spec, void* out, ActType outType, Stream stream);

} // namespace cwb::kernels
