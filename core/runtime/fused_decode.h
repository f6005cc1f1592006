#pragma once
// The fused decode kernels of kernels/ (decode_ops.h) on LibTorch tensors, for the fixed-shape decode step: each
// call is one or two launches on LibTorch's current stream, so a CUDA graph captures them. Plain C++ (no CUDA
// headers); in a build without the kernels fusedDecodeAvailable() is false and the calls throw cwb::Error.
#include <string>
#include <utility>

#include <ATen/ATen.h>

#include "core/model/arch_spec.h"

namespace cwb {

// True when the kernels can run a decode step on `device` in `dtype`: a build with the kernels, a CUDA device,
// fp16 or bf16 activations.
bool fusedDecodeAvailable(const at::Device& device, at::ScalarType dtype);

// RMSNorm of x [..., dim] (fp16 / bf16, contiguous rows) with an fp32 weight [dim], in one kernel.
at::Tensor fusedRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// sum = x + residual (rounded to their type) and RMSNorm(sum) in one kernel. Returns {sum, normed}.
// fusedAddRmsNormCount(): its calls in this process (tests check which path a decode block took).
std::pair<at::Tensor, at::Tensor> fusedAddRmsNorm(const at::Tensor& x, const at::Tensor& residual,
                                                  const at::Tensor& weight, double eps);

// One decode step's attention: RoPE on q [batch, 1, heads * headDim] and k [batch, 1, kvHeads * headDim] at the
// device position `position` (int64 [1]), the rotated keys and v written to the caches [batch, kvHeads, capacity,
// headDim] at that position, then attention of every query head over the cache up to it. q, k and v may be views
// of one fused GEMM output. ropeTable is the runtime's fp32 [positions, 2, headDim] (ropeTable()). One launch
// (kernels::ropeDecodeAttention), two when the cache is split over the sequence, unless the plan merges the chunks
// inside the launch (in thread-block clusters, the default where they apply: decodeAttentionClusterMerge; or by
// the last block: kernels::decodeAttentionMergeInKernel). The last block's merge keeps counters across launches in
// `workspace`, which the caller owns and keeps, one per layer (the KV cache's); it is made here, zeroed, when undefined
// or too small, so the first (eager) step allocates it, never a captured one (a layer's need is fixed for a cache:
// batch, capacity and heads). fusedAttentionMergedLaunches(): launches in this process that merged inside.
// Returns [batch, 1, heads * headDim].
at::Tensor fusedDecodeAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& ropeTable, RopeStyle style, const at::Tensor& position,
                                at::Tensor& keys, at::Tensor& values, int64_t heads, at::Tensor& workspace);

// Whether split decode attention merges its chunks inside the attention launch (kernels::
// setDecodeAttentionMergeInKernel), process-wide; off unless CWB_ATTENTION_MERGE_IN_KERNEL=1. No-ops (false) in a
// build without the kernels.
void setDecodeAttentionMergeInKernel(bool on);
bool decodeAttentionMergeInKernel();
int64_t fusedAttentionMergedLaunches();
// Whether split decode attention runs each head's chunks as one thread-block cluster that merges them through shared
// memory, in the launch and with no workspace (kernels::setDecodeAttentionClusterMerge; compute capability 9.0+, at
// most kernels::kMaxClusterSplits chunks shorter than 128 keys), process-wide; on unless CWB_ATTENTION_CLUSTER_MERGE=0.
// fusedAttentionClusterLaunches(): launches in this process that merged so; decodeAttentionClustersSupported(): the
// current device runs clusters. No-ops (false, 0) without the kernels.
void setDecodeAttentionClusterMerge(bool on);
bool decodeAttentionClusterMerge();
int64_t fusedAttentionClusterLaunches();
bool decodeAttentionClustersSupported();
// The plan of the latest fusedDecodeAttention launch in this process (shape, chunks, head parts, kernel, merge), in
// words; "" when none has run since the last clearLastFusedAttentionPlan() or in a build without the kernels. For
// reports (`cwb bench` says which plan its decode ran).
std::string lastFusedAttentionPlan();
void clearLastFusedAttentionPlan();

// silu(gate) * up for gate and up [..., width], which may be the two halves of one fused GEMM output.
at::Tensor fusedSiluMul(const at::Tensor& gate, const at::Tensor& up);

// Programmatic dependent launch of the decode kernels and the dense GEMV (kernels/dependent_launch.h), process-wide:
// on unless CWB_PDL=0 is in the environment; tests switch it here. Acts only on compute capability 9.0+ devices,
// and not at all in a build without the kernels. The count is of launches made with it (0 without the kernels).
void setDecodeDependentLaunch(bool on);
bool decodeDependentLaunch();
int64_t decodeDependentLaunchCount();
int64_t fusedAddRmsNormCount();
bool decodeDependentLaunchSupported();   // the current CUDA device is of compute capability 9.0+

} // namespace cwb
