// Memory of opening and running a 7B-parameter bf16 Hugging Face folder: writes a sparse (all-zero,
// no disk blocks) Llama-2-7B-shaped safetensors folder, loads it, runs one token with weights streamed
// block by block, and prints resident memory at each step against the 13.5 GB of weights.
// Run by hand: bench_load_memory [FOLDER] (default /tmp/cwb-sparse-7b; removed afterwards).
// bench_load_memory --packed CHECKPOINT: resident memory of loading a packed checkpoint (GPTQ, AWQ or compressed-tensors
// folder, kept), then of adding the float32 copy of its packed layers that the loaders held until session 36.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/sparse_llama.h"
#include "core/io/model_format.h"
#include "core/model/compressed_linear.h"
#include "core/runtime/transformer.h"

using cwb::bench::statusMiB;
using cwb::bench::writeSparseLlama7b;

namespace {

std::string residentText() {
    static char buf[128];
    std::snprintf(buf, sizeof buf, "RSS %6.0f MiB (anon %6.0f, file-backed %6.0f)", statusMiB("VmRSS:"), statusMiB("RssAnon:"),
                  statusMiB("RssFile:"));
    return buf;
}

int packedCheckpoint(const std::string& folder) {
    std::printf("baseline             %s\n", residentText().c_str());
    const double before = statusMiB("RssAnon:");
    auto t0 = std::chrono::steady_clock::now();
    auto model = cwb::loadModel(folder);
    const double loadSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    size_t packed = 0, dense = 0;
    for (const auto& layer : model->linearLayers())
        if (auto linear = model->compressed(layer)) {
            packed += linear->storageBytes();
            dense += size_t(linear->rows() * linear->cols()) * 4;
        }
    const double loaded = statusMiB("RssAnon:");
    std::printf("after load           %s  (%.1f s; packed layers %.0f MiB, their float32 copy would be %.0f MiB)\n",
                residentText().c_str(), loadSeconds, double(packed) / (1 << 20), double(dense) / (1 << 20));
    std::vector<at::Tensor> copies;   // what the loaders kept before: each packed layer also as a float32 weight
    for (const auto& layer : model->linearLayers())
        if (model->compressed(layer)) copies.push_back(model->floatTensor(layer + ".weight"));
    const double withCopies = statusMiB("RssAnon:");
    std::printf("with float32 copies  %s\n", residentText().c_str());
    std::printf("anonymous memory of the load: %.0f MiB packed only, %.0f MiB with the float32 copies (%.1fx)\n",
                loaded - before, withCopies - before, (withCopies - before) / std::max(1.0, loaded - before));
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    if (argc > 2 && std::string(argv[1]) == "--packed") {
        try {
            return packedCheckpoint(argv[2]);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "error: %s\n", e.what());
            return 2;
        }
    }
    const std::string folder = argc > 1 ? argv[1] : "/tmp/cwb-sparse-7b";
    try {
        writeSparseLlama7b(folder);
        // RssAnon is memory the process owns; RssFile counts mapped weight pages, which the kernel can drop.
        auto rss = [] {
            static char buf[128];
            std::snprintf(buf, sizeof buf, "RSS %6.0f MiB (anon %6.0f, file-backed %6.0f)", statusMiB("VmRSS:"),
                          statusMiB("RssAnon:"), statusMiB("RssFile:"));
            return buf;
        };
        std::printf("baseline             %s\n", rss());
        auto t0 = std::chrono::steady_clock::now();
        auto model = cwb::loadModel(folder);
        const double loadSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double weightsMiB = double(model->storageBytes()) / (1 << 20);
        std::printf("after load           %s  (%.2f s; %lld parameters, %.0f MiB of bf16 weights mapped)\n",
                    rss(), loadSeconds, static_cast<long long>(model->parameterCount()), weightsMiB);
        cwb::RuntimeOptions streaming;
        streaming.cacheWeights = false;
        cwb::Transformer runtime(*model, streaming);
        std::printf("runtime created      %s  (embedding and head converted to fp32)\n", rss());
        t0 = std::chrono::steady_clock::now();
        at::Tensor logits = runtime.forward(at::ones({1, 1}, at::kLong));
        const double forwardSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double peak = statusMiB("VmHWM:");
        std::printf("after one token      %s, peak RSS %.0f MiB  (%.1f s, logits %lld)\n", rss(), peak,
                    forwardSeconds, static_cast<long long>(logits.size(2)));
        std::printf("peak / bf16 weights  %.2f   peak / fp32 weights %.2f\n", peak / weightsMiB, peak / (2 * weightsMiB));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        std::filesystem::remove_all(folder);
        return 2;
    }
    std::filesystem::remove_all(folder);
    return 0;
}
