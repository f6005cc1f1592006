// GPU test (label `gpu`, exit 77 without a GPU): dequantizeTiled (the prefill path's dense weight) against the CPU
// reference dequantizeTiledRef(w, true), bit for bit: both compute (level - zero) · scale in float from the same
// stored fp16 / bf16 scale and round once to the activation type. Cases: int4 and int8, symmetric and asymmetric,
// groups 64 / 128 / per channel, act-order (the kernel scatters to the source columns), uneven random groups, rows
// and columns that are not multiples of the tile. The output is poisoned with 0xFFFF (NaN) first.
#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "../kernels/kernel_check.h"
#include "device_memory.h"
#include "cwb/kernels/dequant_tiled.h"
#include "cwb/kernels/rtn_quant.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

struct Case {
    int bits;
    bool symmetric;
    int64_t rows, cols, groupSize;
    int order;  // 0: groups in column order; 1: act-order (shuffled); 2: random group of each column
};

TiledIntWeight makeWeight(const Case& c, ActType act, uint32_t seed) {
    RtnSpec spec{c.bits, c.symmetric, c.groupSize};
    const int64_t groups = rtnGroupCount(c.cols, spec);
    std::vector<float> w = gaussian(size_t(c.rows * c.cols), seed, 0.05f);
    std::vector<uint8_t> levels(w.size());
    std::vector<float> scales(size_t(c.rows * groups));
    std::vector<int32_t> zeros(scales.size());
    rtnQuantizeRef(w.data(), c.rows, c.cols, spec, levels.data(), scales.data(), zeros.data());
    std::vector<int32_t> gidx(size_t(c.cols));
    const int64_t width = c.groupSize > 0 ? c.groupSize : c.cols;
    for (int64_t i = 0; i < c.cols; ++i) gidx[size_t(i)] = int32_t(i / width);
    std::mt19937 rng(seed);
    if (c.order == 1) std::shuffle(gidx.begin(), gidx.end(), rng);
    if (c.order == 2)
        for (auto& g : gidx) g = int32_t(rng() % uint32_t(groups));
    const std::vector<int32_t> words = packCoreWords(levels.data(), c.rows, c.cols, c.bits);
    return packTiled({c.bits, c.rows, c.cols, groups, words.data(), scales.data(), zeros.data(), gidx.data()}, act);
}

void runCase(const Case& c, ActType act, uint32_t seed) {
    const TiledIntWeight host = makeWeight(c, act, seed);
    const std::vector<float> ref = dequantizeTiledRef(host, true);
    DeviceTiledWeight dev(host);
    void* out = nullptr;
    const size_t bytes = ref.size() * 2;
    if (cudaMalloc(&out, bytes) != cudaSuccess) throw KernelError("cudaMalloc failed");
    cudaMemset(out, 0xFF, bytes);
    dequantizeTiled(dev, out, nullptr);
    if (cudaDeviceSynchronize() != cudaSuccess) throw KernelError("dequantizeTiled launch failed");
    std::vector<uint16_t> got(ref.size());
    cudaMemcpy(got.data(), out, bytes, cudaMemcpyDeviceToHost);
    cudaFree(out);
    size_t differ = 0, nonzero = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        differ += got[i] != floatToActBits(ref[i], act) ? 1 : 0;
        nonzero += ref[i] != 0.0f ? 1 : 0;
    }
    char what[200];
    std::snprintf(what, sizeof what, "int%d %s %s g%lld%s %lldx%lld: %zu of %zu values differ from the CPU reference",
                  c.bits, c.symmetric ? "sym" : "asym", actTypeName(act), (long long)c.groupSize,
                  c.order == 1 ? " act-order" : c.order == 2 ? " random-groups" : "", (long long)c.rows,
                  (long long)c.cols, differ, ref.size());
    check(differ == 0 && nonzero > ref.size() / 2, what);   // and the weight is not trivially zero
}

} // namespace

int main() {
    if (noCudaDevice()) return 77;
    try {
        for (ActType act : {ActType::Float16, ActType::BFloat16}) {
            runCase({4, true, 256, 1024, 128, 0}, act, 1);
            runCase({4, false, 200, 576, 64, 0}, act, 2);
            runCase({4, false, 128, 512, 128, 1}, act, 3);
            runCase({4, true, 64, 640, 128, 2}, act, 4);
            runCase({4, true, 100, 320, -1, 0}, act, 5);
            runCase({8, true, 256, 1024, 128, 0}, act, 6);
            runCase({8, false, 136, 448, 128, 1}, act, 7);
            runCase({8, true, 48, 384, 64, 2}, act, 8);
        }
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return finish();
}
