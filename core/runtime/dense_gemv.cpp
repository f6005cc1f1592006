#include "core/runtime/dense_gemv.h"

#include <algorithm>
#include <string>
#include <vector>

#include <c10/core/DeviceGuard.h>

#include "core/util/error.h"

#ifdef CWB_HAVE_KERNELS
#include "cwb/kernels/dense_gemv.h"
#include "core/util/torch_stream.h"
#endif

namespace cwb {

#ifdef CWB_HAVE_KERNELS

bool denseGemvApplies(const at::Tensor& x, const at::Tensor& weight, int64_t maxRows) {
    if (!x.defined() || !weight.defined() || !x.is_cuda() || x.device() != weight.device()) return false;
    if (x.scalar_type() != weight.scalar_type() || (x.scalar_type() != at::kHalf && x.scalar_type() != at::kBFloat16))
        return false;
    if (weight.dim() != 2 || !weight.is_contiguous() || x.dim() < 1 || x.size(-1) != weight.size(1) || x.numel() == 0)
        return false;
    if (x.requires_grad() || weight.requires_grad()) return false;
    const int64_t rows = x.numel() / x.size(-1);
    return rows <= std::min(maxRows, kernels::kDenseGemvMaxRows);
}

namespace {

// The product with an optional RMSNorm of x folded in (norm: nullptr for none).
at::Tensor gemv(const at::Tensor& x, const kernels::GemvRmsNorm* norm, const at::Tensor& weight, const at::Tensor& bias,
                const at::Tensor& residual) {
    c10::DeviceGuard guard(x.device());
    const int64_t inputs = weight.size(1), outputs = weight.size(0), rows = x.numel() / inputs;
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = outputs;
    at::Tensor xRows = x.reshape({rows, inputs});
    if (xRows.stride(1) != 1) xRows = xRows.contiguous();
    at::Tensor b;
    if (bias.defined()) {
        if (bias.numel() != outputs) throw Error("dense GEMV: the bias has " + std::to_string(bias.numel()) +
                                                 " elements for " + std::to_string(outputs) + " outputs");
        b = bias.to(x.device(), at::kFloat).contiguous();
    }
    at::Tensor r;
    if (residual.defined()) {
        if (residual.numel() != rows * outputs) throw Error("dense GEMV: the residual does not match the output shape");
        r = residual.to(x.scalar_type()).reshape({rows, outputs});
        if (r.stride(1) != 1) r = r.contiguous();
    }
    at::Tensor y = at::empty({rows, outputs}, x.options().memory_format(at::MemoryFormat::Contiguous));
    kernels::DenseGemvShape s;
    s.rows = rows;
    s.outputs = outputs;
    s.inputs = inputs;
    s.xStride = xRows.stride(0);
    s.yStride = outputs;
    s.residualStride = r.defined() ? r.stride(0) : 0;
    const kernels::ActType type = x.scalar_type() == at::kHalf ? kernels::ActType::Float16 : kernels::ActType::BFloat16;
    const float* biasData = b.defined() ? b.data_ptr<float>() : nullptr;
    const void* residualData = r.defined() ? r.data_ptr() : nullptr;
    try {
        if (norm)
            kernels::denseGemvRmsNorm(xRows.data_ptr(), *norm, weight.data_ptr(), biasData, residualData, y.data_ptr(), s,
                                      type, torchCurrentStream());
        else
            kernels::denseGemv(xRows.data_ptr(), weight.data_ptr(), biasData, residualData, y.data_ptr(), s, type,
                               torchCurrentStream());
    } catch (const kernels::KernelError& e) {
        throw Error(std::string("dense GEMV: ") + e.what());
    }
    return y.view(shape);
}

} // namespace

at::Tensor denseGemvLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& residual) {
    if (!denseGemvApplies(x, weight, kernels::kDenseGemvMaxRows))
        throw Error("dense GEMV: the input and weight do not fit the kernel (CUDA fp16/bf16, contiguous weight, at most " +
                    std::to_string(kernels::kDenseGemvMaxRows) + " rows)");
    return gemv(x, nullptr, weight, bias, residual);
}

bool denseGemvRmsNormApplies(const at::Tensor& x, const at::Tensor& weight, int64_t maxRows) {
    return denseGemvApplies(x, weight, maxRows) && kernels::denseGemvRmsNormFits(x.numel() / x.size(-1), x.size(-1));
}

at::Tensor denseGemvRmsNormLinear(const at::Tensor& x, const at::Tensor& normWeight, double eps, const at::Tensor& weight,
                                  const at::Tensor& bias) {
    if (!denseGemvRmsNormApplies(x, weight, kernels::kDenseGemvMaxRows))
        throw Error("dense GEMV with RMSNorm: the input and weight do not fit the kernel (CUDA fp16/bf16, contiguous "
                    "weight, at most " + std::to_string(kernels::kDenseGemvMaxRows) + " rows, rows that fit " +
                    std::to_string(kernels::kDenseGemvRmsNormSharedBytes) + " bytes of shared memory)");
    at::Tensor w = normWeight.to(x.device(), at::kFloat).contiguous();
    if (w.numel() != x.size(-1))
        throw Error("dense GEMV with RMSNorm: the norm weight has " + std::to_string(w.numel()) + " elements for rows of " +
                    std::to_string(x.size(-1)));
    kernels::GemvRmsNorm norm;
    norm.weight = w.data_ptr<float>();
    norm.eps = float(eps);
    return gemv(x, &norm, weight, bias, at::Tensor());
}

int64_t denseGemvRmsNormLaunchCount() { return kernels::denseGemvRmsNormLaunches(); }

#else   // no kernels in this build

int64_t denseGemvRmsNormLaunchCount() { return 0; }

bool denseGemvApplies(const at::Tensor&, const at::Tensor&, int64_t) { return false; }

at::Tensor denseGemvLinear(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) {
    throw Error("dense GEMV: this build has no CUDA kernels");
}

bool denseGemvRmsNormApplies(const at::Tensor&, const at::Tensor&, int64_t) { return false; }

at::Tensor denseGemvRmsNormLinear(const at::Tensor&, const at::Tensor&, double, const at::Tensor&, const at::Tensor&) {
    throw Error("dense GEMV with RMSNorm: this build has no CUDA kernels");
}

#endif

} // namespace cwb
