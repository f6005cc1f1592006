#pragma once
// The architecture of a loaded model in one plain struct: everything the runtime needs to run it,
// whatever file format it came from.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace cwb {

enum class Family { Llama, Gpt2 };

// How RoPE pairs the dimensions of a head. Meta/GGUF-llama/llama2.c rotate adjacent pairs (0,1),(2,3)...;
// Hugging Face Llama checkpoints and Qwen2 rotate the two halves (i, i + d/2) ("neox" style).
enum class RopeStyle { AdjacentPairs, Halves };

struct RopeScaling {
    std::string type = "none";        // "none", "linear", "llama3", "yarn"
    double factor = 1.0;
    double lowFreqFactor = 1.0;       // llama3
    double highFreqFactor = 4.0;      // llama3
    int64_t originalContext = 8192;   // llama3, yarn: original_max_position_embeddings
    // yarn (Peng et al. 2023, "YaRN"): frequencies between the correction dimensions of beta_fast and beta_slow
    // rotations blend interpolation and extrapolation; cos and sin are multiplied by attentionFactor.
    double betaFast = 32.0;
    double betaSlow = 1.0;
    double attentionFactor = 1.0;     // resolved at load: attention_factor, or from mscale / mscale_all_dim, or 0.1 ln(factor) + 1
    bool truncate = true;             // correction range rounded outwards to whole dimensions
};

// 0.1 · mscale · ln(factor) + 1 (1 for factor <= 1): YaRN's attention temperature correction.
double yarnMscale(double factor, double mscale = 1.0);

// Per-layer sizes after structured pruning (heads or MLP channels removed in some layers only).
struct LayerShape {
    int64_t heads = 0;
    int64_t kvHeads = 0;
    int64_t ffn = 0;
};

struct ArchSpec {
    Family family = Family::Llama;
    std::string modelType;            // as the source named it: llama, mistral, qwen2, gpt2
    int64_t layers = 0;
    int64_t hidden = 0;
    int64_t heads = 0;
    int64_t kvHeads = 0;
    int64_t headDim = 0;
    int64_t ffn = 0;
    int64_t vocab = 0;
    int64_t context = 2048;
    int64_t slidingWindow = 0;        // > 0: `context` was cut to this attention window (sliding windows are not computed)
    int64_t declaredContext = 0;      // with slidingWindow: the context the config declared, which exports write again
    int64_t slidingFromLayer = 0;     // with slidingWindow, Qwen2: the layers from this one slide (max_window_layers)
    double ropeTheta = 10000.0;
    RopeStyle ropeStyle = RopeStyle::Halves;
    RopeScaling ropeScaling;
    double normEps = 1e-5;
    bool tiedEmbeddings = false;
    bool attentionBias = false;       // Qwen2 has q/k/v biases
    // Hugging Face sources: config.json's bos/eos/pad_token_id as written (null and lists included; a key the source
    // lacks is absent), as JSON text, which HF exports write again: they can differ from the tokenizer's (Qwen2: a null
    // BOS, <|endoftext|> found in the vocabulary). "" for other sources: exports write the tokenizer's.
    std::string configTokenIds;

    std::vector<LayerShape> layerShapes;   // empty: every layer has heads / kvHeads / ffn

    int64_t headsAt(int64_t layer) const { return layerShapes.empty() ? heads : layerShapes.at(size_t(layer)).heads; }
    int64_t kvHeadsAt(int64_t layer) const { return layerShapes.empty() ? kvHeads : layerShapes.at(size_t(layer)).kvHeads; }
    int64_t ffnAt(int64_t layer) const { return layerShapes.empty() ? ffn : layerShapes.at(size_t(layer)).ffn; }
    // Gives every layer its own entry (copying the uniform sizes) so one layer can change.
    void makeLayerShapesExplicit();

    // Throws cwb::Error(source, ...) when a dimension is missing, non-positive, absurd or inconsistent.
    void validate(const std::string& source) const;
    // " (its sliding_window: ...)" where the context was cut to a sliding window, else "": for refusals of longer inputs.
    std::string contextLimitNote() const;
};

const char* familyName(Family family);
void to_json(nlohmann::json& j, const ArchSpec& spec);

} // namespace cwb
