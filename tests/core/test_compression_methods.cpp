// The compression pipeline on small synthetic models: each method changes the variant as it says (packed
// integers, exact sparsity patterns, removed heads, channels and blocks), leaves the base untouched, and
// runs end to end with calibration windows.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <algorithm>

#include "core/compress/compressed_layers.h"
#include "core/compress/awq_math.h"
#include "core/compress/gptq_math.h"
#include "core/compress/reconstruction_meter.h"
#include "core/compress/method.h"
#include "core/compress/quant_math.h"
#include "core/compress/pipeline.h"
#include "core/model/model_info.h"
#include "core/compress/prune_math.h"
#include "core/io/model_format.h"
#include "core/model/compressed_linear.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "tests/support/synthetic_models.h"

using namespace cwb;
using namespace cwb::test;
using nlohmann::json;

namespace {

struct Loaded {
    QTemporaryDir dir;
    std::unique_ptr<Model> model;
    Loaded(const ArchSpec& spec, const WeightMap& weights) {
        writeHfFolder(dir.path().toStdString(), spec, weights, ggml::Type::F32);
        model = loadModel(dir.path().toStdString());
    }
    explicit Loaded(const ArchSpec& spec) : Loaded(spec, randomWeights(spec, 21)) {}
};

Recipe recipe(const char* text) { return Recipe::fromJson(json::parse(text), "test recipe"); }

at::Tensor windows(int64_t samples = 6, int64_t length = 24, int64_t vocab = 64) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
    at::Tensor w = at::randint(2, vocab, {samples, length}, gen, at::kLong);
    w.select(1, 0).fill_(1);
    return w;
}

at::Tensor logitsOf(const Model& model) {
    Transformer rt(model);
    return rt.forward(at::tensor(std::vector<int64_t>{1, 7, 3, 9, 22, 41, 5, 60}, at::kLong).unsqueeze(0));
}

} // namespace

class TestCompressionMethods : public QObject {
    Q_OBJECT
private slots:
    void rtnStoresPackedIntegers();
    void errorPassReportsProgressAndStopsAtCancel();
    void overridesTargetsAndIgnore();
    void outputHeadIsQuantizedOnRequest();
    void fp8HeadQuantizesItsInput();
    void gptqTakesTheHeadAfterTheLastBlock();
    void awqTakesTheHeadAfterTheLastBlock();
    void nmLeavesTwoZerosInEveryFour();
    void globalMagnitudeAndDisabledSteps();
    void pruningAfterQuantizingIsNoted();
    void gptqAfterPruningKeepsTheMask();
    void removingSilentHeadsKeepsLogits();
    void kvGroupAndChannelPruningChangeShapes();
    void droppingABlockRenumbersTheRest();
    void calibratedMethodsRun_data();
    void calibratedMethodsRun();
    void calibrationWindowsAreSeeded();
    void reconstructionErrorIsReported();
    void stepErrorsEqualASecondPass_data();
    void stepErrorsEqualASecondPass();
    void missingCalibrationAndCancelAreReported();
    void headsAndBlocksTheModelLacksAreRefusedFirst_data();
    void headsAndBlocksTheModelLacksAreRefusedFirst();
    void awqFoldMovesScalesIntoProducers_data();
    void awqFoldMovesScalesIntoProducers();
    void smoothQuantFoldMovesScalesIntoNorms_data();
    void smoothQuantFoldMovesScalesIntoNorms();
};

void TestCompressionMethods::rtnStoresPackedIntegers() {
    Loaded l(tinyLlamaSpec());
    const at::Tensor before = logitsOf(*l.model);
    CompressionResult r = compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":16}}]})"), at::Tensor());
    QCOMPARE(r.model->compressedLayers().size(), size_t(2 * 7));
    auto linear = r.model->compressed("model.layers.1.mlp.down_proj");
    QVERIFY(linear);
    QCOMPARE(linear->bits(), 4);
    QCOMPARE(QString::fromStdString(linear->describe()), QStringLiteral("int4 g16 sym"));
    QVERIFY(linear->bitsPerWeight() < 6.0);   // 4-bit levels plus fp16 scales per 16 weights
    QVERIFY(r.model->storageBytes() < l.model->storageBytes());
    QVERIFY(!l.model->compressed("model.layers.1.mlp.down_proj"));   // the base is untouched
    at::Tensor after = logitsOf(*r.model);
    QVERIFY(!at::equal(before, after));
    QVERIFY((after - before).abs().max().item<double>() < 0.5 * before.abs().max().item<double>());
    at::Tensor w = r.model->floatTensor("model.layers.1.mlp.down_proj.weight");
    QVERIFY(at::allclose(w, linear->effectiveWeight()));
}

void TestCompressionMethods::overridesTargetsAndIgnore() {
    Loaded l(tinyLlamaSpec());
    CompressionResult r = compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":16},
        "targets":"mlp","ignore":["down_proj"],"overrides":[{"pattern":"layers\\.0\\.","params":{"bits":8}}]}]})"), at::Tensor());
    QCOMPARE(r.model->compressedLayers().size(), size_t(4));
    QCOMPARE(r.model->compressed("model.layers.0.mlp.up_proj")->bits(), 8);
    QCOMPARE(r.model->compressed("model.layers.1.mlp.gate_proj")->bits(), 4);
    QVERIFY(!r.model->compressed("model.layers.0.mlp.down_proj"));
    QVERIFY(!r.model->compressed("model.layers.0.self_attn.q_proj"));
    // Patterns that name no layer (misspelt) are errors that say which step and show a layer name, not empty steps.
    const auto refusal = [&](const char* text) {
        try {
            compressModel(*l.model, recipe(text), at::Tensor());
            return QString();
        } catch (const Error& e) {
            return QString(e.what());
        }
    };
    QString why = refusal(R"({"steps":[{"method":"quantize.rtn","targets":"mlp_proj"}]})");
    QVERIFY2(why.contains("step 1 (quantize.rtn): \"targets\" 'mlp_proj' leaves no layer") &&
             why.contains("(layer names look like model.layers.0."), qPrintable(why));
    why = refusal(R"({"steps":[{"method":"quantize.rtn","targets":"mlp","ignore":["mlp"]}]})");
    QVERIFY2(why.contains("leaves no layer of the model after \"ignore\""), qPrintable(why));
    why = refusal(R"({"steps":[{"method":"prune.nm"},{"method":"quantize.rtn","overrides":[{"pattern":"layer\\.0\\.","params":{"bits":8}}]}]})");
    QVERIFY2(why.contains("step 2 (quantize.rtn): the override pattern 'layer\\.0\\.' matches no layer"), qPrintable(why));
}

