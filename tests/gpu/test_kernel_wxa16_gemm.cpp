// GPU test (label `gpu`, exit 77 without a GPU): the W4A16 / W8A16 GEMM against its CPU reference (double
// accumulation over the same dequantized weights) by normalised MSE, for fp16 and bf16 activations, several token
// counts (1..64 and a multi-launch 80), every W4A16 kernel for m <= 16 (ring, stream; TMA on sm_90) in each of their
// shapes, the default (auto) choosing between ring and stream by the number of row tiles, both W8A16 kernels for
// m <= 16 (old, stream in each of its shapes), group sizes, asymmetric zeros, act-order, padded rows/columns and every
// split of the input dimension the launcher may choose. The output is poisoned with NaN before each launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../kernels/kernel_check.h"
#include "device_memory.h"
#include "cwb/kernels/decode_ops.h"
#include "cwb/kernels/dependent_launch.h"
#include "cwb/kernels/rtn_quant.h"
#include "cwb/kernels/wxa16_gemm.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

struct Case {
    int bits;
    bool symmetric;
    int64_t rows, cols, groupSize;
    int order;  // 0: groups in column order; 1: act-order (shuffled, equal sizes); 2: random group of each column
};

TiledIntWeight makeWeight(const Case& c, ActType act, uint32_t seed) {
    RtnSpec spec{c.bits, c.symmetric, c.groupSize};
    const int64_t groups = rtnGroupCount(c.cols, spec);
    std::vector<float> w = gaussian(size_t(c.rows * c.cols), seed, 0.05f);
    std::vector<uint8_t> levels(w.size());
    std::vector<float> scales(size_t(c.rows * groups));
    std::vector<int32_t> zeros(scales.size());
    rtnQuantizeRef(w.data(), c.rows, c.cols, spec, levels.data(), scales.data(), zeros.data());
    std::vector<int32_t> gidx(size_t(c.cols));
    const int64_t width = c.groupSize > 0 ? c.groupSize : c.cols;
    for (int64_t i = 0; i < c.cols; ++i) gidx[size_t(i)] = int32_t(i / width);
    std::mt19937 rng(seed);
    if (c.order == 1) std::shuffle(gidx.begin(), gidx.end(), rng);
    if (c.order == 2)  // uneven groups: the kernel reads the group of each chunk from its table
        for (auto& g : gidx) g = int32_t(rng() % uint32_t(groups));
    const std::vector<int32_t> words = packCoreWords(levels.data(), c.rows, c.cols, c.bits);
    return packTiled({c.bits, c.rows, c.cols, groups, words.data(), scales.data(), zeros.data(), gidx.data()}, act);
}

// xMean: added to every activation (all of one sign when large, as after a SiLU). Kernels that fold the zero after
// the mma carry (base + zero)·sum(x) through its fp32 sums, so such x shows the precision they lose.
void runCase(const Case& c, ActType act, const std::vector<int64_t>& ms, uint32_t seed, float xMean = 0.0f) {
    const TiledIntWeight host = makeWeight(c, act, seed);
    DeviceTiledWeight dev(host);
    const double tol = act == ActType::Float16 ? kGemmNmseFp16 : kGemmNmseBf16;
    for (int64_t m : ms) {
        std::vector<float> xf = gaussian(size_t(m * c.cols), seed + uint32_t(m));
        std::vector<uint16_t> xb(xf.size());
        for (size_t i = 0; i < xf.size(); ++i) {
            xb[i] = floatToActBits(xf[i] + xMean, act);
            xf[i] = actBitsToFloat(xb[i], act);  // the reference sees the rounded activations
        }
        std::vector<float> ref(size_t(m * c.rows));
        wxa16GemmRef(host, xf.data(), m, ref.data());
        void *dx = nullptr, *dy = nullptr;
        cudaMalloc(&dx, xb.size() * 2);
        cudaMalloc(&dy, ref.size() * 2);
        cudaMemcpy(dx, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice);
        const int chosen = wxa16DefaultSplitK(dev, m);
        for (int split : {0, 1, 3, 64}) {
            const size_t bytes = wxa16WorkspaceBytes(dev, m, split);
            void* ws = allocateWorkspace(bytes);
            std::vector<float> out(ref.size());
            double worst = 0.0;
            for (int rep = 0; rep < 2; ++rep) {  // twice: the second launch runs on counters the first reset
                cudaMemset(dy, 0xFF, ref.size() * 2);
                wxa16Gemm(dev, dx, dy, m, ws, bytes, nullptr, split);
                if (cudaDeviceSynchronize() != cudaSuccess) throw KernelError("wxa16Gemm launch failed");
                std::vector<uint16_t> yb(ref.size());
                cudaMemcpy(yb.data(), dy, yb.size() * 2, cudaMemcpyDeviceToHost);
                for (size_t i = 0; i < yb.size(); ++i) out[i] = actBitsToFloat(yb[i], act);
                worst = std::max(worst, nmse(out, ref));
            }
            freeWorkspace(ws);
            char what[200];
            std::snprintf(what, sizeof what, "int%d %s %s g%lld%s %lldx%lld m=%lld%s split=%d%s: nmse %.2e < %.0e",
                          c.bits, c.symmetric ? "sym" : "asym", actTypeName(act), (long long)c.groupSize,
                          c.order == 1 ? " act-order" : c.order == 2 ? " random-groups" : "", (long long)c.rows, (long long)c.cols, (long long)m,
                          xMean != 0.0f ? (" x mean " + std::to_string(xMean)).c_str() : "",
                          split ? split : chosen, split ? "" : " (auto)", worst, tol);
            check(worst < tol, what);
        }
        cudaFree(dx);
        cudaFree(dy);
    }
}

