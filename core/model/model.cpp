#include "core/model/model.h"

#include <algorithm>
#include <set>

#include "core/model/compressed_linear.h"
#include "core/util/error.h"
#include "core/util/scratch_file.h"

namespace cwb {

namespace names {
std::string llamaLayer(int64_t layer, const std::string& suffix) {
    return "model.layers." + std::to_string(layer) + "." + suffix;
}
std::string embedding(Family family) {
    return family == Family::Llama ? "model.embed_tokens.weight" : "transformer.wte.weight";
}
std::string gpt2Layer(int64_t layer, const std::string& suffix) {
    return "transformer.h." + std::to_string(layer) + "." + suffix;
}
} // namespace names

int64_t TensorRecord::elementCount() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

static std::string shapeText(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

bool Model::has(const std::string& name) const { return mTensors.count(name) != 0; }

const TensorRecord& Model::tensor(const std::string& name) const {
    auto it = mTensors.find(name);
    if (it == mTensors.end()) throw Error(path, "tensor '" + name + "' is missing");
    return it->second;
}

void Model::addTensor(TensorRecord record) {
    const std::string& where = record.file.empty() ? path : record.file;
    if (record.shape.empty() || record.shape.size() > 4)
        throw Error(where, "tensor '" + record.name + "' has " + std::to_string(record.shape.size()) +
                               " dimensions (expected 1 to 4)");
    int64_t count = 1;
    for (int64_t d : record.shape) {
        if (d <= 0 || d > (int64_t(1) << 40) || count > (int64_t(1) << 40) / d)
            throw Error(where, "tensor '" + record.name + "' has an invalid shape " + shapeText(record.shape));
        count *= d;
    }
    const ggml::TypeTraits* traits = ggml::traits(static_cast<uint32_t>(record.type));
    if (!traits) throw Error(where, "tensor '" + record.name + "' has an unknown type");
    const int64_t rowLength = record.storedTransposed ? record.shape.front() : record.shape.back();
    if (rowLength % traits->blockSize != 0)
        throw Error(where, "tensor '" + record.name + "' row length " + std::to_string(rowLength) +
                               " is not a multiple of the " + traits->name + " block size " +
                               std::to_string(traits->blockSize));
    const size_t expected = static_cast<size_t>(count / traits->blockSize) * traits->typeSize;
    if (expected != record.bytes)
        throw Error(where, "tensor '" + record.name + "' of shape " + shapeText(record.shape) + " and type " +
                               traits->name + " needs " + std::to_string(expected) + " bytes but has " +
                               std::to_string(record.bytes));
    if (mTensors.count(record.name)) throw Error(where, "tensor '" + record.name + "' appears twice");
    mOrder.push_back(record.name);
    std::string name = record.name;
    mTensors.emplace(std::move(name), std::move(record));
}

at::Tensor Model::floatTensor(const std::string& name) const {
    static const std::string suffix = ".weight";
    if (!mCompressed.empty() && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        auto it = mCompressed.find(name.substr(0, name.size() - suffix.size()));
        if (it != mCompressed.end()) return it->second->effectiveWeight().contiguous().clone();
    }
    const TensorRecord& r = tensor(name);
    if (r.packedOnly) throw Error(path, "internal: tensor '" + name + "' has no dense data and no compressed layer");
    std::vector<int64_t> stored = r.shape;
    if (r.storedTransposed && stored.size() == 2) std::swap(stored[0], stored[1]);
    void* raw = const_cast<uint8_t*>(r.data);
    at::Tensor result;
    switch (r.type) {
    case ggml::Type::F32:
        result = at::from_blob(raw, stored, at::kFloat).clone();
        break;
    case ggml::Type::F16:
        result = at::from_blob(raw, stored, at::kHalf).to(at::kFloat);
        break;
    case ggml::Type::BF16:
        result = at::from_blob(raw, stored, at::kBFloat16).to(at::kFloat);
        break;
    default:
        result = at::empty(stored, at::kFloat);
        ggml::dequantize(r.type, r.data, result.data_ptr<float>(), r.elementCount());
        break;
    }
    if (r.storedTransposed && stored.size() == 2) result = result.t().contiguous();
    return result;
}

Error Model::computeError(const std::string& message) const {
    if (!derived) return Error(path, message);
    return Error((path.empty() ? std::string("a variant built in memory") : "a variant built from " + path) + ": " + message);
}

std::unique_ptr<Model> Model::clone() const {
    auto copy = std::make_unique<Model>();
    copy->spec = spec;
    copy->path = path;
    copy->derived = true;
    copy->format = format;
    copy->tokenizer = tokenizer;
    copy->metadata = metadata;
    copy->mTensors = mTensors;
    copy->mOrder = mOrder;
    copy->mOwners = mOwners;
    copy->mCompressed = mCompressed;
    copy->mScratch = mScratch;
    return copy;
}

void Model::replaceTensor(const std::string& name, const at::Tensor& value) {
    auto owned = std::make_shared<at::Tensor>(mScratch ? mScratch->store(value) : value.to(at::kCPU).contiguous().clone());
    TensorRecord r;
    r.name = name;
    r.shape = owned->sizes().vec();
    switch (owned->scalar_type()) {
    case at::kFloat: r.type = ggml::Type::F32; break;
    case at::kHalf: r.type = ggml::Type::F16; break;
    case at::kBFloat16: r.type = ggml::Type::BF16; break;
    default: throw Error(path, "tensor '" + name + "' can only be replaced by an f32, f16 or bf16 tensor");
    }
    r.data = static_cast<const uint8_t*>(owned->data_ptr());
    r.bytes = static_cast<size_t>(owned->numel()) * owned->element_size();
    r.file = mScratch ? "(scratch file in " + mScratch->directory() + ")" : "(in memory)";
    r.owner = owned;
    auto it = mTensors.find(name);
    if (it != mTensors.end()) {
        const TensorRecord& old = it->second;
        const bool oldQuantized = old.type != ggml::Type::F32 && old.type != ggml::Type::F16 && old.type != ggml::Type::BF16;
        r.quantizedSource = oldQuantized && !old.packedOnly ? std::optional<ggml::Type>(old.type) : old.quantizedSource;
    }
    if (it == mTensors.end()) {
        mOrder.push_back(name);
        mTensors.emplace(name, std::move(r));
    } else {
        it->second = std::move(r);
    }
    static const std::string suffix = ".weight";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        mCompressed.erase(name.substr(0, name.size() - suffix.size()));   // a dense replacement supersedes compression
}

static bool isWeightName(const std::string& name) {
    return name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
}

void Model::removeTensor(const std::string& name) {
    if (!mTensors.erase(name)) throw Error(path, "tensor '" + name + "' is missing");
    mOrder.erase(std::find(mOrder.begin(), mOrder.end(), name));
    if (isWeightName(name)) mCompressed.erase(name.substr(0, name.size() - 7));
}

void Model::renameTensor(const std::string& from, const std::string& to) {
    auto it = mTensors.find(from);
    if (it == mTensors.end()) throw Error(path, "tensor '" + from + "' is missing");
    if (mTensors.count(to)) throw Error(path, "tensor '" + to + "' already exists");
    if (it->second.packedOnly && !(isWeightName(from) && isWeightName(to)))
        throw Error(path, "internal: packed weight '" + from + "' can only be renamed to another layer's weight");
    TensorRecord r = std::move(it->second);
    r.name = to;
    mTensors.erase(it);
    mTensors.emplace(to, std::move(r));
    *std::find(mOrder.begin(), mOrder.end(), from) = to;
    if (isWeightName(from) && isWeightName(to)) {
        auto c = mCompressed.find(from.substr(0, from.size() - 7));
        if (c != mCompressed.end()) {
            auto linear = c->second;
            mCompressed.erase(c);
            mCompressed[to.substr(0, to.size() - 7)] = linear;
        }
    }
}

std::vector<std::string> Model::differingTensors(const Model& other) const {
    std::set<std::string> differing;
    const auto sameRecord = [](const TensorRecord& a, const TensorRecord& b) {
        return a.data == b.data && a.bytes == b.bytes && a.type == b.type && a.shape == b.shape &&
               a.storedTransposed == b.storedTransposed && a.packedOnly == b.packedOnly;
    };
    for (const auto& [name, record] : mTensors) {
        auto it = other.mTensors.find(name);
        if (it == other.mTensors.end() || !sameRecord(record, it->second)) differing.insert(name);
    }
    for (const auto& [name, record] : other.mTensors)
        if (!mTensors.count(name)) differing.insert(name);
    for (const Model* side : {this, &other})
        for (const auto& [layer, linear] : side->mCompressed)
            if (compressed(layer) != other.compressed(layer)) differing.insert(layer + ".weight");
    return {differing.begin(), differing.end()};
}

void Model::adoptTensor(const Model& other, const std::string& name) {
    auto theirs = other.mTensors.find(name);
    const bool weight = isWeightName(name);
    const std::string layer = weight ? name.substr(0, name.size() - 7) : "";
    if (theirs == other.mTensors.end()) {
        if (mTensors.count(name)) removeTensor(name);
        return;
    }
    if (!mTensors.count(name)) mOrder.push_back(name);
    mTensors[name] = theirs->second;
    if (!weight) return;
    if (auto linear = other.compressed(layer)) mCompressed[layer] = linear;
    else mCompressed.erase(layer);
}

void Model::setCompressed(const std::string& layer, std::shared_ptr<const CompressedLinear> linear) {
    const TensorRecord& r = tensor(layer + ".weight");
    if (r.shape.size() != 2 || linear->rows() != r.shape[0] || linear->cols() != r.shape[1])
        throw Error(path, "compressed layer '" + layer + "' does not match the shape of its weight");
    if (mScratch)
        if (auto moved = linear->relocated([this](const at::Tensor& t) { return mScratch->store(t); })) linear = std::move(moved);
    mCompressed[layer] = std::move(linear);
}

void Model::addPackedLayer(const std::string& layer, std::shared_ptr<const CompressedLinear> linear, const std::string& file) {
    const std::string name = layer + ".weight";
    if (mTensors.count(name)) throw Error(file, "tensor '" + name + "' appears twice (dense and packed)");
    if (linear->rows() <= 0 || linear->cols() <= 0) throw Error(file, "packed layer '" + layer + "' is empty");
    TensorRecord r;
    r.name = name;
    r.shape = {linear->rows(), linear->cols()};
    r.type = ggml::Type::F32;   // what floatTensor gives
    r.file = file;
    r.packedOnly = true;
    mOrder.push_back(name);
    mTensors.emplace(name, std::move(r));
    setCompressed(layer, std::move(linear));
}

std::shared_ptr<const CompressedLinear> Model::compressed(const std::string& layer) const {
    auto it = mCompressed.find(layer);
    return it == mCompressed.end() ? nullptr : it->second;
}

std::vector<std::string> Model::linearLayers() const {
    std::vector<std::string> out;
    for (int64_t l = 0; l < spec.layers; ++l) {
        const std::string prefix = spec.family == Family::Llama ? names::llamaLayer(l, "") : names::gpt2Layer(l, "");
        for (const auto& name : mOrder) {
            if (name.compare(0, prefix.size(), prefix) != 0 || name.size() < 7) continue;
            if (name.compare(name.size() - 7, 7, ".weight") != 0) continue;
            const TensorRecord& r = mTensors.at(name);
            if (r.shape.size() == 2) out.push_back(name.substr(0, name.size() - 7));
        }
    }
    return out;
}

int64_t Model::parameterCount() const {
    int64_t n = 0;
    for (const auto& kv : mTensors) n += kv.second.elementCount();
    return n;
}

ggml::Type TensorRecord::storedType() const {
    if (!quantizedSource || shape.size() < 2 || shape.back() <= 0 || !ggml::isWritable(*quantizedSource)) return type;
    return ggml::fittingType(*quantizedSource, shape.back(), ggml::Type::F16);
}

size_t TensorRecord::storedBytes() const {
    const ggml::Type stored = storedType();
    if (stored == type) return bytes;
    return ggml::rowBytes(stored, shape.back()) * size_t(elementCount() / shape.back());
}

size_t Model::storageBytes() const {
    size_t n = 0;
    for (const auto& kv : mTensors) n += kv.second.storedBytes();
    for (const auto& [layer, linear] : mCompressed) {
        auto it = mTensors.find(layer + ".weight");
        if (it != mTensors.end()) n -= it->second.storedBytes();
        n += linear->storageBytes();
    }
    return n;
}

namespace {

// The tensors the forward pass of `s` reads, by name.
std::set<std::string> usedTensorNames(const ArchSpec& s) {
    std::set<std::string> used;
    if (s.family == Family::Llama) {
        used = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", "rope_freqs.weight"};
        for (int64_t l = 0; l < s.layers; ++l) {
            for (const char* t : {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                  "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                                  "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
                used.insert(names::llamaLayer(l, t));
            if (s.attentionBias)
                for (const char* t : {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"})
                    used.insert(names::llamaLayer(l, t));
        }
    } else {
        used = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight", "transformer.ln_f.bias", "lm_head.weight"};
        for (int64_t l = 0; l < s.layers; ++l)
            for (const char* t : {"ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                  "attn.c_proj.weight", "attn.c_proj.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                                  "mlp.c_proj.weight", "mlp.c_proj.bias"})
                used.insert(names::gpt2Layer(l, t));
    }
    return used;
}

} // namespace

void Model::dropOrRefuseUnusedTensors() {
    const std::set<std::string> used = usedTensorNames(spec);
    std::vector<std::string> zeroBiases;
    for (const auto& name : tensorNames()) {
        if (used.count(name)) continue;
        const TensorRecord& r = tensor(name);
        const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
        if (bias && r.data && !at::any(floatTensor(name) != 0).item<bool>()) {
            zeroBiases.push_back(name);
            continue;
        }
        throw Error(r.file.empty() ? path : r.file,
                    "tensor '" + name + "' is not one the " + std::string(spec.family == Family::Llama ? "Llama" : "GPT-2") +
                        "-family forward pass computes with (" + std::to_string(spec.layers) +
                        " layers; attention biases on q/k/v only, none on o_proj or the MLP); ignoring it would change what "
                        "the model computes");
    }
    for (const auto& name : zeroBiases) removeTensor(name);
    if (!zeroBiases.empty())
        metadata["dropped_tensors"] = std::to_string(zeroBiases.size()) + " bias tensors that are all zero and that the forward "
                                      "pass does not compute (e.g. " + zeroBiases.front() + ")";
}

void Model::validateTensors(const std::function<std::string(const std::string&)>& nameInFile) const {
    const ArchSpec& s = spec;
    auto named = [&](const std::string& name) {
        const std::string spelt = nameInFile ? nameInFile(name) : std::string();
        return spelt.empty() || spelt == name ? "tensor '" + name + "'" : "tensor '" + spelt + "' ('" + name + "')";
    };
    auto expect = [&](const std::string& name, std::vector<int64_t> shape) {
        if (!has(name)) throw Error(path, named(name) + " is missing");
        const TensorRecord& r = tensor(name);
        if (r.shape != shape)
            throw Error(r.file.empty() ? path : r.file, named(name) + " has shape " + shapeText(r.shape) +
                                                            ", expected " + shapeText(shape));
    };
    if (s.family == Family::Llama) {
        expect("model.embed_tokens.weight", {s.vocab, s.hidden});
        for (int64_t l = 0; l < s.layers; ++l) {
            const int64_t q = s.headsAt(l) * s.headDim, kv = s.kvHeadsAt(l) * s.headDim, ffn = s.ffnAt(l);
            expect(names::llamaLayer(l, "input_layernorm.weight"), {s.hidden});
            expect(names::llamaLayer(l, "self_attn.q_proj.weight"), {q, s.hidden});
            expect(names::llamaLayer(l, "self_attn.k_proj.weight"), {kv, s.hidden});
            expect(names::llamaLayer(l, "self_attn.v_proj.weight"), {kv, s.hidden});
            expect(names::llamaLayer(l, "self_attn.o_proj.weight"), {s.hidden, q});
            if (s.attentionBias) {
                expect(names::llamaLayer(l, "self_attn.q_proj.bias"), {q});
                expect(names::llamaLayer(l, "self_attn.k_proj.bias"), {kv});
                expect(names::llamaLayer(l, "self_attn.v_proj.bias"), {kv});
            }
            expect(names::llamaLayer(l, "post_attention_layernorm.weight"), {s.hidden});
            expect(names::llamaLayer(l, "mlp.gate_proj.weight"), {ffn, s.hidden});
            expect(names::llamaLayer(l, "mlp.up_proj.weight"), {ffn, s.hidden});
            expect(names::llamaLayer(l, "mlp.down_proj.weight"), {s.hidden, ffn});
        }
        expect("model.norm.weight", {s.hidden});
        if (!s.tiedEmbeddings) expect("lm_head.weight", {s.vocab, s.hidden});
    } else {
        expect("transformer.wte.weight", {s.vocab, s.hidden});
        expect("transformer.wpe.weight", {s.context, s.hidden});
        for (int64_t l = 0; l < s.layers; ++l) {
            const int64_t ffn = s.ffnAt(l);
            for (const char* norm : {"ln_1", "ln_2"}) {
                expect(names::gpt2Layer(l, std::string(norm) + ".weight"), {s.hidden});
                expect(names::gpt2Layer(l, std::string(norm) + ".bias"), {s.hidden});
            }
            expect(names::gpt2Layer(l, "attn.c_attn.weight"), {3 * s.hidden, s.hidden});
            expect(names::gpt2Layer(l, "attn.c_attn.bias"), {3 * s.hidden});
            expect(names::gpt2Layer(l, "attn.c_proj.weight"), {s.hidden, s.hidden});
            expect(names::gpt2Layer(l, "attn.c_proj.bias"), {s.hidden});
            expect(names::gpt2Layer(l, "mlp.c_fc.weight"), {ffn, s.hidden});
            expect(names::gpt2Layer(l, "mlp.c_fc.bias"), {ffn});
            expect(names::gpt2Layer(l, "mlp.c_proj.weight"), {s.hidden, ffn});
            expect(names::gpt2Layer(l, "mlp.c_proj.bias"), {s.hidden});
        }
        expect("transformer.ln_f.weight", {s.hidden});
        expect("transformer.ln_f.bias", {s.hidden});
        if (!s.tiedEmbeddings) expect("lm_head.weight", {s.vocab, s.hidden});
    }
}

} // namespace cwb
