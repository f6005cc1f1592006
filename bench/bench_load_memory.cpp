// Memory of opening and running a 7B-parameter bf16 Hugging Face folder: writes a sparse (all-zero,
// no disk blocks) Llama-2-7B-shaped safetensors folder, loads it, runs one token with weights streamed
// block by block, and prints resident memory at each step against the 13.5 GB of weights.
// Run by hand: bench_load_memory [FOLDER] (default /tmp/cwb-sparse-7b; removed afterwards).
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/io/model_format.h"
#include "core/runtime/transformer.h"

namespace {

// VmRSS or VmHWM of this process in MiB.
double statusMiB(const char* key) {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(key, 0) == 0) return std::stod(line.substr(std::strlen(key) + 1)) / 1024.0;
    return -1;
}

void writeSparseLlama7b(const std::string& folder) {
    const int64_t V = 32000, H = 4096, F = 11008, L = 32;
    std::filesystem::create_directories(folder);
    std::ofstream(folder + "/config.json") << nlohmann::json{
        {"model_type", "llama"}, {"hidden_size", H}, {"intermediate_size", F}, {"num_hidden_layers", L},
        {"num_attention_heads", 32}, {"num_key_value_heads", 32}, {"vocab_size", V},
        {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-5}}.dump();
    nlohmann::json header;
    uint64_t offset = 0;
    auto add = [&](const std::string& name, std::vector<int64_t> shape) {
        uint64_t n = 2;
        for (int64_t d : shape) n *= static_cast<uint64_t>(d);
        header[name] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {offset, offset + n}}};
        offset += n;
    };
    add("model.embed_tokens.weight", {V, H});
    for (int64_t l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {H});
        for (const char* m : {"q_proj", "k_proj", "v_proj", "o_proj"}) add(p + "self_attn." + m + ".weight", {H, H});
        add(p + "post_attention_layernorm.weight", {H});
        add(p + "mlp.gate_proj.weight", {F, H});
        add(p + "mlp.up_proj.weight", {F, H});
        add(p + "mlp.down_proj.weight", {H, F});
    }
    add("model.norm.weight", {H});
    add("lm_head.weight", {V, H});
    std::string text = header.dump();
    const std::string path = folder + "/model.safetensors";
    {
        std::ofstream out(path, std::ios::binary);
        uint64_t n = text.size();
        out.write(reinterpret_cast<const char*>(&n), 8);
        out << text;
    }
    std::filesystem::resize_file(path, 8 + text.size() + offset);   // the weights are a hole: zeros, no disk blocks
}

} // namespace

int main(int argc, char** argv) {
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
