// The runtime's speed measurement (core/runtime/latency.h) and its per-layer path report on the CPU, where no
// kernel applies; the CUDA side is tests/gpu/test_cuda_native_linear.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <limits>
#include <string>

#include "core/compress/compressed_layers.h"
#include "core/compress/fp8_math.h"
#include "core/io/model_format.h"
#include "core/runtime/latency.h"
#include "core/runtime/sparse24_linear.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "tests/support/synthetic_models.h"

using namespace cwb;
using namespace cwb::test;

class TestLatency : public QObject {
    Q_OBJECT
private slots:
    void compressedLayersReportTheirPath();
    void cpuWeightPlanFollowsAvailableMemory();
    void measuresPrefillAndDecode();
    void randomVariantCompressesEveryLinear();
    void randomVariantQuantizesTheHeadOnRequest();
    void randomEightBitVariantsCompressEveryLinear();
    void sparse24VariantKeepsTheTwoLargestOfFour();
    void sparse24ThresholdIsAutomaticByDefault();
    void syntheticShapes();
};

namespace {
std::unique_ptr<Model> tinyModel(QTemporaryDir& dir) {
    writeHfFolder(dir.path().toStdString(), tinyLlamaSpec(), randomWeights(tinyLlamaSpec(), 3), ggml::Type::F16);
    return loadModel(dir.path().toStdString());
}
} // namespace

void TestLatency::compressedLayersReportTheirPath() {
    QTemporaryDir dir;
    auto model = tinyModel(dir);
    const auto layers = model->linearLayers();
    for (const auto& layer : layers)
        model->setCompressed(layer, std::make_shared<IntLinear>(quant::quantizeRtn(model->floatTensor(layer + ".weight"), {4, true, 32})));
    RuntimeOptions defaults;
    defaults.cpuPackedInt = CpuPackedInt::Off;   // what an unset CWB_CPU_PACKED gives where the float copies fit
    Transformer rt(*model, defaults);
    QVERIFY(rt.layerPaths().empty());   // blocks load on the first forward
    const at::Tensor ids = at::tensor(std::vector<int64_t>{1, 2, 3}, at::kLong).unsqueeze(0);
    const at::Tensor logits = rt.forward(ids);
    QCOMPARE(rt.layerPaths().size(), layers.size());
    const std::string dequantized = "on the CPU (CWB_CPU_PACKED=1 runs them from their packed levels)";
    for (const auto& [name, path] : rt.layerPaths()) {
        QVERIFY(!path.native);
        QCOMPARE(path.how, dequantized);
    }
    QCOMPARE(rt.layerPathSummary(), "dequantized: " + std::to_string(layers.size()) + " " + dequantized);
    // Asked for, integer layers run from their packed levels (core/runtime/cpu_int_linear.h), and the logits agree.
    RuntimeOptions packedOptions;
    packedOptions.cpuPackedInt = CpuPackedInt::On;
    Transformer packed(*model, packedOptions);
    const double difference = (packed.forward(ids) - logits).abs().max().item<double>();
    QVERIFY2(difference < 1e-4, qPrintable(QString::number(difference)));
    const std::string how = "CPU INT4 from packed levels (GEMV up to 8 rows, dequantized row tiles + matmul above)";
    for (const auto& [name, path] : packed.layerPaths()) {
        QVERIFY(path.native);
        QCOMPARE(path.how, how);
    }
    QCOMPARE(packed.layerPathSummary(), "native: " + std::to_string(layers.size()) + " " + how);
    // With native kernels off they are dequantized whatever the switch says.
    packedOptions.nativeKernels = false;
    Transformer off(*model, packedOptions);
    off.forward(ids);
    for (const auto& [name, path] : off.layerPaths()) {
        QVERIFY(!path.native);
        QCOMPARE(path.how, std::string("native kernels turned off"));
    }
    // FP8 layers have no CPU kernel and say so.
    auto fp8 = model->clone();
    for (const auto& layer : layers)
        fp8->setCompressed(layer, std::make_shared<Fp8Linear>(quant::quantizeFp8(model->floatTensor(layer + ".weight"), true), false));
    Transformer fp8Runtime(*fp8);
    fp8Runtime.forward(ids);
    QCOMPARE(fp8Runtime.layerPathSummary(), "dequantized: " + std::to_string(layers.size()) + " no CPU kernel for fp8 layers");
}

