// Hostile and broken model files: each must give a cwb::Error that names the file and the problem,
// never a crash. Every row builds one damaged file or folder.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <cmath>
#include <fstream>
#include <functional>

#include "core/io/gguf_file.h"
#include "core/io/model_format.h"
#include "core/io/safetensors.h"
#include "core/util/error.h"
#include "tests/support/synthetic_models.h"
#include "tests/support/test_paths.h"

using namespace cwb;
using namespace cwb::test;

namespace {

class Bytes {
public:
    template <typename T>
    Bytes& put(T v) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        data.insert(data.end(), p, p + sizeof(T));
        return *this;
    }
    Bytes& str(const std::string& s) {
        put<uint64_t>(s.size());
        data.insert(data.end(), s.begin(), s.end());
        return *this;
    }
    Bytes& raw(const std::string& s) {
        data.insert(data.end(), s.begin(), s.end());
        return *this;
    }
    void save(const std::string& path) const {
        std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
    }
    std::vector<uint8_t> data;
};

Bytes ggufHeader(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    Bytes b;
    b.data.reserve(64);   // GCC 12 warns (-Wstringop-overflow, a false positive) of an insert into the empty vector
    b.raw("GGUF").put<uint32_t>(version).put<uint64_t>(tensors).put<uint64_t>(kvs);
    return b;
}

// One F32 tensor info record.
void tensorInfo(Bytes& b, const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    b.str(name).put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (uint64_t n : ne) b.put<uint64_t>(n);
    b.put<uint32_t>(type).put<uint64_t>(offset);
}

void padTo(Bytes& b, size_t alignment) {
    while (b.data.size() % alignment) b.put<uint8_t>(0);
}

void writeText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string validSafetensors(const std::string& header, size_t dataBytes) {
    std::string s(8, '\0');
    uint64_t n = header.size();
    std::memcpy(&s[0], &n, 8);
    return s + header + std::string(dataBytes, '\0');
}

// Builds the damaged input under `dir` and returns the path to open.
using Builder = std::function<std::string(const QString& dir)>;

} // namespace

Q_DECLARE_METATYPE(Builder)

class TestHostileInputs : public QObject {
    Q_OBJECT
private slots:
    void refusedWithClearError_data();
    void refusedWithClearError();
    void nonFiniteWeightIsNamed_data();
    void nonFiniteWeightIsNamed();
    void damagedGgufTokenizerIsNamed_data();
    void damagedGgufTokenizerIsNamed();
};

