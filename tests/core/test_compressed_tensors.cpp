// compressed-tensors folders (core/export/ct_layout): variants exported as pack-, float-, naive- and
// int-quantized reload to the same integers, codes and scales and compute the same logits; the packed words and
// zero points equal a bit-by-bit packing done here by hand; config groups and targets follow the format
// (one group per scheme, "Linear" or layer names, lm_head ignored); what the format cannot hold is refused with
// the reason; damaged or unsupported checkpoints are refused naming the folder and the problem.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <filesystem>
#include <cstring>
#include <fstream>

#include "core/compress/compressed_layers.h"
#include "core/compress/pipeline.h"
#include "core/export/ct_layout.h"
#include "core/export/export_format.h"
#include "core/io/model_format.h"
#include "core/io/safetensors.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "tests/support/synthetic_models.h"

using namespace cwb;
using namespace cwb::test;
using json = nlohmann::json;

namespace {

// Rows a multiple of 32 ("hf", "gguf") or not ("hf-odd": an MLP of 172, stories260K's), two layers, GQA.
std::unique_ptr<Model> syntheticModel(const QString& dir, const QString& kind) {
    ArchSpec spec = tinyLlamaSpec();
    spec.hidden = 64;
    spec.headDim = 16;
    spec.heads = 4;
    spec.kvHeads = 2;
    spec.ffn = kind == "hf-odd" ? 172 : 128;
    if (kind == "gpt2") spec = tinyGpt2Spec();
    const WeightMap w = randomWeights(spec, 11);
    std::string path = (dir + "/src-" + kind).toStdString();
    if (kind == "gguf") {
        writeGguf(path += ".gguf", spec, w, ggml::Type::F32);
    } else {
        std::filesystem::create_directories(path);
        writeHfFolder(path, spec, w, ggml::Type::F32);
    }
    return loadModel(path);
}

std::unique_ptr<Model> compressed(const Model& base, const std::string& recipe) { return compressWithRecipe(base, recipe); }

// A variant of a synthetic model exported as compressed-tensors into `folder` (f16 dense tensors unless asked).
std::unique_ptr<Model> exportedVariant(const QString& dir, const QString& kind, const std::string& recipe,
                                       const std::string& folder, const ExportOptions& options = {}) {
    auto base = syntheticModel(dir, kind);
    auto variant = compressed(*base, recipe);
    exportModel(*variant, "compressed-tensors", folder, options);
    return variant;
}

// Every linear layer as W8A8 with no smoothing (s = 1): what an int-quantized checkpoint holds.
std::unique_ptr<Model> w8a8Variant(const Model& base) {
    auto model = base.clone();
    for (const auto& layer : model->linearLayers()) {
        const at::Tensor w = model->floatTensor(layer + ".weight");
        model->setCompressed(layer, std::make_shared<W8A8Linear>(quant::quantizeInt8PerChannel(w), at::ones({w.size(1)})));
    }
    return model;
}


json configOf(const std::string& folder) { return json::parse(std::ifstream(folder + "/config.json")); }

// Rewrites one tensor of a folder's model.safetensors (or drops it, or adds one) and leaves the rest as they are.
void rewriteTensors(const std::string& folder, const std::function<void(SafetensorsWriter&, const SafetensorsEntry&)>& each) {
    const std::string file = folder + "/model.safetensors";
    SafetensorsWriter writer;
    const SafetensorsFile st = SafetensorsFile::open(file);   // mapped until written: the writer reads from it
    for (const auto& e : st.entries) each(writer, e);
    writer.write(file);   // to a temporary file renamed into place, so the mapping stays valid
}

void copyEntry(SafetensorsWriter& writer, const SafetensorsEntry& e) {
    writer.add(e.name, e.type, e.shape, e.bytes, [&e] { return std::vector<uint8_t>(e.data, e.data + e.bytes); },
               e.dtype == "I8" ? "" : e.dtype);
}

} // namespace

class TestCompressedTensors : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { at::manual_seed(0); }
    void roundTrip_data();
    void roundTrip();
    void packedBitsByHand();
    void fp8BytesAsWritten();
    void fp8NanCodesRefused();
    void configGroups();
    void targetMatching();
    void threeBitStreamReads();
    void packedLayersHoldNoDenseCopy();
    void zeroZeroPointBesideSymmetricWeights_data();
    void zeroZeroPointBesideSymmetricWeights();
    void quantizedHeadIsReadPacked();
    void refusals_data();
    void refusals();
    void hostileCheckpoints_data();
    void hostileCheckpoints();
};

