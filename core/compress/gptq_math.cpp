#include "core/compress/gptq_math.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include <c10/core/DeviceGuard.h>

#include "core/util/error.h"

#ifdef CWB_HAVE_KERNELS
#include "cwb/kernels/env_setting.h"
#include "cwb/kernels/gptq_block.h"
#include "core/util/torch_stream.h"
#endif

namespace cwb::quant {

namespace {

constexpr int kDampRetries = 3;

// float64 on the CPU; float32 on CUDA, where float64 throughput is a fraction and fp32 is what the reference uses.
at::ScalarType workType(const at::Device& device) { return device.is_cuda() ? at::kFloat : at::kDouble; }

// Upper Cholesky factor of (H + λI)⁻¹, raising λ ×10 while a factorisation fails (λ = 0 starts at 1%).
at::Tensor inverseCholeskyUpper(const at::Tensor& h, double dampPercent, double& damping) {
    const double meanDiag = h.diagonal().mean().item<double>();
    damping = dampPercent * meanDiag;
    for (int attempt = 0; attempt <= kDampRetries; ++attempt) {
        at::Tensor damped = h.clone();
        damped.diagonal().add_(damping);
        at::Tensor lower, info;
        std::tie(lower, info) = at::linalg_cholesky_ex(damped, /*upper=*/false);
        if (info.item<int64_t>() == 0) {
            at::Tensor upper, info2;
            std::tie(upper, info2) = at::linalg_cholesky_ex(at::cholesky_inverse(lower), /*upper=*/true);
            if (info2.item<int64_t>() == 0 && upper.isfinite().all().item<bool>()) return upper;
        }
        damping = damping > 0 ? damping * 10 : 0.01 * meanDiag;
    }
    throw Error("gptq: the Hessian is not positive definite even with damping " + std::to_string(damping / 10) +
                " (" + std::to_string(kDampRetries) + " retries); check the calibration inputs");
}

#ifdef CWB_HAVE_KERNELS
// The column loop as one kernel launch per block (kernels/gptq_block.h) plus one GEMM for the later columns, instead of
// ~15 LibTorch operations per column. CWB_GPTQ_KERNEL=0 in the environment keeps the LibTorch loop (for comparison).
bool useBlockKernel(const at::Device& device, const GptqOptions& options) {
    if (!device.is_cuda() || options.blockSize > kernels::kGptqMaxBlock) return false;
    return env::envSwitch("CWB_GPTQ_KERNEL", true);
}

// W, hinv: float32 CUDA in processing order. columnGroup: int32 group of each processed column for static groups,
// undefined for dynamic ones. keptZeros: bool in processing order, or undefined. Fills levels, scales, zeros (dynamic)
// and returns ½ Σ err².
double columnLoopKernel(at::Tensor& W, const at::Tensor& hinvUpper, const QuantSpec& spec, int64_t width,
                        int64_t blockSize, const at::Tensor& columnGroup, const at::Tensor& keptZeros, at::Tensor& scales,
                        at::Tensor& zeros, at::Tensor& levels) {
    const c10::DeviceGuard guard(W.device());
    const int64_t rows = W.size(0), cols = W.size(1);
    const at::Tensor hinv = hinvUpper.contiguous();
    at::Tensor errors = at::empty({rows, cols}, W.options());
    const at::Tensor keep = keptZeros.defined() ? keptZeros.to(at::kByte).contiguous() : at::Tensor();
    kernels::GptqBlockArgs a;
    a.weight = W.data_ptr<float>();
    a.hinvUpper = hinv.data_ptr<float>();
    a.rows = rows;
    a.cols = cols;
    a.bits = spec.bits;
    a.symmetric = spec.symmetric;
    a.groupWidth = width;
    a.groups = scales.size(1);
    a.scales = scales.data_ptr<float>();
    a.zeros = zeros.data_ptr<int32_t>();
    a.columnGroup = columnGroup.defined() ? columnGroup.data_ptr<int32_t>() : nullptr;
    a.levels = levels.data_ptr<int32_t>();
    a.keepZero = keep.defined() ? keep.data_ptr<uint8_t>() : nullptr;
    a.errors = errors.data_ptr<float>();
    a.errorStride = cols;
    const kernels::Stream stream = torchCurrentStream();
    for (int64_t i1 = 0; i1 < cols; i1 += blockSize) {
        const int64_t i2 = std::min(i1 + blockSize, cols);
        a.begin = i1;
        a.end = i2;
        a.errorOffset = i1;
        try {
            kernels::gptqBlock(a, stream);
        } catch (const kernels::KernelError& e) {
            throw Error(std::string("gptq: ") + e.what());
        }
        if (i2 < cols) W.slice(1, i2).addmm_(errors.slice(1, i1, i2), hinv.slice(0, i1, i2).slice(1, i2), 1, -1);
    }
    return errors.square().sum().item<double>() * 0.5;
}
#endif

} // namespace

HessianAccumulator::HessianAccumulator(int64_t columns, int64_t blockColumns) : mColumns(columns) {
    if (columns <= 0) throw Error("gptq: a Hessian needs at least one column, got " + std::to_string(columns));
    if (blockColumns <= 0) throw Error("gptq: Hessian blocks need at least one column");
    const int64_t blocks = std::max<int64_t>(1, columns / blockColumns);
    for (int64_t b = 0; b <= blocks; ++b) mBounds.push_back(columns * b / blocks);
}

void HessianAccumulator::add(const at::Tensor& inputs) {
    if (!inputs.defined() || inputs.dim() < 1 || inputs.size(-1) != mColumns)
        throw Error("gptq: calibration inputs must end in " + std::to_string(mColumns) + " features");
    if (!mHessian.defined())   // follow the data: accumulate where it lives
        mHessian = at::zeros({mColumns, mColumns}, at::TensorOptions().device(inputs.device()).dtype(workType(inputs.device())));
    const at::Tensor x = inputs.reshape({-1, mColumns}).to(mHessian.device(), mHessian.scalar_type());
    const int64_t n = x.size(0);
    if (n == 0) return;
    // Running average: rescale what is there, then add the new rows with the new 2/n weight.
    mHessian.mul_(double(mSamples) / double(mSamples + n));
    mSamples += n;
    const at::Tensor scaled = x.mul(std::sqrt(2.0 / double(mSamples)));
    // H is symmetric: only the blocks on and below the diagonal are accumulated (hessian() mirrors the rest), which
    // saves 25% of the products at 4096 columns and 40% at 11008. Blocks of at least 2048 columns keep each
    // product large enough to fill the GPU.
    const std::vector<int64_t>& bounds = mBounds;
    for (size_t i = 0; i + 1 < bounds.size(); ++i) {
        const at::Tensor rowsOf = scaled.narrow(1, bounds[i], bounds[i + 1] - bounds[i]);
        for (size_t j = 0; j <= i; ++j) {
            const at::Tensor colsOf = scaled.narrow(1, bounds[j], bounds[j + 1] - bounds[j]);
            mHessian.narrow(0, bounds[i], bounds[i + 1] - bounds[i]).narrow(1, bounds[j], bounds[j + 1] - bounds[j])
                .addmm_(rowsOf.t(), colsOf);
        }
    }
}

at::Tensor HessianAccumulator::hessian() const {
    if (!mHessian.defined()) return at::zeros({mColumns, mColumns}, at::kDouble);
    at::Tensor h = mHessian.clone();
    const std::vector<int64_t>& bounds = mBounds;
    for (size_t i = 0; i + 1 < bounds.size(); ++i)
        for (size_t j = 0; j < i; ++j) {
            const int64_t ri = bounds[i + 1] - bounds[i], rj = bounds[j + 1] - bounds[j];
            h.narrow(0, bounds[j], rj).narrow(1, bounds[i], ri).copy_(h.narrow(0, bounds[i], ri).narrow(1, bounds[j], rj).t());
        }
    return h;
}

GptqResult gptqQuantize(const at::Tensor& w, const at::Tensor& hessian, const GptqOptions& options) {
    const QuantSpec& spec = options.quant;
    validateSpec(spec);
    validateWeight(w, "gptq");
    const int64_t rows = w.size(0), cols = w.size(1);
    if (!hessian.defined() || hessian.dim() != 2 || hessian.size(0) != cols || hessian.size(1) != cols)
        throw Error("gptq: the Hessian must be [" + std::to_string(cols) + ", " + std::to_string(cols) +
                    "] for a weight with " + std::to_string(cols) + " input columns");
    if (options.blockSize <= 0) throw Error("gptq: block size must be positive");
    if (!(options.dampPercent >= 0) || !std::isfinite(options.dampPercent))
        throw Error("gptq: damping must be a non-negative number");
    const at::Device device = hessian.device();
    const at::ScalarType work = workType(device);
    const at::TensorOptions on = at::TensorOptions().device(device);
    at::Tensor h = hessian.to(work).clone();
    if (!h.isfinite().all().item<bool>()) throw Error("gptq: the Hessian has non-finite entries");
    if ((h.diagonal() < 0).any().item<bool>()) throw Error("gptq: the Hessian has a negative diagonal entry");

    // float32 values first, so RTN and GPTQ see the same
    at::Tensor W = w.to(at::kFloat).to(device, work).contiguous();
    const at::Tensor dead = h.diagonal() == 0;
    h.diagonal().masked_fill_(dead, 1.0);
    W.masked_fill_(dead.unsqueeze(0), 0.0);
    at::Tensor keptZeros;   // in processing order below
    if (options.keepZeros) keptZeros = W == 0;

    const int64_t groups = groupCount(cols, spec.groupSize);
    const int64_t width = groupWidth(cols, spec.groupSize);
    const bool dynamicGroups = spec.groupSize > 0 && !options.staticGroups;
    at::Tensor scales = at::empty({rows, groups}, on.dtype(at::kFloat));
    at::Tensor zeros = at::empty({rows, groups}, on.dtype(at::kInt));
    at::Tensor scale, zero;
    if (!dynamicGroups) {  // parameters fixed up front from the (dead-zeroed) original weight
        const at::Tensor wf = W.to(at::kFloat);
        if (spec.groupSize == 0) {
            groupParams(wf.reshape({1, -1}), spec, scale, zero);
            scales.fill_(scale.item<float>());
            zeros.fill_(zero.item<int>());
        } else {
            for (int64_t g = 0; g < groups; ++g) {
                groupParams(wf.slice(1, g * width, std::min((g + 1) * width, cols)), spec, scale, zero);
                scales.select(1, g).copy_(scale);
                zeros.select(1, g).copy_(zero);
            }
        }
    }

    at::Tensor perm = at::arange(cols, on.dtype(at::kLong));
    if (options.actOrder) perm = std::get<1>(at::sort(h.diagonal(), /*stable=*/true, 0, /*descending=*/true));
    const at::Tensor permCpu = perm.to(at::kCPU).contiguous();
    const std::vector<int64_t> order(permCpu.data_ptr<int64_t>(), permCpu.data_ptr<int64_t>() + cols);
    W = W.index_select(1, perm).contiguous();
    h = h.index_select(0, perm).index_select(1, perm);
    if (keptZeros.defined()) keptZeros = keptZeros.index_select(1, perm).contiguous();

    GptqResult result;
    const at::Tensor hinv = inverseCholeskyUpper(h, options.dampPercent, result.damping);
    // The pivots, read once: a per-column read would wait for the device 100 000s of times on a 7B model.
    const at::Tensor pivotsCpu = hinv.diagonal().to(at::kCPU, at::kDouble).contiguous();
    const double* pivots = pivotsCpu.data_ptr<double>();
    at::Tensor levels = at::empty({rows, cols}, on.dtype(at::kInt));  // in processing order
    at::Tensor loss = at::zeros({}, on.dtype(work));
#ifdef CWB_HAVE_KERNELS
    const bool blockKernel = useBlockKernel(device, options);
    if (blockKernel) {
        at::Tensor columnGroup;
        if (!dynamicGroups) {
            std::vector<int32_t> group(static_cast<size_t>(cols), 0);
            if (spec.groupSize > 0)
                for (int64_t c = 0; c < cols; ++c) group[size_t(c)] = int32_t(order[size_t(c)] / width);
            columnGroup = at::tensor(group, at::kInt).to(device);
        }
        loss.fill_(columnLoopKernel(W, hinv, spec, width, options.blockSize, columnGroup, keptZeros, scales, zeros, levels));
    }
#else
    const bool blockKernel = false;
#endif
    for (int64_t i1 = 0; !blockKernel && i1 < cols; i1 += options.blockSize) {
        const int64_t i2 = std::min(i1 + options.blockSize, cols);
        at::Tensor block = W.slice(1, i1, i2).clone();
        at::Tensor blockErr = at::zeros({rows, i2 - i1}, on.dtype(work));
        const at::Tensor hinvBlock = hinv.slice(0, i1, i2).slice(1, i1, i2);
        at::Tensor colScale, colZero, colZeroFloat;
        int64_t currentGroup = -1;
        for (int64_t i = 0; i < i2 - i1; ++i) {
            const int64_t c = i1 + i;
            int64_t g = 0;
            if (dynamicGroups) {
                g = c / width;
                if (c % width == 0) {  // new group: parameters from the weights as updated so far
                    const int64_t end = std::min(c + width, cols);
                    at::Tensor slab = block.slice(1, i, std::min(end, i2) - i1);
                    if (end > i2) {
                        const at::Tensor beyond = W.slice(1, i2, end).addmm(
                            blockErr, hinv.slice(0, i1, i2).slice(1, i2, end), 1, -1);
                        slab = at::cat({slab, beyond}, 1);
                    }
                    groupParams(slab.to(at::kFloat), spec, scale, zero);
                    scales.select(1, g).copy_(scale);
                    zeros.select(1, g).copy_(zero);
                    currentGroup = -1;
                }
            } else if (spec.groupSize > 0) {
                g = order[size_t(c)] / width;  // static groups belong to original columns
            }
            if (g != currentGroup) {  // slices and casts once per group, not per column
                colScale = scales.select(1, g);
                colZero = zeros.select(1, g);
                colZeroFloat = colZero.to(at::kFloat);
                currentGroup = g;
            }
            const at::Tensor column = block.select(1, i);
            at::Tensor level = quantizeLevels(column, colScale, colZero, spec.bits);
            if (keptZeros.defined()) level = at::where(keptZeros.select(1, c), colZero.to(level.scalar_type()), level);
            levels.select(1, c).copy_(level);
            const at::Tensor q = (level.to(at::kFloat) - colZeroFloat).mul(colScale).to(work);
            const at::Tensor err = (column - q).div(pivots[c]);
            block.slice(1, i).addr_(err, hinvBlock[i].slice(0, i), 1, -1);
            blockErr.select(1, i).copy_(err);
        }
        // Σ (w - q)² / (2 · [H⁻¹]cc²) = ½ Σ err², one reduction per block.
        loss.add_(blockErr.square().sum(), 0.5);
        if (i2 < cols) W.slice(1, i2).addmm_(blockErr, hinv.slice(0, i1, i2).slice(1, i2), 1, -1);
    }

    QuantizedWeight& q = result.weight;
    q.spec = spec;
    q.rows = rows;
    q.cols = cols;
    q.scales = scales.to(at::kCPU);
    q.zeros = zeros.to(at::kCPU);
    // Unpermuted and packed where the levels are (on CUDA: 8x fewer bytes to copy back, no CPU pass over them).
    q.packed = packLevels(levels.index_select(1, at::argsort(perm)), spec.bits).to(at::kCPU);
    if (dynamicGroups && options.actOrder) {  // groups were formed in processing order
        std::vector<int32_t> index(static_cast<size_t>(cols));
        for (int64_t p = 0; p < cols; ++p) index[size_t(order[size_t(p)])] = int32_t(p / width);
        q.groupIndex = at::tensor(index, at::kInt);
    } else {
        q.groupIndex = defaultGroupIndex(cols, spec.groupSize);
    }
    result.squaredError = loss.item<double>();
    result.permutation = permCpu;
    return result;
}

} // namespace cwb::quant
