// 2:4 sparse GEMM through cuSPARSELt (loaded by cusparselt_api.cpp). Layout as cuSPARSELt sees it: the weight
// W [n, k] row-major is the structured operand A, described either as [n, k] row-major (not transposed) or as
// [k, n] column-major (transposed): the same bytes, with its 2:4 groups along k; X [m, k] row-major is B = [k, m]
// column-major; Y [m, n] row-major is D = [n, m] column-major. The library's default kernel (configuration 0) is
// far from its best on the H200, so each size class of m times the configurations once and keeps the fastest.
#include <cuda_runtime.h>
#include <library_types.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda_check.h"
#include "cusparselt_api.h"
#include "cwb/kernels/sparse24_config_file.h"
#include "cwb/kernels/sparse24_gemm.h"

namespace cwb::kernels {

namespace {

constexpr int64_t kShapeMultiple = 16;    // n and k; m is padded up to it
constexpr uint32_t kAlignmentBytes = 16;  // what the descriptors promise about every pointer

__global__ void firstBadGroupKernel(const uint16_t* w, int64_t groups, unsigned long long* first) {
    for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups; g += int64_t(gridDim.x) * blockDim.x) {
        int count = 0;
        for (int j = 0; j < 4; ++j) count += (w[g * 4 + j] & 0x7fffu) != 0 ? 1 : 0;
        if (count > 2) atomicMin(first, static_cast<unsigned long long>(g));
    }
}

const lt::Api& loadedApi() {
    std::string reason;
    const lt::Api* a = lt::api(reason);
    if (!a) throw KernelError("cuSPARSELt unavailable: " + reason);
    return *a;
}

void checkLt(const lt::Api& a, lt::Status s, const std::string& what) {
    if (s != lt::kSuccess) throw KernelError("Sparse24Gemm: " + what + " failed with " + lt::statusText(a, s));
}

void* deviceAlloc(size_t bytes) {
    void* p = nullptr;
    if (bytes) CWB_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kAlignmentBytes == 0; }

} // namespace

TwoFourCheck checkTwoFour(const void* w, int64_t n, int64_t k, Stream stream) {
    TwoFourCheck result;
    if (k % 4) {
        result.ok = false;
        return result;
    }
    const int64_t groups = n * (k / 4);
    if (groups == 0) return result;
    const cudaStream_t s = detail::toStream(stream);
    unsigned long long* first = nullptr;
    CWB_CUDA_CHECK(cudaMalloc(&first, sizeof *first));
    unsigned long long found = ULLONG_MAX;
    try {
        CWB_CUDA_CHECK(cudaMemsetAsync(first, 0xff, sizeof *first, s));
        const int blocks = int(std::min<int64_t>((groups + 255) / 256, 4096));
        firstBadGroupKernel<<<blocks, 256, 0, s>>>(static_cast<const uint16_t*>(w), groups, first);
        CWB_CUDA_CHECK_LAUNCH("firstBadGroupKernel");
        CWB_CUDA_CHECK(cudaMemcpyAsync(&found, first, sizeof found, cudaMemcpyDeviceToHost, s));
        CWB_CUDA_CHECK(cudaStreamSynchronize(s));
    } catch (...) {
        cudaFree(first);
        throw;
    }
    cudaFree(first);
    if (found == ULLONG_MAX) return result;
    uint16_t group[4];
    CWB_CUDA_CHECK(cudaMemcpy(group, static_cast<const uint16_t*>(w) + found * 4, sizeof group, cudaMemcpyDeviceToHost));
    result.ok = false;
    result.row = int64_t(found) / (k / 4);
    result.column = int64_t(found) % (k / 4) * 4;
    result.nonzeros = 0;
    for (uint16_t v : group) result.nonzeros += (v & 0x7fffu) != 0 ? 1 : 0;
    return result;
}

const CusparseLtAvailability& cusparseLtAvailability() {
    static const CusparseLtAvailability availability = [] {
        CusparseLtAvailability a;
        a.available = lt::api(a.detail) != nullptr;
        return a;
    }();
    return availability;
}