void TestCompressedTensors::roundTrip_data() {
    QTest::addColumn<QString>("source");
    QTest::addColumn<QString>("recipe");   // "w8a8": every layer W8A8 with s = 1
    QTest::addColumn<QString>("format");   // top-level format of the written config
    QTest::newRow("int4 g32 sym") << "hf" << R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32}}]})" << "pack-quantized";
    QTest::newRow("int4 g4 asym, MLP 172 (partial words, zero points)") << "hf-odd" << R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":4,"scheme":"asym"}}]})" << "pack-quantized";
    QTest::newRow("int8 per channel asym") << "hf" << R"({"steps":[{"method":"quantize.rtn","params":{"bits":8,"granularity":"channel","scheme":"asym"}}]})" << "pack-quantized";
    QTest::newRow("int4 per tensor") << "hf" << R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"granularity":"tensor"}}]})" << "pack-quantized";
    QTest::newRow("int2 g16 sym (gptq)") << "hf" << R"({"steps":[{"method":"quantize.gptq","params":{"bits":2,"group_size":16}}]})" << "pack-quantized";
    QTest::newRow("gptq int4 g32 act_order, static groups") << "hf" << R"({"steps":[{"method":"quantize.gptq","params":{"bits":4,"group_size":32,"act_order":true,"static_groups":true}}]})" << "pack-quantized";
    QTest::newRow("awq int4 g32 folded") << "hf" << R"({"steps":[{"method":"quantize.awq","params":{"bits":4,"group_size":32,"fold":true}}]})" << "pack-quantized";
    QTest::newRow("fp8 per channel, dynamic activations") << "hf" << R"({"steps":[{"method":"quantize.fp8","params":{"scale":"channel","activations":"dynamic"}}]})" << "float-quantized";
    QTest::newRow("fp8 per tensor, weight only") << "hf" << R"({"steps":[{"method":"quantize.fp8","params":{"scale":"tensor"}}]})" << "naive-quantized";
    QTest::newRow("w8a8 int-quantized") << "hf" << "w8a8" << "int-quantized";
    QTest::newRow("smoothquant folded into the norms") << "hf" << R"({"steps":[{"method":"quantize.smoothquant","params":{"fold":true}}]})" << "int-quantized";
    QTest::newRow("mixed bits: layer 0 int8") << "hf" << R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32},"overrides":[{"pattern":"layers\\.0\\.","params":{"bits":8}}]}]})" << "pack-quantized";
    QTest::newRow("mixed formats: mlp fp8, attention int4") << "hf" << R"({"steps":[{"method":"quantize.fp8","targets":"mlp","params":{"activations":"dynamic"}},{"method":"quantize.rtn","targets":"self_attn","params":{"bits":4,"group_size":32}}]})" << "mixed-precision";
    QTest::newRow("only the mlp quantized") << "hf" << R"({"steps":[{"method":"quantize.rtn","targets":"mlp","params":{"bits":4,"group_size":32}}]})" << "pack-quantized";
    QTest::newRow("int4 from gguf (q/k rows reordered)") << "gguf" << R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32,"scheme":"asym"}}]})" << "pack-quantized";
    QTest::newRow("fp8 from gguf (q/k rows reordered)") << "gguf" << R"({"steps":[{"method":"quantize.fp8","params":{"activations":"dynamic"}}]})" << "float-quantized";
}

void TestCompressedTensors::roundTrip() {
    QFETCH(QString, source);
    QFETCH(QString, recipe);
    QFETCH(QString, format);
    QTemporaryDir dir;
    auto base = syntheticModel(dir.path(), source);
    auto variant = recipe == "w8a8" ? w8a8Variant(*base) : compressed(*base, recipe.toStdString());
    const std::string out = (dir.path() + "/out").toStdString();
    ExportOptions options;
    options.tensorType = "f32";   // embeddings and norms unrounded, so the logits can be compared exactly
    const ExportReport report = exportModel(*variant, "compressed-tensors", out, options);
    const json qc = configOf(out)["quantization_config"];
    QCOMPARE(QString::fromStdString(qc["quant_method"].get<std::string>()), QString("compressed-tensors"));
    QCOMPARE(QString::fromStdString(qc["format"].get<std::string>()), format);
    QCOMPARE(QString::fromStdString(qc["quantization_status"].get<std::string>()), QString("compressed"));

    auto back = loadModel(out);
    int quantized = 0;
    for (const auto& layer : variant->linearLayers()) {
        const auto ours = variant->compressed(layer), theirs = back->compressed(layer);
        const QByteArray name = QByteArray::fromStdString(layer);
        if (!ours) {
            QVERIFY2(!theirs, name + " was dense and must stay dense");
            QVERIFY2(at::equal(back->floatTensor(layer + ".weight"), variant->floatTensor(layer + ".weight")) || source == "gguf", name);
            continue;
        }
        ++quantized;
        QVERIFY2(theirs, name + " did not load as a compressed layer");
        QCOMPARE(QString::fromStdString(theirs->kind()), QString::fromStdString(ours->kind()));
        if (source == "gguf") continue;   // q/k rows are in the other RoPE order there; the logits are compared below
        if (auto a = std::dynamic_pointer_cast<const IntLinear>(ours)) {
            auto b = std::dynamic_pointer_cast<const IntLinear>(theirs);
            QCOMPARE(b->quantized().spec.bits, a->quantized().spec.bits);
            QVERIFY2(at::equal(b->quantized().levels(), a->quantized().levels()), name);
            QVERIFY2(at::equal(b->quantized().scales, a->quantized().scales), name);
            QVERIFY2(at::equal(b->quantized().zeros, a->quantized().zeros), name);
            QVERIFY2(at::equal(b->weight(), a->weight()), name);
        } else if (auto a = std::dynamic_pointer_cast<const Fp8Linear>(ours)) {
            auto b = std::dynamic_pointer_cast<const Fp8Linear>(theirs);
            QVERIFY2(at::equal(b->fp8Weight().codes, a->fp8Weight().codes), name);
            QVERIFY2(at::equal(b->fp8Weight().scales, a->fp8Weight().scales), name);
            QCOMPARE(b->dynamicActivations(), a->dynamicActivations());
        } else if (auto a = std::dynamic_pointer_cast<const W8A8Linear>(ours)) {
            auto b = std::dynamic_pointer_cast<const W8A8Linear>(theirs);
            QVERIFY2(at::equal(b->int8Weight().q, a->int8Weight().q), name);
            QVERIFY2(at::equal(b->int8Weight().scales, a->int8Weight().scales), name);
        }
    }
    QVERIFY(quantized > 0);
    QCOMPARE(int(back->compressedLayers().size()), quantized);
    int reported = 0;
    for (const auto& t : report.tensors) reported += t.type.find("quantized") != std::string::npos;
    QCOMPARE(reported, quantized);
    back->tokenizer = base->tokenizer;
    const at::Tensor a = probeLogits(*variant), b = probeLogits(*back);
    if (source == "gguf") QVERIFY2(maxRelativeError(b, a) < 1e-5, qPrintable(QString::number(maxRelativeError(b, a))));
    else QVERIFY2(at::equal(a, b), "the reloaded checkpoint must compute exactly what the variant did");
}