// quantize.rtn / quantize.fp8 "head": the output head as a layer of its own; a tied head gets a quantized copy and the
// embedding stays as it was.
void TestCompressionMethods::outputHeadIsQuantizedOnRequest() {
    for (const bool tied : {false, true}) {
        ArchSpec spec = tinyLlamaSpec();
        spec.tiedEmbeddings = tied;
        Loaded l(spec);
        QCOMPARE(l.model->has("lm_head.weight"), !tied);
        const at::Tensor embedding = l.model->floatTensor("model.embed_tokens.weight");
        const at::Tensor head = tied ? embedding : l.model->floatTensor("lm_head.weight");
        CompressionResult blocks = compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":16}}]})"), at::Tensor());
        QVERIFY(!blocks.model->compressed("lm_head"));   // "none" by default: what every recipe before "head" did
        CompressionResult r = compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":16,"head":"also"},
            "overrides":[{"pattern":"^lm_head$","params":{"bits":8}}]}]})"), at::Tensor());
        QCOMPARE(r.steps.at(0).layers, int64_t(2 * 7 + 1));
        QCOMPARE(r.model->compressedLayers().size(), size_t(2 * 7 + 1));
        auto quantized = r.model->compressed("lm_head");
        QVERIFY(quantized);
        QCOMPARE(QString::fromStdString(quantized->describe()), QStringLiteral("int8 g16 sym"));
        QCOMPARE(r.model->compressed("model.layers.1.mlp.up_proj")->bits(), 4);
        QVERIFY(!r.model->spec.tiedEmbeddings);
        QVERIFY(!l.model->compressed("lm_head") && l.model->spec.tiedEmbeddings == tied);   // the base is untouched
        QVERIFY(at::equal(r.model->floatTensor("model.embed_tokens.weight"), embedding));
        quant::QuantSpec q;
        q.bits = 8;
        q.groupSize = 16;
        const at::Tensor expected = IntLinear(quant::quantizeRtn(head, q)).effectiveWeight();
        QVERIFY(at::equal(r.model->floatTensor("lm_head.weight"), expected));
        QVERIFY(!at::equal(expected, head));
        // The runtime computes with the quantized head and the embedding as it was: the blocks-only variant given that
        // head as a dense weight gives the same logits.
        auto reference = blocks.model->clone();
        reference->replaceTensor("lm_head.weight", expected);
        reference->spec.tiedEmbeddings = false;
        const at::Tensor logits = logitsOf(*r.model);
        QVERIFY2(at::allclose(logits, logitsOf(*reference), 1e-5, 1e-5), tied ? "tied" : "untied");
        QVERIFY(!at::allclose(logits, logitsOf(*blocks.model), 1e-3, 1e-3));
        // From its packed levels (the CPU's integer kernels), over more token rows than one slice of the head (32),
        // the head gives the dequantized path's logits.
        RuntimeOptions packed;
        packed.cpuPackedInt = CpuPackedInt::On;
        Transformer packedRuntime(*r.model, packed);
        QVERIFY(packedRuntime.layerPaths().at("lm_head").native);
        const at::Tensor tokens = at::randint(1, spec.vocab, {2, 77}, at::kLong);
        const at::Tensor sliced = packedRuntime.forward(tokens);
        QCOMPARE(sliced.sizes().vec(), (std::vector<int64_t>{2, 77, spec.vocab}));
        QVERIFY(at::allclose(sliced, Transformer(*r.model).forward(tokens), 1e-4, 1e-4));
        // Untied, the quantized head replaces the f32 one; tied, it is added beside the embedding.
        if (tied) QCOMPARE(r.model->storageBytes(), blocks.model->storageBytes() + quantized->storageBytes());
        else QVERIFY(r.model->storageBytes() < blocks.model->storageBytes());

        // "only": the head alone, after the blocks' own step; the blocks keep what step 1 gave them.
        CompressionResult two = compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":16}},
            {"method":"quantize.fp8","params":{"head":"only"}}]})"), at::Tensor());
        QCOMPARE(two.steps.at(1).layers, int64_t(1));
        QCOMPARE(QString::fromStdString(two.model->compressed("lm_head")->kind()), QStringLiteral("fp8"));
        QCOMPARE(two.model->compressed("model.layers.0.self_attn.q_proj")->bits(), 4);
        QVERIFY(at::equal(two.model->floatTensor("model.layers.0.self_attn.q_proj.weight"),
                          blocks.model->floatTensor("model.layers.0.self_attn.q_proj.weight")));
    }
    Loaded l(tinyLlamaSpec());
    try {
        compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.rtn","params":{"head":"only"},"targets":"mlp"}]})"), at::Tensor());
        QFAIL("targets with head only were accepted");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("\"head\": \"only\" compresses the output head alone"), e.what());
    }
    try {
        compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.smoothquant","params":{"head":"also"}}]})"), at::Tensor());
        QFAIL("SmoothQuant took the head");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("unknown parameter 'head'"), e.what());
    }
    try {
        recipe(R"({"steps":[{"method":"quantize.rtn","overrides":[{"pattern":"mlp","params":{"head":"also"}}]}]})");
        QFAIL("an override's head was accepted");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("\"head\" says which layers the step takes"), e.what());
    }
    // "ignore" holds for the head too.
    CompressionResult ignored = compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.rtn","params":{"head":"also"},"ignore":["^lm_head$"]}]})"), at::Tensor());
    QVERIFY(!ignored.model->compressed("lm_head"));
    QCOMPARE(ignored.model->compressedLayers().size(), size_t(2 * 7));
}

// GPTQ with "head": after the last block the pass gives the head the final norm of the variant's hidden states (the
// compressed blocks' output with "also"), and the head is quantized from that Hessian: the same levels as GPTQ run by
// hand on inputs computed with the runtime's own pieces. Tied, the embedding stays and the head gets its own copy.
void TestCompressionMethods::gptqTakesTheHeadAfterTheLastBlock() {
    const at::Tensor w = windows(6, 24);
    for (const bool tied : {false, true}) {
        for (const char* head : {"only", "also"}) {
            ArchSpec spec = tinyLlamaSpec();
            spec.tiedEmbeddings = tied;
            Loaded l(spec);
            const at::Tensor embedding = l.model->floatTensor("model.embed_tokens.weight");
            const at::Tensor original = tied ? embedding : l.model->floatTensor("lm_head.weight");
            const std::string text = std::string(R"({"steps":[{"method":"quantize.gptq","params":{"bits":3,"group_size":16,"head":")") +
                                     head + "\"}}]}";
            CompressionResult r = compressModel(*l.model, recipe(text.c_str()), w);
            const std::string where = std::string(tied ? "tied, " : "untied, ") + head;
            auto quantized = r.model->compressed("lm_head");
            QVERIFY2(quantized, where.c_str());
            QCOMPARE(QString::fromStdString(quantized->describe()), QStringLiteral("int3 g16 sym gptq"));
            QCOMPARE(r.model->compressedLayers().size(), size_t(std::string(head) == "also" ? 2 * 7 + 1 : 1));
            QVERIFY(!r.model->spec.tiedEmbeddings);
            QVERIFY(at::equal(r.model->floatTensor("model.embed_tokens.weight"), embedding));

            // The head's inputs by hand: the variant's blocks (as the pass computes them: dequantized, f32, CPU), then
            // the final norm.
            RuntimeOptions dequantized;
            dequantized.nativeKernels = false;
            Transformer rt(*r.model, dequantized);
            at::Tensor hidden = rt.embed(w);
            for (int64_t b = 0; b < spec.layers; ++b) hidden = rt.runBlock(b, hidden);
            const at::Tensor x = rt.finalNorm(hidden);
            quant::HessianAccumulator hessian(spec.hidden);
            hessian.add(x.reshape({-1, spec.hidden}).to(at::kFloat));
            quant::GptqOptions options;
            options.quant.bits = 3;
            options.quant.groupSize = 16;
            const at::Tensor expected = IntLinear(quant::gptqQuantize(original, hessian.hessian(), options).weight).effectiveWeight();
            QVERIFY2(at::equal(r.model->floatTensor("lm_head.weight"), expected), where.c_str());
            // GPTQ minimises the error on those inputs: below round-to-nearest's on the same grid.
            quant::QuantSpec grid = options.quant;
            const at::Tensor rounded = IntLinear(quant::quantizeRtn(original, grid)).effectiveWeight();
            const double gptqError = reconstructionError(original, expected, hessian.hessian());
            const double rtnError = reconstructionError(original, rounded, hessian.hessian());
            QVERIFY2(gptqError < rtnError, (where + ": " + std::to_string(gptqError) + " vs " + std::to_string(rtnError)).c_str());
            // The step reports the head's error (a tied head's against the embedding it was).
            const auto& errors = r.steps.at(0).reconstructionError;
            QVERIFY2(errors.count("lm_head"), where.c_str());
            QVERIFY(std::abs(errors.at("lm_head") - gptqError) <= 1e-6 * gptqError);
        }
    }
}

