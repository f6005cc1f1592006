// Host side of the W4A16 / W8A16 GEMM: device copy of the packed weight, workspace, split-K choice, launch.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "cuda_check.h"
#include "cwb/kernels/decode_ops.h"
#include "cwb/kernels/device_info.h"
#include "cwb/kernels/env_setting.h"
#include "cwb/kernels/wxa16_gemm.h"
#include "w4_small_m_kernel.cuh"
#include "w4_stream_kernel.cuh"
#include "w4_tma_kernel.cuh"
#include "w8_stream_kernel.cuh"
#include "wxa16_kernel.cuh"

namespace cwb::kernels {

namespace detail {
namespace {
// A configuration index from the environment: 0 when unset or outside 0..count - 1.
int configFromEnvironment(const char* name, int count, int fallback = 0) {
    return int(env::envInteger(name, 0, count - 1, fallback));
}
std::atomic<int>& smallConfigSlot() {  // CWB_W4_SMALL_CONFIG at start; wxa16SetSmallConfig afterwards
    static std::atomic<int> index{configFromEnvironment("CWB_W4_SMALL_CONFIG", kSmallConfigs)};
    return index;
}
std::atomic<int>& streamConfigSlot() {  // CWB_W4_STREAM_CONFIG at start; wxa16SetStreamConfig afterwards
    static std::atomic<int> index{configFromEnvironment("CWB_W4_STREAM_CONFIG", kStreamConfigs, kDefaultStreamConfig)};
    return index;
}
std::atomic<int>& tmaConfigSlot() {  // CWB_W4_TMA_CONFIG at start; wxa16SetTmaConfig afterwards
    static std::atomic<int> index{configFromEnvironment("CWB_W4_TMA_CONFIG", kTmaConfigs)};
    return index;
}
// Per shape, the faster of Ring and Stream as measured on the H200 (docs/performance.md, "W4A16: the stream kernel").
constexpr W4SmallKernel kDefaultSmallKernel = W4SmallKernel::Auto;
std::atomic<W4SmallKernel>& smallKernelSlot() {  // CWB_W4_KERNEL=ring|tma at start; wxa16SetSmallKernel afterwards
    static std::atomic<W4SmallKernel> kernel{static_cast<W4SmallKernel>(env::envChoice(
        "CWB_W4_KERNEL", {"ring", "tma", "stream", "auto"}, int(kDefaultSmallKernel)))};   // the enum's order
    return kernel;
}
std::atomic<int>& w8StreamConfigSlot() {  // CWB_W8_STREAM_CONFIG at start; wxa16SetW8StreamConfig afterwards
    static std::atomic<int> index{configFromEnvironment("CWB_W8_STREAM_CONFIG", kW8StreamConfigs)};
    return index;
}
// W8A16 at m <= 16: the stream kernel was faster than the old one on 35 of the 36 (shape, m) points of the H200 runs
// (docs/performance.md, "W8A16: the stream kernel").
constexpr W8SmallKernel kDefaultW8Kernel = W8SmallKernel::Stream;
std::atomic<W8SmallKernel>& w8KernelSlot() {  // CWB_W8_KERNEL=old|stream at start; wxa16SetW8Kernel afterwards
    static std::atomic<W8SmallKernel> kernel{static_cast<W8SmallKernel>(
        env::envChoice("CWB_W8_KERNEL", {"old", "stream"}, int(kDefaultW8Kernel)))};   // the enum's order
    return kernel;
}
std::atomic<bool>& tmaClusterSlot() {  // CWB_W4_TMA_REDUCE=cluster|global at start; wxa16SetTmaClusterReduce afterwards
    static std::atomic<bool> cluster{env::envChoice("CWB_W4_TMA_REDUCE", {"cluster", "global"}, 0) == 0};
    return cluster;
}
} // namespace
int smallConfigIndex() { return smallConfigSlot().load(std::memory_order_relaxed); }
int tmaConfigIndex() { return tmaConfigSlot().load(std::memory_order_relaxed); }
int streamConfigIndex() { return streamConfigSlot().load(std::memory_order_relaxed); }
std::atomic<int>& streamResidentCapSlot() {
    static std::atomic<int> cap{0};
    return cap;
}
int streamResidentCap() { return streamResidentCapSlot().load(std::memory_order_relaxed); }
int w8StreamConfigIndex() { return w8StreamConfigSlot().load(std::memory_order_relaxed); }
} // namespace detail

W8SmallKernel wxa16W8Kernel() { return detail::w8KernelSlot().load(std::memory_order_relaxed); }
void wxa16SetW8Kernel(W8SmallKernel kernel) { detail::w8KernelSlot().store(kernel, std::memory_order_relaxed); }
const char* wxa16W8KernelName(W8SmallKernel kernel) {
    return kernel == W8SmallKernel::Stream ? "stream" : "old";
}

int wxa16W8StreamConfigCount() { return detail::kW8StreamConfigs; }
int wxa16W8StreamConfig() { return detail::w8StreamConfigIndex(); }
void wxa16SetW8StreamConfig(int index) {
    if (index < 0 || index >= detail::kW8StreamConfigs)
        throw KernelError("wxa16SetW8StreamConfig: configuration " + std::to_string(index) + " is outside [0, " +
                          std::to_string(detail::kW8StreamConfigs) + ")");
    detail::w8StreamConfigSlot().store(index, std::memory_order_relaxed);
}
std::string wxa16W8StreamConfigName(int index) {
    if (index < 0 || index >= detail::kW8StreamConfigs) return "?";
    auto shape = [](const detail::W8StreamShape& c) {
        return std::to_string(c.batch) + (c.batch == 1 ? " chunk" : " chunks") + " per batch" +
               (c.overlap ? " (next batch loaded during this one)" : "") + ", " +
               (c.maxWarps ? "up to " + std::to_string(c.maxWarps) : std::string("16/8/4 (all blocks resident)")) +
               " warps per row tile" + (c.subtract ? ", zero subtracted before the mma" : "");
    };
    const detail::W8StreamConfig& c = detail::kW8StreamConfigTable[index];
    return "m<=8: " + shape(c.upTo8) + "; m<=16: " + shape(c.upTo16);
}

W4SmallKernel wxa16SmallKernel() { return detail::smallKernelSlot().load(std::memory_order_relaxed); }
void wxa16SetSmallKernel(W4SmallKernel kernel) { detail::smallKernelSlot().store(kernel, std::memory_order_relaxed); }
const char* wxa16SmallKernelName(W4SmallKernel kernel) {
    switch (kernel) {
    case W4SmallKernel::Tma: return "tma";
    case W4SmallKernel::Stream: return "stream";
    case W4SmallKernel::Auto: return "auto";
    default: return "ring";
    }
}

int wxa16StreamConfigCount() { return detail::kStreamConfigs; }
int wxa16StreamConfig() { return detail::streamConfigIndex(); }
void wxa16SetStreamConfig(int index) {
    if (index < 0 || index >= detail::kStreamConfigs)
        throw KernelError("wxa16SetStreamConfig: configuration " + std::to_string(index) + " is outside [0, " +
                          std::to_string(detail::kStreamConfigs) + ")");
    detail::streamConfigSlot().store(index, std::memory_order_relaxed);
}
int wxa16StreamResidentCap() { return detail::streamResidentCap(); }
void wxa16SetStreamResidentCap(int blocks) {
    if (blocks < 0) throw KernelError("wxa16SetStreamResidentCap: " + std::to_string(blocks) + " blocks is below 0");
    detail::streamResidentCapSlot().store(blocks, std::memory_order_relaxed);
}
namespace detail {
namespace {
std::atomic<int64_t> streamLaunches[3][2];   // [1, 2, 4 row tiles][one batch, two batches]
std::atomic<int> streamLastWarps{0};
int rowTilesSlot(int rowTiles) { return rowTiles == 1 ? 0 : rowTiles == 2 ? 1 : rowTiles == 4 ? 2 : -1; }
} // namespace
void countStreamLaunch(int rowTiles, bool overlap, int warps) {
    const int slot = rowTilesSlot(rowTiles);
    if (slot >= 0) streamLaunches[slot][overlap ? 1 : 0].fetch_add(1, std::memory_order_relaxed);
    streamLastWarps.store(warps, std::memory_order_relaxed);
}
} // namespace detail
int wxa16StreamLastWarps() { return detail::streamLastWarps.load(std::memory_order_relaxed); }
int64_t wxa16StreamLaunchCount(int rowTiles, bool overlap) {
    const int slot = detail::rowTilesSlot(rowTiles);
    if (slot < 0) throw KernelError("wxa16StreamLaunchCount: row tiles must be 1, 2 or 4, not " + std::to_string(rowTiles));
    return detail::streamLaunches[slot][overlap ? 1 : 0].load(std::memory_order_relaxed);
}
int wxa16StreamRowTiles(int index, int64_t m) {
    if (index < 0 || index >= detail::kStreamConfigs)
        throw KernelError("wxa16StreamRowTiles: configuration " + std::to_string(index) + " is outside [0, " +
                          std::to_string(detail::kStreamConfigs) + ")");
    return detail::streamRowTiles(detail::kStreamConfigTable[index], int(std::min<int64_t>(m, detail::kSmallMaxTokens)));
}
std::string wxa16StreamConfigName(int index) {
    if (index < 0 || index >= detail::kStreamConfigs) return "?";
    const detail::StreamConfig& c = detail::kStreamConfigTable[index];
    return std::to_string(c.batch) + " chunks per batch" + (c.overlap ? " (next batch loaded during this one)" : "") +
           (c.split ? ", one accumulator per chunk" : "") + ", up to " + std::to_string(c.maxWarps) +
           " warps per row tile" + (c.subtract ? ", zero subtracted before the mma" : "") +
           (c.persist == 1   ? ", persistent (k tiles per block)"
            : c.persist == 2 ? ", persistent (all resident blocks)"
                             : "") +
           (c.manyTilesBatch ? "; " + std::to_string(c.manyTilesBatch) + " per batch past 2 row tiles per SM" : "") +
           (c.rowTiles8 > 1 || c.rowTiles16 > 1
                ? "; " + std::to_string(c.rowTiles8) + " row tiles per block up to 8 tokens, " +
                      std::to_string(c.rowTiles16) + " at 9..16"
                : "") +
           (c.overlapLongRows > 0 ? "; two batches of registers at " +
                                        (c.longRowsTokens == 1 ? std::string("one token")
                                                               : "1.." + std::to_string(c.longRowsTokens) + " tokens") +
                                        " where a warp has " +
                                        std::to_string(c.overlapLongRows) + "+ chunks (plain x)"
                                  : "") +
           (c.overlapFromTokens > 0 ? "; two batches of registers at " + std::to_string(c.overlapFromTokens) +
                                          "..8 tokens (plain x)"
                                    : "") +
           (c.warps16ManyItems > 0 ? "; up to " + std::to_string(c.warps16ManyItems) +
                                         " warps at 9..16 tokens past one group of row tiles per SM"
                                   : "");
}

bool wxa16TmaAvailable() { return deviceCapability() >= 90; }

bool wxa16TmaClusterReduce() { return detail::tmaClusterSlot().load(std::memory_order_relaxed); }
void wxa16SetTmaClusterReduce(bool cluster) { detail::tmaClusterSlot().store(cluster, std::memory_order_relaxed); }

int wxa16TmaConfigCount() { return detail::kTmaConfigs; }
int wxa16TmaConfig() { return detail::tmaConfigIndex(); }
void wxa16SetTmaConfig(int index) {
    if (index < 0 || index >= detail::kTmaConfigs)
        throw KernelError("wxa16SetTmaConfig: configuration " + std::to_string(index) + " is outside [0, " +
                          std::to_string(detail::kTmaConfigs) + ")");
    detail::tmaConfigSlot().store(index, std::memory_order_relaxed);
}
std::string wxa16TmaConfigName(int index) {
    if (index < 0 || index >= detail::kTmaConfigs) return "?";
    const detail::TmaConfig& c = detail::kTmaConfigTable[index];
    return std::to_string(c.r) + " tiles x " + std::to_string(c.w) + " warps, " + std::to_string(c.cs) +
           " chunks per stage x " + std::to_string(c.sl) + " stages per warp";
}

int wxa16SmallConfigCount() { return detail::kSmallConfigs; }
int wxa16SmallConfig() { return detail::smallConfigIndex(); }
void wxa16SetSmallConfig(int index) {
    if (index < 0 || index >= detail::kSmallConfigs)
        throw KernelError("wxa16SetSmallConfig: configuration " + std::to_string(index) + " is outside [0, " +
                          std::to_string(detail::kSmallConfigs) + ")");
    detail::smallConfigSlot().store(index, std::memory_order_relaxed);
}
std::string wxa16SmallConfigName(int index) {
    if (index < 0 || index >= detail::kSmallConfigs) return "?";
    const detail::SmallConfig& c = detail::kSmallConfigTable[index];
    return "m<=8: " + std::to_string(c.r8) + " tiles x " + std::to_string(c.s8) + " buffers, m<=16: " +
           std::to_string(c.r16) + " x " + std::to_string(c.s16) + (c.subtract ? ", zero subtracted before the mma" : "");
}

namespace {

template <typename V>
const V* upload(const std::vector<V>& host) {
    if (host.empty()) return nullptr;
    void* d = nullptr;
    CWB_CUDA_CHECK(cudaMalloc(&d, host.size() * sizeof(V)));
    CWB_CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(V), cudaMemcpyHostToDevice));
    return static_cast<const V*>(d);
}

