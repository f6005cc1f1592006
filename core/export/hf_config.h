#pragma once
// config.json and generation_config.json of a Hugging Face folder, written from the architecture spec.
#include <string>

#include <nlohmann/json.hpp>

#include "core/model/model.h"

namespace cwb::exporting {

// Throws cwb::Error when the spec has per-layer sizes that config.json cannot express.
nlohmann::json hfConfig(const Model& model, const std::string& dtypeName);
nlohmann::json hfGenerationConfig(const Model& model);
// Copies the tokenizer files of a Hugging Face source folder into `folder`; returns their names.
std::vector<std::string> copyHfTokenizerFiles(const Model& model, const std::string& folder);

} // namespace cwb::exporting
