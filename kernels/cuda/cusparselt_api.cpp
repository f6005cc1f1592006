// Loads cuSPARSELt with dlopen: CWB_CUSPARSELT (a file, or a folder holding libcusparseLt.so.0 or lib/...), then
// the loader path. Never throws; what failed is kept as the reason.
#include "cusparselt_api.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace cwb::kernels::lt {

namespace {

bool isDirectory(const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> candidates() {
    std::vector<std::string> list;
    if (const char* env = std::getenv("CWB_CUSPARSELT"); env && *env) {
        const std::string p = env;
        if (isDirectory(p)) {
            list.push_back(p + "/libcusparseLt.so.0");
            list.push_back(p + "/lib/libcusparseLt.so.0");
        } else {
            list.push_back(p);
        }
    }
    list.push_back("libcusparseLt.so.0");
    return list;
}

template <typename F>
bool bind(void* lib, const char* name, F& fn, std::string& missing) {
    fn = reinterpret_cast<F>(dlsym(lib, name));
    if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
    return fn != nullptr;
}

struct Loaded {
    std::unique_ptr<Api> api;
    std::string reason;
};

Loaded load() {
    Loaded out;
    void* lib = nullptr;
    std::string tried, path;
    for (const auto& candidate : candidates()) {
        dlerror();
        lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            path = candidate;
            break;
        }
        const char* err = dlerror();
        tried += (tried.empty() ? "" : "; ") + std::string(err ? err : candidate + ": not loadable");
    }
    if (!lib) {
        out.reason = "cuSPARSELt not found (set CWB_CUSPARSELT to libcusparseLt.so.0 or add its folder to "
                     "LD_LIBRARY_PATH): " + tried;
        return out;
    }
    auto a = std::make_unique<Api>();
    a->path = path;
    std::string missing;
    bind(lib, "cusparseLtInit", a->init, missing);
    bind(lib, "cusparseLtGetVersion", a->getVersion, missing);
    bind(lib, "cusparseLtDenseDescriptorInit", a->denseDescriptorInit, missing);
    bind(lib, "cusparseLtStructuredDescriptorInit", a->structuredDescriptorInit, missing);
    bind(lib, "cusparseLtMatDescriptorDestroy", a->matDescriptorDestroy, missing);
    bind(lib, "cusparseLtMatmulDescriptorInit", a->matmulDescriptorInit, missing);
    bind(lib, "cusparseLtMatmulAlgSelectionInit", a->algSelectionInit, missing);
    bind(lib, "cusparseLtMatmulAlgSetAttribute", a->algSetAttribute, missing);
    bind(lib, "cusparseLtMatmulAlgGetAttribute", a->algGetAttribute, missing);
    bind(lib, "cusparseLtMatmulPlanInit", a->planInit, missing);
    bind(lib, "cusparseLtMatmulPlanDestroy", a->planDestroy, missing);
    bind(lib, "cusparseLtMatmulGetWorkspace", a->getWorkspace, missing);
    bind(lib, "cusparseLtSpMMACompressedSize2", a->compressedSize2, missing);
    bind(lib, "cusparseLtSpMMACompress2", a->compress2, missing);
    bind(lib, "cusparseLtMatmul", a->matmul, missing);
    std::string optional;
    bind(lib, "cusparseLtGetErrorString", a->errorString, optional);
    if (!missing.empty()) {
        out.reason = "cuSPARSELt at " + path + " lacks " + missing + " (too old?)";
        return out;   // the library stays loaded: unloading it buys nothing
    }
    // The version needs a handle, which needs a CUDA device.
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        out.reason = "cuSPARSELt at " + path + " loaded, but there is no CUDA device";
        return out;
    }
    const Handle* handle = handleForCurrentDevice(*a);
    if (!handle) {
        out.reason = "cusparseLtInit failed for the library at " + path;
        return out;
    }
    int version = 0;
    if (a->getVersion(handle, &version) != kSuccess) version = 0;
    a->version = version;
    const std::string dotted = std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 100) + "." +
                               std::to_string(version % 100);
    if (version < kMinimumVersion) {
        out.reason = "cuSPARSELt " + dotted + " at " + path + " is older than 0.6, whose enumerators this code uses";
        return out;
    }
    out.reason = "cuSPARSELt " + dotted + " from " + path;
    out.api = std::move(a);
    return out;
}

} // namespace

const Api* api(std::string& reason) {
    static const Loaded loaded = load();
    reason = loaded.reason;
    return loaded.api.get();
}

const Handle* handleForCurrentDevice(const Api& a) {
    static std::mutex mutex;
    static std::map<int, std::unique_ptr<Handle>> handles;   // never destroyed: may outlive the CUDA context
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return nullptr;
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = handles[device];
    if (!slot) {
        auto h = std::make_unique<Handle>();
        if (a.init(h.get()) != kSuccess) return nullptr;
        slot = std::move(h);
    }
    return slot.get();
}

std::string statusText(const Api& a, Status s) {
    std::string text = "status " + std::to_string(s);
    if (a.errorString) {
        if (const char* name = a.errorString(s)) text = std::string(name) + " (" + std::to_string(s) + ")";
    }
    return text;
}

} // namespace cwb::kernels::lt
