// The fixed-shape decode step (what a CUDA graph captures: attention over the whole KV cache capacity, masked from a
// device-held position; RoPE from a precomputed table) against the eager step and a full prefill, on the CPU.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <cmath>

#include "core/io/model_format.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "tests/support/synthetic_models.h"

using namespace cwb;
using namespace cwb::test;

namespace {

struct Fixture {
    QTemporaryDir dir;
    std::unique_ptr<Model> model;
    Fixture(ArchSpec spec, RopeStyle style) {
        writeHfFolder(dir.path().toStdString(), spec, randomWeights(spec, 11), ggml::Type::F32);
        model = loadModel(dir.path().toStdString());
        model->spec.ropeStyle = style;
    }
};

RuntimeOptions withDecode(DecodeMode mode) {
    RuntimeOptions o;
    o.decode = mode;
    return o;
}

// Prompt then one token per step through a cache of exactly the tokens' length; logits of every position.
at::Tensor decodeAll(Transformer& runtime, KvCache& cache, const at::Tensor& tokens, int64_t promptLength) {
    std::vector<at::Tensor> steps = {runtime.forward(tokens.narrow(1, 0, promptLength), &cache)};
    for (int64_t t = promptLength; t < tokens.size(1); ++t) steps.push_back(runtime.forward(tokens.narrow(1, t, 1), &cache));
    return at::cat(steps, 1);
}

// RoPE as the usual formula: angle p * inverseFrequency[i] rotates pair i.
at::Tensor ropeByFormula(const at::Tensor& x, int64_t position, const at::Tensor& inverseFrequencies, RopeStyle style) {
    const int64_t half = x.size(-1) / 2;
    at::Tensor angles = inverseFrequencies.to(at::kDouble) * double(position);
    at::Tensor c = angles.cos().to(at::kFloat), s = angles.sin().to(at::kFloat);
    if (style == RopeStyle::AdjacentPairs) {
        at::Tensor a = x.index({at::indexing::Ellipsis, at::indexing::Slice(0, at::indexing::None, 2)});
        at::Tensor b = x.index({at::indexing::Ellipsis, at::indexing::Slice(1, at::indexing::None, 2)});
        return at::stack({a * c - b * s, a * s + b * c}, -1).reshape(x.sizes());
    }
    at::Tensor a = x.narrow(-1, 0, half), b = x.narrow(-1, half, half);
    return at::cat({a * c - b * s, b * c + a * s}, -1);
}

} // namespace

class TestDecodeFixedShape : public QObject {
    Q_OBJECT
private slots:
    void ropeTableMatchesFormula_data();
    void ropeTableMatchesFormula();
    void fixedShapeEqualsEager_data();
    void fixedShapeEqualsEager();
    void reusedCacheIgnoresStaleSlots();
    void fullCacheIsRefused();
    void graphModeWithoutGraphsDecodesEagerly();
};

void TestDecodeFixedShape::ropeTableMatchesFormula_data() {
    QTest::addColumn<bool>("adjacent");
    QTest::newRow("halves") << false;
    QTest::newRow("adjacent pairs") << true;
}

void TestDecodeFixedShape::ropeTableMatchesFormula() {
    QFETCH(bool, adjacent);
    const RopeStyle style = adjacent ? RopeStyle::AdjacentPairs : RopeStyle::Halves;
    at::manual_seed(3);
    const at::Tensor inverse = at::rand({8}) + 0.01;
    const at::Tensor table = ropeTable(inverse, 40, style);
    QCOMPARE(table.sizes().vec(), (std::vector<int64_t>{40, 2, 16}));
    const at::Tensor x = at::randn({3, 16});
    for (int64_t p : {0, 1, 17, 39}) {
        at::Tensor rotated = x * table[p][0] + swapRopePartners(x, style) * table[p][1];
        QVERIFY2(at::allclose(rotated, ropeByFormula(x, p, inverse, style), 1e-5, 1e-5), qPrintable(QString("position %1").arg(p)));
    }
}

void TestDecodeFixedShape::fixedShapeEqualsEager_data() {
    QTest::addColumn<bool>("adjacent");
    QTest::addColumn<bool>("bias");
    QTest::addColumn<int64_t>("batch");
    QTest::newRow("gqa, halves") << false << false << int64_t(1);
    QTest::newRow("gqa, adjacent pairs") << true << false << int64_t(1);
    QTest::newRow("gqa, q/k/v biases, batch 2") << false << true << int64_t(2);
}

