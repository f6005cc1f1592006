// GPU test (label `gpu`, exit 77 without a GPU): the GPTQ column-block kernel against its CPU reference, block after
// block over a whole layer. Both sides start every block from the same weights (the trailing update between blocks
// is done once on the host), and perform the same float32 operations, so levels, scales, zeros and errors must
// agree bit for bit. Cases cover sym / asym, 2, 3, 4 and 8 bits, groups inside a block (32), groups that run past
// the block (96, 256: their parameters need the block's pending errors), per-row groups, static groups through a
// shuffled column-to-group map (act-order with static groups), a short last block and rows not a multiple of 8.
// Keep-zero cases (a pruning mask kept through GPTQ): a 2:4 pattern, and a random half of the places; every marked
// weight must get its group's zero point.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../kernels/kernel_check.h"
#include "device_memory.h"
#include "cwb/kernels/gptq_block.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

struct Case {
    const char* name;
    int bits;
    bool symmetric;
    int64_t groupWidth;   // -1: one group per row
    bool staticGroups;
    int64_t rows, cols, block;
    enum Mask { NoMask, TwoFour, RandomHalf } mask = NoMask;
};

void runCase(const Case& t, uint32_t seed) {
    const int64_t rows = t.rows, cols = t.cols;
    const int64_t width = t.groupWidth > 0 ? t.groupWidth : cols;
    const int64_t groups = (cols + width - 1) / width;
    std::vector<float> w = gaussian(size_t(rows * cols), seed, 0.05f);
    for (int64_t c = 0; c < cols; ++c) w[size_t(c)] = 0.0f;  // an all-zero row takes the [-1, 1] rule
    std::vector<uint8_t> keep;   // keepZero: the pruned places, zero in w
    if (t.mask != Case::NoMask) {
        keep.assign(size_t(rows * cols), 0);
        std::mt19937 rng(seed + 4);
        for (int64_t r = 1; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
                // 2:4: two of every four, at a position that changes with the row
                const bool pruned = t.mask == Case::TwoFour ? ((c + r) % 4) < 2 : (rng() & 1u) != 0;
                if (pruned) {
                    keep[size_t(r * cols + c)] = 1;
                    w[size_t(r * cols + c)] = 0.0f;
                }
            }
    }
    const std::vector<float> u = upperFactor(cols, seed + 1);
    std::vector<int32_t> columnGroup(static_cast<size_t>(cols));
    std::vector<float> scales(size_t(rows * groups), 0.0f);
    std::vector<int32_t> zeros(scales.size(), 0);
    if (t.staticGroups) {  // act-order with static groups: processed column c belongs to original column perm[c]
        std::vector<int64_t> perm(static_cast<size_t>(cols));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), std::mt19937(seed + 2));
        for (int64_t c = 0; c < cols; ++c) columnGroup[size_t(c)] = int32_t(perm[size_t(c)] / width);
        std::mt19937 rng(seed + 3);
        std::uniform_real_distribution<float> s(0.005f, 0.03f);
        for (auto& x : scales) x = s(rng);
        for (auto& z : zeros) z = t.symmetric ? 1 << (t.bits - 1) : int32_t(rng() % (1u << t.bits));
    }

    GptqBlockArgs host;
    host.rows = rows;
    host.cols = cols;
    host.bits = t.bits;
    host.symmetric = t.symmetric;
    host.groupWidth = width;
    host.groups = groups;
    host.errorStride = cols;   // the whole layer's errors, as the caller in core keeps them
    std::vector<int32_t> levels(size_t(rows * cols), -1), gpuLevels;
    std::vector<float> errors(size_t(rows * cols), 0.0f), gpuErrors, gpuScales;
    std::vector<int32_t> gpuZeros;
    host.hinvUpper = u.data();
    host.scales = scales.data();
    host.zeros = zeros.data();
    host.columnGroup = t.staticGroups ? columnGroup.data() : nullptr;
    host.levels = levels.data();
    host.errors = errors.data();
    host.keepZero = keep.empty() ? nullptr : keep.data();

    GptqBlockArgs dev = host;
    float* dw = toDevice(w);
    float* du = toDevice(u);
    float* ds = toDevice(scales);
    int32_t* dz = toDevice(zeros);
    int32_t* dg = toDevice(columnGroup);
    int32_t* dl = toDevice(std::vector<int32_t>(levels.size(), -7));
    float* de = toDevice(std::vector<float>(errors.size(), -7.0f));
    uint8_t* dk = keep.empty() ? nullptr : toDevice(keep);
    dev.weight = dw;
    dev.hinvUpper = du;
    dev.scales = ds;
    dev.zeros = dz;
    dev.columnGroup = t.staticGroups ? dg : nullptr;
    dev.levels = dl;
    dev.errors = de;
    dev.keepZero = dk;

    for (int64_t begin = 0; begin < cols; begin += t.block) {
        const int64_t end = std::min(begin + t.block, cols);
        host.weight = w.data();
        host.begin = dev.begin = begin;
        host.end = dev.end = end;
        host.errorOffset = dev.errorOffset = begin;
        if (cudaMemcpy(dw, w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
            throw KernelError("weight upload failed");
        gptqBlockRef(host);
        gptqBlock(dev, nullptr);
        if (cudaDeviceSynchronize() != cudaSuccess) throw KernelError("the GPTQ block kernel failed");
        // Later columns: W[:, end:] -= E[:, begin:end] · U[begin:end, end:] (what the caller does with a GEMM).
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = end; j < cols; ++j) {
                double sum = 0.0;
                for (int64_t k = begin; k < end; ++k) sum += double(errors[size_t(r * cols + k)]) * u[size_t(k * cols + j)];
                w[size_t(r * cols + j)] -= float(sum);
            }
    }
    gpuLevels = toHost(dl, levels.size());
    gpuErrors = toHost(de, errors.size());
    gpuScales = toHost(ds, scales.size());
    gpuZeros = toHost(dz, zeros.size());
    const std::string tag = std::string(t.name) + " (" + std::to_string(rows) + "x" + std::to_string(cols) + ", block " +
                            std::to_string(t.block) + "): ";
    const int32_t maxLevel = (1 << t.bits) - 1;
    const bool inRange = std::all_of(levels.begin(), levels.end(), [&](int32_t l) { return l >= 0 && l <= maxLevel; });
    check(inRange, (tag + "every reference level is in [0, 2^bits - 1]").c_str());
    check(differences(gpuLevels, levels) == 0, (tag + "levels equal the CPU reference").c_str());
    check(differences(gpuErrors, errors) == 0, (tag + "errors equal the CPU reference bit for bit").c_str());
    check(differences(gpuScales, scales) == 0 && differences(gpuZeros, zeros) == 0,
          (tag + "group scales and zeros equal the CPU reference").c_str());
    // Row 0 is all zeros: nothing to correct, so its errors are exactly zero. The first column of a dynamic group
    // sets the group's range, so it lies within half a grid step of its level (later columns may drift past the
    // range through the updates and clip). A wrong update or scale shows far beyond either bound.
    bool zeroRowExact = true;
    for (int64_t c = 0; c < cols; ++c) zeroRowExact &= errors[size_t(c)] == 0.0f;
    check(zeroRowExact, (tag + "the all-zero row has zero errors").c_str());
    if (!t.staticGroups) {
        double worst = 0.0;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; c += width) {
                if (!keep.empty() && keep[size_t(r * cols + c)]) continue;   // held at zero: its whole value is the error
                const double step = scales[size_t(r * groups + c / width)];
                worst = std::max(worst, std::fabs(double(errors[size_t(r * cols + c)]) * u[size_t(c * cols + c)]) / step);
            }
        std::printf("  %slargest |w - q| at a group's first column: %.4f grid steps\n", tag.c_str(), worst);
        check(worst <= 0.5 + 1e-3, (tag + "a group's first column lies within half a step of its level").c_str());
    }
    if (!keep.empty()) {
        int64_t marked = 0, atZero = 0;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
                if (!keep[size_t(r * cols + c)]) continue;
                ++marked;
                const int64_t g = t.staticGroups ? columnGroup[size_t(c)] : c / width;
                atZero += levels[size_t(r * cols + c)] == zeros[size_t(r * groups + g)];
            }
        std::printf("  %s%lld of %lld marked weights at their group's zero point\n", tag.c_str(), (long long)atZero, (long long)marked);
        check(marked > 0 && atZero == marked, (tag + "every marked weight keeps its group's zero point").c_str());
    }
    for (void* p : {(void*)dw, (void*)du, (void*)ds, (void*)dz, (void*)dg, (void*)dl, (void*)de, (void*)dk}) cudaFree(p);
}

} // namespace

