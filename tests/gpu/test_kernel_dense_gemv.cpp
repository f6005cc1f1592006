// GPU test (label `gpu`, exit 77 without a GPU): the dense GEMV (dense_gemv.h) against its CPU reference, fp16 and
// bf16, for 1..8 rows of x: the 16-byte path (K a multiple of 8) and the scalar path (odd K, or x not 16-byte
// aligned), odd N, strided rows of x, with and without bias and residual, and y written over the residual (the
// runtime's linearPlus). Rows past kDenseGemvMaxRows must be refused. The same with the RMSNorm folded in
// (denseGemvRmsNorm) against denseGemvRmsNormRef, and the SwiGLU form (denseGemvSwiGlu, with and without the norm)
// against denseGemvSwiGluRef; an output over x must be refused by both. The 2:4 forms (sparse24Gemv, ...RmsNorm,
// ...SwiGlu) on packed rows against the dense references of the unpacked weight: groups with two, one and no
// non-zeros, aligned and misaligned x, partial tail batches; K not a multiple of 16 refused by the kernel and the
// packer, and a row with three non-zeros in a group refused by the packer.
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
    std::vector<float> x = roundedGaussian(xn, 11, t, 1.0f), w = roundedGaussian(wn, 12, t, 0.05f), r = roundedGaussian(yn, 13, t, 1.0f);
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

// Inputs of the RMSNorm and SwiGLU forms: x of the norm's scale (the raw residual stream), a norm weight around 1.
struct FoldedInputs {
    DenseGemvShape shape;
    size_t xOffset = 0;
    std::vector<float> x, weight, residual, bias, normWeight;
};

FoldedInputs foldedInputs(ActType t, const GemvCase& c, int64_t weightRows) {
    FoldedInputs in;
    DenseGemvShape& s = in.shape;
    s.rows = c.rows;
    s.outputs = c.outputs;
    s.inputs = c.inputs;
    s.xStride = c.inputs + c.xPad;
    s.yStride = s.residualStride = c.outputs;
    in.xOffset = c.misalignedX ? 1 : 0;
    in.x = roundedGaussian(size_t(c.rows * s.xStride) + in.xOffset, 21, t, 3.0f);
    in.weight = roundedGaussian(size_t(weightRows * c.inputs), 22, t, 0.05f);
    in.residual = roundedGaussian(size_t(c.rows * c.outputs), 23, t, 1.0f);
    in.bias = gaussian(size_t(weightRows), 24, 0.5f);
    in.normWeight = gaussian(size_t(c.inputs), 25, 0.2f);   // read in the activation type: rounded to it here
    for (float& v : in.normWeight) v = actBitsToFloat(floatToActBits(v + 1.0f, t), t);
    return in;
}

std::string caseName(const char* kernel, ActType t, const GemvCase& c) {
    return std::string(kernel) + " " + actTypeName(t) + " M=" + std::to_string(c.rows) + " N=" + std::to_string(c.outputs) +
           " K=" + std::to_string(c.inputs) + (c.xPad ? " strided x" : "") + (c.misalignedX ? " misaligned x" : "");
}

// Both sides compute the same sum (the normalised x is rounded by neither), so the GEMV's tolerance applies.
void testGemvRmsNorm(ActType t, const GemvCase& c, bool bias, bool residual) {
    const std::string tag = caseName("denseGemvRmsNorm", t, c) + (bias ? " + bias" : "") + (residual ? " + residual" : "");
    const FoldedInputs in = foldedInputs(t, c, c.outputs);
    const DenseGemvShape& s = in.shape;
    const float eps = 1e-5f;
    const size_t yn = size_t(c.rows * c.outputs);
    std::vector<float> ref(yn);
    denseGemvRmsNormRef(in.x.data() + in.xOffset, in.normWeight.data(), eps, in.weight.data(), bias ? in.bias.data() : nullptr,
                        residual ? in.residual.data() : nullptr, ref.data(), s, t);
    uint16_t *dx = upload(in.x, t), *dw = upload(in.weight, t), *dr = upload(in.residual, t);
    uint16_t* dy = upload(std::vector<float>(yn, 0.0f), t);
    float* db = toDevice(in.bias);
    uint16_t* dg = upload(in.normWeight, t);
    GemvRmsNorm norm;
    norm.weight = dg;
    norm.eps = eps;
    const int64_t launchesBefore = denseGemvRmsNormLaunches();
    denseGemvRmsNorm(dx + in.xOffset, norm, dw, bias ? db : nullptr, residual ? dr : nullptr, dy, s, t, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (tag + ": ran").c_str());
    check(denseGemvRmsNormLaunches() == launchesBefore + 1, (tag + ": counted one launch").c_str());
    const double tolerance = t == ActType::Float16 ? kGemvNmseFp16 : kGemvNmseBf16;
    const double error = nmse(download(dy, yn, t), ref);
    check(error <= tolerance, (tag + ": matches the reference (nmse " + std::to_string(error) + ")").c_str());
    cudaFree(dx), cudaFree(dw), cudaFree(dr), cudaFree(dy), cudaFree(db), cudaFree(dg);
}

