// GPU test (label `gpu`, exit 77 without a GPU): the activation quantization kernels and the FP8 scale epilogue
// against their CPU references (kernels/cpu/act_quant_ref.cpp). Per-token FP8 and int8 (with and without the
// SmoothQuant divisor) give the reference's codes and scales exactly, on Gaussian rows with outliers, all-zero and
// negative-zero rows, and rows built so that x / scale falls exactly halfway between two E4M3 values; the epilogue
// gives the reference's fp16 / bf16 bits exactly; the FP8 product with per-token x per-channel scales (outer-vector
// scales or fp32 sums + epilogue) stays within the accumulation tolerance of a double-precision product.
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "../kernels/kernel_check.h"
#include "device_memory.h"
#include "fp8_reference.h"
#include "cwb/kernels/act_quant.h"
#include "cwb/kernels/fp8_gemm.h"
#include "cwb/kernels/w8a8_gemm.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

std::string tagOf(const char* what, int64_t rows, int64_t cols, ActType act) {
    return std::string(what) + " " + std::to_string(rows) + "x" + std::to_string(cols) + " " + actTypeName(act) + ": ";
}

// Gaussian rows with a few large outliers (as LLM activations have), rounded to the activation type. Row 1 (when
// present) is all zeros, row 2 negative zeros and tiny values, row 3 exact E4M3 ties (its amax is 448: scale 1).
std::vector<uint16_t> activationRows(int64_t rows, int64_t cols, ActType act, uint32_t seed) {
    std::vector<float> v = gaussian(size_t(rows * cols), seed);
    for (size_t i = 0; i < v.size(); i += 97) v[i] *= 40.0f;
    if (rows > 1)
        for (int64_t c = 0; c < cols; ++c) v[size_t(cols + c)] = 0.0f;
    if (rows > 2)
        for (int64_t c = 0; c < cols; ++c) v[size_t(2 * cols + c)] = c % 2 ? -0.0f : -1e-3f * float(c % 7);
    if (rows > 3) {
        // Halfway between neighbours: 1 | 1.125, 1.125 | 1.25, subnormals 2^-9 | 2^-8, 416 | 448; and negatives.
        const float ties[] = {448.0f, 1.0625f, 1.1875f, 0.0029296875f, 440.0f, -1.0625f, -0.0029296875f, 3.0f};
        for (int64_t c = 0; c < cols; ++c) v[size_t(3 * cols + c)] = ties[c % 8];
    }
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = floatToActBits(v[i], act);
    return bits;
}

void fp8Case(int64_t rows, int64_t cols, ActType act, uint32_t seed) {
    const std::string t = tagOf("FP8 per-token", rows, cols, act);
    const std::vector<uint16_t> x = activationRows(rows, cols, act, seed);
    std::vector<uint8_t> codes(x.size());
    std::vector<float> scales(static_cast<size_t>(rows));
    quantizeRowsFp8Ref(x.data(), act, rows, cols, codes.data(), scales.data());
    uint16_t* dx = toDevice(x);
    uint8_t* dc = toDevice(std::vector<uint8_t>(codes.size(), 0x55));
    float* ds = toDevice(std::vector<float>(scales.size(), -1.0f));
    quantizeRowsFp8(dx, act, rows, cols, dc, ds, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (t + "kernel ran").c_str());
    const std::vector<uint8_t> got = toHost(dc, codes.size());
    size_t differing = 0;
    for (size_t i = 0; i < got.size(); ++i) differing += got[i] != codes[i];
    if (differing) std::printf("  %zu of %zu codes differ\n", differing, got.size());
    check(differing == 0, (t + "codes equal the CPU reference").c_str());
    check(toHost(ds, scales.size()) == scales, (t + "scales equal the CPU reference").c_str());
    if (rows > 3) {   // the tie row decodes to the even neighbours, whatever the reference says
        const float expected[] = {448.0f, 1.0f, 1.25f, 0.00390625f, 448.0f, -1.0f, -0.00390625f, 3.0f};
        bool even = scales[3] == 1.0f;
        for (int64_t c = 0; c < 8 && c < cols; ++c) even = even && e4m3ToFloat(got[size_t(3 * cols + c)]) == expected[c];
        check(even, (t + "exact ties round to the even E4M3 value").c_str());
    }
    if (rows > 2) {
        bool zeros = scales[1] == 1.0f;
        for (int64_t c = 0; c < cols; ++c) zeros = zeros && got[size_t(cols + c)] == 0x00;
        zeros = zeros && got[size_t(2 * cols + 1)] == 0x80;   // -0 keeps its sign
        check(zeros, (t + "an all-zero row gets scale 1 and zero codes; -0 gives 0x80").c_str());
    }
    cudaFree(dx);
    cudaFree(dc);
    cudaFree(ds);
}

