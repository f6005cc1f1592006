#include "core/model/model.h"

#include "core/util/error.h"

namespace cwb {

namespace names {
std::string llamaLayer(int64_t layer, const std::string& suffix) {
    return "model.layers." + std::to_string(layer) + "." + suffix;
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
    const TensorRecord& r = tensor(name);
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

int64_t Model::parameterCount() const {
    int64_t n = 0;
    for (const auto& kv : mTensors) n += kv.second.elementCount();
    return n;
}

size_t Model::storageBytes() const {
    size_t n = 0;
    for (const auto& kv : mTensors) n += kv.second.bytes;
    return n;
}

void Model::validateTensors() const {
    const ArchSpec& s = spec;
    auto expect = [&](const std::string& name, std::vector<int64_t> shape) {
        const TensorRecord& r = tensor(name);
        if (r.shape != shape)
            throw Error(r.file.empty() ? path : r.file, "tensor '" + name + "' has shape " + shapeText(r.shape) +
                                                            ", expected " + shapeText(shape));
    };
    const int64_t q = s.heads * s.headDim, kv = s.kvHeads * s.headDim;
    if (s.family == Family::Llama) {
        expect("model.embed_tokens.weight", {s.vocab, s.hidden});
        for (int64_t l = 0; l < s.layers; ++l) {
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
            expect(names::llamaLayer(l, "mlp.gate_proj.weight"), {s.ffn, s.hidden});
            expect(names::llamaLayer(l, "mlp.up_proj.weight"), {s.ffn, s.hidden});
            expect(names::llamaLayer(l, "mlp.down_proj.weight"), {s.hidden, s.ffn});
        }
        expect("model.norm.weight", {s.hidden});
        if (!s.tiedEmbeddings) expect("lm_head.weight", {s.vocab, s.hidden});
    } else {
        expect("transformer.wte.weight", {s.vocab, s.hidden});
        expect("transformer.wpe.weight", {s.context, s.hidden});
        for (int64_t l = 0; l < s.layers; ++l) {
            for (const char* norm : {"ln_1", "ln_2"}) {
                expect(names::gpt2Layer(l, std::string(norm) + ".weight"), {s.hidden});
                expect(names::gpt2Layer(l, std::string(norm) + ".bias"), {s.hidden});
            }
            expect(names::gpt2Layer(l, "attn.c_attn.weight"), {3 * s.hidden, s.hidden});
            expect(names::gpt2Layer(l, "attn.c_attn.bias"), {3 * s.hidden});
            expect(names::gpt2Layer(l, "attn.c_proj.weight"), {s.hidden, s.hidden});
            expect(names::gpt2Layer(l, "attn.c_proj.bias"), {s.hidden});
            expect(names::gpt2Layer(l, "mlp.c_fc.weight"), {s.ffn, s.hidden});
            expect(names::gpt2Layer(l, "mlp.c_fc.bias"), {s.ffn});
            expect(names::gpt2Layer(l, "mlp.c_proj.weight"), {s.hidden, s.ffn});
            expect(names::gpt2Layer(l, "mlp.c_proj.bias"), {s.hidden});
        }
        expect("transformer.ln_f.weight", {s.hidden});
        expect("transformer.ln_f.bias", {s.hidden});
        if (!s.tiedEmbeddings) expect("lm_head.weight", {s.vocab, s.hidden});
    }
}

} // namespace cwb
