#include "app/gui/layer_state.h"

#include <regex>

#include "core/compress/method.h"
#include "core/compress/pipeline.h"
#include "core/compress/recipe.h"
#include "core/model/model.h"

namespace cwb {

namespace {

// The parameters a reader wants first; the rest stay in the pipeline editor.
std::string summary(const CompressionMethod& method, const nlohmann::json& params) {
    static const char* keys[] = {"bits", "sparsity", "ratio", "n", "m"};
    const std::string id = method.id();
    std::string text = id.substr(id.find('.') + 1);   // "quantize.rtn" -> "rtn": the tree column stays narrow
    for (const char* key : keys) {
        if (!params.contains(key)) continue;
        const auto& v = params[key];
        text += std::string(" ") + key + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
    }
    return text;
}

} // namespace

std::map<std::string, std::string> layerStates(const Model& model, const nlohmann::json& steps) {
    std::map<std::string, std::string> states;
    for (const auto& json : steps) {
        if (!json.value("enabled", true)) continue;
        const CompressionMethod* method = MethodRegistry::instance().find(json.value("method", ""));
        if (!method) continue;
        RecipeStep step;
        step.method = method->id();
        step.params = json.value("params", nlohmann::json::object());
        step.targets = json.value("targets", "");
        for (const auto& i : json.value("ignore", nlohmann::json::array())) step.ignore.push_back(i.get<std::string>());
        std::vector<std::string> layers;
        try {
            layers = targetLayers(model, step);
        } catch (const std::exception&) {
            continue;
        }
        for (const auto& layer : layers) {
            nlohmann::json params = step.params;
            for (const auto& o : json.value("overrides", nlohmann::json::array())) {
                try {
                    if (std::regex_search(layer, std::regex(o.value("pattern", "")))) {
                        params.update(o.value("params", nlohmann::json::object()));
                        break;
                    }
                } catch (const std::regex_error&) {
                }
            }
            std::string& state = states[layer];
            if (!state.empty()) state += "; ";
            state += summary(*method, params);
        }
    }
    return states;
}

} // namespace cwb