void TestLatency::cpuWeightPlanFollowsAvailableMemory() {
    QTemporaryDir dir;
    auto model = tinyModel(dir);
    const auto layers = model->linearLayers();
    double integerBytes = 0;   // float32 copies of the layers made INT4 below
    for (const auto& layer : layers) {
        model->setCompressed(layer, std::make_shared<IntLinear>(quant::quantizeRtn(model->floatTensor(layer + ".weight"), {4, true, 32})));
        integerBytes += 4.0 * double(model->tensor(layer + ".weight").elementCount());
    }
    const double allBytes = 4.0 * double(model->parameterCount());
    const at::Tensor ids = at::tensor(std::vector<int64_t>{1, 2, 3, 4}, at::kLong).unsqueeze(0);
    // Room for every float copy (60% of the memory given): Auto keeps them, as before.
    RuntimeOptions roomy;
    roomy.availableMemory = uint64_t(allBytes / 0.6) + 4096;
    if (!qEnvironmentVariableIsSet("CWB_CPU_PACKED")) QCOMPARE(roomy.cpuPackedInt, CpuPackedInt::Auto);
    roomy.cpuPackedInt = CpuPackedInt::Auto;
    Transformer dequantized(*model, roomy);
    const at::Tensor reference = dequantized.forward(ids);
    QCOMPARE(dequantized.options().cpuPackedInt, CpuPackedInt::Off);
    QVERIFY(dequantized.options().cacheWeights);
    QCOMPARE(dequantized.cpuWeightPlan(), std::string());
    for (const auto& [name, path] : dequantized.layerPaths()) QVERIFY(!path.native);
    // The float copies would not fit but the rest of the model would: integer layers run packed, blocks stay cached.
    RuntimeOptions tight = roomy;
    tight.availableMemory = uint64_t((allBytes - integerBytes / 2) / 0.6);
    Transformer packed(*model, tight);
    const at::Tensor packedLogits = packed.forward(ids);
    QCOMPARE(packed.options().cpuPackedInt, CpuPackedInt::On);
    QVERIFY(packed.options().cacheWeights);
    QVERIFY2(packed.cpuWeightPlan().find("integer layers run from their packed levels") == 0, packed.cpuWeightPlan().c_str());
    QVERIFY(packed.cpuWeightPlan().find("converted one at a time") == std::string::npos);
    QCOMPARE(packed.layerPaths().size(), layers.size());
    for (const auto& [name, path] : packed.layerPaths()) QVERIFY2(path.native, name.c_str());
    QVERIFY((packedLogits - reference).abs().max().item<double>() < 1e-4);
    // Not even the rest fits: packed, and each block converted when it is used.
    RuntimeOptions scarce = roomy;
    scarce.availableMemory = uint64_t((allBytes - integerBytes) / 0.6 / 2);
    QVERIFY(scarce.availableMemory > 0);
    Transformer oneBlock(*model, scarce);
    QVERIFY((oneBlock.forward(ids) - reference).abs().max().item<double>() < 1e-4);
    QCOMPARE(oneBlock.options().cpuPackedInt, CpuPackedInt::On);
    QVERIFY(!oneBlock.options().cacheWeights);
    QVERIFY2(oneBlock.cpuWeightPlan().find("; blocks converted one at a time") != std::string::npos, oneBlock.cpuWeightPlan().c_str());
    // Asked for the float copies, it keeps them per block rather than running packed.
    scarce.cpuPackedInt = CpuPackedInt::Off;
    Transformer asked(*model, scarce);
    asked.forward(ids);
    QCOMPARE(asked.options().cpuPackedInt, CpuPackedInt::Off);
    QVERIFY(!asked.options().cacheWeights);
    QVERIFY(asked.cpuWeightPlan().find("blocks converted one at a time") == 0);
    for (const auto& [name, path] : asked.layerPaths()) QVERIFY(!path.native);
    // Asked for packed layers where memory is plenty: the plan says nothing, the layers run packed.
    roomy.cpuPackedInt = CpuPackedInt::On;
    Transformer packedAnyway(*model, roomy);
    packedAnyway.forward(ids);
    QCOMPARE(packedAnyway.cpuWeightPlan(), std::string());
    for (const auto& [name, path] : packedAnyway.layerPaths()) QVERIFY(path.native);
    // Two runtimes alive at once (base and variant of a comparison) plan against half the memory each.
    QCOMPARE(sharingMemory(tight, 2).availableMemory, tight.availableMemory / 2);
    QCOMPARE(sharingMemory(tight, 1).availableMemory, tight.availableMemory);
    Transformer halfOfTight(*model, sharingMemory(roomy, 2));
    QCOMPARE(halfOfTight.options().cpuPackedInt, CpuPackedInt::On);   // roomy is On here; see below for Auto
    RuntimeOptions roomyAuto = roomy;
    roomyAuto.cpuPackedInt = CpuPackedInt::Auto;
    roomyAuto.availableMemory = uint64_t(allBytes / 0.6 * 1.5);   // room for one runtime's float copies, not for two
    QCOMPARE(Transformer(*model, roomyAuto).options().cpuPackedInt, CpuPackedInt::Off);
    QCOMPARE(Transformer(*model, sharingMemory(roomyAuto, 2)).options().cpuPackedInt, CpuPackedInt::On);
    // Without integer layers Auto has nothing to pack: blocks are converted one at a time.
    QTemporaryDir denseDir;
    auto dense = tinyModel(denseDir);
    scarce.cpuPackedInt = CpuPackedInt::Auto;
    Transformer denseScarce(*dense, scarce);
    QCOMPARE(denseScarce.options().cpuPackedInt, CpuPackedInt::Off);
    QVERIFY(!denseScarce.options().cacheWeights);
}

