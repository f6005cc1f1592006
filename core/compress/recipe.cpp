#include "core/compress/recipe.h"

#include <cstdio>
#include <algorithm>
#include <fstream>
#include <regex>

#include "core/compress/method.h"
#include "core/util/error.h"

namespace cwb {

Recipe Recipe::fromJson(const nlohmann::json& j, const std::string& source) {
    if (!j.is_object() || !j.contains("steps") || !j["steps"].is_array())
        throw Error(source, "a recipe is a JSON object with a \"steps\" array");
    for (auto it = j.begin(); it != j.end(); ++it)   // a misspelt key would otherwise be ignored, as in a step
        if (it.key() != "steps" && it.key() != "description")
            throw Error(source, "unknown key '" + it.key() + "' (a recipe has \"steps\" and may have a \"description\")");
    Recipe recipe;
    if (j.contains("description")) {
        if (!j["description"].is_string()) throw Error(source, "\"description\" must be a string");
        recipe.description = j["description"].get<std::string>();
    }
    size_t index = 0;
    for (const auto& s : j["steps"]) {
        const std::string where = "step " + std::to_string(++index);
        if (!s.is_object() || !s.contains("method") || !s["method"].is_string())
            throw Error(source, where + " needs a \"method\" string");
        RecipeStep step;
        step.method = s["method"].get<std::string>();
        for (auto it = s.begin(); it != s.end(); ++it) {
            static const std::vector<std::string> keys = {"method", "version", "params", "targets", "ignore", "overrides", "enabled"};
            if (std::find(keys.begin(), keys.end(), it.key()) == keys.end())
                throw Error(source, where + " (" + step.method + "): unknown key '" + it.key() + "'");
        }
        if (s.contains("version")) {
            if (!s["version"].is_number_integer()) throw Error(source, where + ": \"version\" must be an integer");
            step.version = s["version"].get<int>();
        }
        if (s.contains("params")) step.params = s["params"];
        if (s.contains("targets")) {
            if (!s["targets"].is_string()) throw Error(source, where + ": \"targets\" must be a regex string");
            step.targets = s["targets"].get<std::string>();
        }
        if (s.contains("ignore")) {
            if (!s["ignore"].is_array()) throw Error(source, where + ": \"ignore\" must be an array of regex strings");
            for (const auto& i : s["ignore"]) {
                if (!i.is_string()) throw Error(source, where + ": \"ignore\" must be an array of regex strings");
                step.ignore.push_back(i.get<std::string>());
            }
        }
        if (s.contains("overrides")) {
            if (!s["overrides"].is_array()) throw Error(source, where + ": \"overrides\" must be an array");
            for (const auto& o : s["overrides"]) {
                if (!o.is_object() || !o.contains("pattern") || !o["pattern"].is_string() || !o.contains("params"))
                    throw Error(source, where + ": each override needs \"pattern\" and \"params\"");
                step.overrides.push_back({o["pattern"].get<std::string>(), o["params"]});
            }
        }
        if (s.contains("enabled")) step.enabled = s["enabled"].get<bool>();
        recipe.steps.push_back(std::move(step));
    }
    recipe.validate(source);
    return recipe;
}

void Recipe::validate(const std::string& source) const {
    size_t index = 0;
    for (const auto& step : steps) {
        const std::string where = "step " + std::to_string(++index) + " (" + step.method + ")";
        const CompressionMethod* method = MethodRegistry::instance().find(step.method);
        if (!method) {
            std::string known;
            for (const auto* m : MethodRegistry::instance().methods()) known += (known.empty() ? "" : ", ") + m->id();
            throw Error(source, where + ": unknown method (known: " + known + ")");
        }
        if (step.version != 0 && step.version != method->version())
            throw Error(source, where + ": the recipe asks for version " + std::to_string(step.version) +
                                    ", this build has version " + std::to_string(method->version()) +
                                    "; results would differ, so it is refused");
        try {
            resolveParams(step.method, method->params(), step.params);
            for (const auto& o : step.overrides) {
                nlohmann::json merged = step.params.is_object() ? step.params : nlohmann::json::object();
                merged.update(o.params);
                resolveParams(step.method + " override '" + o.pattern + "'", method->params(), merged);
            }
            for (const std::string& r : [&] {
                     std::vector<std::string> all = step.ignore;
                     if (!step.targets.empty()) all.push_back(step.targets);
                     for (const auto& o : step.overrides) all.push_back(o.pattern);
                     return all;
                 }())
                std::regex check(r);
        } catch (const std::regex_error& e) {
            throw Error(source, where + ": invalid regular expression (" + e.what() + ")");
        } catch (const Error& e) {
            throw Error(source, where + ": " + e.what());
        }
    }
}

Recipe Recipe::load(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error(path, "cannot open recipe");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
        throw Error(path, std::string("recipe is not valid JSON: ") + e.what());
    }
    return fromJson(j, path);
}

nlohmann::json Recipe::toJson() const {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : this->steps) {
        const CompressionMethod* method = MethodRegistry::instance().find(s.method);
        nlohmann::json j = {{"method", s.method}, {"version", s.version ? s.version : (method ? method->version() : 0)},
                            {"params", s.params}};
        if (!s.targets.empty()) j["targets"] = s.targets;
        if (!s.ignore.empty()) j["ignore"] = s.ignore;
        if (!s.overrides.empty()) {
            j["overrides"] = nlohmann::json::array();
            for (const auto& o : s.overrides) j["overrides"].push_back({{"pattern", o.pattern}, {"params", o.params}});
        }
        if (!s.enabled) j["enabled"] = false;
        steps.push_back(j);
    }
    nlohmann::json recipe = {{"steps", steps}};
    if (!description.empty()) recipe["description"] = description;
    return recipe;
}

void Recipe::save(const std::string& path) const {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp);
        if (!out) throw Error(tmp, "cannot create file");
        out << toJson().dump(2) << "\n";
        if (!out) throw Error(tmp, "write failed");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error(path, "cannot rename the temporary file into place");
}

} // namespace cwb
