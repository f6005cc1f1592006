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

Sparse24Rows packSparse24Rows(const at::Tensor& weight, const std::string& what) {
    if (!weight.defined() || weight.dim() != 2) throw Error(what + ": packed 2:4 rows need a matrix");
    if (weight.scalar_type() != at::kHalf && weight.scalar_type() != at::kBFloat16)
        throw Error(what + ": packed 2:4 rows need an fp16 or bf16 weight");
    const int64_t rows = weight.size(0), cols = weight.size(1);
    if (cols % 16 != 0)
        throw Error(what + ": " + std::to_string(cols) + " columns, not a multiple of 16 (packed 2:4 rows)");
    c10::DeviceGuard guard(weight.device());
    const at::TensorOptions longs = weight.options().dtype(at::kLong);
    Sparse24Rows out;
    out.values = at::empty({rows, cols / 2}, weight.options());
    out.meta = at::empty({rows, cols / 16}, weight.options().dtype(at::kShort));
    const at::Tensor laterColumnsLower = 3 - at::arange(4, longs);        // ties in topk: lower columns first
    const at::Tensor nibbleShifts = at::tensor({1, 16, 256, 4096}, longs);   // group j of a word at bits 4j..4j+3
    const int64_t slice = std::max<int64_t>(1, (int64_t(1) << 22) / cols);  // rows per step: bounded scratch
    for (int64_t first = 0; first < rows; first += slice) {
        const int64_t n = std::min(slice, rows - first);
        const at::Tensor groups = weight.narrow(0, first, n).reshape({n, cols / 4, 4});
        const at::Tensor nonZero = groups.ne(0);
        const at::Tensor crowded = nonZero.sum(-1).gt(2);
        if (crowded.any().item<bool>()) {
            const at::Tensor where = crowded.nonzero()[0].cpu();
            const int64_t row = first + where[0].item<int64_t>(), group = where[1].item<int64_t>();
            throw Error(what + ": row " + std::to_string(row) + ", columns " + std::to_string(4 * group) + ".." +
                        std::to_string(4 * group + 3) + ": more than two non-zeros (not 2:4)");
        }
        // The two kept columns of each group: its non-zeros, then its first zeros, in column order.
        const at::Tensor chosen = std::get<1>((nonZero.to(at::kLong) * 4 + laterColumnsLower).topk(2, -1));
        const at::Tensor low = std::get<0>(chosen.min(-1, true)), high = std::get<0>(chosen.max(-1, true));
        const at::Tensor positions = at::cat({low, high}, -1);
        out.values.narrow(0, first, n).copy_(groups.gather(-1, positions).reshape({n, cols / 2}));
        at::Tensor words = ((low + high * 4).reshape({n, cols / 16, 4}) * nibbleShifts).sum(-1);   // 0..65535
        words = words - words.ge(32768).to(at::kLong) * 65536;                                   // as int16 bits
        out.meta.narrow(0, first, n).copy_(words);
    }
    return out;
}

at::Tensor unpackSparse24Rows(const Sparse24Rows& packed) {
    const int64_t rows = packed.rows(), cols = packed.cols();
    c10::DeviceGuard guard(packed.values.device());
#ifdef CWB_HAVE_KERNELS
    if (packed.values.is_cuda()) {   // one kernel instead of a dozen tensor operations on [N, K/4] int64 scratch
        at::Tensor dense = at::empty({rows, cols}, packed.values.options());
        try {
            kernels::sparse24UnpackRows({packed.values.data_ptr(), static_cast<const uint16_t*>(packed.meta.data_ptr())},
                                        dense.data_ptr(), rows, cols,
                                        packed.values.scalar_type() == at::kHalf ? kernels::ActType::Float16
                                                                                 : kernels::ActType::BFloat16,
                                        torchCurrentStream());
        } catch (const kernels::KernelError& e) {
            throw Error(std::string("2:4 unpack: ") + e.what());
        }
        return dense;
    }
#endif
    const at::TensorOptions longs = packed.meta.options().dtype(at::kLong);
    at::Tensor words = packed.meta.to(at::kLong);
    words = words + words.lt(0).to(at::kLong) * 65536;
    const at::Tensor nibbles = words.unsqueeze(-1).div(at::tensor({1, 16, 256, 4096}, longs), "floor").remainder(16)
                                   .reshape({rows, cols / 4, 1});
    const at::Tensor positions = at::cat({nibbles.remainder(4), nibbles.div(4, "floor")}, -1);
    return at::zeros({rows, cols / 4, 4}, packed.values.options())
        .scatter_(-1, positions, packed.values.reshape({rows, cols / 4, 2}))
        .reshape({rows, cols});
}

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
// The weight a GEMV reads: dense, or packed 2:4 rows.
struct GemvWeight {
    const at::Tensor* dense = nullptr;
    const Sparse24Rows* packed = nullptr;
    int64_t rows() const { return dense ? dense->size(0) : packed->rows(); }
    int64_t cols() const { return dense ? dense->size(1) : packed->cols(); }
};