// W [2N, K]; y [M, N] = silu(g) u, g and u taken unrounded on both sides, so again only the summation and the one
// final rounding differ.
void testGemvSwiGlu(ActType t, const GemvCase& c, bool withNorm, bool bias) {
    const std::string tag = caseName("denseGemvSwiGlu", t, c) + (withNorm ? " + RMSNorm" : "") + (bias ? " + bias" : "");
    const FoldedInputs in = foldedInputs(t, c, 2 * c.outputs);
    const DenseGemvShape& s = in.shape;
    const float eps = 1e-5f;
    const size_t yn = size_t(c.rows * c.outputs);
    std::vector<float> ref(yn);
    denseGemvSwiGluRef(in.x.data() + in.xOffset, withNorm ? in.normWeight.data() : nullptr, eps, in.weight.data(),
                       bias ? in.bias.data() : nullptr, ref.data(), s, t);
    uint16_t *dx = upload(in.x, t), *dw = upload(in.weight, t), *dy = upload(std::vector<float>(yn, 0.0f), t);
    float* db = toDevice(in.bias);
    uint16_t* dg = upload(in.normWeight, t);
    GemvRmsNorm norm;
    norm.weight = dg;
    norm.eps = eps;
    const int64_t launchesBefore = denseGemvSwiGluLaunches();
    denseGemvSwiGlu(dx + in.xOffset, withNorm ? &norm : nullptr, dw, bias ? db : nullptr, dy, s, t, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (tag + ": ran").c_str());
    check(denseGemvSwiGluLaunches() == launchesBefore + 1, (tag + ": counted one launch").c_str());
    const double tolerance = t == ActType::Float16 ? kGemvNmseFp16 : kGemvNmseBf16;
    const double error = nmse(download(dy, yn, t), ref);
    check(error <= tolerance, (tag + ": matches the reference (nmse " + std::to_string(error) + ")").c_str());
    cudaFree(dx), cudaFree(dw), cudaFree(dy), cudaFree(db), cudaFree(dg);
}

