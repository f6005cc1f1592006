#include "core/util/error.h"

#include <c10/util/Exception.h>

namespace cwb {

std::string errorText(const std::exception& e) {
    if (const auto* torchError = dynamic_cast<const c10::Error*>(&e)) return torchError->what_without_backtrace();
    return e.what();
}

} // namespace cwb