// What a fused launch takes besides X · W^T (Wxa16Fusion).
struct Fusion {
    bool norm, residual, inPlace;  // inPlace: the residual is y itself
    bool swiglu = false;           // rows are [gate; up]: Y = silu(gate) · up, [m, rows / 2] (no residual)
};

// Y = RMSNorm(X)·γ · W^T (+ residual) against rmsNormRef, then wxa16GemmRef, then the residual added in double; with
// f.swiglu, Y = silu(G) · U for [G | U] = X·W^T rounded to the activation type, against siluMulRef.
// `folds`: whether the norm must run inside the kernel (wxa16FoldsNorm), with f.swiglu whether silu(G) · U must
// (wxa16FoldsSwiGlu); with programmatic dependent launch on (and an sm_90 device) the launch count says so: the
// stream kernel is one such launch, a separate rmsNorm or siluMul another.
void runFusedCase(const Case& c, ActType act, const std::vector<int64_t>& ms, uint32_t seed, Fusion f, bool folds) {
    const TiledIntWeight host = makeWeight(c, act, seed);
    DeviceTiledWeight dev(host);
    const double tol = act == ActType::Float16 ? kGemmNmseFp16 : kGemmNmseBf16;
    const float eps = 1e-5f;
    std::vector<float> gamma = gaussian(size_t(c.cols), seed + 100, 0.4f);
    for (float& g : gamma) g += 1.0f;
    float* dGamma = toDevice(gamma);
    for (int64_t m : ms) {
        const int64_t outRows = f.swiglu ? c.rows / 2 : c.rows;
        const std::vector<float> x = roundedGaussian(size_t(m * c.cols), seed + uint32_t(m), act, 3.0f);
        const std::vector<float> res = roundedGaussian(size_t(m * outRows), seed + 50 + uint32_t(m), act, 2.0f);
        std::vector<float> h = x;
        if (f.norm) rmsNormRef(x.data(), nullptr, nullptr, gamma.data(), h.data(), m, c.cols, eps, act);
        std::vector<float> ref(size_t(m * c.rows));
        wxa16GemmRef(host, h.data(), m, ref.data());
        if (f.swiglu) {   // [gate | up] as the activation type holds it, then SiLU · up
            for (float& v : ref) v = actBitsToFloat(floatToActBits(v, act), act);
            std::vector<float> glu(size_t(m * outRows));
            siluMulRef(ref.data(), c.rows, ref.data() + outRows, c.rows, glu.data(), m, outRows, act);
            ref = glu;
        }
        if (f.residual)
            for (size_t i = 0; i < ref.size(); ++i) ref[i] = float(double(ref[i]) + double(res[i]));
        uint16_t* dx = upload(x, act);
        uint16_t* dRes = upload(res, act);
        uint16_t* dy = upload(std::vector<float>(ref.size(), 0.0f), act);
        const size_t bytes = wxa16WorkspaceBytes(dev, m, 0, f.norm, f.swiglu);
        void* ws = allocateWorkspace(bytes);
        Wxa16Fusion fusion;
        fusion.normWeight = f.norm ? dGamma : nullptr;
        fusion.normEps = eps;
        fusion.swiglu = f.swiglu;
        fusion.residual = !f.residual ? nullptr : f.inPlace ? static_cast<const void*>(dy) : static_cast<const void*>(dRes);
        if (f.inPlace) cudaMemcpy(dy, dRes, ref.size() * 2, cudaMemcpyDeviceToDevice);
        else cudaMemset(dy, 0xFF, ref.size() * 2);
        const int64_t before = programmaticDependentLaunches();
        wxa16Gemm(dev, dx, dy, m, ws, bytes, nullptr, 0, fusion);
        if (cudaDeviceSynchronize() != cudaSuccess) throw KernelError("fused wxa16Gemm launch failed");
        const int64_t launches = programmaticDependentLaunches() - before;
        const bool stream = c.bits == 4 ? wxa16SmallKernelFor(dev, m) == W4SmallKernel::Stream : false;
        const double err = nmse(download(dy, ref.size(), act), ref);
        char what[240];
        const bool normFolds = f.norm && (f.swiglu ? wxa16FoldsNorm(dev, m) : folds);
        const std::string prologue = std::string(f.norm ? (normFolds ? "folded norm" : "separate norm") : "no norm") +
                                     (f.swiglu ? (folds ? ", SwiGLU in the kernel" : ", separate siluMul") : "");
        std::snprintf(what, sizeof what, "fused int%d %s g%lld%s %lldx%lld m=%lld%s%s%s%s (%s): nmse %.2e < %.0e", c.bits,
                      actTypeName(act), (long long)c.groupSize, c.order == 1 ? " act-order" : "", (long long)c.rows,
                      (long long)c.cols, (long long)m, f.norm ? " +norm" : "", f.swiglu ? " +SwiGLU" : "",
                      f.residual ? " +residual" : "", f.inPlace ? " (in place)" : "", prologue.c_str(), err, tol);
        check(err < tol, what);
        if (f.norm || f.swiglu) {
            std::snprintf(what, sizeof what, "fused %lldx%lld m=%lld: wxa16Folds%s is %s", (long long)c.rows,
                          (long long)c.cols, (long long)m, f.swiglu ? "SwiGlu" : "Norm", folds ? "true" : "false");
            check((f.swiglu ? wxa16FoldsSwiGlu(dev, m) : wxa16FoldsNorm(dev, m)) == folds, what);
        }
        // (Past 64 tokens each slice of 64 makes its own choices: the count is not predicted there.)
        if (m <= 64 && programmaticDependentLaunch() && programmaticDependentLaunchSupported()) {
            const int64_t expected = (stream ? 1 : 0) + (f.norm && !normFolds ? 1 : 0) + (f.swiglu && !folds ? 1 : 0);
            std::snprintf(what, sizeof what, "fused %lldx%lld m=%lld: %lld launches with PDL, %lld expected",
                          (long long)c.rows, (long long)c.cols, (long long)m, (long long)launches, (long long)expected);
            check(launches == expected, what);
        }
        freeWorkspace(ws);
        cudaFree(dx);
        cudaFree(dRes);
        cudaFree(dy);
    }
    cudaFree(dGamma);
}

