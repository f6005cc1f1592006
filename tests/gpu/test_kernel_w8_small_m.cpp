// GPU test (label `gpu`, exit 77 without a GPU): the small-M FP8 and int8 kernels (w8_small_m.h) against the CPU.
// int8: exact int32 sums and the same two float multiplications as w8a8GemmRef, so every output equals the
// reference rounded to fp16 / bf16 bit for bit. FP8: exact products summed in fp32 in another order than the
// double-precision reference, so within the FP8 GEMM tolerance (kernel_check.h). m = 1..4; k from one 16-byte chunk
// (fewer than a warp's lanes) to 11008 (not a multiple of the warp's 512 bytes); n odd and not a multiple of 16.
// The decode GEMVs that quantize their own input (w8a8DecodeGemv, fp8DecodeGemv) from raw fp16 / bf16 x against the
// CPU references of both steps (quantizeRows*Ref, then the product): m = 1..8, k from one 64-column chunk (fewer
// chunks than warps) to 11008, k a multiple of 128 and not, SmoothQuant divisors, n from 37 (a partial tile) to 4096
// (more tiles than multiprocessors: the persistent loop), a row of zeros; batches of 4 and 8 chunks.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "../kernels/kernel_check.h"
#include "device_memory.h"
#include "fp8_reference.h"
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
    const std::vector<float> ref = fp8ProductRef(xq, xs, wq, ws, m, n, k);
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

// x of m rows as fp16 / bf16 bits: gaussian with outliers (many small codes), row 1 all zeros when m > 2 (scale 1).
std::vector<uint16_t> decodeInput(int64_t m, int64_t k, ActType act, uint32_t seed) {
    std::vector<float> xf = gaussian(size_t(m * k), seed);
    for (size_t i = 0; i < xf.size(); i += 89) xf[i] *= 30.0f;
    if (m > 2)
        for (int64_t c = 0; c < k; ++c) xf[size_t(k + c)] = 0.0f;
    std::vector<uint16_t> xb(xf.size());
    for (size_t i = 0; i < xf.size(); ++i) xb[i] = floatToActBits(xf[i], act);
    return xb;
}

std::string decodeTag(const char* what, int64_t m, int64_t n, int64_t k, ActType act, int batch) {
    return tagOf(what, m, n, k, act) + "(batch " + std::to_string(batch) + ") ";
}

// False (and says so) where this device's shared memory cannot hold m rows of codes of k columns (99 KB per block on
// compute capability 8.6 / 8.9): the runtime then takes the quantize kernel and the product.
bool decodeShapeFits(int64_t m, int64_t k, const std::string& tag) {
    uint16_t* probe = toDevice(std::vector<uint16_t>(8, 0));
    const bool fits = decodeGemvTakes(probe, probe, m, k);
    cudaFree(probe);
    if (!fits) std::printf("  %sskipped: %lld rows of %lld codes do not fit this device's shared memory\n", tag.c_str(),
                           (long long)m, (long long)k);
    return fits;
}

void decodeInt8Case(int64_t m, int64_t n, int64_t k, ActType act, bool divided, int batch, uint32_t seed) {
    const std::string t = decodeTag(divided ? "W8A8 decode GEMV, divided" : "W8A8 decode GEMV", m, n, k, act, batch);
    if (!decodeShapeFits(m, k, t)) return;
    const std::vector<uint16_t> xb = decodeInput(m, k, act, seed);
    std::vector<float> divisor(static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c) divisor[size_t(c)] = 0.25f + float((c * 37) % 101) / 25.0f;
    const std::vector<float> wf = gaussian(size_t(n * k), seed + 1, 0.05f);
    std::vector<int8_t> xq(xb.size()), wq(wf.size());
    std::vector<float> xs(static_cast<size_t>(m)), ws(static_cast<size_t>(n));
    quantizeRowsInt8DividedRef(xb.data(), act, divided ? divisor.data() : nullptr, m, k, xq.data(), xs.data());
    quantizeRowsInt8Ref(wf.data(), n, k, wq.data(), ws.data());
    std::vector<float> ref(size_t(m * n));
    w8a8GemmRef(xq.data(), xs.data(), wq.data(), ws.data(), m, n, k, ref.data());
    uint16_t* dx = toDevice(xb);
    int8_t* dw = toDevice(wq);
    float *dws = toDevice(ws), *dd = toDevice(divisor);
    uint16_t* dy = toDevice(std::vector<uint16_t>(ref.size(), 0xFFFF));
    check(decodeGemvTakes(dx, dw, m, k), (t + "shape taken").c_str());
    decodeGemvSetBatch(batch);
    w8a8DecodeGemv(dx, act, divided ? dd : nullptr, dw, dws, dy, m, n, k, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (t + "kernel ran").c_str());
    const std::vector<uint16_t> y = toHost(dy, ref.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < y.size(); ++i) mismatches += y[i] != floatToActBits(ref[i], act);
    if (mismatches) std::printf("  %zu of %zu outputs differ\n", mismatches, y.size());
    check(mismatches == 0, (t + "equals quantizeRowsInt8DividedRef + w8a8GemmRef bit for bit").c_str());
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dws);
    cudaFree(dd);
    cudaFree(dy);
}

