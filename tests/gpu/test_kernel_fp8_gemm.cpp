// GPU test (label `gpu`, exit 77 without a GPU or without FP8 tensor cores): the cuBLASLt FP8 E4M3 GEMM against
// the CPU reference on the same codes and scales, fp16 and bf16 output, several shapes (m from 1 to 128, n not a
// multiple of 16). The output is poisoned with NaN first.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "../kernels/kernel_check.h"
#include "device_memory.h"
#include "cwb/kernels/fp8_gemm.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

void runCase(Fp8Gemm& gemm, int64_t m, int64_t n, int64_t k, uint32_t seed) {
    std::vector<float> xf = gaussian(size_t(m * k), seed), wf = gaussian(size_t(n * k), seed + 1, 0.05f);
    std::vector<uint8_t> xq(xf.size()), wq(wf.size());
    const float xs = quantizeE4M3Ref(xf.data(), xf.size(), xq.data());
    const float ws = quantizeE4M3Ref(wf.data(), wf.size(), wq.data());
    std::vector<float> ref(size_t(m * n));
    fp8GemmRef(xq.data(), xs, wq.data(), ws, m, n, k, ref.data());
    uint8_t* dx = toDevice(xq);
    uint8_t* dw = toDevice(wq);
    float* dxs = toDevice(std::vector<float>{xs});
    float* dws = toDevice(std::vector<float>{ws});
    for (ActType act : {ActType::Float16, ActType::BFloat16}) {
        uint16_t* dy = toDevice(std::vector<uint16_t>(ref.size(), 0xFFFF));
        gemm.run(dx, dxs, dw, dws, dy, act, m, n, k, nullptr);
        if (cudaDeviceSynchronize() != cudaSuccess) throw KernelError("FP8 GEMM failed");
        const std::vector<float> y = download(dy, ref.size(), act);
        const double e = nmse(y, ref), tol = act == ActType::Float16 ? kFp8GemmNmseFp16 : kFp8GemmNmseBf16;
        char what[160];
        std::snprintf(what, sizeof what, "FP8 %lldx%lldx%lld -> %s: nmse %.2e < %.0e", (long long)m, (long long)n,
                      (long long)k, actTypeName(act), e, tol);
        check(e < tol, what);
        cudaFree(dy);
    }
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dxs);
    cudaFree(dws);
}

} // namespace

int main() {
    if (noCudaDevice()) return 77;
    if (!fp8GemmSupported()) {
        std::printf("SKIP: the device has no FP8 tensor cores\n");
        return 77;
    }
    try {
        Fp8Gemm gemm;
        runCase(gemm, 1, 256, 512, 1);
        runCase(gemm, 33, 200, 1024, 2);
        runCase(gemm, 128, 512, 256, 3);
        bool threw = false;
        try {
            gemm.run(nullptr, nullptr, nullptr, nullptr, nullptr, ActType::Float16, 4, 16, 20, nullptr);
        } catch (const KernelError&) {
            threw = true;
        }
        check(threw, "k not a multiple of 16 is refused with a KernelError");
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return finish();
}
