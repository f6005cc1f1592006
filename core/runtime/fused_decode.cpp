#include "core/runtime/fused_decode.h"

#include <atomic>
#include <cmath>
#include <mutex>
#include <string>

#include <c10/core/DeviceGuard.h>

#include "core/util/error.h"

#ifdef CWB_HAVE_KERNELS
#include "cwb/kernels/decode_ops.h"
#include "cwb/kernels/dependent_launch.h"
#include "core/util/torch_stream.h"
#endif

namespace cwb {

#ifdef CWB_HAVE_KERNELS

namespace {

std::atomic<int64_t> addNormCalls{0}, mergedLaunches{0}, clusterLaunches{0};

// The latest attention launch's shape and plan, described only when asked (a launch only copies two small structs).
struct RecordedPlan {
    std::mutex mutex;
    bool set = false;
    kernels::DecodeAttentionShape shape;
    kernels::DecodeAttentionPlan plan;
};
RecordedPlan& recordedPlan() {
    static RecordedPlan recorded;
    return recorded;
}

kernels::ActType actType(const at::Tensor& t, const char* what) {
    if (!t.is_cuda()) throw Error(std::string("fused decode: ") + what + " is not on a CUDA device");
    if (t.scalar_type() == at::kHalf) return kernels::ActType::Float16;
    if (t.scalar_type() == at::kBFloat16) return kernels::ActType::BFloat16;
    throw Error(std::string("fused decode: ") + what + " must be fp16 or bf16, not " + c10::toString(t.scalar_type()));
}

// [rows, width] view with unit stride along width, copied only when the rows cannot be addressed with one stride.
at::Tensor rowsOf(const at::Tensor& t, int64_t rows, int64_t width) {
    at::Tensor r = t.reshape({rows, width});
    return r.stride(1) == 1 ? r : r.contiguous();
}

template <typename F>
auto launching(const char* what, F&& f) {
    try {
        return f();
    } catch (const kernels::KernelError& e) {
        throw Error(std::string("fused decode ") + what + ": " + e.what());
    }
}

at::Tensor normed(const at::Tensor& x, const at::Tensor* residual, at::Tensor* sum, const at::Tensor& weight, double eps) {
    const kernels::ActType type = actType(x, "the normalised input");
    c10::DeviceGuard guard(x.device());
    const int64_t dim = x.size(-1), rows = x.numel() / dim;
    at::Tensor input = x.contiguous();
    at::Tensor add = residual ? residual->to(x.scalar_type()).contiguous() : at::Tensor();
    at::Tensor w = weight.to(x.device(), at::kFloat).contiguous();
    if (w.numel() != dim) throw Error("fused decode: the norm weight has " + std::to_string(w.numel()) + " elements for rows of " + std::to_string(dim));
    at::Tensor y = at::empty_like(input);
    if (sum) *sum = at::empty_like(input);
    launching("RMSNorm", [&] {
        kernels::rmsNorm(input.data_ptr(), add.defined() ? add.data_ptr() : nullptr, sum ? sum->data_ptr() : nullptr,
                         w.data_ptr<float>(), y.data_ptr(), rows, dim, float(eps), type, torchCurrentStream());
        return 0;
    });
    return y;
}

} // namespace

bool fusedDecodeAvailable(const at::Device& device, at::ScalarType dtype) {
    return device.is_cuda() && (dtype == at::kHalf || dtype == at::kBFloat16);
}

at::Tensor fusedRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
    return normed(x, nullptr, nullptr, weight, eps);
}

std::pair<at::Tensor, at::Tensor> fusedAddRmsNorm(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                                                  double eps) {
    if (!x.sizes().equals(residual.sizes())) throw Error("fused decode: residual and input differ in shape");
    ++addNormCalls;
    at::Tensor sum;
    at::Tensor y = normed(x, &residual, &sum, weight, eps);
    return {sum, y};
}

