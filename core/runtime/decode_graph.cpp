#include "core/runtime/decode_graph.h"

#include "core/util/error.h"

#ifdef CWB_TORCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace cwb {

#ifdef CWB_TORCH_CUDA
struct DecodeGraph::Captured {
    at::cuda::CUDAGraph graph;
};
bool DecodeGraph::available() { return true; }
#else
struct DecodeGraph::Captured {};
bool DecodeGraph::available() { return false; }
#endif

DecodeGraph::DecodeGraph(at::Device device, int64_t batch, uint64_t runtimeId, uint64_t weightsVersion)
    : mRuntimeId(runtimeId), mWeightsVersion(weightsVersion), mBatch(batch) {
    auto longs = at::TensorOptions().dtype(at::kLong).device(device);
    mTokens = at::zeros({batch, 1}, longs);
    mPosition = at::zeros({1}, longs);
}

DecodeGraph::~DecodeGraph() = default;

bool DecodeGraph::capturedFor(uint64_t runtimeId, uint64_t weightsVersion, int64_t batch) const {
    return runtimeId == mRuntimeId && weightsVersion == mWeightsVersion && batch == mBatch;
}

at::Tensor DecodeGraph::run(const at::Tensor& tokens, int64_t position, const Step& step) {
#ifdef CWB_TORCH_CUDA
    mTokens.copy_(tokens.reshape({mBatch, 1}));
    mPosition.fill_(position);
    if (!mCaptured) {
        auto captured = std::make_unique<Captured>();
        // Capture needs a stream other than the default one. Eager warm-ups first create what the step allocates
        // once and must not allocate during capture: the kernels' workspace (on the current stream, then waited
        // for) and cuBLAS's state for the side stream. Each computes this very step, so writing this position's
        // keys and values again does no harm.
        step(mTokens, mPosition);
        c10::cuda::getCurrentCUDAStream().synchronize();
        c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
        try {
            c10::cuda::CUDAStreamGuard guard(side);
            step(mTokens, mPosition);
            side.synchronize();
            captured->graph.capture_begin();
            try {
                mOutput = step(mTokens, mPosition);
            } catch (...) {
                try {
                    captured->graph.capture_end();
                } catch (...) {
                }
                throw;
            }
            captured->graph.capture_end();
            side.synchronize();
        } catch (const std::exception& e) {
            mOutput = at::Tensor();
            throw Error(std::string("decode graph: capture failed: ") + e.what());
        }
        mCaptured = std::move(captured);
    }
    mCaptured->graph.replay();
    ++mReplays;
    return mOutput.clone();
#else
    (void)tokens;
    (void)position;
    (void)step;
    throw Error("decode graph: this build's LibTorch has no CUDA");
#endif
}

} // namespace cwb
