// Importance maps on a small synthetic Llama: a silent head has exactly zero ablation importance, a layer that
// int4 rounding leaves unchanged has exactly zero sensitivity, and the maps have the model's shape.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <cmath>

#include "core/analysis/importance.h"
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

QTEST_APPLESS_MAIN(TestImportance)
#include "test_importance.moc"
