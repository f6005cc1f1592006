// Importance maps on a small synthetic Llama: a silent head has exactly zero ablation importance, a layer that
// int4 rounding leaves unchanged has exactly zero sensitivity, and the maps have the model's shape.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "core/analysis/budget.h"
#include "core/analysis/importance.h"
#include "core/compress/pipeline.h"
#include "core/compress/recipe.h"
#include "core/runtime/transformer.h"
#include "core/io/model_format.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "tests/support/synthetic_models.h"

using namespace cwb;
using namespace cwb::test;

namespace {

at::Tensor windows() {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
    at::Tensor w = at::randint(2, 64, {4, 20}, gen, at::kLong);
    w.select(1, 0).fill_(1);
    return w;
}

std::unique_ptr<Model> load(const QTemporaryDir& dir, const WeightMap& weights) {
    writeHfFolder(dir.path().toStdString(), tinyLlamaSpec(), weights, ggml::Type::F32);
    return loadModel(dir.path().toStdString());
}

} // namespace

class TestImportance : public QObject {
    Q_OBJECT
private slots:
    void silentHeadHasZeroAblationImportance();
    void unchangedLayerHasZeroSensitivity();
    void uniformModelLossIsLogVocabulary();
    void channelScoresFollowWandaSums();
    void chosenStepGivesKlAndDeltaPerplexity();
    void badRequestsAreRefused();
    void sensitivityReportsAndStopsFromItsFirstPass();
    void headAblationEqualsZeroedOutputColumns();
    void variantRunnerSwapsOneBlock();
    void replacedTensorsStayWithTheirRecords();
    void computeSettingsAreCheckedAndRecorded();
    void batchesAndChunksDoNotChangeTheMaps();
    void nonFiniteLogitsAreRefused();
    void recipeStepsAsSensitivityProbes();
};

void TestImportance::silentHeadHasZeroAblationImportance() {
    QTemporaryDir dir;
    WeightMap w = randomWeights(tinyLlamaSpec(), 3);
    w["model.layers.1.self_attn.o_proj.weight"].narrow(1, 2 * 8, 8).zero_();   // block 1, head 2 says nothing
    auto model = load(dir, w);
    ImportanceMap map = computeImportance(*model, "heads.ablation", windows(), nullptr);
    QCOMPARE(map.rowLabels.size(), size_t(2));
    QCOMPARE(map.columnLabels.size(), size_t(4));
    QCOMPARE(map.values.size(), size_t(8));
    QCOMPARE(map.values[1 * 4 + 2], 0.0);
    int nonzero = 0;
    for (double v : map.values) nonzero += (std::isfinite(v) && v != 0.0);
    QCOMPARE(nonzero, 7);
}

void TestImportance::unchangedLayerHasZeroSensitivity() {
    QTemporaryDir dir;
    WeightMap w = randomWeights(tinyLlamaSpec(), 4);
    w["model.layers.0.mlp.up_proj.weight"].zero_();   // int4 rounding of zeros is exact
    auto model = load(dir, w);
    CallbackFeedback feedback;
    double last = -1;
    feedback.progressCallback = [&](double p) { last = p; };
    ImportanceMap map = computeImportance(*model, "linears.sensitivity", windows(), &feedback);
    QCOMPARE(last, 1.0);
    QCOMPARE(map.columnLabels.size(), size_t(7));
    const size_t up = size_t(std::find(map.columnLabels.begin(), map.columnLabels.end(), "up_proj") - map.columnLabels.begin());
    QVERIFY(up < 7);
    QCOMPARE(map.values[0 * 7 + up], 0.0);
    QVERIFY(map.values[1 * 7 + up] > 0.0);
    for (double v : map.values) QVERIFY(v >= 0.0);
}

void TestImportance::uniformModelLossIsLogVocabulary() {
    QTemporaryDir dir;
    WeightMap w = randomWeights(tinyLlamaSpec(), 5);
    w["model.norm.weight"].zero_();
    auto model = load(dir, w);
    QVERIFY(std::abs(meanLoss(*model, windows()) - std::log(64.0)) < 1e-9);
}

