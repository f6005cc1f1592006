#pragma once
// Tensor names in GGUF ("blk.0.attn_q.weight") and their canonical Hugging Face names
// ("model.layers.0.self_attn.q_proj.weight"), in both directions, for the loader and the exporter.
#include <string>

#include "core/model/arch_spec.h"

namespace cwb::gguf {

// "" when the GGUF name is not one of the family's tensors.
std::string canonicalName(Family family, const std::string& ggufName);
// "" when the canonical name has no GGUF counterpart.
std::string ggufName(Family family, const std::string& canonicalName);
// The GGUF architecture string of a family and model type: llama (also Mistral), qwen2, gpt2.
std::string ggufArchitecture(const ArchSpec& spec);

} // namespace cwb::gguf