// weight_packed: input i of a row at bit 4·i of the row's bit stream; weight_zero_point: output row r of a group at
// bit 4·r of that group's column. Checked word by word against the levels, not against cwb's packer.
void TestCompressedTensors::packedBitsByHand() {
    QTemporaryDir dir;
    auto base = syntheticModel(dir.path(), "hf-odd");
    auto variant = compressed(*base, R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":4,"scheme":"asym"}}]})");
    const std::string out = (dir.path() + "/out").toStdString();
    exportModel(*variant, "compressed-tensors", out, {});
    const SafetensorsFile st = SafetensorsFile::open(out + "/model.safetensors");
    auto entry = [&](const std::string& name) -> const SafetensorsEntry& {
        for (const auto& e : st.entries)
            if (e.name == name) return e;
        throw Error(name + " missing");
    };
    for (const char* layer : {"model.layers.1.mlp.down_proj", "model.layers.0.mlp.gate_proj"}) {
        const auto& w = std::dynamic_pointer_cast<const IntLinear>(variant->compressed(layer))->quantized();
        const at::Tensor levels = w.levels().to(at::kLong);
        const auto packed = entry(std::string(layer) + ".weight_packed");
        QCOMPARE(packed.dtype, std::string("I32"));
        const int64_t words = (w.cols * 4 + 31) / 32;
        QCOMPARE(packed.shape, (std::vector<int64_t>{w.rows, words}));
        const auto* u = reinterpret_cast<const uint32_t*>(packed.data);
        for (int64_t r = 0; r < w.rows; ++r)
            for (int64_t k = 0; k < words; ++k) {
                uint32_t expected = 0;
                for (int64_t i = 8 * k; i < std::min<int64_t>(8 * k + 8, w.cols); ++i)
                    expected |= uint32_t(levels[r][i].item<int64_t>()) << (4 * (i - 8 * k));
                QCOMPARE(u[r * words + k], expected);
            }
        const auto zp = entry(std::string(layer) + ".weight_zero_point");
        const int64_t groups = w.scales.size(1), zwords = (w.rows * 4 + 31) / 32;
        QCOMPARE(zp.shape, (std::vector<int64_t>{zwords, groups}));
        const auto* z = reinterpret_cast<const uint32_t*>(zp.data);
        for (int64_t k = 0; k < zwords; ++k)
            for (int64_t g = 0; g < groups; ++g) {
                uint32_t expected = 0;
                for (int64_t r = 8 * k; r < std::min<int64_t>(8 * k + 8, w.rows); ++r)
                    expected |= uint32_t(w.zeros[r][g].item<int>()) << (4 * (r - 8 * k));
                QCOMPARE(z[k * groups + g], expected);
            }
        const auto shape = entry(std::string(layer) + ".weight_shape");
        QCOMPARE(shape.dtype, std::string("I64"));
        const auto* dims = reinterpret_cast<const int64_t*>(shape.data);
        QCOMPARE(dims[0], w.rows);
        QCOMPARE(dims[1], w.cols);
        const auto scale = entry(std::string(layer) + ".weight_scale");
        QCOMPARE(scale.dtype, std::string("F16"));
        QCOMPARE(scale.shape, (std::vector<int64_t>{w.rows, groups}));
        QVERIFY(!entry(std::string(layer) + ".weight_packed").name.empty());
        for (const auto& e : st.entries) QVERIFY2(e.name != std::string(layer) + ".weight", "the float weight is not written");
    }
}

