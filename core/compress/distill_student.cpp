#include "core/compress/distill_student.h"

#include <c10/core/GradMode.h>   // NoGradGuard: ATen/ATen.h does not bring it in LibTorch 2.x
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/compress/compressed_layers.h"
#include "core/compress/distill_math.h"
#include "core/model/model.h"
#include "core/project/file_hash.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"

namespace cwb {

namespace {

constexpr char kMagic[8] = {'C', 'W', 'B', 'K', 'D', 'C', 'K', '1'};

at::ScalarType storageType(const TensorRecord& r) {
    return r.type == ggml::Type::F16 ? at::kHalf : r.type == ggml::Type::BF16 ? at::kBFloat16 : at::kFloat;
}

bool isBlockTensor(const Model& model, const std::string& name) {
    const std::string prefix = model.spec.family == Family::Llama ? "model.layers." : "transformer.h.";
    return name.compare(0, prefix.size(), prefix) == 0;
}

at::Tensor leaf(const at::Tensor& value, const at::Device& device) {
    at::Tensor t = value.to(device, at::kFloat).contiguous().clone().detach();
    t.set_requires_grad(true);
    return t;
}

} // namespace

StudentTensors::StudentTensors(const Model& student, const at::Device& device, bool keepSparsity, bool trainEmbeddings,
                               bool trainScales) {
    std::set<std::string> linearWeights;
    for (const auto& layer : student.linearLayers()) linearWeights.insert(layer + ".weight");
    if (student.compressed(names::kHead)) linearWeights.insert("lm_head.weight");   // a quantized head trains on its grid too
    int64_t frozenLayers = 0, masked = 0, quantized = 0, eightBit = 0, scaled = 0;
    for (const auto& name : student.tensorNames()) {
        if (name == "rope_freqs.weight") continue;   // read by the runtime itself, never trained
        const TensorRecord& record = student.tensor(name);
        const bool linear = linearWeights.count(name) != 0;
        auto compressed = linear ? student.compressed(name.substr(0, name.size() - 7)) : nullptr;
        auto integer = std::dynamic_pointer_cast<const IntLinear>(compressed);
        auto fp8 = std::dynamic_pointer_cast<const Fp8Linear>(compressed);
        auto w8a8 = std::dynamic_pointer_cast<const W8A8Linear>(compressed);
        if (compressed && !integer && !fp8 && !w8a8) {   // a kind without a trainable grid
            mFrozen[name] = compressed->weight().to(device, at::kFloat);
            ++frozenLayers;
            continue;
        }
        const bool trainable = isBlockTensor(student, name) || trainEmbeddings;
        // A compressed layer's weight in its own input space (W8A8: W·diag(s), multiplied with x / s).
        at::Tensor value = compressed ? compressed->weight() : student.floatTensor(name);
        if (!trainable) {
            mFrozen[name] = value.to(device, at::kFloat);
            continue;
        }
        TrainedTensor t;
        t.name = name;
        t.latent = leaf(value, device);
        t.quantized = integer;
        t.fp8 = fp8;
        t.w8a8 = w8a8;
        t.storage = storageType(record);
        // In a quantized layer this also holds the weights that rounded to zero there: on stories260K (int3 g32,
        // 150 steps, 3 seeds) letting them move gave a higher KL to the base, 0.604 against 0.561 (docs/distillation.md).
        if (linear && keepSparsity && (value == 0).any().item<bool>()) {
            t.mask = (value != 0).to(device, at::kFloat);
            ++masked;
        }
        if (integer) ++quantized;
        if (fp8 || w8a8) ++eightBit;
        t.m = at::zeros_like(t.latent).detach();
        t.v = at::zeros_like(t.latent).detach();
        if (trainScales && (integer || fp8 || w8a8)) {
            at::Tensor scales = integer ? integer->quantized().scales : fp8 ? fp8->fp8Weight().scales : w8a8->int8Weight().scales;
            if (integer && integer->quantized().spec.groupSize == 0) scales = scales.narrow(0, 0, 1);   // per tensor: one
            // A zero scale (an all-zero group) would give log 0: held at the smallest normal float instead.
            t.logScales = leaf(scales.to(at::kFloat).clamp_min(std::numeric_limits<float>::min()).log(), device);
            t.scaleM = at::zeros_like(t.logScales).detach();
            t.scaleV = at::zeros_like(t.logScales).detach();
            ++scaled;
        }
        mTrained.push_back(std::move(t));
    }
    if (frozenLayers) mNotes.push_back(std::to_string(frozenLayers) + " compressed layers stay frozen (no trainable grid for their kind)");
    if (eightBit)
        mNotes.push_back(std::to_string(eightBit) + " FP8/W8A8 layers train on their grid (" +
                         (trainScales ? "scales trained" : "scales kept") + "; QAT, straight-through estimator)");
    if (masked)   // a quantized layer's weights that rounded to zero count too: "sparse" alone misled (user probe)
        mNotes.push_back(std::to_string(masked) + " layers keep their zero weights (pruned, or rounded to zero on a quantized grid)");
    if (quantized) mNotes.push_back(std::to_string(quantized) + " integer layers train on their grid (QAT, straight-through estimator)");
    if (scaled) mNotes.push_back(std::to_string(scaled) + " quantized layers train their scales too (LSQ; zero points fixed)");
}

const std::map<std::string, at::Tensor>& StudentTensors::effective() {
    mEffective = mFrozen;
    for (const auto& t : mTrained) {
        at::Tensor w = t.mask.defined() ? t.latent * t.mask : t.latent;
        if (t.logScales.defined()) {
            if (t.quantized) w = distill::fakeQuantizeLearnedScales(w, t.quantized->quantized(), t.logScales);
            if (t.fp8) w = distill::fakeQuantizeFp8LearnedScales(w, t.logScales);
            if (t.w8a8) w = distill::fakeQuantizeInt8LearnedScales(w, t.logScales);
        } else {
            if (t.quantized) w = distill::fakeQuantize(w, t.quantized->quantized());
            if (t.fp8) w = distill::fakeQuantizeFp8(w, t.fp8->fp8Weight().scales);
            if (t.w8a8) w = distill::fakeQuantizeInt8(w, t.w8a8->int8Weight().scales);
        }
        mEffective[t.name] = w;
    }
    return mEffective;
}

void StudentTensors::storeInto(Model& model) const {
    c10::NoGradGuard noGrad;
    for (const auto& t : mTrained) {
        at::Tensor w = (t.mask.defined() ? t.latent * t.mask : t.latent).detach().to(at::kCPU);
        const std::string layer = t.name.substr(0, t.name.size() - 7);
        const bool learned = t.logScales.defined();
        const at::Tensor scales = learned ? t.logScales.detach().exp().to(at::kCPU) : at::Tensor();
        if (t.quantized) {
            const quant::QuantizedWeight grid =
                learned ? distill::withScales(t.quantized->quantized(), t.logScales) : t.quantized->quantized();
            model.setCompressed(layer, std::make_shared<IntLinear>(distill::requantize(w, grid), t.quantized->inputScale(),
                                                                   t.quantized->method()));
        } else if (t.fp8) {
            model.setCompressed(layer, std::make_shared<Fp8Linear>(
                                           distill::requantizeFp8(w, learned ? scales : t.fp8->fp8Weight().scales),
                                           t.fp8->dynamicActivations()));
        } else if (t.w8a8) {
            model.setCompressed(layer, std::make_shared<W8A8Linear>(
                                           distill::requantizeInt8(w, learned ? scales : t.w8a8->int8Weight().scales),
                                           t.w8a8->smoothing()));
        } else {
            model.replaceTensor(t.name, w.to(t.storage));
        }
    }
}

std::string StudentTensors::weightsChecksum() const {
    c10::NoGradGuard noGrad;
    uint64_t hash = kFnv1a64OffsetBasis;
    auto add = [&](const std::string& name, const at::Tensor& t) {
        hash = fnv1a64(name.data(), name.size() + 1, hash);   // with its terminating 0: names cannot run together
        const std::vector<int64_t> shape = t.sizes().vec();
        hash = fnv1a64(shape.data(), shape.size() * sizeof(int64_t), hash);
        const at::Tensor bits = t.detach().to(at::kFloat).contiguous().view(at::kInt);
        const int64_t sum = at::sum(bits, at::kLong).item<int64_t>();
        hash = fnv1a64(&sum, sizeof sum, hash);
    };
    for (const auto& t : mTrained) {
        add(t.name, t.latent);
        if (t.logScales.defined()) add(t.name + "#scales", t.logScales);
    }
    for (const auto& [name, t] : mFrozen) add(name, t);
    return formatHash(hash);
}

std::string checkpointPathProblem(const std::string& path) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (!std::filesystem::exists(status)) return "";
    if (std::filesystem::is_directory(status)) return path + " is a folder";
    char magic[sizeof kMagic] = {};
    std::ifstream in(path, std::ios::binary);
    in.read(magic, sizeof magic);
    if (!in || std::memcmp(magic, kMagic, sizeof kMagic) != 0)
        return path + " exists and is not a cwb distillation checkpoint (it is not overwritten; name another file)";
    return "";
}