bool sparse24ShapeSupported(int64_t n, int64_t k, std::string* why) {
    if (n > 0 && k > 0 && n % kShapeMultiple == 0 && k % kShapeMultiple == 0) return true;
    if (why)
        *why = "2:4 through cuSPARSELt needs rows and columns that are positive multiples of " +
               std::to_string(kShapeMultiple) + ", got " + std::to_string(n) + "x" + std::to_string(k);
    return false;
}

// Rows are padded to a multiple of 16; a size class is the power of two at or above the padded rows. A search's
// choice holds for its whole class, so a prefill of a new length does not search again.
int64_t paddedRows(int64_t m) { return (m + kShapeMultiple - 1) / kShapeMultiple * kShapeMultiple; }
int64_t sizeClass(int64_t m) {
    int64_t c = kShapeMultiple;
    while (c < m) c *= 2;
    return c;
}

// Configurations searched, keyed by what determines the choice; shared by every weight of the process, so a model
// searches once per distinct shape, not once per layer.
struct ChoiceKey {
    int device;
    int64_t n, k;
    int type, layout;
    int64_t sizeClass;
    bool operator<(const ChoiceKey& o) const {
        return std::tie(device, n, k, type, layout, sizeClass) < std::tie(o.device, o.n, o.k, o.type, o.layout, o.sizeClass);
    }
};

// A plan for one product shape (n, k, padded m, type, layout) and one kernel configuration: its own structured
// descriptor (the same parameters as every weight's), the descriptors of B and D, the matmul descriptor, the
// algorithm selection and the plan. The plan does not depend on the weight's values (they come with each matmul
// call), so every weight of that shape shares one: making one costs ~0.1-0.4 s on the H200, which per layer of a 7B
// model was most of a 2:4 model's first prefill. The workspace is not in the plan but in the stream's scratch.
struct PlanEntry {
    const lt::Api* api = nullptr;
    const lt::Handle* handle = nullptr;
    lt::MatDescriptor sparse, b, d;
    lt::MatmulDescriptor matmul;
    lt::AlgSelection alg;
    lt::Plan plan;
    bool sparseMade = false, descriptorsMade = false, planMade = false;
    int configId = -1, maxConfigId = 0;
    size_t workspaceBytes = 0;

    PlanEntry() = default;
    PlanEntry(const PlanEntry&) = delete;
    PlanEntry& operator=(const PlanEntry&) = delete;
    ~PlanEntry() {
        if (planMade) api->planDestroy(&plan);
        if (descriptorsMade) {
            api->matDescriptorDestroy(&b);
            api->matDescriptorDestroy(&d);
        }
        if (sparseMade) api->matDescriptorDestroy(&sparse);
    }
};

// What identifies a shared plan.
struct PlanKey {
    int device;
    int64_t n, k;
    int type, layout;
    int64_t mp;
    int configId;
    bool operator<(const PlanKey& o) const {
        return std::tie(device, n, k, type, layout, mp, configId) <
               std::tie(o.device, o.n, o.k, o.type, o.layout, o.mp, o.configId);
    }
};

// Plans alive in the process; an entry dies with the last weight that holds it.
std::mutex& sharedPlansMutex() {
    static std::mutex m;
    return m;
}
std::map<PlanKey, std::weak_ptr<PlanEntry>>& sharedPlans() {
    static auto* plans = new std::map<PlanKey, std::weak_ptr<PlanEntry>>();   // never destroyed: no exit-time CUDA calls
    return *plans;
}

// Per device and stream: the padded / aligned copies of x and y and the plan workspace. Runs on one stream are
// ordered, so every weight can use the same buffers; buffers only grow (after a device synchronization, since an
// earlier run may still use the old ones). Held for the process, like cuBLAS's workspaces.
struct Scratch {
    void* x = nullptr;
    void* y = nullptr;
    void* workspace = nullptr;
    size_t xBytes = 0, yBytes = 0, workspaceBytes = 0;
};
std::mutex& scratchMutex() {   // held for the whole of a run: what it enqueues uses the buffers
    static std::mutex m;
    return m;
}
std::map<std::pair<int, cudaStream_t>, Scratch>& scratches() {
    static auto* all = new std::map<std::pair<int, cudaStream_t>, Scratch>();   // never destroyed, as sharedPlans
    return *all;
}
Scratch& scratchFor(int device, cudaStream_t stream) { return scratches()[{device, stream}]; }
size_t scratchTotal() {
    size_t bytes = 0;
    for (const auto& [where, s] : scratches()) bytes += s.xBytes + s.yBytes + s.workspaceBytes;
    return bytes;
}
void* grow(void*& buffer, size_t& have, size_t bytes) {
    if (bytes > have) {
        CWB_CUDA_CHECK(cudaDeviceSynchronize());
        cudaFree(buffer);
        buffer = nullptr;
        have = 0;
        buffer = deviceAlloc(bytes);
        have = bytes;
    }
    return buffer;
}

