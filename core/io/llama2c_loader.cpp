// Reads llama2.c checkpoints: the legacy header (7 int32, a negative vocab_size meaning a separate
// classifier) and the version-1 fp32 export ("ak42" magic, 256-byte header). Weights are fp32 in run.c order.
#include <cstring>
#include <sys/stat.h>

#include "core/io/model_format.h"
#include "core/util/error.h"
#include "core/util/mapped_file.h"

namespace cwb {

namespace {

constexpr uint32_t kVersionedMagic = 0x616b3432;   // "ak42"

struct Header {
    int32_t dim, hiddenDim, layers, heads, kvHeads, vocab, seqLen;
};

bool fileExists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string folderOf(const std::string& path) {
    auto slash = path.rfind('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}

class Llama2cFormat : public ModelFormat {
public:
    std::string id() const override { return "llama2c"; }
    std::string displayName() const override { return "llama2.c checkpoint"; }

    bool canRead(const std::string& path) const override {
        if (path.size() < 4 || path.compare(path.size() - 4, 4, ".bin") != 0) return false;
        FILE* f = std::fopen(path.c_str(), "rb");
        if (!f) return false;
        int32_t h[7] = {};
        const bool ok = std::fread(h, sizeof(int32_t), 7, f) == 7;
        std::fclose(f);
        if (!ok) return false;
        if (static_cast<uint32_t>(h[0]) == kVersionedMagic) return true;
        // A tokenizer.bin starts with a small max_token_length and then floats; a checkpoint with 7 sane ints.
        return h[0] > 0 && h[1] > 0 && h[2] > 0 && h[3] > 0 && h[4] > 0 && h[5] != 0 && h[6] > 0;
    }

    std::unique_ptr<Model> read(const std::string& path, const LoadOptions& options) const override {
        auto file = MappedFile::open(path);
        ByteReader r(file->data(), file->size(), path);
        Header h{};
        int version = 0;
        bool shared = true;
        if (file->size() >= 4 && r.read<uint32_t>("magic") == kVersionedMagic) {
            version = r.read<int32_t>("version");
            if (version != 1)
                throw Error(path, "llama2.c export version " + std::to_string(version) +
                                      " is not supported (supported: legacy and version 1 fp32)");
            h = r.read<Header>("header");
            shared = r.read<uint8_t>("shared classifier flag") != 0;
            r.seek(256);
        } else {
            r.seek(0);
            h = r.read<Header>("header");
            shared = h.vocab > 0;
            if (h.vocab < 0) h.vocab = -h.vocab;
        }
        auto model = std::make_unique<Model>();
        model->path = path;
        ArchSpec& s = model->spec;
        s.family = Family::Llama;
        s.modelType = "llama";
        s.ropeStyle = RopeStyle::AdjacentPairs;
        s.hidden = h.dim;
        s.ffn = h.hiddenDim;
        s.layers = h.layers;
        s.heads = h.heads;
        s.kvHeads = h.kvHeads;
        s.vocab = h.vocab;
        s.context = h.seqLen;
        s.normEps = 1e-5;
        s.ropeTheta = 10000.0;
        s.tiedEmbeddings = shared;
        if (h.heads <= 0) throw Error(path, "header has n_heads = " + std::to_string(h.heads));
        s.headDim = h.dim / h.heads;
        s.validate(path);

        const int64_t L = s.layers, D = s.hidden, F = s.ffn, Q = s.heads * s.headDim, KV = s.kvHeads * s.headDim;
        auto take = [&](const std::string& name, std::vector<int64_t> shape) {
            TensorRecord t;
            t.name = name;
            t.shape = std::move(shape);
            t.type = ggml::Type::F32;
            t.bytes = static_cast<size_t>(t.elementCount()) * sizeof(float);
            t.data = r.take(t.bytes, ("tensor " + name).c_str());
            t.file = path;
            model->addTensor(std::move(t));
        };
        auto perLayer = [&](const std::string& suffix, std::vector<int64_t> shape) {
            for (int64_t l = 0; l < L; ++l) take(names::llamaLayer(l, suffix), shape);
        };
        if (version == 0) {
            take("model.embed_tokens.weight", {s.vocab, D});
            perLayer("input_layernorm.weight", {D});
            perLayer("self_attn.q_proj.weight", {Q, D});
            perLayer("self_attn.k_proj.weight", {KV, D});
            perLayer("self_attn.v_proj.weight", {KV, D});
            perLayer("self_attn.o_proj.weight", {D, Q});
            perLayer("post_attention_layernorm.weight", {D});
            perLayer("mlp.gate_proj.weight", {F, D});
            perLayer("mlp.down_proj.weight", {D, F});
            perLayer("mlp.up_proj.weight", {F, D});
            take("model.norm.weight", {D});
            r.skip(static_cast<size_t>(s.context) * s.headDim * sizeof(float));   // freq_cis_real and _imag
        } else {
            perLayer("input_layernorm.weight", {D});
            perLayer("post_attention_layernorm.weight", {D});
            take("model.norm.weight", {D});
            take("model.embed_tokens.weight", {s.vocab, D});
            perLayer("self_attn.q_proj.weight", {Q, D});
            perLayer("self_attn.k_proj.weight", {KV, D});
            perLayer("self_attn.v_proj.weight", {KV, D});
            perLayer("self_attn.o_proj.weight", {D, Q});
            perLayer("mlp.gate_proj.weight", {F, D});
            perLayer("mlp.down_proj.weight", {D, F});
            perLayer("mlp.up_proj.weight", {F, D});
        }
        if (!shared) take("lm_head.weight", {s.vocab, D});
        if (r.remaining() != 0)
            throw Error(path, std::to_string(r.remaining()) + " unexpected bytes after the last tensor "
                              "(header does not match the weights)");
        model->keepAlive(file);

        // A given .bin is read here with the checkpoint's vocabulary; other given kinds are loadModel's (applyTokenizerFile).
        const std::string& given = options.tokenizerPath;
        const bool givenBin = given.size() >= 4 && given.compare(given.size() - 4, 4, ".bin") == 0;
        std::string tokenizerPath = givenBin ? given : std::string();
        if (given.empty()) {
            for (const std::string& candidate : {folderOf(path) + "/tokenizer.bin",
                                                 folderOf(path) + "/tok" + std::to_string(s.vocab) + ".bin"})
                if (fileExists(candidate)) {
                    tokenizerPath = candidate;
                    break;
                }
        }
        if (!tokenizerPath.empty()) {
            model->tokenizer = loadLlama2cTokenizer(tokenizerPath, static_cast<int32_t>(s.vocab), givenBin);
            model->metadata["tokenizer"] = tokenizerPath;
        }
        model->metadata["llama2c_version"] = std::to_string(version);
        return model;
    }
};

} // namespace

std::unique_ptr<ModelFormat> makeLlama2cFormat() { return std::make_unique<Llama2cFormat>(); }

} // namespace cwb