void TestDecodeFixedShape::fixedShapeEqualsEager() {
    QFETCH(bool, adjacent);
    QFETCH(bool, bias);
    QFETCH(int64_t, batch);
    ArchSpec spec = tinyLlamaSpec();   // 4 query heads over 2 kv heads
    spec.attentionBias = bias;
    Fixture f(spec, adjacent ? RopeStyle::AdjacentPairs : RopeStyle::Halves);
    at::manual_seed(4);
    const at::Tensor tokens = at::randint(0, spec.vocab, {batch, 12}, at::kLong);

    Transformer fixed(*f.model, withDecode(DecodeMode::FixedShape)), eager(*f.model, withDecode(DecodeMode::Eager));
    auto fixedCache = fixed.makeCache(batch, 12), eagerCache = eager.makeCache(batch, 12);
    const at::Tensor fixedLogits = decodeAll(fixed, *fixedCache, tokens, 5);
    const at::Tensor eagerLogits = decodeAll(eager, *eagerCache, tokens, 5);
    const at::Tensor full = Transformer(*f.model).forward(tokens);
    QCOMPARE(fixedLogits.sizes().vec(), full.sizes().vec());
    QVERIFY(at::allclose(eagerLogits, full, 1e-4, 1e-4));
    QVERIFY2(at::allclose(fixedLogits, full, 1e-4, 1e-4),
             qPrintable(QString("max difference %1").arg((fixedLogits - full).abs().max().item<double>())));
    QVERIFY(at::equal(fixedLogits.argmax(-1), eagerLogits.argmax(-1)));
    QCOMPARE(fixedCache->length(), int64_t(12));
}

void TestDecodeFixedShape::reusedCacheIgnoresStaleSlots() {
    Fixture f(tinyLlamaSpec(), RopeStyle::Halves);
    at::manual_seed(5);
    const at::Tensor first = at::randint(0, 64, {1, 16}, at::kLong), second = at::randint(0, 64, {1, 9}, at::kLong);
    Transformer fixed(*f.model, withDecode(DecodeMode::FixedShape));
    auto cache = fixed.makeCache(1, 16);
    decodeAll(fixed, *cache, first, 3);   // fills every slot
    cache->reset();
    const at::Tensor again = decodeAll(fixed, *cache, second, 3);   // slots 9..15 still hold the first sequence
    QVERIFY(at::allclose(again, Transformer(*f.model).forward(second), 1e-4, 1e-4));
}

void TestDecodeFixedShape::fullCacheIsRefused() {
    Fixture f(tinyLlamaSpec(), RopeStyle::Halves);
    for (DecodeMode mode : {DecodeMode::FixedShape, DecodeMode::Eager}) {
        Transformer runtime(*f.model, withDecode(mode));
        auto cache = runtime.makeCache(1, 4);
        decodeAll(runtime, *cache, at::tensor(std::vector<int64_t>{1, 2, 3, 4}, at::kLong).unsqueeze(0), 2);
        QCOMPARE(cache->length(), int64_t(4));
        QVERIFY_THROWS_EXCEPTION(Error, runtime.forward(at::full({1, 1}, 5, at::kLong), cache.get()));
        QCOMPARE(cache->length(), int64_t(4));
    }
}

void TestDecodeFixedShape::graphModeWithoutGraphsDecodesEagerly() {
    // On the CPU a CUDA graph never applies: the default mode must decode exactly as Eager does.
    Fixture f(tinyLlamaSpec(), RopeStyle::Halves);
    const at::Tensor tokens = at::tensor(std::vector<int64_t>{5, 9, 1, 33, 7, 2}, at::kLong).unsqueeze(0);
    Transformer graphs(*f.model), eager(*f.model, withDecode(DecodeMode::Eager));
    QVERIFY(graphs.options().decode == DecodeMode::CudaGraph);
    auto graphCache = graphs.makeCache(1, 6), eagerCache = eager.makeCache(1, 6);
    QVERIFY(at::equal(decodeAll(graphs, *graphCache, tokens, 2), decodeAll(eager, *eagerCache, tokens, 2)));
    QCOMPARE(graphCache->graphReplays(), int64_t(0));
    QCOMPARE(QString::fromStdString(graphCache->graphFailure()), QString());
}

QTEST_APPLESS_MAIN(TestDecodeFixedShape)
#include "test_decode_fixed_shape.moc"
