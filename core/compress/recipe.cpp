#include "core/compress/recipe.h"

#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/compress/method.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/json_text.h"

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
            const auto& v = s["version"];
            if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000000)
                throw Error(source, where + ": \"version\" must be a small whole number, got " + v.dump());
            step.version = v.get<int>();
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
                if (!o.is_object() || !o.contains("pattern") || !o["pattern"].is_string() || !o.contains("params") ||
                    !o["params"].is_object())
                    throw Error(source, where + ": each override needs a \"pattern\" string and a \"params\" object");
                step.overrides.push_back({o["pattern"].get<std::string>(), o["params"]});
            }
        }
        if (s.contains("enabled")) {
            if (!s["enabled"].is_boolean()) throw Error(source, where + ": \"enabled\" must be true or false");
            step.enabled = s["enabled"].get<bool>();
        }
        recipe.steps.push_back(std::move(step));
    }
    recipe.validate(source);
    return recipe;
}

std::string layerPatternProblem(const std::string& pattern) {
    // std::regex compiles by recursion and matches by backtracking: deep nesting overflows the stack (a crash), and
    // repetition of something that can itself match in several ways (an inner repetition, or alternatives), or many
    // unbounded repetitions along one path, take exponential or high-polynomial time on a failing match (a hang no
    // cancel reaches). Layer names are short, and real patterns need none of these.
    constexpr size_t kMaxLength = 1 << 20;
    constexpr int kMaxDepth = 32, kMaxUnbounded = 4;
    constexpr int64_t kMaxCount = 1000;
    if (pattern.size() > kMaxLength) return "is longer than " + std::to_string(kMaxLength) + " characters";
    struct Frame {
        int current = 0, best = 0;   // unbounded repetitions along this alternative / the worst alternative so far
        bool repeats = false;        // something inside repeats without bound
        bool alternatives = false;   // holds a '|'
    };
    std::vector<Frame> frames(1);
    auto pathCount = [&] {
        int n = 0;
        for (const Frame& f : frames) n += f.current;
        return n;
    };
    bool lastAtomAmbiguous = false;   // the atom just closed is a group that can match one text in several ways
    int lastAtomCount = 0;            // unbounded repetitions inside that group (its worst alternative)
    for (size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        bool quantifier = false, unbounded = false;
        if (c == '\\') {
            // A back-reference's number goes through the same overflowing parser as a count (fuzz_recipe, UBSan).
            size_t digits = 0;
            while (i + 1 + digits < pattern.size() && pattern[i + 1 + digits] >= '0' && pattern[i + 1 + digits] <= '9') ++digits;
            if (digits > 3)
                return "has a back-reference \\" + pattern.substr(i + 1, digits) + "; layer patterns need none";
            ++i;
            lastAtomAmbiguous = false;
            lastAtomCount = 0;
            continue;
        }
        if (c == '[') {   // a character class; in ECMAScript "[]" and "[^]" end at that first ']'
            size_t j = i + 1;
            if (j < pattern.size() && pattern[j] == '^') ++j;
            while (j < pattern.size() && pattern[j] != ']') j += pattern[j] == '\\' ? 2 : 1;
            i = j;
            lastAtomAmbiguous = false;
            lastAtomCount = 0;
            continue;
        }
        if (c == '(') {
            frames.emplace_back();
            if (int(frames.size()) - 1 > kMaxDepth) return "nests groups deeper than " + std::to_string(kMaxDepth);
            lastAtomAmbiguous = false;
            lastAtomCount = 0;
            continue;
        }
        if (c == '|') {
            Frame& f = frames.back();
            f.best = std::max(f.best, f.current);
            f.current = 0;
            f.alternatives = true;
            continue;
        }
        if (c == ')') {
            if (frames.size() > 1) {
                const Frame inner = frames.back();
                frames.pop_back();
                lastAtomCount = std::max(inner.best, inner.current);
                lastAtomAmbiguous = inner.repeats || inner.alternatives;
                frames.back().current += lastAtomCount;
                frames.back().repeats = frames.back().repeats || inner.repeats;
            }
            continue;
        }
        if (c == '*' || c == '+') {
            quantifier = unbounded = true;
        } else if (c == '{') {
            const size_t close = pattern.find('}', i);
            if (close != std::string::npos) {
                const std::string inside = pattern.substr(i + 1, close - i - 1);
                const size_t comma = inside.find(',');
                quantifier = true;
                unbounded = comma != std::string::npos && comma + 1 == inside.size();
                // std::regex builds one copy of the atom per count (a{100000000} takes minutes and gigabytes), and
                // a count past 2^63 overflows inside its parser (found by fuzz_recipe, with UBSan).
                size_t digits = 0;
                int64_t count = 0;
                for (size_t k = 0; k <= inside.size(); ++k) {
                    const char d = k < inside.size() ? inside[k] : ',';
                    if (d >= '0' && d <= '9') {
                        if (++digits <= 9) count = count * 10 + (d - '0');
                        continue;
                    }
                    if (digits > 9 || count > kMaxCount)
                        return "repeats something {" + inside + "} times; counts above " + std::to_string(kMaxCount) +
                               " are not accepted (layer names are short)";
                    digits = 0;
                    count = 0;
                }
                i = close;
            }
        } else if (c == '?') {
            quantifier = true;
        }
        if (quantifier) {
            if (unbounded && lastAtomAmbiguous)
                return "repeats a group that can itself match in several ways (e.g. (a+)* or (a|aa)*), which can take "
                       "exponential time";
            if (unbounded) {
                ++frames.back().current;
                frames.back().repeats = true;
                if (pathCount() > kMaxUnbounded)
                    return "has more than " + std::to_string(kMaxUnbounded) + " unbounded repetitions (*, +, {n,}) in a row, "
                           "which can take very long to match";
            }
            if (i + 1 < pattern.size() && (pattern[i + 1] == '?' || pattern[i + 1] == '+')) ++i;   // lazy/possessive mark
            lastAtomAmbiguous = false;
            lastAtomCount = 0;
            continue;
        }
        lastAtomAmbiguous = false;
        lastAtomCount = 0;
    }
    return "";
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
                // Which layers a step takes is the step's: an override's "head" would be read for no layer.
                if (o.params.is_object() && o.params.contains("head"))
                    throw Error(step.method + " override '" + o.pattern + "': \"head\" says which layers the step takes, "
                                "so it belongs in the step's params, not in an override");
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
            {
                const std::string unsafe = layerPatternProblem(r);
                if (!unsafe.empty()) throw Error("the pattern '" + (r.size() > 80 ? r.substr(0, 80) + "..." : r) + "' " + unsafe);
                std::regex check(r);
            }
        } catch (const std::regex_error& e) {
            throw Error(source, where + ": invalid regular expression (" + e.what() + ")");
        } catch (const Error& e) {
            throw Error(source, where + ": " + e.what());
        } catch (const nlohmann::json::exception& e) {   // a recipe built in code with a malformed override
            throw Error(source, where + ": " + e.what());
        }
    }
}

Recipe Recipe::load(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error(path, "cannot open recipe");
    nlohmann::json j;
    try {
        j = parseWrittenJson(std::string(std::istreambuf_iterator<char>(in), {}));
    } catch (const std::exception& e) {
        throw Error(path, std::string("recipe is not valid JSON: ") + e.what());
    }
    return withPathsFrom(fromJson(j, path), std::filesystem::absolute(path).parent_path().string());
}

Recipe withPathsFrom(Recipe recipe, const std::string& folder) {
    if (folder.empty()) return recipe;
    for (RecipeStep& step : recipe.steps) {
        const CompressionMethod* method = MethodRegistry::instance().find(step.method);
        if (!method || !step.params.is_object()) continue;
        for (const ParamSpec& spec : method->params()) {
            if (!spec.filePath || !step.params.contains(spec.name) || !step.params[spec.name].is_string()) continue;
            const std::string value = step.params[spec.name];
            if (value.empty() || std::filesystem::path(value).is_absolute()) continue;
            step.params[spec.name] = (std::filesystem::path(folder) / value).lexically_normal().string();
        }
    }
    return recipe;
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

void Recipe::save(const std::string& path) const { writeFileAtomically(path, toJson().dump(2) + "\n"); }

} // namespace cwb
