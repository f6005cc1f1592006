#include "core/runtime/sparse24_linear.h"

#include <cstdlib>

#include <c10/core/DeviceGuard.h>

#include "core/util/error.h"

#ifdef CWB_HAVE_KERNELS
#include "cwb/kernels/sparse24_gemm.h"
#include "core/util/torch_stream.h"
#endif

namespace cwb {

#ifdef CWB_HAVE_KERNELS

namespace {

class CusparseLtLinear : public Sparse24Linear {
public:
    CusparseLtLinear(std::unique_ptr<kernels::Sparse24Gemm> gemm, at::Device device, at::ScalarType dtype, int64_t minRows)
        : mGemm(std::move(gemm)), mDevice(device), mDtype(dtype), mMinRows(minRows) {}

    bool applies(const at::Tensor& x) const override { return x.numel() / mGemm->columns() >= mMinRows; }

    at::Tensor forward(const at::Tensor& x) const override {
        c10::DeviceGuard guard(mDevice);
        at::Tensor input = x.to(mDtype).reshape({-1, mGemm->columns()}).contiguous();
        at::Tensor y = at::empty({input.size(0), mGemm->rows()}, input.options());
        mGemm->run(input.data_ptr(), y.data_ptr(), input.size(0), torchCurrentStream());
        std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
        shape.back() = mGemm->rows();
        return y.view(shape);
    }

    size_t deviceBytes() const override { return mGemm->deviceBytes(); }

private:
    std::unique_ptr<kernels::Sparse24Gemm> mGemm;
    at::Device mDevice;
    at::ScalarType mDtype;
    int64_t mMinRows;
};

} // namespace

Sparse24Decision makeSparse24Linear(const at::Tensor& weight, int64_t minRows) {
    Sparse24Decision d;
    if (!weight.defined() || !weight.is_cuda() || weight.dim() != 2 ||
        (weight.scalar_type() != at::kHalf && weight.scalar_type() != at::kBFloat16) || weight.size(1) % 4)
        return d;
    c10::DeviceGuard guard(weight.device());
    at::Tensor w = weight.contiguous();
    const int64_t rows = w.size(0), cols = w.size(1);
    try {
        d.twoFour = kernels::checkTwoFour(w.data_ptr(), rows, cols, torchCurrentStream()).ok;
    } catch (const kernels::KernelError&) {
        return d;   // cannot tell: treat as an ordinary dense weight
    }
    if (!d.twoFour) return d;
    if (minRows == 0) {
        d.how = kSparse24OffReason;
        return d;
    }
    const kernels::CusparseLtAvailability& lt = kernels::cusparseLtAvailability();
    std::string why;
    if (!lt.available) {
        // The long form (every path tried) is in cusparseLtAvailability().detail; the report groups identical reasons.
        d.how = lt.detail.rfind("cuSPARSELt not found", 0) == 0 ? "dense cuBLAS: cuSPARSELt not found" : "dense cuBLAS: " + lt.detail;
        return d;
    }
    if (minRows < 0) {
        try {
            if (kernels::sparse24SearchLimit(&why) < 0) {
                d.how = "dense cuBLAS: " + why + "; cuSPARSELt's default kernel was slower than cuBLAS on the H200 "
                        "(CWB_SPARSE24_MIN_ROWS=N uses it anyway)";
                return d;
            }
        } catch (const kernels::KernelError& e) {
            throw Error(e.what());   // a malformed CWB_SPARSE24_SEARCH_MAX_CONFIG
        }
        minRows = kSparse24DefaultMinRows;
    }
    if (!kernels::sparse24ShapeSupported(rows, cols, &why)) {
        d.how = "dense cuBLAS: " + why;
        return d;
    }
    try {
        const auto type = w.scalar_type() == at::kHalf ? kernels::ActType::Float16 : kernels::ActType::BFloat16;
        auto gemm = std::make_unique<kernels::Sparse24Gemm>(w.data_ptr(), type, rows, cols, torchCurrentStream());
        d.kernel = std::make_shared<CusparseLtLinear>(std::move(gemm), w.device(), w.scalar_type(), minRows);
        d.how = "2:4 cuSPARSELt (M >= " + std::to_string(minRows) + ")";
    } catch (const kernels::KernelError& e) {
        d.how = std::string("dense cuBLAS: ") + e.what();
    }
    return d;
}

#else

Sparse24Decision makeSparse24Linear(const at::Tensor&, int64_t) { return {}; }

#endif

void setSparse24SearchLog(std::function<void(const std::string&)> log) {
#ifdef CWB_HAVE_KERNELS
    kernels::setSparse24SearchLog(std::move(log));
#else
    (void)log;
#endif
}

int64_t sparse24MinRows(int64_t requested) {
    if (requested >= 0 || requested == kSparse24Automatic) return requested;
    const char* v = std::getenv("CWB_SPARSE24_MIN_ROWS");
    if (!v || !*v || std::string(v) == "auto") return kSparse24Automatic;
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    if (!end || *end != '\0' || n < 0)
        throw Error(std::string("CWB_SPARSE24_MIN_ROWS must be a non-negative row count or auto, got '") + v + "'");
    return int64_t(n);
}

} // namespace cwb