void TestImportance::channelScoresFollowWandaSums() {
    QTemporaryDir dir;
    WeightMap w = randomWeights(tinyLlamaSpec(), 7);
    w["model.layers.1.mlp.down_proj.weight"].select(1, 5).zero_();   // channel 5 of block 1 feeds nothing
    w["model.layers.0.mlp.down_proj.weight"].select(1, 9).mul_(100.0);   // channel 9 of block 0 feeds a lot
    auto model = load(dir, w);
    ImportanceMap map = computeImportance(*model, "channel", windows(), nullptr);
    QCOMPARE(map.kind, std::string("channels.wanda"));
    QCOMPARE(map.columnLabels.size(), size_t(48));
    QCOMPARE(map.values[1 * 48 + 5], 0.0);
    const double channel9 = map.values[0 * 48 + 9];
    for (int c = 0; c < 48; ++c)
        if (c != 9) QVERIFY(map.values[size_t(c)] < channel9);
    // Every cell is Wanda's sum ‖X_j‖₂ · Σ_i |W_ij|, X_j the down_proj inputs of channel j over every position of the
    // windows, recorded here from one plain forward pass (the map's sequential pass computes the same inputs).
    struct DownInputs : ActivationObserver {
        std::map<std::string, at::Tensor> squares;
        bool wantsLinear(const std::string& name) const override { return name.find("mlp.down_proj") != std::string::npos; }
        void onLinear(const std::string& name, const at::Tensor& input, const at::Tensor&) override {
            const at::Tensor sq = input.detach().to(at::kDouble).reshape({-1, input.size(-1)}).square().sum(0);
            squares[name] = squares.count(name) ? squares[name] + sq : sq;
        }
    } observer;
    Transformer runtime(*model);
    runtime.forward(windows(), nullptr, &observer);
    QCOMPARE(observer.squares.size(), size_t(2));
    for (int64_t block = 0; block < 2; ++block) {
        const std::string layer = "model.layers." + std::to_string(block) + ".mlp.down_proj";
        const at::Tensor expected = (model->floatTensor(layer + ".weight").to(at::kDouble).abs().sum(0) * observer.squares.at(layer).sqrt());
        for (int64_t c = 0; c < 48; ++c) {
            const double e = expected[c].item<double>(), got = map.values[size_t(block * 48 + c)];
            QVERIFY2(std::abs(got - e) <= 1e-5 * std::max(e, 1e-12), qPrintable(QString("block %1 channel %2: %3 vs %4").arg(block).arg(c).arg(got).arg(e)));
        }
    }
}

// Any recipe step can be the probe: here magnitude pruning at 90%. A layer of zeros is unchanged by it (KL 0, ΔPPL 0);
// the ΔPPL map equals exp(loss of the model with that layer pruned) − exp(base loss), checked on one cell.
void TestImportance::chosenStepGivesKlAndDeltaPerplexity() {
    QTemporaryDir dir;
    WeightMap w = randomWeights(tinyLlamaSpec(), 4);
    w["model.layers.0.mlp.up_proj.weight"].zero_();
    auto model = load(dir, w);
    const nlohmann::json step = {{"method", "prune.magnitude"}, {"params", {{"sparsity", 0.9}}}};
    LayerSensitivity s = computeLayerSensitivity(*model, step, windows(), nullptr);
    QCOMPARE(s.kl.kind, std::string("linears.sensitivity"));
    QCOMPARE(s.deltaPerplexity.kind, std::string("linears.delta_ppl"));
    const auto& cols = s.kl.columnLabels;
    const size_t up = size_t(std::find(cols.begin(), cols.end(), "up_proj") - cols.begin());
    const size_t gate = size_t(std::find(cols.begin(), cols.end(), "gate_proj") - cols.begin());
    QCOMPARE(s.kl.values[up], 0.0);
    QCOMPARE(s.deltaPerplexity.values[up], 0.0);
    QVERIFY(s.kl.values[1 * cols.size() + up] > 0.0);

    // Block 1's gate projection pruned by hand: the same ΔPPL.
    auto pruned = model->clone();
    at::Tensor g = model->floatTensor("model.layers.1.mlp.gate_proj.weight");
    const at::Tensor threshold = std::get<0>(g.abs().flatten().kthvalue(int64_t(0.9 * double(g.numel()))));
    pruned->replaceTensor("model.layers.1.mlp.gate_proj.weight", at::where(g.abs() <= threshold, at::zeros_like(g), g));
    const double expected = std::exp(meanLoss(*pruned, windows())) - std::exp(meanLoss(*model, windows()));
    const double measured = s.deltaPerplexity.values[1 * cols.size() + gate];
    QVERIFY2(std::abs(measured - expected) < 1e-6 * std::max(1.0, std::abs(expected)),
             qPrintable(QString("%1 vs %2").arg(measured).arg(expected)));

    // The default kinds use RTN int4 g32; "layer-ppl" is the ΔPPL map of that step.
    ImportanceMap viaKind = computeImportance(*model, "layer-ppl", windows(), nullptr);
    QCOMPARE(viaKind.kind, std::string("linears.delta_ppl"));
    QCOMPARE(viaKind.values[up], 0.0);
    bool refused = false;
    try {
        computeLayerSensitivity(*model, nlohmann::json{{"params", {}}}, windows(), nullptr);
    } catch (const Error&) {
        refused = true;
    }
    QVERIFY(refused);
    // A step that takes the output head would quantize it beside (or, "only", instead of) each layer measured.
    for (const char* head : {"also", "only"}) {
        try {
            computeLayerSensitivity(*model, nlohmann::json{{"method", "quantize.rtn"}, {"params", {{"head", head}}}}, windows(), nullptr);
            QFAIL(head);
        } catch (const Error& e) {
            QVERIFY2(std::string(e.what()).find("the sensitivity step quantizes the output head") != std::string::npos, e.what());
        }
    }
    // Regression: a structured step given one linear layer at a time gave a map of zeros but for q_proj, without a word.
    for (const char* method : {"prune.heads", "prune.channels", "prune.layers", "distill.kd"}) {
        try {
            computeLayerSensitivity(*model, nlohmann::json{{"method", method}}, windows(), nullptr);
            QFAIL(method);
        } catch (const Error& e) {
            QVERIFY2(std::string(e.what()).find(std::string("the sensitivity step ") + method + " changes whole heads") != std::string::npos,
                     e.what());
        }
    }
}

