#pragma once
// Versions recorded in projects and reports.
namespace cwb {
const char* versionString();        // the workbench
const char* torchVersionString();   // LibTorch it was built against
} // namespace cwb
