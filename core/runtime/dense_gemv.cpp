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

// The product with an optional RMSNorm of x folded in (norm: nullptr for none); with swiGlu, silu(gate) * up of the
// two halves of the weight's rows.
at::Tensor gemv(const at::Tensor& x, const kernels::GemvRmsNorm* norm, bool swiGlu, const at::Tensor& weight,
                const at::Tensor& bias, const at::Tensor& residual) {
    c10::DeviceGuard guard(x.device());
    const int64_t inputs = weight.size(1), rows = x.numel() / inputs;
    const int64_t outputs = swiGlu ? weight.size(0) / 2 : weight.size(0);
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = outputs;
    at::Tensor xRows = x.reshape({rows, inputs});
    if (xRows.stride(1) != 1) xRows = xRows.contiguous();
    at::Tensor b;
    if (bias.defined()) {
        if (bias.numel() != weight.size(0))
            throw Error("dense GEMV: the bias has " + std::to_string(bias.numel()) + " elements for " +
                        std::to_string(weight.size(0)) + " weight rows");
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
        if (swiGlu)
            kernels::denseGemvSwiGlu(xRows.data_ptr(), norm, weight.data_ptr(), biasData, y.data_ptr(), s, type,
                                     torchCurrentStream());
        else if (norm)
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
    return gemv(x, nullptr, false, weight, bias, residual);
}

namespace {

// The norm's weight as the kernel reads it ([K] in x's type on x's device; a copy when it is not, so callers keep
// one); `what` names the caller in errors.
at::Tensor normWeightFor(const at::Tensor& x, const at::Tensor& normWeight, const char* what) {
    at::Tensor w = normWeight.to(x.device(), x.scalar_type()).contiguous();
    if (w.numel() != x.size(-1))
        throw Error(std::string(what) + ": the norm weight has " + std::to_string(w.numel()) + " elements for rows of " +
                    std::to_string(x.size(-1)));
    return w;
}

} // namespace

at::Tensor denseGemvRmsNormLinear(const at::Tensor& x, const at::Tensor& normWeight, double eps, const at::Tensor& weight,
                                  const at::Tensor& bias) {
    if (!denseGemvApplies(x, weight, kernels::kDenseGemvMaxRows))
        throw Error("dense GEMV with RMSNorm: the input and weight do not fit the kernel (CUDA fp16/bf16, contiguous "
                    "weight, at most " + std::to_string(kernels::kDenseGemvMaxRows) + " rows)");
    const at::Tensor w = normWeightFor(x, normWeight, "dense GEMV with RMSNorm");
    kernels::GemvRmsNorm norm;
    norm.weight = w.data_ptr();
    norm.eps = float(eps);
    return gemv(x, &norm, false, weight, bias, at::Tensor());
}

at::Tensor denseGemvSwiGluLinear(const at::Tensor& x, const at::Tensor& normWeight, double eps,
                                 const at::Tensor& gateUpWeight, const at::Tensor& bias) {
    if (!denseGemvApplies(x, gateUpWeight, kernels::kDenseGemvMaxRows) || gateUpWeight.size(0) % 2 != 0)
        throw Error("dense GEMV with SwiGLU: the input and weight do not fit the kernel (CUDA fp16/bf16, contiguous "
                    "weight of an even number of rows, at most " + std::to_string(kernels::kDenseGemvMaxRows) + " rows of x)");
    at::Tensor w;
    kernels::GemvRmsNorm norm;
    if (normWeight.defined()) {
        w = normWeightFor(x, normWeight, "dense GEMV with SwiGLU");
        norm.weight = w.data_ptr();
        norm.eps = float(eps);
    }
    return gemv(x, normWeight.defined() ? &norm : nullptr, true, gateUpWeight, bias, at::Tensor());
}

int64_t denseGemvRmsNormLaunchCount() { return kernels::denseGemvRmsNormLaunches(); }

int64_t denseGemvSwiGluLaunchCount() { return kernels::denseGemvSwiGluLaunches(); }

#else   // no kernels in this build

int64_t denseGemvRmsNormLaunchCount() { return 0; }

int64_t denseGemvSwiGluLaunchCount() { return 0; }

bool denseGemvApplies(const at::Tensor&, const at::Tensor&, int64_t) { return false; }

at::Tensor denseGemvLinear(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) {
    throw Error("dense GEMV: this build has no CUDA kernels");
}

at::Tensor denseGemvRmsNormLinear(const at::Tensor&, const at::Tensor&, double, const at::Tensor&, const at::Tensor&) {
    throw Error("dense GEMV with RMSNorm: this build has no CUDA kernels");
}

at::Tensor denseGemvSwiGluLinear(const at::Tensor&, const at::Tensor&, double, const at::Tensor&, const at::Tensor&) {
    throw Error("dense GEMV with SwiGLU: this build has no CUDA kernels");
}

#endif

} // namespace cwb
