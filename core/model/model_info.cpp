#include "core/model/model_info.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

#include "core/model/compressed_linear.h"
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

// Up to 6 significant digits, no trailing zeros ("4", "1.13863").
static std::string formatNumber(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.6g", value);
    return text;
}

static const char* typeName(ggml::Type type) {
    const ggml::TypeTraits* t = ggml::traits(static_cast<uint32_t>(type));
    return t ? t->name : "?";
}

// The compressed layer a tensor is the weight of ("….weight" of a layer held packed), or null.
static std::shared_ptr<const CompressedLinear> compressedWeight(const Model& model, const std::string& name) {
    const std::string suffix = ".weight";
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return nullptr;
    return model.compressed(name.substr(0, name.size() - suffix.size()));
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
                          {"chat_template", nullptr},
                          {"warnings", model.tokenizer->warnings()}};
        const std::string chat = chatTemplateOf(model);
        if (!chat.empty()) j["tokenizer"]["chat_template"] = chat;
    } else
        j["tokenizer"] = nullptr;
    j["metadata"] = model.metadata;
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& name : model.tensorNames()) {
        const TensorRecord& r = model.tensor(name);
        // A packed layer (a GPTQ/AWQ checkpoint) is shown as what it is stored as, not as its dequantized copy.
        if (const auto packed = compressedWeight(model, name))
            tensors.push_back({{"name", name}, {"shape", r.shape}, {"dtype", packed->kind()}, {"bits", packed->bits()},
                               {"compressed", packed->describe()}, {"bytes", packed->storageBytes()}});
        else
            tensors.push_back({{"name", name}, {"shape", r.shape}, {"dtype", typeName(r.storedType())}, {"bytes", r.storedBytes()}});
    }
    j["tensors"] = tensors;
    return j;
}

std::string modelInfoText(const Model& model) {
    std::ostringstream out;
    const ArchSpec& s = model.spec;
    out << "model      " << model.path << " (" << model.format << ")\n";
    // Per-layer shapes (after pruning heads or channels) as a range, not layer 0's.
    const auto perLayer = [&](int64_t (ArchSpec::*at)(int64_t) const) {
        int64_t low = s.layers > 0 ? (s.*at)(0) : 0, high = low;
        for (int64_t l = 1; l < s.layers; ++l) {
            low = std::min(low, (s.*at)(l));
            high = std::max(high, (s.*at)(l));
        }
        return low == high ? std::to_string(low) : std::to_string(low) + "-" + std::to_string(high) + " by layer";
    };
    out << "arch       " << s.modelType << " (" << familyName(s.family) << "): " << s.layers << " layers, hidden "
        << s.hidden << ", heads " << perLayer(&ArchSpec::headsAt) << " (kv " << perLayer(&ArchSpec::kvHeadsAt) << ", dim "
        << s.headDim << "), ffn " << perLayer(&ArchSpec::ffnAt) << ", vocab " << s.vocab << ", context " << s.context << "\n";
    if (s.family == Family::Llama)
        out << "rope       theta " << s.ropeTheta << ", " << (s.ropeStyle == RopeStyle::AdjacentPairs ? "adjacent pairs" : "halves")
            << ", scaling "
            << (s.ropeScaling.type == "none" && model.has("rope_freqs.weight") ? "per-frequency divisors (rope_freqs.weight)"
                : s.ropeScaling.type == "yarn"
                    ? "yarn x" + formatNumber(s.ropeScaling.factor) + " of " + std::to_string(s.ropeScaling.originalContext) +
                          " tokens, attention x" + formatNumber(s.ropeScaling.attentionFactor) +
                          (s.ropeScaling.betaFast != 32.0 || s.ropeScaling.betaSlow != 1.0
                               ? ", betas " + formatNumber(s.ropeScaling.betaFast) + "/" + formatNumber(s.ropeScaling.betaSlow)
                               : std::string()) +
                          (s.ropeScaling.truncate ? "" : ", not truncated")
                    : s.ropeScaling.type)
            << "; norm eps " << s.normEps
            << (s.tiedEmbeddings ? "; tied embeddings" : "") << "\n";
    out << "parameters " << model.parameterCount() << " (" << humanBytes(double(model.storageBytes())) << " stored)\n";
    if (model.tokenizer) {
        const std::string chat = chatTemplateOf(model);
        out << "tokenizer  " << model.tokenizer->kind() << ", " << model.tokenizer->vocabSize() << " tokens, bos "
            << model.tokenizer->bos() << ", eos " << model.tokenizer->eos()
            << (chat.empty() ? std::string() : ", chat template (" + std::to_string(chat.size()) + " bytes)") << "\n";
        for (const auto& w : model.tokenizer->warnings()) out << "warning    " << w << "\n";
    }
    else
        out << "tokenizer  none found\n";
    out << "\n";
    struct Row { std::string name, shape, dtype; size_t bytes; };
    std::vector<Row> rows;
    size_t dtypeWidth = 6;
    for (const auto& name : model.tensorNames()) {
        const TensorRecord& r = model.tensor(name);
        std::string shape;
        for (size_t i = 0; i < r.shape.size(); ++i) shape += (i ? " x " : "") + std::to_string(r.shape[i]);
        const auto packed = compressedWeight(model, name);
        rows.push_back({name, shape, packed ? packed->describe() : typeName(r.storedType()), packed ? packed->storageBytes() : r.storedBytes()});
        dtypeWidth = std::max(dtypeWidth, rows.back().dtype.size());
    }
    char line[512];
    const int w = int(std::min<size_t>(dtypeWidth, 120));
    std::snprintf(line, sizeof line, "%-48s %-20s %-*s %12s\n", "tensor", "shape", w, "dtype", "bytes");
    out << line;
    for (const auto& r : rows) {
        std::snprintf(line, sizeof line, "%-48s %-20s %-*s %12zu\n", r.name.c_str(), r.shape.c_str(), w, r.dtype.c_str(), r.bytes);
        out << line;
    }
    return out.str();
}

} // namespace cwb
