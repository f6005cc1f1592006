#pragma once
// Weight-only quantized GEMM for small batches: Y[m, rows] = X[m, cols] · W^T, W int4 or int8 in the tiled16x64
// layout (packed_weight.h) with group-wise scales and zeros, X and Y fp16 or bf16. The tensor cores
// (mma.m16n8k16, fp32 accumulation) multiply X by the exact integers level - zero; each chunk's fp32 sum is then
// scaled, so dequantized weights are never rounded. Any m works; m <= 64 per launch is the designed range, larger m runs in slices of 64.
// Act-order weights gather X into the workspace in packed column order first (one extra small kernel).
#include <cstddef>
#include <cstdint>
#include <string>

#include "cwb/kernels/kernel_types.h"
#include "cwb/kernels/packed_weight.h"

namespace cwb::kernels {

// A TiledIntWeight uploaded to the device. Owns its memory; movable, not copyable.
class DeviceTiledWeight {
public:
    explicit DeviceTiledWeight(const TiledIntWeight& host);
    ~DeviceTiledWeight();
    DeviceTiledWeight(DeviceTiledWeight&& other) noexcept;
    DeviceTiledWeight& operator=(DeviceTiledWeight&&) = delete;
    DeviceTiledWeight(const DeviceTiledWeight&) = delete;
    DeviceTiledWeight& operator=(const DeviceTiledWeight&) = delete;

