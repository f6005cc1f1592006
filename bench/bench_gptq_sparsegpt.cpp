// GPTQ and SparseGPT on one 4096×4096 layer on the CPU: a real Hessian from random correlated activations,
// then each method timed, with its output error against round-to-nearest / magnitude pruning. Run by hand:
//   bench_gptq_sparsegpt [--size N] [--samples S] [--threads T]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/compress/gptq_math.h"
#include "core/compress/prune_math.h"
#include "core/compress/quant_math.h"
#include "core/compress/sparsegpt_math.h"

namespace {

double seconds(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ‖(W − Ŵ) Xᵀ‖² / ‖W Xᵀ‖², relative output error on the calibration rows.
double outputError(const at::Tensor& w, const at::Tensor& approx, const at::Tensor& x) {
    return (at::matmul(x, (w - approx).t()).pow(2).sum() / at::matmul(x, w.t()).pow(2).sum()).item<double>();
}

} // namespace

int main(int argc, char** argv) {
    int64_t n = 4096, samples = 4096;
    int threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--size")) n = std::atoll(argv[i + 1]);
        if (!std::strcmp(argv[i], "--samples")) samples = std::atoll(argv[i + 1]);
        if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    }
    if (threads > 0) at::set_num_threads(threads);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
    // Correlated activations: a random mixing of independent channels with a few loud ones, as in real LLMs.
    at::Tensor mix = at::randn({n, n}, gen) / std::sqrt(double(n));
    at::Tensor scale = at::ones({n});
    scale.narrow(0, 0, n / 64).mul_(20.0);
    at::Tensor x = at::matmul(at::randn({samples, n}, gen) * scale, mix);
    at::Tensor w = at::randn({n, n}, gen) * 0.02;
    std::printf("layer %lld x %lld, %lld calibration rows, %d threads\n", static_cast<long long>(n), static_cast<long long>(n),
                static_cast<long long>(samples), at::get_num_threads());

    auto t0 = std::chrono::steady_clock::now();
    cwb::quant::HessianAccumulator acc(n);
    for (int64_t s = 0; s < samples; s += 512) acc.add(x.narrow(0, s, std::min<int64_t>(512, samples - s)));
    at::Tensor h = acc.hessian();
    std::printf("Hessian accumulation      %8.2f s\n", seconds(t0));

    cwb::quant::GptqOptions g;
    g.quant.bits = 4;
    g.quant.groupSize = 128;
    t0 = std::chrono::steady_clock::now();
    cwb::quant::GptqResult gptq = cwb::quant::gptqQuantize(w, h, g);
    const double gptqSeconds = seconds(t0);
    at::Tensor rtn = cwb::quant::quantizeRtn(w, g.quant).dequantize();
    const double gptqError = outputError(w, gptq.weight.dequantize(), x), rtnError = outputError(w, rtn, x);
    std::printf("GPTQ w4 g128              %8.2f s   output error %.3e (RTN %.3e, ratio %.2f)\n", gptqSeconds, gptqError,
                rtnError, gptqError / rtnError);

    cwb::prune::SparseGptOptions sp;
    sp.sparsity = 0.5;
    t0 = std::chrono::steady_clock::now();
    cwb::prune::SparseGptResult sparse = cwb::prune::sparseGpt(w, h, sp);
    const double sparseSeconds = seconds(t0);
    at::Tensor magnitude = w * cwb::prune::magnitudeMask(w, 0.5);
    const double sparseError = outputError(w, sparse.weight, x), magnitudeError = outputError(w, magnitude, x);
    std::printf("SparseGPT 50%%             %8.2f s   output error %.3e (magnitude %.3e, ratio %.2f)\n", sparseSeconds,
                sparseError, magnitudeError, sparseError / magnitudeError);
    return 0;
}