void StudentTensors::save(const std::string& path) const {
    // Version 2 adds each tensor's trained log-scales and their moments ("scale_shape"; absent when fixed).
    // Version 3 adds "run": the identity of the run that wrote it (setRun).
    nlohmann::json header = {{"format", "cwb distillation checkpoint"}, {"version", 3}, {"step", mStep}};
    if (!mRun.is_null()) header["run"] = mRun;
    std::vector<at::Tensor> blobs;
    for (const auto& t : mTrained) {
        nlohmann::json entry = {{"name", t.name}, {"shape", t.latent.sizes().vec()}};
        for (const at::Tensor* part : {&t.latent, &t.m, &t.v}) blobs.push_back(part->detach().to(at::kCPU, at::kFloat).contiguous());
        if (t.logScales.defined()) {
            entry["scale_shape"] = t.logScales.sizes().vec();
            for (const at::Tensor* part : {&t.logScales, &t.scaleM, &t.scaleV})
                blobs.push_back(part->detach().to(at::kCPU, at::kFloat).contiguous());
        }
        header["tensors"].push_back(entry);
    }
    const std::string text = header.dump();
    writeFileAtomically(path, [&](std::ostream& out) {
        const uint64_t length = text.size();
        out.write(kMagic, sizeof kMagic);
        out.write(reinterpret_cast<const char*>(&length), sizeof length);
        out.write(text.data(), std::streamsize(text.size()));
        for (const auto& b : blobs) out.write(static_cast<const char*>(b.data_ptr()), std::streamsize(b.numel() * 4));
    });
}