// AWQ's head: its scale searched on the final norm of the compressed blocks' output, then kept beside the head
// (x / s) or, with fold, folded into the final norm; a tied head gets its own copy.
void TestCompressionMethods::awqTakesTheHeadAfterTheLastBlock() {
    const at::Tensor w = windows(6, 24);
    for (const bool tied : {false, true}) {
        for (const bool fold : {false, true}) {
            for (const char* head : {"only", "also"}) {
                ArchSpec spec = tinyLlamaSpec();
                spec.tiedEmbeddings = tied;
                Loaded l(spec);
                const at::Tensor embedding = l.model->floatTensor("model.embed_tokens.weight");
                const at::Tensor original = tied ? embedding : l.model->floatTensor("lm_head.weight");
                // A few salient channels in the head's input (as real models have), so the search picks a scale.
                at::Tensor gamma = l.model->floatTensor("model.norm.weight").clone();
                for (int64_t c : {3, 17, 29}) gamma[c] *= 12;
                l.model->replaceTensor("model.norm.weight", gamma);
                const std::string text = std::string(R"({"steps":[{"method":"quantize.awq","params":{"bits":4,"group_size":16,"grid":8,"fold":)") +
                                         (fold ? "true" : "false") + R"(,"head":")" + head + "\"}}]}";
                CompressionResult r = compressModel(*l.model, recipe(text.c_str()), w);
                const std::string where = std::string(tied ? "tied, " : "untied, ") + (fold ? "fold, " : "") + head;
                auto quantized = r.model->compressed("lm_head");
                QVERIFY2(quantized, where.c_str());
                QCOMPARE(quantized->bits(), 4);
                QCOMPARE(r.model->compressedLayers().size(), size_t(std::string(head) == "also" ? 2 * 7 + 1 : 1));
                QVERIFY(!r.model->spec.tiedEmbeddings);
                QVERIFY(at::equal(r.model->floatTensor("model.embed_tokens.weight"), embedding));

                // The head's search inputs by hand: the variant's blocks (dequantized, f32, CPU) and the final norm as
                // it was before the head's scale was folded into it.
                std::unique_ptr<Model> unfolded = r.model->clone();
                unfolded->replaceTensor("model.norm.weight", gamma);
                RuntimeOptions dequantized;
                dequantized.nativeKernels = false;
                Transformer rt(*unfolded, dequantized);
                at::Tensor hidden = rt.embed(w);
                for (int64_t b = 0; b < spec.layers; ++b) hidden = rt.runBlock(b, hidden);
                const at::Tensor x = rt.finalNorm(hidden).reshape({-1, spec.hidden}).to(at::kFloat);
                quant::AwqOptions options;
                options.quant = {4, false, 16};
                options.grid = 8;
                const quant::AwqResult search = quant::awqSearch(original, x, options);
                const at::Tensor s = search.inputScales;
                QVERIFY2(search.alpha > 0, (where + ": the search kept s = 1, so nothing here tells a scale from none").c_str());
                const quant::QuantizedWeight q = quant::quantizeRtn(original * s.unsqueeze(0), options.quant);
                if (fold) {
                    QVERIFY2(at::equal(r.model->floatTensor("lm_head.weight"), IntLinear(q).effectiveWeight()), where.c_str());
                    QVERIFY2(at::equal(r.model->floatTensor("model.norm.weight"), gamma / s), where.c_str());
                } else {
                    QVERIFY2(at::equal(r.model->floatTensor("lm_head.weight"), IntLinear(q, s, "awq").effectiveWeight()), where.c_str());
                    QVERIFY2(at::equal(r.model->floatTensor("model.norm.weight"), gamma), where.c_str());
                }
                // The runtime computes the head as the step left it (input scales beside it, or the folded norm).
                Transformer native(*r.model);
                const at::Tensor logits = native.logits(hidden);
                const at::Tensor expected = at::linear(x, IntLinear(q).effectiveWeight() / s.unsqueeze(0));
                QVERIFY2(at::allclose(logits, expected.view(logits.sizes()), 1e-4, 1e-4), where.c_str());
                // The head's error is reported, and the search kept it at or below round-to-nearest's on the same grid.
                const auto& errors = r.steps.at(0).reconstructionError;
                QVERIFY2(errors.count("lm_head"), where.c_str());
                quant::HessianAccumulator hessian(spec.hidden);
                hessian.add(x);
                const double rtnError = reconstructionError(original, quant::quantizeRtn(original, options.quant).dequantize(),
                                                            hessian.hessian());
                const double awqError = reconstructionError(original, IntLinear(q).effectiveWeight() / s.unsqueeze(0), hessian.hessian());
                QVERIFY2(awqError <= rtnError * (1 + 1e-9), (where + ": " + std::to_string(awqError) + " vs " + std::to_string(rtnError)).c_str());
                QVERIFY2(std::abs(errors.at("lm_head") - awqError) <= 1e-4 * awqError,
                         (where + ": " + std::to_string(errors.at("lm_head")) + " vs " + std::to_string(awqError)).c_str());
            }
        }
    }
}

// An FP8 head with dynamic activations quantizes the normed hidden state first, as the blocks' FP8 layers do.
void TestCompressionMethods::fp8HeadQuantizesItsInput() {
    ArchSpec spec = tinyLlamaSpec();
    spec.tiedEmbeddings = false;
    Loaded l(spec);
    CompressionResult r = compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.fp8","params":{"head":"only","activations":"dynamic"}}]})"), at::Tensor());
    auto head = r.model->compressed("lm_head");
    QVERIFY(head);
    Transformer rt(*r.model);
    at::Tensor hidden = rt.embed(at::tensor(std::vector<int64_t>{1, 7, 3, 9, 22, 41}, at::kLong).unsqueeze(0));
    for (int64_t b = 0; b < spec.layers; ++b) hidden = rt.runBlock(b, hidden);
    const at::Tensor normed = hidden * at::rsqrt(hidden.pow(2).mean(-1, true) + spec.normEps) *
                              r.model->floatTensor("model.norm.weight");
    const at::Tensor expected = at::linear(head->prepareInput(normed), head->weight());
    const at::Tensor unquantizedInput = at::linear(normed, head->weight());
    const at::Tensor logits = rt.logits(hidden);
    QVERIFY(at::allclose(logits, expected, 1e-4, 1e-4));
    QVERIFY(!at::allclose(logits, unquantizedInput, 1e-4, 1e-4));
}

void TestCompressionMethods::nmLeavesTwoZerosInEveryFour() {
    Loaded l(tinyLlamaSpec());
    CompressionResult r = compressModel(*l.model, recipe(R"({"steps":[{"method":"prune.nm"}]})"), at::Tensor());
    for (const auto& layer : r.model->linearLayers()) {
        at::Tensor w = r.model->floatTensor(layer + ".weight");
        at::Tensor zerosPerGroup = (w == 0).view({w.size(0), -1, 4}).sum(-1);
        QVERIFY2(at::all(zerosPerGroup == 2).item<bool>(), layer.c_str());
    }
}

void TestCompressionMethods::globalMagnitudeAndDisabledSteps() {
    Loaded l(tinyLlamaSpec());
    CompressionResult r = compressModel(*l.model, recipe(R"({"steps":[{"method":"prune.magnitude","params":{"sparsity":0.5,"scope":"global"}},
        {"method":"quantize.rtn","enabled":false}]})"), at::Tensor());
    int64_t zeros = 0, total = 0;
    std::vector<double> perLayer;
    for (const auto& layer : r.model->linearLayers()) {
        at::Tensor w = r.model->floatTensor(layer + ".weight");
        zeros += (w == 0).sum().item<int64_t>();
        total += w.numel();
        perLayer.push_back(prune::sparsityOf(w));
    }
    QCOMPARE(zeros, total / 2);   // one threshold for all layers: exactly half overall...
    QVERIFY(*std::max_element(perLayer.begin(), perLayer.end()) - *std::min_element(perLayer.begin(), perLayer.end()) > 0.01);   // ...not per layer
    QVERIFY(r.model->compressedLayers().empty());   // the disabled RTN step did not run
    QCOMPARE(r.steps.size(), size_t(1));
}

