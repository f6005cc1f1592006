#include "core/compress/sequential.h"

#include <set>

#include "core/model/model.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

namespace {

class BlockObserver : public ActivationObserver {
public:
    BlockObserver(std::set<std::string> layers, const SequentialPass& pass, int64_t block, const InputSink& sink)
        : mLayers(std::move(layers)), mPass(pass), mBlock(block), mSink(sink) {}
    bool wantsLinear(const std::string& name) const override { return mLayers.count(name) != 0; }
    void onLinear(const std::string& name, const at::Tensor& input, const at::Tensor&) override {
        if (mPass.sharedInput && mLastInput.defined() && input.data_ptr() == mLastInput.data_ptr() &&
            input.sizes() == mLastInput.sizes() && input.strides() == mLastInput.strides() &&
            input.scalar_type() == mLastInput.scalar_type() && input.device() == mLastInput.device()) {
            if (mShared.insert(name).second) mPass.sharedInput(name, mLastLayer);
            return;
        }
        mLastInput = input;   // held, so no later tensor can reuse its address while it is compared against
        mLastLayer = name;
        mSink(name, input.reshape({-1, input.size(-1)}).to(at::kFloat));
    }
    bool wantsHeads() const override { return &mSink == &mPass.collect && mPass.collectHeads; }
    void onAttentionHeads(int64_t, const at::Tensor& heads) override {
        mPass.collectHeads(mBlock, heads.reshape({-1, heads.size(2), heads.size(3)}).to(at::kFloat));
    }

private:
    std::set<std::string> mLayers;
    const SequentialPass& mPass;
    int64_t mBlock;
    const InputSink& mSink;
    at::Tensor mLastInput;        // input of the last layer given to collect
    std::string mLastLayer;
    std::set<std::string> mShared;
};

} // namespace

void runSequential(const Model& model, const at::Tensor& calibration, const SequentialPass& pass, Feedback* feedback) {
    if (!calibration.defined() || calibration.dim() != 2 || calibration.size(0) == 0)
        throw Error("this method needs calibration data (a text file for --calib)");
    RuntimeOptions options;
    options.device = pass.compute.device;
    options.dtype = pass.compute.forwardType;
    options.nativeKernels = false;   // calibration needs the same arithmetic on every device
    Transformer runtime(model, options);
    std::vector<at::Tensor> hidden;
    for (int64_t start = 0; start < calibration.size(0); start += pass.microBatch)
        hidden.push_back(runtime.embed(calibration.narrow(0, start, std::min(pass.microBatch, calibration.size(0) - start))));
    const int64_t blocks = model.spec.layers;
    const std::vector<std::string> headStage = pass.layersOf ? pass.layersOf(blocks) : std::vector<std::string>{};
    if (!headStage.empty() && headStage != std::vector<std::string>{names::kHead})
        throw Error("calibration: past the last block only the output head (" + std::string(names::kHead) + ") can be observed");
    const bool withHead = !headStage.empty();
    const double stages = double(blocks + (withHead ? 1 : 0));
    // Checked per micro-batch too: one block of a large calibration set can take minutes.
    const auto checkCancel = [feedback] {
        if (feedback) feedback->throwIfCancelled();
    };
    for (int64_t b = 0; b < blocks; ++b) {
        if (feedback) {
            feedback->throwIfCancelled();
            feedback->setProgress(double(b) / stages);
        }
        std::vector<std::string> wanted = pass.layersOf ? pass.layersOf(b) : std::vector<std::string>{};
        BlockObserver observer({wanted.begin(), wanted.end()}, pass, b, pass.collect);
        const bool observe = !wanted.empty() || pass.collectHeads;
        if (observe || pass.collectBlockIO)
            for (auto& h : hidden) {
                checkCancel();
                at::Tensor out = runtime.runBlock(b, h, observe ? &observer : nullptr);
                if (pass.collectBlockIO)
                    pass.collectBlockIO(b, h.reshape({-1, h.size(-1)}).to(at::kFloat), out.reshape({-1, out.size(-1)}).to(at::kFloat));
            }
        if (pass.compressBlock) pass.compressBlock(b);
        runtime.invalidateBlock(-1);
        if (pass.collectCompressed) {
            BlockObserver compressed({wanted.begin(), wanted.end()}, pass, b, pass.collectCompressed);
            for (auto& h : hidden) {
                checkCancel();
                h = runtime.runBlock(b, h, wanted.empty() ? nullptr : &compressed);
            }
            if (pass.compressedBlockDone) pass.compressedBlockDone(b);
        } else if (b + 1 < blocks || withHead) {
            for (auto& h : hidden) {
                checkCancel();
                h = runtime.runBlock(b, h, nullptr);
            }
        }
    }
    if (withHead) {
        if (feedback) {
            feedback->throwIfCancelled();
            feedback->setProgress(double(blocks) / stages);
        }
        // The head's input does not depend on the head: each micro-batch's final norm goes to collect and, for the
        // look at the compressed stage, to collectCompressed at once; the hidden states are freed before the head
        // is compressed (GPTQ of a large-vocabulary head needs several head-sized buffers).
        for (auto& h : hidden) {
            checkCancel();
            const at::Tensor normed = runtime.finalNorm(h);
            const at::Tensor x = normed.reshape({-1, normed.size(-1)}).to(at::kFloat);
            h = at::Tensor();
            if (pass.collect) pass.collect(names::kHead, x);
            if (pass.collectCompressed) pass.collectCompressed(names::kHead, x);
        }
        hidden.clear();
        if (pass.compressBlock) pass.compressBlock(blocks);
        if (pass.collectCompressed && pass.compressedBlockDone) pass.compressedBlockDone(blocks);
    }
    if (feedback) feedback->setProgress(1.0);
}

} // namespace cwb