int multiprocessors() {  // cached per device: the launcher asks on every call
    static int counts[64] = {};
    int device = 0, count = 0;
    CWB_CUDA_CHECK(cudaGetDevice(&device));
    if (device < 64 && counts[device] > 0) return counts[device];
    CWB_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    if (device < 64) counts[device] = count;
    return count;
}

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// Splits of one row range that the TMA kernel adds up inside a thread-block cluster (8: the portable cluster size).
constexpr int kMaxClusterSplit = 8;

// Counters live in a prefix of fixed size, so that one workspace shared by layers of different shapes (the
// runtime does this) never has one layer's partial sums where another layer expects zeroed counters.
constexpr size_t kCounterBytes = 64 * 1024;

bool smallTokenKernel(const DeviceTiledWeight& w, int64_t slice) {
    return w.bits == 4 && slice <= detail::kSmallMaxTokens;
}
// Auto's rule, from the H200 runs (docs/performance.md, "W4A16: one LOP3 per register, the zero subtracted before
// the mma"): up to 8 tokens the stream kernel (one block per row tile) in its default shape was faster than the ring
// kernel on all six shapes at m = 1 and 4; at up to 16 tokens with one row tile per block only while the row tiles
// fill about two blocks per multiprocessor (past that the ring kernel, which shares each activation fragment between
// two row tiles, was faster); with two row tiles per block (the default shape at 9..16 tokens) the stream kernel was
// faster on all six shapes at m = 16 ("W4A16 at 16 tokens: two row tiles per block", session 15).
bool autoPicksStream(const DeviceTiledWeight& w, int64_t slice) {
    const int64_t tiles = w.paddedRows / kTileRows;
    return slice <= 8 || tiles <= 2 * int64_t(multiprocessors()) ||
           detail::streamRowTiles(detail::streamConfig(), int(slice)) > 1;
}

