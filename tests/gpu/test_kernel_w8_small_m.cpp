// GPU test (label `gpu`, exit 77 without a GPU): the small-M FP8 and int8 kernels (w8_small_m.h) against the CPU.
// int8: exact int32 sums and the same two float multiplications as w8a8GemmRef, so every output equals the
// reference rounded to fp16 / bf16 bit for bit. FP8: exact products summed in fp32 in another order than the
// double-precision reference, so within the FP8 GEMM tolerance (kernel_check.h). m = 1..4; k from one 16-byte chunk
// (fewer than a warp's lanes) to 11008 (not a multiple of the warp's 512 bytes); n odd and not a multiple of 16.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "../kernels/kernel_check.h"
#include "device_memory.h"
#include "cwb/kernels/act_quant.h"
#include "cwb/kernels/fp8_gemm.h"
#include "cwb/kernels/w8_small_m.h"
#include "cwb/kernels/w8a8_gemm.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

std::string tagOf(const char* what, int64_t m, int64_t n, int64_t k, ActType act) {
    return std::string(what) + " " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " +
           actTypeName(act) + ": ";
}

void int8Case(int64_t m, int64_t n, int64_t k, ActType act, uint32_t seed) {
    const std::string t = tagOf("W8A8 small-M", m, n, k, act);
    std::vector<float> xf = gaussian(size_t(m * k), seed), wf = gaussian(size_t(n * k), seed + 1, 0.05f);
    std::vector<int8_t> xq(xf.size()), wq(wf.size());
    std::vector<float> xs(static_cast<size_t>(m)), ws(static_cast<size_t>(n));
    quantizeRowsInt8Ref(xf.data(), m, k, xq.data(), xs.data());
    quantizeRowsInt8Ref(wf.data(), n, k, wq.data(), ws.data());
    std::vector<float> ref(size_t(m * n));
    w8a8GemmRef(xq.data(), xs.data(), wq.data(), ws.data(), m, n, k, ref.data());
    int8_t *dx = toDevice(xq), *dw = toDevice(wq);
    float *dxs = toDevice(xs), *dws = toDevice(ws);
    uint16_t* dy = toDevice(std::vector<uint16_t>(ref.size(), 0xFFFF));
    w8a8SmallM(dx, dxs, dw, dws, dy, act, m, n, k, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (t + "kernel ran").c_str());
    const std::vector<uint16_t> y = toHost(dy, ref.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < y.size(); ++i) mismatches += y[i] != floatToActBits(ref[i], act);
    if (mismatches) std::printf("  %zu of %zu outputs differ\n", mismatches, y.size());
    check(mismatches == 0, (t + "output equals w8a8GemmRef bit for bit").c_str());
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dxs);
    cudaFree(dws);
    cudaFree(dy);
}

void fp8Case(int64_t m, int64_t n, int64_t k, ActType act, uint32_t seed) {
    const std::string t = tagOf("FP8 small-M", m, n, k, act);
    std::vector<float> xf = gaussian(size_t(m * k), seed), wf = gaussian(size_t(n * k), seed + 1, 0.05f);
    for (size_t i = 0; i < xf.size(); i += 89) xf[i] *= 30.0f;   // outliers: many small codes, subnormals too
    std::vector<uint16_t> xb(xf.size()), wb(wf.size());
    for (size_t i = 0; i < xf.size(); ++i) xb[i] = floatToActBits(xf[i], act);
    for (size_t i = 0; i < wf.size(); ++i) wb[i] = floatToHalfBits(wf[i]);
    std::vector<uint8_t> xq(xf.size()), wq(wf.size());
    std::vector<float> xs(static_cast<size_t>(m)), ws(static_cast<size_t>(n));
    quantizeRowsFp8Ref(xb.data(), act, m, k, xq.data(), xs.data());
    quantizeRowsFp8Ref(wb.data(), ActType::Float16, n, k, wq.data(), ws.data());
    std::vector<float> ref(size_t(m * n));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int64_t c = 0; c < k; ++c)
                acc += double(e4m3ToFloat(xq[size_t(i * k + c)])) * double(e4m3ToFloat(wq[size_t(j * k + c)]));
            ref[size_t(i * n + j)] = float(acc * double(xs[size_t(i)]) * double(ws[size_t(j)]));
        }
    uint8_t *dx = toDevice(xq), *dw = toDevice(wq);
    float *dxs = toDevice(xs), *dws = toDevice(ws);
    uint16_t* dy = toDevice(std::vector<uint16_t>(ref.size(), 0xFFFF));
    fp8SmallM(dx, dxs, dw, dws, dy, act, m, n, k, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (t + "kernel ran").c_str());
    const std::vector<float> y = download(dy, ref.size(), act);
    const double error = nmse(y, ref), tolerance = act == ActType::Float16 ? kFp8GemmNmseFp16 : kFp8GemmNmseBf16;
    std::printf("  normalised error %.3g (tolerance %.0e)\n", error, tolerance);
    check(error < tolerance, (t + "matches the double-precision product of the codes").c_str());
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dxs);
    cudaFree(dws);
    cudaFree(dy);
}

} // namespace

int main() {
    if (noCudaDevice()) return 77;
    try {
        for (ActType act : {ActType::Float16, ActType::BFloat16})
            for (int64_t m = 1; m <= kSmallMMaxRows; ++m) {
                const uint32_t seed = uint32_t(m * 10 + (act == ActType::Float16 ? 0 : 5));
                int8Case(m, 37, 16, act, seed);
                int8Case(m, 201, 4096, act, seed + 1);
                int8Case(m, 96, 11008, act, seed + 2);
                fp8Case(m, 37, 16, act, seed + 3);
                fp8Case(m, 201, 4096, act, seed + 4);
                fp8Case(m, 96, 11008, act, seed + 5);
            }
        bool refused = false;
        try {
            w8a8SmallM(nullptr, nullptr, nullptr, nullptr, nullptr, ActType::Float16, kSmallMMaxRows + 1, 16, 16, nullptr);
        } catch (const KernelError& e) {
            refused = std::string(e.what()).find("m <=") != std::string::npos;
        }
        check(refused, "more than kSmallMMaxRows token rows are refused with a clear error");
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return finish();
}