void TestImportance::badRequestsAreRefused() {
    QTemporaryDir dir;
    auto model = load(dir, randomWeights(tinyLlamaSpec(), 6));
    QVERIFY_THROWS_EXCEPTION(Error, computeImportance(*model, "heads.magic", windows(), nullptr));
    QVERIFY_THROWS_EXCEPTION(Error, computeImportance(*model, "heads.ablation", at::Tensor(), nullptr));
    Feedback cancelled;
    cancelled.cancel();
    QVERIFY_THROWS_EXCEPTION(Cancelled, computeImportance(*model, "heads.ablation", windows(), &cancelled));
}

// Regression (GUI probe): the base's pass of a sensitivity map ran with no progress and no cancel, minutes on a 7B
// model at 0% with Cancel doing nothing. Now it reports after each batch, and a cancel there stops before any layer is
// compressed; the whole run's progress never goes back and ends at the last layer's share.
void TestImportance::sensitivityReportsAndStopsFromItsFirstPass() {
    QTemporaryDir dir;
    auto model = load(dir, randomWeights(tinyLlamaSpec(), 7));
    struct Limits {   // one window per batch: the base pass reports 4 times
        Limits() { VariantRunner::setLogitLimitsForTesting(20 * 64, 0); }
        ~Limits() { VariantRunner::setLogitLimitsForTesting(0, 0); }
    } limits;
    const nlohmann::json step = {{"method", "quantize.rtn"}, {"params", {{"bits", 4}, {"group_size", 32}}}};
    const double share = 1.0 / double(model->linearLayers().size() + 1);

    struct CancelAtFirstReport : Feedback {
        std::vector<double> seen;
        void onProgress(double f) override {
            seen.push_back(f);
            cancel();
        }
    } first;
    QVERIFY_THROWS_EXCEPTION(Cancelled, computeLayerSensitivity(*model, step, windows(), &first));
    QCOMPARE(first.seen.size(), size_t(1));
    QVERIFY2(first.seen[0] > 0 && first.seen[0] <= share / 4 + 1e-12, qPrintable(QString::number(first.seen[0])));

    struct Recording : Feedback {
        std::vector<double> seen;
        void onProgress(double f) override { seen.push_back(f); }
    } all;
    computeLayerSensitivity(*model, step, windows(), &all);
    QVERIFY(all.seen.size() > model->linearLayers().size() * 2);
    for (size_t i = 1; i < all.seen.size(); ++i)
        QVERIFY2(all.seen[i] >= all.seen[i - 1] - 1e-12, qPrintable(QString("%1 after %2").arg(all.seen[i]).arg(all.seen[i - 1])));
    QVERIFY2(std::abs(all.seen.back() - 1.0) < 1e-9, qPrintable(QString::number(all.seen.back())));
}