// The small-token launch goes through the TMA kernel (selected, and the device has the bulk copy engine).
bool tmaKernel(const DeviceTiledWeight& w, int64_t slice) {
    return smallTokenKernel(w, slice) && wxa16SmallKernel() == W4SmallKernel::Tma && wxa16TmaAvailable();
}

// The small-token launch goes through the stream kernel (one block per row tile, no split-K).
bool streamKernel(const DeviceTiledWeight& w, int64_t slice) {
    const W4SmallKernel k = wxa16SmallKernel();
    return smallTokenKernel(w, slice) &&
           (k == W4SmallKernel::Stream || (k == W4SmallKernel::Auto && autoPicksStream(w, slice)));
}

// The launch goes through the W8A16 stream kernel (one block per row tile, no split-K).
bool w8StreamChosen(const DeviceTiledWeight& w, int64_t slice) {
    return w.bits == 8 && slice <= detail::kSmallMaxTokens && wxa16W8Kernel() == W8SmallKernel::Stream;
}

// Blocks across the rows (one split-K counter each) for a launch of `slice` tokens.
int64_t blocksAcross(const DeviceTiledWeight& w, int64_t slice) {
    const int64_t tiles = w.paddedRows / kTileRows;
    const int64_t perBlock = streamKernel(w, slice) || w8StreamChosen(w, slice) ? 1
                             : tmaKernel(w, slice)        ? detail::tmaConfig().r
                             : smallTokenKernel(w, slice) ? detail::smallRowTiles(int(slice))
                                                          : detail::kWarpsPerBlock;
    return (tiles + perBlock - 1) / perBlock;
}