std::mutex& searchLogMutex() {
    static std::mutex m;
    return m;
}
std::function<void(const std::string&)>& searchLogFunction() {
    static auto* log = new std::function<void(const std::string&)>();
    return *log;
}
void searchLog(const std::string& line) {
    std::function<void(const std::string&)> log;
    {
        std::lock_guard<std::mutex> lock(searchLogMutex());
        log = searchLogFunction();
    }
    if (log) log(line);
}

// What a size class runs: a configuration id, and how it was chosen (for kernelNote).
struct ClassChoice {
    int configId = 0;
    std::string how;
};

std::mutex& sharedChoicesMutex() {
    static std::mutex m;
    return m;
}
std::map<ChoiceKey, ClassChoice>& sharedChoices() {
    static std::map<ChoiceKey, ClassChoice> choices;
    return choices;
}

struct Sparse24Gemm::State {
    const lt::Api* api = nullptr;
    const lt::Handle* handle = nullptr;
    int64_t n = 0, k = 0;
    ActType type = ActType::Float16;
    Sparse24Options options;
    int device = 0;
    std::unique_ptr<lt::MatDescriptor> sparse = std::make_unique<lt::MatDescriptor>();
    bool sparseMade = false;
    void* compressed = nullptr;
    size_t compressedBytes = 0;
    mutable std::mutex mutex;
    std::map<int64_t, std::shared_ptr<PlanEntry>> plans;   // by padded m: the plan this weight runs
    std::map<int64_t, ClassChoice> fixed;   // by size class: useConfig's, for this weight only
    int searchLimit = -2;                    // sparse24SearchLimit(), asked once per weight (-2: not yet)

    int valueType() const { return type == ActType::Float16 ? CUDA_R_16F : CUDA_R_16BF; }
    bool rowMajor() const { return options.layout == Sparse24Layout::RowMajor; }
    int weightOp() const { return rowMajor() ? lt::kOpNonTranspose : lt::kOpTranspose; }

    std::string shapeText(int64_t mp) const {
        return std::to_string(mp) + "x" + std::to_string(n) + "x" + std::to_string(k);
    }

    // The weight's structured descriptor: [n, k] row-major, or the same bytes as [k, n] column-major.
    lt::Status initSparseDescriptor(lt::MatDescriptor* descriptor) const {
        return rowMajor() ? api->structuredDescriptorInit(handle, descriptor, n, k, k, kAlignmentBytes, valueType(),
                                                          lt::kOrderRow, lt::kSparsity50Percent)
                          : api->structuredDescriptorInit(handle, descriptor, k, n, k, kAlignmentBytes, valueType(),
                                                          lt::kOrderColumn, lt::kSparsity50Percent);
    }

    // A plan entry's descriptors and algorithm selection for mp rows; reads how many configurations the library
    // offers. No plan yet (applyConfig makes it).
    std::unique_ptr<PlanEntry> newEntry(int64_t mp) const {
        auto e = std::make_unique<PlanEntry>();
        e->api = api;
        e->handle = handle;
        const std::string shape = shapeText(mp);
        checkLt(*api, initSparseDescriptor(&e->sparse), "the structured weight descriptor (" + shape + ")");
        e->sparseMade = true;
        checkLt(*api, api->denseDescriptorInit(handle, &e->b, k, mp, k, kAlignmentBytes, valueType(), lt::kOrderColumn),
                "the input descriptor (" + shape + ")");
        checkLt(*api, api->denseDescriptorInit(handle, &e->d, n, mp, n, kAlignmentBytes, valueType(), lt::kOrderColumn),
                "the output descriptor (" + shape + ")");
        e->descriptorsMade = true;
        checkLt(*api, api->matmulDescriptorInit(handle, &e->matmul, weightOp(), lt::kOpNonTranspose, &e->sparse, &e->b,
                                                &e->d, &e->d, lt::kCompute32F),
                "the matmul descriptor (" + shape + ")");
        checkLt(*api, api->algSelectionInit(handle, &e->alg, &e->matmul, lt::kMatmulAlgDefault),
                "the algorithm selection (" + shape + ")");
        int32_t maxId = 0;
        checkLt(*api, api->algGetAttribute(handle, &e->alg, lt::kAlgConfigMaxId, &maxId, sizeof maxId),
                "the configuration count (" + shape + ")");
        e->maxConfigId = maxId;
        return e;
    }

