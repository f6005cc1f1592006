#include "core/compress/params.h"

#include <algorithm>
#include <cmath>

#include "core/util/error.h"

namespace cwb {

const char* paramTypeName(ParamType type) {
    switch (type) {
    case ParamType::Int: return "int";
    case ParamType::Float: return "float";
    case ParamType::Bool: return "bool";
    case ParamType::Choice: return "choice";
    case ParamType::Text: return "text";
    }
    return "?";
}

static std::string numberText(double v) {
    // Whole numbers as integers up to int64's range (2^62, the seeds' bound, printed as "4611686018427387904." before).
    if (v == std::floor(v) && std::abs(v) < 9.2e18) return std::to_string(static_cast<long long>(v));
    std::string s = std::to_string(v);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    if (s.size() > 1 && s.back() == '.') s.pop_back();
    return s;
}

nlohmann::json resolveParams(const std::string& methodId, const std::vector<ParamSpec>& specs, const nlohmann::json& given) {
    if (!given.is_null() && !given.is_object()) throw Error(methodId + ": params must be a JSON object");
    std::vector<std::string> problems;
    nlohmann::json out = nlohmann::json::object();
    if (given.is_object())
        for (auto it = given.begin(); it != given.end(); ++it) {
            bool known = std::any_of(specs.begin(), specs.end(), [&](const ParamSpec& p) { return p.name == it.key(); });
            if (!known) {
                std::string list;
                for (const auto& p : specs) list += (list.empty() ? "" : ", ") + p.name;
                problems.push_back("unknown parameter '" + it.key() + "' (known: " + list + ")");
            }
        }
    for (const auto& p : specs) {
        if (!given.is_object() || !given.contains(p.name)) {
            out[p.name] = p.defaultValue;
            continue;
        }
        const nlohmann::json& v = given[p.name];
        const std::string where = "parameter '" + p.name + "'";
        switch (p.type) {
        case ParamType::Int:
            if (!v.is_number_integer()) problems.push_back(where + " must be an integer");
            else if (v.get<double>() < p.minimum || v.get<double>() > p.maximum)
                problems.push_back(where + " = " + v.dump() + " is out of range " + numberText(p.minimum) + ".." + numberText(p.maximum));
            else if (std::find(p.excluded.begin(), p.excluded.end(), v.get<int64_t>()) != p.excluded.end())
                problems.push_back(where + " = " + v.dump() + " is not allowed (range" + rangeText(p) + ")");
            else out[p.name] = v;
            break;
        case ParamType::Float:
            if (!v.is_number()) problems.push_back(where + " must be a number");
            else if (!(v.get<double>() >= p.minimum && v.get<double>() <= p.maximum))
                problems.push_back(where + " = " + v.dump() + " is out of range " + numberText(p.minimum) + ".." + numberText(p.maximum));
            else out[p.name] = v.get<double>();
            break;
        case ParamType::Bool:
            if (!v.is_boolean()) problems.push_back(where + " must be true or false");
            else out[p.name] = v;
            break;
        case ParamType::Choice:
            if (!v.is_string() || std::find(p.choices.begin(), p.choices.end(), v.get<std::string>()) == p.choices.end()) {
                std::string list;
                for (const auto& c : p.choices) list += (list.empty() ? "" : ", ") + c;
                problems.push_back(where + " = " + v.dump() + " is not one of: " + list);
            } else {
                out[p.name] = v;
            }
            break;
        case ParamType::Text:
            if (!v.is_string()) problems.push_back(where + " must be a string");
            else out[p.name] = v;
            break;
        }
    }
    if (!problems.empty()) {
        std::string message = methodId + ": ";
        for (size_t i = 0; i < problems.size(); ++i) message += (i ? "; " : "") + problems[i];
        throw Error(message);
    }
    return out;
}

nlohmann::json describeParams(const std::vector<ParamSpec>& specs) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& p : specs) {
        nlohmann::json j = {{"name", p.name}, {"type", paramTypeName(p.type)}, {"default", p.defaultValue}, {"help", p.help}};
        if (p.type == ParamType::Int || p.type == ParamType::Float) {
            j["min"] = p.minimum;
            j["max"] = p.maximum;
            if (!p.excluded.empty()) j["excluded"] = p.excluded;
        }
        if (p.type == ParamType::Choice) j["choices"] = p.choices;
        if (p.filePath) j["file"] = true;
        out.push_back(j);
    }
    return out;
}

ParamSpec intParam(std::string name, int64_t minimum, int64_t maximum, int64_t def, std::string help) {
    return {std::move(name), ParamType::Int, double(minimum), double(maximum), def, {}, std::move(help), {}, false};
}
ParamSpec floatParam(std::string name, double minimum, double maximum, double def, std::string help) {
    return {std::move(name), ParamType::Float, minimum, maximum, def, {}, std::move(help), {}, false};
}
ParamSpec boolParam(std::string name, bool def, std::string help) {
    return {std::move(name), ParamType::Bool, 0, 1, def, {}, std::move(help), {}, false};
}
ParamSpec choiceParam(std::string name, std::vector<std::string> choices, std::string def, std::string help) {
    return {std::move(name), ParamType::Choice, 0, 0, def, std::move(choices), std::move(help), {}, false};
}
ParamSpec textParam(std::string name, std::string def, std::string help) {
    return {std::move(name), ParamType::Text, 0, 0, def, {}, std::move(help), {}, false};
}

ParamSpec pathParam(std::string name, std::string help) {
    ParamSpec spec = textParam(std::move(name), "", std::move(help));
    spec.filePath = true;
    return spec;
}

ParamSpec excluding(ParamSpec spec, std::vector<int64_t> values) {
    spec.excluded = std::move(values);
    return spec;
}

std::string rangeText(const ParamSpec& spec) {
    if (spec.type != ParamType::Int && spec.type != ParamType::Float) return "";
    std::string text = " [" + numberText(spec.minimum) + ", " + numberText(spec.maximum) + "]";
    for (size_t i = 0; i < spec.excluded.size(); ++i) text += (i ? ", " : " except ") + std::to_string(spec.excluded[i]);
    return text;
}

} // namespace cwb
