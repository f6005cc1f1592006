#pragma once
// An export refusal found before the variant is built: from the base's layers and the recipe's steps alone, what
// form each linear layer will end in (dense, integer with its bits and groups, FP8, W8A8, or not known), and whether
// the format can hold that. A GPTQ calibration of a 7B model takes minutes to hours; a layout that cannot take its
// result should be said before, not after.
#include <string>

#include "core/compress/recipe.h"

namespace cwb {

class Model;

// Why `recipe` applied to `base` certainly builds a variant that `formatId` refuses ("" when it may not). Only what
// the recipe decides is judged: bit widths, group sizes, act-order, unfolded AWQ/SmoothQuant scales, layers left
// dense or given another scheme, mixed settings where a format needs one. Shapes are judged until a structured step
// changes them; nothing is judged past a step that renames layers (prune.layers, a shallower distillation student).
// What depends on the data (e.g. a GPTQ zero point of 0) is left to the export, which checks the built variant
// again. Throws cwb::Error for an unknown format or a malformed recipe.
std::string exportRecipeProblem(const Model& base, const Recipe& recipe, const std::string& formatId);

} // namespace cwb