void int8Case(int64_t rows, int64_t cols, ActType act, bool divided, uint32_t seed) {
    const std::string t = tagOf(divided ? "int8 per-token of x / s" : "int8 per-token", rows, cols, act);
    const std::vector<uint16_t> x = activationRows(rows, cols, act, seed);
    std::vector<float> divisor(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) divisor[size_t(c)] = 0.5f + 1.5f * float((c * 2654435761u) % 1000) / 1000.0f;
    std::vector<int8_t> codes(x.size());
    std::vector<float> scales(static_cast<size_t>(rows));
    quantizeRowsInt8DividedRef(x.data(), act, divided ? divisor.data() : nullptr, rows, cols, codes.data(), scales.data());
    uint16_t* dx = toDevice(x);
    float* dd = toDevice(divisor);
    int8_t* dc = toDevice(std::vector<int8_t>(codes.size(), 99));
    float* ds = toDevice(std::vector<float>(scales.size(), -1.0f));
    quantizeRowsInt8Divided(dx, act, divided ? dd : nullptr, rows, cols, dc, ds, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (t + "kernel ran").c_str());
    check(toHost(dc, codes.size()) == codes, (t + "codes equal the CPU reference").c_str());
    check(toHost(ds, scales.size()) == scales, (t + "scales equal the CPU reference").c_str());
    if (!divided) {   // without a divisor: the W8A8 GEMM's own quantizer gives the same
        // Its outputs back to the sentinels first: it must write every code and scale itself.
        check(cudaMemset(dc, 99, codes.size()) == cudaSuccess &&
                  cudaMemcpy(ds, std::vector<float>(scales.size(), -1.0f).data(), scales.size() * sizeof(float),
                             cudaMemcpyHostToDevice) == cudaSuccess,
              (t + "outputs reset").c_str());
        quantizeRowsInt8(dx, act, rows, cols, dc, ds, nullptr);
        check(cudaDeviceSynchronize() == cudaSuccess, (t + "quantizeRowsInt8 ran").c_str());
        check(toHost(dc, codes.size()) == codes && toHost(ds, scales.size()) == scales,
              (t + "equals quantizeRowsInt8 (no divisor)").c_str());
    }
    cudaFree(dx);
    cudaFree(dd);
    cudaFree(dc);
    cudaFree(ds);
}

void epilogueCase(int64_t m, int64_t n, ActType act, uint32_t seed) {
    const std::string t = tagOf("scale epilogue", m, n, act);
    std::vector<float> sums = gaussian(size_t(m * n), seed, 3000.0f), rs = gaussian(size_t(m), seed + 1, 0.01f),
                       cs = gaussian(size_t(n), seed + 2, 0.002f);
    std::vector<uint16_t> expected(sums.size());
    scaleRowsColsRef(sums.data(), rs.data(), cs.data(), m, n, act, expected.data());
    float *dsum = toDevice(sums), *drs = toDevice(rs), *dcs = toDevice(cs);
    uint16_t* dy = toDevice(std::vector<uint16_t>(expected.size(), 0xFFFF));
    scaleRowsCols(dsum, drs, dcs, m, n, act, dy, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (t + "kernel ran").c_str());
    check(toHost(dy, expected.size()) == expected, (t + "output equals the reference bit for bit").c_str());
    cudaFree(dsum);
    cudaFree(drs);
    cudaFree(dcs);
    cudaFree(dy);
}

