#pragma once
// A deliberately plain forward pass for tests: one token and one head at a time, in double precision,
// written from the papers' equations rather than from the runtime's code.
#include <vector>

#include "tests/support/synthetic_models.h"

namespace cwb::test {

// Logits [tokens, vocab] in double. RoPE pairs dimensions as `ropeStyle` says (weights as given).
at::Tensor referenceLogits(const ArchSpec& spec, const WeightMap& weights, const std::vector<int64_t>& tokens);

} // namespace cwb::test
