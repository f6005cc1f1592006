#pragma once
// The dense GEMV kernel of kernels/ (dense_gemv.h) on LibTorch tensors: linear layers of decode, where x has a few
// rows and cuBLAS reads the weight far below the memory bandwidth. One launch on LibTorch's current stream, no
// synchronisation, so a CUDA graph captures it. Plain C++ (no CUDA headers); in a build without the kernels
// denseGemvApplies() is false and denseGemvLinear throws cwb::Error.
#include <cstdint>
#include <string>

#include <ATen/ATen.h>

namespace cwb {

// Rows of x up to which the runtime uses the GEMV (RuntimeOptions::denseGemv); more rows go to cuBLAS. On the H200
// (bench_decode_ops, docs/performance.md "Dense GEMV for decode") the kernel beat cuBLAS at M = 1 on every Llama-2-7B
// shape (1.04-1.47x) but not at M = 4 (0.81-0.91x) or 8, so only single rows take it.
constexpr int64_t kDenseGemvRuntimeRows = 1;

// True when denseGemvLinear computes linear(x, weight) here: a build with the kernels; x and weight fp16 or bf16 of
// one type on one CUDA device; weight a contiguous matrix [N, K] with x [..., K]; at most maxRows rows of x
// (numel / K); nothing that needs a gradient.
bool denseGemvApplies(const at::Tensor& x, const at::Tensor& weight, int64_t maxRows);

// x Wᵀ + bias + residual in one kernel: bias [N] (any float type; undefined: none), residual [..., N] shaped as the
// result (undefined: none). Returns [..., N] in x's type. Call only where denseGemvApplies(x, weight, ...) holds.
at::Tensor denseGemvLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& residual);

// RMSNorm(x) Wᵀ + bias in one kernel: x is the raw residual stream, normalised per row with normWeight [K] and eps
// inside the product (kernels::denseGemvRmsNorm: the normalised x is not rounded to x's type, as fusedRmsNorm rounds
// it). normWeight should be in x's type already: another type is converted at every call (one more kernel). Returns
// [..., N] in x's type. Call only where denseGemvApplies(x, weight, ...) holds.
at::Tensor denseGemvRmsNormLinear(const at::Tensor& x, const at::Tensor& normWeight, double eps, const at::Tensor& weight,
                                  const at::Tensor& bias);

// silu(gate) * up of the fused [gate; up] projection in one kernel (kernels::denseGemvSwiGlu): gateUpWeight [2F, K],
// the F gate rows first; bias [2F] or undefined; normWeight ([K]) and eps normalise x as denseGemvRmsNormLinear
// does, undefined: x is used as it is. Returns [..., F] in x's type. Call only where denseGemvApplies(x,
// gateUpWeight, ...) holds.
at::Tensor denseGemvSwiGluLinear(const at::Tensor& x, const at::Tensor& normWeight, double eps,
                                 const at::Tensor& gateUpWeight, const at::Tensor& bias);

// A dense 2:4 weight [N, K] in the GEMV's packed rows (kernels::packSparse24Rows' layout), on the weight's device:
// decode then reads 1.125 K bytes per row instead of 2 K.
struct Sparse24Rows {
    at::Tensor values;   // [N, K/2] in the weight's type
    at::Tensor meta;     // [N, K/16] int16: 4 bits of positions per group of 4 columns
    int64_t rows() const { return values.size(0); }
    int64_t cols() const { return values.size(1) * 2; }
    size_t bytes() const { return values.nbytes() + meta.nbytes(); }
};

// Packs a 2:4 weight (fp16 / bf16, [N, K] on a CUDA device) with tensor operations on its device, a slice of rows at
// a time. Throws cwb::Error naming `what` when K is not a multiple of 16, the type or device does not fit, or a group
// of 4 columns holds more than two non-zeros.
Sparse24Rows packSparse24Rows(const at::Tensor& weight, const std::string& what);
// The dense weight again ([N, K], zeros where nothing is stored).
at::Tensor unpackSparse24Rows(const Sparse24Rows& packed);

// As denseGemvApplies, for a packed 2:4 weight.
bool sparse24GemvApplies(const at::Tensor& x, const Sparse24Rows& weight, int64_t maxRows);
// denseGemvLinear, denseGemvRmsNormLinear and denseGemvSwiGluLinear on a packed 2:4 weight (kernels::sparse24Gemv,
// ...RmsNorm, ...SwiGlu). Call only where sparse24GemvApplies(x, weight, ...) holds.
at::Tensor sparse24GemvLinear(const at::Tensor& x, const Sparse24Rows& weight, const at::Tensor& bias,
                              const at::Tensor& residual);
at::Tensor sparse24GemvRmsNormLinear(const at::Tensor& x, const at::Tensor& normWeight, double eps,
                                     const Sparse24Rows& weight, const at::Tensor& bias);
at::Tensor sparse24GemvSwiGluLinear(const at::Tensor& x, const at::Tensor& normWeight, double eps,
                                    const Sparse24Rows& gateUpWeight, const at::Tensor& bias);
// Launches of the three in this process so far.
int64_t sparse24GemvLaunchCount();

// Launches of the GEMV with RMSNorm / with SwiGLU in this process so far (tests check that RuntimeOptions::
// fusedNormGemv and fusedSwiGluGemv acted).
int64_t denseGemvRmsNormLaunchCount();
int64_t denseGemvSwiGluLaunchCount();

} // namespace cwb