void TestLatency::measuresPrefillAndDecode() {
    QTemporaryDir dir;
    auto model = tinyModel(dir);
    LatencyParams p;
    p.batch = 2;
    p.promptTokens = 8;
    p.genTokens = 5;
    LatencyResult r = measureLatency(*model, RuntimeOptions{}, p);
    QVERIFY(r.prefillSeconds > 0);
    QCOMPARE(r.prefillTokensPerSecond, 16 / r.prefillSeconds);
    QVERIFY(r.decodeP50Ms > 0 && r.decodeP50Ms <= r.decodeP99Ms);
    QCOMPARE(r.peakDeviceBytes, int64_t(-1));   // CPU: no device memory
    QVERIFY(r.layerPaths.empty());              // no compressed layers
    QVERIFY(!r.decodeGraphs);                   // CPU: no CUDA graphs, so no second (eager) timing either
    QCOMPARE(r.eagerDecodeP50Ms, -1.0);
    QCOMPARE(r.prefillWarmupRuns, int64_t(0));  // the warm-up is for a GPU's clocks: none on the CPU
    p.prefillWarmupSeconds = -1.0;
    QVERIFY_THROWS_EXCEPTION(Error, measureLatency(*model, RuntimeOptions{}, p));
    p.prefillWarmupSeconds = 0.5;
    p.promptTokens = model->spec.context;       // prompt + generated tokens past the context
    QVERIFY_THROWS_EXCEPTION(Error, measureLatency(*model, RuntimeOptions{}, p));
    // Counts whose sum overflows int64 are refused as past the context too (the sum wrapped to a negative before).
    p.promptTokens = std::numeric_limits<int64_t>::max();
    try {
        measureLatency(*model, RuntimeOptions{}, p);
        QFAIL("a prompt of 2^63 - 1 tokens was accepted");
    } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find("9223372036854775807 + 5 tokens exceed the model's context") !=
                     std::string::npos,
                 e.what());
    }
}