// Regression (user probe): a prune step after a quantize step stored the layers dense again, and nothing said so.
void TestCompressionMethods::pruningAfterQuantizingIsNoted() {
    Loaded l(tinyLlamaSpec());
    CompressionResult r = compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":16}},
        {"method":"prune.magnitude","params":{"sparsity":0.5},"targets":"mlp"}]})"), at::Tensor());
    QCOMPARE(r.steps.size(), size_t(2));
    QVERIFY(r.steps[0].notes.empty());
    QCOMPARE(r.model->compressedLayers().size(), size_t(2 * 4));   // attention stays quantized, the MLP is dense
    QVERIFY(!r.model->compressed("model.layers.0.mlp.gate_proj"));
    bool noted = false;
    for (const auto& n : r.steps[1].notes)
        noted |= n.find("6 compressed layers (model.layers.0.mlp.") == 0 && n.find("quantization is gone") != std::string::npos;
    QVERIFY2(noted, r.steps[1].notes.empty() ? "no note" : r.steps[1].notes.front().c_str());
    // Pruning first and quantizing after keeps both, and says nothing.
    CompressionResult ordered = compressModel(*l.model, recipe(R"({"steps":[{"method":"prune.magnitude","params":{"sparsity":0.5}},
        {"method":"quantize.rtn","params":{"bits":4,"group_size":16}}]})"), at::Tensor());
    QCOMPARE(ordered.model->compressedLayers().size(), size_t(2 * 7));
    QVERIFY(ordered.steps[0].notes.empty() && ordered.steps[1].notes.empty());
}

// Regression (user probe): prune.nm 2:4 then quantize.gptq gave layers whose zeros had moved (GPTQ's updates filled
// the pruned places). keep_sparsity (default) holds them; off, the old behaviour.
void TestCompressionMethods::gptqAfterPruningKeepsTheMask() {
    Loaded l(tinyLlamaSpec());
    const char* pruneThenGptq = R"({"steps":[{"method":"prune.nm","params":{"n":2,"m":4}},
        {"method":"quantize.gptq","params":{"bits":4,"group_size":16%s}}]})";
    auto brokenGroups = [](const Model& m) {
        int64_t broken = 0;
        for (const auto& name : m.linearLayers())
            broken += ((m.floatTensor(name + ".weight").reshape({-1, 4}) != 0).sum(1) > 2).sum().item<int64_t>();
        return broken;
    };
    char text[512];
    std::snprintf(text, sizeof text, pruneThenGptq, "");
    CompressionResult kept = compressModel(*l.model, recipe(text), windows());
    QCOMPARE(kept.model->compressedLayers().size(), size_t(2 * 7));
    QCOMPARE(brokenGroups(*kept.model), int64_t(0));
    const auto& notes = kept.steps[1].notes;
    QVERIFY(std::any_of(notes.begin(), notes.end(), [](const std::string& n) { return n.find("14 layers with pruned (zero) weights kept them zero") == 0; }));
    std::snprintf(text, sizeof text, pruneThenGptq, R"(,"keep_sparsity":false)");
    QVERIFY(brokenGroups(*compressModel(*l.model, recipe(text), windows()).model) > 0);

    // Regression (review): zeros that rounding left were taken for a pruning mask. A GGUF read as Q4_0 (w = d(q - 8):
    // about 1/16 exactly zero) and a layer RTN int4 sym made (level 8) both pass the 1% rule; neither is pruned.
    auto keptNote = [](const CompressionResult& r) {
        const auto& n = r.steps.back().notes;
        return std::any_of(n.begin(), n.end(), [](const std::string& s) { return s.find("kept them zero") != std::string::npos; });
    };
    QTemporaryDir dir;
    const std::string gguf = (dir.path() + "/q4_0.gguf").toStdString();
    writeGguf(gguf, packableLlamaSpec(), randomWeights(packableLlamaSpec(), 21), ggml::Type::Q4_0);   // rows of 32s
    auto quantizedFile = loadModel(gguf);
    const at::Tensor q = quantizedFile->floatTensor("model.layers.0.self_attn.q_proj.weight");
    QCOMPARE(quantizedFile->tensor("model.layers.0.self_attn.q_proj.weight").type, ggml::Type::Q4_0);
    QVERIFY((q == 0).sum().item<double>() >= 0.01 * double(q.numel()));
    const char* gptq = R"({"steps":[{"method":"quantize.gptq","params":{"bits":4,"group_size":16}}]})";
    QVERIFY(!keptNote(compressModel(*quantizedFile, recipe(gptq), windows())));
    const char* rtnThenGptq = R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"group_size":16}},
        {"method":"quantize.gptq","params":{"bits":4,"group_size":16}}]})";
    const CompressionResult twice = compressModel(*l.model, recipe(rtnThenGptq), windows());
    QVERIFY(!keptNote(twice));
    // Pruned after reading the Q4_0 file, the zeros are a mask again.
    std::snprintf(text, sizeof text, pruneThenGptq, "");
    QVERIFY(keptNote(compressModel(*quantizedFile, recipe(text), windows())));
}

void TestCompressionMethods::removingSilentHeadsKeepsLogits() {
    ArchSpec spec = tinyLlamaSpec();   // 4 query heads in 2 kv groups of 2, head dim 8
    WeightMap w = randomWeights(spec, 5);
    at::Tensor& o = w["model.layers.0.self_attn.o_proj.weight"];
    o.narrow(1, 1 * 8, 8).zero_();   // head 1 (group 0) and head 3 (group 1) contribute nothing
    o.narrow(1, 3 * 8, 8).zero_();
    Loaded l(spec, w);
    CallbackFeedback feedback;
    std::string logged;
    feedback.logCallback = [&](const std::string& line) { logged += line + "\n"; };
    CompressionResult r = compressModel(*l.model, recipe(R"({"steps":[{"method":"prune.heads","params":{"heads":"0:1,0:3"}}]})"),
                                        at::Tensor(), &feedback);
    // A structural step acts on the model (its log said "on 14 layers", the target linears it does not act on one by one).
    QVERIFY2(logged.find("step 1/1: prune.heads\n") != std::string::npos, logged.c_str());
    QCOMPARE(r.model->spec.headsAt(0), int64_t(2));
    QCOMPARE(r.model->spec.kvHeadsAt(0), int64_t(2));
    QCOMPARE(r.model->spec.headsAt(1), int64_t(4));
    // `cwb info` gives the range over the layers (it gave layer 0's heads as the model's).
    const std::string info = modelInfoText(*r.model);
    QVERIFY2(info.find(", heads 2-4 by layer (kv 2, dim 8), ffn 48,") != std::string::npos, info.substr(0, 400).c_str());
    QCOMPARE(r.model->tensor("model.layers.0.self_attn.q_proj.weight").shape, (std::vector<int64_t>{16, 32}));
    QCOMPARE(r.model->tensor("model.layers.0.self_attn.o_proj.weight").shape, (std::vector<int64_t>{32, 16}));
    QVERIFY(at::allclose(logitsOf(*r.model), logitsOf(*l.model), 1e-5, 1e-5));
    // Removing a head that does contribute changes the logits: the test above can fail.
    CompressionResult live = compressModel(*l.model, recipe(R"({"steps":[{"method":"prune.heads","params":{"heads":"0:0,0:2"}}]})"), at::Tensor());
    QVERIFY(!at::allclose(logitsOf(*live.model), logitsOf(*l.model), 1e-3, 1e-3));
    // Uneven groups are refused with a message.
    QVERIFY_THROWS_EXCEPTION(Error, compressModel(*l.model, recipe(R"({"steps":[{"method":"prune.heads","params":{"heads":"0:1"}}]})"), at::Tensor()));
    // A ratio the kv groups cannot hold (0.25 of groups of 2) is rounded, and the report says how many heads went.
    CompressionResult rounded = compressModel(*l.model, recipe(R"({"steps":[{"method":"prune.heads","params":{"ratio":0.25,"importance":"weight"}}]})"), at::Tensor());
    QCOMPARE(rounded.model->spec.headsAt(0), int64_t(2));
    const std::vector<std::string>& notes = rounded.steps.at(0).notes;
    QVERIFY2(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
                 return n == "layer 0: removed 2 of 4 query heads (50%); ratio 0.25 asked, rounded to what whole heads, as many "
                             "from each kv group allows";
             }), nlohmann::json(notes).dump().c_str());
}