void TestHostileInputs::refusedWithClearError_data() {
    QTest::addColumn<Builder>("build");
    QTest::addColumn<QString>("expected");
    auto file = [](const QString& dir, const char* name) { return (dir + "/" + name).toStdString(); };

    QTest::newRow("missing file") << Builder([=](const QString& d) { return file(d, "absent.gguf"); }) << "no such file";
    QTest::newRow("empty gguf") << Builder([=](const QString& d) {
        auto p = file(d, "empty.gguf"); Bytes().save(p); return p; }) << "too small";
    QTest::newRow("wrong magic") << Builder([=](const QString& d) {
        auto p = file(d, "magic.gguf"); Bytes().raw("GGMLxxxxxxxxxxxxxxxxxxxx").save(p); return p; }) << "wrong magic";
    QTest::newRow("unsupported version") << Builder([=](const QString& d) {
        auto p = file(d, "v7.gguf"); ggufHeader(0, 0, 7).save(p); return p; }) << "unsupported GGUF version 7";
    QTest::newRow("truncated header") << Builder([=](const QString& d) {
        auto p = file(d, "trunc.gguf"); Bytes b = ggufHeader(0, 1); b.str("general.architecture").put<uint32_t>(8).put<uint64_t>(5).raw("ll");
        b.save(p); return p; }) << "runs past the end";
    QTest::newRow("absurd string length") << Builder([=](const QString& d) {
        auto p = file(d, "strlen.gguf"); Bytes b = ggufHeader(0, 1); b.put<uint64_t>(uint64_t(1) << 62).raw(std::string(32, 'k'));
        b.save(p); return p; }) << "runs past the end";
    QTest::newRow("absurd tensor count") << Builder([=](const QString& d) {
        auto p = file(d, "count.gguf"); ggufHeader(uint64_t(1) << 60, 0).save(p); return p; }) << "more than the file can hold";
    QTest::newRow("absurd array length") << Builder([=](const QString& d) {
        auto p = file(d, "array.gguf"); Bytes b = ggufHeader(0, 1); b.str("a").put<uint32_t>(9).put<uint32_t>(4).put<uint64_t>(uint64_t(1) << 50);
        b.save(p); return p; }) << "array elements";
    QTest::newRow("unknown value type") << Builder([=](const QString& d) {
        auto p = file(d, "vtype.gguf"); Bytes b = ggufHeader(0, 1); b.str("k").put<uint32_t>(99).put<uint32_t>(0);
        b.save(p); return p; }) << "unknown value type 99";
    QTest::newRow("too many dimensions") << Builder([=](const QString& d) {
        auto p = file(d, "dims.gguf"); Bytes b = ggufHeader(1, 0); tensorInfo(b, "t", {1, 1, 1, 1, 1, 1, 1}, 0, 0);
        b.save(p); return p; }) << "7 dimensions";
    QTest::newRow("absurd dimension") << Builder([=](const QString& d) {
        auto p = file(d, "dim.gguf"); Bytes b = ggufHeader(1, 0); tensorInfo(b, "t", {uint64_t(1) << 41, 4}, 0, 0);
        b.save(p); return p; }) << "invalid dimension 2199023255552";
    QTest::newRow("absurd element count") << Builder([=](const QString& d) {
        auto p = file(d, "elements.gguf"); Bytes b = ggufHeader(1, 0); tensorInfo(b, "t", {uint64_t(1) << 40, 512}, 0, 0);
        b.save(p); return p; }) << "more elements than any model holds (1099511627776 x 512)";
    QTest::newRow("unknown tensor type") << Builder([=](const QString& d) {
        auto p = file(d, "ttype.gguf"); Bytes b = ggufHeader(1, 0); tensorInfo(b, "t", {4}, 999, 0);
        b.save(p); return p; }) << "unknown type id 999";
    QTest::newRow("tensor past end of file") << Builder([=](const QString& d) {
        auto p = file(d, "range.gguf"); Bytes b = ggufHeader(1, 0); tensorInfo(b, "t", {64}, 0, 0); padTo(b, 32);
        b.raw(std::string(16, 'x')); b.save(p); return p; }) << "runs past the end of the file";
    QTest::newRow("overlapping tensors") << Builder([=](const QString& d) {
        auto p = file(d, "overlap.gguf"); Bytes b = ggufHeader(2, 0); tensorInfo(b, "a", {16}, 0, 0); tensorInfo(b, "b", {16}, 0, 32);
        padTo(b, 32); b.raw(std::string(128, 'x')); b.save(p); return p; }) << "overlap";
    QTest::newRow("misaligned tensor offset") << Builder([=](const QString& d) {
        auto p = file(d, "align.gguf"); Bytes b = ggufHeader(1, 0); tensorInfo(b, "t", {4}, 0, 3);
        padTo(b, 32); b.raw(std::string(64, 'x')); b.save(p); return p; }) << "not aligned";
    QTest::newRow("gguf missing tensor") << Builder([=](const QString& d) {
        auto p = file(d, "notensor.gguf"); ArchSpec s = tinyLlamaSpec(); WeightMap w = randomWeights(s, 1);
        w.erase("model.layers.1.mlp.up_proj.weight"); writeGguf(p, s, w, ggml::Type::F32); return p; })
        << "tensor 'blk.1.ffn_up.weight' ('model.layers.1.mlp.up_proj.weight') is missing";   // as the file names it (user probe)
    QTest::newRow("gguf wrong shape") << Builder([=](const QString& d) {
        auto p = file(d, "shape.gguf"); ArchSpec s = tinyLlamaSpec(); WeightMap w = randomWeights(s, 1);
        w["model.layers.0.mlp.gate_proj.weight"] = at::zeros({47, 32}); writeGguf(p, s, w, ggml::Type::F32); return p; })
        << "tensor 'blk.0.ffn_gate.weight' ('model.layers.0.mlp.gate_proj.weight') has shape [47, 32], expected [48, 32]";
    QTest::newRow("safetensors header past end") << Builder([=](const QString& d) {
        writeText(file(d, "config.json"), R"({"model_type":"llama","hidden_size":32,"intermediate_size":48,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":64})");
        Bytes b; b.put<uint64_t>(1000).raw("{}"); b.save(file(d, "model.safetensors")); return d.toStdString(); })
        << "header length 1000 runs past the end";
    QTest::newRow("safetensors bad json") << Builder([=](const QString& d) {
        writeText(file(d, "config.json"), R"({"model_type":"llama","hidden_size":32,"intermediate_size":48,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":64})");
        writeText(file(d, "model.safetensors"), validSafetensors("{not json", 0)); return d.toStdString(); }) << "not valid JSON";
    QTest::newRow("safetensors unknown dtype") << Builder([=](const QString& d) {
        writeText(file(d, "config.json"), R"({"model_type":"llama","hidden_size":32,"intermediate_size":48,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":64})");
        writeText(file(d, "model.safetensors"), validSafetensors(R"({"w":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})", 8));
        return d.toStdString(); }) << "unsupported dtype 'Q9'";
    QTest::newRow("safetensors size mismatch") << Builder([=](const QString& d) {
        writeText(file(d, "config.json"), R"({"model_type":"llama","hidden_size":32,"intermediate_size":48,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":64})");
        writeText(file(d, "model.safetensors"), validSafetensors(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
        return d.toStdString(); }) << "byte range holds 8";
    QTest::newRow("safetensors offsets out of range") << Builder([=](const QString& d) {
        writeText(file(d, "config.json"), R"({"model_type":"llama","hidden_size":32,"intermediate_size":48,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":64})");
        writeText(file(d, "model.safetensors"), validSafetensors(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8));
        return d.toStdString(); }) << "lie outside";
    QTest::newRow("safetensors tensor named twice") << Builder([=](const QString& d) {
        writeText(file(d, "config.json"), R"({"model_type":"llama","hidden_size":32,"intermediate_size":48,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":64})");
        writeText(file(d, "model.safetensors"), validSafetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"w":"x"},"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16));
        return d.toStdString(); }) << "names tensor 'w' twice";
    QTest::newRow("safetensors offsets reversed") << Builder([=](const QString& d) {
        writeText(file(d, "config.json"), R"({"model_type":"llama","hidden_size":32,"intermediate_size":48,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":64})");
        writeText(file(d, "model.safetensors"), validSafetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8));
        return d.toStdString(); }) << "data_offsets [8, 0] end before they begin";
    // From a user probe: a GPT-2 config that asks for unscaled attention scores was run scaled; one whose heads do not
    // divide the width failed in LibTorch without naming the file; a model said untied without a head ran tied.
    QTest::newRow("gpt2 unscaled attention") << Builder([=](const QString& d) {
        writeText(file(d, "config.json"), R"({"model_type":"gpt2","n_embd":32,"n_layer":1,"n_head":4,"vocab_size":64,"scale_attn_weights":false})");
        return d.toStdString(); }) << "scale_attn_weights: false is not supported";
    QTest::newRow("gpt2 heads not dividing") << Builder([=](const QString& d) {
        writeText(file(d, "config.json"), R"({"model_type":"gpt2","n_embd":32,"n_layer":1,"n_head":3,"vocab_size":64})");
        return d.toStdString(); }) << "n_embd 32 is not a multiple of n_head 3";
    QTest::newRow("untied without head") << Builder([=](const QString& d) {
        ArchSpec s = tinyLlamaSpec(); s.tiedEmbeddings = false; WeightMap w = randomWeights(s, 1); w.erase("lm_head.weight");
        writeHfFolder(d.toStdString(), s, w, ggml::Type::F32, 1); return d.toStdString(); })
        << "tie_word_embeddings: false, but no shard holds lm_head.weight";
    // The folder's own tokenizer is held to what a --tokenizer file is: ids past the embedding fail at load, not at the
    // first text that produces one; two pieces with one id are refused.
    QTest::newRow("tokenizer past the embedding") << Builder([=](const QString& d) {
        ArchSpec s = tinyLlamaSpec(); writeHfFolder(d.toStdString(), s, randomWeights(s, 1), ggml::Type::F32, 1);
        writeText(file(d, "tokenizer.json"), R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"c":100},"merges":[]}})");
        return d.toStdString(); }) << "the tokenizer's vocabulary has 'c' at id 100, past the model's embedding of 64 rows";
    QTest::newRow("tokenizer ids shared") << Builder([=](const QString& d) {
        ArchSpec s = tinyLlamaSpec(); writeHfFolder(d.toStdString(), s, randomWeights(s, 1), ggml::Type::F32, 1);
        writeText(file(d, "tokenizer.json"), R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"c":1},"merges":[]}})");
        return d.toStdString(); }) << "have the same id 1";
    QTest::newRow("gguf heads not dividing") << Builder([=](const QString& d) {
        auto p = file(d, "heads3.gguf"); ArchSpec s = tinyGpt2Spec(); WeightMap w = randomWeights(s, 1); s.heads = 3; s.kvHeads = 3;
        writeGguf(p, s, w, ggml::Type::F32); return p; })
        << "embedding_length 32 is not a multiple of attention.head_count 3";
    QTest::newRow("gguf zero width") << Builder([=](const QString& d) {
        auto p = file(d, "width0.gguf"); ArchSpec s = tinyLlamaSpec(); WeightMap w = randomWeights(s, 1); s.hidden = 0;
        writeGguf(p, s, w, ggml::Type::F32); return p; })
        << "embedding_length must be positive, got 0";
    QTest::newRow("missing shard") << Builder([=](const QString& d) {
        ArchSpec s = tinyLlamaSpec(); writeHfFolder(d.toStdString(), s, randomWeights(s, 1), ggml::Type::F32, 2);
        QFile::remove(d + "/model-00002-of-00002.safetensors"); return d.toStdString(); }) << "which is missing";
    QTest::newRow("unsupported model_type") << Builder([=](const QString& d) {
        writeText(file(d, "config.json"), R"({"model_type":"mamba"})"); return d.toStdString(); }) << "'mamba' is not supported";
    QTest::newRow("config not json") << Builder([=](const QString& d) {
        writeText(file(d, "config.json"), "{\"model_type\": "); return d.toStdString(); }) << "not valid JSON";
    QTest::newRow("config missing field") << Builder([=](const QString& d) {
        writeText(file(d, "config.json"), R"({"model_type":"llama","hidden_size":32})"); return d.toStdString(); })
        << "'intermediate_size' is missing";
    QTest::newRow("absurd config dimension") << Builder([=](const QString& d) {
        writeText(file(d, "config.json"), R"({"model_type":"llama","hidden_size":32,"intermediate_size":48,"num_hidden_layers":100000,"num_attention_heads":4,"vocab_size":64})");
        SafetensorsWriter().write(file(d, "model.safetensors")); return d.toStdString(); })
        << "invalid layer count";
    QTest::newRow("llama2c truncated") << Builder([=](const QString& d) {
        auto p = file(d, "model.bin"); Bytes b; for (int32_t v : {64, 172, 5, 8, 4, 512, 512}) b.put<int32_t>(v);
        b.raw(std::string(1000, '\0')); b.save(p); return p; }) << "truncated";
    QTest::newRow("llama2c trailing bytes") << Builder([=](const QString& d) {
        auto p = file(d, "model.bin"); Bytes b; for (int32_t v : {8, 8, 1, 2, 2, 4, 2}) b.put<int32_t>(v);
        // embedding 4x8, one layer (norm 8, q/k/v/o 4 x 64, norm 8, w1/w2/w3 3 x 64), final norm 8,
        // freq_cis 2 x 4: 512 floats; then 5 floats too many.
        const size_t floats = 32 + 8 + 4 * 64 + 8 + 3 * 64 + 8 + 8 + 5;
        b.raw(std::string(floats * 4, '\0')); b.save(p); return p; }) << "unexpected bytes";
}

