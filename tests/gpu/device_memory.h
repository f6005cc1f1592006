// Helpers shared by the kernel tests: copies between host vectors and device buffers (also as fp16 / bf16 bits), and
// the skip rule.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "../kernels/kernel_check.h"
#include "cwb/kernels/device_info.h"
#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels::testing {

template <typename V>
V* toDevice(const std::vector<V>& h) {
    V* d = nullptr;
    if (cudaMalloc(&d, h.size() * sizeof(V)) != cudaSuccess) throw KernelError("cudaMalloc failed");
    if (cudaMemcpy(d, h.data(), h.size() * sizeof(V), cudaMemcpyHostToDevice) != cudaSuccess) throw KernelError("copy to the device failed");
    return d;
}

template <typename V>
std::vector<V> toHost(const V* d, size_t n) {
    std::vector<V> h(n);
    if (cudaMemcpy(h.data(), d, n * sizeof(V), cudaMemcpyDeviceToHost) != cudaSuccess) throw KernelError("copy back failed");
    return h;
}

// Gaussian values as the activation type holds them (rounded to it).
inline std::vector<float> roundedGaussian(size_t n, uint32_t seed, ActType t, float sigma = 1.0f) {
    std::vector<float> v = gaussian(n, seed, sigma);
    for (float& x : v) x = actBitsToFloat(floatToActBits(x, t), t);
    return v;
}

// Floats to a device buffer of fp16 / bf16 bits, and back.
inline uint16_t* upload(const std::vector<float>& v, ActType t) {
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = floatToActBits(v[i], t);
    return toDevice(bits);
}

inline std::vector<float> download(const uint16_t* d, size_t n, ActType t) {
    std::vector<uint16_t> bits = toHost(d, n);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = actBitsToFloat(bits[i], t);
    return v;
}

// An upper-triangular stand-in for GPTQ's / SparseGPT's inverse-Hessian factor [cols, cols]: a positive diagonal and
// small off-diagonal terms, so the errors feed forward the way they do in those methods without growing.
inline std::vector<float> upperFactor(int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> diag(0.3f, 1.5f);
    std::normal_distribution<float> off(0.0f, 0.4f / std::sqrt(float(cols)));
    std::vector<float> u(size_t(cols * cols), 0.0f);
    for (int64_t i = 0; i < cols; ++i) {
        u[size_t(i * cols + i)] = diag(rng);
        for (int64_t j = i + 1; j < cols; ++j) u[size_t(i * cols + j)] = off(rng);
    }
    return u;
}

// How many elements of a and b differ in their bytes (bit-exact comparison, NaN patterns included).
template <typename V>
size_t differences(const std::vector<V>& a, const std::vector<V>& b) {
    size_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(V)) != 0;
    return n;
}

// True (after saying so) when no CUDA device is visible: the test then exits 77, which CTest counts as skipped.
// Otherwise prints the device and the capability the kernels dispatch for (lower under CWB_CUDA_CAPABILITY).
inline bool noCudaDevice() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("SKIP: no CUDA device\n");
        return true;
    }
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
        const int dispatch = deviceCapability(), compiled = compiledCapability();
        const char* why = dispatch == 10 * prop.major + prop.minor ? ""
                          : deviceCapabilityCeiling() == dispatch ? " (CWB_CUDA_CAPABILITY)"
                                                                  : " (the code this build holds)";
        std::printf("device: %s (compute capability %d.%d); code compiled for %d.%d; kernels dispatch for %d.%d%s\n",
                    prop.name, prop.major, prop.minor, compiled / 10, compiled % 10, dispatch / 10, dispatch % 10, why);
    }
    return false;
}

} // namespace cwb::kernels::testing