void StudentTensors::load(const std::string& path, bool acceptOtherStart) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path, "cannot open the checkpoint");
    char magic[sizeof kMagic];
    uint64_t length = 0;
    in.read(magic, sizeof magic);
    in.read(reinterpret_cast<char*>(&length), sizeof length);
    if (!in || std::memcmp(magic, kMagic, sizeof kMagic) != 0 || length > (uint64_t(1) << 30))
        throw Error(path, "not a cwb distillation checkpoint");
    std::string text(length, '\0');
    in.read(text.data(), std::streamsize(length));
    nlohmann::json header = nlohmann::json::parse(text, nullptr, false);
    const int version = header.is_discarded() ? 0 : header.value("version", 0);
    if (!in || header.is_discarded() || !header.contains("tensors") || version < 1 || version > 3)
        throw Error(path, "the checkpoint header is damaged or of another version");
    if (!mRun.is_null() && header.contains("run")) {
        const nlohmann::json& saved = header["run"];
        std::vector<std::string> differs;
        const nlohmann::json none;
        const nlohmann::json& savedSettings = saved.contains("settings") ? saved["settings"] : none;
        const nlohmann::json& settings = mRun.contains("settings") ? mRun["settings"] : none;
        if (savedSettings.is_object() && settings.is_object()) {
            std::set<std::string> keys;
            for (const auto& item : savedSettings.items()) keys.insert(item.key());
            for (const auto& item : settings.items()) keys.insert(item.key());
            // With a constant learning rate after warmup, more steps continue the same run: only the end moves.
            const bool constant = savedSettings.value("cosine", true) == false && settings.value("cosine", true) == false;
            const int64_t done = header.value("step", int64_t(0));
            for (const auto& key : keys) {
                if (key == "steps" && constant && done <= settings.value("steps", int64_t(0))) continue;
                const nlohmann::json a = savedSettings.value(key, nlohmann::json()), b = settings.value(key, nlohmann::json());
                if (a != b) differs.push_back(key + " differs (checkpoint " + a.dump() + ", this run " + b.dump() + ")");
            }
        } else if (savedSettings != settings) {
            differs.push_back("the settings differ");
        }
        auto part = [&](const char* key, const char* what) {
            if (saved.value(key, nlohmann::json()) != mRun.value(key, nlohmann::json())) differs.push_back(what);
        };
        const bool otherStart = saved.value("student", nlohmann::json()) != mRun.value("student", nlohmann::json());
        part("student", "the starting weights differ (another model, or other steps before the distillation)");
        part("teacher", "the teacher differs");
        part("data", "the training windows differ (other calibration text, samples, sequence length or seed)");
        if (otherStart && differs.size() == 1 && acceptOtherStart) {
            mNotes.push_back(path + " was resumed though this run started from other weights (resume_other_start): the "
                                    "checkpoint's trained values and optimizer state replace them, on this run's sparsity "
                                    "masks and quantization grids");
        } else if (!differs.empty()) {
            std::string list;
            for (const auto& d : differs) list += (list.empty() ? "" : "; ") + d;
            // Recomputing a GPU step before the distillation need not give the same bits: a way on for that case.
            const std::string onlyStart = otherStart && differs.size() == 1
                                              ? ", or set \"resume_other_start\": true to continue from it anyway (e.g. "
                                                "when a step before the distillation was recomputed, not bit for bit)"
                                              : "";
            throw Error(path, "was written by another distillation run: " + list +
                                  "; delete it, or set \"resume\": false, to start over" + onlyStart);
        }
    } else if (!mRun.is_null()) {
        mNotes.push_back(path + " was written by an older build, which recorded no run to check it against: resumed "
                                "on trust that it is this run's");
    }
    const auto& tensors = header["tensors"];
    if (tensors.size() != mTrained.size())
        throw Error(path, "the checkpoint holds " + std::to_string(tensors.size()) + " tensors, this student trains " +
                              std::to_string(mTrained.size()) + " (another model or other settings)");
    c10::NoGradGuard noGrad;
    for (size_t i = 0; i < mTrained.size(); ++i) {
        TrainedTensor& t = mTrained[i];
        if (tensors[i]["name"] != t.name || tensors[i]["shape"].get<std::vector<int64_t>>() != t.latent.sizes().vec())
            throw Error(path, "checkpoint tensor " + tensors[i]["name"].get<std::string>() + " does not match the student's " + t.name);
        const bool savedScales = tensors[i].contains("scale_shape");
        if (savedScales != t.logScales.defined())
            throw Error(path, "checkpoint tensor " + t.name + (savedScales ? " has trained scales, this run keeps them fixed"
                                                                           : " has fixed scales, this run trains them") +
                                  " (train_scales differs)");
        if (savedScales && tensors[i]["scale_shape"].get<std::vector<int64_t>>() != t.logScales.sizes().vec())
            throw Error(path, "checkpoint scales of " + t.name + " do not match the student's");
        std::vector<at::Tensor*> parts = {&t.latent, &t.m, &t.v};
        if (savedScales) parts.insert(parts.end(), {&t.logScales, &t.scaleM, &t.scaleV});
        for (at::Tensor* part : parts) {
            at::Tensor cpu = at::empty(part->sizes(), at::kFloat);
            in.read(static_cast<char*>(cpu.data_ptr()), std::streamsize(cpu.numel() * 4));
            if (!in) throw Error(path, "the checkpoint is truncated");
            part->copy_(cpu);
        }
    }
    mStep = header["step"].get<int64_t>();
}

} // namespace cwb
