// GPU test (label `gpu`): the 2:4 sparse GEMM through cuSPARSELt against the CPU reference (dense product of the
// same pruned weight, accumulated in double), fp16 and bf16, m = 1, 16, 33 (padded) and 2048, square and non-square
// weights, an input pointer off the 16-byte alignment, both ways of describing the weight, with our search and
// with the default configuration; every configuration the search may try (any may win); and the configuration file
// that lets a later process skip the search; weights of one shape sharing plans and padding buffers. Also: the device
// 2:4 checker finds the same first bad group as the CPU one, and a weight that is not 2:4 (or a shape cuSPARSELt
// cannot take) is refused with a message naming the problem. Exits 77 without a GPU, or (after the checker tests)
// when cuSPARSELt cannot be loaded, saying why.
#include <cuda_runtime.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "../kernels/kernel_check.h"
#include "device_memory.h"
#include "cwb/kernels/sparse24_gemm.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

std::vector<uint16_t> toBits(const std::vector<float>& v, ActType t) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = floatToActBits(v[i], t);
    return b;
}

std::vector<float> prunedWeight(int64_t n, int64_t k, uint32_t seed) {
    std::vector<float> w = gaussian(size_t(n * k), seed, 0.05f);
    pruneTwoFourRef(w.data(), n, k);
    return w;
}

void checkerCases() {
    const int64_t n = 64, k = 256;
    std::vector<float> w = prunedWeight(n, k, 11);
    for (ActType t : {ActType::Float16, ActType::BFloat16}) {
        std::vector<uint16_t> bits = toBits(w, t);
        uint16_t* d = toDevice(bits);
        check(checkTwoFour(d, n, k, nullptr).ok, (std::string("device checker passes a pruned ") + actTypeName(t) + " weight").c_str());
        cudaFree(d);
        // Break row 37, columns 120..123 (fill all four) and row 50 later: the first must be reported.
        for (int64_t j = 120; j < 124; ++j) bits[size_t(37 * k + j)] = floatToActBits(0.5f, t);
        for (int64_t j = 0; j < 3; ++j) bits[size_t(50 * k + j)] = floatToActBits(0.25f, t);
        d = toDevice(bits);
        const TwoFourCheck dev = checkTwoFour(d, n, k, nullptr), cpu = checkTwoFourRef(bits.data(), n, k);
        cudaFree(d);
        check(!dev.ok && dev.row == 37 && dev.column == 120 && dev.nonzeros == 4 && cpu.describe() == dev.describe(),
              ("device checker names the first bad group like the CPU one: " + dev.describe()).c_str());
    }
}

// Every output back to NaN (0xFFFF in both 16-bit types) before a run that is checked.
void refillNaN(uint16_t* dy, size_t count) {
    if (cudaMemset(dy, 0xFF, count * sizeof(uint16_t)) != cudaSuccess) throw KernelError("cudaMemset failed");
}

const char* layoutName(Sparse24Layout l) { return l == Sparse24Layout::RowMajor ? "row-major" : "column-major^T"; }

void gemmCase(int64_t m, int64_t n, int64_t k, ActType t, bool offsetInput, uint32_t seed, Sparse24Options options) {
    std::vector<uint16_t> wb = toBits(prunedWeight(n, k, seed), t);
    std::vector<uint16_t> xb = toBits(gaussian(size_t(m * k), seed + 1), t);
    std::vector<float> ref(size_t(m * n));
    sparse24GemmRef(xb.data(), wb.data(), t, m, n, k, ref.data());
    uint16_t* dw = toDevice(wb);
    // One spare element in front so that the input can start 2 bytes past an aligned address.
    std::vector<uint16_t> xPadded(xb.size() + 1, 0);
    std::copy(xb.begin(), xb.end(), xPadded.begin() + (offsetInput ? 1 : 0));
    uint16_t* dxAlloc = toDevice(xPadded);
    const uint16_t* dx = dxAlloc + (offsetInput ? 1 : 0);
    uint16_t* dy = toDevice(std::vector<uint16_t>(ref.size(), 0xFFFF));   // NaN in both types
    Sparse24Gemm gemm(dw, t, n, k, nullptr, options);
    cudaFree(dw);   // the compressed copy is all the GEMM needs
    gemm.run(dx, dy, m, nullptr);
    if (cudaDeviceSynchronize() != cudaSuccess) throw KernelError("sparse GEMM failed");
    const double firstRun = nmse(download(dy, ref.size(), t), ref);
    refillNaN(dy, ref.size());   // the second run must write every output itself
    gemm.run(dx, dy, m, nullptr);   // the cached plan
    if (cudaDeviceSynchronize() != cudaSuccess) throw KernelError("sparse GEMM failed");
    const std::vector<float> y = download(dy, ref.size(), t);
    const double e = std::max(firstRun, nmse(y, ref)), tol = t == ActType::Float16 ? kGemmNmseFp16 : kGemmNmseBf16;
    const std::string note = gemm.kernelNote(m);
    char what[400];
    std::snprintf(what, sizeof what, "2:4 %lldx%lldx%lld %s %s (%s)%s: nmse %.2e < %.0e", (long long)m, (long long)n,
                  (long long)k, actTypeName(t), layoutName(options.layout), note.c_str(),
                  offsetInput ? " unaligned input" : "", e, tol);
    check(e < tol, what);
    const bool searched = note.find("searched") != std::string::npos, byDefault = note.find("(default") != std::string::npos;
    const bool searchAllowed = sparse24SearchLimit() >= 0;
    check(options.search && searchAllowed ? searched : byDefault,
          ("the note says how the configuration was chosen: " + note).c_str());
    cudaFree(dxAlloc);
    cudaFree(dy);
}

