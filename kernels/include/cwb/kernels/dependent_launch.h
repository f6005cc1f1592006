#pragma once
// Programmatic dependent launch (PDL, compute capability 9.0+) of the decode kernels (decode_ops.h, dense_gemv.h):
// each is launched so that the GPU may start it while the kernel before it in the stream is still finishing, and
// its blocks wait on the device (griddepcontrol.wait) for that kernel's results before they touch memory. That hides
// part of the gap between two dependent launches; a CUDA graph captured from the stream keeps the overlap
// (programmatic edges, CUDA 12.3+). On unless CWB_PDL=0 is in the environment at the first launch or
// setProgrammaticDependentLaunch(false) is called; devices below 9.0 launch as usual either way.
#include <cstdint>

namespace cwb::kernels {

void setProgrammaticDependentLaunch(bool on);
// The setting (CWB_PDL, or the last setProgrammaticDependentLaunch).
bool programmaticDependentLaunch();
// Launches made with the PDL attribute in this process (tests check that the setting acted).
int64_t programmaticDependentLaunches();
// True when the current device can take it (compute capability 9.0 or more).
bool programmaticDependentLaunchSupported();

} // namespace cwb::kernels