at::Tensor gemv(const at::Tensor& x, const kernels::GemvRmsNorm* norm, bool swiGlu, const GemvWeight& weight,
                const at::Tensor& bias, const at::Tensor& residual) {
    c10::DeviceGuard guard(x.device());
    const int64_t inputs = weight.cols(), rows = x.numel() / inputs;
    const int64_t outputs = swiGlu ? weight.rows() / 2 : weight.rows();
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = outputs;
    at::Tensor xRows = x.reshape({rows, inputs});
    if (xRows.stride(1) != 1) xRows = xRows.contiguous();
    at::Tensor b;
    if (bias.defined()) {
        if (bias.numel() != weight.rows())
            throw Error("dense GEMV: the bias has " + std::to_string(bias.numel()) + " elements for " +
                        std::to_string(weight.rows()) + " weight rows");
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
        if (weight.packed) {
            const kernels::Sparse24RowsWeight w{weight.packed->values.data_ptr(),
                                                static_cast<const uint16_t*>(weight.packed->meta.data_ptr())};
            if (swiGlu)
                kernels::sparse24GemvSwiGlu(xRows.data_ptr(), norm, w, biasData, y.data_ptr(), s, type, torchCurrentStream());
            else if (norm)
                kernels::sparse24GemvRmsNorm(xRows.data_ptr(), *norm, w, biasData, residualData, y.data_ptr(), s, type,
                                             torchCurrentStream());
            else
                kernels::sparse24Gemv(xRows.data_ptr(), w, biasData, residualData, y.data_ptr(), s, type,
                                      torchCurrentStream());
        } else if (swiGlu) {
            kernels::denseGemvSwiGlu(xRows.data_ptr(), norm, weight.dense->data_ptr(), biasData, y.data_ptr(), s, type,
                                     torchCurrentStream());
        } else if (norm) {
            kernels::denseGemvRmsNorm(xRows.data_ptr(), *norm, weight.dense->data_ptr(), biasData, residualData,
                                      y.data_ptr(), s, type, torchCurrentStream());
        } else {
            kernels::denseGemv(xRows.data_ptr(), weight.dense->data_ptr(), biasData, residualData, y.data_ptr(), s, type,
                               torchCurrentStream());
        }
    } catch (const kernels::KernelError& e) {
        throw Error(std::string(weight.packed ? "2:4 GEMV: " : "dense GEMV: ") + e.what());
    }
    return y.view(shape);
}

} // namespace

at::Tensor denseGemvLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& residual) {
    if (!denseGemvApplies(x, weight, kernels::kDenseGemvMaxRows))
        throw Error("dense GEMV: the input and weight do not fit the kernel (CUDA fp16/bf16, contiguous weight, at most " +
                    std::to_string(kernels::kDenseGemvMaxRows) + " rows)");
    return gemv(x, nullptr, false, GemvWeight{&weight, nullptr}, bias, residual);
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
    return gemv(x, &norm, false, GemvWeight{&weight, nullptr}, bias, at::Tensor());
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
    return gemv(x, normWeight.defined() ? &norm : nullptr, true, GemvWeight{&gateUpWeight, nullptr}, bias, at::Tensor());
}

