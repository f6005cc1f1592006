#include "core/model/arch_spec.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/util/error.h"

namespace cwb {

const char* familyName(Family family) { return family == Family::Gpt2 ? "gpt2" : "llama"; }

void ArchSpec::makeLayerShapesExplicit() {
    if (!layerShapes.empty()) return;
    layerShapes.assign(static_cast<size_t>(layers), LayerShape{heads, kvHeads, ffn});
}

std::string ArchSpec::contextLimitNote() const {
    return slidingWindow > 0 && slidingWindow == context
               ? " (its sliding_window: attention over a sliding window is not computed, so inputs are limited to one)"
               : "";
}

void ArchSpec::validate(const std::string& source) const {
    // Bounds far above any real model but low enough that products of them cannot overflow int64.
    auto check = [&](const char* what, int64_t value, int64_t maxValue) {
        if (value <= 0 || value > maxValue)
            throw Error(source, std::string("invalid ") + what + " = " + std::to_string(value) +
                                    " (expected 1.." + std::to_string(maxValue) + ")");
    };
    check("layer count", layers, 4096);
    check("hidden size", hidden, 1 << 20);
    check("head count", heads, 1 << 14);
    check("kv head count", kvHeads, 1 << 14);
    check("head dimension", headDim, 1 << 14);
    check("feed-forward size", ffn, 1 << 22);
    check("vocabulary size", vocab, 1 << 24);
    check("context length", context, int64_t(1) << 31);
    if (!layerShapes.empty() && static_cast<int64_t>(layerShapes.size()) != layers)
        throw Error(source, "per-layer sizes list " + std::to_string(layerShapes.size()) + " layers, the model has " +
                                std::to_string(layers));
    for (const auto& l : layerShapes)
        if (l.heads <= 0 || l.kvHeads <= 0 || l.ffn <= 0 || l.heads % l.kvHeads != 0)
            throw Error(source, "invalid per-layer sizes (heads " + std::to_string(l.heads) + ", kv heads " +
                                    std::to_string(l.kvHeads) + ", ffn " + std::to_string(l.ffn) + ")");
    if (heads % kvHeads != 0)
        throw Error(source, "head count " + std::to_string(heads) + " is not a multiple of the kv head count " +
                                std::to_string(kvHeads));
    if (family == Family::Llama && headDim % 2 != 0)
        throw Error(source, "head dimension " + std::to_string(headDim) + " must be even for RoPE");
    if (!(normEps > 0 && normEps < 1)) throw Error(source, "invalid norm epsilon " + std::to_string(normEps));
    if (family == Family::Llama && !(ropeTheta > 0)) throw Error(source, "invalid rope theta");
}

void to_json(nlohmann::json& j, const ArchSpec& s) {
    j = nlohmann::json{{"family", familyName(s.family)},
                       {"model_type", s.modelType},
                       {"layers", s.layers},
                       {"hidden", s.hidden},
                       {"heads", s.heads},
                       {"kv_heads", s.kvHeads},
                       {"head_dim", s.headDim},
                       {"ffn", s.ffn},
                       {"vocab", s.vocab},
                       {"context", s.context},
                       {"norm_eps", s.normEps},
                       {"tied_embeddings", s.tiedEmbeddings}};
    if (!s.layerShapes.empty()) {
        nlohmann::json layers = nlohmann::json::array();
        for (const auto& l : s.layerShapes) layers.push_back({{"heads", l.heads}, {"kv_heads", l.kvHeads}, {"ffn", l.ffn}});
        j["layer_shapes"] = layers;
    }
    if (s.family == Family::Llama) {
        j["rope_theta"] = s.ropeTheta;
        j["rope_style"] = s.ropeStyle == RopeStyle::AdjacentPairs ? "adjacent-pairs" : "halves";
        j["rope_scaling"] = s.ropeScaling.type;
        if (s.ropeScaling.type != "none") j["rope_scaling_factor"] = s.ropeScaling.factor;
        if (s.ropeScaling.type == "yarn") {
            j["rope_original_context"] = s.ropeScaling.originalContext;
            j["rope_attention_factor"] = s.ropeScaling.attentionFactor;
            j["rope_beta_fast"] = s.ropeScaling.betaFast;
            j["rope_beta_slow"] = s.ropeScaling.betaSlow;
            j["rope_truncate"] = s.ropeScaling.truncate;
        }
        j["attention_bias"] = s.attentionBias;
    }
}

double yarnMscale(double factor, double mscale) { return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0; }

} // namespace cwb