void TestCompressionMethods::kvGroupAndChannelPruningChangeShapes() {
    Loaded l(tinyLlamaSpec());
    CompressionResult r = compressModel(*l.model, recipe(R"({"steps":[
        {"method":"prune.heads","params":{"unit":"kv_group","ratio":0.5,"importance":"weight"}},
        {"method":"prune.channels","params":{"ratio":0.25,"importance":"weight"}}]})"), at::Tensor());
    for (int64_t b = 0; b < 2; ++b) {
        QCOMPARE(r.model->spec.kvHeadsAt(b), int64_t(1));
        QCOMPARE(r.model->spec.headsAt(b), int64_t(2));
        QCOMPARE(r.model->spec.ffnAt(b), int64_t(36));
    }
    QCOMPARE(r.model->tensor("model.layers.1.self_attn.k_proj.weight").shape, (std::vector<int64_t>{8, 32}));
    QCOMPARE(r.model->tensor("model.layers.1.mlp.down_proj.weight").shape, (std::vector<int64_t>{32, 36}));
    QVERIFY(r.model->parameterCount() < l.model->parameterCount());
    QVERIFY(at::isfinite(logitsOf(*r.model)).all().item<bool>());
    // Per-layer ratios through overrides.
    CompressionResult perLayer = compressModel(*l.model, recipe(R"({"steps":[{"method":"prune.channels",
        "params":{"ratio":0.25,"importance":"weight"},"overrides":[{"pattern":"layers\\.1\\.","params":{"ratio":0.5}}]}]})"), at::Tensor());
    QCOMPARE(perLayer.model->spec.ffnAt(0), int64_t(36));
    QCOMPARE(perLayer.model->spec.ffnAt(1), int64_t(24));
    // GPT-2 channels too.
    Loaded g(tinyGpt2Spec());
    CompressionResult rg = compressModel(*g.model, recipe(R"({"steps":[{"method":"prune.channels","params":{"ratio":0.5,"importance":"weight"}}]})"), at::Tensor());
    QCOMPARE(rg.model->tensor("transformer.h.0.mlp.c_fc.bias").shape, (std::vector<int64_t>{32}));
    QVERIFY(at::isfinite(logitsOf(*rg.model)).all().item<bool>());
}

void TestCompressionMethods::droppingABlockRenumbersTheRest() {
    Loaded l(tinyLlamaSpec());
    CompressionResult r = compressModel(*l.model, recipe(R"({"steps":[{"method":"prune.layers","params":{"layers":"0"}}]})"), at::Tensor());
    QCOMPARE(r.model->spec.layers, int64_t(1));
    QVERIFY(!r.model->has("model.layers.1.mlp.up_proj.weight"));
    QVERIFY(at::equal(r.model->floatTensor("model.layers.0.mlp.up_proj.weight"), l.model->floatTensor("model.layers.1.mlp.up_proj.weight")));
    QVERIFY(at::isfinite(logitsOf(*r.model)).all().item<bool>());
    const auto noted = [](const CompressionResult& c, const std::string& note) {
        const auto& notes = c.steps.at(0).notes;
        return std::find(notes.begin(), notes.end(), note) != notes.end();
    };
    QVERIFY(noted(r, "removed blocks 0"));
    // count 0 removes nothing and says so (the note read "removed blocks " with an empty list).
    // (and needs no calibration for it, with the default block_influence)
    CompressionResult none = compressModel(*l.model, recipe(R"({"steps":[{"method":"prune.layers","params":{"count":0}}]})"), at::Tensor());
    QCOMPARE(none.model->spec.layers, int64_t(2));
    QVERIFY(noted(none, "removed no block (count 0)"));
}

void TestCompressionMethods::calibratedMethodsRun_data() {
    QTest::addColumn<QString>("recipe");
    QTest::addColumn<QString>("check");
    QTest::newRow("gptq") << R"({"steps":[{"method":"quantize.gptq","params":{"bits":4,"group_size":16,"act_order":true}}]})" << "int4";
    QTest::newRow("awq") << R"({"steps":[{"method":"quantize.awq","params":{"bits":4,"group_size":16}}]})" << "int4";
    QTest::newRow("awq folded") << R"({"steps":[{"method":"quantize.awq","params":{"bits":4,"group_size":16,"fold":true}}]})" << "int4";
    QTest::newRow("smoothquant") << R"({"steps":[{"method":"quantize.smoothquant","params":{"alpha":0.5}}]})" << "w8a8";
    QTest::newRow("fp8") << R"({"steps":[{"method":"quantize.fp8","params":{"activations":"dynamic"}}]})" << "fp8";
    QTest::newRow("wanda") << R"({"steps":[{"method":"prune.wanda","params":{"sparsity":0.5}}]})" << "sparse50";
    QTest::newRow("sparsegpt") << R"({"steps":[{"method":"prune.sparsegpt","params":{"sparsity":0.5}}]})" << "sparse50";
    QTest::newRow("2:4 wanda") << R"({"steps":[{"method":"prune.nm","params":{"score":"wanda"}}]})" << "sparse50";
    QTest::newRow("2:4 sparsegpt") << R"({"steps":[{"method":"prune.nm","params":{"score":"sparsegpt"}}]})" << "sparse50";
    QTest::newRow("heads by activation") << R"({"steps":[{"method":"prune.heads","params":{"ratio":0.5}}]})" << "heads2";
    QTest::newRow("channels by activation") << R"({"steps":[{"method":"prune.channels","params":{"ratio":0.25}}]})" << "ffn36";
    QTest::newRow("block influence") << R"({"steps":[{"method":"prune.layers","params":{"count":1}}]})" << "layers1";
    QTest::newRow("prune then quantize") << R"({"steps":[{"method":"prune.wanda"},{"method":"quantize.gptq","params":{"group_size":16}}]})" << "int4";
}

void TestCompressionMethods::calibratedMethodsRun() {
    QFETCH(QString, recipe);
    QFETCH(QString, check);
    Loaded l(tinyLlamaSpec());
    CompressionResult r = compressModel(*l.model, ::recipe(recipe.toUtf8().constData()), windows());
    QCOMPARE(r.calibrationSamples, int64_t(6));
    const std::string layer = "model.layers.0.mlp.up_proj";
    if (check == "int4") QCOMPARE(r.model->compressed(layer)->bits(), 4);
    if (check == "w8a8" || check == "fp8") QCOMPARE(QString::fromStdString(r.model->compressed(layer)->kind()), check);
    if (check == "w8a8") {   // per-layer smoothing: the report says what it costs on CUDA and in export
        const auto& notes = r.steps.front().notes;
        QVERIFY(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
            return n.find("fold=true stacks them") != std::string::npos;
        }));
    }
    if (check == "sparse50")
        for (const auto& name : r.model->linearLayers())
            QCOMPARE(prune::sparsityOf(r.model->floatTensor(name + ".weight")), 0.5);
    if (check == "heads2") QCOMPARE(r.model->spec.headsAt(1), int64_t(2));
    if (check == "ffn36") QCOMPARE(r.model->spec.ffnAt(0), int64_t(36));
    if (check == "layers1") QCOMPARE(r.model->spec.layers, int64_t(1));
    QVERIFY(at::isfinite(logitsOf(*r.model)).all().item<bool>());
}

