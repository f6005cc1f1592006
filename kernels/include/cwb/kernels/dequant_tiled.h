#pragma once
// Dense weight from the tiled16x64 layout (packed_weight.h), on the device. Large batches (prefill) multiply by it
// with cuBLAS: past a few dozen tokens that beats the W4A16 / W8A16 kernels, whose work per weight grows with m.
#include "cwb/kernels/kernel_types.h"
#include "cwb/kernels/wxa16_gemm.h"

namespace cwb::kernels {

// out[rows, cols] (row-major, the weight's activation type, the source column order: act-order is undone)
// = (level - zero) · scale rounded to the activation type, the values of dequantizeTiledRef(w, true).
// `out` is device memory of rows · cols · 2 bytes, 16-byte aligned.
void dequantizeTiled(const DeviceTiledWeight& w, void* out, Stream stream);

} // namespace cwb::kernels