// The FP8 layer's product: per-token codes from the kernel, per-channel weight codes, both scale paths.
void rowwiseGemmCase(Fp8Gemm& gemm, bool outerVector, int64_t m, int64_t n, int64_t k, ActType act, uint32_t seed) {
    gemm.setOuterVectorAllowed(outerVector);
    const std::string t = tagOf(outerVector ? "FP8 rowwise GEMM (outer vector allowed)" : "FP8 rowwise GEMM (epilogue)",
                                m, n, act) + "k " + std::to_string(k) + ": ";
    const std::vector<uint16_t> x = activationRows(m, k, act, seed);
    std::vector<float> wf = gaussian(size_t(n * k), seed + 1, 0.05f);
    std::vector<uint16_t> wbits(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) wbits[i] = floatToHalfBits(wf[i]);
    std::vector<uint8_t> xq(x.size()), wq(wf.size());
    std::vector<float> xs(static_cast<size_t>(m)), ws(static_cast<size_t>(n));
    quantizeRowsFp8Ref(x.data(), act, m, k, xq.data(), xs.data());
    quantizeRowsFp8Ref(wbits.data(), ActType::Float16, n, k, wq.data(), ws.data());   // per output channel
    const std::vector<float> ref = fp8ProductRef(xq, xs, wq, ws, m, n, k);
    uint8_t *dx = toDevice(xq), *dw = toDevice(wq);
    float *dxs = toDevice(xs), *dws = toDevice(ws), *dsums = toDevice(std::vector<float>(ref.size(), 0.0f));
    uint16_t* dy = toDevice(std::vector<uint16_t>(ref.size(), 0xFFFF));
    gemm.runRowwise(dx, dxs, dw, dws, dy, dsums, act, m, n, k, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (t + "ran (" + gemm.rowwisePath(act) + ")").c_str());
    const std::vector<float> y = download(dy, ref.size(), act);
    const double error = nmse(y, ref), tolerance = act == ActType::Float16 ? kFp8GemmNmseFp16 : kFp8GemmNmseBf16;
    std::printf("  normalised error %.3g (tolerance %.0e)\n", error, tolerance);
    check(error < tolerance, (t + "per-token x per-channel scaled product matches the double reference").c_str());
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dxs);
    cudaFree(dws);
    cudaFree(dsums);
    cudaFree(dy);
}

} // namespace

int main() {
    if (noCudaDevice()) return 77;
    try {
        for (ActType act : {ActType::Float16, ActType::BFloat16}) {
            for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 4096}, {4, 100}, {37, 11008}, {130, 512}}) {
                fp8Case(rows, cols, act, uint32_t(rows + cols));
                int8Case(rows, cols, act, true, uint32_t(rows * 3 + cols));
                int8Case(rows, cols, act, false, uint32_t(rows * 5 + cols));
            }
            epilogueCase(1, 11008, act, 7);
            epilogueCase(70, 300, act, 8);
        }
        if (fp8GemmSupported()) {
            Fp8Gemm gemm;
            for (ActType act : {ActType::Float16, ActType::BFloat16})
                for (bool outer : {true, false}) {
                    rowwiseGemmCase(gemm, outer, 1, 512, 1024, act, 11);
                    rowwiseGemmCase(gemm, outer, 37, 200, 256, act, 12);
                    rowwiseGemmCase(gemm, outer, 64, 256, 512, act, 13);
                }
        } else {
            std::printf("SKIP: FP8 rowwise GEMM (needs compute capability 8.9+)\n");
        }
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return finish();
}