at::Tensor fusedDecodeAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& ropeTable,
                                RopeStyle style, const at::Tensor& position, at::Tensor& keys, at::Tensor& values,
                                int64_t heads, at::Tensor& workspace) {
    const kernels::ActType type = actType(q, "the query");
    if (k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type() || keys.scalar_type() != q.scalar_type() ||
        values.scalar_type() != q.scalar_type())
        throw Error("fused decode: queries, keys, values and the caches must share one type");
    if (keys.dim() != 4 || !keys.is_contiguous() || !values.is_contiguous() || !keys.sizes().equals(values.sizes()))
        throw Error("fused decode: the caches must be contiguous [batch, kv heads, capacity, head dim]");
    if (position.scalar_type() != at::kLong || position.numel() != 1 || position.device() != q.device())
        throw Error("fused decode: the position must be one int64 on the query's device");
    if (ropeTable.scalar_type() != at::kFloat || ropeTable.dim() != 3 || !ropeTable.is_contiguous() ||
        ropeTable.size(2) != keys.size(3))
        throw Error("fused decode: the RoPE table must be contiguous fp32 [positions, 2, head dim]");
    c10::DeviceGuard guard(q.device());
    kernels::DecodeAttentionShape s;
    s.batch = keys.size(0);
    s.kvHeads = keys.size(1);
    s.capacity = keys.size(2);
    s.headDim = keys.size(3);
    s.heads = heads;
    at::Tensor qRows = rowsOf(q, s.batch, heads * s.headDim);
    at::Tensor kRows = rowsOf(k, s.batch, s.kvHeads * s.headDim);
    at::Tensor vRows = rowsOf(v, s.batch, s.kvHeads * s.headDim);
    at::Tensor out = at::empty({s.batch, 1, heads * s.headDim}, q.options());
    const kernels::RopeLayout layout =
        style == RopeStyle::AdjacentPairs ? kernels::RopeLayout::AdjacentPairs : kernels::RopeLayout::HalfSplit;
    launching("attention", [&] {   // RoPE, the cache write and attention in one launch (+ the merge of the splits)
        const kernels::DecodeAttentionPlan plan = kernels::planDecodeAttention(s, kernels::deviceMultiprocessors());
        {
            RecordedPlan& recorded = recordedPlan();
            std::lock_guard<std::mutex> lock(recorded.mutex);
            recorded.set = true;
            recorded.shape = s;
            recorded.plan = plan;
        }
        const size_t bytes = kernels::decodeAttentionWorkspaceBytes(s, plan);
        const int64_t words = int64_t(bytes / sizeof(float)) + 1;
        at::Tensor scratch;
        if (plan.mergeInCluster) {   // no workspace
            ++clusterLaunches;
        } else if (plan.mergeInKernel) {   // counters that must start at zero and persist: the caller's buffer
            if (!workspace.defined() || workspace.numel() < words || workspace.device() != q.device())
                workspace = at::zeros({words}, q.options().dtype(at::kFloat));
            scratch = workspace;
            ++mergedLaunches;
        } else {
            scratch = at::empty({words}, q.options().dtype(at::kFloat));
        }
        kernels::ropeDecodeAttention(qRows.data_ptr(), qRows.stride(0), kRows.data_ptr(), kRows.stride(0), vRows.data_ptr(),
                                     vRows.stride(0), ropeTable.data_ptr<float>(), ropeTable.size(0), layout,
                                     position.data_ptr<int64_t>(), keys.data_ptr(), values.data_ptr(), out.data_ptr(), s,
                                     float(1.0 / std::sqrt(double(s.headDim))), plan,
                                     scratch.defined() ? scratch.data_ptr<float>() : nullptr, bytes,
                                     type, torchCurrentStream());
        return 0;
    });
    return out;
}