void runFusedCases(ActType act) {
    const W4SmallKernel initial = wxa16SmallKernel();
    const int initialStream = wxa16StreamConfig();
    const Fusion both{true, true, false}, normOnly{true, false, false}, residualOnly{false, true, false},
        inPlace{true, true, true};
    // silu(gate) · up written instead of [gate | up] (a fused gate/up weight), with and without the norm before
    const Fusion gluNorm{true, false, false, true}, gluOnly{false, false, false, true};
    wxa16SetSmallKernel(W4SmallKernel::Auto);
    wxa16SetStreamConfig(6);
    std::printf("-- fused norm / residual: auto, stream configuration 6\n");
    for (Fusion f : {both, normOnly, residualOnly, inPlace}) runFusedCase({4, true, 256, 1024, 128, 0}, act, {1, 2, 4}, 21, f, true);
    // Columns padded to a whole chunk pack with a column table (the gather writes the zeros): the norm runs first.
    runFusedCase({4, false, 40, 1000, 128, 0}, act, {1, 3}, 22, both, false);
    runFusedCase({4, false, 80, 8192, 128, 0}, act, {1}, 23, both, true);         // 16 KB of x in shared memory
    runFusedCase({4, false, 80, 8192, 128, 0}, act, {4}, 23, both, false);        // 64 KB: the norm runs first
    runFusedCase({4, false, 128, 512, 128, 1}, act, {1}, 24, both, false);        // act-order: norm, then the gather
    runFusedCase({4, true, 64, 256, 128, 0}, act, {16}, 25, inPlace, true);       // 16 tokens (two token tiles)
    runFusedCase({4, true, 256, 1024, 128, 0}, act, {40}, 26, inPlace, false);    // m > 16: the general kernel
    // Regression: 16 warps, two token tiles, 32,400 bytes of x (17 KB static): past 48 KB, which launched only once the
    // launcher allowed the kernel more dynamic shared memory (it failed with an invalid argument before).
    runFusedCase({4, true, 64, 1792, 128, 0}, act, {9}, 36, both, true);
    // SiLU · up is written by the persistent shapes only: configuration 6 runs siluMul after the product
    runFusedCase({4, true, 256, 1024, 128, 0}, act, {1, 4}, 41, gluNorm, false);
    runFusedCase({4, true, 256, 1024, 128, 0}, act, {40}, 48, gluOnly, false);   // m > 16: the general kernel
    // Regression: past 64 tokens the last slice (6 or 16 tokens) runs the stream kernel, which took the split chosen for
    // the first slice of 64 and wrote partial sums instead of y (found in review; no test had m > 64 under auto).
    runFusedCase({4, true, 256, 1024, 128, 0}, act, {70, 80}, 53, residualOnly, false);
    wxa16SetStreamConfig(0);   // a shape without the subtracted zero: the norm runs first
    runFusedCase({4, true, 256, 1024, 128, 0}, act, {1}, 27, both, false);
    // Persistent shapes: the norm formed once per block serves each of its row tiles (3 blocks for 16 or 5 tiles).
    for (int config = 0; config < wxa16StreamConfigCount(); ++config) {
        if (wxa16StreamConfigName(config).find("persistent") == std::string::npos) continue;
        wxa16SetStreamConfig(config);
        // Shapes that give a block several row tiles, or two batches of registers, fold neither the norm nor SwiGLU
        // (separate launches, same result).
        const bool overlap = wxa16StreamConfigName(config).find("next batch loaded") != std::string::npos;
        const bool f8 = !overlap && wxa16StreamRowTiles(config, 8) == 1;
        const bool f16 = !overlap && wxa16StreamRowTiles(config, 16) == 1;
        wxa16SetStreamResidentCap(3);
        std::printf("-- fused norm / residual: stream configuration %d (%s), 3 blocks\n", config,
                    wxa16StreamConfigName(config).c_str());
        for (Fusion f : {both, inPlace}) runFusedCase({4, true, 256, 1024, 128, 0}, act, {1, 4}, 32, f, f8);
        runFusedCase({4, true, 256, 1024, 128, 0}, act, {12}, 33, inPlace, f16);   // two token tiles
        runFusedCase({4, false, 80, 8192, 128, 0}, act, {1}, 34, both, f8);        // 16 warps, 16 KB of x
        // 16 warps and two token tiles: 33 KB of reduction buffers + 28 KB of x, past the 48 KB allowed unasked
        runFusedCase({4, true, 80, 1152, 128, 0}, act, {12}, 37, inPlace, f16);
        runFusedCase({4, false, 80, 1088, 128, 0}, act, {1}, 38, both, f8);         // 16 warps, seven with no chunks
        // SiLU · up written by the kernel: 8 pairs of gate and up tiles over 3 blocks; two token tiles; 16 warps, seven
        // without chunks; act-order (the gather first); 4-warp blocks (4 chunks), persistent for the pairs
        for (Fusion f : {gluNorm, gluOnly}) runFusedCase({4, true, 256, 1024, 128, 0}, act, {1, 4}, 42, f, f8);
        runFusedCase({4, true, 256, 1024, 128, 0}, act, {12}, 43, gluNorm, f16);
        runFusedCase({4, false, 96, 1088, 128, 0}, act, {1}, 44, gluNorm, f8);
        runFusedCase({4, false, 128, 512, 128, 1}, act, {1}, 45, gluOnly, f8);
        runFusedCase({4, true, 64, 256, 128, 0}, act, {1, 3}, 46, gluNorm, f8);
        runFusedCase({4, false, 80, 1088, 128, 0}, act, {1}, 47, gluNorm, false);   // 80 rows: 40 is no whole tile
        wxa16SetStreamResidentCap(0);
        runFusedCase({4, true, 1408, 4096, 128, 0}, act, {1}, 50, gluNorm, f8);   // 704 features, resident blocks
        // 300 row tiles (150 pairs): past 2 per multiprocessor, so configuration 11 takes 4-chunk batches, as for 7B's
        // gate/up (1376 tiles)
        runFusedCase({4, true, 4800, 1152, 128, 0}, act, {1, 4}, 52, gluNorm, f8);
        // 70 tokens: a slice of 64 (the general kernel, then siluMul), then one of 6 that writes silu(gate) · up itself
        runFusedCase({4, true, 256, 1024, 128, 0}, act, {70}, 54, gluNorm, false);
        runFusedCase({4, true, 256, 1024, 128, 0}, act, {1}, 35, both, f8);        // one tile per block
        // 300 row tiles: several per block (configurations 11 and 15 take 4-chunk batches there); m <= 8, since at
        // 9..16 tokens `auto` gives that many row tiles to the ring kernel under the shapes of one row tile per block
        runFusedCase({4, true, 4800, 1152, 128, 0}, act, {1, 4}, 39, inPlace, f8);
    }
    wxa16SetStreamConfig(initialStream);
    std::printf("-- fused norm / residual: ring kernel (split-K, last block adds the residual)\n");
    wxa16SetSmallKernel(W4SmallKernel::Ring);
    runFusedCase({4, true, 256, 1024, 128, 0}, act, {1, 9}, 28, inPlace, false);
    runFusedCase({4, true, 256, 1024, 128, 0}, act, {3}, 28, both, false);
    runFusedCase({4, true, 256, 1024, 128, 0}, act, {1, 9}, 51, gluNorm, false);
    if (wxa16TmaAvailable()) {
        std::printf("-- fused norm / residual: TMA kernel (cluster and global reduce)\n");
        wxa16SetSmallKernel(W4SmallKernel::Tma);
        runFusedCase({4, true, 256, 1024, 128, 0}, act, {1, 9}, 29, both, false);
        wxa16SetTmaClusterReduce(false);
        runFusedCase({4, true, 256, 1024, 128, 0}, act, {1}, 29, inPlace, false);
        wxa16SetTmaClusterReduce(true);
    }
    wxa16SetSmallKernel(initial);
    std::printf("-- fused norm / residual: W8A16 (stream, and the general kernel past 16 tokens)\n");
    runFusedCase({8, true, 256, 1024, 128, 0}, act, {1, 20}, 30, both, false);
    runFusedCase({8, false, 136, 448, 128, 1}, act, {3}, 31, inPlace, false);
    runFusedCase({8, true, 256, 1024, 128, 0}, act, {1, 20}, 49, gluNorm, false);
}

} // namespace