void TestLatency::randomVariantCompressesEveryLinear() {
    QTemporaryDir dir;
    auto model = tinyModel(dir);
    auto variant = randomIntVariant(*model, 4, 16, at::kCPU);
    for (const auto& layer : model->linearLayers()) {
        auto c = variant->compressed(layer);
        QVERIFY(c && c->kind() == "int" && c->bits() == 4);
    }
    QVERIFY(decodeWeightBytes(*variant, at::kHalf) < decodeWeightBytes(*model, at::kHalf));
    Transformer rt(*variant);
    QVERIFY(rt.forward(at::tensor(std::vector<int64_t>{1, 2}, at::kLong).unsqueeze(0)).isfinite().all().item<bool>());
}

// `cwb bench --quantize-head`: the head too, and the bytes a decode step reads count it in its packed form.
void TestLatency::randomVariantQuantizesTheHeadOnRequest() {
    for (const bool tied : {false, true}) {
        QTemporaryDir dir;
        ArchSpec spec = tinyLlamaSpec();
        spec.tiedEmbeddings = tied;
        writeHfFolder(dir.path().toStdString(), spec, randomWeights(spec, 3), ggml::Type::F16);
        auto model = loadModel(dir.path().toStdString());
        if (tied) {
            try {
                randomIntVariant(*model, 4, 16, at::kCPU, 0, true);
                QFAIL("a tied head was quantized");
            } catch (const Error& e) {
                QVERIFY2(std::string(e.what()).find("tied to the embedding") != std::string::npos, e.what());
            }
            continue;
        }
        auto blocks = randomIntVariant(*model, 4, 16, at::kCPU);
        auto variant = randomIntVariant(*model, 4, 16, at::kCPU, 0, true);
        QVERIFY(!blocks->compressed("lm_head"));
        auto head = variant->compressed("lm_head");
        QVERIFY(head && head->kind() == "int" && head->bits() == 4);
        const size_t denseHead = size_t(spec.vocab * spec.hidden) * 2;
        QCOMPARE(decodeWeightBytes(*variant, at::kHalf), decodeWeightBytes(*blocks, at::kHalf) - denseHead + head->storageBytes());
        Transformer rt(*variant);
        QVERIFY(rt.forward(at::tensor(std::vector<int64_t>{1, 2}, at::kLong).unsqueeze(0)).isfinite().all().item<bool>());
        QVERIFY(rt.layerPaths().count("lm_head"));   // the head's path is reported with the blocks'
    }
}

void TestLatency::randomEightBitVariantsCompressEveryLinear() {
    QTemporaryDir dir;
    auto model = tinyModel(dir);
    for (const std::string format : {"fp8", "w8a8", "w8a8-folded"}) {
        const std::string kind = format == "fp8" ? "fp8" : "w8a8";
        auto variant = format == "fp8" ? randomFp8Variant(*model, at::kCPU)
                                       : randomW8a8Variant(*model, at::kCPU, 0, format == "w8a8-folded");
        for (const auto& layer : model->linearLayers()) {
            auto c = variant->compressed(layer);
            QVERIFY(c && c->kind() == kind && c->bits() == 8);
            if (kind == "w8a8") {   // folded: no divisor beside the layer (all ones); otherwise a random one per layer
                const at::Tensor& s = static_cast<const W8A8Linear&>(*c).smoothing();
                QCOMPARE(at::all(s == 1).item<bool>(), format == "w8a8-folded");
            }
            QCOMPARE(c->rows(), model->tensor(layer + ".weight").shape.at(0));
            QCOMPARE(c->cols(), model->tensor(layer + ".weight").shape.at(1));
            // Random codes must decode to finite weights (no E4M3 NaN code), and not all to one value.
            const at::Tensor w = c->weight();
            QVERIFY(w.isfinite().all().item<bool>());
            QVERIFY(w.std().item<double>() > 0);
            if (kind == "fp8") {
                const auto& dynamic = static_cast<const Fp8Linear&>(*c);
                QVERIFY(dynamic.dynamicActivations());
            }
        }
        QVERIFY(decodeWeightBytes(*variant, at::kHalf) < decodeWeightBytes(*model, at::kHalf));
        Transformer rt(*variant);
        QVERIFY(rt.forward(at::tensor(std::vector<int64_t>{1, 2}, at::kLong).unsqueeze(0)).isfinite().all().item<bool>());
    }
}

