#pragma once
// Files written whole or not at all: the bytes go to `path`.tmp, are flushed and checked, and only then renamed over
// `path`. On any failure (a full disk, a writer that throws) the temporary file is removed and `path` is untouched.
#include <functional>
#include <ostream>
#include <string>

namespace cwb {

// Throws cwb::Error naming `path` when it cannot be created, written (disk full) or moved into place.
void writeFileAtomically(const std::string& path, const std::string& bytes);
// `write` fills the (binary) stream; what it throws is passed on after the temporary file is removed.
void writeFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write);

} // namespace cwb