int groupShiftOf(const DeviceTiledWeight& w) {
    for (int shift = 0; shift < 31; ++shift)
        if (w.chunksPerGroup == (1 << shift)) return shift;
    return -1;
}

// Chunks per split: for the small-token kernel a whole number of rounds of its 4 warps (a step never straddles
// two splits, and the warps get equal work); for the TMA kernel a whole number of stages.
int chunksPerSplit(const DeviceTiledWeight& w, int64_t slice, int split) {
    const int64_t chunks = w.paddedCols / kChunkCols;
    int64_t per = (chunks + split - 1) / split;
    if (tmaKernel(w, slice)) {
        const int stage = detail::tmaConfig().cs;
        per = (per + stage - 1) / stage * stage;
    } else if (smallTokenKernel(w, slice)) {
        const int round = detail::kSmallWarps * detail::smallChunksPerStep(groupShiftOf(w));
        per = (per + round - 1) / round * round;
    }
    return int(per);
}

// The split a launch uses: splitK (0: the default) clamped, then for the small-token kernel the number of splits
// its rounded chunks per split leave non-empty.
int resolveSplit(const DeviceTiledWeight& w, int64_t m, int splitK) {
    const int64_t chunks = w.paddedCols / kChunkCols;
    const int64_t slice = std::min<int64_t>(m, detail::kMaxTokensPerLaunch);
    if (streamKernel(w, slice) || w8StreamChosen(w, slice)) return 1;   // the block sums the whole input dimension
    if (splitK <= 0) splitK = wxa16DefaultSplitK(w, m);
    int split = int(std::clamp<int64_t>(splitK, 1, chunks));
    if (smallTokenKernel(w, slice)) {
        const int per = chunksPerSplit(w, slice, split);
        split = int((chunks + per - 1) / per);
    }
    return split;
}

