#pragma once
// Files written whole or not at all: the bytes go to a new temporary file beside `path`, are flushed and checked, and
// only then renamed over `path`. On any failure (a full disk, a writer that throws) the temporary file is removed and
// `path` is untouched. Temporary names are made unique and created exclusively (`path`.tmp-HOST.PID.XXXXXX), so a
// file or folder of the user's that happens to be named like one is never truncated or removed. The host and process
// in the name let a later write remove what a killed process left (SIGKILL, a power cut: no cleanup ran).
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace cwb {

// Throws cwb::Error naming `path` when it cannot be created, written (disk full) or moved into place.
void writeFileAtomically(const std::string& path, const std::string& bytes);
// `write` fills the (binary) stream; what it throws is passed on after the temporary file is removed.
void writeFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write);

// A new empty file beside `path` named `path` + `tag` + HOST.PID. + six random characters, created so that it cannot be
// one that existed; returns its name. What abandonedSiblings finds for the same tag is removed first. Throws
// cwb::Error naming `path` when the folder does not take it.
std::string createSiblingFile(const std::string& path, const std::string& tag = ".tmp-");
// The same for an empty folder.
std::string createSiblingFolder(const std::string& path, const std::string& tag = ".tmp-");

// The files and folders beside `path` named as createSibling* names them for `tag` by a process of this host that is
// no longer running: left by a write that was killed. Names of other hosts (a shared file system) and of running
// processes are never listed.
std::vector<std::string> abandonedSiblings(const std::string& path, const std::string& tag);
// Removes them; returns the names removed (those that could not be removed are left and not returned).
std::vector<std::string> removeAbandonedSiblings(const std::string& path, const std::string& tag);

} // namespace cwb
