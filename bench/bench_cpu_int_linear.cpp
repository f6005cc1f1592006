// One integer layer on the CPU: the packed-level kernel (core/runtime/cpu_int_linear.h) against the dense float
// product it replaces (at::linear of the dequantized weight, which the runtime used to hold), at 1 to 512 input rows.
// Run by hand:
//   bench_cpu_int_linear [--threads N] [--bits 4|8] [--group G] [--shape KxN]
// Each figure is the median of 7 calls after one warm-up call; the last column is dense time over packed time.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/compress/quant_math.h"
#include "core/runtime/cpu_int_linear.h"

namespace {

double medianMs(const std::function<void()>& call) {
    call();
    std::vector<double> t;
    for (int i = 0; i < 7; ++i) {
        const auto start = std::chrono::steady_clock::now();
        call();
        t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
    int threads = 0, bits = 4;
    int64_t group = 128, k = 4096, n = 11008;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i], value = argv[i + 1];
        if (flag == "--threads") threads = std::atoi(value.c_str());
        else if (flag == "--bits") bits = std::atoi(value.c_str());
        else if (flag == "--group") group = std::atoll(value.c_str());
        else if (long long kk = 0, nn = 0; flag == "--shape" && std::sscanf(value.c_str(), "%lldx%lld", &kk, &nn) == 2) {
            k = kk;
            n = nn;
        }
        else {
            std::fprintf(stderr, "usage: bench_cpu_int_linear [--threads N] [--bits 4|8] [--group G] [--shape KxN]\n");
            return 2;
        }
    }
    if (threads > 0) at::set_num_threads(threads);
    at::manual_seed(1);
    const cwb::quant::QuantizedWeight q = cwb::quant::quantizeRtn(at::randn({n, k}), {bits, false, group});
    std::string reason;
    auto packed = cwb::makeCpuIntLinear(q, at::Tensor(), reason);
    if (!packed) {
        std::fprintf(stderr, "no kernel: %s\n", reason.c_str());
        return 1;
    }
    const at::Tensor dense = q.dequantize();
    std::printf("INT%d g%lld, K x N = %lld x %lld, %d threads; packed %.1f MB, dense float %.1f MB\n", bits,
                (long long)group, (long long)k, (long long)n, at::get_num_threads(), double(packed->deviceBytes()) / 1e6,
                double(dense.nbytes()) / 1e6);
    std::printf("| rows | dense ms | packed ms | dense / packed |\n| ---: | ---: | ---: | ---: |\n");
    for (int64_t m : {1, 4, 8, 32, 128, 512}) {
        const at::Tensor x = at::randn({m, k});
        const double d = medianMs([&] { at::linear(x, dense); });
        const double p = medianMs([&] { packed->forward(x); });
        std::printf("| %lld | %.2f | %.2f | %.2fx |\n", (long long)m, d, p, d / p);
    }
    return 0;
}