// FP8 weights are written as F8_E4M3 bytes equal to the variant's codes, with f32 scales [out, 1] or [1].
void TestCompressedTensors::fp8BytesAsWritten() {
    QTemporaryDir dir;
    auto base = syntheticModel(dir.path(), "hf");
    for (const char* scale : {"channel", "tensor"}) {
        auto variant = compressed(*base, std::string(R"({"steps":[{"method":"quantize.fp8","params":{"scale":")") + scale + R"("}}]})");
        const std::string out = (dir.path() + "/fp8-" + scale).toStdString();
        exportModel(*variant, "compressed-tensors", out, {});
        const SafetensorsFile st = SafetensorsFile::open(out + "/model.safetensors");
        const std::string layer = "model.layers.1.self_attn.o_proj";
        const auto& w = std::dynamic_pointer_cast<const Fp8Linear>(variant->compressed(layer))->fp8Weight();
        int seen = 0;
        for (const auto& e : st.entries) {
            if (e.name == layer + ".weight") {
                ++seen;
                QCOMPARE(e.dtype, std::string("F8_E4M3"));
                QCOMPARE(e.bytes, size_t(w.codes.numel()));
                QVERIFY(std::memcmp(e.data, w.codes.contiguous().data_ptr(), e.bytes) == 0);
            }
            if (e.name == layer + ".weight_scale") {
                ++seen;
                QCOMPARE(e.dtype, std::string("F32"));
                const std::vector<int64_t> shape = std::string(scale) == "channel" ? std::vector<int64_t>{w.codes.size(0), 1}
                                                                                   : std::vector<int64_t>{1};
                QCOMPARE(e.shape, shape);
                QVERIFY(std::memcmp(e.data, w.scales.contiguous().data_ptr(), e.bytes) == 0);
            }
        }
        QCOMPARE(seen, 2);
        const json group = configOf(out)["quantization_config"]["config_groups"]["group_0"];
        QCOMPARE(QString::fromStdString(group["weights"]["type"].get<std::string>()), QString("float"));
        QCOMPARE(QString::fromStdString(group["weights"]["strategy"].get<std::string>()), QString(scale));
        QVERIFY(group["input_activations"].is_null());
    }
}

void TestCompressedTensors::fp8NanCodesRefused() {
    QTemporaryDir dir;
    const std::string folder = (dir.path() + "/fp8").toStdString();
    exportedVariant(dir.path(), "hf", R"({"steps":[{"method":"quantize.fp8","params":{"activations":"dynamic"}}]})", folder);
    rewriteTensors(folder, [&](SafetensorsWriter& writer, const SafetensorsEntry& e) {
        if (e.name != "model.layers.1.mlp.up_proj.weight") return copyEntry(writer, e);
        auto bytes = std::make_shared<std::vector<uint8_t>>(e.data, e.data + e.bytes);
        (*bytes)[5] = 0xFF;   // E4M3's NaN
        writer.add(e.name, e.type, e.shape, e.bytes, [bytes] { return *bytes; }, "F8_E4M3");
    });
    try {
        loadModel(folder);
        QFAIL("NaN codes were accepted");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("FP8 NaN codes") && QString(e.what()).contains(QString::fromStdString(folder)), e.what());
    }
}

void TestCompressedTensors::configGroups() {
    QTemporaryDir dir;
    auto base = syntheticModel(dir.path(), "hf");
    {   // one scheme everywhere: targets "Linear"
        auto variant = compressed(*base, R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32}}]})");
        exportModel(*variant, "compressed-tensors", (dir.path() + "/one").toStdString(), {});
        const json qc = configOf((dir.path() + "/one").toStdString())["quantization_config"];
        QCOMPARE(qc["config_groups"].size(), size_t(1));
        const json& g = qc["config_groups"]["group_0"];
        QCOMPARE(g["targets"], json::array({"Linear"}));
        QCOMPARE(g["weights"], json::parse(R"({"num_bits":4,"type":"int","symmetric":true,"group_size":32,"strategy":"group","dynamic":false})"));
        QVERIFY(g["input_activations"].is_null());
        QCOMPARE(qc["ignore"], json::array({"lm_head"}));
    }
    {   // an override: two groups naming their layers, every layer in exactly one
        auto variant = compressed(*base, R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32},"overrides":[{"pattern":"layers\\.0\\.","params":{"bits":8}}]}]})");
        exportModel(*variant, "compressed-tensors", (dir.path() + "/two").toStdString(), {});
        const json qc = configOf((dir.path() + "/two").toStdString())["quantization_config"];
        QCOMPARE(qc["config_groups"].size(), size_t(2));
        std::set<std::string> named;
        for (const auto& [key, g] : qc["config_groups"].items())
            for (const auto& t : g["targets"]) {
                const std::string layer = t.get<std::string>();
                QVERIFY2(named.insert(layer).second, "a layer in two groups");
                const int bits = g["weights"]["num_bits"].get<int>();
                QCOMPARE(bits, layer.find("layers.0.") != std::string::npos ? 8 : 4);
            }
        QCOMPARE(named.size(), variant->linearLayers().size());
    }
}

