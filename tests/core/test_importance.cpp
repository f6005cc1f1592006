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
