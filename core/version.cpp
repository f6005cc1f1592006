#include "core/version.h"

#include <torch/version.h>

namespace cwb {
const char* versionString() { return CWB_VERSION; }
const char* torchVersionString() { return TORCH_VERSION; }
} // namespace cwb