struct WorkspaceLayout {
    size_t counters = 0, partial = 0, gathered = 0, normed = 0, product = 0, total = 0;
};

// `norm`: room for one slice of normalised activations (the norm run as its own kernel); `swiglu`: for one slice of
// the [gate | up] product (siluMul run after the product).
WorkspaceLayout layoutFor(const DeviceTiledWeight& w, int64_t m, int split, bool norm, bool swiglu) {
    const int64_t slice = std::min<int64_t>(m, detail::kMaxTokensPerLaunch);
    WorkspaceLayout l;
    l.counters = 0;
    l.partial = kCounterBytes;
    l.gathered = l.partial + align256(split > 1 ? size_t(split) * size_t(slice) * size_t(w.paddedRows) * 4 : 0);
    l.normed = l.gathered + (w.columnOf ? align256(size_t(slice) * size_t(w.paddedCols) * 2) : 0);
    l.product = l.normed + (norm ? align256(size_t(slice) * size_t(w.cols) * 2) : 0);
    l.total = l.product + (swiglu ? align256(size_t(slice) * size_t(w.rows) * 2) : 0);
    return l;
}

bool foldsNorm(const DeviceTiledWeight& w, int64_t slice) {
    const size_t shared = size_t(slice) * size_t(detail::normSharedStride(int(w.paddedCols / kChunkCols))) * 2;
    const detail::StreamConfig& c = detail::streamConfig();
    return streamKernel(w, slice) && !w.columnOf && c.subtract && !c.overlap && detail::streamRowTiles(c, int(slice)) == 1 &&
           shared <= kNormFoldSharedBytes;
}

// The GLU epilogue is compiled for the persistent subtract shapes only (the default; launchPersistentBatch); the
// gate and the up half each take whole row tiles.
bool foldsSwiGlu(const DeviceTiledWeight& w, int64_t slice) {
    const detail::StreamConfig& c = detail::streamConfig();
    return streamKernel(w, slice) && c.subtract && c.persist != 0 && !c.overlap &&
           detail::streamRowTiles(c, int(slice)) == 1 && w.rows % (2 * kTileRows) == 0;
}

} // namespace

