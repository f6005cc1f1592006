// 2:4 sparse GEMM through cuSPARSELt (loaded by cusparselt_api.cpp). Layout, all column-major as cuSPARSELt sees
// it: the weight W [n, k] row-major is A = [k, n] column-major used transposed (the structured operand, its 2:4
// groups run along k, contiguous in memory); X [m, k] row-major is B = [k, m]; Y [m, n] row-major is D = [n, m].
#include <cuda_runtime.h>
#include <library_types.h>

#include <climits>
#include <map>
#include <mutex>
#include <vector>

#include "cuda_check.h"
#include "cusparselt_api.h"
#include "cwb/kernels/sparse24_gemm.h"

namespace cwb::kernels {

namespace {

constexpr int64_t kShapeMultiple = 16;    // n and k; m is padded up to it
constexpr uint32_t kAlignmentBytes = 16;  // what the descriptors promise about every pointer
constexpr size_t kSearchWorkspaceBytes = size_t(256) << 20;

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

// One plan per padded m: descriptors of B and D, the matmul descriptor, the algorithm and its workspace.
struct PlanEntry {
    lt::MatDescriptor b, d;
    lt::MatmulDescriptor matmul;
    lt::AlgSelection alg;
    lt::Plan plan;
    bool descriptorsMade = false, planMade = false, searched = false;
    std::string note = "default kernel";
    void* workspace = nullptr;
    size_t workspaceBytes = 0;
};

struct Sparse24Gemm::State {
    const lt::Api* api = nullptr;
    const lt::Handle* handle = nullptr;
    int64_t n = 0, k = 0;
    ActType type = ActType::Float16;
    bool autotune = true;
    int device = 0;
    std::unique_ptr<lt::MatDescriptor> sparse = std::make_unique<lt::MatDescriptor>();
    bool sparseMade = false;
    void* compressed = nullptr;
    size_t compressedBytes = 0;
    std::mutex mutex;
    std::map<int64_t, std::unique_ptr<PlanEntry>> plans;
    void* xStage = nullptr;   // padded / aligned copies of x and y when m is not a multiple or a pointer is off
    void* yStage = nullptr;
    size_t xStageBytes = 0, yStageBytes = 0;

    int valueType() const { return type == ActType::Float16 ? CUDA_R_16F : CUDA_R_16BF; }

    // Descriptors, algorithm (cuSPARSELt's default) and plan of one m, with the plan's workspace.
    void makePlan(PlanEntry& e, int64_t mp) {
        const std::string shape = std::to_string(mp) + "x" + std::to_string(n) + "x" + std::to_string(k);
        if (!e.descriptorsMade) {
            checkLt(*api, api->denseDescriptorInit(handle, &e.b, k, mp, k, kAlignmentBytes, valueType(), lt::kOrderColumn),
                    "the input descriptor (" + shape + ")");
            checkLt(*api, api->denseDescriptorInit(handle, &e.d, n, mp, n, kAlignmentBytes, valueType(), lt::kOrderColumn),
                    "the output descriptor (" + shape + ")");
            e.descriptorsMade = true;
            checkLt(*api, api->matmulDescriptorInit(handle, &e.matmul, lt::kOpTranspose, lt::kOpNonTranspose, sparse.get(),
                                                    &e.b, &e.d, &e.d, lt::kCompute32F),
                    "the matmul descriptor (" + shape + ")");
        }
        if (e.planMade) {
            api->planDestroy(&e.plan);
            e.planMade = false;
        }
        checkLt(*api, api->algSelectionInit(handle, &e.alg, &e.matmul, lt::kMatmulAlgDefault),
                "the algorithm selection (" + shape + ")");
        checkLt(*api, api->planInit(handle, &e.plan, &e.matmul, &e.alg), "the plan (" + shape + ")");
        e.planMade = true;
        growWorkspace(e);
    }

    void growWorkspace(PlanEntry& e) {
        size_t bytes = 0;
        checkLt(*api, api->getWorkspace(handle, &e.plan, &bytes), "the workspace query");
        if (bytes <= e.workspaceBytes) return;
        CWB_CUDA_CHECK(cudaDeviceSynchronize());   // an earlier run may still use the old one
        cudaFree(e.workspace);
        e.workspace = nullptr;
        e.workspaceBytes = 0;
        e.workspace = deviceAlloc(bytes);
        e.workspaceBytes = bytes;
    }

    PlanEntry& planFor(int64_t mp) {
        auto found = plans.find(mp);
        if (found != plans.end()) return *found->second;
        auto& e = *plans.emplace(mp, std::make_unique<PlanEntry>()).first->second;
        makePlan(e, mp);
        return e;
    }

    // cusparseLtMatmulSearch on this m (it runs the product several times into d). A failed search leaves the
    // default kernel, remade from scratch, and says why in the plan's note.
    void search(PlanEntry& e, int64_t mp, const void* b, void* d, cudaStream_t s) {
        e.searched = true;
        const float alpha = 1.0f, beta = 0.0f;
        void* streams[1] = {s};
        // Candidates such as split-K may need more workspace than the default kernel: lend a generous scratch.
        void* scratch = deviceAlloc(kSearchWorkspaceBytes);
        lt::Status status =
            api->matmulSearch(handle, &e.plan, &alpha, compressed, b, &beta, d, d, scratch, streams, 1);
        cudaError_t synced = cudaStreamSynchronize(s);
        cudaFree(scratch);
        CWB_CUDA_CHECK(synced);
        if (status == lt::kSuccess) {
            growWorkspace(e);
            e.note = "autotuned";
            return;
        }
        cudaGetLastError();   // clear a non-sticky error the failed search may have left
        makePlan(e, mp);
        e.note = "autotune failed (" + lt::statusText(*api, status) + "): default kernel";
    }