    // Selects configuration `id` and remakes the entry's plan; the library's status (and the plan unmade) when
    // refused.
    lt::Status applyConfig(PlanEntry& e, int id) const {
        if (e.planMade) {
            api->planDestroy(&e.plan);
            e.planMade = false;
        }
        e.configId = -1;
        // A fresh selection each time, as a plan may keep parts of the one it was made from.
        lt::Status status = api->algSelectionInit(handle, &e.alg, &e.matmul, lt::kMatmulAlgDefault);
        const int32_t value = id;
        if (status == lt::kSuccess) status = api->algSetAttribute(handle, &e.alg, lt::kAlgConfigId, &value, sizeof value);
        if (status == lt::kSuccess) status = api->planInit(handle, &e.plan, &e.matmul, &e.alg);
        if (status != lt::kSuccess) return status;
        e.planMade = true;
        e.configId = id;
        size_t bytes = 0;
        checkLt(*api, api->getWorkspace(handle, &e.plan, &bytes), "the workspace query");
        e.workspaceBytes = bytes;
        return status;
    }

    // The process's plan for mp rows and configuration `id`, made when no live weight holds one; throws
    // KernelError when the library refuses the configuration.
    std::shared_ptr<PlanEntry> sharedPlan(int64_t mp, int id) const {
        const PlanKey key{device, n, k, int(type), int(options.layout), mp, id};
        std::lock_guard<std::mutex> lock(sharedPlansMutex());
        auto& plans = sharedPlans();
        if (auto found = plans.find(key); found != plans.end()) {
            if (std::shared_ptr<PlanEntry> live = found->second.lock()) return live;
        }
        std::shared_ptr<PlanEntry> made = newEntry(mp);
        checkLt(*api, applyConfig(*made, id), "configuration " + std::to_string(id) + " (" + shapeText(mp) + ")");
        for (auto it = plans.begin(); it != plans.end();) it = it->second.expired() ? plans.erase(it) : std::next(it);
        plans[key] = made;
        return made;
    }

    ChoiceKey keyOf(int64_t mp) const { return {device, n, k, int(type), int(options.layout), sizeClass(mp)}; }

    // The choice for mp's size class: this weight's fixed one, else the process's searched one.
    bool choiceFor(int64_t mp, ClassChoice& out) const {
        auto f = fixed.find(sizeClass(mp));
        if (f != fixed.end()) {
            out = f->second;
            return true;
        }
        if (!options.search) return false;
        std::lock_guard<std::mutex> lock(sharedChoicesMutex());
        auto s = sharedChoices().find(keyOf(mp));
        if (s == sharedChoices().end()) return false;
        out = s->second;
        return true;
    }

    // m's plan, running its size class's choice (configuration 0 until one is made).
    PlanEntry& planFor(int64_t mp) {
        ClassChoice choice;
        const int wanted = choiceFor(mp, choice) ? choice.configId : 0;
        std::shared_ptr<PlanEntry>& slot = plans[mp];
        if (!slot || slot->configId != wanted) slot = sharedPlan(mp, wanted);
        return *slot;
    }

    lt::Status matmul(const PlanEntry& e, const void* b, void* d, cudaStream_t s) {
        const float alpha = 1.0f, beta = 0.0f;
        void* streams[1] = {s};
        Scratch& scratch = scratchFor(device, s);
        void* workspace = grow(scratch.workspace, scratch.workspaceBytes, e.workspaceBytes);
        return api->matmul(handle, &e.plan, &alpha, compressed, b, &beta, d, d, workspace, streams, 1);
    }

