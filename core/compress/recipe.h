#pragma once
// A recipe is an ordered list of steps; each names a method by stable id and version, its parameters,
// which linear layers it targets (regex; default every linear layer of the blocks), what it ignores, and
// per-layer overrides ({"pattern": "layers\\.0\\.", "params": {"bits": 8}}) for mixed precision.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cwb {

// Why a layer pattern (targets, ignore, override) is refused before std::regex sees it ("" when it is not): so deep
// a nesting that compiling it would overflow the stack, or repetition that could make matching take exponential
// time. Recipe validation applies it to every pattern.
std::string layerPatternProblem(const std::string& pattern);

struct LayerOverride {
    std::string pattern;          // regex searched in the layer name
    nlohmann::json params;        // merged over the step's params for matching layers
};

struct RecipeStep {
    std::string method;           // "quantize.gptq"
    int version = 0;              // 0: the version this build has
    nlohmann::json params = nlohmann::json::object();
    std::string targets;          // regex; empty: every linear layer of the blocks
    std::vector<std::string> ignore;
    std::vector<LayerOverride> overrides;
    bool enabled = true;
};

struct Recipe {
    std::vector<RecipeStep> steps;
    std::string description;   // free text for people; kept through toJson

    // Throws cwb::Error naming `source` for malformed JSON, unknown methods, versions this build does not
    // have, and unknown or out-of-range parameters.
    static Recipe fromJson(const nlohmann::json& j, const std::string& source);
    static Recipe load(const std::string& path);
    nlohmann::json toJson() const;
    void save(const std::string& path) const;   // temporary file + rename
    // Checks every step against the method registry (fromJson does this too).
    void validate(const std::string& source) const;
};

// The recipe with its steps' file parameters (ParamSpec::filePath) made absolute where they are relative, against
// `folder`: the folder of the recipe or project file that holds them, so that a project copied with its files to
// another machine, or run from another working folder, reads and writes the same ones (a relative checkpoint went to
// the GUI's working folder, and resume then started over elsewhere: GUI probe). An empty `folder` leaves them.
Recipe withPathsFrom(Recipe recipe, const std::string& folder);

} // namespace cwb
