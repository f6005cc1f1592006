// GPU test (plain executable, CTest label `gpu`): the activation quantization kernels behind the native FP8 and W8A8
// layers give exactly the codes and scales of the core's quantization on the CPU, i.e. of the CPU path they must
// reproduce: quant::quantizeFp8PerToken(x) and quant::quantizeInt8PerToken(x / s) in float32, for fp16 and bf16
// rows with outliers. The LibTorch ops on CUDA that these kernels replace are compared too, for information only
// (LibTorch divides by a scalar on CUDA as a multiplication by its reciprocal, so a few codes may differ there).
// Exits 77 without a GPU or without the kernels in the build.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <cstdio>
#include <string>

#include "core/compress/fp8_math.h"
#include "core/compress/smoothquant_math.h"
#include "core/runtime/cuda_linear.h"
#include "cwb/kernels/act_quant.h"
#include "tests/gpu/gpu_check.h"

using cwb::testing::check;

namespace {

cwb::kernels::ActType actType(at::ScalarType t) {
    return t == at::kHalf ? cwb::kernels::ActType::Float16 : cwb::kernels::ActType::BFloat16;
}

// Gaussian activations with every 97th value 40 times larger, one all-zero row, in the compute type.
at::Tensor activations(int64_t rows, int64_t cols, at::ScalarType dtype) {
    at::Tensor x = at::randn({rows, cols});
    x.view({-1}).index({at::indexing::Slice(0, at::indexing::None, 97)}).mul_(40.0);
    if (rows > 1) x[1].zero_();
    return x.to(dtype);
}

int64_t differing(const at::Tensor& a, const at::Tensor& b) { return a.ne(b).sum().item<int64_t>(); }

void fp8Case(int64_t rows, int64_t cols, at::ScalarType dtype) {
    const std::string tag = "FP8 " + std::to_string(rows) + "x" + std::to_string(cols) + " " + c10::toString(dtype) + ": ";
    const at::Tensor x = activations(rows, cols, dtype);
    at::Tensor codes, scales;
    cwb::quant::quantizeFp8PerToken(x.to(at::kFloat), codes, scales);   // the CPU path's arithmetic
    const at::Tensor xd = x.to(at::kCUDA);
    at::Tensor gpuCodes = at::empty({rows, cols}, xd.options().dtype(at::kByte));
    at::Tensor gpuScales = at::empty({rows}, xd.options().dtype(at::kFloat));
    cwb::kernels::quantizeRowsFp8(xd.data_ptr(), actType(dtype), rows, cols, gpuCodes.data_ptr<uint8_t>(),
                                  gpuScales.data_ptr<float>(), nullptr);
    const int64_t codeDiff = differing(codes, gpuCodes.cpu()), scaleDiff = differing(scales, gpuScales.cpu());
    std::printf("  %s%lld codes, %lld scales differ from quant::quantizeFp8PerToken on the CPU\n", tag.c_str(),
                (long long)codeDiff, (long long)scaleDiff);
    check(codeDiff == 0 && scaleDiff == 0, tag + "kernel codes and scales equal the core's on the CPU");
    at::Tensor torchCodes, torchScales;
    cwb::quant::quantizeFp8PerToken(xd.to(at::kFloat), torchCodes, torchScales);
    std::printf("  (LibTorch ops on CUDA: %lld codes, %lld scales differ from the CPU)\n",
                (long long)differing(codes, torchCodes.cpu()), (long long)differing(scales, torchScales.cpu()));
}

void int8Case(int64_t rows, int64_t cols, at::ScalarType dtype) {
    const std::string tag = "int8 of x / s " + std::to_string(rows) + "x" + std::to_string(cols) + " " + c10::toString(dtype) + ": ";
    const at::Tensor x = activations(rows, cols, dtype);
    const at::Tensor s = at::rand({cols}) * 1.5 + 0.5;
    at::Tensor codes, scales;
    cwb::quant::quantizeInt8PerToken(x.to(at::kFloat) / s, codes, scales);
    const at::Tensor xd = x.to(at::kCUDA), sd = s.to(at::kCUDA);
    at::Tensor gpuCodes = at::empty({rows, cols}, xd.options().dtype(at::kChar));
    at::Tensor gpuScales = at::empty({rows}, xd.options().dtype(at::kFloat));
    cwb::kernels::quantizeRowsInt8Divided(xd.data_ptr(), actType(dtype), sd.data_ptr<float>(), rows, cols,
                                          gpuCodes.data_ptr<int8_t>(), gpuScales.data_ptr<float>(), nullptr);
    const int64_t codeDiff = differing(codes, gpuCodes.cpu()), scaleDiff = differing(scales, gpuScales.cpu());
    std::printf("  %s%lld codes, %lld scales differ from quant::quantizeInt8PerToken(x / s) on the CPU\n", tag.c_str(),
                (long long)codeDiff, (long long)scaleDiff);
    check(codeDiff == 0 && scaleDiff == 0, tag + "kernel codes and scales equal the core's on the CPU");
}

} // namespace

int main() {
    if (!at::hasCUDA()) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    if (!cwb::nativeKernelsBuilt()) {
        std::printf("SKIP: this build has no CUDA kernels (CWB_CUDA off)\n");
        return 77;
    }
    try {
        at::manual_seed(5);
        for (auto dtype : {at::kHalf, at::kBFloat16})
            for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 4096}, {16, 11008}, {128, 4096}}) {
                fp8Case(rows, cols, dtype);
                int8Case(rows, cols, dtype);
            }
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return cwb::testing::finishChecks();
}
