// GPU test (label `gpu`): the 2:4 sparse GEMM through cuSPARSELt against the CPU reference (dense product of the
// same pruned weight, accumulated in double), fp16 and bf16, m = 1, 16, 33 (padded) and 2048, square and non-square
// weights, an input pointer off the 16-byte alignment (cuSPARSELt's default kernel: its autotuning crashed on the
// H200 with 0.8.0, see sparse24_gemm.h). Also: the device
// 2:4 checker finds the same first bad group as the CPU one, and a weight that is not 2:4 (or a shape cuSPARSELt
// cannot take) is refused with a message naming the problem. Exits 77 without a GPU, or (after the checker tests)
// when cuSPARSELt cannot be loaded, saying why.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../kernels/kernel_check.h"
#include "device_memory.h"
#include "cwb/kernels/sparse24_gemm.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

std::vector<uint16_t> toBits(const std::vector<float>& v, ActType t) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = floatToActBits(v[i], t);
    return b;
}

std::vector<float> prunedWeight(int64_t n, int64_t k, uint32_t seed) {
    std::vector<float> w = gaussian(size_t(n * k), seed, 0.05f);
    pruneTwoFourRef(w.data(), n, k);
    return w;
}

void checkerCases() {
    const int64_t n = 64, k = 256;
    std::vector<float> w = prunedWeight(n, k, 11);
    for (ActType t : {ActType::Float16, ActType::BFloat16}) {
        std::vector<uint16_t> bits = toBits(w, t);
        uint16_t* d = toDevice(bits);
        check(checkTwoFour(d, n, k, nullptr).ok, (std::string("device checker passes a pruned ") + actTypeName(t) + " weight").c_str());
        cudaFree(d);
        // Break row 37, columns 120..123 (fill all four) and row 50 later: the first must be reported.
        for (int64_t j = 120; j < 124; ++j) bits[size_t(37 * k + j)] = floatToActBits(0.5f, t);
        for (int64_t j = 0; j < 3; ++j) bits[size_t(50 * k + j)] = floatToActBits(0.25f, t);
        d = toDevice(bits);
        const TwoFourCheck dev = checkTwoFour(d, n, k, nullptr), cpu = checkTwoFourRef(bits.data(), n, k);
        cudaFree(d);
        check(!dev.ok && dev.row == 37 && dev.column == 120 && dev.nonzeros == 4 && cpu.describe() == dev.describe(),
              ("device checker names the first bad group like the CPU one: " + dev.describe()).c_str());
    }
}

void gemmCase(int64_t m, int64_t n, int64_t k, ActType t, bool offsetInput, uint32_t seed) {
    std::vector<uint16_t> wb = toBits(prunedWeight(n, k, seed), t);
    std::vector<uint16_t> xb = toBits(gaussian(size_t(m * k), seed + 1), t);
    std::vector<float> ref(size_t(m * n));
    sparse24GemmRef(xb.data(), wb.data(), t, m, n, k, ref.data());
    uint16_t* dw = toDevice(wb);
    // One spare element in front so that the input can start 2 bytes past an aligned address.
    std::vector<uint16_t> xPadded(xb.size() + 1, 0);
    std::copy(xb.begin(), xb.end(), xPadded.begin() + (offsetInput ? 1 : 0));
    uint16_t* dxAlloc = toDevice(xPadded);
    const uint16_t* dx = dxAlloc + (offsetInput ? 1 : 0);
    uint16_t* dy = toDevice(std::vector<uint16_t>(ref.size(), 0xFFFF));   // NaN in both types
    Sparse24Gemm gemm(dw, t, n, k, nullptr);
    cudaFree(dw);   // the compressed copy is all the GEMM needs
    gemm.run(dx, dy, m, nullptr);
    gemm.run(dx, dy, m, nullptr);   // the cached plan
    if (cudaDeviceSynchronize() != cudaSuccess) throw KernelError("sparse GEMM failed");
    const std::vector<float> y = download(dy, ref.size(), t);
    const double e = nmse(y, ref), tol = t == ActType::Float16 ? kGemmNmseFp16 : kGemmNmseBf16;
    char what[320];
    std::snprintf(what, sizeof what, "2:4 %lldx%lldx%lld %s (%s)%s: nmse %.2e < %.0e", (long long)m, (long long)n,
                  (long long)k, actTypeName(t), gemm.kernelNote(m).c_str(), offsetInput ? " unaligned input" : "", e, tol);
    check(e < tol, what);
    cudaFree(dxAlloc);
    cudaFree(dy);
}

void refusalCases() {
    const int64_t n = 32, k = 64;
    std::vector<uint16_t> dense = toBits(gaussian(size_t(n * k), 21), ActType::Float16);
    uint16_t* d = toDevice(dense);
    std::string message;
    try {
        Sparse24Gemm gemm(d, ActType::Float16, n, k, nullptr);
    } catch (const KernelError& e) {
        message = e.what();
    }
    cudaFree(d);
    check(message.find("is not 2:4 sparse: row 0, columns 0..3 hold 4 nonzeros") != std::string::npos,
          ("a dense weight is refused: " + message).c_str());
    message.clear();
    try {
        Sparse24Gemm gemm(nullptr, ActType::Float16, 20, 64, nullptr);
    } catch (const KernelError& e) {
        message = e.what();
    }
    check(message.find("multiples of 16") != std::string::npos, ("20 rows are refused: " + message).c_str());
}

} // namespace

int main() {
    if (noCudaDevice()) return 77;
    try {
        checkerCases();
        const CusparseLtAvailability& lt = cusparseLtAvailability();
        std::printf("%s\n", lt.detail.c_str());
        if (!lt.available) {
            std::printf("SKIP: cuSPARSELt unavailable: %s\n", lt.detail.c_str());
            finish();
            return failures() ? 1 : 77;
        }
        refusalCases();
        uint32_t seed = 100;
        for (ActType t : {ActType::Float16, ActType::BFloat16}) {
            for (int64_t m : {1, 16, 33, 2048}) {
                gemmCase(m, 256, 512, t, false, seed++);
                gemmCase(m, 768, 256, t, false, seed++);
            }
            gemmCase(128, 256, 1024, t, true, seed++);
        }
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return finish();
}
