#include "core/compress/awq_math.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/util/error.h"

namespace cwb::quant {

AwqResult awqSearch(const at::Tensor& weights, const at::Tensor& inputs, const AwqOptions& options) {
    validateSpec(options.quant);
    validateWeight(weights, "awq");
    if (options.grid < 1) throw Error("awq: the grid needs at least one candidate, got " + std::to_string(options.grid));
    if (!inputs.defined() || inputs.dim() != 2 || inputs.size(0) == 0 || inputs.size(1) != weights.size(1))
        throw Error("awq: calibration inputs must be [n, " + std::to_string(weights.size(1)) + "] with n > 0");
    if (!at::isFloatingType(inputs.scalar_type()) || !inputs.isfinite().all().item<bool>())
        throw Error("awq: calibration inputs must be finite floating-point values");

    if (options.sliceWeights < 1)
        throw Error("awq: sliceWeights must be at least 1, got " + std::to_string(options.sliceWeights));

    // Where the inputs live: float64 on the CPU; float32 on a GPU (as GPTQ there), where float64 is slow on most cards.
    const at::Device device = inputs.device();
    const at::ScalarType work = device.is_cuda() ? at::kFloat : at::kDouble;
    const at::Tensor x = inputs.to(work);
    const at::Tensor meanAbs = inputs.to(at::kFloat).abs().mean(0);
    // mean((X·ΔWᵀ)²) = Σ (ΔW·XᵀX) ∘ ΔW / (n·out): with more rows than features the Gram matrix is cheaper.
    const int64_t n = x.size(0), in = x.size(1), out = weights.size(0);
    const bool useGram = n > in;
    const at::Tensor gram = useGram ? x.t().mm(x) : at::Tensor();

    std::vector<at::Tensor> scales;
    for (int r = 0; r < options.grid; ++r) {
        at::Tensor s = meanAbs.pow(double(r) / double(options.grid)).clamp_min(1e-4);  // pow(0) is 1 everywhere, also for 0
        // Centre the scales around 1 so the search does not drift the overall magnitude.
        scales.push_back(s.div(s.max().mul(s.min()).sqrt()));
    }
    // Rows are independent (groups run along the inputs), so each candidate's error is a sum over slices of rows;
    // each slice is moved and converted once for all candidates.
    std::vector<double> sums(size_t(options.grid), 0.0);
    const int64_t sliceRows = std::max<int64_t>(1, std::min(out, options.sliceWeights / std::max<int64_t>(1, in)));
    for (int64_t first = 0; first < out; first += sliceRows) {
        const at::Tensor w = weights.narrow(0, first, std::min(sliceRows, out - first)).to(device, at::kFloat);
        for (int r = 0; r < options.grid; ++r) {
            const at::Tensor& s = scales[size_t(r)];
            const at::Tensor back = roundTrip(w.mul(s), options.quant).div(s);
            // Measured through ΔW = W - Q rather than as a difference of outputs, so nothing cancels.
            const at::Tensor delta = (w - back).to(work);
            sums[size_t(r)] += useGram ? delta.mm(gram).mul(delta).sum().item<double>() : x.mm(delta.t()).pow(2).sum().item<double>();
        }
    }

    AwqResult result;
    result.bestError = std::numeric_limits<double>::infinity();
    for (int r = 0; r < options.grid; ++r) {
        const double error = sums[size_t(r)] / double(n * out);
        result.errors.push_back(error);
        if (error < result.bestError) {
            result.bestError = error;
            result.alpha = double(r) / double(options.grid);
            result.inputScales = scales[size_t(r)];
        }
    }
    if (!result.inputScales.defined())
        throw Error("awq: every candidate gave a non-finite error; check the weights and inputs");
    return result;
}

} // namespace cwb::quant
