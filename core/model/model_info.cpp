#include "core/model/model_info.h"

#include <cstdio>
#include <sstream>

#include "core/model/model.h"
#include "core/tokenizer/tokenizer.h"

namespace cwb {

std::string humanBytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
    return buf;
}

static const char* typeName(ggml::Type type) {
    const ggml::TypeTraits* t = ggml::traits(static_cast<uint32_t>(type));
    return t ? t->name : "?";
}

static std::string chatTemplateOf(const Model& model) {
    const auto vocabulary = model.tokenizer ? model.tokenizer->vocabulary() : nullptr;
    return vocabulary ? vocabulary->chatTemplate : std::string();
}

nlohmann::json modelInfoJson(const Model& model) {
    nlohmann::json j;
    j["path"] = model.path;
    j["format"] = model.format;
    j["architecture"] = model.spec;
    j["parameters"] = model.parameterCount();
    j["bytes"] = model.storageBytes();
    if (model.tokenizer) {
        j["tokenizer"] = {{"kind", model.tokenizer->kind()},
                          {"vocab", model.tokenizer->vocabSize()},
                          {"bos", model.tokenizer->bos()},
                          {"eos", model.tokenizer->eos()},
                          {"chat_template", nullptr}};
        const std::string chat = chatTemplateOf(model);
        if (!chat.empty()) j["tokenizer"]["chat_template"] = chat;
    } else
        j["tokenizer"] = nullptr;
    j["metadata"] = model.metadata;
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& name : model.tensorNames()) {
        const TensorRecord& r = model.tensor(name);
        tensors.push_back({{"name", name}, {"shape", r.shape}, {"dtype", typeName(r.type)}, {"bytes", r.bytes}});
    }
    j["tensors"] = tensors;
    return j;
}

std::string modelInfoText(const Model& model) {
    std::ostringstream out;
    const ArchSpec& s = model.spec;
    out << "model      " << model.path << " (" << model.format << ")\n";
    out << "arch       " << s.modelType << " (" << familyName(s.family) << "): " << s.layers << " layers, hidden "
        << s.hidden << ", heads " << s.heads << " (kv " << s.kvHeads << ", dim " << s.headDim << "), ffn " << s.ffn
        << ", vocab " << s.vocab << ", context " << s.context << "\n";
    if (s.family == Family::Llama)
        out << "rope       theta " << s.ropeTheta << ", " << (s.ropeStyle == RopeStyle::AdjacentPairs ? "adjacent pairs" : "halves")
            << ", scaling " << s.ropeScaling.type << "; norm eps " << s.normEps
            << (s.tiedEmbeddings ? "; tied embeddings" : "") << "\n";
    out << "parameters " << model.parameterCount() << " (" << humanBytes(double(model.storageBytes())) << " stored)\n";
    if (model.tokenizer) {
        const std::string chat = chatTemplateOf(model);
        out << "tokenizer  " << model.tokenizer->kind() << ", " << model.tokenizer->vocabSize() << " tokens, bos "
            << model.tokenizer->bos() << ", eos " << model.tokenizer->eos()
            << (chat.empty() ? std::string() : ", chat template (" + std::to_string(chat.size()) + " bytes)") << "\n";
    }
    else
        out << "tokenizer  none found\n";
    out << "\n";
    char line[512];
    std::snprintf(line, sizeof line, "%-48s %-20s %-6s %12s\n", "tensor", "shape", "dtype", "bytes");
    out << line;
    for (const auto& name : model.tensorNames()) {
        const TensorRecord& r = model.tensor(name);
        std::string shape;
        for (size_t i = 0; i < r.shape.size(); ++i) shape += (i ? " x " : "") + std::to_string(r.shape[i]);
        std::snprintf(line, sizeof line, "%-48s %-20s %-6s %12zu\n", name.c_str(), shape.c_str(), typeName(r.type), r.bytes);
        out << line;
    }
    return out.str();
}

} // namespace cwb