at::Tensor fusedSiluMul(const at::Tensor& gate, const at::Tensor& up) {
    const kernels::ActType type = actType(gate, "the gate");
    if (!gate.sizes().equals(up.sizes()) || up.scalar_type() != gate.scalar_type())
        throw Error("fused decode: gate and up differ in shape or type");
    c10::DeviceGuard guard(gate.device());
    const int64_t width = gate.size(-1), rows = gate.numel() / width;
    at::Tensor g = rowsOf(gate, rows, width), u = rowsOf(up, rows, width);
    at::Tensor out = at::empty(gate.sizes(), gate.options().memory_format(at::MemoryFormat::Contiguous));
    launching("SiLU * up", [&] {
        kernels::siluMul(g.data_ptr(), g.stride(0), u.data_ptr(), u.stride(0), out.data_ptr(), rows, width, type,
                         torchCurrentStream());
        return 0;
    });
    return out;
}

void setDecodeAttentionMergeInKernel(bool on) { kernels::setDecodeAttentionMergeInKernel(on); }
bool decodeAttentionMergeInKernel() { return kernels::decodeAttentionMergeInKernel(); }
int64_t fusedAttentionMergedLaunches() { return mergedLaunches.load(); }
void setDecodeAttentionClusterMerge(bool on) { kernels::setDecodeAttentionClusterMerge(on); }
bool decodeAttentionClusterMerge() { return kernels::decodeAttentionClusterMerge(); }
int64_t fusedAttentionClusterLaunches() { return clusterLaunches.load(); }
bool decodeAttentionClustersSupported() { return kernels::deviceRunsClusters(); }
std::string lastFusedAttentionPlan() {
    RecordedPlan& recorded = recordedPlan();
    std::lock_guard<std::mutex> lock(recorded.mutex);
    return recorded.set ? kernels::describeDecodeAttentionPlan(recorded.shape, recorded.plan) : std::string();
}
void clearLastFusedAttentionPlan() {
    RecordedPlan& recorded = recordedPlan();
    std::lock_guard<std::mutex> lock(recorded.mutex);
    recorded.set = false;
}
void setDecodeDependentLaunch(bool on) { kernels::setProgrammaticDependentLaunch(on); }
bool decodeDependentLaunch() { return kernels::programmaticDependentLaunch(); }
int64_t decodeDependentLaunchCount() { return kernels::programmaticDependentLaunches(); }
int64_t fusedAddRmsNormCount() { return addNormCalls.load(); }
bool decodeDependentLaunchSupported() { return kernels::programmaticDependentLaunchSupported(); }

#else   // no kernels in this build

bool fusedDecodeAvailable(const at::Device&, at::ScalarType) { return false; }
void setDecodeAttentionMergeInKernel(bool) {}
bool decodeAttentionMergeInKernel() { return false; }
int64_t fusedAttentionMergedLaunches() { return 0; }
void setDecodeAttentionClusterMerge(bool) {}
bool decodeAttentionClusterMerge() { return false; }
int64_t fusedAttentionClusterLaunches() { return 0; }
bool decodeAttentionClustersSupported() { return false; }
std::string lastFusedAttentionPlan() { return std::string(); }
void clearLastFusedAttentionPlan() {}
void setDecodeDependentLaunch(bool) {}
bool decodeDependentLaunch() { return false; }
int64_t decodeDependentLaunchCount() { return 0; }
int64_t fusedAddRmsNormCount() { return 0; }
bool decodeDependentLaunchSupported() { return false; }

namespace {
[[noreturn]] void notBuilt() { throw Error("fused decode: this build has no CUDA kernels"); }
} // namespace

at::Tensor fusedRmsNorm(const at::Tensor&, const at::Tensor&, double) { notBuilt(); }
std::pair<at::Tensor, at::Tensor> fusedAddRmsNorm(const at::Tensor&, const at::Tensor&, const at::Tensor&, double) { notBuilt(); }
at::Tensor fusedDecodeAttention(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, RopeStyle,
                                const at::Tensor&, at::Tensor&, at::Tensor&, int64_t, at::Tensor&) {
    notBuilt();
}
at::Tensor fusedSiluMul(const at::Tensor&, const at::Tensor&) { notBuilt(); }

#endif

} // namespace cwb