int main() {
    if (noCudaDevice()) return 77;
    const Case cases[] = {
        {"int4 sym g128", 4, true, 128, false, 67, 512, 128},
        {"int4 asym g32", 4, false, 32, false, 40, 384, 128},
        {"int3 asym g96 (groups past the block)", 3, false, 96, false, 33, 480, 128},
        {"int2 sym g256 (groups past the block)", 2, true, 256, false, 24, 640, 128},
        {"int8 asym per row", 8, false, -1, false, 17, 300, 128},
        {"int4 sym g128 block 64", 4, true, 128, false, 30, 448, 64},
        {"int4 asym static groups g64 (act-order)", 4, false, 64, true, 29, 320, 128},
        {"int3 sym block 20 (short blocks)", 3, true, 128, false, 9, 200, 20},
        {"int4 sym g128, 2:4 kept", 4, true, 128, false, 67, 512, 128, Case::TwoFour},
        {"int3 asym g96, half kept (groups past the block)", 3, false, 96, false, 33, 480, 128, Case::RandomHalf},
        {"int4 asym static groups g64, 2:4 kept", 4, false, 64, true, 29, 320, 128, Case::TwoFour},
    };
    try {
        uint32_t seed = 1;
        for (const Case& c : cases) runCase(c, seed += 10);
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return finish();
}