// Every configuration the search may try for one product, fixed in turn, against the reference (any of them may win
// a search); then the search itself.
void everyConfigurationCase(Sparse24Layout layout, ActType t, uint32_t seed) {
    const int64_t m = 64, n = 256, k = 512;
    std::vector<uint16_t> wb = toBits(prunedWeight(n, k, seed), t);
    std::vector<uint16_t> xb = toBits(gaussian(size_t(m * k), seed + 1), t);
    std::vector<float> ref(size_t(m * n));
    sparse24GemmRef(xb.data(), wb.data(), t, m, n, k, ref.data());
    uint16_t* dw = toDevice(wb);
    uint16_t* dx = toDevice(xb);
    uint16_t* dy = toDevice(std::vector<uint16_t>(ref.size(), 0xFFFF));
    Sparse24Options options;
    options.layout = layout;
    options.search = false;
    Sparse24Gemm gemm(dw, t, n, k, nullptr, options);
    cudaFree(dw);
    const int count = gemm.configCount(m);
    std::string why;
    const int limit = sparse24SearchLimit(&why);
    if (limit < 0) std::printf("no search on this device: %s; only configuration 0 is checked\n", why.c_str());
    const int tried = std::min(count, limit + 1 > 0 ? limit + 1 : 1);
    int accepted = 0;
    double worst = 0;
    std::string refused;
    for (int id = 0; id < tried; ++id) {
        try {
            gemm.useConfig(m, id);
        } catch (const KernelError& e) {
            refused += " " + std::to_string(id);
            continue;
        }
        ++accepted;
        refillNaN(dy, ref.size());   // no configuration may pass on an earlier one's output
        gemm.run(dx, dy, m, nullptr);
        if (cudaDeviceSynchronize() != cudaSuccess) throw KernelError("sparse GEMM failed");
        const double e = nmse(download(dy, ref.size(), t), ref);
        worst = std::max(worst, e);
        char what[200];
        std::snprintf(what, sizeof what, "configuration %d, %s %s: nmse %.2e", id, actTypeName(t), layoutName(layout), e);
        check(e < (t == ActType::Float16 ? kGemmNmseFp16 : kGemmNmseBf16), what);
    }
    std::vector<Sparse24Candidate> timed;
    if (limit >= 0) timed = gemm.searchConfigs(dx, dy, m, nullptr);
    int timedOk = 0;
    double setupMax = 0, setupSum = 0, firstMax = 0, firstSum = 0;
    for (const Sparse24Candidate& c : timed) {
        timedOk += c.microseconds > 0 ? 1 : 0;
        setupMax = std::max(setupMax, c.setupMicroseconds);
        setupSum += c.setupMicroseconds;
        firstMax = std::max(firstMax, c.firstRunMicroseconds);
        firstSum += c.firstRunMicroseconds;
    }
    if (!timed.empty())
        std::printf("search costs per configuration (host): setup mean %.0f us, max %.0f us; first run mean %.0f us, "
                    "max %.0f us\n", setupSum / timed.size(), setupMax, firstSum / timed.size(), firstMax);
    char what[360];
    std::snprintf(what, sizeof what, "%s %s: %d configurations offered, %d checked, %d accepted (refused:%s), worst "
                  "nmse %.2e; the search timed %d of %d and chose: %s", actTypeName(t), layoutName(layout), count, tried,
                  accepted, refused.empty() ? " none" : refused.c_str(), worst, timedOk, int(timed.size()),
                  gemm.kernelNote(m).c_str());
    const bool searchedAll = limit < 0 || (int(timed.size()) == tried && timedOk == accepted &&
                                           gemm.kernelNote(m).find("searched") != std::string::npos);
    check(count >= 1 && accepted >= 1 && searchedAll, what);
    cudaFree(dx);
    cudaFree(dy);
}