// Regression for the speed-up: ablation now zeroes a gate on the head's output on one runtime instead of copying the
// model with the head's o_proj columns zeroed. Both remove the same terms, so the maps agree with the old definition.
void TestImportance::headAblationEqualsZeroedOutputColumns() {
    QTemporaryDir dir;
    auto model = load(dir, randomWeights(tinyLlamaSpec(), 11));
    ImportanceMap map = computeImportance(*model, "heads.ablation", windows(), nullptr);
    const double base = meanLoss(*model, windows());
    for (const auto& [block, head] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {0, 3}, {1, 1}}) {
        auto ablated = model->clone();
        const std::string name = "model.layers." + std::to_string(block) + ".self_attn.o_proj.weight";
        at::Tensor w = model->floatTensor(name);
        w.narrow(1, head * 8, 8).zero_();
        ablated->replaceTensor(name, w);
        const double expected = meanLoss(*ablated, windows()) - base;
        const double measured = map.values[size_t(block * 4 + head)];
        QVERIFY2(std::abs(measured - expected) < 1e-9 * std::max(1.0, std::abs(expected)),
                 qPrintable(QString("block %1 head %2: %3 vs %4").arg(block).arg(head).arg(measured).arg(expected)));
        QVERIFY(expected != 0.0);
    }
}

// One runtime for the base and its one-layer variants: after apply() it computes what a runtime of the variant's own
// computes (a fused q/k/v or gate/up part too, and GPT-2's c_attn), after reset() the base again; a variant that
// changed the embeddings is left to its own runtime.
void TestImportance::variantRunnerSwapsOneBlock() {
    QTemporaryDir dir;
    auto llama = load(dir, randomWeights(tinyLlamaSpec(), 12));
    QTemporaryDir gpt2Dir;
    writeHfFolder(gpt2Dir.path().toStdString(), tinyGpt2Spec(), randomWeights(tinyGpt2Spec(), 12), ggml::Type::F32);
    auto gpt2 = loadModel(gpt2Dir.path().toStdString());
    const at::Tensor w = windows();
    auto logProbsOwn = [&](const Model& m) {
        Transformer runtime(m);
        return at::log_softmax(runtime.forward(w).to(at::kDouble), -1);
    };
    // One runner per model for all its variants (blocks 1, 0, 1 of the Llama): reset() puts the base's blocks back as
    // they were built, and the next variant must still compute as on its own runtime.
    std::map<const Model*, std::unique_ptr<VariantRunner>> runners;
    for (const auto& [model, layer] : std::vector<std::pair<Model*, std::string>>{
             {llama.get(), "model.layers.1.mlp.down_proj"}, {llama.get(), "model.layers.0.self_attn.k_proj"},
             {llama.get(), "model.layers.1.mlp.gate_proj"}, {gpt2.get(), "transformer.h.1.attn.c_attn"}}) {
        auto& held = runners[model];
        if (!held) held = std::make_unique<VariantRunner>(*model, CalibrationCompute{});
        VariantRunner& runner = *held;
        const std::vector<at::Tensor> baseBatches = runner.logProbs(w);
        const at::Tensor base = at::cat(baseBatches, 0);
        QVERIFY((base - logProbsOwn(*model)).abs().max().item<double>() < 1e-9);
        std::string pattern = "^";
        for (char c : layer) pattern += c == '.' ? std::string("\\.") : std::string(1, c);
        const Recipe oneLayer = Recipe::fromJson(
            {{"steps", nlohmann::json::array({{{"method", "quantize.rtn"}, {"params", {{"bits", 3}, {"group_size", 16}}},
                                                {"targets", pattern + "$"}}})}}, "test");
        auto variant = compressModel(*model, oneLayer, at::Tensor()).model;
        QCOMPARE(model->differingTensors(*variant), std::vector<std::string>{layer + ".weight"});
        QVERIFY(runner.apply(*variant));
        const at::Tensor own = logProbsOwn(*variant);
        const WindowComparison measured = runner.compare(w, baseBatches);
        const double loss = -own.narrow(1, 0, w.size(1) - 1).gather(2, w.narrow(1, 1, w.size(1) - 1).unsqueeze(-1)).mean().item<double>();
        const double kl = (base.exp() * (base - own)).sum(-1).mean().item<double>();
        QVERIFY2(std::abs(measured.meanLoss - loss) < 1e-9, qPrintable(QString::fromStdString(layer)));
        QVERIFY2(std::abs(measured.meanKl - kl) < 1e-9 * std::max(1.0, kl), qPrintable(QString::fromStdString(layer)));
        QVERIFY2(kl > 1e-6, qPrintable(QString::fromStdString(layer)));   // the layer did change the output
        QVERIFY2(runner.runtime().layerPaths().count(layer), qPrintable(QString::fromStdString(layer)));
        runner.reset();
        QVERIFY(at::equal(at::cat(runner.logProbs(w), 0), base));
        // The rebuilt block's paths are the base's: none left describing the variant's compressed layer.
        QVERIFY2(!runner.runtime().layerPaths().count(layer), qPrintable(QString::fromStdString(layer)));
        QCOMPARE(runner.compare(w, baseBatches).meanKl, 0.0);
    }
    VariantRunner runner(*llama, {});
    const at::Tensor base = at::cat(runner.logProbs(w), 0);
    auto embedded = llama->clone();
    embedded->replaceTensor("model.embed_tokens.weight", llama->floatTensor("model.embed_tokens.weight") * 2.0);
    QVERIFY(!runner.apply(*embedded));
    QVERIFY(at::equal(at::cat(runner.logProbs(w), 0), base));
}