// Every warp reads all of x, so neither folded form may write its output over it.
void testFoldedFormsRefuseOutputOverX() {
    DenseGemvShape s;
    s.outputs = s.inputs = s.xStride = s.yStride = 8;
    GemvRmsNorm norm;
    norm.weight = reinterpret_cast<const void*>(16);
    void* same = reinterpret_cast<void*>(16);
    bool normRefused = false, swiGluRefused = false;
    try {
        denseGemvRmsNorm(same, norm, reinterpret_cast<void*>(32), nullptr, nullptr, same, s, ActType::Float16, nullptr);
    } catch (const KernelError&) {
        normRefused = true;
    }
    try {
        denseGemvSwiGlu(same, nullptr, reinterpret_cast<void*>(32), nullptr, same, s, ActType::Float16, nullptr);
    } catch (const KernelError&) {
        swiGluRefused = true;
    }
    check(normRefused && swiGluRefused, "denseGemvRmsNorm and denseGemvSwiGlu refuse y over x");
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

// A 2:4 weight [rows, cols] from rounded Gaussians: in most groups two of the four columns are zeroed (which two
// varies), in some three and in some all four, so the packer's filled positions are exercised too.
std::vector<float> twoFourWeight(int64_t rows, int64_t cols, uint32_t seed, ActType t) {
    std::vector<float> w = roundedGaussian(size_t(rows * cols), seed, t, 0.05f);
    static const int kPairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
    for (int64_t g = 0; g < rows * cols / 4; ++g) {
        float* e = w.data() + 4 * g;
        const int* zeroed = kPairs[(g * 7 + g / 5) % 6];
        e[zeroed[0]] = e[zeroed[1]] = 0.0f;
        if (g % 11 == 3) {   // one non-zero left: zero the first column still set
            int i = 0;
            while (e[i] == 0.0f) ++i;
            e[i] = 0.0f;
        }
        if (g % 13 == 5) e[0] = e[1] = e[2] = e[3] = 0.0f;
    }
    return w;
}

// The packed form of a 2:4 weight on the device; the packer's round trip is checked on the way.
struct PackedOnDevice {
    uint16_t* values = nullptr;
    uint16_t* meta = nullptr;
    Sparse24RowsWeight weight() const { return {values, meta}; }
    ~PackedOnDevice() { cudaFree(values), cudaFree(meta); }
};

void packToDevice(const std::vector<float>& dense, int64_t rows, int64_t cols, ActType t, PackedOnDevice& out,
                  const std::string& tag) {
    std::vector<float> values(size_t(rows * cols / 2));
    std::vector<uint16_t> meta(size_t(rows * cols / 16));
    std::string why;
    const bool packed = packSparse24Rows(dense.data(), rows, cols, values.data(), meta.data(), &why);
    check(packed, (tag + ": packs" + (packed ? "" : " (" + why + ")")).c_str());
    std::vector<float> back(dense.size());
    unpackSparse24Rows(values.data(), meta.data(), rows, cols, back.data());
    check(back == dense, (tag + ": unpacks to the same weight").c_str());
    out.values = upload(values, t);
    out.meta = toDevice(meta);
}

enum class SparseForm { Plain, Norm, SwiGlu, NormSwiGlu };

void testSparse24Gemv(ActType t, const GemvCase& c, SparseForm form, bool bias, bool residual) {
    const bool glu = form == SparseForm::SwiGlu || form == SparseForm::NormSwiGlu;
    const bool withNorm = form == SparseForm::Norm || form == SparseForm::NormSwiGlu;
    const char* kernel = glu ? "sparse24GemvSwiGlu" : withNorm ? "sparse24GemvRmsNorm" : "sparse24Gemv";
    const std::string tag = caseName(kernel, t, c) + (glu && withNorm ? " + RMSNorm" : "") + (bias ? " + bias" : "") +
                            (residual ? " + residual" : "");
    FoldedInputs in = foldedInputs(t, c, glu ? 2 * c.outputs : c.outputs);
    in.weight = twoFourWeight(glu ? 2 * c.outputs : c.outputs, c.inputs, 31, t);
    const DenseGemvShape& s = in.shape;
    const float eps = 1e-5f;
    const size_t yn = size_t(c.rows * c.outputs);
    std::vector<float> ref(yn);
    const float* x = in.x.data() + in.xOffset;
    if (glu)
        denseGemvSwiGluRef(x, withNorm ? in.normWeight.data() : nullptr, eps, in.weight.data(), bias ? in.bias.data() : nullptr,
                           ref.data(), s, t);
    else
        denseGemvRmsNormRef(x, withNorm ? in.normWeight.data() : nullptr, eps, in.weight.data(),
                            bias ? in.bias.data() : nullptr, residual ? in.residual.data() : nullptr, ref.data(), s, t);
    PackedOnDevice packed;
    packToDevice(in.weight, glu ? 2 * c.outputs : c.outputs, c.inputs, t, packed, tag);
    uint16_t *dx = upload(in.x, t), *dr = upload(in.residual, t), *dy = upload(std::vector<float>(yn, 0.0f), t);
    float* db = toDevice(in.bias);
    uint16_t* dg = upload(in.normWeight, t);
    GemvRmsNorm norm;
    norm.weight = dg;
    norm.eps = eps;
    const int64_t launchesBefore = sparse24GemvLaunches();
    if (glu)
        sparse24GemvSwiGlu(dx + in.xOffset, withNorm ? &norm : nullptr, packed.weight(), bias ? db : nullptr, dy, s, t,
                           nullptr);
    else if (withNorm)
        sparse24GemvRmsNorm(dx + in.xOffset, norm, packed.weight(), bias ? db : nullptr, residual ? dr : nullptr, dy, s, t,
                            nullptr);
    else
        sparse24Gemv(dx + in.xOffset, packed.weight(), bias ? db : nullptr, residual ? dr : nullptr, dy, s, t, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (tag + ": ran").c_str());
    check(sparse24GemvLaunches() == launchesBefore + 1, (tag + ": counted one launch").c_str());
    const double tolerance = t == ActType::Float16 ? kGemvNmseFp16 : kGemvNmseBf16;
    const double error = nmse(download(dy, yn, t), ref);
    check(error <= tolerance, (tag + ": matches the reference (nmse " + std::to_string(error) + ")").c_str());
    cudaFree(dx), cudaFree(dr), cudaFree(dy), cudaFree(db), cudaFree(dg);
}

// The device unpack against the CPU one, bit for bit, including a hostile position word that names one column twice.
void testSparse24Unpack(ActType t) {
    const int64_t rows = 37, cols = 4096 + 48;
    const std::string tag = std::string("sparse24UnpackRows ") + actTypeName(t) + " " + std::to_string(rows) + "x" +
                            std::to_string(cols);
    const std::vector<float> w = twoFourWeight(rows, cols, 41, t);
    std::vector<float> values(size_t(rows * cols / 2));
    std::vector<uint16_t> meta(size_t(rows * cols / 16));
    std::string why;
    check(packSparse24Rows(w.data(), rows, cols, values.data(), meta.data(), &why), (tag + ": packs").c_str());
    meta[5] = uint16_t((meta[5] & 0xFFF0u) | 0x5u);   // group 0 of chunk 5: column 1 twice
    std::vector<float> expected(w.size());
    unpackSparse24Rows(values.data(), meta.data(), rows, cols, expected.data());
    uint16_t* dv = upload(values, t);
    uint16_t* dm = toDevice(meta);
    uint16_t* dd = upload(std::vector<float>(w.size(), 7.0f), t);   // every element must be written
    sparse24UnpackRows({dv, dm}, dd, rows, cols, t, nullptr);
    check(cudaDeviceSynchronize() == cudaSuccess, (tag + ": ran").c_str());
    check(download(dd, w.size(), t) == expected, (tag + ": equals the CPU unpack, a column named twice included").c_str());
    cudaFree(dv), cudaFree(dm), cudaFree(dd);
}

void testSparse24Refusals() {
    std::vector<float> values(8 * 24 / 2);
    std::vector<uint16_t> meta(8 * 24 / 16 + 1);
    std::string why;
    const bool oddColumns = packSparse24Rows(std::vector<float>(8 * 24, 0.0f).data(), 8, 24, values.data(), meta.data(), &why);
    check(!oddColumns && why.find("24 columns") != std::string::npos,
          ("packSparse24Rows refuses 24 columns (" + why + ")").c_str());
    std::vector<float> dense(4 * 32, 0.0f);
    dense[2 * 32 + 8] = dense[2 * 32 + 9] = dense[2 * 32 + 11] = 1.0f;   // row 2, group 2: three non-zeros
    std::vector<float> v2(4 * 16);
    std::vector<uint16_t> m2(4 * 2);
    const bool threeKept = packSparse24Rows(dense.data(), 4, 32, v2.data(), m2.data(), &why);
    check(!threeKept && why.find("row 2") != std::string::npos && why.find("columns 8..11") != std::string::npos,
          ("packSparse24Rows refuses three non-zeros in a group and names where (" + why + ")").c_str());
    DenseGemvShape s;
    s.outputs = 8;
    s.inputs = s.xStride = 24;
    s.yStride = 8;
    bool refused = false;
    try {
        sparse24Gemv(reinterpret_cast<void*>(16), {reinterpret_cast<void*>(16), reinterpret_cast<const uint16_t*>(16)},
                     nullptr, nullptr, reinterpret_cast<void*>(16), s, ActType::Float16, nullptr);
    } catch (const KernelError& e) {
        refused = std::string(e.what()).find("multiple of 16") != std::string::npos;
    }
    check(refused, "sparse24Gemv refuses K = 24 (not a multiple of 16)");
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
        const GemvCase foldedCases[] = {
            {1, 300, 4096},          // Llama-2-7B width, 16-byte path, whole batches
            {1, 257, 4096 + 88},     // partial tail batch, odd N
            {1, 131, 1001},          // odd K: scalar path
            {1, 96, 512, 0, true},   // x off a 16-byte boundary: scalar path
            {3, 67, 520, 8},         // strided rows of x
            {8, 33, 264},            // the most rows
        };
        for (ActType t : {ActType::Float16, ActType::BFloat16}) {
            for (const GemvCase& c : foldedCases) {
                testGemvRmsNorm(t, c, false, false);
                testGemvRmsNorm(t, c, true, true);
                testGemvSwiGlu(t, c, true, false);
                testGemvSwiGlu(t, c, false, true);
            }
            testGemvSwiGlu(t, foldedCases[0], true, true);
        }
        testFoldedFormsRefuseOutputOverX();
        const GemvCase sparseCases[] = {
            {1, 257, 1024},          // odd N, whole unrolled batches
            {1, 300, 4096 + 96},     // a partial tail batch
            {1, 96, 512, 0, true},   // x off a 16-byte boundary: x read element by element
            {3, 67, 528, 8},         // strided rows of x
            {4, 129, 11008},         // Llama-2-7B down_proj width
            {8, 33, 256},            // the most rows
        };
        for (ActType t : {ActType::Float16, ActType::BFloat16}) {
            for (const GemvCase& c : sparseCases) {
                testSparse24Gemv(t, c, SparseForm::Plain, false, false);
                testSparse24Gemv(t, c, SparseForm::Plain, true, true);
                testSparse24Gemv(t, c, SparseForm::Norm, true, true);
                testSparse24Gemv(t, c, SparseForm::SwiGlu, true, false);
                testSparse24Gemv(t, c, SparseForm::NormSwiGlu, false, false);
            }
        }
        testSparse24Refusals();
        for (ActType t : {ActType::Float16, ActType::BFloat16}) testSparse24Unpack(t);
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return finish();
}