void TestCompressionMethods::reconstructionErrorIsReported() {
    Loaded l(tinyLlamaSpec());
    const at::Tensor w = windows(8, 32);
    CompressionResult rtn = compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.rtn","params":{"bits":3,"group_size":16}}]})"), w);
    CompressionResult gptq = compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.gptq","params":{"bits":3,"group_size":16}}]})"), w);
    const auto& a = rtn.steps.at(0).reconstructionError;
    const auto& b = gptq.steps.at(0).reconstructionError;
    QCOMPARE(a.size(), size_t(14));
    for (const auto& [layer, e] : a) QVERIFY2(e > 0 && e < 1, layer.c_str());
    // In the first block both see the same inputs, and GPTQ minimises exactly this error.
    for (const auto& [layer, e] : b)
        if (layer.rfind("model.layers.0.", 0) == 0) QVERIFY2(e < a.at(layer), layer.c_str());
    // A data-free step on the head alone gets no second pass (a forward through every block for one error).
    QVERIFY(compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.rtn","params":{"head":"only"}}]})"), w).steps[0].reconstructionError.empty());
    // Without calibration windows nothing is measured; structured steps change shapes and report nothing.
    QVERIFY(compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.rtn"}]})"), at::Tensor()).steps[0].reconstructionError.empty());
    QVERIFY(compressModel(*l.model, recipe(R"({"steps":[{"method":"prune.channels","params":{"importance":"weight"}}]})"), w)
                .steps[0].reconstructionError.empty());
    QVERIFY(compressModel(*l.model, recipe(R"({"steps":[{"method":"prune.layers","params":{"layers":"0"}}]})"), w)
                .steps[0].reconstructionError.empty());   // block 1 renamed to 0 is not "block 0 compressed"
}

void TestCompressionMethods::stepErrorsEqualASecondPass_data() {
    QTest::addColumn<QString>("first");    // step run before the measured one (empty: none)
    QTest::addColumn<QString>("measured");
    QTest::addColumn<bool>("inStep");      // whether the step's own pass can measure the errors
    QTest::newRow("gptq") << "" << R"({"method":"quantize.gptq","params":{"bits":3,"group_size":16}})" << true;
    QTest::newRow("gptq act-order") << "" << R"({"method":"quantize.gptq","params":{"bits":4,"group_size":16,"act_order":true}})" << true;
    QTest::newRow("sparsegpt") << "" << R"({"method":"prune.sparsegpt","params":{"sparsity":0.5}})" << true;
    QTest::newRow("smoothquant") << "" << R"({"method":"quantize.smoothquant"})" << true;
    QTest::newRow("wanda") << "" << R"({"method":"prune.wanda","params":{"sparsity":0.5}})" << true;
    QTest::newRow("gptq on mlp only") << "" << R"({"method":"quantize.gptq","params":{"group_size":16},"targets":"mlp"})" << true;
    QTest::newRow("gptq after wanda") << R"({"method":"prune.wanda"})" << R"({"method":"quantize.gptq","params":{"group_size":16}})" << true;
    QTest::newRow("awq") << "" << R"({"method":"quantize.awq","params":{"group_size":16}})" << true;
    QTest::newRow("awq with the head") << "" << R"({"method":"quantize.awq","params":{"group_size":16,"head":"also"}})" << true;
    QTest::newRow("gptq with the head") << "" << R"({"method":"quantize.gptq","params":{"group_size":16,"head":"also"}})" << true;
    QTest::newRow("rtn with the head (second pass)") << "" << R"({"method":"quantize.rtn","params":{"group_size":16,"head":"also"}})" << false;
}

// A calibrated step measures its reconstruction errors during its own pass; they must be the numbers a second pass
// over the variant gives (reconstructionErrors), to the last bit.
void TestCompressionMethods::stepErrorsEqualASecondPass() {
    QFETCH(QString, first);
    QFETCH(QString, measured);
    QFETCH(bool, inStep);
    Loaded l(tinyLlamaSpec());
    const at::Tensor w = windows(8, 32);
    const std::string steps = (first.isEmpty() ? "" : first.toStdString() + ",") + measured.toStdString();
    CallbackFeedback feedback;
    bool loggedInStep = false;
    feedback.logCallback = [&](const std::string& line) { loggedInStep |= line.find("measured in the step") != std::string::npos; };
    CompressionResult r = compressModel(*l.model, recipe(("{\"steps\":[" + steps + "]}").c_str()), w, &feedback);
    QCOMPARE(loggedInStep, inStep);
    std::unique_ptr<Model> before = first.isEmpty()
        ? l.model->clone()
        : compressModel(*l.model, recipe(("{\"steps\":[" + first.toStdString() + "]}").c_str()), w).model;
    const Recipe measuredRecipe = recipe(("{\"steps\":[" + measured.toStdString() + "]}").c_str());
    const std::map<std::string, double> secondPass =
        reconstructionErrors(*before, *r.model, targetLayers(*before, measuredRecipe.steps.at(0)), w, nullptr);
    const auto& report = r.steps.back().reconstructionError;
    QVERIFY(!report.empty());
    QCOMPARE(report.size(), secondPass.size());
    for (const auto& [layer, e] : secondPass) {
        QVERIFY2(report.count(layer), layer.c_str());
        QVERIFY2(report.at(layer) == e, (layer + ": " + std::to_string(report.at(layer)) + " vs " + std::to_string(e)).c_str());
    }
}

void TestCompressionMethods::calibrationWindowsAreSeeded() {
    std::vector<TokenId> tokens;
    for (int i = 0; i < 500; ++i) tokens.push_back(2 + (i * 13) % 60);
    CalibrationSpec spec;
    spec.samples = 5;
    spec.seqLen = 32;
    spec.seed = 9;
    at::Tensor a = drawCalibration(tokens, 1, spec, 128), b = drawCalibration(tokens, 1, spec, 128);
    QVERIFY(at::equal(a, b));
    QCOMPARE(a.sizes().vec(), (std::vector<int64_t>{5, 32}));
    QVERIFY(at::all(a.select(1, 0) == 1).item<bool>());
    spec.seed = 10;
    QVERIFY(!at::equal(a, drawCalibration(tokens, 1, spec, 128)));
    spec.seqLen = 512;
    std::string note;
    at::Tensor clipped = drawCalibration(tokens, 1, spec, 128, &note);
    QCOMPARE(clipped.size(1), int64_t(128));
    QVERIFY(QString::fromStdString(note).contains("clipped from 512 to 128"));
}

void TestCompressionMethods::missingCalibrationAndCancelAreReported() {
    Loaded l(tinyLlamaSpec());
    try {
        compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.gptq"}]})"), at::Tensor());
        QFAIL("GPTQ ran without calibration");
    } catch (const Error& e) {
        QVERIFY(QString(e.what()).contains("calibration"));
    }
    Feedback cancelled;
    cancelled.cancel();
    QVERIFY_THROWS_EXCEPTION(Cancelled, compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.rtn"}]})"), at::Tensor(), &cancelled));
    QVERIFY_THROWS_EXCEPTION(Cancelled, compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.gptq"}]})"), windows(), &cancelled));
    QVERIFY(l.model->compressedLayers().empty());
}