DeviceTiledWeight::DeviceTiledWeight(const TiledIntWeight& host)
    : bits(host.bits), act(host.act), rows(host.rows), cols(host.cols), groups(host.groups),
      paddedRows(host.paddedRows), paddedCols(host.paddedCols) {
    if (host.words.empty() || host.scaleZero.empty() || host.chunkGroup.empty())
        throw KernelError("DeviceTiledWeight: the packed weight is empty");
    try {
        words = upload(host.words);
        scaleZero = upload(host.scaleZero);
        chunkGroup = upload(host.chunkGroup);
        columnOf = upload(host.columnOf);
    } catch (...) {  // the destructor does not run for a half-built object: free what was uploaded
        cudaFree(const_cast<uint32_t*>(words));
        cudaFree(const_cast<uint32_t*>(scaleZero));
        cudaFree(const_cast<int32_t*>(chunkGroup));
        throw;
    }
    // Every group spanning the same number of chunks lets the kernel compute the group instead of reading it.
    int64_t perGroup = 0;
    while (perGroup < int64_t(host.chunkGroup.size()) && host.chunkGroup[size_t(perGroup)] == host.chunkGroup[0]) ++perGroup;
    bool uniform = host.chunkGroup[0] == 0;
    for (size_t c = 0; uniform && c < host.chunkGroup.size(); ++c) uniform = host.chunkGroup[c] == int32_t(int64_t(c) / perGroup);
    chunksPerGroup = uniform ? int(perGroup) : 0;
}

DeviceTiledWeight::~DeviceTiledWeight() {
    cudaFree(const_cast<uint32_t*>(words));
    cudaFree(const_cast<uint32_t*>(scaleZero));
    cudaFree(const_cast<int32_t*>(chunkGroup));
    cudaFree(const_cast<int32_t*>(columnOf));
}

DeviceTiledWeight::DeviceTiledWeight(DeviceTiledWeight&& o) noexcept
    : bits(o.bits), act(o.act), rows(o.rows), cols(o.cols), groups(o.groups), paddedRows(o.paddedRows),
      paddedCols(o.paddedCols), chunksPerGroup(o.chunksPerGroup), words(o.words), scaleZero(o.scaleZero), chunkGroup(o.chunkGroup), columnOf(o.columnOf) {
    o.words = o.scaleZero = nullptr;
    o.chunkGroup = o.columnOf = nullptr;
}

W4SmallKernel wxa16SmallKernelFor(const DeviceTiledWeight& w, int64_t m) {
    const int64_t slice = std::min<int64_t>(m, detail::kMaxTokensPerLaunch);
    return streamKernel(w, slice) ? W4SmallKernel::Stream : tmaKernel(w, slice) ? W4SmallKernel::Tma : W4SmallKernel::Ring;
}

W8SmallKernel wxa16W8KernelFor(const DeviceTiledWeight& w, int64_t m) {
    return w8StreamChosen(w, std::min<int64_t>(m, detail::kMaxTokensPerLaunch)) ? W8SmallKernel::Stream : W8SmallKernel::Old;
}

int wxa16DefaultSplitK(const DeviceTiledWeight& w, int64_t m) {
    const int64_t slice = std::min<int64_t>(m, detail::kMaxTokensPerLaunch);
    const int64_t across = blocksAcross(w, slice), chunks = w.paddedCols / kChunkCols;
    if (streamKernel(w, slice) || w8StreamChosen(w, slice)) return 1;
    if (smallTokenKernel(w, slice)) {
        // As many splits as fit in one wave of resident blocks (a second, partial wave costs more than it saves).
        const int shift = groupShiftOf(w);
        const bool tma = tmaKernel(w, slice), f16 = w.act == ActType::Float16;
        const int perSm = tma ? (f16 ? detail::w4TmaBlocksPerSm<__half>(int(slice), shift)
                                     : detail::w4TmaBlocksPerSm<__nv_bfloat16>(int(slice), shift))
                              : (f16 ? detail::w4SmallBlocksPerSm<__half>(int(slice), shift)
                                     : detail::w4SmallBlocksPerSm<__nv_bfloat16>(int(slice), shift));
        const int64_t split = std::max<int64_t>(1, int64_t(perSm) * multiprocessors() / across);
        return int(std::min<int64_t>(split, chunks));
    }
    // One wave of about two blocks per multiprocessor; fewer splits when the fp32 partial sums would cost more than
    // a quarter of the weight bytes (large m), and at least two chunks per split.
    const int64_t target = 2 * int64_t(multiprocessors());
    int64_t split = std::max<int64_t>(1, (target + across / 2) / across);
    const int64_t weightBytes = w.paddedRows * w.paddedCols * w.bits / 8;
    split = std::min(split, std::max<int64_t>(1, weightBytes / (4 * slice * w.paddedRows * 4)));
    split = std::min(split, std::max<int64_t>(1, chunks / 2));
    return int(split);
}