    // Times the configurations for mp rows that are safe to try (0 .. limit) on b / d, on a plan of its own, and
    // makes the fastest its size class's choice for every weight of this shape.
    std::vector<Sparse24Candidate> search(int64_t mp, const void* b, void* d, cudaStream_t s, int limit) {
        constexpr int kTimedRuns = 3;
        std::vector<Sparse24Candidate> list;
        using Clock = std::chrono::steady_clock;
        auto microsecondsSince = [](Clock::time_point t) {
            return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
        };
        const auto searchStart = Clock::now();
        std::unique_ptr<PlanEntry> trial = newEntry(mp);
        const int last = std::min(limit, trial->maxConfigId);
        cudaEvent_t start = nullptr, stop = nullptr;
        CWB_CUDA_CHECK(cudaEventCreate(&start));
        CWB_CUDA_CHECK(cudaEventCreate(&stop));
        int best = -1;
        double bestUs = 0, firstUs = -1;
        try {
            for (int id = 0; id <= last; ++id) {
                Sparse24Candidate c;
                c.configId = id;
                c.microseconds = -1;
                auto t = Clock::now();
                lt::Status status = applyConfig(*trial, id);
                c.setupMicroseconds = microsecondsSince(t);
                t = Clock::now();
                if (status == lt::kSuccess) status = matmul(*trial, b, d, s);   // warm-up: module load, caches
                if (status == lt::kSuccess) CWB_CUDA_CHECK(cudaStreamSynchronize(s));
                c.firstRunMicroseconds = microsecondsSince(t);
                if (status != lt::kSuccess) {
                    c.error = lt::statusText(*api, status);
                    list.push_back(c);
                    continue;
                }
                CWB_CUDA_CHECK(cudaEventRecord(start, s));
                for (int r = 0; r < kTimedRuns && status == lt::kSuccess; ++r) status = matmul(*trial, b, d, s);
                CWB_CUDA_CHECK(cudaEventRecord(stop, s));
                CWB_CUDA_CHECK(cudaEventSynchronize(stop));
                if (status != lt::kSuccess) {
                    c.error = lt::statusText(*api, status);
                    list.push_back(c);
                    continue;
                }
                float ms = 0;
                CWB_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
                c.microseconds = 1000.0 * ms / kTimedRuns;
                if (id == 0) firstUs = c.microseconds;
                if (best < 0 || c.microseconds < bestUs) {
                    best = id;
                    bestUs = c.microseconds;
                }
                list.push_back(c);
            }
        } catch (...) {
            cudaEventDestroy(start);
            cudaEventDestroy(stop);
            throw;
        }
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
        if (best < 0)
            throw KernelError("Sparse24Gemm: cuSPARSELt refused every kernel configuration for " + shapeText(mp) +
                              " (configuration 0: " + (list.empty() ? std::string("none offered") : list[0].error) + ")");
        char how[200];
        std::snprintf(how, sizeof how, "searched 0..%d at m=%lld in %.2f s: %.1f us", last, (long long)mp,
                      microsecondsSince(searchStart) * 1e-6, bestUs);
        std::string text = how;
        if (best != 0 && firstUs > 0) {
            std::snprintf(how, sizeof how, " vs configuration 0 %.1f us", firstUs);
            text += how;
        }
        {
            std::lock_guard<std::mutex> lock(sharedChoicesMutex());
            sharedChoices()[keyOf(mp)] = ClassChoice{best, text};
        }
        plans[mp] = sharedPlan(mp, best);
        return list;
    }

    // What the configuration file knows this choice by.
    Sparse24ConfigKey fileKey(int64_t mp, int limit) const {
        Sparse24ConfigKey key;
        key.library = "cuSPARSELt " + std::to_string(api->version / 1000) + "." + std::to_string(api->version % 1000 / 100) +
                      "." + std::to_string(api->version % 100);
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
            key.device = std::string(prop.name) + " (" + std::to_string(prop.major) + "." + std::to_string(prop.minor) + ")";
        key.n = n;
        key.k = k;
        key.type = int(type);
        key.layout = int(options.layout);
        key.sizeClass = sizeClass(mp);
        key.searchLimit = limit;
        return key;
    }