    int bits = 4;
    ActType act = ActType::Float16;
    int64_t rows = 0, cols = 0, groups = 0, paddedRows = 0, paddedCols = 0;
    int chunksPerGroup = 0;  // > 0 when every group spans that many chunks in order (no table lookup needed)
    const uint32_t* words = nullptr;
    const uint32_t* scaleZero = nullptr;
    const int32_t* chunkGroup = nullptr;
    const int32_t* columnOf = nullptr;  // nullptr: identity
};

// What a launch may take into the product besides X · W^T (decode: one launch instead of two or three).
struct Wxa16Fusion {
    // X := RMSNorm(X) · γ first, rounded to the activation type as rmsNorm() (decode_ops.h) rounds it: γ [cols] fp32
    // on the device, r = 1/sqrt(mean(x²) + normEps) per token. The W4A16 stream kernel forms it in its prologue where
    // wxa16FoldsNorm says so; otherwise rmsNorm runs first, into the workspace. Like the packed weight, γ is read
    // before the stream kernel waits for the kernel before it (programmatic dependent launch): it must not be written
    // by the launch just before this one.
    const float* normWeight = nullptr;
    float normEps = 1e-5f;
    // Y := X · W^T + residual, rounded once: [m, rows] in the activation type, may be y itself.
    const void* residual = nullptr;
    // Y := silu(G) · U instead of [G | U] = X · W^T, for a fused [gate; up] weight (its first rows / 2 rows the gate's,
    // the rest the up's): y is [m, rows / 2]. G and U are rounded to the activation type first, as a separate
    // siluMul() (decode_ops.h) after the product would see them. Not with a residual. The W4A16 stream kernel forms it
    // as it writes its output where wxa16FoldsSwiGlu says so; otherwise the product goes to the workspace (sized with
    // swiglu = true) and siluMul runs after it.
    bool swiglu = false;
};

// Workspace (device memory) a launch with m rows needs (`norm`: with Wxa16Fusion::normWeight; `swiglu`: with
// Wxa16Fusion::swiglu); it must be zero-filled before its first use (the kernels leave it so again) and not be used
// by two launches at once. allocateWorkspace returns such memory.
size_t wxa16WorkspaceBytes(const DeviceTiledWeight& w, int64_t m, int splitK = 0, bool norm = false, bool swiglu = false);
void* allocateWorkspace(size_t bytes);
void freeWorkspace(void* p);

// splitK = 0 picks the split of the input dimension across blocks from the shape and the device; the workspace must
// have been sized with the same m, splitK, norm and swiglu. The W4A16 stream kernel is launched with programmatic dependent
// launch where that is on (dependent_launch.h): it loads its first weights while the kernel before it finishes.
void wxa16Gemm(const DeviceTiledWeight& w, const void* x, void* y, int64_t m, void* workspace, size_t workspaceBytes,
               Stream stream, int splitK = 0, const Wxa16Fusion& fusion = {});

// Whether a launch of m tokens on w with a norm forms it inside the kernel (the W4A16 stream kernel in its default,
// zero-subtracting shape with one row tile per block and one batch of registers, no act-order, and m rows of x fitting in kNormFoldSharedBytes
// of shared memory), given a 16-byte aligned γ; otherwise the norm is a separate launch.
constexpr size_t kNormFoldSharedBytes = 32 * 1024;
bool wxa16FoldsNorm(const DeviceTiledWeight& w, int64_t m);
// Whether a launch of m tokens on w with Wxa16Fusion::swiglu forms silu(gate)·up inside the kernel: the W4A16 stream
// kernel in a persistent shape (the default) with one row tile per block and one batch of registers, and rows a
// multiple of 32; otherwise
// siluMul is a separate launch.
bool wxa16FoldsSwiGlu(const DeviceTiledWeight& w, int64_t m);

// The split wxa16Gemm would choose (for reports).
int wxa16DefaultSplitK(const DeviceTiledWeight& w, int64_t m);

// The W4A16 kernel for m <= 16 comes in several shapes (row tiles per warp, register buffers); one is used by every
// launch of the process (default 0; CWB_W4_SMALL_CONFIG in the environment sets the start value). For benchmarks
// and tests: switch between launches, never while another thread launches.
int wxa16SmallConfigCount();
int wxa16SmallConfig();
void wxa16SetSmallConfig(int index);   // throws KernelError outside [0, count)
std::string wxa16SmallConfigName(int index);

// Which kernel runs W4A16 launches of m <= 16: Ring (registers hold the loads in flight, split-K across blocks;
// every GPU), Tma (sm_90 and newer: bulk copies into shared memory; on older GPUs the launcher runs Ring instead),
// Stream (every GPU: one block per row tile sums the whole input dimension, no split-K) or Auto (the default: Stream
// where it measured faster on the H200, i.e. up to 8 tokens, or few row tiles at up to 16, else Ring;
// docs/performance.md, "W4A16: one LOP3 per register, the zero subtracted before the mma"). One choice for the whole process; CWB_W4_KERNEL=auto|ring|tma|stream in the environment sets the start
// value. Tma and Stream have shapes of their own (CWB_W4_TMA_CONFIG, CWB_W4_STREAM_CONFIG set the start values).
// Switch between launches, never while another thread launches.
enum class W4SmallKernel { Ring, Tma, Stream, Auto };
W4SmallKernel wxa16SmallKernel();
void wxa16SetSmallKernel(W4SmallKernel kernel);
const char* wxa16SmallKernelName(W4SmallKernel kernel);
// The kernel a launch of m tokens on w runs under the current choice (Auto resolved; Tma without sm_90: Ring; Ring
// also stands for the general kernel of launches the small-m kernels do not take: 8 bits, m > 16; for 8-bit
// launches see wxa16W8KernelFor).
W4SmallKernel wxa16SmallKernelFor(const DeviceTiledWeight& w, int64_t m);
bool wxa16TmaAvailable();  // the current device is sm_90 or newer
int wxa16TmaConfigCount();
int wxa16TmaConfig();
void wxa16SetTmaConfig(int index);  // throws KernelError outside [0, count)
std::string wxa16TmaConfigName(int index);
int wxa16StreamConfigCount();
int wxa16StreamConfig();
void wxa16SetStreamConfig(int index);  // throws KernelError outside [0, count)
std::string wxa16StreamConfigName(int index);
// Row tiles (of 16 output rows) a block of the stream kernel takes at once under configuration `index` for m tokens:
// 1, or 2 / 4 in the shapes that share each activation fragment between tiles (these fold neither the norm nor SwiGLU).
// Throws KernelError for an index outside [0, count).
int wxa16StreamRowTiles(int index, int64_t m);
// Launches of the W4A16 stream kernel in this process with `rowTiles` row tiles per block (1, 2 or 4; else
// KernelError) and, `overlap`, two batches of registers in the persistent loop (host-side counts, for tests: a CUDA
// graph's launches are counted when it is captured, not when it is replayed).
int64_t wxa16StreamLaunchCount(int rowTiles, bool overlap);
// Warps per block of this process's last W4A16 stream launch (0 before the first; host-side, for tests).
int wxa16StreamLastWarps();
// The persistent stream shapes size their grid by the blocks the GPU holds at once; a cap > 0 lowers that count
// (for tests, so that blocks take several row tiles on small weights; and for benchmarks). 0: no cap. Set it between
// launches, never while another thread launches.
int wxa16StreamResidentCap();
void wxa16SetStreamResidentCap(int blocks);  // throws KernelError below 0
// Which kernel runs W8A16 launches of m <= 16: Stream (the default; w8_stream_kernel.cuh: one block per row tile sums
// the whole input dimension, as the W4 stream kernel) or Old (the general kernel of wxa16_kernel.cuh, split-K across
// blocks, which also runs every m > 16). Measured in docs/performance.md, "W8A16: the stream kernel". One choice for
// the whole process; CWB_W8_KERNEL=old|stream in the environment sets the start value, CWB_W8_STREAM_CONFIG the
// stream kernel's shapes. Switch between launches, never while another thread launches.
enum class W8SmallKernel { Old, Stream };
W8SmallKernel wxa16W8Kernel();
void wxa16SetW8Kernel(W8SmallKernel kernel);
const char* wxa16W8KernelName(W8SmallKernel kernel);
// The kernel a launch of m tokens on the 8-bit weight w runs under the current choice (m > 16 and 4-bit weights:
// Old, the general kernel).
W8SmallKernel wxa16W8KernelFor(const DeviceTiledWeight& w, int64_t m);
int wxa16W8StreamConfigCount();
int wxa16W8StreamConfig();
void wxa16SetW8StreamConfig(int index);  // throws KernelError outside [0, count)
std::string wxa16W8StreamConfigName(int index);
// Tma with 2..8 splits adds them up inside a thread-block cluster (default; CWB_W4_TMA_REDUCE=cluster|global sets
// the start value) instead of through fp32 partial sums in the workspace and the last block of each row range.
bool wxa16TmaClusterReduce();
void wxa16SetTmaClusterReduce(bool cluster);

// CPU reference: y[m, rows] = x[m, cols] · dequantizeTiledRef(w, false)^T in double, returned as float.
void wxa16GemmRef(const TiledIntWeight& w, const float* x, int64_t m, float* y);

} // namespace cwb::kernels