// `cwb bench --format sparse24`: every block linear keeps exactly the 2 largest |w| of each group of 4 (ties aside),
// in fp16; the other tensors are the base's.
void TestLatency::sparse24VariantKeepsTheTwoLargestOfFour() {
    QTemporaryDir dir;
    auto model = tinyModel(dir);
    auto variant = sparse24Variant(*model, at::kCPU);
    const auto layers = model->linearLayers();
    QVERIFY(!layers.empty());
    for (const auto& layer : layers) {
        const at::Tensor base = model->floatTensor(layer + ".weight");
        const at::Tensor pruned = variant->floatTensor(layer + ".weight");
        QCOMPARE(variant->tensor(layer + ".weight").type, ggml::Type::F16);
        const at::Tensor groups = base.reshape({base.size(0), -1, 4}), kept = pruned.reshape(groups.sizes());
        const at::Tensor nonzero = (kept != 0).sum(-1);
        // Exactly two: random weights have no zeros of their own, so fewer would mean kept weights were dropped.
        QVERIFY2(nonzero.eq(2).all().item<bool>(), layer.c_str());
        // Every kept value is the base's, and no dropped |w| exceeds a kept one in its group.
        QVERIFY2(at::equal(kept.masked_select(kept != 0), groups.masked_select(kept != 0)), layer.c_str());
        const at::Tensor smallestKept = at::where(kept != 0, groups.abs(), at::full({}, 1e30, at::kFloat)).amin(-1);
        const at::Tensor largestDropped = at::where(kept == 0, groups.abs(), at::zeros({}, at::kFloat)).amax(-1);
        QVERIFY2(largestDropped.le(smallestKept).all().item<bool>(), layer.c_str());
    }
    QVERIFY(at::equal(model->floatTensor("model.embed_tokens.weight"), variant->floatTensor("model.embed_tokens.weight")));
}

// 2:4 through cuSPARSELt uses the automatic threshold unless the options or the environment give a row count
// (0: off).
void TestLatency::sparse24ThresholdIsAutomaticByDefault() {
    const int64_t fromEnvironment = RuntimeOptions().sparseMinRows;
    qunsetenv("CWB_SPARSE24_MIN_ROWS");
    QCOMPARE(sparse24MinRows(fromEnvironment), kSparse24Automatic);   // the default
    qputenv("CWB_SPARSE24_MIN_ROWS", "0");
    QCOMPARE(sparse24MinRows(fromEnvironment), int64_t(0));
    QCOMPARE(sparse24MinRows(4096), int64_t(4096));
    QCOMPARE(sparse24MinRows(0), int64_t(0));
    QCOMPARE(sparse24MinRows(kSparse24Automatic), kSparse24Automatic);
    qputenv("CWB_SPARSE24_MIN_ROWS", "2048");
    QCOMPARE(sparse24MinRows(fromEnvironment), int64_t(2048));
    QCOMPARE(sparse24MinRows(16), int64_t(16));   // the options win over the environment
    qputenv("CWB_SPARSE24_MIN_ROWS", "auto");
    QCOMPARE(sparse24MinRows(fromEnvironment), kSparse24Automatic);
    qputenv("CWB_SPARSE24_MIN_ROWS", "many");
    try {
        sparse24MinRows(fromEnvironment);
        QFAIL("a malformed CWB_SPARSE24_MIN_ROWS was accepted");
    } catch (const Error& e) {
        QVERIFY(std::string(e.what()).find("CWB_SPARSE24_MIN_ROWS") != std::string::npos);
        QVERIFY(std::string(e.what()).find("'many'") != std::string::npos);
    }
    qunsetenv("CWB_SPARSE24_MIN_ROWS");
    // A 2:4 weight off the GPU is never checked or compressed, whatever the threshold.
    const at::Tensor w = at::zeros({8, 8}, at::kHalf);
    QVERIFY(!makeSparse24Linear(w, 1).twoFour);
}