    // The choice an earlier process searched for this shape and size class, when the file has one the library
    // still accepts; it becomes the process's choice.
    bool choiceFromFile(int64_t mp, int limit) {
        const Sparse24ConfigFile file(Sparse24ConfigFile::defaultPath());
        const Sparse24ConfigKey key = fileKey(mp, limit);
        const int id = key.device.empty() ? -1 : file.find(key);
        if (id < 0 || id > limit) return false;
        try {
            plans[mp] = sharedPlan(mp, id);
        } catch (const KernelError&) {
            return false;   // past this library's configurations, or refused: search instead
        }
        std::lock_guard<std::mutex> lock(sharedChoicesMutex());
        sharedChoices()[keyOf(mp)] = ClassChoice{id, "searched earlier, from " + file.path()};
        return true;
    }

    void saveChoice(int64_t mp, int limit) {
        ClassChoice choice;
        {
            std::lock_guard<std::mutex> lock(sharedChoicesMutex());
            auto found = sharedChoices().find(keyOf(mp));
            if (found == sharedChoices().end()) return;
            choice = found->second;
        }
        const Sparse24ConfigKey key = fileKey(mp, limit);
        if (!key.device.empty()) Sparse24ConfigFile(Sparse24ConfigFile::defaultPath()).store(key, choice.configId);
    }

    // The B and D pointers cuSPARSELt gets for x / y: the caller's, or padded / aligned copies in the stream's
    // scratch (the caller holds scratchMutex()).
    struct Operands {
        const void* b;
        void* d;
        bool copyBack;
    };
    Operands operands(const void* x, void* y, int64_t m, int64_t mp, cudaStream_t s) {
        const bool stageX = mp != m || !aligned(x), stageY = mp != m || !aligned(y);
        const size_t elem = 2, xBytes = size_t(m * k) * elem;
        Operands o{x, y, stageY};
        Scratch& scratch = scratchFor(device, s);
        if (stageX) {
            void* buf = grow(scratch.x, scratch.xBytes, size_t(mp * k) * elem);
            CWB_CUDA_CHECK(cudaMemcpyAsync(buf, x, xBytes, cudaMemcpyDeviceToDevice, s));
            if (mp != m) CWB_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(buf) + xBytes, 0, size_t(mp * k) * elem - xBytes, s));
            o.b = buf;
        }
        if (stageY) o.d = grow(scratch.y, scratch.yBytes, size_t(mp * n) * elem);
        return o;
    }

    void checkRun(int64_t m) {
        if (m <= 0) throw KernelError("Sparse24Gemm::run: m must be positive, got " + std::to_string(m));
        int current = 0;
        CWB_CUDA_CHECK(cudaGetDevice(&current));
        if (current != device)
            throw KernelError("Sparse24Gemm::run: the weight lives on device " + std::to_string(device) +
                              ", the current device is " + std::to_string(current));
    }

    void release() {
        plans.clear();
        if (sparseMade) api->matDescriptorDestroy(sparse.get());
        cudaFree(compressed);
    }
};

void sparse24ForgetSearches() {
    std::lock_guard<std::mutex> lock(sharedChoicesMutex());
    sharedChoices().clear();
}

int sparse24SearchLimit(std::string* why) {
    if (const char* v = std::getenv("CWB_SPARSE24_SEARCH_MAX_CONFIG"); v && *v) {
        char* end = nullptr;
        const long n = std::strtol(v, &end, 10);
        if (!end || *end != '\0' || n < -1 || n > INT_MAX)
            throw KernelError(std::string("CWB_SPARSE24_SEARCH_MAX_CONFIG must be -1 (no search) or a configuration "
                                          "id, got '") + v + "'");
        if (n < 0 && why) *why = "configuration search off (CWB_SPARSE24_SEARCH_MAX_CONFIG=-1)";
        return int(n);
    }
    std::string reason;
    const lt::Api* a = lt::api(reason);
    if (!a) {
        if (why) *why = reason;
        return -1;
    }
    int device = 0, major = 0, minor = 0;   // attributes, not cudaGetDeviceProperties: this runs on every unsearched run
    CWB_CUDA_CHECK(cudaGetDevice(&device));
    CWB_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CWB_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    // Measured: cuSPARSELt 0.8.0 on the H200 offers configurations 0..52 for fp16 (0..21 for bf16); 36 and above
    // raise an illegal instruction, which ends the CUDA context (docs/performance.md, "2:4: a configuration search").
    if (a->version / 100 == 8 && major == 9 && minor == 0) return 35;
    if (why)
        *why = "no configuration search known to be safe for cuSPARSELt " + std::to_string(a->version / 1000) + "." +
               std::to_string(a->version % 1000 / 100) + "." + std::to_string(a->version % 100) +
               " on compute capability " + std::to_string(major) + "." + std::to_string(minor) +
               " (CWB_SPARSE24_SEARCH_MAX_CONFIG=N searches 0..N)";
    return -1;
}

