#include "core/compress/awq_math.h"

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

    // Where the inputs live: float64 on the CPU; float32 on a GPU (as GPTQ there), where float64 is slow on most cards.
    const at::Device device = inputs.device();
    const at::ScalarType work = device.is_cuda() ? at::kFloat : at::kDouble;
    const at::Tensor w = weights.to(device, at::kFloat);
    const at::Tensor x = inputs.to(work);
    const at::Tensor meanAbs = inputs.to(at::kFloat).abs().mean(0);
    // mean((X·ΔWᵀ)²) = Σ (ΔW·XᵀX) ∘ ΔW / (n·out): with more rows than features the Gram matrix is cheaper.
    const int64_t n = x.size(0), out = w.size(0);
    const bool useGram = n > x.size(1);
    const at::Tensor gram = useGram ? x.t().mm(x) : at::Tensor();

    AwqResult result;
    result.bestError = std::numeric_limits<double>::infinity();
    for (int r = 0; r < options.grid; ++r) {
        const double alpha = double(r) / double(options.grid);
        at::Tensor s = meanAbs.pow(alpha).clamp_min(1e-4);  // pow(0) is 1 everywhere, also for 0
        // Centre the scales around 1 so the search does not drift the overall magnitude.
        s = s.div(s.max().mul(s.min()).sqrt());
        const at::Tensor scaled = w.mul(s);
        const at::Tensor back = roundTrip(scaled, options.quant).div(s);
        // Measured through ΔW = W - Q rather than as a difference of outputs, so nothing cancels.
        const at::Tensor delta = (w - back).to(work);
        const double error = useGram ? delta.mm(gram).mul(delta).sum().item<double>() / double(n * out)
                                     : x.mm(delta.t()).pow(2).mean().item<double>();
        result.errors.push_back(error);
        if (error < result.bestError) {
            result.bestError = error;
            result.alpha = alpha;
            result.inputScales = s;
        }
    }
    if (!result.inputScales.defined())
        throw Error("awq: every candidate gave a non-finite error; check the weights and inputs");
    return result;
}

} // namespace cwb::quant