void TestCompressedTensors::targetMatching() {
    const json qc = json::parse(R"({"config_groups": {
        "group_0": {"targets": ["re:.*mlp\\.(gate|up)_proj$"], "weights": {}},
        "group_1": {"targets": ["model.layers.0.self_attn.q_proj"], "weights": {}},
        "group_2": {"targets": ["Linear"], "weights": {}}},
        "ignore": ["re:.*down_proj", "lm_head"]})");
    // The name of the group groupFor picks in `config`, or "none".
    auto groupIn = [](const json& config, const std::string& layer) -> std::string {
        const json* g = ct::groupFor(config, layer, "config.json");
        for (const auto& [key, value] : config["config_groups"].items())
            if (&value == g) return key;
        return "none";
    };
    auto group = [&](const std::string& layer) { return groupIn(qc, layer); };
    QCOMPARE(group("model.layers.3.mlp.gate_proj"), std::string("group_0"));
    QCOMPARE(group("model.layers.3.mlp.up_proj"), std::string("group_0"));
    QCOMPARE(group("model.layers.0.self_attn.q_proj"), std::string("group_1"));
    QCOMPARE(group("model.layers.1.self_attn.q_proj"), std::string("group_2"));
    QCOMPARE(group("model.layers.1.mlp.down_proj"), std::string("none"));
    QCOMPARE(group("lm_head"), std::string("none"));
    // Precedence as compressed-tensors and vLLM rank it: the whole name, then a pattern, then the class; among equals
    // the group written first (group_2 before group_10, whatever the text order of the keys).
    const json ranked = json::parse(R"({"config_groups": {
        "group_0": {"targets": ["Linear"]},
        "group_10": {"targets": ["re:.*down_proj"]},
        "group_2": {"targets": ["re:.*mlp\\..*"]},
        "group_3": {"targets": ["model.layers.0.mlp.down_proj"]}}})");
    auto rankedGroup = [&](const std::string& layer) { return groupIn(ranked, layer); };
    QCOMPARE(rankedGroup("model.layers.0.mlp.down_proj"), std::string("group_3"));
    QCOMPARE(rankedGroup("model.layers.1.mlp.down_proj"), std::string("group_2"));
    QCOMPARE(rankedGroup("model.layers.1.self_attn.o_proj"), std::string("group_0"));
    QCOMPARE(rankedGroup("model.embed_tokens"), std::string("none"));   // an embedding is not a Linear
    // A "re:" pattern matches from the start of the name, as Python's re.match does.
    const json anchored = json::parse(R"({"config_groups": {"g": {"targets": ["re:mlp"]}}})");
    QVERIFY(!ct::groupFor(anchored, "model.layers.0.mlp.up_proj", "config.json"));
    const json broken = json::parse(R"({"config_groups": {"g": {"targets": ["re:(unclosed"]}}})");
    try {
        ct::groupFor(broken, "model.layers.0.mlp.up_proj", "config.json");
        QFAIL("a broken pattern was accepted");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("not a valid regular expression"), e.what());
    }
}

// A 3-bit layer in the format's bit stream (values straddle words), packed here by hand, in a config as
// compressed-tensors 0.20.1 writes it ({} for no transforms or sparsity, a version): cwb reads the same levels.
void TestCompressedTensors::threeBitStreamReads() {
    QTemporaryDir dir;
    const std::string folder = (dir.path() + "/ct").toStdString();
    auto variant = exportedVariant(dir.path(), "hf", R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32}}]})", folder);
    const std::string target = "model.layers.0.mlp.down_proj";
    const int64_t rows = 64, cols = 128, groups = 4, words = (cols * 3 + 31) / 32;
    const at::Tensor levels = at::randint(0, 8, {rows, cols}, at::kLong);
    const at::Tensor scales = (at::rand({rows, groups}) + 0.1).to(at::kHalf);
    std::vector<uint32_t> packed(size_t(rows * words), 0);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < cols; ++i) {
            const uint32_t level = uint32_t(levels[r][i].item<int64_t>());
            const int64_t bit = 3 * i, word = bit / 32, offset = bit % 32;
            packed[size_t(r * words + word)] |= level << offset;
            if (offset + 3 > 32) packed[size_t(r * words + word + 1)] |= level >> (32 - offset);
        }
    rewriteTensors(folder, [&](SafetensorsWriter& writer, const SafetensorsEntry& e) {
        if (e.name == target + ".weight_packed") {
            std::vector<uint8_t> bytes(packed.size() * 4);
            std::memcpy(bytes.data(), packed.data(), bytes.size());
            writer.add(e.name, ggml::Type::I32, {rows, words}, std::move(bytes));
        } else if (e.name == target + ".weight_scale") {
            std::vector<uint8_t> bytes(size_t(scales.numel()) * 2);
            std::memcpy(bytes.data(), scales.contiguous().data_ptr(), bytes.size());
            writer.add(e.name, ggml::Type::F16, {rows, groups}, std::move(bytes));
        } else {
            copyEntry(writer, e);
        }
    });
    json config = configOf(folder);
    json& qc = config["quantization_config"];
    json others = json::array();
    for (const auto& layer : variant->linearLayers())
        if (layer != target) others.push_back(layer);
    json threeBits = qc["config_groups"]["group_0"];
    threeBits["targets"] = json::array({target});
    threeBits["weights"]["num_bits"] = 3;
    qc["config_groups"]["group_0"]["targets"] = others;
    qc["config_groups"]["group_1"] = threeBits;
    qc["transform_config"] = json::object();
    qc["sparsity_config"] = json::object();
    qc["moe_sparsity_config"] = nullptr;
    qc["version"] = "0.20.1";
    std::ofstream(folder + "/config.json") << config.dump(2);

    auto back = loadModel(folder);
    auto layer = std::dynamic_pointer_cast<const IntLinear>(back->compressed(target));
    QVERIFY(layer);
    QCOMPARE(layer->quantized().spec.bits, 3);
    QVERIFY(at::equal(layer->quantized().levels().to(at::kLong), levels));
    QVERIFY(at::equal(layer->quantized().scales, scales.to(at::kFloat)));
    QVERIFY(at::all(layer->quantized().zeros == 4).item<bool>());
    auto other = std::dynamic_pointer_cast<const IntLinear>(back->compressed("model.layers.1.mlp.down_proj"));
    QVERIFY(other && other->quantized().spec.bits == 4);
}

