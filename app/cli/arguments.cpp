#include "app/cli/arguments.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/util/error.h"

namespace cwb::cli {

Arguments::Arguments(const std::vector<std::string>& args, const std::set<std::string>& valueOptions,
                     const std::set<std::string>& flagOptions) {
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
            std::string name = a.substr(2), value;
            const auto eq = name.find('=');
            const bool inlineValue = eq != std::string::npos;
            if (inlineValue) {
                value = name.substr(eq + 1);
                name = name.substr(0, eq);
            }
            if (flagOptions.count(name)) {
                if (inlineValue) throw Error("option --" + name + " takes no value");
                mFlags.insert(name);
            } else if (valueOptions.count(name)) {
                if (!inlineValue) {
                    if (i + 1 >= args.size()) throw Error("option --" + name + " needs a value");
                    value = args[++i];
                }
                mValues[name].push_back(value);
            } else {
                throw Error("unknown option --" + name);
            }
        } else {
            mPositional.push_back(a);
        }
    }
}

std::string Arguments::value(const std::string& name, const std::string& fallback) const {
    auto it = mValues.find(name);
    return it == mValues.end() ? fallback : it->second.back();
}

std::vector<std::string> Arguments::values(const std::string& name) const {
    auto it = mValues.find(name);
    return it == mValues.end() ? std::vector<std::string>{} : it->second;
}

int64_t Arguments::integer(const std::string& name, int64_t fallback) const {
    if (!mValues.count(name)) return fallback;
    const std::string text = value(name);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0') throw Error("option --" + name + " expects an integer, got '" + text + "'");
    // strtoll saturates out of range: 99999999999999999999 would otherwise run as 9223372036854775807.
    if (errno == ERANGE) throw Error("option --" + name + " is out of range, got '" + text + "'");
    return v;
}

uint64_t Arguments::unsignedInteger(const std::string& name, uint64_t fallback) const {
    if (!mValues.count(name)) return fallback;
    const std::string text = value(name);
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
        throw Error("option --" + name + " expects a whole number from 0 to 18446744073709551615, got '" + text + "'");
    errno = 0;
    const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
    if (errno == ERANGE) throw Error("option --" + name + " is out of range (at most 18446744073709551615), got '" + text + "'");
    return v;
}

double Arguments::number(const std::string& name, double fallback) const {
    if (!mValues.count(name)) return fallback;
    const std::string text = value(name);
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0') throw Error("option --" + name + " expects a number, got '" + text + "'");
    // strtod takes "nan", "inf" and 1e999 (infinity): no option means any of them.
    if (!std::isfinite(v)) throw Error("option --" + name + " expects a finite number, got '" + text + "'");
    return v;
}

std::string Arguments::requirePositional(const char* what) const {
    if (mPositional.size() != 1)
        throw Error(std::string("expected one ") + what + ", got " + std::to_string(mPositional.size()) + " arguments");
    return mPositional[0];
}

} // namespace cwb::cli