    void* stage(void*& buffer, size_t& have, size_t bytes) {
        if (bytes > have) {
            CWB_CUDA_CHECK(cudaDeviceSynchronize());   // an earlier run may still read the old buffer
            cudaFree(buffer);
            buffer = nullptr;
            have = 0;
            buffer = deviceAlloc(bytes);
            have = bytes;
        }
        return buffer;
    }

    void release() {
        for (auto& [m, e] : plans) {
            if (e->planMade) api->planDestroy(&e->plan);
            if (e->descriptorsMade) {
                api->matDescriptorDestroy(&e->b);
                api->matDescriptorDestroy(&e->d);
            }
            cudaFree(e->workspace);
        }
        plans.clear();
        if (sparseMade) api->matDescriptorDestroy(sparse.get());
        cudaFree(compressed);
        cudaFree(xStage);
        cudaFree(yStage);
    }
};

Sparse24Gemm::Sparse24Gemm(const void* w, ActType type, int64_t n, int64_t k, Stream stream, bool autotune)
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
    st.autotune = autotune;
    const TwoFourCheck check = checkTwoFour(w, n, k, stream);
    if (!check.ok)
        throw KernelError("Sparse24Gemm: the " + std::to_string(n) + "x" + std::to_string(k) +
                          " weight is not 2:4 sparse: " + check.describe());
    const cudaStream_t s = detail::toStream(stream);
    try {
        checkLt(*st.api, st.api->structuredDescriptorInit(st.handle, st.sparse.get(), k, n, k, kAlignmentBytes,
                                                          st.valueType(), lt::kOrderColumn, lt::kSparsity50Percent),
                "the structured weight descriptor");
        st.sparseMade = true;
        size_t compressBufferBytes = 0;
        checkLt(*st.api, st.api->compressedSize2(st.handle, st.sparse.get(), &st.compressedBytes, &compressBufferBytes),
                "cusparseLtSpMMACompressedSize2");
        st.compressed = deviceAlloc(st.compressedBytes);
        void* buffer = deviceAlloc(compressBufferBytes);
        lt::Status compressStatus =
            st.api->compress2(st.handle, st.sparse.get(), 1, lt::kOpTranspose, w, st.compressed, buffer, s);
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
    if (m <= 0) throw KernelError("Sparse24Gemm::run: m must be positive, got " + std::to_string(m));
    int device = 0;
    CWB_CUDA_CHECK(cudaGetDevice(&device));
    if (device != st.device)
        throw KernelError("Sparse24Gemm::run: the weight lives on device " + std::to_string(st.device) +
                          ", the current device is " + std::to_string(device));
    std::lock_guard<std::mutex> lock(st.mutex);
    const int64_t mp = (m + kShapeMultiple - 1) / kShapeMultiple * kShapeMultiple;
    const bool stageX = mp != m || !aligned(x), stageY = mp != m || !aligned(y);
    const size_t elem = 2, xBytes = size_t(m * st.k) * elem, yBytes = size_t(m * st.n) * elem;
    const cudaStream_t s = detail::toStream(stream);
    const void* b = x;
    void* d = y;
    if (stageX) {
        void* buf = st.stage(st.xStage, st.xStageBytes, size_t(mp * st.k) * elem);
        CWB_CUDA_CHECK(cudaMemcpyAsync(buf, x, xBytes, cudaMemcpyDeviceToDevice, s));
        if (mp != m) CWB_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(buf) + xBytes, 0, size_t(mp * st.k) * elem - xBytes, s));
        b = buf;
    }
    if (stageY) d = st.stage(st.yStage, st.yStageBytes, size_t(mp * st.n) * elem);
    PlanEntry& e = st.planFor(mp);
    const float alpha = 1.0f, beta = 0.0f;
    void* streams[1] = {s};
    if (st.autotune && !e.searched) st.search(e, mp, b, d, s);
    checkLt(*st.api, st.api->matmul(st.handle, &e.plan, &alpha, st.compressed, b, &beta, d, d, e.workspace, streams, 1),
            "cusparseLtMatmul (" + std::to_string(m) + "x" + std::to_string(st.n) + "x" + std::to_string(st.k) + ")");
    if (stageY) CWB_CUDA_CHECK(cudaMemcpyAsync(y, d, yBytes, cudaMemcpyDeviceToDevice, s));
}

std::string Sparse24Gemm::kernelNote(int64_t m) const {
    std::lock_guard<std::mutex> lock(mState->mutex);
    auto found = mState->plans.find((m + kShapeMultiple - 1) / kShapeMultiple * kShapeMultiple);
    return found == mState->plans.end() ? "" : found->second->note;
}

int64_t Sparse24Gemm::rows() const { return mState->n; }
int64_t Sparse24Gemm::columns() const { return mState->k; }
ActType Sparse24Gemm::type() const { return mState->type; }

size_t Sparse24Gemm::deviceBytes() const {
    std::lock_guard<std::mutex> lock(mState->mutex);
    size_t bytes = mState->compressedBytes + mState->xStageBytes + mState->yStageBytes;
    for (const auto& [m, e] : mState->plans) bytes += e->workspaceBytes;
    return bytes;
}

} // namespace cwb::kernels
