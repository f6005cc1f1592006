#pragma once
// 2:4 semi-structured sparse GEMM through cuSPARSELt, loaded at run time (dlopen): the build needs neither the library
// nor its header. Y[m, n] = X[m, k] · W[n, k]^T with fp32 accumulation, fp16 or bf16 in and out, where every row of W
// keeps at most 2 nonzeros in each group of 4 consecutive input columns (what prune.2:4, SparseGPT 2:4 and Wanda
// 2:4 leave). W is checked and compressed once; a plan per m is made on first use and cached.
// Library lookup: the path in CWB_CUSPARSELT (the .so file or its folder), then "libcusparseLt.so.0" on the loader
// path. The CPU side (pattern checker, pruning, reference product) needs no CUDA.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cwb/kernels/kernel_types.h"

namespace cwb::kernels {

// Where a weight breaks the 2:4 pattern: the first group (in row-major order) with more than 2 nonzeros.
struct TwoFourCheck {
    bool ok = true;
    int64_t row = -1;
    int64_t column = -1;   // first column of the offending group of 4
    int nonzeros = 0;
    std::string describe() const;   // "" when ok, else "row r, columns c..c+3 hold 3 nonzeros (2:4 allows 2)"
};

// k must be a multiple of 4 (else the result names the problem in row -1). ±0 counts as zero.
TwoFourCheck checkTwoFourRef(const float* w, int64_t n, int64_t k);
TwoFourCheck checkTwoFourRef(const uint16_t* wBits, int64_t n, int64_t k);   // fp16 or bf16 bits

// Keeps the 2 largest |w| of every group of 4 per row (the earlier column on ties) and zeroes the other two.
void pruneTwoFourRef(float* w, int64_t n, int64_t k);

// y[m, n] = sum_k x[m, k] · w[n, k] of the decoded fp16 / bf16 values, accumulated in double.
void sparse24GemmRef(const uint16_t* x, const uint16_t* w, ActType type, int64_t m, int64_t n, int64_t k, float* y);

// Device weight [n, k] of fp16 / bf16 bits checked on the current device (synchronous on `stream`).
TwoFourCheck checkTwoFour(const void* w, int64_t n, int64_t k, Stream stream);

// Whether cuSPARSELt could be loaded on this machine; loads it on the first call.
struct CusparseLtAvailability {
    bool available = false;
    std::string detail;   // available: "cuSPARSELt <version> from <path>"; otherwise why not, e.g. "cuSPARSELt not found (...)"
};
const CusparseLtAvailability& cusparseLtAvailability();

// Shapes the wrapper accepts: n and k multiples of 16 (m any: it is padded to a multiple of 16 internally).
bool sparse24ShapeSupported(int64_t n, int64_t k, std::string* why = nullptr);

// The highest configuration id our search may try on the current device with the loaded cuSPARSELt, or -1 (no
// search; `why` says why). Configurations are only tried where known to be safe, because a bad one can raise an
// illegal instruction that ends the CUDA context: with 0.8.0 on compute capability 9.0 (H200) that is 0..35.
// CWB_SPARSE24_SEARCH_MAX_CONFIG=N overrides (-1: never search); throws KernelError for a malformed value.
int sparse24SearchLimit(std::string* why = nullptr);

// Forgets the configurations searched in this process (not the configuration file): tests, benchmarks.
void sparse24ForgetSearches();

// Receives a line before each configuration search a run starts (7-9 s per shape and size class on the H200) and
// one with its result; process-wide, nothing by default. The command line prints them, so a first prefill that
// searches does not look hung.
void setSparse24SearchLog(std::function<void(const std::string&)> log);

// Kernel plans alive in the process. Weights of one shape share a plan per padded m and configuration (plans do
// not depend on the weight's values), so a model needs one per distinct shape and m, not one per layer.
size_t sparse24LivePlanCount();

// Device bytes of the buffers all weights share, per device and stream: padded copies of x and y and the plan
// workspace. They grow to the largest run and are kept for the process.
size_t sparse24ScratchBytes();

// How the weight is shown to cuSPARSELt. Both describe the same bytes (W [n, k] row-major, compressed once); the
// library offers different kernels for each.
enum class Sparse24Layout {
    RowMajor,               // A = W [n, k] row-major, not transposed
    ColumnMajorTransposed,  // A = W^T seen as [k, n] column-major, transposed
};

struct Sparse24Options {
    Sparse24Layout layout = Sparse24Layout::RowMajor;
    // On the first run of each size class of m (powers of two), time the kernel configurations cuSPARSELt offers
    // for the product (those sparse24SearchLimit allows) and keep the fastest for that class, for every weight of
    // the same shape in the process, and in the configuration file (sparse24_config_file.h) for later processes,
    // which then skip the search. cuSPARSELt's own search (cusparseLtMatmulSearch) is not used: it tries every
    // configuration, and with 0.8.0 on the H200 some raise an illegal instruction. Off, or where no search is known
    // to be safe: the library's default configuration (id 0). Never searched while the stream is being captured.
    bool search = true;
};

// One timed kernel configuration of a search.
struct Sparse24Candidate {
    int configId = 0;
    double microseconds = 0;   // mean of the timed runs; < 0 when the library refused the configuration
    double setupMicroseconds = 0;      // host time to select it and make its plan
    double firstRunMicroseconds = 0;   // host time of its first (untimed) run, synchronized
    std::string error;         // why it was refused
};

class Sparse24Gemm {
public:
    // w: device [n, k] row-major fp16 / bf16, 2:4 per row. Compresses it on `stream` (the dense copy is not kept).
    // Throws KernelError "cuSPARSELt unavailable: ..." when the library cannot be loaded, naming the first bad
    // group when w is not 2:4, or naming the shape rule it breaks.
    Sparse24Gemm(const void* w, ActType type, int64_t n, int64_t k, Stream stream, Sparse24Options options = {});
    ~Sparse24Gemm();
    Sparse24Gemm(const Sparse24Gemm&) = delete;
    Sparse24Gemm& operator=(const Sparse24Gemm&) = delete;

    // x: device [m, k], y: device [m, n], both row-major in the weight's type; runs on `stream`. The first run of
    // a size class may search (options.search), which synchronizes `stream`.
    void run(const void* x, void* y, int64_t m, Stream stream);

    // Kernel configurations cuSPARSELt offers for m rows (ids 0 .. count - 1).
    int configCount(int64_t m);
    // Fixes the configuration of m's size class for this weight (benches, tests); throws KernelError when the
    // library refuses it.
    void useConfig(int64_t m, int configId);
    // Times configurations 0 .. sparse24SearchLimit() for m on x / y (y is overwritten) and returns them all; the
    // fastest becomes the choice of m's size class for this shape. Synchronous on `stream`; throws KernelError
    // when no search is allowed.
    std::vector<Sparse24Candidate> searchConfigs(const void* x, void* y, int64_t m, Stream stream);

    // The kernel chosen for m, e.g. "configuration 27 of 0..52 (searched 0..35 at m=2048: 169.3 us vs
    // configuration 0 476.4 us)" or "configuration 0 of 0..52 (default)"; "" before the first run of that m.
    std::string kernelNote(int64_t m) const;
    int64_t rows() const;      // n
    int64_t columns() const;   // k
    ActType type() const;
    Sparse24Layout layout() const;
    size_t deviceBytes() const;   // compressed weight and metadata (the shared buffers: sparse24ScratchBytes)

private:
    struct State;
    std::unique_ptr<State> mState;
};

} // namespace cwb::kernels
