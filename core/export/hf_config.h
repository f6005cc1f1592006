#pragma once
// config.json and generation_config.json of a Hugging Face folder, written from the architecture spec.
#include <string>

#include <nlohmann/json.hpp>

#include "core/model/model.h"

namespace cwb::exporting {

// Throws cwb::Error when the spec has per-layer sizes that config.json cannot express.
nlohmann::json hfConfig(const Model& model, const std::string& dtypeName);
nlohmann::json hfGenerationConfig(const Model& model);
// Writes j indented, as Hugging Face writes its JSON files; throws cwb::Error naming the file.
void writeJsonFile(const std::string& path, const nlohmann::json& j);
// A value held in float32 (a GGUF's norm epsilon) as the shortest decimal that float32 reads back the same: 1e-05,
// not 9.999999747378752e-06 (export probe); other values unchanged.
double float32Decimal(double value);
// Puts tokenizer files into `folder` and returns their names: a Hugging Face source's own files are copied;
// for other sources tokenizer.json, tokenizer_config.json and special_tokens_map.json are written from the
// model's vocabulary (what they cannot carry over exactly goes to `notes`). Nothing when there is no vocabulary.
std::vector<std::string> writeHfTokenizerFiles(const Model& model, const std::string& folder,
                                               std::vector<std::string>& notes);

} // namespace cwb::exporting