// A replaced tensor's bytes belong to its record (a model no longer keeps every copy it ever replaced until it dies):
// a clone taken before a later replacement still reads the earlier bytes, and adoptTensor shares them back.
void TestImportance::replacedTensorsStayWithTheirRecords() {
    QTemporaryDir dir;
    auto model = load(dir, randomWeights(tinyLlamaSpec(), 13));
    const std::string name = "model.layers.0.mlp.up_proj.weight";
    const at::Tensor first = at::full({48, 32}, 0.25f), second = at::full({48, 32}, -0.5f);
    model->replaceTensor(name, first);
    auto before = model->clone();
    model->replaceTensor(name, second);
    for (int i = 0; i < 3; ++i) model->replaceTensor(name, second + float(i));   // allocations that may reuse freed bytes
    QVERIFY(at::equal(before->floatTensor(name), first));
    // Bytes no record holds are released (the model kept every replaced copy until it died).
    const std::weak_ptr<const void> replaced = model->tensor(name).owner;
    QVERIFY(!replaced.expired());
    model->replaceTensor(name, second);
    QVERIFY(replaced.expired());
    QCOMPARE(model->differingTensors(*before), std::vector<std::string>{name});
    model->adoptTensor(*before, name);
    QVERIFY(model->differingTensors(*before).empty());
    before.reset();
    QVERIFY(at::equal(model->floatTensor(name), first));
}

void TestImportance::computeSettingsAreCheckedAndRecorded() {
    const CalibrationCompute cpu = importanceCompute("cpu", "", "head");
    QVERIFY(cpu.device.is_cpu() && cpu.forwardType == at::kFloat);
    QCOMPARE(describeCompute(cpu), std::string("cpu f32"));
    if (!at::hasCUDA()) {
        QVERIFY(importanceCompute("auto", "", "head").device.is_cpu());
        try {
            importanceCompute("cuda", "", "head");
            QFAIL("cuda accepted without a GPU");
        } catch (const Error& e) {
            QVERIFY2(std::string(e.what()).find("device cuda") != std::string::npos, e.what());
        }
    } else {
        QCOMPARE(importanceCompute("cuda", "", "head").forwardType, at::kFloat);   // f32 unless asked: KLs near 1e-4
        QCOMPARE(importanceCompute("cuda", "f16", "head").forwardType, at::kHalf);
    }
    for (const auto& [device, dtype, message] : std::vector<std::tuple<const char*, const char*, const char*>>{
             {"gpu", "", "device 'gpu' is not a device name"}, {"cpu", "f8", "--dtype must be f32, f16 or bf16, got 'f8'"},
             {"cuda:99", "", at::hasCUDA() ? "device cuda:99: there " : "device cuda:99: no CUDA"}}) {
        try {
            importanceCompute(device, dtype, "head");
            QFAIL(message);
        } catch (const Error& e) {
            QVERIFY2(std::string(e.what()).find(message) != std::string::npos, e.what());
        }
    }
    const nlohmann::json measured = importanceMeasurement("/data/calib.txt", "abc", at::zeros({8, 128}, at::kLong), 3, cpu);
    QCOMPARE(measured.value("device", ""), std::string("cpu"));
    QCOMPARE(measured.value("dtype", ""), std::string("f32"));
    QCOMPARE(describeImportanceMeasurement(measured), std::string("8 windows of 128 tokens of calib.txt (seed 3), cpu f32"));
    // Maps stored before the type was recorded still read.
    nlohmann::json older = measured;
    older.erase("dtype");
    QCOMPARE(describeImportanceMeasurement(older), std::string("8 windows of 128 tokens of calib.txt (seed 3), cpu"));
}

