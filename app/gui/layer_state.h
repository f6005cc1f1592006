#pragma once
// What the current variant's recipe does to each linear layer ("RTN 4 bit", "magnitude 50 %"), derived from
// the core's own targeting rules (targetLayers, overrides), so the tree shows what a run would do.
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace cwb {

class Model;

// Layer name -> one line per enabled step that targets it, joined by "; ". Layers no step targets are absent.
// Steps of unknown methods or with a malformed target regex are skipped (the pipeline editor reports them).
std::map<std::string, std::string> layerStates(const Model& model, const nlohmann::json& steps);

} // namespace cwb