// A checkpoint's packed layers are held packed only: their weight records own no bytes, the model's storage is the
// packed bytes, and later steps still work on them (pruning replaces a layer with a dense weight; re-quantizing
// replaces the compressed layer).
void TestCompressedTensors::packedLayersHoldNoDenseCopy() {
    QTemporaryDir dir;
    const std::string folder = (dir.path() + "/ct").toStdString();
    auto variant = exportedVariant(dir.path(), "hf", R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32}}]})", folder);
    auto back = loadModel(folder);
    size_t linearBytes = 0, denseBytes = 0;
    for (const auto& layer : back->linearLayers()) {
        const TensorRecord& r = back->tensor(layer + ".weight");
        QVERIFY2(r.packedOnly && r.bytes == 0 && !r.data, layer.c_str());
        linearBytes += back->compressed(layer)->storageBytes();
        denseBytes += size_t(r.elementCount()) * 4;
        QVERIFY(at::equal(back->floatTensor(layer + ".weight"), variant->floatTensor(layer + ".weight")));
    }
    QVERIFY2(linearBytes * 6 < denseBytes, "4-bit layers hold about an eighth of their float32 bytes");
    size_t otherBytes = 0;
    for (const auto& name : back->tensorNames()) otherBytes += back->tensor(name).bytes;
    QCOMPARE(back->storageBytes(), otherBytes + linearBytes);

    const std::string layer = "model.layers.1.mlp.up_proj";
    auto pruned = compressed(*back, R"({"steps":[{"method":"prune.magnitude","params":{"sparsity":0.5},"targets":"up_proj"}]})");
    QVERIFY(!pruned->compressed(layer));
    QVERIFY(!pruned->tensor(layer + ".weight").packedOnly);
    // At least half zero (4-bit levels at the zero point were zero already).
    QVERIFY(pruned->floatTensor(layer + ".weight").eq(0).sum().item<int64_t>() >= pruned->tensor(layer + ".weight").elementCount() / 2);
    auto eightBit = compressed(*back, R"({"steps":[{"method":"quantize.rtn","params":{"bits":8,"group_size":32}}]})");
    QCOMPARE(eightBit->compressed(layer)->bits(), 8);
    QVERIFY(eightBit->tensor(layer + ".weight").packedOnly);
    QVERIFY(probeLogits(*pruned).isfinite().all().item<bool>());
    QVERIFY(probeLogits(*eightBit).isfinite().all().item<bool>());
}

// Older compressed-tensors releases wrote an all-zero weight_zero_point beside symmetric weights: still read, for
// packed integer layers and for int8 (W8A8) ones.
void TestCompressedTensors::zeroZeroPointBesideSymmetricWeights_data() {
    QTest::addColumn<QString>("recipe");
    QTest::newRow("int4 pack-quantized") << R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32}}]})";
    QTest::newRow("w8a8 int-quantized") << R"({"steps":[{"method":"quantize.smoothquant","params":{"fold":true}}]})";
}

void TestCompressedTensors::zeroZeroPointBesideSymmetricWeights() {
    QFETCH(QString, recipe);
    QTemporaryDir dir;
    const std::string folder = (dir.path() + "/ct").toStdString();
    auto variant = exportedVariant(dir.path(), "hf", recipe.toStdString(), folder);
    const std::string layer = "model.layers.0.self_attn.o_proj";
    rewriteTensors(folder, [&](SafetensorsWriter& writer, const SafetensorsEntry& e) {
        copyEntry(writer, e);
        if (e.name == layer + ".weight_scale")
            writer.add(layer + ".weight_zero_point", ggml::Type::I8, {e.shape[0], e.shape[1]},
                       std::vector<uint8_t>(size_t(e.shape[0] * e.shape[1]), 0));
    });
    auto back = loadModel(folder);
    QVERIFY(at::equal(back->floatTensor(layer + ".weight"), variant->floatTensor(layer + ".weight")));
}

