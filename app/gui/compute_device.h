#pragma once
// Where the GUI's runs, latency measurements and text generation compute: the CPU in float32 (the default, as
// `cwb --batch`), or the GPU in float16 where this LibTorch sees one (as `cwb --batch --device cuda`). Chosen in
// Run ▸ Compute On and kept between sessions. Jobs take the choice when they start.
#include <QString>

#include "core/runtime/transformer.h"

namespace cwb {

enum class ComputeDevice { Cpu, Cuda };

bool cudaComputeAvailable();
ComputeDevice guiComputeDevice();   // the kept choice; the CPU where CUDA is not available
// Throws cwb::Error for CUDA where none is available.
void setGuiComputeDevice(ComputeDevice device);
RuntimeOptions guiRuntimeOptions();
// "CPU · 16 threads" or "CUDA (float16): NVIDIA H200".
QString describeComputeDevice();

} // namespace cwb
