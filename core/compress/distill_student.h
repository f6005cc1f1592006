#pragma once
// The trainable side of a student model: one fp32 latent tensor per trained model tensor (with its mask,
// its quantization grid, its AdamW moments), the tensors handed to the runtime each step, storing the result
// back into the Model, and checkpoints of all of it.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/compress/quant_math.h"

namespace cwb {

class Model;
class IntLinear;
class Fp8Linear;
class W8A8Linear;

struct TrainedTensor {
    std::string name;                          // model tensor name ("model.layers.0.mlp.up_proj.weight")
    at::Tensor latent;                         // fp32 leaf on the device, requires grad
    at::Tensor mask;                           // 1 where the weight may be non-zero; undefined: none
    std::shared_ptr<const IntLinear> quantized;   // the layer's integer form (grid kept); null: dense
    std::shared_ptr<const Fp8Linear> fp8;         // or its FP8 form (scales kept)
    std::shared_ptr<const W8A8Linear> w8a8;       // or its SmoothQuant form (scales and smoothing kept)
    at::ScalarType storage = at::kFloat;       // precision of the dense tensor in the model
    at::Tensor m, v;                           // AdamW moments
    // With trained scales: log of the layer's scales (fp32 leaf, requires grad; [out, groups] integer, [out] or [1]
    // FP8/W8A8) and its moments; undefined when the scales stay fixed.
    at::Tensor logScales, scaleM, scaleV;
};

// Why a checkpoint cannot be written to `path` ("" when it can): a folder is there, or a file that is not a cwb
// distillation checkpoint (the model being trained, its text or a project named by mistake were overwritten).
std::string checkpointPathProblem(const std::string& path);

class StudentTensors {
public:
    // Collects every tensor of the student: block tensors (and, with embeddings, the rest) become trainable, the
    // rest stay frozen; integer, FP8 and W8A8 layers train on their grids, and with trainScales their scales too
    // (LSQ). Zeros of linear weights become masks when keepSparsity.
    StudentTensors(const Model& student, const at::Device& device, bool keepSparsity, bool trainEmbeddings,
                   bool trainScales = false);

    // The tensors the runtime computes with (masked, fake-quantized); with grad unless in a no-grad scope.
    const std::map<std::string, at::Tensor>& effective();
    std::vector<TrainedTensor>& trained() { return mTrained; }
    const std::vector<std::string>& notes() const { return mNotes; }
    int64_t step() const { return mStep; }
    void setStep(int64_t step) { mStep = step; }

    // Writes the current weights into the model: dense tensors in their storage precision, quantized layers
    // as packed levels on their grid (the original one, or with the trained scales).
    void storeInto(Model& model) const;

    // Checkpoint: latents, moments and the step, written to a temporary file then renamed.
    void save(const std::string& path) const;
    // Throws cwb::Error naming the file when it does not match this student, or (setRun) was written by another run;
    // acceptOtherStart: one that differs only in the starting weights is loaded, with a note.
    void load(const std::string& path, bool acceptOtherStart = false);

    // What makes a run resumable from a checkpoint: its settings, its starting weights (weightsChecksum()) and its data,
    // as a JSON object of parts. Written into checkpoints; load() refuses one whose parts differ, naming them
    // (resuming another run's checkpoint trained on from the wrong weights, steps and data without a word).
    void setRun(nlohmann::json run) { mRun = std::move(run); }
    // Per tensor (latents, scales, frozen tensors, in a fixed order): its name, shape and the 64-bit sum of its float32
    // bit patterns, computed where the tensors are; any changed value changes it.
    std::string weightsChecksum() const;

private:
    std::vector<TrainedTensor> mTrained;
    std::map<std::string, at::Tensor> mFrozen;      // constant tensors, already on the device
    std::map<std::string, at::Tensor> mEffective;   // rebuilt by effective()
    std::vector<std::string> mNotes;
    int64_t mStep = 0;                              // optimizer steps done
    nlohmann::json mRun;                            // setRun(); null: not checked
};

} // namespace cwb