Sparse24Gemm::Sparse24Gemm(const void* w, ActType type, int64_t n, int64_t k, Stream stream, Sparse24Options options)
    : mState(std::make_unique<State>()) {
    std::string why;
    if (!sparse24ShapeSupported(n, k, &why)) throw KernelError("Sparse24Gemm: " + why);
    State& st = *mState;
    st.api = &loadedApi();
    st.handle = lt::handleForCurrentDevice(*st.api);
    if (!st.handle) throw KernelError("cuSPARSELt unavailable: cusparseLtInit failed on this device");
    CWB_CUDA_CHECK(cudaGetDevice(&st.device));
    st.n = n;
    st.k = k;
    st.type = type;
    st.options = options;
    const TwoFourCheck check = checkTwoFour(w, n, k, stream);
    if (!check.ok)
        throw KernelError("Sparse24Gemm: the " + std::to_string(n) + "x" + std::to_string(k) +
                          " weight is not 2:4 sparse: " + check.describe());
    const cudaStream_t s = detail::toStream(stream);
    try {
        const lt::Status made = st.initSparseDescriptor(st.sparse.get());
        checkLt(*st.api, made, "the structured weight descriptor");
        st.sparseMade = true;
        size_t compressBufferBytes = 0;
        checkLt(*st.api, st.api->compressedSize2(st.handle, st.sparse.get(), &st.compressedBytes, &compressBufferBytes),
                "cusparseLtSpMMACompressedSize2");
        st.compressed = deviceAlloc(st.compressedBytes);
        void* buffer = deviceAlloc(compressBufferBytes);
        lt::Status compressStatus =
            st.api->compress2(st.handle, st.sparse.get(), 1, st.weightOp(), w, st.compressed, buffer, s);
        cudaError_t done = cudaStreamSynchronize(s);   // the buffer is freed next
        cudaFree(buffer);
        checkLt(*st.api, compressStatus, "cusparseLtSpMMACompress2");
        CWB_CUDA_CHECK(done);
    } catch (...) {
        st.release();
        throw;
    }
}

Sparse24Gemm::~Sparse24Gemm() {
    if (mState) mState->release();
}

void Sparse24Gemm::run(const void* x, void* y, int64_t m, Stream stream) {
    State& st = *mState;
    st.checkRun(m);
    std::lock_guard<std::mutex> lock(st.mutex);
    std::lock_guard<std::mutex> scratchLock(scratchMutex());
    const int64_t mp = paddedRows(m);
    const cudaStream_t s = detail::toStream(stream);
    const State::Operands o = st.operands(x, y, m, mp, s);
    ClassChoice choice;
    if (st.options.search && !st.choiceFor(mp, choice)) {
        if (st.searchLimit == -2) st.searchLimit = sparse24SearchLimit();   // not on every run where none is allowed
        const int limit = st.searchLimit;
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        CWB_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
        if (limit >= 0 && capture == cudaStreamCaptureStatusNone && !st.choiceFromFile(mp, limit)) {
            const std::string product = st.shapeText(mp) + " " + actTypeName(st.type);
            const std::string file = Sparse24ConfigFile::defaultPath();
            searchLog("2:4: timing cuSPARSELt kernel configurations 0.." + std::to_string(limit) + " for " + product +
                      " (once per weight shape and size of M; " +
                      (file.empty() ? std::string("no configuration file") : "the choice is saved in " + file) + ")");
            st.search(mp, o.b, o.d, s, limit);
            st.saveChoice(mp, limit);
            ClassChoice made;
            if (st.choiceFor(mp, made))
                searchLog("2:4: " + product + ": configuration " + std::to_string(made.configId) + ", " + made.how);
        }
    }
    const PlanEntry& e = st.planFor(mp);
    checkLt(*st.api, st.matmul(e, o.b, o.d, s),
            "cusparseLtMatmul (" + std::to_string(m) + "x" + std::to_string(st.n) + "x" + std::to_string(st.k) + ")");
    if (o.copyBack) CWB_CUDA_CHECK(cudaMemcpyAsync(y, o.d, size_t(m * st.n) * 2, cudaMemcpyDeviceToDevice, s));
}

