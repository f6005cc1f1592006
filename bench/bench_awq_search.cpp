// Memory and time of AWQ's scale search on one head-shaped layer (bf16 weights [rows, in], float inputs
// [samples, in]), searched in slices of rows (the default) against one slice of the whole layer (before the
// slices). Each mode runs in its own process, so one's peak cannot hide the other's; the peak counts what the
// search adds to the weights and inputs already held.
// Run by hand: bench_awq_search [--rows 32000] [--in 1024] [--samples 2048] [--grid 4]
// On the CPU (float64 search), where the peak is this process's RSS.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/sparse_llama.h"
#include "core/compress/awq_math.h"

namespace {

struct Options {
    int64_t rows = 32000, in = 1024, samples = 2048;
    int grid = 4;
    std::string mode;   // "sliced" or "whole": run one mode (the child processes)
};

int runMode(const Options& o) {
    using cwb::bench::statusMiB;
    at::manual_seed(1);
    const at::Tensor weights = at::randn({o.rows, o.in}).to(at::kBFloat16);
    at::Tensor inputs = at::randn({o.samples, o.in});
    inputs.narrow(1, 0, 8).mul_(30);   // a few salient channels, as real activations have
    // The weights were made in float32 first: reset the peak to what is held now (Linux: "5" clears VmHWM).
    if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
        std::fputs("5", f);
        std::fclose(f);
    }
    const double heldMiB = statusMiB("VmRSS:");
    cwb::quant::AwqOptions options;
    options.quant = {4, false, 128};
    options.grid = o.grid;
    if (o.mode == "whole") options.sliceWeights = o.rows * o.in;
    const auto t0 = std::chrono::steady_clock::now();
    const cwb::quant::AwqResult r = cwb::quant::awqSearch(weights, inputs, options);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("| %s | %.0f | %.0f | %.0f | %.2f | %.6g | %.1f |\n", o.mode.c_str(), heldMiB, statusMiB("VmHWM:"),
                statusMiB("VmHWM:") - heldMiB, r.alpha, r.bestError, seconds);
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string key = argv[i], value = argv[i + 1];
        if (key == "--rows") o.rows = std::stoll(value);
        else if (key == "--in") o.in = std::stoll(value);
        else if (key == "--samples") o.samples = std::stoll(value);
        else if (key == "--grid") o.grid = std::stoi(value);
        else if (key == "--mode") o.mode = value;
        else {
            std::fprintf(stderr, "unknown option %s\n", key.c_str());
            return 2;
        }
    }
    try {
        if (!o.mode.empty()) return runMode(o);
        std::printf("AWQ scale search, INT4 g128, %d candidates, on bf16 weights [%lld, %lld] and %lld input rows, on the CPU (float64).\n"
                    "Peak RSS counts the whole process; \"added\" is the peak above what was held before the search.\n\n",
                    o.grid, static_cast<long long>(o.rows), static_cast<long long>(o.in),
                    static_cast<long long>(o.samples));
        std::printf("| search | RSS before (MiB) | peak RSS (MiB) | added (MiB) | alpha | error | seconds |\n"
                    "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        std::fflush(stdout);
        int rc = 0;
        for (const char* mode : {"sliced", "whole"}) {
            const std::string command = std::string(argv[0]) + " --mode " + mode + " --rows " + std::to_string(o.rows) +
                                        " --in " + std::to_string(o.in) + " --samples " + std::to_string(o.samples) +
                                        " --grid " + std::to_string(o.grid);
            if (std::system(command.c_str()) != 0) {
                std::printf("| %s | | did not finish | | | | |\n", mode);
                rc = 1;
            }
            std::fflush(stdout);
        }
        return rc;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
}
