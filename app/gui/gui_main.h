#pragma once
// Entry point of the desktop GUI: `cwb` with no arguments, or with a model or project path. main() decides the
// CLI and --batch paths before this is called, so no QApplication exists on them.
#include <string>
#include <vector>

namespace cwb {

// Whether these arguments ask for the GUI: none, a path that exists, or GUI options (--screenshot ...).
bool isGuiInvocation(const std::vector<std::string>& args);
// Runs the application until its window closes; returns the exit code (2 for bad arguments).
int runGui(int argc, char** argv);

} // namespace cwb