void decodeFp8Case(int64_t m, int64_t n, int64_t k, ActType act, int batch, uint32_t seed) {
    const std::string t = decodeTag("FP8 decode GEMV", m, n, k, act, batch);
    if (!decodeShapeFits(m, k, t)) return;
    const std::vector<uint16_t> xb = decodeInput(m, k, act, seed);
    const std::vector<float> wf = gaussian(size_t(n * k), seed + 1, 0.05f);
    std::vector<uint16_t> wb(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) wb[i] = floatToHalfBits(wf[i]);
    std::vector<uint8_t> xq(xb.size()), wq(wf.size());
    std::vector<float> xs(static_cast<size_t>(m)), ws(static_cast<size_t>(n));
    quantizeRowsFp8Ref(xb.data(), act, m, k, xq.data(), xs.data());
    quantizeRowsFp8Ref(wb.data(), ActType::Float16, n, k, wq.data(), ws.data());
    const std::vector<float> ref = fp8ProductRef(xq, xs, wq, ws, m, n, k);
    uint16_t* dx = toDevice(xb);
    uint8_t* dw = toDevice(wq);
    float* dws = toDevice(ws);
    uint16_t* dy = toDevice(std::vector<uint16_t>(ref.size(), 0xFFFF));
    decodeGemvSetBatch(batch);
    fp8DecodeGemv(dx, act, dw, dws, dy, m, n, k, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (t + "kernel ran").c_str());
    const std::vector<float> y = download(dy, ref.size(), act);
    const double error = nmse(y, ref), tolerance = act == ActType::Float16 ? kFp8GemmNmseFp16 : kFp8GemmNmseBf16;
    std::printf("  normalised error %.3g (tolerance %.0e)\n", error, tolerance);
    check(error < tolerance, (t + "matches quantizeRowsFp8Ref + the double-precision product of the codes").c_str());
    if (m > 2) {   // the zero row: every output exactly 0
        bool zeros = true;
        for (int64_t j = 0; j < n; ++j) zeros = zeros && y[size_t(n + j)] == 0.0f;
        check(zeros, (t + "a row of zeros gives zeros").c_str());
    }
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dws);
    cudaFree(dy);
}

void decodeGemvCases() {
    const bool fp8 = fp8GemmSupported();
    if (!fp8) std::printf("FP8 decode GEMV cases skipped: the device has no FP8 tensor cores (needs 8.9+)\n");
    uint32_t seed = 500;
    for (ActType act : {ActType::Float16, ActType::BFloat16})
        for (int batch : {4, 8})
            for (int64_t m : {1, 2, 3, 5, 8}) {
                decodeInt8Case(m, 37, 64, act, false, batch, seed++);
                decodeInt8Case(m, 201, 4096, act, true, batch, seed++);
                decodeInt8Case(m, 96, 11008, act, m % 2 == 1, batch, seed++);
                decodeInt8Case(m, 40, 4160, act, true, batch, seed++);
                if (fp8) {
                    decodeFp8Case(m, 37, 64, act, batch, seed++);
                    decodeFp8Case(m, 201, 4096, act, batch, seed++);
                    decodeFp8Case(m, 96, 11008, act, batch, seed++);
                    decodeFp8Case(m, 40, 4160, act, batch, seed++);
                }
            }
    // More row tiles than multiprocessors (256 tiles): blocks take several, the next one loaded during a reduction.
    for (int batch : {4, 8}) {
        decodeInt8Case(1, 4096, 4096, ActType::Float16, true, batch, seed++);
        decodeInt8Case(8, 4096, 4096, ActType::BFloat16, false, batch, seed++);
        if (fp8) {
            decodeFp8Case(1, 4096, 4096, ActType::Float16, batch, seed++);
            decodeFp8Case(8, 4096, 4096, ActType::BFloat16, batch, seed++);
        }
    }
    decodeGemvSetBatch(4);
    uint16_t* dx = toDevice(std::vector<uint16_t>(9 * 128, 0));
    check(!decodeGemvTakes(dx, dx, kDecodeGemvMaxRows + 1, 128), "more than kDecodeGemvMaxRows rows are not taken");
    check(!decodeGemvTakes(dx, dx, 1, 96), "k not a multiple of 64 is not taken");
    check(!decodeGemvTakes(reinterpret_cast<const char*>(dx) + 2, dx, 1, 128), "x not 16-byte aligned is not taken");
    check(!decodeGemvTakes(dx, dx, 8, 16384), "codes past the shared memory are not taken");
    bool refused = false;
    try {
        w8a8DecodeGemv(dx, ActType::Float16, nullptr, reinterpret_cast<const int8_t*>(dx), nullptr, dx, 1, 16, 96, nullptr);
    } catch (const KernelError& e) {
        refused = std::string(e.what()).find("multiple of 64") != std::string::npos;
    }
    check(refused, "a shape it does not take is refused with a clear error");
    cudaFree(dx);
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
        decodeGemvCases();
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return finish();
}
