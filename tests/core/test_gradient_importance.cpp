// Gradient-based importance on small synthetic models: the head-gate gradient equals a finite difference of the
// loss, a silent head and a dead MLP channel score exactly zero, and the channel score follows its formula.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <cmath>

#include "core/analysis/gradient_importance.h"
#include "core/analysis/importance.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "core/io/model_format.h"
#include "core/runtime/transformer.h"
#include "tests/support/synthetic_models.h"

using namespace cwb;
using namespace cwb::test;

namespace {

at::Tensor windows() {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(12);
    at::Tensor w = at::randint(2, 64, {5, 18}, gen, at::kLong);
    w.select(1, 0).fill_(1);
    return w;
}

std::unique_ptr<Model> load(const QTemporaryDir& dir, const ArchSpec& spec, const WeightMap& weights) {
    writeHfFolder(dir.path().toStdString(), spec, weights, ggml::Type::F32);
    return loadModel(dir.path().toStdString());
}

// Mean next-token NLL of one window with gate `value` on one head (all other gates 1), in double.
double gatedLoss(const Model& model, const at::Tensor& window, int64_t layer, int64_t head, double value) {
    std::vector<at::Tensor> gates;
    for (int64_t l = 0; l < model.spec.layers; ++l) gates.push_back(at::ones({model.spec.headsAt(l)}, at::kFloat));
    gates[size_t(layer)][head] = value;
    RuntimeOptions options;
    options.headGates = &gates;
    Transformer runtime(model, options);
    at::Tensor logits = runtime.forward(window.unsqueeze(0)).to(at::kDouble);
    const int64_t t = window.size(0);
    at::Tensor lp = at::log_softmax(logits.squeeze(0).narrow(0, 0, t - 1), -1);
    return -lp.gather(1, window.narrow(0, 1, t - 1).unsqueeze(1)).mean().item<double>();
}

} // namespace

class TestGradientImportance : public QObject {
    Q_OBJECT
private slots:
    void gateGradientEqualsFiniteDifference_data();
    void gateGradientEqualsFiniteDifference();
    void silentHeadHasZeroGradientImportance();
    void deadChannelScoresZeroAndScoresFollowTheFormula();
    void kindsAreListedWithShortNames();
    void stopDuringTheLastPassStops();
};

void TestGradientImportance::gateGradientEqualsFiniteDifference_data() {
    QTest::addColumn<int>("window");
    QTest::addColumn<int>("layer");
    QTest::addColumn<int>("head");
    QTest::newRow("w0 b0 h0") << 0 << 0 << 0;
    QTest::newRow("w1 b0 h3") << 1 << 0 << 3;
    QTest::newRow("w4 b1 h1") << 4 << 1 << 1;
    QTest::newRow("w2 b1 h2") << 2 << 1 << 2;
}

void TestGradientImportance::gateGradientEqualsFiniteDifference() {
    QFETCH(int, window);
    QFETCH(int, layer);
    QFETCH(int, head);
    QTemporaryDir dir;
    auto model = load(dir, tinyLlamaSpec(), randomWeights(tinyLlamaSpec(), 5));
    const at::Tensor w = windows();
    const at::Tensor grads = headGateGradients(*model, w);
    QCOMPARE(grads.sizes().vec(), (std::vector<int64_t>{5, 2, 4}));
    const double analytic = grads[window][layer][head].item<double>();
    const double eps = 1e-2;
    const double numeric = (gatedLoss(*model, w[window], layer, head, 1 + eps) - gatedLoss(*model, w[window], layer, head, 1 - eps)) / (2 * eps);
    QVERIFY2(std::abs(analytic - numeric) <= 2e-4 + 2e-2 * std::abs(numeric),
             qPrintable(QString("analytic %1, finite difference %2").arg(analytic).arg(numeric)));
    QVERIFY(std::abs(numeric) > 1e-4);   // the comparison means something
}

void TestGradientImportance::silentHeadHasZeroGradientImportance() {
    QTemporaryDir dir;
    WeightMap weights = randomWeights(tinyLlamaSpec(), 6);
    weights["model.layers.0.self_attn.o_proj.weight"].narrow(1, 1 * 8, 8).zero_();   // block 0, head 1 says nothing
    auto model = load(dir, tinyLlamaSpec(), weights);
    ImportanceMap map = computeImportance(*model, "heads.gradient", windows(), nullptr);
    QCOMPARE(map.kind, std::string("heads.gradient"));
    QCOMPARE(map.values.size(), size_t(8));
    QCOMPARE(map.values[0 * 4 + 1], 0.0);
    for (size_t i = 0; i < map.values.size(); ++i)
        if (i != 1) QVERIFY2(map.values[i] > 0, qPrintable(QString::number(i)));
}