// A search's choice is written to the configuration file, and a later process (here: after forgetting this
// process's searches) takes it from there instead of searching again.
void configurationFileCase(uint32_t seed) {
    std::string why;
    if (sparse24SearchLimit(&why) < 0) {
        std::printf("configuration file not checked: no search on this device (%s)\n", why.c_str());
        return;
    }
    char folder[] = "/tmp/cwb-sparse24-gpu-XXXXXX";
    if (!mkdtemp(folder)) throw KernelError("no temporary folder");
    const std::string file = std::string(folder) + "/configs.txt";
    setenv("CWB_SPARSE24_CACHE", file.c_str(), 1);
    const int64_t m = 48, n = 512, k = 256;   // a shape no other case uses
    const std::vector<uint16_t> wb = toBits(prunedWeight(n, k, seed), ActType::Float16);
    const std::vector<uint16_t> xb = toBits(gaussian(size_t(m * k), seed + 1), ActType::Float16);
    std::vector<float> ref(size_t(m * n));
    sparse24GemmRef(xb.data(), wb.data(), ActType::Float16, m, n, k, ref.data());
    uint16_t* dx = toDevice(xb);
    uint16_t* dy = toDevice(std::vector<uint16_t>(ref.size(), 0xFFFF));
    std::string first, second;
    double error = 0;
    for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) sparse24ForgetSearches();
        uint16_t* dw = toDevice(wb);
        Sparse24Gemm gemm(dw, ActType::Float16, n, k, nullptr);
        cudaFree(dw);
        refillNaN(dy, ref.size());   // the pass that reads the choice back must write every output itself
        gemm.run(dx, dy, m, nullptr);
        if (cudaDeviceSynchronize() != cudaSuccess) throw KernelError("sparse GEMM failed");
        error = std::max(error, nmse(download(dy, ref.size(), ActType::Float16), ref));
        (pass == 0 ? first : second) = gemm.kernelNote(m);
    }
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);
    check(first.find("searched 0..") != std::string::npos, ("the first run searches: " + first).c_str());
    check(!line.empty() && line.find("\t512\t256\t") != std::string::npos,
          ("and writes its choice to the file: " + line).c_str());
    check(second.find("searched earlier, from " + file) != std::string::npos,
          ("a later run takes it from the file: " + second).c_str());
    check(first.substr(0, first.find(' ', 14)) == second.substr(0, second.find(' ', 14)),
          "the same configuration both times");
    check(error < kGemmNmseFp16, "both match the reference");
    unsetenv("CWB_SPARSE24_CACHE");
    std::remove(file.c_str());
    rmdir(folder);
    cudaFree(dx);
    cudaFree(dy);
}