void TestHostileInputs::refusedWithClearError() {
    QFETCH(Builder, build);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    const std::string path = build(dir.path());
    try {
        loadModel(path);
        QFAIL("loading succeeded; expected an error");
    } catch (const Error& e) {
        const QString message = QString::fromUtf8(e.what());
        QVERIFY2(message.contains(QString::fromStdString(path)) || message.contains(dir.path()),
                 qPrintable("message does not name the file: " + message));
        QVERIFY2(message.contains(expected), qPrintable("message '" + message + "' lacks '" + expected + "'"));
    }
}

void TestHostileInputs::nonFiniteWeightIsNamed_data() {
    QTest::addColumn<QString>("recipe");
    QTest::newRow("rtn") << R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32}}]})";
    QTest::newRow("gptq") << R"({"steps":[{"method":"quantize.gptq","params":{"bits":4,"group_size":32}}]})";
    QTest::newRow("awq") << R"({"steps":[{"method":"quantize.awq","params":{"bits":4,"group_size":32}}]})";
}

// Regression (user probe): one NaN in a GGUF's blk.0.attn_q gave "quantize: the weight has non-finite values",
// naming neither the file nor the tensor.
void TestHostileInputs::nonFiniteWeightIsNamed() {
    QFETCH(QString, recipe);
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/nan.gguf").toStdString();
    const ArchSpec spec = packableLlamaSpec();
    WeightMap weights = randomWeights(spec, 3);
    weights["model.layers.1.self_attn.q_proj.weight"][5][7] = std::nan("");
    writeGguf(path, spec, weights, ggml::Type::F32);
    const auto model = loadModel(path);
    try {
        compressWithRecipe(*model, recipe.toStdString());
        QFAIL("compressing succeeded; expected an error");
    } catch (const Error& e) {
        QCOMPARE(QString::fromStdString(e.file()), QString::fromStdString(path));
        QVERIFY2(QString(e.what()).contains("step 1 (quantize.") &&
                     QString(e.what()).contains("tensor 'blk.1.attn_q.weight' ('model.layers.1.self_attn.q_proj.weight') has "
                                                "NaN or infinite values"),
                 e.what());
    }
}