void TestCompressionMethods::headsAndBlocksTheModelLacksAreRefusedFirst_data() {
    QTest::addColumn<QString>("lastStep");
    QTest::addColumn<QString>("said");
    // tinyLlamaSpec: 2 blocks, 4 query heads in 2 kv groups of 2.
    QTest::newRow("a block it lacks") << R"({"method":"prune.heads","params":{"heads":"9:1"}})"
                                      << "step 2: prune.heads: no head 9:1 in this model (blocks 0..1)";
    QTest::newRow("a head it lacks") << R"({"method":"prune.heads","params":{"heads":"0:1,1:4"}})"
                                     << "step 2: prune.heads: no head 1:4 in this model (block 1 has query heads 0..3)";
    QTest::newRow("not layer:head") << R"({"method":"prune.heads","params":{"heads":"0:x"}})"
                                    << "step 2: prune.heads: 'x' is not an integer";
    QTest::newRow("uneven groups") << R"({"method":"prune.heads","params":{"heads":"0:0"}})"
                                   << "step 2: prune.heads: layer 0 would keep kv groups of different sizes";
    QTest::newRow("every head") << R"({"method":"prune.heads","params":{"heads":"1:0,1:1,1:2,1:3"}})"
                                << "step 2: prune.heads: layer 1 would lose every head";
    QTest::newRow("a block to drop it lacks") << R"({"method":"prune.layers","params":{"layers":"7"}})"
                                              << "step 2: prune.layers: no block 7 in this model (blocks 0..1)";
    QTest::newRow("every block") << R"({"method":"prune.layers","params":{"layers":"0,1"}})"
                                 << "step 2: prune.layers: cannot remove every block";
    QTest::newRow("too many blocks") << R"({"method":"prune.layers","params":{"count":2,"importance":"last"}})"
                                     << "step 2: prune.layers: cannot remove 2 of 2 blocks";
}

// Regression (user probe): GPTQ ran for 20 s before a later step's head list was found not to fit the model (hours on
// a 7B model). Every caller comes through compressModel, which now refuses it before the first step.
void TestCompressionMethods::headsAndBlocksTheModelLacksAreRefusedFirst() {
    QFETCH(QString, lastStep);
    QFETCH(QString, said);
    Loaded l(tinyLlamaSpec());
    const Recipe r = recipe((R"({"steps":[{"method":"quantize.gptq","params":{"group_size":16}},)" + lastStep.toStdString() + "]}").c_str());
    QVERIFY2(QString::fromStdString(recipeLayersProblem(*l.model, r)).startsWith(said), recipeLayersProblem(*l.model, r).c_str());
    CallbackFeedback feedback;
    QStringList logged;
    feedback.logCallback = [&](const std::string& line) { logged << QString::fromStdString(line); };
    try {
        compressModel(*l.model, r, windows(), &feedback);
        QFAIL("the recipe ran");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).startsWith(said), e.what());
    }
    QVERIFY2(logged.filter("step 1/2").isEmpty(), qPrintable(logged.join("\n")));   // GPTQ never started
    // The same list on a model that has those heads and blocks runs.
    if (!said.contains("every") && !said.contains("uneven") && !said.contains("integer") && !said.contains("cannot remove")) {
        ArchSpec larger = tinyLlamaSpec();
        larger.layers = 10;
        larger.heads = 8;
        larger.kvHeads = 8;
        larger.headDim = 4;
        Loaded big(larger);
        QCOMPARE(recipeLayersProblem(*big.model, r), std::string());
    }
}

void TestCompressionMethods::awqFoldMovesScalesIntoProducers_data() {
    QTest::addColumn<int>("kvHeads");
    QTest::newRow("grouped-query attention (o_proj unscaled)") << 2;
    QTest::newRow("multi-head attention (o_proj scaled into v_proj)") << 4;
}

void TestCompressionMethods::awqFoldMovesScalesIntoProducers() {
    // At 8 bits rounding costs little, so the folded variant must compute nearly what the base does; a scale
    // folded into the wrong tensor (or twice) moves the logits by whole units, far beyond RTN's 8-bit error.
    QFETCH(int, kvHeads);
    ArchSpec spec = tinyLlamaSpec();
    spec.kvHeads = kvHeads;
    Loaded l(spec);
    const at::Tensor calib = windows(8, 32);
    const at::Tensor base = logitsOf(*l.model);
    CompressionResult folded = compressModel(
        *l.model, recipe(R"({"steps":[{"method":"quantize.awq","params":{"bits":8,"group_size":16,"fold":true}}]})"), calib);
    CompressionResult rtn = compressModel(
        *l.model, recipe(R"({"steps":[{"method":"quantize.rtn","params":{"bits":8,"group_size":16,"scheme":"asym"}}]})"), calib);
    const double foldedError = (logitsOf(*folded.model) - base).pow(2).mean().item<double>();
    const double rtnError = (logitsOf(*rtn.model) - base).pow(2).mean().item<double>();
    QVERIFY2(foldedError < 2 * rtnError + 1e-9, qPrintable(QString("folded %1, rtn %2").arg(foldedError).arg(rtnError)));
    for (const auto& [layer, linear] : folded.model->compressedLayers()) {
        auto integer = std::dynamic_pointer_cast<const IntLinear>(linear);
        QVERIFY2(integer && !integer->inputScale().defined(), layer.c_str());
    }
    // Reconstruction errors are measured on what each layer now computes (its folded input and scaled weight):
    // 8-bit rounding, so as small as RTN's, not the size of the scales (a comparison with the unscaled weight).
    const auto& foldedErrors = folded.steps.at(0).reconstructionError;
    const auto& rtnErrors = rtn.steps.at(0).reconstructionError;
    QCOMPARE(foldedErrors.size(), folded.model->compressedLayers().size());
    for (const auto& [layer, error] : foldedErrors)
        QVERIFY2(error < 20 * rtnErrors.at(layer) + 1e-6, qPrintable(QString("%1: %2 against RTN %3").arg(layer.c_str()).arg(error).arg(rtnErrors.at(layer))));
    // The scales went into the norms, and into v_proj's rows only without grouped-query attention.
    for (const char* norm : {"model.layers.0.input_layernorm.weight", "model.layers.1.post_attention_layernorm.weight"})
        QVERIFY2(!at::equal(folded.model->floatTensor(norm), l.model->floatTensor(norm)), norm);
    const std::string o = "model.layers.0.self_attn.o_proj";
    auto oLinear = std::dynamic_pointer_cast<const IntLinear>(folded.model->compressed(o));
    auto oRtn = quant::quantizeRtn(l.model->floatTensor(o + ".weight"), oLinear->quantized().spec);
    QCOMPARE(at::equal(oLinear->quantized().levels(), oRtn.levels()), kvHeads != spec.heads);

    // One scale serves q, k and v, so they must be quantized alike.
    try {
        compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.awq","params":{"fold":true},
                      "overrides":[{"pattern":"k_proj","params":{"bits":8}}]}]})"), calib);
        QFAIL("q/k/v quantized differently should have been refused");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("quantized differently"), e.what());
    }
    // Folding reaches every layer sharing an input, so a step that targets only some of them is refused.
    try {
        compressModel(*l.model,
                      recipe(R"({"steps":[{"method":"quantize.awq","params":{"fold":true},"targets":"q_proj"}]})"), calib);
        QFAIL("a fold over part of q/k/v should have been refused");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("must all be in the step's targets"), e.what());
    }
}

// SmoothQuant with fold: q/k/v share one smoothing scale, folded into input_layernorm, gate/up one folded into
// post_attention_layernorm; o_proj and down_proj are rounded unsmoothed; no scale is left beside any layer.
void TestCompressionMethods::smoothQuantFoldMovesScalesIntoNorms_data() {
    QTest::addColumn<bool>("halfNorms");
    QTest::newRow("f32 model") << false;
    // f16 norms round γ / s; the layers must take the s the stored norm applies.
    QTest::newRow("f16 model (norms rounded)") << true;
}

