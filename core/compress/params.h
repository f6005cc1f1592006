#pragma once
// Parameters of a compression method, declared once with type, range, default and help. The recipe reader,
// the CLI and the GUI's generated forms are all driven by these declarations (after QGIS's parameterDefinitions).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cwb {

enum class ParamType { Int, Float, Bool, Choice, Text };

struct ParamSpec {
    std::string name;
    ParamType type = ParamType::Int;
    double minimum = 0;                 // Int, Float
    double maximum = 0;
    nlohmann::json defaultValue;
    std::vector<std::string> choices;   // Choice
    std::string help;
    std::vector<int64_t> excluded;      // Int: values inside the range that are refused (GPTQ's group_size 0)
    bool filePath = false;              // Text: a file; a relative one is relative to the recipe or project file (withPathsFrom)
};

const char* paramTypeName(ParamType type);

// Fills defaults and checks every value; throws cwb::Error naming the method and each unknown, mistyped or
// out-of-range parameter (all of them at once, so a user fixes a recipe in one go).
nlohmann::json resolveParams(const std::string& methodId, const std::vector<ParamSpec>& specs, const nlohmann::json& given);

nlohmann::json describeParams(const std::vector<ParamSpec>& specs);   // for --help, docs and the GUI

// Helpers for declaring parameters concisely.
ParamSpec intParam(std::string name, int64_t minimum, int64_t maximum, int64_t def, std::string help);
ParamSpec floatParam(std::string name, double minimum, double maximum, double def, std::string help);
ParamSpec boolParam(std::string name, bool def, std::string help);
ParamSpec choiceParam(std::string name, std::vector<std::string> choices, std::string def, std::string help);
ParamSpec textParam(std::string name, std::string def, std::string help);
// A Text parameter naming a file (ParamSpec::filePath).
ParamSpec pathParam(std::string name, std::string help);
// An Int parameter that refuses some values inside its range.
ParamSpec excluding(ParamSpec spec, std::vector<int64_t> values);
// " [-1, 65536] except 0": the range of an Int or Float parameter as `cwb methods` and the GUI print it.
std::string rangeText(const ParamSpec& spec);

} // namespace cwb