void TestHostileInputs::damagedGgufTokenizerIsNamed_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<int>("index");   // an array element to change; -1 for a scalar key
    QTest::addColumn<double>("value");
    QTest::addColumn<QString>("said");
    QTest::newRow("bos") << "tokenizer.ggml.bos_token_id" << -1 << 9999.0
                         << "tokenizer.ggml.bos_token_id is 9999, outside the vocabulary of 512 tokens";
    QTest::newRow("unknown") << "tokenizer.ggml.unknown_token_id" << -1 << 700.0
                             << "tokenizer.ggml.unknown_token_id is 700, outside the vocabulary of 512 tokens";
    QTest::newRow("token type") << "tokenizer.ggml.token_type" << 5 << 99.0 << "tokenizer.ggml.token_type[5] is 99, not a token type (0..6)";
    QTest::newRow("score") << "tokenizer.ggml.scores" << 300 << double(NAN) << "tokenizer.ggml.scores[300] is NaN";
}

// Regression (user probe): a GGUF with a damaged tokenizer key said "BOS id 9999 is out of range", naming neither the
// file nor the key, and `cwb info` could not show the model at all. The model now loads without a tokenizer and says
// why; the weights are as the undamaged file's.
void TestHostileInputs::damagedGgufTokenizerIsNamed() {
    QFETCH(QString, key);
    QFETCH(int, index);
    QFETCH(double, value);
    QFETCH(QString, said);
    CWB_REQUIRE_FIXTURE(source, "models/stories260K.gguf");
    const GgufFile in = GgufFile::open(source.toStdString());
    GgufWriter out;
    for (const auto& name : in.metadataOrder) {
        GgufValue v = in.metadata.at(name);
        if (name == key.toStdString()) {
            if (index < 0) v.value = int64_t(value);
            else if (v.elementType == GgufValueType::Float32) v.value[size_t(index)] = value;
            else v.value[size_t(index)] = int64_t(value);
        }
        if (name != "general.alignment") out.add(name, v);
    }
    for (const auto& t : in.tensors) {
        const uint8_t* data = in.tensorData(t);
        out.addTensor(t.name, t.type, t.ne, std::vector<uint8_t>(data, data + t.bytes));
    }
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/damaged.gguf").toStdString();
    out.write(path);
    try {
        loadGgufTokenizer(path);   // as --tokenizer FILE: refused, naming the file and the key
        QFAIL("the damaged tokenizer was read");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).startsWith(QString::fromStdString(path) + ": " + said), e.what());
    }
    const auto model = loadModel(path);
    QVERIFY(!model->tokenizer);
    const QString note = QString::fromStdString(model->metadata.at("tokenizer_note"));
    QVERIFY2(note.startsWith("no tokenizer: " + QString::fromStdString(path) + ": " + said), qPrintable(note));
    const auto intact = loadModel(source.toStdString());
    QVERIFY(at::equal(model->floatTensor("model.layers.0.self_attn.q_proj.weight"),
                      intact->floatTensor("model.layers.0.self_attn.q_proj.weight")));
}

QTEST_APPLESS_MAIN(TestHostileInputs)
#include "test_hostile_inputs.moc"
