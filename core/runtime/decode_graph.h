#pragma once
// A decode step captured as a CUDA graph and replayed: the few hundred small launches of one step cost one
// launch. Needs a CUDA build of LibTorch (CWB_TORCH_CUDA); without it available() is false and the runtime
// decodes eagerly.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <ATen/ATen.h>

namespace cwb {

class DecodeGraph {
public:
    // Runs one fixed-shape decode step reading its inputs from the two device tensors: the tokens [batch, 1] and
    // the position [1] (int64). Called twice on the first run (warm-up, then capture), never again after.
    using Step = std::function<at::Tensor(const at::Tensor& tokens, const at::Tensor& position)>;

    // The owner ids say which runtime and which version of its weights the graph reads.
    DecodeGraph(at::Device device, int64_t batch, uint64_t runtimeId, uint64_t weightsVersion);
    ~DecodeGraph();
    static bool available();

    bool capturedFor(uint64_t runtimeId, uint64_t weightsVersion, int64_t batch) const;
    // Copies tokens ([batch, 1] int64, any device) and position into the graph's inputs and replays it, capturing
    // `step` first if needed. Returns a copy of the step's output. Throws cwb::Error if capture fails.
    at::Tensor run(const at::Tensor& tokens, int64_t position, const Step& step);
    int64_t replays() const { return mReplays; }

private:
    struct Captured;
    std::unique_ptr<Captured> mCaptured;
    at::Tensor mTokens, mPosition, mOutput;
    uint64_t mRuntimeId, mWeightsVersion;
    int64_t mBatch;
    int64_t mReplays = 0;
};

} // namespace cwb