// The shapes `cwb bench --synthetic` builds: Llama-2 7B and 70B (GQA), Llama-3 8B and 70B (GQA); checked without
// allocating the weights.
void TestLatency::syntheticShapes() {
    struct Expected {
        const char* name;
        int64_t hidden, heads, kvHeads, ffn, vocab, context, totalLayers;
        double ropeTheta;
    };
    const Expected expected[] = {{"llama-7b", 4096, 32, 32, 11008, 32000, 4096, 32, 10000.0},
                                 {"llama-70b", 8192, 64, 8, 28672, 32000, 4096, 80, 10000.0},
                                 {"llama3-8b", 4096, 32, 8, 14336, 128256, 8192, 32, 500000.0},
                                 {"llama3-70b", 8192, 64, 8, 28672, 128256, 8192, 80, 500000.0}};
    for (const Expected& e : expected) {
        const SyntheticShape& shape = syntheticShape(e.name);
        const std::string got = std::to_string(shape.hidden) + " " + std::to_string(shape.heads) + "/" +
                                std::to_string(shape.kvHeads) + " heads of " + std::to_string(shape.headDim) + ", ffn " +
                                std::to_string(shape.ffn) + ", vocabulary " + std::to_string(shape.vocab) + ", context " +
                                std::to_string(shape.context) + ", " + std::to_string(shape.totalLayers) +
                                " layers, theta " + std::to_string(shape.ropeTheta);
        const std::string want = std::to_string(e.hidden) + " " + std::to_string(e.heads) + "/" +
                                 std::to_string(e.kvHeads) + " heads of 128, ffn " + std::to_string(e.ffn) +
                                 ", vocabulary " + std::to_string(e.vocab) + ", context " + std::to_string(e.context) +
                                 ", " + std::to_string(e.totalLayers) + " layers, theta " + std::to_string(e.ropeTheta);
        QCOMPARE(got, want);
        QVERIFY(shape.defaultLayers >= 1 && shape.defaultLayers <= shape.totalLayers);
    }
    // 70B's 80 blocks would not fit one GPU: a few unless told; the 7B and 8B shapes whole.
    QCOMPARE(syntheticShape("llama-7b").defaultLayers, int64_t(32));
    QVERIFY(syntheticShape("llama-70b").defaultLayers < 80);
    QCOMPARE(syntheticShape("llama3-70b").defaultLayers, syntheticShape("llama-70b").defaultLayers);
    try {
        syntheticShape("llama-13b");
        QFAIL("an unknown synthetic shape was accepted");
    } catch (const Error& e) {
        QCOMPARE(std::string(e.what()),
                 std::string("--synthetic knows llama-7b, llama-70b, llama3-8b, llama3-70b, got 'llama-13b'"));
    }
    // Layer counts are checked before any weight is made.
    for (int64_t layers : {int64_t(0), int64_t(81)}) {
        try {
            syntheticLlama("llama-70b", layers, at::kCPU);
            QFAIL("a layer count outside 1..80 was accepted");
        } catch (const Error& e) {
            QVERIFY(std::string(e.what()).find("layers must be 1..80") != std::string::npos);
        }
    }
    // So is a context given outside 1..kMaxSyntheticContext (0 keeps the shape's own).
    for (int64_t context : {int64_t(-1), kMaxSyntheticContext + 1}) {
        try {
            syntheticLlama("llama-70b", 8, at::kCPU, 0, context);
            QFAIL("a context outside 1..kMaxSyntheticContext was accepted");
        } catch (const Error& e) {
            QVERIFY2(std::string(e.what()).find("synthetic llama-70b: context must be 1..1048576 positions, got " +
                                                std::to_string(context)) != std::string::npos, e.what());
        }
    }
}

QTEST_APPLESS_MAIN(TestLatency)
#include "test_latency.moc"