// Log-probabilities are batched by logits (a 128k vocabulary would otherwise put 8 long windows through at once) and
// made in fp64 a chunk of positions at a time: where the batches and chunks fall must not change a map.
void TestImportance::batchesAndChunksDoNotChangeTheMaps() {
    QCOMPARE(VariantRunner::windowsPerBatch(256, 32000), int64_t(8));
    QCOMPARE(VariantRunner::windowsPerBatch(256, 128256), int64_t(2));
    QCOMPARE(VariantRunner::windowsPerBatch(4096, 128256), int64_t(1));
    QTemporaryDir dir;
    auto model = load(dir, randomWeights(tinyLlamaSpec(), 31));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
    const at::Tensor w = at::randint(2, 64, {5, 20}, gen, at::kLong);
    const std::vector<std::string> kinds = {"heads.ablation", "linears.sensitivity", "linears.delta_ppl"};
    // The limits go back to the defaults however the test leaves (a failed check returns early).
    struct Limits {
        Limits(int64_t batch, int64_t chunk) { VariantRunner::setLogitLimitsForTesting(batch, chunk); }
        ~Limits() { VariantRunner::setLogitLimitsForTesting(0, 0); }
    };
    auto mapsWith = [&](int64_t batchLogits, int64_t chunkLogits) {
        const Limits limits(batchLogits, chunkLogits);
        std::vector<ImportanceMap> maps;
        for (const auto& kind : kinds) maps.push_back(computeImportance(*model, kind, w, nullptr));
        return maps;
    };
    // Cells agree to `tolerance` of the map's largest cell; most are not zero.
    auto agree = [&](const std::vector<ImportanceMap>& a, const std::vector<ImportanceMap>& b, double tolerance, const char* what) {
        for (size_t k = 0; k < kinds.size(); ++k) {
            QCOMPARE(a[k].values.size(), b[k].values.size());
            double largest = 0;
            for (double v : a[k].values) largest = std::max(largest, std::abs(v));
            int64_t nonzero = 0;
            for (size_t i = 0; i < a[k].values.size(); ++i) {
                QVERIFY2(std::isfinite(a[k].values[i]) && std::abs(a[k].values[i] - b[k].values[i]) <= tolerance * largest,
                         qPrintable(QString("%1, %2 cell %3: %4 vs %5").arg(what, kinds[k].c_str()).arg(i)
                                        .arg(a[k].values[i], 0, 'g', 17).arg(b[k].values[i], 0, 'g', 17)));
                nonzero += a[k].values[i] != 0.0;
            }
            QVERIFY2(nonzero > 1, kinds[k].c_str());
        }
    };
    const std::vector<ImportanceMap> whole = mapsWith(0, 0);
    // 7 positions per fp64 chunk (chunks cross windows), one forward pass: only fp64 sums move.
    agree(whole, mapsWith(0, 7 * 64), 1e-12, "chunks of 7 positions");
    // 2 windows per forward pass (5 = 2 + 2 + 1): float32 matrix products of other shapes round differently (~1e-7).
    std::vector<at::Tensor> batches;
    {
        const Limits limits(2 * 20 * 64, 7 * 64);
        QCOMPARE(VariantRunner::windowsPerBatch(20, 64), int64_t(2));
        VariantRunner runner(*model, {});
        batches = runner.logProbs(w);
    }
    QCOMPARE(batches.size(), size_t(3));
    QCOMPARE(batches.back().size(0), int64_t(1));
    agree(whole, mapsWith(2 * 20 * 64, 7 * 64), 2e-5, "batches of 2 windows");
}

