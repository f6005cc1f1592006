// GPU test (label `gpu`, exit 77 without a GPU): the CUDA round-to-nearest quantize and dequantize against the CPU
// reference. The arithmetic is the same IEEE float, so levels, scales and zeros must agree exactly and the
// dequantized values bit for bit after rounding to fp16 / bf16.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "../kernels/kernel_check.h"
#include "device_memory.h"
#include "cwb/kernels/rtn_quant.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

void runCase(int bits, bool symmetric, int64_t groupSize, int64_t rows, int64_t cols, uint32_t seed) {
    const std::string tag = "int" + std::to_string(bits) + (symmetric ? " sym" : " asym") + " g" +
                            std::to_string(groupSize) + " " + std::to_string(rows) + "x" + std::to_string(cols) + ": ";
    RtnSpec spec{bits, symmetric, groupSize};
    const int64_t groups = rtnGroupCount(cols, spec);
    std::vector<float> w = gaussian(size_t(rows * cols), seed, 0.02f);
    for (int64_t c = 0; c < cols; ++c) w[size_t(c)] = 0.0f;  // an all-zero row takes the [-1, 1] rule
    std::vector<uint8_t> refLevels(w.size());
    std::vector<float> refScales(size_t(rows * groups));
    std::vector<int32_t> refZeros(refScales.size());
    rtnQuantizeRef(w.data(), rows, cols, spec, refLevels.data(), refScales.data(), refZeros.data());

    float* dw = toDevice(w);
    uint8_t* dl = toDevice(std::vector<uint8_t>(w.size(), 0xAB));  // poisoned
    float* ds = toDevice(std::vector<float>(refScales.size(), -1.0f));
    int32_t* dz = toDevice(std::vector<int32_t>(refZeros.size(), -1));
    rtnQuantize(dw, rows, cols, spec, dl, ds, dz, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (tag + "quantize kernel ran").c_str());
    check(toHost(dl, w.size()) == refLevels, (tag + "levels equal the CPU reference").c_str());
    check(toHost(ds, refScales.size()) == refScales, (tag + "scales equal the CPU reference").c_str());
    check(toHost(dz, refZeros.size()) == refZeros, (tag + "zeros equal the CPU reference").c_str());

    std::vector<float> refDeq(w.size());
    rtnDequantizeRef(refLevels.data(), refScales.data(), refZeros.data(), rows, cols, spec, refDeq.data());
    check(nmse(refDeq, w) < (bits == 4 ? kRtnNmseInt4 : kRtnNmseInt8), (tag + "quantization error within the bit width's bound").c_str());
    for (ActType act : {ActType::Float16, ActType::BFloat16}) {
        uint16_t* dout = toDevice(std::vector<uint16_t>(w.size(), 0xFFFF));  // NaN poison
        rtnDequantize(dl, ds, dz, rows, cols, spec, dout, act, nullptr);
        check(cudaDeviceSynchronize() == cudaSuccess, (tag + "dequantize kernel ran").c_str());
        const std::vector<uint16_t> out = toHost(dout, w.size());
        size_t mismatches = 0;
        for (size_t i = 0; i < out.size(); ++i) mismatches += out[i] != floatToActBits(refDeq[i], act);
        check(mismatches == 0, (tag + "dequantized " + actTypeName(act) + " equals the reference bit for bit").c_str());
        cudaFree(dout);
    }
    cudaFree(dw);
    cudaFree(dl);
    cudaFree(ds);
    cudaFree(dz);
}

} // namespace

int main() {
    if (noCudaDevice()) return 77;
    try {
        runCase(4, true, 128, 64, 512, 1);
        runCase(4, false, 128, 33, 300, 2);
        runCase(4, false, -1, 16, 1000, 3);
        runCase(8, true, 64, 40, 256, 4);
        runCase(8, false, 128, 17, 384, 5);
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return finish();
}