size_t wxa16WorkspaceBytes(const DeviceTiledWeight& w, int64_t m, int splitK, bool norm, bool swiglu) {
    return layoutFor(w, m, resolveSplit(w, m, splitK), norm, swiglu).total;
}

bool wxa16FoldsNorm(const DeviceTiledWeight& w, int64_t m) {
    return foldsNorm(w, std::min<int64_t>(m, detail::kMaxTokensPerLaunch));
}

bool wxa16FoldsSwiGlu(const DeviceTiledWeight& w, int64_t m) {
    return foldsSwiGlu(w, std::min<int64_t>(m, detail::kMaxTokensPerLaunch));
}

void* allocateWorkspace(size_t bytes) {
    void* p = nullptr;
    CWB_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
    CWB_CUDA_CHECK(cudaMemset(p, 0, std::max<size_t>(bytes, 256)));
    return p;
}

void freeWorkspace(void* p) { cudaFree(p); }

void wxa16Gemm(const DeviceTiledWeight& w, const void* x, void* y, int64_t m, void* workspace, size_t workspaceBytes,
               Stream stream, int splitK, const Wxa16Fusion& fusion) {
    if (m <= 0) return;
    if (!x || !y || !workspace) throw KernelError("wxa16Gemm: x, y and workspace must be device pointers");
    if (w.bits != 4 && w.bits != 8) throw KernelError("wxa16Gemm: bits must be 4 or 8");
    if (reinterpret_cast<uintptr_t>(x) % 16) throw KernelError("wxa16Gemm: x must be 16-byte aligned");
    if (!w.columnOf && w.cols % 8) throw KernelError("wxa16Gemm: cols must be a multiple of 8");
    const bool swiglu = fusion.swiglu;
    const bool norm = fusion.normWeight != nullptr;
    if (norm && !(fusion.normEps >= 0.0f)) throw KernelError("wxa16Gemm: the norm's epsilon must be >= 0");
    if (swiglu && (fusion.residual || w.rows % 2))
        throw KernelError("wxa16Gemm: SwiGLU needs an even number of rows ([gate; up]) and no residual");
    const int64_t outRows = swiglu ? w.rows / 2 : w.rows;   // y's row length
    if (fusion.residual && reinterpret_cast<uintptr_t>(fusion.residual) % 2)
        throw KernelError("wxa16Gemm: the residual must be aligned to its element");
    const int split = resolveSplit(w, m, splitK);
    const WorkspaceLayout layout = layoutFor(w, m, split, norm, swiglu);
    if (workspaceBytes < layout.total)
        throw KernelError("wxa16Gemm: the workspace has " + std::to_string(workspaceBytes) + " bytes, " +
                          std::to_string(layout.total) +
                          " are needed (wxa16WorkspaceBytes with the same m, splitK, norm and swiglu)");
    char* ws = static_cast<char*>(workspace);
    const cudaStream_t s = detail::toStream(stream);
    const int64_t chunks = w.paddedCols / kChunkCols;
    if (blocksAcross(w, 1) * int64_t(sizeof(int)) > int64_t(kCounterBytes))
        throw KernelError("wxa16Gemm: " + std::to_string(w.rows) + " output rows exceed the kernel's limit");

    for (int64_t done = 0; done < m; done += detail::kMaxTokensPerLaunch) {
        const int slice = int(std::min<int64_t>(m - done, detail::kMaxTokensPerLaunch));
        const char* xs = static_cast<const char*>(x) + done * w.cols * 2;
        const bool fold = norm && foldsNorm(w, slice) && reinterpret_cast<uintptr_t>(fusion.normWeight) % 16 == 0;
        const bool foldGlu = swiglu && foldsSwiGlu(w, slice);
        if (norm && !fold) {   // the norm as its own kernel, into the workspace
            void* normed = ws + layout.normed;
            rmsNorm(xs, nullptr, nullptr, fusion.normWeight, normed, slice, w.cols, fusion.normEps, w.act, stream);
            xs = static_cast<const char*>(normed);
        }
        char* ys = static_cast<char*>(y) + done * outRows * 2;   // this slice's rows of y
        detail::Wxa16Params p{};
        p.words = reinterpret_cast<const uint4*>(w.words);
        p.scaleZero = w.scaleZero;
        p.chunkGroup = w.chunkGroup;
        p.x = xs;
        p.ldx = w.cols;
        if (w.columnOf) {
            void* xg = ws + layout.gathered;
            if (w.act == ActType::Float16)
                detail::launchGather<__half>(xs, w.cols, w.columnOf, w.paddedCols, slice, xg, s);
            else
                detail::launchGather<__nv_bfloat16>(xs, w.cols, w.columnOf, w.paddedCols, slice, xg, s);
            CWB_CUDA_CHECK_LAUNCH("wxa16Gemm (gather)");
            p.x = xg;
            p.ldx = w.paddedCols;
        }
        // SwiGLU not in the kernel: the [gate | up] product into the workspace, siluMul from there into y below.
        p.y = swiglu && !foldGlu ? static_cast<void*>(ws + layout.product) : static_cast<void*>(ys);
        p.residual = fusion.residual ? static_cast<const char*>(fusion.residual) + done * w.rows * 2 : nullptr;
        p.cols = int(w.cols);
        p.normWeight = fold ? fusion.normWeight : nullptr;
        p.normEps = fusion.normEps;
        p.swiglu = foldGlu ? 1 : 0;
        p.ldy = foldGlu ? outRows : w.rows;
        p.m = slice;
        p.rows = int(w.rows);
        p.tiles = int(w.paddedRows / kTileRows);
        p.chunks = int(chunks);
        p.groups = int(w.groups);
        p.splitK = split;
        p.chunksPerSplit = chunksPerSplit(w, slice, split);
        p.groupShift = groupShiftOf(w);
        p.partial = reinterpret_cast<float*>(ws + layout.partial);
        p.counters = reinterpret_cast<int*>(ws + layout.counters);
        p.clusterReduce = tmaKernel(w, slice) && split > 1 && split <= kMaxClusterSplit && wxa16TmaClusterReduce();
        if (w8StreamChosen(w, slice)) {
            if (w.act == ActType::Float16)
                detail::launchW8Stream<__half>(p, multiprocessors(), s);
            else
                detail::launchW8Stream<__nv_bfloat16>(p, multiprocessors(), s);
        } else if (streamKernel(w, slice)) {
            // One block sums the whole input dimension. `split` was resolved for the first slice: a last slice of
            // m > 64 tokens that comes here must not inherit a split (its blocks would write partial sums, never y).
            p.splitK = 1;
            const detail::StreamSplit cut = detail::streamSplit(p.chunks, p.groupShift >= 1 ? 2 : 1, p.m, p.tiles,
                                                                       multiprocessors());
            p.chunksPerSplit = cut.chunksPerWarp;
            if (w.act == ActType::Float16)
                detail::launchW4Stream<__half>(p, cut.warps, multiprocessors(), s);
            else
                detail::launchW4Stream<__nv_bfloat16>(p, cut.warps, multiprocessors(), s);
        } else if (tmaKernel(w, slice)) {
            if (w.act == ActType::Float16)
                detail::launchW4Tma<__half>(p, s);
            else
                detail::launchW4Tma<__nv_bfloat16>(p, s);
        } else if (smallTokenKernel(w, slice)) {
            if (w.act == ActType::Float16)
                detail::launchW4Small<__half>(p, s);
            else
                detail::launchW4Small<__nv_bfloat16>(p, s);
        } else {
            const dim3 grid(unsigned(blocksAcross(w, slice)), unsigned(split));
            if (w.act == ActType::Float16)
                detail::launchWxa16<__half>(p, w.bits, grid, s);
            else
                detail::launchWxa16<__nv_bfloat16>(p, w.bits, grid, s);
        }
        CWB_CUDA_CHECK_LAUNCH("wxa16Gemm");
        if (swiglu && !foldGlu) {
            const char* product = ws + layout.product;
            siluMul(product, w.rows, product + outRows * 2, w.rows, ys, slice, outRows, w.act, stream);
        }
    }
}

} // namespace cwb::kernels
