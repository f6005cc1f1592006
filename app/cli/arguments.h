#pragma once
// A small command-line parser: --name value, --name=value and --flag; refuses unknown options by name so a
// typo never silently falls back to a default.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace cwb::cli {

class Arguments {
public:
    // valueOptions take a value, flagOptions do not; throws cwb::Error on an unknown or incomplete option.
    Arguments(const std::vector<std::string>& args, const std::set<std::string>& valueOptions,
              const std::set<std::string>& flagOptions);

    bool has(const std::string& name) const { return mValues.count(name) || mFlags.count(name); }
    bool flag(const std::string& name) const { return mFlags.count(name) != 0; }
    std::string value(const std::string& name, const std::string& fallback = "") const;   // the last occurrence
    std::vector<std::string> values(const std::string& name) const;                        // every occurrence, in order
    int64_t integer(const std::string& name, int64_t fallback) const;
    // A whole number from 0 to 2^64 - 1 (seeds): "-1" is refused, not wrapped to 2^64 - 1 (user probe).
    uint64_t unsignedInteger(const std::string& name, uint64_t fallback) const;
    double number(const std::string& name, double fallback) const;
    const std::vector<std::string>& positional() const { return mPositional; }
    // The single positional argument, or an error naming what is expected.
    std::string requirePositional(const char* what) const;

private:
    std::map<std::string, std::vector<std::string>> mValues;
    std::set<std::string> mFlags;
    std::vector<std::string> mPositional;
};

} // namespace cwb::cli
