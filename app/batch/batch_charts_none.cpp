#include "app/batch/batch_charts.h"

namespace cwb {

std::vector<std::string> renderCharts(const nlohmann::json&, const std::string&, std::string* note) {
    if (note) *note = "charts are not rendered: this cwb was built without Qt (CWB_GUI=OFF)";
    return {};
}

} // namespace cwb
