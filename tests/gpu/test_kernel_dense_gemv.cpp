// GPU test (label `gpu`, exit 77 without a GPU): the dense GEMV (dense_gemv.h) against its CPU reference, fp16 and
// bf16, for 1..8 rows of x: the 16-byte path (K a multiple of 8) and the scalar path (odd K, or x not 16-byte
// aligned), odd N, strided rows of x, with and without bias and residual, and y written over the residual (the
// runtime's linearPlus). Rows past kDenseGemvMaxRows must be refused.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "../kernels/kernel_check.h"
#include "cwb/kernels/dense_gemv.h"
#include "device_memory.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

// Normalised MSE allowed between the GEMV and its reference: both see the same rounded inputs, so what remains is
// fp32 against double summation and the one final rounding (relative 2^-11 in fp16, 2^-8 in bf16), as for the GEMMs.
constexpr double kGemvNmseFp16 = kGemmNmseFp16;
constexpr double kGemvNmseBf16 = kGemmNmseBf16;

std::vector<float> rounded(size_t n, uint32_t seed, ActType t, float sigma) {
    std::vector<float> v = gaussian(n, seed, sigma);
    for (float& x : v) x = actBitsToFloat(floatToActBits(x, t), t);
    return v;
}

uint16_t* upload(const std::vector<float>& v, ActType t) {
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = floatToActBits(v[i], t);
    return toDevice(bits);
}

std::vector<float> download(const uint16_t* d, size_t n, ActType t) {
    std::vector<uint16_t> bits = toHost(d, n);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = actBitsToFloat(bits[i], t);
    return v;
}

struct GemvCase {
    int64_t rows, outputs, inputs;
    int64_t xPad = 0;          // extra elements between rows of x
    bool misalignedX = false;  // x starts one element past a 16-byte boundary (forces the scalar path)
};

void testGemv(ActType t, const GemvCase& c, bool bias, bool residual, bool inPlace) {
    const std::string tag = std::string("denseGemv ") + actTypeName(t) + " M=" + std::to_string(c.rows) + " N=" +
                            std::to_string(c.outputs) + " K=" + std::to_string(c.inputs) +
                            (c.xPad ? " strided x" : "") + (c.misalignedX ? " misaligned x" : "") +
                            (bias ? " + bias" : "") + (residual ? (inPlace ? " + residual in place" : " + residual") : "");
    DenseGemvShape s;
    s.rows = c.rows;
    s.outputs = c.outputs;
    s.inputs = c.inputs;
    s.xStride = c.inputs + c.xPad;
    s.yStride = s.residualStride = c.outputs;
    const size_t xOffset = c.misalignedX ? 1 : 0;
    const size_t xn = size_t(c.rows * s.xStride) + xOffset, wn = size_t(c.outputs * c.inputs), yn = size_t(c.rows * c.outputs);
    std::vector<float> x = rounded(xn, 11, t, 1.0f), w = rounded(wn, 12, t, 0.05f), r = rounded(yn, 13, t, 1.0f);
    std::vector<float> b = gaussian(size_t(c.outputs), 14, 0.5f);
    std::vector<float> ref(yn);
    denseGemvRef(x.data() + xOffset, w.data(), bias ? b.data() : nullptr, residual ? r.data() : nullptr, ref.data(), s, t);
    uint16_t *dx = upload(x, t), *dw = upload(w, t), *dr = upload(r, t), *dy = upload(std::vector<float>(yn, 0.0f), t);
    float* db = toDevice(b);
    uint16_t* out = inPlace ? dr : dy;
    denseGemv(dx + xOffset, dw, bias ? db : nullptr, residual ? dr : nullptr, out, s, t, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (tag + ": ran").c_str());
    const double tolerance = t == ActType::Float16 ? kGemvNmseFp16 : kGemvNmseBf16;
    const double error = nmse(download(out, yn, t), ref);
    check(error <= tolerance, (tag + ": matches the reference (nmse " + std::to_string(error) + ")").c_str());
    cudaFree(dx), cudaFree(dw), cudaFree(dr), cudaFree(dy), cudaFree(db);
}

void testRefusesTooManyRows() {
    DenseGemvShape s;
    s.rows = kDenseGemvMaxRows + 1;
    s.outputs = s.inputs = 8;
    s.xStride = s.yStride = 8;
    bool refused = false;
    try {
        denseGemv(reinterpret_cast<void*>(16), reinterpret_cast<void*>(16), nullptr, nullptr, reinterpret_cast<void*>(16), s,
                  ActType::Float16, nullptr);
    } catch (const KernelError&) {
        refused = true;
    }
    check(refused, "denseGemv refuses more rows than kDenseGemvMaxRows");
}

} // namespace

int main() {
    if (noCudaDevice()) return 77;
    try {
        const GemvCase cases[] = {
            {1, 257, 1024},         // 16-byte path, odd N, whole unrolled batches
            {1, 300, 4096 + 88},    // 16-byte path with a partial tail batch
            {1, 131, 1001},         // odd K: scalar path
            {3, 67, 520, 8},        // three strided rows
            {4, 129, 776},          // Llama-2 small-batch decode
            {8, 33, 264},           // the most rows
            {5, 50, 77},            // odd K with several rows
            {2, 96, 512, 0, true},  // x off a 16-byte boundary: scalar path
        };
        for (ActType t : {ActType::Float16, ActType::BFloat16}) {
            for (const GemvCase& c : cases) {
                testGemv(t, c, false, false, false);
                testGemv(t, c, true, true, false);
            }
            testGemv(t, cases[1], true, false, false);
            testGemv(t, cases[1], false, true, true);
            testGemv(t, cases[3], false, true, true);
        }
        testRefusesTooManyRows();
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return finish();
}