int main() {
    if (noCudaDevice()) return 77;
    try {
        const std::vector<int64_t> allM = {1, 3, 8, 16, 29, 64, 80};
        const W4SmallKernel initial = wxa16SmallKernel();
        const int initialStreamConfig = wxa16StreamConfig();
        if (!std::getenv("CWB_W4_STREAM_CONFIG"))
            check(initialStreamConfig == 20 && wxa16StreamConfigName(20).find("persistent") != std::string::npos &&
                      wxa16StreamConfigName(20).find("4 per batch past") != std::string::npos &&
                      wxa16StreamConfigName(20).find("at 1..2 tokens where a warp has 8+ chunks") != std::string::npos &&
                      wxa16StreamConfigName(20).find("at 3..8 tokens (plain x)") != std::string::npos &&
                      wxa16StreamConfigName(20).find("up to 8 warps at 9..16 tokens") != std::string::npos &&
                      wxa16StreamRowTiles(20, 8) == 1 && wxa16StreamRowTiles(20, 9) == 2,
                  "the stream kernel's default shape is 20 (persistent; up to 8 tokens one row tile per block, 4-chunk "
                  "batches past 2 row tiles per SM, two batches of registers on long rows at 1..2 tokens and for plain "
                  "x at 3..8; at 9..16 two row tiles per block, 8-warp blocks past one pair per SM)");
        {
            bool threw = false;
            try {
                wxa16StreamRowTiles(wxa16StreamConfigCount(), 1);
            } catch (const KernelError&) {
                threw = true;
            }
            check(threw, "wxa16StreamRowTiles refuses a configuration past the table");
            check(wxa16StreamRowTiles(11, 1) == 1 && wxa16StreamRowTiles(11, 16) == 1,
                  "stream shape 11 (the default before shape 15) takes one row tile per block");
        }
        std::vector<W4SmallKernel> smallKernels = {W4SmallKernel::Ring, W4SmallKernel::Stream};
        if (wxa16TmaAvailable()) smallKernels.push_back(W4SmallKernel::Tma);
        else std::printf("-- no sm_90 device: the TMA small-M kernel is not tested here\n");
        {   // refused: a workspace sized without the norm's room, and a negative epsilon
            const DeviceTiledWeight w4(makeWeight({4, true, 256, 1024, 128, 0}, ActType::Float16, 1));
            void* dx = nullptr;
            void* dy = nullptr;
            float* gamma = nullptr;
            cudaMalloc(&dx, 4 * 1024 * 2);
            cudaMalloc(&dy, 4 * 256 * 2);
            cudaMalloc(&gamma, 1024 * 4);
            const size_t bytes = wxa16WorkspaceBytes(w4, 4);
            void* ws = allocateWorkspace(bytes);
            Wxa16Fusion fusion;
            fusion.normWeight = gamma;
            auto refused = [&](const Wxa16Fusion& f, size_t b) {
                try {
                    wxa16Gemm(w4, dx, dy, 4, ws, b, nullptr, 0, f);
                } catch (const KernelError&) {
                    return true;
                }
                return false;
            };
            check(wxa16WorkspaceBytes(w4, 4, 0, true) > bytes, "the norm needs workspace room for one slice of x");
            check(refused(fusion, bytes), "a workspace sized without the norm is refused");
            fusion.normEps = -1.0f;
            check(refused(fusion, wxa16WorkspaceBytes(w4, 4, 0, true)), "a negative epsilon is refused");
            Wxa16Fusion swiglu;
            swiglu.swiglu = true;
            check(wxa16WorkspaceBytes(w4, 4, 0, false, true) > bytes, "SwiGLU needs workspace room for one slice of the product");
            check(refused(swiglu, bytes), "a workspace sized without SwiGLU's room is refused");
            swiglu.residual = dy;
            check(refused(swiglu, wxa16WorkspaceBytes(w4, 4, 0, false, true)), "SwiGLU with a residual is refused");
            freeWorkspace(ws);
            cudaFree(dx);
            cudaFree(dy);
            cudaFree(gamma);
        }
        for (ActType act : {ActType::Float16, ActType::BFloat16}) {
            runFusedCases(act);
            // The 4-bit cases under every shape of both small-M kernels (m <= 16 runs them); each default one last.
            for (W4SmallKernel kernel : smallKernels) {
                wxa16SetSmallKernel(kernel);
                const bool tma = kernel == W4SmallKernel::Tma, stream = kernel == W4SmallKernel::Stream;
                const int configs = tma ? wxa16TmaConfigCount() : stream ? wxa16StreamConfigCount() : wxa16SmallConfigCount();
                // TMA: configuration 0 once more (first) with the splits added up through global memory
                for (int config = configs - 1 + (tma ? 1 : 0); config >= 0; --config) {
                    const bool globalReduce = tma && config == configs;
                    if (tma) {
                        wxa16SetTmaConfig(globalReduce ? 0 : config);
                        wxa16SetTmaClusterReduce(!globalReduce);
                    } else if (stream) {
                        wxa16SetStreamConfig(config);
                    } else {
                        wxa16SetSmallConfig(config);
                    }
                    std::printf("-- small-M kernel %s, configuration %d: %s%s\n", wxa16SmallKernelName(kernel),
                                globalReduce ? 0 : config,
                                (tma      ? wxa16TmaConfigName(globalReduce ? 0 : config)
                                 : stream ? wxa16StreamConfigName(config)
                                          : wxa16SmallConfigName(config))
                                    .c_str(),
                                tma ? (globalReduce ? ", splits added up in global memory" : ", splits <= 8 in a cluster") : "");
                    // m > 16 depends on neither kernel nor configuration: once is enough
                    const bool first = config == 0 && kernel == W4SmallKernel::Ring;
                    // The stream shape's own kernel ran (row tiles per block, two batches) at m <= 8 and at 9..16
                    // (at 8 tokens of plain x the two-batch kernel for shapes that take it at 3..8 tokens).
                    const std::string shapeName = stream ? wxa16StreamConfigName(config) : std::string();
                    const auto has = [&](const char* words) { return shapeName.find(words) != std::string::npos; };
                    const bool streamOverlap = stream && has("persistent") && has("next batch loaded");
                    const bool overlapFew = stream && has("3..8 tokens (plain x)");
                    const bool longRows = stream && has("where a warp has 8+ chunks");
                    const bool longRowsTwo = longRows && has("at 1..2 tokens where");
                    const bool fewerWarps16 = stream && has("up to 8 warps at 9..16 tokens");
                    // launches of one row tile per block with two batches of registers, and with one
                    const auto twoBatches = [] { return wxa16StreamLaunchCount(1, true); };
                    const auto oneBatch = [] { return wxa16StreamLaunchCount(1, false); };
                    const int tiles8 = stream ? wxa16StreamRowTiles(config, 8) : 1;
                    const int tiles16 = stream ? wxa16StreamRowTiles(config, 16) : 1;
                    const int64_t launches8 = wxa16StreamLaunchCount(tiles8, streamOverlap || overlapFew);
                    if (stream) {
                        runCase({4, true, 256, 1024, 128, 0}, act, {8}, 60);
                        const bool ran8 = wxa16StreamLaunchCount(tiles8, streamOverlap || overlapFew) > launches8;
                        const int64_t mid16 = wxa16StreamLaunchCount(tiles16, streamOverlap);
                        runCase({4, true, 256, 1024, 128, 0}, act, {16}, 60);
                        const bool ran16 = wxa16StreamLaunchCount(tiles16, streamOverlap) > mid16;
                        char what[200];
                        std::snprintf(what, sizeof what,
                                      "stream configuration %d launched its kernel (%d / %d row tiles per block%s) at m = 8 and 16",
                                      config, tiles8, tiles16, streamOverlap ? ", two batches" : overlapFew ? ", two batches at 8" : "");
                        check(ran8 && ran16, what);
                    }
                    if (longRows) {
                        // 8192 columns: 128 chunks, 8 per warp of 16, so one token takes the two-batch kernel (as
                        // shape 16 at m = 1), with 5 row tiles on 3 blocks as well, act-order, and a residual added;
                        // 2 tokens too where the rule covers them; not 4096 columns (4 chunks per warp), nor a launch
                        // with the norm folded.
                        int64_t two = twoBatches(), one = oneBatch();
                        runCase({4, false, 80, 8192, 128, 0}, act, {1}, 64);
                        wxa16SetStreamResidentCap(3);
                        runCase({4, false, 80, 8192, 128, 0}, act, {1}, 65);
                        wxa16SetStreamResidentCap(0);
                        runCase({4, true, 64, 8192, 128, 1}, act, {1}, 66);
                        runFusedCase({4, true, 64, 8192, 128, 0}, act, {1}, 67, Fusion{false, true, false}, false);
                        if (longRowsTwo) runCase({4, false, 80, 8192, 128, 0}, act, {2}, 68);
                        check(twoBatches() >= two + (longRowsTwo ? 5 : 4) && oneBatch() == one,
                              longRowsTwo ? "long rows at 1 and 2 tokens (8 chunks per warp): the two-batch kernel ran, "
                                            "plain and with a residual"
                                          : "long rows at one token (8 chunks per warp): the two-batch kernel ran, plain "
                                            "and with a residual");
                        two = twoBatches();
                        one = oneBatch();
                        // the first token count past the rule: one batch, unless the 3..8 rule takes it
                        runCase({4, false, 80, 8192, 128, 0}, act, {longRowsTwo ? 3 : 2}, 68);
                        const bool pastTwo = twoBatches() > two, pastOne = oneBatch() > one;
                        check(overlapFew ? pastTwo && !pastOne : pastOne && !pastTwo,
                              overlapFew ? "long rows at 3 tokens: the two-batch kernel of the 3..8 rule ran"
                                         : "long rows past the rule's tokens: the one-batch kernel ran");
                        two = twoBatches();
                        one = oneBatch();
                        runCase({4, false, 80, 4096, 128, 0}, act, {1, 2}, 69);
                        runFusedCase({4, false, 80, 8192, 128, 0}, act, {1}, 70, Fusion{true, true, false}, true);
                        check(twoBatches() == two && oneBatch() >= one + 3,
                              "short rows (4 chunks per warp) at 1 and 2 tokens, or the norm folded: the one-batch kernel ran");
                    }
                    if (overlapFew) {
                        // 3..8 tokens of plain x take the two-batch kernel whatever the rows' length (4 chunks per
                        // warp here), with act-order and a residual too; not with the norm folded, nor at 9 tokens.
                        int64_t two = twoBatches(), one = oneBatch();
                        runCase({4, false, 80, 4096, 128, 0}, act, {3, 8}, 71);
                        runCase({4, true, 64, 8192, 128, 1}, act, {5}, 72);
                        runFusedCase({4, true, 64, 4096, 128, 0}, act, {3}, 73, Fusion{false, true, false}, false);
                        check(twoBatches() >= two + 4 && oneBatch() == one,
                              "3..8 tokens of plain x (4 and 8 chunks per warp, act-order, a residual): the two-batch kernel ran");
                        two = twoBatches();
                        one = oneBatch();
                        runFusedCase({4, false, 80, 4096, 128, 0}, act, {3}, 74, Fusion{true, true, false}, true);
                        runCase({4, false, 80, 4096, 128, 0}, act, {9}, 75);
                        check(twoBatches() == two && oneBatch() >= one + 1,
                              "the norm folded at 3 tokens: the one-batch kernel ran; 9 tokens: neither one-tile kernel");
                    }
                    if (fewerWarps16) {
                        // At 9..16 tokens blocks of at most 8 warps once pairs of row tiles outnumber the
                        // multiprocessors (32 chunks: 16 warps otherwise): 2·SMs + 1 row tiles make SMs + 1 pairs (the
                        // last one a single tile), 2·SMs exactly SMs; 16 warps at 8 tokens whatever the pairs.
                        int sms = 0;
                        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
                        const Case manyPairs{4, true, 16 * (2 * int64_t(sms) + 1), 2048, 128, 0};
                        const Case onePairPerSm{4, true, 16 * (2 * int64_t(sms)), 2048, 128, 0};
                        runCase(manyPairs, act, {16}, 76);
                        const int many16 = wxa16StreamLastWarps();
                        runCase(manyPairs, act, {10}, 76);
                        const int many10 = wxa16StreamLastWarps();
                        runCase(manyPairs, act, {8}, 76);
                        const int many8 = wxa16StreamLastWarps();
                        runCase(onePairPerSm, act, {16}, 77);
                        const int few16 = wxa16StreamLastWarps();
                        char what[260];
                        std::snprintf(what, sizeof what,
                                      "%lld row tiles of 32 chunks: 8 warps at m = 16 and 10 (got %d, %d), 16 at m = 8 (%d); "
                                      "%lld row tiles: 16 warps at m = 16 (%d)",
                                      (long long)(manyPairs.rows / 16), many16, many10, many8,
                                      (long long)(onePairPerSm.rows / 16), few16);
                        check(many16 == 8 && many10 == 8 && many8 == 16 && few16 == 16, what);
                    }
                    runCase({4, true, 256, 1024, 128, 0}, act, first ? allM : std::vector<int64_t>{1, 3, 8, 16}, 1);
                    // Groups of 4, 8 and 16 chunks, where the stream kernels find a step's scale words from the warp's
                    // first group (loadSmallStep's FROM_GROUP): warps of 2, 4 and 4 chunks that start inside a
                    // group, and of 8 chunks that span two.
                    runCase({4, false, 80, 2048, 256, 0}, act, {1, 16}, 80);
                    runCase({4, true, 64, 4096, 512, 0}, act, {1, 4, 16}, 81);
                    runCase({4, false, 48, 3072, 1024, 0}, act, {1, 9}, 82);
                    runCase({4, true, 64, 8192, 256, 0}, act, {1, 4, 16}, 83);
                    runCase({4, false, 200, 576, 64, 0}, act, first ? std::vector<int64_t>{1, 16, 64} : std::vector<int64_t>{1, 16}, 2);
                    runCase({4, false, 128, 512, 128, 1}, act, first ? std::vector<int64_t>{1, 5, 64} : std::vector<int64_t>{1, 5}, 3);
                    runCase({4, true, 64, 640, 128, 2}, act, first ? std::vector<int64_t>{1, 16, 40} : std::vector<int64_t>{1, 16}, 7);
                    runCase({4, true, 100, 320, -1, 0}, act, {1, 16}, 4);
                    runCase({4, false, 48, 704, 32, 0}, act, {2, 12}, 9);
                    // Long rows: with one split each warp goes round its ring of stages several times.
                    runCase({4, false, 80, 8192, 128, 0}, act, {1, 16}, 10);
                    // x of mean 4 (the subtracted zero sums exact integers; a fold after the mma loses bits here).
                    runCase({4, false, 64, 8192, 128, 0}, act, {1, 8, 16}, 14, 4.0f);
                    // Persistent stream shapes: the cases above had a block per row tile; here 3 blocks take them
                    // all (up to 14 tiles each where the weight has more than 8 chunks; 4-warp blocks, for 8 chunks
                    // or fewer, stay one tile per block), so a block's loads of its next tile overlap its reduction.
                    // Then, uncapped, more row tiles than the GPU holds blocks of 16 warps at once.
                    if (stream && wxa16StreamConfigName(config).find("persistent") != std::string::npos) {
                        wxa16SetStreamResidentCap(3);
                        std::printf("-- the same shape with 3 blocks\n");
                        runCase({4, true, 256, 1024, 128, 0}, act, {1, 3, 8, 16}, 1);
                        runCase({4, false, 200, 576, 64, 0}, act, {1, 16}, 2);
                        runCase({4, false, 128, 512, 128, 1}, act, {1, 5}, 3);
                        runCase({4, true, 64, 640, 128, 2}, act, {1, 16}, 7);
                        runCase({4, false, 48, 704, 32, 0}, act, {2, 12}, 9);
                        runCase({4, false, 80, 8192, 128, 0}, act, {1, 16}, 10);
                        runCase({4, true, 640, 2048, 128, 0}, act, {1, 9}, 11);
                        runCase({4, false, 80, 2048, 256, 0}, act, {1, 16}, 80);
                        runCase({4, false, 48, 3072, 1024, 0}, act, {1, 9}, 82);
                        wxa16SetStreamResidentCap(0);
                        runCase({4, true, 4800, 1152, 128, 0}, act, {1, 9}, 12);   // 300 tiles
                    }
                }
            }
            wxa16SetStreamConfig(initialStreamConfig);  // the configuration loop above ends at 0
            // Auto: the stream kernel up to 8 tokens; at 9..16 too when the stream shape takes several row tiles per
            // block (the default), else only for few row tiles (the ring kernel past two blocks per multiprocessor).
            wxa16SetSmallKernel(W4SmallKernel::Auto);
            int sms = 0;
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
            const Case fewTiles{4, true, 256, 1024, 128, 0}, manyTiles{4, false, 16 * (4 * int64_t(sms) + 1), 256, 128, 0};
            {
                const DeviceTiledWeight few(makeWeight(fewTiles, act, 11)), many(makeWeight(manyTiles, act, 12));
                check(wxa16SmallKernelFor(few, 1) == W4SmallKernel::Stream && wxa16SmallKernelFor(few, 16) == W4SmallKernel::Stream,
                      "auto runs 16 row tiles through the stream kernel at m = 1 and 16");
                check(wxa16SmallKernelFor(many, 1) == W4SmallKernel::Stream && wxa16SmallKernelFor(many, 8) == W4SmallKernel::Stream,
                      "auto runs more than 4 row tiles per multiprocessor through the stream kernel at m = 1 and 8");
                // The default shape takes two row tiles per block at 9..16 tokens, which beat the ring kernel on every
                // shape measured; a shape of one row tile per block leaves many row tiles to the ring kernel there.
                check(wxa16SmallKernelFor(many, 9) == W4SmallKernel::Stream && wxa16SmallKernelFor(many, 16) == W4SmallKernel::Stream,
                      "auto (default shape) runs more than 2 row tiles per multiprocessor through the stream kernel at m = 9 and 16");
                const int defaultShape = wxa16StreamConfig();
                wxa16SetStreamConfig(11);
                check(wxa16SmallKernelFor(many, 9) == W4SmallKernel::Ring && wxa16SmallKernelFor(many, 16) == W4SmallKernel::Ring &&
                          wxa16SmallKernelFor(few, 16) == W4SmallKernel::Stream,
                      "auto under shape 11 (one row tile per block) runs many row tiles through the ring kernel at m = 9 and 16");
                wxa16SetStreamConfig(defaultShape);
                check(wxa16SmallKernelFor(few, 17) == W4SmallKernel::Ring, "m = 17 runs the general kernel (reported as ring)");
            }
            runCase(fewTiles, act, {1, 8, 16}, 11);
            runCase(manyTiles, act, {1, 8, 9}, 12);
            wxa16SetSmallKernel(initial);
            // W8A16: the old general kernel (which also runs m > 16), then the stream kernel (m <= 16) in each shape.
            const W8SmallKernel initialW8 = wxa16W8Kernel();
            if (!std::getenv("CWB_W8_KERNEL"))
                check(initialW8 == W8SmallKernel::Stream, "W8A16 at m <= 16 runs the stream kernel by default");
            wxa16SetW8Kernel(W8SmallKernel::Old);
            std::printf("-- W8A16 kernel old\n");
            runCase({8, true, 256, 1024, 128, 0}, act, allM, 5);
            runCase({8, false, 136, 448, 128, 1}, act, {1, 16, 64}, 6);
            runCase({8, true, 48, 384, 64, 2}, act, {1, 9}, 8);
            runCase({8, false, 64, 8192, 128, 0}, act, {1, 8, 29}, 19, 4.0f);   // x of mean 4
            wxa16SetW8Kernel(W8SmallKernel::Stream);
            const std::vector<int64_t> smallM = {1, 3, 8, 16};
            for (int config = wxa16W8StreamConfigCount() - 1; config >= 0; --config) {
                wxa16SetW8StreamConfig(config);
                std::printf("-- W8A16 kernel stream, configuration %d: %s\n", config, wxa16W8StreamConfigName(config).c_str());
                runCase({8, true, 256, 1024, 128, 0}, act, smallM, 5);    // groups of two chunks
                runCase({8, false, 136, 448, 128, 1}, act, smallM, 6);    // act-order (gathered x), padded rows
                runCase({8, true, 48, 384, 64, 2}, act, smallM, 8);       // random groups: the chunk's group from the table
                runCase({8, false, 100, 320, -1, 0}, act, {1, 16}, 13);   // one group of 5 chunks per row
                runCase({8, false, 40, 1000, 128, 0}, act, {1, 8}, 14);   // padded columns, padded rows
                runCase({8, true, 24, 1088, 64, 0}, act, {3, 16}, 15);    // 17 chunks: warps' pieces end early
                runCase({8, false, 80, 8192, 128, 0}, act, {1, 16}, 10);  // 128 chunks: several batches per warp
                runCase({8, false, 64, 8192, 128, 0}, act, {1, 16}, 19, 4.0f);   // x of mean 4
            }
            // Configuration 0 gives a row tile 16, 8 or 4 warps by how many row tiles fit on the GPU at once: weights of
            // one row tile more than 2 blocks of 16 warps per multiprocessor hold (8 warps), than 4 of 8 (4 warps), and
            // (m = 9) than 6 of 4 (none fit: 8 warps at m > 8).
            wxa16SetW8StreamConfig(0);
            runCase({8, false, 16 * (2 * int64_t(sms) + 1), 2048, 128, 0}, act, {1, 9}, 16);
            runCase({8, true, 16 * (4 * int64_t(sms) + 1), 2048, 128, 1}, act, {1, 9}, 17);
            runCase({8, false, 16 * (6 * int64_t(sms) + 1), 2048, 128, 0}, act, {9}, 18);
            {
                const DeviceTiledWeight w8(makeWeight({8, true, 256, 1024, 128, 0}, act, 5));
                const DeviceTiledWeight w4(makeWeight({4, true, 256, 1024, 128, 0}, act, 1));
                check(wxa16W8KernelFor(w8, 1) == W8SmallKernel::Stream && wxa16W8KernelFor(w8, 16) == W8SmallKernel::Stream,
                      "stream runs W8A16 at m = 1 and 16");
                check(wxa16W8KernelFor(w8, 17) == W8SmallKernel::Old && wxa16W8KernelFor(w4, 1) == W8SmallKernel::Old,
                      "m = 17 and 4-bit weights are not run by the W8A16 stream kernel");
                void* dx = nullptr;
                void* dy = nullptr;
                cudaMalloc(&dx, 4 * 1024 * 2 + 16);
                cudaMalloc(&dy, 4 * 256 * 2);
                const size_t bytes = wxa16WorkspaceBytes(w8, 4);
                void* ws = allocateWorkspace(bytes);
                bool rejected = false;
                try {
                    wxa16Gemm(w8, static_cast<char*>(dx) + 2, dy, 4, ws, bytes, nullptr);
                } catch (const KernelError&) {
                    rejected = true;
                }
                check(rejected, "W8A16 stream: activations not 16-byte aligned are rejected");
                freeWorkspace(ws);
                cudaFree(dx);
                cudaFree(dy);
            }
            wxa16SetW8Kernel(initialW8);
        }
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return finish();
}
