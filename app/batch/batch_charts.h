#pragma once
// A/B charts of a batch report as PNG files, rendered offscreen with the GUI's chart widget. In a build
// without Qt, renderCharts writes nothing and says so.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cwb {

// Writes one PNG per compared metric into `dir`; returns the file names written. `note` says why none were.
std::vector<std::string> renderCharts(const nlohmann::json& report, const std::string& dir, std::string* note);

} // namespace cwb
