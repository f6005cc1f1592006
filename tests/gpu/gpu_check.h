// Pass/fail reporting shared by the plain GPU test executables (no Qt Test on GPU servers): each check prints one
// line, and the exit code says whether any failed.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace cwb::testing {

inline int& failureCount() {
    static int failures = 0;
    return failures;
}

inline void check(bool ok, const std::string& what) {
    std::printf("%s: %s\n", ok ? "PASS" : "FAIL", what.c_str());
    failureCount() += ok ? 0 : 1;
}

// The exit code for missing fixtures: 77 (skipped), or 1 under CWB_REQUIRE_FIXTURES=1, where a skip would hide that
// the machine was given no fixtures.
inline int missingFixtures(const char* folder) {
    const char* required = std::getenv("CWB_REQUIRE_FIXTURES");
    const bool fail = required && std::string(required) == "1";
    std::printf("%s: fixtures not found under %s%s\n", fail ? "FAIL" : "SKIP", folder, fail ? " (CWB_REQUIRE_FIXTURES=1)" : "");
    return fail ? 1 : 77;
}

// Prints the count of failed checks; the test's exit code (1 when any failed).
inline int finishChecks() {
    std::printf("%d failed\n", failureCount());
    return failureCount() ? 1 : 0;
}

} // namespace cwb::testing