// Weights of one shape share a plan per padded m and configuration, yet each gives its own product; runs of two
// weights back to back share the padding buffers; a plan outlives the weight that made it and dies with the last.
void sharedPlanCase(uint32_t seed) {
    const int64_t n = 256, k = 384;   // a shape no other case uses
    const ActType t = ActType::Float16;
    Sparse24Options options;
    options.search = false;
    const size_t plansBefore = sparse24LivePlanCount();
    std::vector<std::unique_ptr<Sparse24Gemm>> gemms;
    std::vector<std::vector<uint16_t>> weights;
    for (int i = 0; i < 2; ++i) {
        weights.push_back(toBits(prunedWeight(n, k, seed + i), t));
        uint16_t* dw = toDevice(weights.back());
        gemms.push_back(std::make_unique<Sparse24Gemm>(dw, t, n, k, nullptr, options));
        cudaFree(dw);
    }
    auto checkRuns = [&](const std::vector<int>& which, int64_t m, const char* when) {
        const std::vector<uint16_t> xb = toBits(gaussian(size_t(m * k), seed + 7), t);
        uint16_t* dx = toDevice(xb);
        std::vector<uint16_t*> dys;
        for (int w : which) {
            dys.push_back(toDevice(std::vector<uint16_t>(size_t(m * n), 0xFFFF)));
            gemms[size_t(w)]->run(dx, dys.back(), m, nullptr);   // no synchronization between the weights
        }
        if (cudaDeviceSynchronize() != cudaSuccess) throw KernelError("sparse GEMM failed");
        for (size_t i = 0; i < which.size(); ++i) {
            std::vector<float> ref(size_t(m * n));
            sparse24GemmRef(xb.data(), weights[size_t(which[i])].data(), t, m, n, k, ref.data());
            const double e = nmse(download(dys[i], ref.size(), t), ref);
            char what[200];
            std::snprintf(what, sizeof what, "shared plan, weight %d of 2, m = %lld, %s: nmse %.2e", which[i] + 1,
                          (long long)m, when, e);
            check(e < kGemmNmseFp16, what);
            cudaFree(dys[i]);
        }
        cudaFree(dx);
    };
    checkRuns({0, 1, 0}, 33, "back to back");
    checkRuns({1, 0}, 64, "back to back");
    char what[160];
    std::snprintf(what, sizeof what, "two weights of one shape at two m hold two plans (live plans %zu -> %zu)",
                  plansBefore, sparse24LivePlanCount());
    check(sparse24LivePlanCount() == plansBefore + 2, what);
    gemms[0].reset();   // made both plans
    checkRuns({1}, 33, "after the first weight is gone");
    check(sparse24LivePlanCount() == plansBefore + 2, "the second weight keeps both plans alive");
    gemms[1].reset();
    check(sparse24LivePlanCount() == plansBefore, "the plans die with the last weight that held them");
    check(sparse24ScratchBytes() >= size_t(64 * (n + k)) * 2, "the padding buffers are accounted as shared scratch");
}

void refusalCases() {
    const int64_t n = 32, k = 64;
    std::vector<uint16_t> dense = toBits(gaussian(size_t(n * k), 21), ActType::Float16);
    uint16_t* d = toDevice(dense);
    std::string message;
    try {
        Sparse24Gemm gemm(d, ActType::Float16, n, k, nullptr);
    } catch (const KernelError& e) {
        message = e.what();
    }
    cudaFree(d);
    check(message.find("is not 2:4 sparse: row 0, columns 0..3 hold 4 nonzeros") != std::string::npos,
          ("a dense weight is refused: " + message).c_str());
    message.clear();
    try {
        Sparse24Gemm gemm(nullptr, ActType::Float16, 20, 64, nullptr);
    } catch (const KernelError& e) {
        message = e.what();
    }
    check(message.find("multiples of 16") != std::string::npos, ("20 rows are refused: " + message).c_str());
}

} // namespace

int main() {
    if (noCudaDevice()) return 77;
    try {
        checkerCases();
        const CusparseLtAvailability& lt = cusparseLtAvailability();
        std::printf("%s\n", lt.detail.c_str());
        if (!lt.available) {
            std::printf("SKIP: cuSPARSELt unavailable: %s\n", lt.detail.c_str());
            finish();
            return failures() ? 1 : 77;
        }
        refusalCases();
        // Every other case searches afresh: no configuration file.
        setenv("CWB_SPARSE24_CACHE", "off", 1);
        uint32_t seed = 100;
        // Searches cost ~0.3 s per configuration on the H200 (docs/performance.md): the searched cases use one
        // layout per type, the other layout runs configuration 0; every configuration is checked once per type.
        for (ActType t : {ActType::Float16, ActType::BFloat16}) {
            const bool fp16 = t == ActType::Float16;
            Sparse24Options searched, byDefault;
            searched.layout = fp16 ? Sparse24Layout::RowMajor : Sparse24Layout::ColumnMajorTransposed;
            byDefault.layout = fp16 ? Sparse24Layout::ColumnMajorTransposed : Sparse24Layout::RowMajor;
            byDefault.search = false;
            for (int64_t m : {1, 16, 33, 2048}) {
                gemmCase(m, 256, 512, t, false, seed++, searched);
                gemmCase(m, 768, 256, t, false, seed++, byDefault);
            }
            gemmCase(128, 256, 1024, t, true, seed++, searched);
            gemmCase(128, 256, 1024, t, true, seed++, byDefault);
            everyConfigurationCase(searched.layout, t, seed++);
        }
        configurationFileCase(seed++);
        sharedPlanCase(seed);
        seed += 8;
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return finish();
}