// A checkpoint that quantizes lm_head too (some do): the head is read packed, as the blocks are, and computes the values
// the format defines.
void TestCompressedTensors::quantizedHeadIsReadPacked() {
    QTemporaryDir dir;
    const std::string folder = (dir.path() + "/ct").toStdString();
    ExportOptions options;
    options.tensorType = "f32";
    auto variant = exportedVariant(dir.path(), "hf", R"({"steps":[{"method":"quantize.fp8","params":{"activations":"dynamic"}}]})",
                                   folder, options);
    const quant::Fp8Weight head = quant::quantizeFp8(variant->floatTensor("lm_head.weight"), true);
    rewriteTensors(folder, [&](SafetensorsWriter& writer, const SafetensorsEntry& e) {
        if (e.name != "lm_head.weight") return copyEntry(writer, e);
        const int64_t rows = head.codes.size(0), cols = head.codes.size(1);
        auto codes = std::make_shared<std::vector<uint8_t>>(head.codes.data_ptr<uint8_t>(), head.codes.data_ptr<uint8_t>() + rows * cols);
        writer.add("lm_head.weight", ggml::Type::I8, {rows, cols}, size_t(rows * cols), [codes] { return *codes; }, "F8_E4M3");
        std::vector<uint8_t> scales(size_t(rows) * 4);
        std::memcpy(scales.data(), head.scales.contiguous().data_ptr<float>(), scales.size());
        writer.add("lm_head.weight_scale", ggml::Type::F32, {rows, 1}, std::move(scales));
    });
    json config = configOf(folder);
    config["quantization_config"]["ignore"] = json::array();   // "Linear" now reaches lm_head
    std::ofstream(folder + "/config.json") << config.dump(2);
    auto back = loadModel(folder);
    auto packed = std::dynamic_pointer_cast<const Fp8Linear>(back->compressed("lm_head"));
    QVERIFY(packed && packed->dynamicActivations());
    QVERIFY(back->tensor("lm_head.weight").packedOnly);
    QVERIFY(at::equal(back->floatTensor("lm_head.weight"), head.dequantize()));
    QCOMPARE(back->compressedLayers().size(), variant->compressedLayers().size() + 1);
}

void TestCompressedTensors::refusals_data() {
    QTest::addColumn<QString>("source");
    QTest::addColumn<QString>("recipe");
    QTest::addColumn<QString>("expected");
    QTest::newRow("dense") << "hf" << "" << "no layer is quantized";
    QTest::newRow("3 bits") << "hf" << R"({"steps":[{"method":"quantize.rtn","params":{"bits":3,"group_size":32}}]})" << "3-bit levels are not written";
    QTest::newRow("act-order") << "hf" << R"({"steps":[{"method":"quantize.gptq","params":{"bits":4,"group_size":32,"act_order":true}}]})" << "act-order";
    QTest::newRow("awq input scales beside the layer") << "hf" << R"({"steps":[{"method":"quantize.awq","params":{"bits":4,"group_size":32,"grid":4}}]})" << "AWQ input scales";
    QTest::newRow("smoothquant smoothing scales") << "hf" << R"({"steps":[{"method":"quantize.smoothquant"}]})" << "SmoothQuant smoothing scales";
    QTest::newRow("group not dividing the inputs") << "hf-odd" << R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32}}]})" << "not a multiple of its group size 32";
    QTest::newRow("gpt2") << "gpt2" << R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32}}]})" << "Llama family";
    QTest::newRow("q/k/v in different schemes (vLLM fuses them)") << "hf" << R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32},"overrides":[{"pattern":"k_proj","params":{"bits":8}}]}]})" << "needs one scheme for them";
    QTest::newRow("q quantized, k/v dense") << "hf" << R"({"steps":[{"method":"quantize.rtn","targets":"q_proj","params":{"bits":4,"group_size":32}}]})" << "needs one scheme for them";
}

void TestCompressedTensors::refusals() {
    QFETCH(QString, source);
    QFETCH(QString, recipe);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    auto base = syntheticModel(dir.path(), source);
    auto variant = recipe.isEmpty() ? base->clone() : compressed(*base, recipe.toStdString());
    const std::string out = (dir.path() + "/refused").toStdString();
    try {
        exportModel(*variant, "compressed-tensors", out, {});
        QFAIL("the export should have been refused");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains(expected), e.what());
    }
    QVERIFY(!std::filesystem::exists(out));
    for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(out).parent_path()))
        QVERIFY2(entry.path().filename().string().rfind(std::filesystem::path(out).filename().string() + ".tmp", 0) != 0,
                 entry.path().c_str());   // no staging folder left
}

