// One SparseGPT column block on the GPU (sparsegpt_block.h): one warp per row, lane l holding the block's columns
// l, l + 32, l + 64, l + 96. Ranks are counted against every score of the group (ties: the earlier column), so the
// kept set is the CPU reference's; the kept flags travel as ballots, so every lane knows them.
#include <string>

#include "cuda_check.h"
#include "cwb/kernels/sparsegpt_block.h"

namespace cwb::kernels {

namespace {

constexpr int kRegs = int(kSparseGptMaxBlock / 32);
constexpr int kWarpsPerBlock = 8;
constexpr unsigned kFullMask = 0xffffffffu;

// Value of block column t (any lane's register), read by every lane.
__device__ float columnValue(const float (&v)[kRegs], int t) {
    float x = 0.0f;
#pragma unroll
    for (int k = 0; k < kRegs; ++k) {
        const float y = __shfl_sync(kFullMask, v[k], t % 32);
        if (k == t / 32) x = y;
    }
    return x;
}

__device__ float score(float w, float d2) { return __fdiv_rn(__fmul_rn(w, w), d2); }

__global__ void __launch_bounds__(kWarpsPerBlock * 32) sparseGptBlockKernel(SparseGptBlockArgs a) {
    const int lane = int(threadIdx.x % 32);
    const int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    if (r >= a.rows) return;
    const int count = int(a.end - a.begin);
    float* row = a.weight + r * a.cols;
    const float* u = a.hinvUpper;
    float v[kRegs], d2[kRegs];
#pragma unroll
    for (int k = 0; k < kRegs; ++k) {
        const int j = lane + 32 * k;
        v[k] = j < count ? row[a.begin + j] : 0.0f;
        const float d = j < count ? u[(a.begin + j) * a.cols + a.begin + j] : 1.0f;
        d2[k] = __fmul_rn(d, d);
    }
    unsigned pruned[kRegs] = {};  // bit l of word k: block column 32k + l is pruned
    if (a.m == 0) {
        float s[kRegs];
#pragma unroll
        for (int k = 0; k < kRegs; ++k) s[k] = score(v[k], d2[k]);
        int rank[kRegs] = {};
#pragma unroll
        for (int k2 = 0; k2 < kRegs; ++k2)
            for (int l = 0; l < 32; ++l) {
                const int i = 32 * k2 + l;
                const float other = __shfl_sync(kFullMask, s[k2], l);
                if (i >= count) continue;
#pragma unroll
                for (int k = 0; k < kRegs; ++k) {
                    const int j = lane + 32 * k;
                    rank[k] += other < s[k] || (other == s[k] && i < j);
                }
            }
#pragma unroll
        for (int k = 0; k < kRegs; ++k)
            pruned[k] = __ballot_sync(kFullMask, lane + 32 * k < count && rank[k] < a.pruneCount);
    }
#pragma unroll
    for (int k = 0; k < kRegs; ++k) {
        for (int l = 0; l < 32; ++l) {
            const int i = 32 * k + l;
            if (i >= count) break;
            if (a.m > 0 && i % a.m == 0) {  // every lane scores the group alike and sets its flags
                float s[16];
                for (int t = 0; t < a.m; ++t) {
                    const int col = i + t;
                    const float w = columnValue(v, col);
                    const float d = u[(a.begin + col) * a.cols + a.begin + col];
                    s[t] = score(w, __fmul_rn(d, d));
                }
                for (int t = 0; t < a.m; ++t) {
                    int rank = 0;
                    for (int o = 0; o < a.m; ++o) rank += s[o] < s[t] || (s[o] == s[t] && o < t);
                    const int col = i + t;
                    const unsigned bit = 1u << (col % 32);
#pragma unroll
                    for (int kk = 0; kk < kRegs; ++kk)
                        if (kk == col / 32) pruned[kk] = rank < a.m - a.n ? (pruned[kk] | bit) : (pruned[kk] & ~bit);
                }
            }
            const int64_t c = a.begin + i;
            const float x = __shfl_sync(kFullMask, v[k], l);
            const bool cut = (pruned[k] >> l) & 1u;
            const float q = cut ? 0.0f : x;
            const float e = __fdiv_rn(__fsub_rn(x, q), u[c * a.cols + c]);
            if (lane == 0) {
                row[c] = q;
                a.mask[r * a.cols + c] = cut ? 0 : 1;
                a.errors[r * a.errorStride + a.errorOffset + i] = e;
            }
            const float* uRow = u + c * a.cols + a.begin;
#pragma unroll
            for (int kk = 0; kk < kRegs; ++kk) {
                const int j = lane + 32 * kk;
                if (j > i && j < count) v[kk] = fmaf(-e, uRow[j], v[kk]);
            }
        }
    }
}

} // namespace

void sparseGptBlock(const SparseGptBlockArgs& args, Stream stream) {
    checkSparseGptBlockArgs(args, "sparseGptBlock");
    const unsigned blocks = unsigned((args.rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
    sparseGptBlockKernel<<<blocks, kWarpsPerBlock * 32, 0, detail::toStream(stream)>>>(args);
    CWB_CUDA_CHECK_LAUNCH("sparseGptBlock");
}

} // namespace cwb::kernels
