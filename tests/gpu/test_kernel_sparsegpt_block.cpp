// GPU test (label `gpu`, exit 77 without a GPU): the SparseGPT column-block kernel against its CPU reference, block
// after block over a whole layer. Both sides start every block from the same weights (the trailing update between
// blocks is done once on the host) and perform the same float32 operations, so masks, pruned weights and errors must
// agree bit for bit. Cases: unstructured 50% and 30% (a short last block), 2:4, 4:8, 1:3 (m not dividing 32, so an
// m-group straddles two lanes' registers), ties (duplicated weights: the earlier column is pruned first).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../kernels/kernel_check.h"
#include "device_memory.h"
#include "cwb/kernels/sparsegpt_block.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

struct Case {
    const char* name;
    double sparsity;  // unstructured when m == 0
    int n, m;
    int64_t rows, cols, block;
    bool ties;
};

void runCase(const Case& t, uint32_t seed) {
    const int64_t rows = t.rows, cols = t.cols;
    std::vector<float> w = gaussian(size_t(rows * cols), seed, 0.05f);
    std::vector<float> u = upperFactor(cols, seed + 1);
    if (t.ties) {  // a row of equal weights over an identity factor: every score ties
        for (int64_t c = 0; c < cols; ++c) w[size_t(c)] = 0.25f;
        for (int64_t i = 0; i < cols; ++i)
            for (int64_t j = i; j < cols; ++j) u[size_t(i * cols + j)] = i == j ? 1.0f : 0.0f;
    }
    std::vector<uint8_t> mask(size_t(rows * cols), 7);
    std::vector<float> errors(size_t(rows * cols), 0.0f);
    SparseGptBlockArgs host;
    host.rows = rows;
    host.cols = cols;
    host.n = t.n;
    host.m = t.m;
    host.hinvUpper = u.data();
    host.mask = mask.data();
    host.errors = errors.data();
    host.errorStride = cols;
    SparseGptBlockArgs dev = host;
    float* dw = toDevice(w);
    float* du = toDevice(u);
    uint8_t* dm = toDevice(std::vector<uint8_t>(mask.size(), 9));
    float* de = toDevice(std::vector<float>(errors.size(), -7.0f));
    dev.weight = dw;
    dev.hinvUpper = du;
    dev.mask = dm;
    dev.errors = de;
    std::vector<float> gpuWeight(w.size());
    size_t weightMismatches = 0;
    for (int64_t begin = 0; begin < cols; begin += t.block) {
        const int64_t end = std::min(begin + t.block, cols);
        host.weight = w.data();
        host.begin = dev.begin = begin;
        host.end = dev.end = end;
        host.errorOffset = dev.errorOffset = begin;
        host.pruneCount = dev.pruneCount = t.m ? 0 : std::llround(t.sparsity * double(end - begin));
        if (cudaMemcpy(dw, w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
            throw KernelError("weight upload failed");
        sparseGptBlockRef(host);
        sparseGptBlock(dev, nullptr);
        if (cudaDeviceSynchronize() != cudaSuccess) throw KernelError("the SparseGPT block kernel failed");
        gpuWeight = toHost(dw, w.size());
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = begin; c < end; ++c)
                weightMismatches += std::memcmp(&gpuWeight[size_t(r * cols + c)], &w[size_t(r * cols + c)], 4) != 0;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = end; j < cols; ++j) {
                double sum = 0.0;
                for (int64_t k = begin; k < end; ++k) sum += double(errors[size_t(r * cols + k)]) * u[size_t(k * cols + j)];
                w[size_t(r * cols + j)] -= float(sum);
            }
    }
    const std::string tag = std::string(t.name) + " (" + std::to_string(rows) + "x" + std::to_string(cols) + ", block " +
                            std::to_string(t.block) + "): ";
    check(weightMismatches == 0, (tag + "pruned and updated weights equal the CPU reference bit for bit").c_str());
    check(differences(toHost(dm, mask.size()), mask) == 0, (tag + "mask equals the CPU reference").c_str());
    check(differences(toHost(de, errors.size()), errors) == 0, (tag + "errors equal the CPU reference bit for bit").c_str());
    // The reference itself: exactly the asked number of zeros where the mask says pruned, n of every m kept.
    size_t pruned = 0, nonzeroWherePruned = 0, badGroups = 0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            const bool cut = mask[size_t(r * cols + c)] == 0;
            pruned += cut;
            if (cut && w[size_t(r * cols + c)] != 0.0f) ++nonzeroWherePruned;
        }
    if (t.m)
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; c += t.m) {
                int kept = 0;
                for (int64_t j = c; j < c + t.m; ++j) kept += mask[size_t(r * cols + j)];
                badGroups += kept != t.n;
            }
    int64_t expected = 0;
    for (int64_t begin = 0; begin < cols; begin += t.block) {
        const int64_t count = std::min(t.block, cols - begin);
        expected += t.m ? count / t.m * (t.m - t.n) : std::llround(t.sparsity * double(count));
    }
    check(pruned == size_t(expected * rows) && nonzeroWherePruned == 0 && badGroups == 0,
          (tag + "the reference prunes the asked count (n of every m kept) and zeroes exactly those weights").c_str());
    if (t.ties) {  // row 0: all scores equal, so the earliest columns of each block / group go
        bool earliest = true;
        for (int64_t begin = 0; begin < cols; begin += (t.m ? t.m : t.block)) {
            const int64_t count = std::min(t.m ? int64_t(t.m) : t.block, cols - begin);
            const int64_t cut = t.m ? t.m - t.n : std::llround(t.sparsity * double(count));
            for (int64_t j = 0; j < count; ++j) earliest &= mask[size_t(begin + j)] == (j < cut ? 0 : 1);
        }
        check(earliest, (tag + "ties prune the earlier columns first").c_str());
    }
    for (void* p : {(void*)dw, (void*)du, (void*)dm, (void*)de}) cudaFree(p);
}

} // namespace

int main() {
    if (noCudaDevice()) return 77;
    const Case cases[] = {
        {"unstructured 50%", 0.5, 0, 0, 45, 512, 128, false},
        {"unstructured 30%, short last block", 0.3, 0, 0, 19, 300, 128, false},
        {"2:4", 0.0, 2, 4, 37, 384, 128, false},
        {"4:8", 0.0, 4, 8, 16, 256, 128, false},
        {"1:3 (groups straddle lanes)", 0.0, 1, 3, 21, 252, 126, false},
        {"unstructured 50% with ties", 0.5, 0, 0, 9, 256, 128, true},
        {"2:4 with ties", 0.0, 2, 4, 9, 256, 128, true},
    };
    try {
        uint32_t seed = 3;
        for (const Case& c : cases) runCase(c, seed += 10);
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return finish();
}
