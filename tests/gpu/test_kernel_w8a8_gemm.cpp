// GPU test (label `gpu`, exit 77 without a GPU): W8A8. The per-token int8 quantization kernel gives the CPU
// reference's codes and scales exactly; the cuBLASLt int8 product with the scale epilogue gives the reference's
// values bit for bit (integer sums are exact, the two scale multiplications are the same float operations); and
// the whole path stays within the int8 quantization error of the float product. fp16 and bf16, several shapes.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "../kernels/kernel_check.h"
#include "device_memory.h"
#include "cwb/kernels/w8a8_gemm.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

void runCase(W8a8Gemm& gemm, int64_t m, int64_t n, int64_t k, ActType act, uint32_t seed) {
    char tag[96];
    std::snprintf(tag, sizeof tag, "W8A8 %lldx%lldx%lld %s: ", (long long)m, (long long)n, (long long)k, actTypeName(act));
    const std::string t(tag);
    std::vector<float> xf = gaussian(size_t(m * k), seed), wf = gaussian(size_t(n * k), seed + 1, 0.05f);
    std::vector<uint16_t> xb(xf.size());
    for (size_t i = 0; i < xf.size(); ++i) {
        xb[i] = floatToActBits(xf[i], act);
        xf[i] = actBitsToFloat(xb[i], act);
    }
    std::vector<int8_t> xq(xf.size()), wq(wf.size());
    std::vector<float> xs(static_cast<size_t>(m)), ws(static_cast<size_t>(n));
    quantizeRowsInt8Ref(xf.data(), m, k, xq.data(), xs.data());
    quantizeRowsInt8Ref(wf.data(), n, k, wq.data(), ws.data());

    uint16_t* dxb = toDevice(xb);
    int8_t* dxq = toDevice(std::vector<int8_t>(xq.size(), 99));
    float* dxs = toDevice(std::vector<float>(xs.size(), -1.0f));
    quantizeRowsInt8(dxb, act, m, k, dxq, dxs, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (t + "quantize kernel ran").c_str());
    check(toHost(dxq, xq.size()) == xq, (t + "per-token codes equal the CPU reference").c_str());
    check(toHost(dxs, xs.size()) == xs, (t + "per-token scales equal the CPU reference").c_str());

    int8_t* dwq = toDevice(wq);
    float* dws = toDevice(ws);
    uint16_t* dy = toDevice(std::vector<uint16_t>(size_t(m * n), 0xFFFF));
    gemm.run(dxq, dxs, dwq, dws, dy, act, m, n, k, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (t + "GEMM ran").c_str());
    const std::vector<uint16_t> yb = toHost(dy, size_t(m * n));
    std::vector<float> ref(yb.size()), y(yb.size());
    w8a8GemmRef(xq.data(), xs.data(), wq.data(), ws.data(), m, n, k, ref.data());
    size_t mismatches = 0;
    for (size_t i = 0; i < yb.size(); ++i) {
        mismatches += yb[i] != floatToActBits(ref[i], act);
        y[i] = actBitsToFloat(yb[i], act);
    }
    check(mismatches == 0, (t + "output equals the reference bit for bit").c_str());
    std::vector<float> exact(yb.size());
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int64_t c = 0; c < k; ++c) acc += double(xf[size_t(i * k + c)]) * double(wf[size_t(j * k + c)]);
            exact[size_t(i * n + j)] = float(acc);
        }
    check(nmse(y, exact) < kW8A8OutputNmse, (t + "within int8 quantization error of the float product").c_str());
    cudaFree(dxb);
    cudaFree(dxq);
    cudaFree(dxs);
    cudaFree(dwq);
    cudaFree(dws);
    cudaFree(dy);
}

} // namespace

int main() {
    if (noCudaDevice()) return 77;
    try {
        W8a8Gemm gemm;
        for (ActType act : {ActType::Float16, ActType::BFloat16}) {
            runCase(gemm, 1, 64, 256, act, 1);
            runCase(gemm, 37, 200, 512, act, 2);
            runCase(gemm, 128, 256, 1024, act, 3);
        }
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return finish();
}