// A forward pass that overflows (f16 on a GPU, or a broken model) gave NaN KLs that were stored as 0, "insensitive".
void TestImportance::nonFiniteLogitsAreRefused() {
    QTemporaryDir dir;
    WeightMap weights = randomWeights(tinyLlamaSpec(), 32);
    weights["model.layers.1.mlp.down_proj.weight"][0][0] = std::numeric_limits<float>::infinity();
    auto model = load(dir, weights);
    for (const std::string kind : {"linears.sensitivity", "heads.ablation"}) {
        try {
            computeImportance(*model, kind, windows(), nullptr);
            QFAIL(qPrintable(QString::fromStdString(kind) + ": a map was made from non-finite logits"));
        } catch (const Error& e) {
            QVERIFY2(QString(e.what()).contains("non-finite logits"), e.what());
        }
    }
    // A finite base whose one-layer variant overflows: the comparison names what went wrong, the layer where the
    // caller knows it (the budget and the sensitivity map wrap it with the layer and width).
    QTemporaryDir finiteDir;
    auto finite = load(finiteDir, randomWeights(tinyLlamaSpec(), 33));
    auto broken = finite->clone();
    at::Tensor w = finite->floatTensor("model.layers.1.mlp.down_proj.weight").clone();
    w[0][0] = std::numeric_limits<float>::infinity();
    broken->replaceTensor("model.layers.1.mlp.down_proj.weight", w);
    VariantRunner runner(*finite, {});
    const std::vector<at::Tensor> base = runner.logProbs(windows());
    QVERIFY(runner.apply(*broken));
    try {
        runner.compare(windows(), base);
        QFAIL("a variant's non-finite logits were compared");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("non-finite logits") && QString(e.what()).contains("this variant"), e.what());
    }
    runner.reset();
    QCOMPARE(runner.compare(windows(), base).meanKl, 0.0);   // the base's block is back
    // --device auto on a GPU the model does not fit: the reason, for the CPU fallback (the GPU side is not reachable
    // here: a CPU compute is returned unchanged).
    QVERIFY(autoDeviceFitProblem(*model, at::kFloat, -1).empty());   // memory unknown
    const int64_t f32Bytes = model->parameterCount() * 4;
    QVERIFY(autoDeviceFitProblem(*model, at::kFloat, f32Bytes * 2).empty());
    const QString tight = QString::fromStdString(autoDeviceFitProblem(*model, at::kFloat, f32Bytes));
    QVERIFY2(tight.contains("weights in f32") && tight.contains("GiB free"), qPrintable(tight));
    QVERIFY(autoDeviceFitProblem(*model, at::kBFloat16, f32Bytes).empty());   // half the bytes fit
    std::string note;
    const CalibrationCompute cpu = fitAutoDevice(*model, CalibrationCompute{}, &note);
    QVERIFY(cpu.device.is_cpu() && note.empty());
    // Gradients in f16 underflow: refused before any work, whatever the device.
    for (const std::string kind : {"heads.gradient", "channel-grad"}) {
        try {
            importanceCompute("cpu", "f16", kind);
            QFAIL("f16 gradients were accepted");
        } catch (const Error& e) {
            QVERIFY2(QString(e.what()).contains("underflow in f16"), e.what());
        }
    }
}

void TestImportance::recipeStepsAsSensitivityProbes() {
    std::vector<std::string> leftOut;
    const nlohmann::json probe = sensitivityProbe({{"method", "quantize.gptq"}, {"targets", "mlp"}, {"ignore", {"down"}},
                                                   {"params", {{"bits", 3}, {"head", "also"}}}}, &leftOut);
    QCOMPARE(probe, nlohmann::json({{"method", "quantize.gptq"}, {"params", {{"bits", 3}}}}));
    QCOMPARE(leftOut, (std::vector<std::string>{"targets", "ignore", "head"}));
    QVERIFY(sensitivityProbe({{"method", "prune.wanda"}}, &leftOut).is_object());
    QVERIFY(leftOut.empty());
    QVERIFY(sensitivityProbe({{"method", "prune.heads"}}).is_null());                          // not one layer at a time
    QVERIFY(sensitivityProbe({{"method", "quantize.rtn"}, {"enabled", false}}).is_null());
    QVERIFY(sensitivityProbe({{"method", "quantize.rtn"}, {"params", {{"bits", 99}}}}).is_null());   // bad parameters
    QVERIFY(sensitivityProbe({{"method", "no.such"}}).is_null());
}

QTEST_APPLESS_MAIN(TestImportance)
#include "test_importance.moc"