int Sparse24Gemm::configCount(int64_t m) {
    State& st = *mState;
    st.checkRun(m);
    std::lock_guard<std::mutex> lock(st.mutex);
    return st.planFor(paddedRows(m)).maxConfigId + 1;
}

void Sparse24Gemm::useConfig(int64_t m, int configId) {
    State& st = *mState;
    st.checkRun(m);
    std::lock_guard<std::mutex> lock(st.mutex);
    const int64_t mp = paddedRows(m);
    st.plans[mp] = st.sharedPlan(mp, configId);   // throws when refused, leaving the choice as it was
    st.fixed[sizeClass(mp)] = ClassChoice{configId, "fixed"};
}

std::vector<Sparse24Candidate> Sparse24Gemm::searchConfigs(const void* x, void* y, int64_t m, Stream stream) {
    State& st = *mState;
    st.checkRun(m);
    std::lock_guard<std::mutex> lock(st.mutex);
    std::lock_guard<std::mutex> scratchLock(scratchMutex());
    const int64_t mp = paddedRows(m);
    const cudaStream_t s = detail::toStream(stream);
    const State::Operands o = st.operands(x, y, m, mp, s);
    std::string why;
    const int limit = sparse24SearchLimit(&why);
    if (limit < 0) throw KernelError("Sparse24Gemm::searchConfigs: " + why);
    st.fixed.erase(sizeClass(mp));
    std::vector<Sparse24Candidate> list = st.search(mp, o.b, o.d, s, limit);
    // This weight keeps the result whether or not its options search (and over an earlier useConfig).
    std::lock_guard<std::mutex> shared(sharedChoicesMutex());
    st.fixed[sizeClass(mp)] = sharedChoices()[st.keyOf(mp)];
    return list;
}

std::string Sparse24Gemm::kernelNote(int64_t m) const {
    std::lock_guard<std::mutex> lock(mState->mutex);
    const int64_t mp = paddedRows(m);
    auto found = mState->plans.find(mp);
    if (found == mState->plans.end() || !found->second || found->second->configId < 0) return "";
    const PlanEntry& e = *found->second;
    ClassChoice choice;
    std::string how = "default";
    if (mState->choiceFor(mp, choice)) {
        how = choice.how;
    } else if (mState->options.search) {
        std::string why;
        if (sparse24SearchLimit(&why) < 0) how = "default; " + why;
    }
    return "configuration " + std::to_string(e.configId) + " of 0.." + std::to_string(e.maxConfigId) + " (" + how + ")";
}

int64_t Sparse24Gemm::rows() const { return mState->n; }
int64_t Sparse24Gemm::columns() const { return mState->k; }
ActType Sparse24Gemm::type() const { return mState->type; }
Sparse24Layout Sparse24Gemm::layout() const { return mState->options.layout; }

size_t Sparse24Gemm::deviceBytes() const {
    std::lock_guard<std::mutex> lock(mState->mutex);
    return mState->compressedBytes;
}

void setSparse24SearchLog(std::function<void(const std::string&)> log) {
    std::lock_guard<std::mutex> lock(searchLogMutex());
    searchLogFunction() = std::move(log);
}

size_t sparse24LivePlanCount() {
    std::lock_guard<std::mutex> lock(sharedPlansMutex());
    size_t live = 0;
    for (const auto& [key, plan] : sharedPlans()) live += plan.expired() ? 0 : 1;
    return live;
}

size_t sparse24ScratchBytes() {
    std::lock_guard<std::mutex> lock(scratchMutex());
    return scratchTotal();
}

} // namespace cwb::kernels
