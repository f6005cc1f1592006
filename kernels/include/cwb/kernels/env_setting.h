#pragma once
// The CWB_* tuning variables (kernel shapes, switches for before/after runs) as the environment gives them. A variable
// that is unset or empty takes its default; one set to a value it does not take is an error that names the variable,
// the value and what it takes. A misspelt value never falls back to the default quietly: an A/B run would then
// measure the default twice. Header-only and CUDA-free, so the core reads its own variables the same way in builds
// without the kernels.
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>

namespace cwb::env {

class SettingError : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

// The variable's value; nothing when it is unset or empty.
inline std::optional<std::string> environmentValue(const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v) return std::nullopt;
    return std::string(v);
}

// The index of `value` among `choices`; throws SettingError otherwise.
inline int choiceOf(const char* name, const std::string& value, std::initializer_list<const char*> choices) {
    int index = 0;
    std::string list;
    for (const char* c : choices) {
        if (value == c) return index;
        list += (index == 0 ? "" : index + 1 == int(choices.size()) ? " or " : ", ") + std::string(c);
        ++index;
    }
    throw SettingError(std::string(name) + "='" + value + "': it takes " + list);
}

// A whole number in [lo, hi] written in decimal; throws SettingError otherwise.
inline long long integerOf(const char* name, const std::string& value, long long lo, long long hi) {
    size_t used = 0;
    long long n = 0;
    bool ok = !value.empty() && value.find_first_of(" \t") == std::string::npos;
    if (ok) {
        try {
            n = std::stoll(value, &used, 10);
        } catch (const std::exception&) {
            ok = false;
        }
    }
    if (!ok || used != value.size() || n < lo || n > hi)
        throw SettingError(std::string(name) + "='" + value + "': it takes a whole number from " + std::to_string(lo) +
                           " to " + std::to_string(hi));
    return n;
}

// On or off: 1, on, true, yes or 0, off, false, no; throws SettingError otherwise.
inline bool switchOf(const char* name, const std::string& value) {
    return choiceOf(name, value, {"0", "off", "false", "no", "1", "on", "true", "yes"}) >= 4;
}

inline int envChoice(const char* name, std::initializer_list<const char*> choices, int fallback) {
    const auto v = environmentValue(name);
    return v ? choiceOf(name, *v, choices) : fallback;
}

inline long long envInteger(const char* name, long long lo, long long hi, long long fallback) {
    const auto v = environmentValue(name);
    return v ? integerOf(name, *v, lo, hi) : fallback;
}

inline bool envSwitch(const char* name, bool fallback) {
    const auto v = environmentValue(name);
    return v ? switchOf(name, *v) : fallback;
}

} // namespace cwb::env
