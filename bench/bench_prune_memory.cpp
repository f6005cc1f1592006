// Memory of pruning a model from its memory-mapped files, with and without a scratch file for the variant.
// Writes a Llama-2-7B-shaped bf16 folder whose weights are a file hole, prunes every block linear to 50% with a
// global magnitude threshold (two streaming passes, then one to prune), and samples the process's anonymous
// memory (RssAnon: what cannot be paged out) every 2 ms on a thread of its own. Each mode runs in its own process
// so one's peak cannot hide the other's.
// Run by hand: bench_prune_memory [--blocks N (default 32)] [--folder DIR] [--scratch DIR (default /var/tmp)]
// [--modes memory,scratch].
// Run it inside a memory cgroup smaller than the model to see the in-memory mode fail and the scratch mode finish.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "bench/sparse_llama.h"
#include "core/compress/pipeline.h"
#include "core/io/model_format.h"
#include "core/util/feedback.h"
#include "core/util/scratch_file.h"

namespace {

struct Options {
    int64_t blocks = 32;
    std::string folder = "/tmp/cwb-prune-7b";
    std::string scratch = "/var/tmp";
    std::string mode;   // "memory" or "scratch": run one mode (the child processes)
    std::string modes = "memory,scratch";   // which modes the parent runs
};

int runMode(const Options& o) {
    using cwb::bench::statusMiB;
    auto base = cwb::loadModel(o.folder);
    if (o.mode == "scratch") base->setScratch(cwb::ScratchFile::create(o.scratch));
    const double weightsMiB = double(base->storageBytes()) / (1 << 20);
    std::atomic<bool> done{false};
    double peakAnon = statusMiB("RssAnon:");
    std::thread sampler([&] {
        while (!done) {
            peakAnon = std::max(peakAnon, statusMiB("RssAnon:"));
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    });
    cwb::CallbackFeedback feedback;
    const cwb::Recipe recipe = cwb::Recipe::fromJson(
        nlohmann::json::parse(R"({"steps":[{"method":"prune.magnitude","params":{"sparsity":0.5,"scope":"global"}}]})"), "bench");
    const auto t0 = std::chrono::steady_clock::now();
    cwb::CompressionResult result;
    try {
        result = cwb::compressModel(*base, recipe, at::Tensor(), &feedback);
    } catch (...) {
        done = true;
        sampler.join();
        throw;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    done = true;
    sampler.join();
    const double scratchMiB = base->scratch() ? double(base->scratch()->bytesStored()) / (1 << 20) : 0.0;
    std::printf("| %s | %lld | %.0f | %.0f | %.2f | %.0f | %.0f | %.0f |\n", o.mode.c_str(),
                static_cast<long long>(base->spec.layers), weightsMiB, peakAnon, peakAnon / weightsMiB, scratchMiB,
                statusMiB("VmHWM:"), seconds);
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string key = argv[i], value = argv[i + 1];
        if (key == "--blocks") o.blocks = std::stoll(value);
        else if (key == "--folder") o.folder = value;
        else if (key == "--scratch") o.scratch = value;
        else if (key == "--mode") o.mode = value;
        else if (key == "--modes") o.modes = value;
        else {
            std::fprintf(stderr, "unknown option %s\n", key.c_str());
            return 2;
        }
    }
    try {
        if (!o.mode.empty()) return runMode(o);
        cwb::bench::writeSparseLlama7b(o.folder, o.blocks);
        std::printf("Global magnitude pruning to 50%% of every block linear of a Llama-2-7B-shaped bf16 model with %lld "
                    "blocks, loaded memory-mapped. Peak anonymous memory sampled every 2 ms.\n\n",
                    static_cast<long long>(o.blocks));
        std::printf("| variant tensors in | blocks | bf16 weights (MiB) | peak RssAnon (MiB) | peak anon / weights | "
                    "scratch file (MiB) | peak RSS incl. mapped pages (MiB) | seconds |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        std::fflush(stdout);
        int rc = 0;
        for (const char* mode : {"memory", "scratch"}) {
            if (o.modes.find(mode) == std::string::npos) continue;
            const std::string command = std::string(argv[0]) + " --mode " + mode + " --folder '" + o.folder +
                                        "' --scratch '" + o.scratch + "'";
            const int status = std::system(command.c_str());
            if (status != 0) {   // e.g. killed by the OOM killer under a memory limit smaller than the model
                std::printf("| %s | %lld | | did not finish (wait status %d) | | | | |\n", mode,
                            static_cast<long long>(o.blocks), status);
                std::fflush(stdout);
                rc = 1;
            }
        }
        std::filesystem::remove_all(o.folder);
        return rc == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        std::filesystem::remove_all(o.folder);
        return 2;
    }
}