void TestCompressedTensors::hostileCheckpoints_data() {
    QTest::addColumn<QString>("damage");
    QTest::addColumn<QString>("expected");
    QTest::newRow("format nvfp4") << "config:format=nvfp4-pack-quantized" << "format 'nvfp4-pack-quantized' is not supported";
    QTest::newRow("sparse 2:4 bitmask") << "config:sparsity" << "sparsity format 'sparse-24-bitmask' is not supported";
    QTest::newRow("quantized kv cache") << "config:kv" << "kv_cache_scheme is not supported";
    QTest::newRow("transforms") << "config:transform" << "transform_config is not supported";
    QTest::newRow("status frozen") << "config:frozen" << "quantization_status 'frozen'";
    QTest::newRow("no group targets a layer") << "config:targets" << "no config group targets it";
    QTest::newRow("weight_packed too short") << "packed:short" << "weight_packed is [";
    QTest::newRow("weight_shape wrong") << "shape:wrong" << "but weight_shape";
    QTest::newRow("weight_scale as I32") << "scale:i32" << "weight_scale must be F16, BF16 or F32";
    QTest::newRow("weight_scale too few groups") << "scale:short" << "weight_scale is [";
    QTest::newRow("static input scale") << "add:input_scale" << "static activation quantization";
    QTest::newRow("zero points missing") << "drop:weight_zero_point" << "has no 'weight_zero_point' tensor";
    QTest::newRow("weight_shape huge (overflow)") << "shape:huge" << "is not a valid matrix size";
    QTest::newRow("symmetric with a nonzero zero point") << "config:symmetric-true" << "symmetric weights with a nonzero weight_zero_point";
    QTest::newRow("kv-cache scale") << "add:k_scale" << "attention or KV-cache quantization scales";
    QTest::newRow("activations without weights") << "config:inputs-only" << "quantizes activations without weights";
    QTest::newRow("symmetric not a boolean") << "config:symmetric" << "weights.symmetric must be true or false";
    QTest::newRow("group format marlin-24") << "config:group-format" << "format 'marlin-24' is not supported";
    QTest::newRow("sparsity format not a string") << "config:sparsity-type" << "malformed compressed-tensors quantization_config";
}

void TestCompressedTensors::hostileCheckpoints() {
    QFETCH(QString, damage);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    const std::string folder = (dir.path() + "/ct").toStdString();
    exportedVariant(dir.path(), "hf", R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":32,"scheme":"asym"}}]})", folder);
    const std::string what = damage.section(':', 0, 0).toStdString(), how = damage.section(':', 1).toStdString();
    const std::string target = "model.layers.0.mlp.down_proj";
    if (what == "config") {
        json config = configOf(folder);
        json& qc = config["quantization_config"];
        if (how.rfind("format=", 0) == 0) qc["format"] = how.substr(7);
        if (how == "sparsity") qc["sparsity_config"] = {{"format", "sparse-24-bitmask"}, {"sparsity_structure", "2:4"}};
        if (how == "kv") qc["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}};
        if (how == "transform") qc["transform_config"] = {{"config_groups", {{"v", {{"type", "hadamard"}}}}}};
        if (how == "frozen") qc["quantization_status"] = "frozen";
        if (how == "targets") qc["config_groups"]["group_0"]["targets"] = json::array({"re:.*self_attn.*"});
        if (how == "inputs-only")
            qc["config_groups"]["group_9"] = {{"targets", {"lm_head"}}, {"weights", nullptr},
                                              {"input_activations", {{"num_bits", 8}, {"type", "int"}, {"dynamic", true}}}};
        if (how == "symmetric") qc["config_groups"]["group_0"]["weights"]["symmetric"] = "yes";
        if (how == "symmetric-true") qc["config_groups"]["group_0"]["weights"]["symmetric"] = true;   // zero points are not 0
        if (how == "group-format") {
            qc["format"] = "mixed-precision";
            qc["config_groups"]["group_0"]["format"] = "marlin-24";
        }
        if (how == "sparsity-type") qc["sparsity_config"] = {{"format", 24}};
        std::ofstream(folder + "/config.json") << config.dump(2);
    } else {
        rewriteTensors(folder, [&](SafetensorsWriter& writer, const SafetensorsEntry& e) {
            if (e.name != target + "." + (what == "add" ? std::string("weight_scale") : what == "drop" ? how : "weight_" + what)) {
                copyEntry(writer, e);
                return;
            }
            if (what == "drop") return;
            if (what == "add") {
                copyEntry(writer, e);
                const std::string added = how == "k_scale" ? "model.layers.0.self_attn.k_scale" : target + "." + how;
                writer.add(added, ggml::Type::F32, {1}, std::vector<uint8_t>(4, 0));
                return;
            }
            std::vector<uint8_t> bytes(e.data, e.data + e.bytes);
            std::vector<int64_t> shape = e.shape;
            ggml::Type type = e.type;
            if (how == "short") {   // one word / group fewer per row
                const size_t per = e.type == ggml::Type::I32 ? 4 : 2;
                bytes.resize(bytes.size() - size_t(shape[0]) * per);
                shape[1] -= 1;
            }
            if (how == "wrong" || how == "huge") {
                auto* dims = reinterpret_cast<int64_t*>(bytes.data());
                dims[1] = how == "wrong" ? dims[1] + 32 : (int64_t(1) << 62) + 8;   // the latter wraps cols · bits
            }
            if (how == "i32") {
                type = ggml::Type::I32;
                bytes.assign(bytes.size() * 2, 0);
            }
            writer.add(e.name, type, shape, std::move(bytes));
        });
    }
    try {
        loadModel(folder);
        QFAIL("the damaged checkpoint loaded");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains(expected) && QString(e.what()).contains(QString::fromStdString(folder)), e.what());
    }
}

QTEST_GUILESS_MAIN(TestCompressedTensors)
#include "test_compressed_tensors.moc"
