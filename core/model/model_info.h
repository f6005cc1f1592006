#pragma once
// What `cwb info` prints: architecture, parameter count, and per tensor its name, shape, type and bytes.
#include <string>

#include <nlohmann/json.hpp>

namespace cwb {

class Model;

nlohmann::json modelInfoJson(const Model& model);
std::string modelInfoText(const Model& model);
std::string humanBytes(double bytes);

} // namespace cwb