void TestCompressionMethods::smoothQuantFoldMovesScalesIntoNorms() {
    QFETCH(bool, halfNorms);
    const ArchSpec spec = tinyLlamaSpec();
    QTemporaryDir dir;
    const WeightMap weights = randomWeights(spec, 21, halfNorms ? ggml::Type::F16 : ggml::Type::F32);
    writeHfFolder(dir.path().toStdString(), spec, weights, halfNorms ? ggml::Type::F16 : ggml::Type::F32);
    struct { std::unique_ptr<Model> model; } l{loadModel(dir.path().toStdString())};
    const at::Tensor calib = windows(8, 32);
    const at::Tensor base = logitsOf(*l.model);
    CompressionResult folded = compressModel(
        *l.model, recipe(R"({"steps":[{"method":"quantize.smoothquant","params":{"alpha":0.5,"fold":true}}]})"), calib);
    CompressionResult perLayer = compressModel(
        *l.model, recipe(R"({"steps":[{"method":"quantize.smoothquant","params":{"alpha":0.5}}]})"), calib);
    QCOMPARE(folded.model->compressedLayers().size(), l.model->linearLayers().size());
    for (int64_t b = 0; b < l.model->spec.layers; ++b) {
        const auto name = [b](const char* suffix) { return names::llamaLayer(b, suffix); };
        struct Expect { const char* layer; const char* norm; };
        const Expect expected[] = {{"self_attn.q_proj", "input_layernorm.weight"}, {"self_attn.k_proj", "input_layernorm.weight"},
                                   {"self_attn.v_proj", "input_layernorm.weight"}, {"self_attn.o_proj", nullptr},
                                   {"mlp.gate_proj", "post_attention_layernorm.weight"}, {"mlp.up_proj", "post_attention_layernorm.weight"},
                                   {"mlp.down_proj", nullptr}};
        for (const Expect& e : expected) {
            const std::string layer = name(e.layer);
            auto linear = std::dynamic_pointer_cast<const W8A8Linear>(folded.model->compressed(layer));
            QVERIFY2(linear, layer.c_str());
            QVERIFY2(at::all(linear->smoothing() == 1).item<bool>(), (layer + ": a smoothing scale was left beside the layer").c_str());
            // The scale is what the norm was divided by; the layer holds W·diag(s) rounded to int8 per row (half a step).
            at::Tensor s = at::ones({l.model->floatTensor(layer + ".weight").size(1)});
            if (e.norm) {
                s = l.model->floatTensor(name(e.norm)) / folded.model->floatTensor(name(e.norm));
                QVERIFY2((s - 1).abs().max().item<double>() > 1e-3, (std::string(e.norm) + " was not changed").c_str());
            }
            const at::Tensor target = l.model->floatTensor(layer + ".weight") * s.unsqueeze(0);
            const at::Tensor step = linear->int8Weight().scales.unsqueeze(1);
            const double worst = ((linear->weight() - target).abs() / step).max().item<double>();
            QVERIFY2(worst <= 0.5 + 1e-3, qPrintable(QString("%1: %2 steps from W·s").arg(layer.c_str()).arg(worst)));
        }
    }
    // Block 0 sees the same inputs in both runs, so its activation maxima are those of the per-layer variant, whose
    // q_proj scale is max|X|^α / max|W_q|^(1−α): the folded scale must be max|X|^α / max|W_q,k,v|^(1−α).
    {
        const auto colMax = [&](const char* layer) { return l.model->floatTensor(names::llamaLayer(0, layer) + ".weight").abs().amax(0); };
        const at::Tensor qMax = colMax("self_attn.q_proj");
        const at::Tensor stacked = at::maximum(qMax, at::maximum(colMax("self_attn.k_proj"), colMax("self_attn.v_proj")));
        const at::Tensor perLayerQ = std::dynamic_pointer_cast<const W8A8Linear>(perLayer.model->compressed(names::llamaLayer(0, "self_attn.q_proj")))->smoothing();
        const at::Tensor expected = perLayerQ * qMax.pow(0.5) / stacked.pow(0.5);
        const std::string norm = names::llamaLayer(0, "input_layernorm.weight");
        const at::Tensor folded0 = l.model->floatTensor(norm) / folded.model->floatTensor(norm);
        const double worst = ((folded0 - expected).abs() / expected).max().item<double>();
        QVERIFY2(worst < (halfNorms ? 2e-3 : 1e-4), qPrintable(QString("folded scale off by %1 of itself").arg(worst)));
    }
    const double foldedError = (logitsOf(*folded.model) - base).pow(2).mean().item<double>();
    const double perLayerError = (logitsOf(*perLayer.model) - base).pow(2).mean().item<double>();
    QVERIFY2(foldedError < 3 * perLayerError + 1e-9, qPrintable(QString("folded %1, per layer %2").arg(foldedError).arg(perLayerError)));
    // Errors of what each layer now computes (W·s on x / s), as small as the per-layer variant's, for every layer.
    const auto& foldedErrors = folded.steps.at(0).reconstructionError;
    QCOMPARE(foldedErrors.size(), folded.model->compressedLayers().size());
    for (const auto& [layer, error] : foldedErrors)
        QVERIFY2(error < 20 * perLayer.steps.at(0).reconstructionError.at(layer) + 1e-6,
                 qPrintable(QString("%1: %2").arg(layer.c_str()).arg(error)));

    if (halfNorms) return;
    try {
        compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.smoothquant","params":{"fold":true},"targets":"q_proj"}]})"), calib);
        QFAIL("a fold over part of q/k/v should have been refused");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("must all be in the step's targets"), e.what());
    }
    try {
        compressModel(*l.model, recipe(R"({"steps":[{"method":"quantize.smoothquant","params":{"fold":true},
                      "overrides":[{"pattern":"up_proj","params":{"alpha":0.8}}]}]})"), calib);
        QFAIL("gate/up with different alphas should have been refused");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("another alpha"), e.what());
    }
    Loaded gpt2(tinyGpt2Spec());
    try {
        compressModel(*gpt2.model, recipe(R"({"steps":[{"method":"quantize.smoothquant","params":{"fold":true}}]})"), calib);
        QFAIL("fold on GPT-2 should have been refused");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("Llama family only"), e.what());
    }
}

// A step that does not calibrate (RTN), given windows, measures its reconstruction errors in a pass over the blocks:
// that pass moves the progress and stops at a cancel. It had neither: the GUI's bar stood still for most of a build
// and Cancel did nothing until it ended (GUI probe).
void TestCompressionMethods::errorPassReportsProgressAndStopsAtCancel() {
    Loaded tiny(tinyLlamaSpec());
    const at::Tensor windows = at::randint(0, tiny.model->spec.vocab, {4, 32}, at::kLong);
    const Recipe recipe = Recipe::fromJson({{"steps", json::array({{{"method", "quantize.rtn"}, {"params", {{"bits", 4}}}}})}}, "test");
    std::vector<double> seen;
    CallbackFeedback feedback;
    feedback.progressCallback = [&](double f) { seen.push_back(f); };
    const CompressionResult done = compressModel(*tiny.model, recipe, windows, &feedback);
    QCOMPARE(done.steps.at(0).reconstructionError.size(), tiny.model->linearLayers().size());
    // The rounding takes the first fifth of the step, the error pass the rest (block by block).
    const auto roundingDone = std::find_if(seen.begin(), seen.end(), [](double f) { return std::abs(f - 0.2) < 1e-12; });
    QVERIFY2(roundingDone != seen.end(), "the rounding's progress does not end at a fifth of the step");
    QVERIFY2(std::any_of(roundingDone, seen.end(), [](double f) { return f > 0.2 && f < 1.0; }),
             "the error pass reported no progress of its own");
    CallbackFeedback cancelling;
    cancelling.progressCallback = [&](double f) {
        if (f > 0.2) cancelling.cancel();   // past the rounding, inside the error pass
    };
    try {
        compressModel(*tiny.model, recipe, windows, &cancelling);
        QFAIL("the error pass went on past a cancel");
    } catch (const Cancelled&) {
    }
}

QTEST_APPLESS_MAIN(TestCompressionMethods)
#include "test_compression_methods.moc"
