#pragma once
// Shared by the memory benches: a Llama-2-7B-shaped bf16 safetensors folder whose weights are a file hole (all
// zeros, no disk blocks), and the process's memory as /proc/self/status reports it.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cwb::bench {

// VmRSS, VmHWM, RssAnon or RssFile of this process in MiB (-1 when absent).
inline double statusMiB(const char* key) {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(key, 0) == 0) return std::stod(line.substr(std::strlen(key) + 1)) / 1024.0;
    return -1;
}

// Llama-2-7B shapes (hidden 4096, ffn 11008, vocab 32000) with `blocks` blocks (32 in the real model).
inline void writeSparseLlama7b(const std::string& folder, int64_t blocks = 32) {
    const int64_t V = 32000, H = 4096, F = 11008, L = blocks;
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


} // namespace cwb::bench
