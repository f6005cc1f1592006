#pragma once
// A dense linear layer whose weight has the 2:4 pattern in every row (after prune.2:4, SparseGPT 2:4 or Wanda 2:4)
// multiplied through cuSPARSELt (kernels/sparse24_gemm.h) when the input has at least `minRows` rows (prefill);
// smaller inputs take the 2:4 GEMV on packed rows at one row (RuntimeOptions::sparse24Gemv) and cuBLAS on the dense
// weight (kept, or unpacked per call) otherwise, where the sparse kernel does not pay. Plain C++ (no CUDA
// headers); without the kernels in the build every weight stays dense.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <ATen/ATen.h>

namespace cwb {

class Sparse24Linear {
public:
    virtual ~Sparse24Linear() = default;
    // True when x ([..., cols]) has enough rows for the sparse kernel.
    virtual bool applies(const at::Tensor& x) const = 0;
    // x [..., cols] in the weight's type on its device; returns [..., rows] without bias.
    virtual at::Tensor forward(const at::Tensor& x) const = 0;
    virtual size_t deviceBytes() const = 0;   // compressed weight and metadata (cuSPARSELt's own copy)
};

// What the runtime found for one dense weight.
struct Sparse24Decision {
    bool twoFour = false;            // every row is 2:4 (false: an ordinary dense layer, nothing to report)
    std::shared_ptr<const Sparse24Linear> kernel;   // set when cuSPARSELt runs it
    std::string how;                 // "2:4 cuSPARSELt (M >= 1024)" or "dense cuBLAS: <why not>"
};

// kSparse24Automatic (the default; CWB_SPARSE24_MIN_ROWS=auto): use cuSPARSELt for inputs of at least
// kSparse24DefaultMinRows rows where our kernel-configuration search is known to be safe on this GPU (the searched
// kernel measured 1.37-1.73x cuBLAS fp16 on the H200 at M >= 2048, docs/performance.md); elsewhere keep 2:4 weights
// dense, since cuSPARSELt's default kernel measured 0.52-0.73x. cuSPARSELt's compressed copy (about 54% of the dense
// bytes on a 7B shape) is kept beside the runtime's own form of the weight (packed 2:4 rows, or the dense weight).
// CWB_SPARSE24_MIN_ROWS=0 turns it off.
inline constexpr int64_t kSparse24Automatic = -1;
inline constexpr int64_t kSparse24DefaultMinRows = 2048;

// weight: [rows, cols] fp16 / bf16 on a CUDA device (anything else is never 2:4-checked). Compresses it once.
// minRows: > 0 the row threshold; 0 only reports a 2:4 weight (kSparse24OffReason) and keeps it dense;
// kSparse24Automatic as above.
Sparse24Decision makeSparse24Linear(const at::Tensor& weight, int64_t minRows);

inline constexpr const char* kSparse24OffReason =
    "dense cuBLAS: 2:4 through cuSPARSELt is off (CWB_SPARSE24_MIN_ROWS=0; =N or =auto turns it on)";

// Lines from the 2:4 kernel-configuration search (kernels::setSparse24SearchLog): where a first prefill spends its
// seconds. Process-wide; does nothing in builds without the kernels.
void setSparse24SearchLog(std::function<void(const std::string&)> log);

// The row threshold in effect: `requested` when >= 0 or kSparse24Automatic (RuntimeOptions::sparseMinRows), else
// CWB_SPARSE24_MIN_ROWS from the environment (a row count, 0 for off, or "auto"), else kSparse24Automatic. Throws
// cwb::Error for a malformed variable.
int64_t sparse24MinRows(int64_t requested);

} // namespace cwb
