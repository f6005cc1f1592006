#include "core/compress/sparsegpt_math.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include <c10/core/DeviceGuard.h>

#include "core/util/error.h"

#ifdef CWB_HAVE_KERNELS
#include "cwb/kernels/env_setting.h"
#include "cwb/kernels/sparsegpt_block.h"
#include "core/util/torch_stream.h"
#endif

namespace cwb::prune {

namespace {

void checkOptions(const at::Tensor& w, const at::Tensor& hessian, const SparseGptOptions& o) {
    if (!w.defined() || w.dim() != 2 || w.numel() == 0) throw Error("SparseGPT: weight must be a non-empty [out, in] matrix");
    const int64_t in = w.size(1);
    if (!hessian.defined() || hessian.dim() != 2 || hessian.size(0) != in || hessian.size(1) != in)
        throw Error("SparseGPT: the Hessian must be [" + std::to_string(in) + ", " + std::to_string(in) + "]");
    if (o.m < 0 || (o.m == 0 && o.n != 0)) throw Error("SparseGPT: n:m needs m > 0");
    if (o.m > 0) {
        if (o.n < 1 || o.n >= o.m)
            throw Error("SparseGPT: n:m needs 1 <= n < m, got " + std::to_string(o.n) + ":" + std::to_string(o.m));
        if (in % o.m != 0)
            throw Error("SparseGPT: " + std::to_string(in) + " columns are not a multiple of m = " + std::to_string(o.m));
    } else if (!(o.sparsity >= 0.0 && o.sparsity < 1.0)) {
        throw Error("SparseGPT: sparsity must be in [0, 1), got " + std::to_string(o.sparsity));
    }
    if (o.blockSize < 1) throw Error("SparseGPT: block size must be at least 1");
    if (!(o.dampPercent >= 0.0) || !std::isfinite(o.dampPercent)) throw Error("SparseGPT: dampening must be >= 0");
    if (!at::isfinite(hessian).all().item<bool>() || !at::isfinite(w).all().item<bool>())
        throw Error("SparseGPT: weight or Hessian holds NaN or infinity");
}

// Keep mask that prunes the k lowest scores of each row (stable: earlier position pruned first on ties).
at::Tensor keepAllButLowest(const at::Tensor& scores, int64_t k) {
    at::Tensor keep = at::ones(scores.sizes(), scores.options().dtype(at::kBool));
    if (k > 0) keep.scatter_(-1, std::get<1>(at::sort(scores, true, -1, false)).narrow(-1, 0, k), false);
    return keep;
}

#ifdef CWB_HAVE_KERNELS
// The column loop as one kernel per block (kernels/sparsegpt_block.h) and one GEMM for the later columns, instead of
// ~10 LibTorch operations per column; CWB_GPTQ_KERNEL=0 in the environment keeps the LibTorch loop.
bool useBlockKernel(const at::Device& device, const SparseGptOptions& o, int64_t block) {
    if (!device.is_cuda() || block > kernels::kSparseGptMaxBlock || o.m > 16) return false;
    return env::envSwitch("CWB_GPTQ_KERNEL", true);
}

// W (float32 CUDA) pruned and updated in place; fills mask (uint8) and returns ½ Σ err².
double columnLoopKernel(at::Tensor& W, const at::Tensor& upper, const SparseGptOptions& o, int64_t block, at::Tensor& mask) {
    const c10::DeviceGuard guard(W.device());
    const int64_t rows = W.size(0), cols = W.size(1);
    const at::Tensor U = upper.contiguous();
    at::Tensor errors = at::empty({rows, cols}, W.options());
    kernels::SparseGptBlockArgs a;
    a.weight = W.data_ptr<float>();
    a.hinvUpper = U.data_ptr<float>();
    a.rows = rows;
    a.cols = cols;
    a.n = o.n;
    a.m = o.m;
    a.mask = mask.data_ptr<uint8_t>();
    a.errors = errors.data_ptr<float>();
    a.errorStride = cols;
    const kernels::Stream stream = torchCurrentStream();
    for (int64_t i1 = 0; i1 < cols; i1 += block) {
        const int64_t count = std::min(block, cols - i1);
        a.begin = i1;
        a.end = i1 + count;
        a.errorOffset = i1;
        a.pruneCount = o.m == 0 ? std::llround(o.sparsity * double(count)) : 0;
        try {
            kernels::sparseGptBlock(a, stream);
        } catch (const kernels::KernelError& e) {
            throw Error(std::string("SparseGPT: ") + e.what());
        }
        if (i1 + count < cols)
            W.narrow(1, i1 + count, cols - i1 - count).addmm_(errors.narrow(1, i1, count),
                                                             U.narrow(0, i1, count).narrow(1, i1 + count, cols - i1 - count), 1, -1);
    }
    return errors.square().sum().item<double>() * 0.5;
}
#endif

} // namespace

SparseGptResult sparseGpt(const at::Tensor& w, const at::Tensor& hessian, const SparseGptOptions& o) {
    checkOptions(w, hessian, o);
    const int64_t rows = w.size(0), cols = w.size(1);
    // The work follows the Hessian: double on the CPU, float32 on CUDA (the reference's choice there; fp64 runs at
    // a fraction of the speed). docs/performance.md compares the two.
    const at::Device device = hessian.device();
    const at::ScalarType work = device.is_cuda() ? at::kFloat : at::kDouble;
    at::Tensor W = w.detach().to(at::kFloat).to(device, work).clone();
    at::Tensor H = hessian.detach().to(work).clone();

    // A column no input ever reached carries no information: zero it and give H a unit pivot there.
    at::Tensor dead = H.diagonal() == 0;
    H.diagonal().masked_fill_(dead, 1.0);
    W.masked_fill_(dead.unsqueeze(0), 0.0);

    H.diagonal().add_(o.dampPercent * H.diagonal().mean().item<double>());
    auto [lower, info] = at::linalg_cholesky_ex(H, /*upper=*/false, /*check_errors=*/false);
    if (info.item<int64_t>() != 0) throw Error("SparseGPT: the Hessian is not positive definite even after dampening");
    // U with H⁻¹ = UᵀU: row q of U is the q-th row of the inverse of H restricted to columns q.. (the
    // columns still free when q is processed) divided by the square root of its diagonal.
    at::Tensor U = at::linalg_cholesky(at::cholesky_inverse(lower), /*upper=*/true);

    int64_t block = o.blockSize;
    if (o.m > 0) block = (block + o.m - 1) / o.m * o.m;   // keep n:m groups inside one block
    at::Tensor mask = at::zeros({rows, cols}, W.options().dtype(at::kBool));
    at::Tensor loss = at::zeros({}, W.options());
#ifdef CWB_HAVE_KERNELS
    const bool blockKernel = useBlockKernel(device, o, block);
    if (blockKernel) {
        at::Tensor kept = at::empty({rows, cols}, W.options().dtype(at::kByte));
        loss.fill_(columnLoopKernel(W, U, o, block, kept));
        mask = kept.to(at::kBool);
    }
#else
    const bool blockKernel = false;
#endif
    for (int64_t i1 = 0; !blockKernel && i1 < cols; i1 += block) {
        const int64_t count = std::min(block, cols - i1);
        at::Tensor W1 = W.narrow(1, i1, count).clone();
        at::Tensor U1 = U.narrow(0, i1, count).narrow(1, i1, count);
        at::Tensor d2 = U1.diagonal().square().unsqueeze(0);
        at::Tensor Q1 = at::zeros_like(W1), Err1 = at::zeros_like(W1);
        at::Tensor keep1 = at::ones({rows, count}, W.options().dtype(at::kBool));
        if (o.m == 0)
            keep1 = keepAllButLowest(W1.square() / d2, std::llround(o.sparsity * double(count)));
        for (int64_t i = 0; i < count; ++i) {
            if (o.m > 0 && i % o.m == 0) {
                // n:m groups are scored with the weights as updated so far, as SparseGPT does.
                at::Tensor s = W1.narrow(1, i, o.m).square() / d2.narrow(1, i, o.m);
                keep1.narrow(1, i, o.m).copy_(keepAllButLowest(s, o.m - o.n));
            }
            at::Tensor col = W1.select(1, i);
            at::Tensor q = col.masked_fill(keep1.select(1, i).logical_not(), 0.0);
            at::Tensor err = (col - q) / U1[i][i];
            W1.narrow(1, i, count - i).sub_(at::outer(err, U1[i].narrow(0, i, count - i)));
            Q1.select(1, i).copy_(q);
            Err1.select(1, i).copy_(err);
        }
        loss.add_(Err1.square().sum(), 0.5);   // one reduction per block, no wait per column
        W.narrow(1, i1, count).copy_(Q1);
        mask.narrow(1, i1, count).copy_(keep1);
        if (i1 + count < cols)
            W.narrow(1, i1 + count, cols - i1 - count).sub_(Err1.matmul(U.narrow(0, i1, count).narrow(1, i1 + count, cols - i1 - count)));
    }
    SparseGptResult r;
    r.weight = W.masked_fill(mask.logical_not(), 0.0).to(at::kCPU, at::kFloat);   // exact zeros, no -0 from rounding
    r.mask = mask.to(at::kCPU);
    r.squaredError = loss.item<double>();
    return r;
}

} // namespace cwb::prune
