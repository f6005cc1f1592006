#include "core/compress/methods/calibration_stats.h"

#include <cstdlib>
#include <cstring>

namespace cwb {

int64_t blockOf(const std::string& layer) {
    for (const char* prefix : {"model.layers.", "transformer.h."}) {
        const size_t n = std::strlen(prefix);
        if (layer.compare(0, n, prefix) == 0) return std::strtoll(layer.c_str() + n, nullptr, 10);
    }
    return -1;
}

std::vector<std::string> layersOfBlock(const StepContext& ctx, int64_t block) {
    std::vector<std::string> out;
    for (const auto& layer : ctx.layers)
        if ((layer == names::kHead ? ctx.model.spec.layers : blockOf(layer)) == block) out.push_back(layer);
    return out;
}

} // namespace cwb
