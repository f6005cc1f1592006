#pragma once
// Types shared by every cwb_kernels header. Nothing here needs the CUDA headers: streams travel as void*
// (a cudaStream_t; nullptr is the default stream), device buffers as raw pointers.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace cwb::kernels {

using Stream = void*;

// Activation (and output) element type of the weight-only GEMMs and of dequantized weights.
enum class ActType { Float16, BFloat16 };

inline const char* actTypeName(ActType t) { return t == ActType::Float16 ? "fp16" : "bf16"; }

// Bad arguments or a failed CUDA call; the message names the function and the problem.
class KernelError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Host-side fp16 / bf16 bit conversions (round to nearest even), so CPU references and tests need no CUDA headers.
uint16_t floatToHalfBits(float f);
float halfBitsToFloat(uint16_t h);
uint16_t floatToBf16Bits(float f);
float bf16BitsToFloat(uint16_t b);
inline uint16_t floatToActBits(float f, ActType t) { return t == ActType::Float16 ? floatToHalfBits(f) : floatToBf16Bits(f); }
inline float actBitsToFloat(uint16_t b, ActType t) { return t == ActType::Float16 ? halfBitsToFloat(b) : bf16BitsToFloat(b); }

} // namespace cwb::kernels