void TestGradientImportance::deadChannelScoresZeroAndScoresFollowTheFormula() {
    QTemporaryDir dir;
    WeightMap weights = randomWeights(tinyLlamaSpec(), 7);
    // Block 1, channel 5: never active (gate and up rows zero) and feeding nothing (down column zero).
    weights["model.layers.1.mlp.gate_proj.weight"][5].zero_();
    weights["model.layers.1.mlp.up_proj.weight"][5].zero_();
    weights["model.layers.1.mlp.down_proj.weight"].select(1, 5).zero_();
    // Block 1, channel 9: never active but still wired to the output (its gradient is not zero).
    weights["model.layers.1.mlp.gate_proj.weight"][9].zero_();
    weights["model.layers.1.mlp.up_proj.weight"][9].zero_();
    auto model = load(dir, tinyLlamaSpec(), weights);
    const at::Tensor w = windows();
    ChannelGradientStats stats = channelGradientStats(*model, w, 0.01);
    QCOMPARE(stats.sparsity.sizes().vec(), (std::vector<int64_t>{2, 48}));
    QCOMPARE(stats.sparsity[1][5].item<double>(), 1.0);
    QCOMPARE(stats.sparsity[1][9].item<double>(), 1.0);
    QCOMPARE(stats.meanAbsGradient[1][5].item<double>(), 0.0);
    QVERIFY(stats.meanAbsGradient[1][9].item<double>() > 0);
    QVERIFY((stats.sparsity >= 0).all().item<bool>() && (stats.sparsity <= 1).all().item<bool>());

    ImportanceMap map = computeImportance(*model, "channel-grad", w, nullptr);
    QCOMPARE(map.kind, std::string("channels.gradient"));
    QCOMPARE(map.values.size(), size_t(2 * 48));
    QCOMPARE(map.values[48 + 5], 0.0);
    for (int64_t b = 0; b < 2; ++b) {
        const double peak = stats.meanAbsGradient[b].max().item<double>();
        for (int64_t c = 0; c < 48; ++c) {
            const double expected = 0.7 * stats.meanAbsGradient[b][c].item<double>() / peak + 0.3 * (1 - stats.sparsity[b][c].item<double>());
            QVERIFY(std::abs(map.values[size_t(b * 48 + c)] - expected) < 1e-12);
        }
    }
    // Channel 9 has only the gradient term.
    QVERIFY(std::abs(map.values[48 + 9] - 0.7 * stats.meanAbsGradient[1][9].item<double>() / stats.meanAbsGradient[1].max().item<double>()) < 1e-12);
}

void TestGradientImportance::kindsAreListedWithShortNames() {
    const auto kinds = importanceKinds();
    QVERIFY(std::find(kinds.begin(), kinds.end(), "heads.gradient") != kinds.end());
    QVERIFY(std::find(kinds.begin(), kinds.end(), "channels.gradient") != kinds.end());
    QTemporaryDir dir;
    auto gpt2 = load(dir, tinyGpt2Spec(), randomWeights(tinyGpt2Spec(), 8));
    ImportanceMap heads = computeImportance(*gpt2, "head-grad", windows(), nullptr);
    QCOMPARE(heads.kind, std::string("heads.gradient"));
    QCOMPARE(heads.values.size(), size_t(2 * 4));
    for (double v : heads.values) QVERIFY(std::isfinite(v) && v > 0);
    ImportanceMap channels = computeImportance(*gpt2, "channels.gradient", windows(), nullptr);
    QCOMPARE(channels.values.size(), size_t(2 * 64));
}

// Regression (user probe): a stop asked for while the only (or last) backward pass ran was not looked at again, so
// the map was returned and stored as complete, and `cwb importance` exited 0 after saying it was stopping.
void TestGradientImportance::stopDuringTheLastPassStops() {
    QTemporaryDir dir;
    auto model = load(dir, tinyLlamaSpec(), randomWeights(tinyLlamaSpec(), 6));
    for (const char* kind : {"heads.gradient", "channels.gradient", "heads.ablation", "channels.wanda"}) {
        CallbackFeedback feedback;
        feedback.progressCallback = [&](double) { feedback.cancel(); };   // asked for as the first pass starts
        QVERIFY_THROWS_EXCEPTION(Cancelled, computeImportance(*model, kind, windows(), &feedback));
    }
}

QTEST_GUILESS_MAIN(TestGradientImportance)
#include "test_gradient_importance.moc"