bool sparse24GemvApplies(const at::Tensor& x, const Sparse24Rows& weight, int64_t maxRows) {
    if (!x.defined() || !weight.values.defined() || !x.is_cuda() || x.device() != weight.values.device()) return false;
    // The layout the kernels read: contiguous [N, K/2] values and [N, K/16] int16 words on the same device.
    const at::Tensor& v = weight.values;
    const at::Tensor& m = weight.meta;
    if (v.dim() != 2 || !v.is_contiguous() || !m.defined() || m.scalar_type() != at::kShort || m.device() != v.device() ||
        m.dim() != 2 || !m.is_contiguous() || m.size(0) != v.size(0) || m.size(1) * 8 != v.size(1))
        return false;
    if (x.scalar_type() != weight.values.scalar_type() || x.requires_grad() || x.dim() < 1 ||
        x.size(-1) != weight.cols() || x.numel() == 0)
        return false;
    return x.numel() / x.size(-1) <= std::min(maxRows, kernels::kDenseGemvMaxRows);
}

namespace {

void requireSparse24Gemv(const at::Tensor& x, const Sparse24Rows& weight, const char* what) {
    if (!sparse24GemvApplies(x, weight, kernels::kDenseGemvMaxRows))
        throw Error(std::string(what) + ": the input does not fit the packed 2:4 weight (contiguous values [N, K/2] and "
                    "int16 positions [N, K/16] on x's CUDA device, x in the values' type with K columns, at most " +
                    std::to_string(kernels::kDenseGemvMaxRows) + " rows)");
}

} // namespace

at::Tensor sparse24GemvLinear(const at::Tensor& x, const Sparse24Rows& weight, const at::Tensor& bias,
                              const at::Tensor& residual) {
    requireSparse24Gemv(x, weight, "2:4 GEMV");
    return gemv(x, nullptr, false, GemvWeight{nullptr, &weight}, bias, residual);
}

at::Tensor sparse24GemvRmsNormLinear(const at::Tensor& x, const at::Tensor& normWeight, double eps,
                                     const Sparse24Rows& weight, const at::Tensor& bias) {
    requireSparse24Gemv(x, weight, "2:4 GEMV with RMSNorm");
    const at::Tensor w = normWeightFor(x, normWeight, "2:4 GEMV with RMSNorm");
    kernels::GemvRmsNorm norm;
    norm.weight = w.data_ptr();
    norm.eps = float(eps);
    return gemv(x, &norm, false, GemvWeight{nullptr, &weight}, bias, at::Tensor());
}

at::Tensor sparse24GemvSwiGluLinear(const at::Tensor& x, const at::Tensor& normWeight, double eps,
                                    const Sparse24Rows& gateUpWeight, const at::Tensor& bias) {
    requireSparse24Gemv(x, gateUpWeight, "2:4 GEMV with SwiGLU");
    if (gateUpWeight.rows() % 2 != 0) throw Error("2:4 GEMV with SwiGLU: an odd number of weight rows");
    at::Tensor w;
    kernels::GemvRmsNorm norm;
    if (normWeight.defined()) {
        w = normWeightFor(x, normWeight, "2:4 GEMV with SwiGLU");
        norm.weight = w.data_ptr();
        norm.eps = float(eps);
    }
    return gemv(x, normWeight.defined() ? &norm : nullptr, true, GemvWeight{nullptr, &gateUpWeight}, bias, at::Tensor());
}

int64_t sparse24GemvLaunchCount() { return kernels::sparse24GemvLaunches(); }

int64_t denseGemvRmsNormLaunchCount() { return kernels::denseGemvRmsNormLaunches(); }

int64_t denseGemvSwiGluLaunchCount() { return kernels::denseGemvSwiGluLaunches(); }

#else   // no kernels in this build

bool sparse24GemvApplies(const at::Tensor&, const Sparse24Rows&, int64_t) { return false; }

at::Tensor sparse24GemvLinear(const at::Tensor&, const Sparse24Rows&, const at::Tensor&, const at::Tensor&) {
    throw Error("2:4 GEMV: this build has no CUDA kernels");
}

at::Tensor sparse24GemvRmsNormLinear(const at::Tensor&, const at::Tensor&, double, const Sparse24Rows&, const at::Tensor&) {
    throw Error("2:4 GEMV with RMSNorm: this build has no CUDA kernels");
}

at::Tensor sparse24GemvSwiGluLinear(const at::Tensor&, const at::Tensor&, double, const Sparse24Rows&, const at::Tensor&) {
    throw Error("2:4 GEMV with SwiGLU: this build has no CUDA kernels");
}

int64_t sparse24GemvLaunchCount() { return 0; }

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
